"""What the Python API returns: frozen dataclasses, one per result, with `to_dict()` for JSON.

Each result's `to_dict()` is exactly the JSON the matching command prints with --json (and the file the
stage writes), so a notebook and a script read the same numbers; `from_dict` reads that JSON back.

    >>> from tanplan.privacy.plan import Plan
    >>> r = PlanResult(plan=Plan(50000, 256, 2000, 1.0, 2e-5), accountants=("rdp",), regime_text="...", advice=())
    >>> r.sigma, r.to_dict()["batch_size"], PlanResult.from_dict(r.to_dict()) == r
    (1.0, 256, True)

The conversion is generic (`Result`): a field typed with another Result, a tuple of them or a Plan is
converted both ways; a field whose metadata says `omit_none` is left out of the dict when it is None
(the JSON has no such key then). JAX-free: the planner's results come from a base install.
"""

from __future__ import annotations

import dataclasses
import typing
from dataclasses import dataclass, field
from typing import Any, Mapping

from tanplan.outcomes.base import Result, optional, plain as _plain, plan_of as _plan, typed as _typed
from tanplan.outcomes.fit import FitResult  # noqa: F401  (moved; re-exported until results.py goes)
from tanplan.outcomes.sweep import SweepResult  # noqa: F401  (moved; re-exported until results.py goes)
from tanplan.privacy.plan import Plan

# ----------------------------------------------------------------------------------------------------
# Planning: plan, proxy, the frontier (JAX-free)


@dataclass(frozen=True, kw_only=True)
class PlanResult(Result):
    """`tanplan plan`: the Plan (σ given or calibrated), its exact ε, the regime and what to change."""

    plan: Plan
    accountants: tuple[str, ...]
    regime_text: str
    advice: tuple[str, ...]
    dataset_sizes: tuple[Plan, ...] | None = None  # the same (B, σ, S) at other N (TAN Table 5)
    figures: Mapping | None = None  # files written by out=

    @property
    def sigma(self) -> float:
        return self.plan.sigma

    def epsilon(self, accountant: str | None = None) -> float:
        return self.plan.epsilon(accountant)

    def to_dict(self) -> dict[str, Any]:
        out = self.plan.to_dict(self.accountants)
        out["regime_text"], out["advice"] = self.regime_text, list(self.advice)
        if self.dataset_sizes is not None:
            out["dataset_sizes"] = [p.to_dict(self.accountants) for p in self.dataset_sizes]
        if self.figures is not None:
            out["figures"] = dict(self.figures)
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "PlanResult":
        record = data.get("accountant", "pld")  # reported first
        accountants = tuple(a for a in (record, *({"rdp", "pld"} - {record})) if data.get(f"eps_{a}") is not None)
        sizes = data.get("dataset_sizes")
        return cls(plan=_plan(data), accountants=accountants, regime_text=data["regime_text"],
                   advice=tuple(data["advice"]), dataset_sizes=tuple(_plan(p) for p in sizes) if sizes else None,
                   figures=data.get("figures"))


@dataclass(frozen=True, kw_only=True)
class Proxy(Result):
    """`tanplan proxy`: one constant-η_step proxy (B', σ·B'/B, S) of a target, and what it saves."""

    proxy_batch_size: int
    proxy_sigma: float
    steps: int
    eta_step: float
    savings: float
    proxy_regime: str
    dataset_size: int
    batch_size: int
    sigma: float
    delta: float
    target_epsilon: float  # under the accountant of record
    target_accountant: str
    target_eps_rdp: float
    note: str


@dataclass(frozen=True, kw_only=True)
class FrontierCandidate(Result):
    """One full-scale plan on the budget frontier (tanplan.privacy.frontier.Candidate)."""

    batch_size: int
    steps: int
    sigma: float
    epsilon: float  # under the accountant of record, the one σ was calibrated with
    accountant: str
    eps_rdp: float
    eta: float
    eta_step: float
    eps_tan: float
    q: float
    regime: str
    compute: int


@dataclass(frozen=True, kw_only=True)
class Dropped(Result):
    batch_size: int
    steps: int
    reason: str


@dataclass(frozen=True, kw_only=True)
class Throughput(Result):
    device_hours: float
    samples_per_second: float
    measured: bool
    model: str | None


