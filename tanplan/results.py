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

from tanplan.outcomes.base import Result, optional, plain as _plain, typed as _typed
# The planner's and optimize's results live in tanplan.outcomes (re-exported here until this module goes).
from tanplan.outcomes.optimize import Comparison, FrontierRow, LaunchOutcome, OptimizeResult  # noqa: F401
from tanplan.outcomes.planning import FrontierResult, PlanResult, Proxy, Throughput  # noqa: F401
from tanplan.privacy.frontier import Candidate as FrontierCandidate, Dropped  # noqa: F401

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
    from tanplan.outcomes.run_summary import RunSummary

    return RunSummary


@dataclass(frozen=True, kw_only=True)
class LaunchResult(Result):
    """`tanplan launch`: the run's summary (tanplan.outcomes.run_summary.RunSummary) and its accounting."""

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
# The stages: sweep, fit, run. Their JSON is wide and grows with the stages, so each result keeps it
# whole (`record`: to_dict() returns it unchanged) and types the figures a caller acts on.


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
class SweepResult(_Recorded):
    """`tanplan sweep` (best.json): the best proxy configuration found, and what its runs cost.

    best: {"trial", "params", "search_accuracy", "mean_accuracy", "std_accuracy", "reruns", ...} or None
    when no trial finished; privacy_spent: every trial's and re-run's releases composed (the cost to the
    tuning data: public by default, `tuning`)."""

    best: Mapping | None
    trials: Mapping
    privacy_spent: Mapping
    tuning: Mapping

    @property
    def best_params(self) -> Mapping | None:
        """The hyper-parameters of the best configuration (what `launch --best` trains)."""
        return self.best["params"] if self.best else None


@dataclass(frozen=True, kw_only=True)
class FitResult(_Recorded):
    """`tanplan fit`: the batch scaling law and its prediction for the target (predicted_accuracy,
    prediction_interval, law_holds, verdict), or with vary="steps"/"data" the members of the privacy-
    parameter search or the dataset-size study (members, best); privacy_spent: what its runs cost."""

    predicted_accuracy: float | None = None
    prediction_interval: tuple[float, ...] | None = None
    law_holds: bool | None = None
    verdict: str | None = None
    members: tuple[Mapping, ...] | None = None
    best: Mapping | None = None
    privacy_spent: Mapping | None = None
    tuning: Mapping | None = None


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