@dataclass(frozen=True, kw_only=True)
class FrontierResult(Result):
    """`tanplan plan --compute`: every (B, S, σ) with B·S ≤ C at the ε budget."""

    dataset_size: int
    epsilon: float
    delta: float
    compute: int
    accountant: str
    candidates: tuple[FrontierCandidate, ...]
    dropped: tuple[Dropped, ...]
    throughput: Throughput | None
    notes: tuple[str, ...]


# ----------------------------------------------------------------------------------------------------
# One run: train, launch


@dataclass(frozen=True, kw_only=True)
class LaunchAccounting(Result):
    """The launch's exact ε, checked against the budget before any step (tanplan.workflow.launch)."""

    epsilon_rdp: float
    epsilon_pld: float
    epsilon_replace_one: float | None
    accountant: str
    neighbouring: str
    epsilon: float
    delta: float
    sigma: float
    snip_sigma: float | None
    q: float
    steps: int
    batch_size: int
    dataset_size: int


def _summary_type():
    from tanplan.engine.summary import RunSummary

    return RunSummary


@dataclass(frozen=True, kw_only=True)
class LaunchResult(Result):
    """`tanplan launch`: the run's summary (tanplan.engine.summary.RunSummary) and its accounting."""

    summary: Any  # RunSummary (engine/: imported on use, the planner's results stay JAX-free)
    accounting: LaunchAccounting | None
    wall_seconds: float
    tuning_note: str | None = None  # with best=: where the sweep's proxies trained, and what that means
    # with best= of a sweep that recorded its tuning data: the total ε on the private set (privacy_spent.totals)
    tuning_data: str | None = optional()
    tuning: Mapping | None = optional(present_with="tuning_data")
    epsilon_total_rdp: float | None = optional(present_with="tuning_data")
    epsilon_total_pld: float | None = optional(present_with="tuning_data")
    epsilon_total_replace_one: float | None = optional(present_with="tuning_data")
    epsilon_total: float | None = optional(present_with="tuning_data")
    epsilon_total_accountant: str | None = optional(present_with="tuning_data")
    epsilon_total_note: str | None = optional(present_with="tuning_data")
    epsilon_total_runs: int | None = optional(present_with="tuning_data")
    guarantee: str | None = optional(present_with="tuning_data")
    epsilon: float | None = optional()  # the guarantee: the total with private tuning data, else the launch's

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "LaunchResult":
        rest = {k: v for k, v in data.items() if k not in ("summary", "accounting")}
        return cls(summary=_summary_type().from_dict(data["summary"]),
                   accounting=LaunchAccounting.from_dict(data["accounting"]) if data["accounting"] else None, **rest)


# ----------------------------------------------------------------------------------------------------
# The budget frontier's search: optimize


@dataclass(frozen=True, kw_only=True)
class FrontierRow(FrontierCandidate):
    """A frontier candidate in `tanplan optimize`: its plan, rescaled hyper-parameters, proxy runs and prediction."""

    learning_rate: float
    ema_decay: float
    warmup_steps: int
    proxy_batch_size: int
    proxy_sigma: float
    simulated: bool
    diverged: str | None
    overrides: Mapping
    runs: tuple[float, ...]
    predicted_accuracy: float
    prediction_interval: tuple[float, ...]
    eligible: bool
    outside_law: bool
    mean_accuracy: float | None = optional()
    std_accuracy: float | None = optional()


@dataclass(frozen=True, kw_only=True)
class Comparison(Result):
    steps: int
    difference: float
    interval: tuple[float, ...]
    distinguishable: bool


@dataclass(frozen=True, kw_only=True)
class LaunchOutcome(Result):
    """The recommendation launched: its accuracy against the prediction."""

    steps: int
    batch_size: int
    actual_accuracy: float
    predicted_accuracy: float
    prediction_interval: tuple[float, ...]
    inside_interval: bool
    epsilon_rdp: float | None
    epsilon_pld: float | None
    sigma: float | None
    wall_seconds: float
    folder: str


@dataclass(frozen=True, kw_only=True)
class OptimizeResult(Result):
    """`tanplan optimize`: the simulated frontier, the law in ln S, the recommendation (and its launch)."""

    experiment: str
    dataset_size: int
    epsilon: float
    delta: float
    compute: int
    accountant: str
    reference_steps: int
    settings: Mapping
    frontier: tuple[FrontierRow, ...]
    dropped: tuple[Dropped, ...]
    points: tuple[Mapping, ...]
    source: str
    recommendation: FrontierRow
    runner_up: FrontierRow
    worst: FrontierRow
    comparisons: tuple[Comparison, ...]
    tied_with_recommendation: tuple[int, ...]
    distinguishable_from_runner_up: bool
    distinguishable_from_worst: bool
    verdict: str
    law: Mapping
    proxy_examples: int
    proxy_runs: int
    proxy_compute_fraction: float
    tuning: Mapping | None
    launch: LaunchOutcome | None
    wall_seconds: float
    simulation_seconds: float
    # with an output folder: what the proxies cost (privacy_spent) and the total ε on the private set
    privacy_spent: Mapping | None = optional()
    tuning_data: str | None = optional()
    epsilon_total_rdp: float | None = optional(present_with="tuning_data")
    epsilon_total_pld: float | None = optional(present_with="tuning_data")
    epsilon_total_replace_one: float | None = optional(present_with="tuning_data")
    epsilon_total: float | None = optional(present_with="tuning_data")  # the accountant of record (else RDP)
    epsilon_total_accountant: str | None = optional(present_with="tuning_data")
    epsilon_total_note: str | None = optional(present_with="tuning_data")
    epsilon_total_runs: int | None = optional(present_with="tuning_data")
    guarantee: str | None = optional(present_with="tuning_data")
    # with private tuning data: the bound on the total checked before any training (workflow.total_budget)
    epsilon_total_planned: float | None = optional()
    epsilon_total_planned_accountant: str | None = optional(present_with="epsilon_total_planned")
    epsilon_total_planned_runs: int | None = optional(present_with="epsilon_total_planned")
    epsilon_total_budget: float | None = optional(present_with="epsilon_total_planned")
    epsilon_total_planned_note: str | None = optional(present_with="epsilon_total_planned")


# ----------------------------------------------------------------------------------------------------
# The stages: run (sweep and fit: tanplan.outcomes.sweep, .fit). Its JSON is wide and grows with the
# stage, so the result keeps it whole (`record`: to_dict() returns it unchanged) and types the figures a
# caller acts on.


@dataclass(frozen=True, kw_only=True)
class _Recorded(Result):
    """A result whose to_dict() is `record`, the stage's JSON as written; the other fields are read from it."""

    record: Mapping = field(repr=False)

    def to_dict(self) -> dict[str, Any]:
        return _plain(dict(self.record))

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]):
        hints = typing.get_type_hints(cls)
        typed = {f.name: _typed(hints[f.name], data.get(f.name)) for f in dataclasses.fields(cls) if f.name != "record"}
        return cls(record=dict(data), **typed)


@dataclass(frozen=True, kw_only=True)
class RunResult(_Recorded):
    """`tanplan run` (its summary.json): whether the target was launched (or why not, and what to change),
    the proxies' prediction and its interval against the launch's accuracy, the launch's exact ε and the
    total ε on the private set (every release that touched it: the launch, and private-tuning proxies).

    The launch's own summary is in the run folder's launch/summary.json (tanplan.RunSummary)."""

    launched: bool
    stopped_at: str | None = None
    reason: str | None = None
    what_to_change: str | None = None
    predicted_accuracy: float | None = None
    prediction_interval: tuple[float, ...] | None = None
    actual_accuracy: float | None = None
    actual_inside_interval: bool | None = None
    law_holds: bool | None = None
    verdict: str | None = None
    epsilon: float | None = None  # the guarantee: the total on the private set when tuning was private, else the launch's
    epsilon_rdp: float | None = None  # the launch's (so are epsilon_pld, epsilon_replace_one)
    epsilon_pld: float | None = None
    epsilon_replace_one: float | None = None
    accountant: str | None = None
    delta: float | None = None
    sigma: float | None = None
    batch_size: int | None = None
    steps: int | None = None
    tuning_data: str | None = None
    epsilon_total: float | None = None  # every release on the private set composed
    epsilon_total_accountant: str | None = None
    guarantee: str | None = None
    proxy_compute_fraction: float | None = None
    wall_seconds: float | None = None
