"""`tanplan run`'s outcome: its summary.json, every key a field (tanplan.workflow.pipeline). JAX-free.

The run launched (or why not, and what to change), the proxies' prediction and its interval against the
launch's accuracy, the launch's exact ε, the total ε on the private set (every release that touched it),
the bound on it checked before training, and the proxies' compute. The launch's own summary is in the run
folder's launch/summary.json (tanplan.RunSummary).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from tanplan.outcomes.base import Result, optional
from tanplan.outcomes.fit import DataSizeRecord, IntervalParts
from tanplan.outcomes.privacy_spent import TuningRecord


@dataclass(frozen=True, kw_only=True)
class PlannedStage(Result):
    """One stage's compute before it runs: its runs, their example-gradients (Σ B'·S), that as a fraction of
    the target's B·S, and whether the figure is exact or a bound (the ladder stops within its budget)."""

    stage: str
    runs: int | None  # None: the ladder decides its runs as it goes
    example_gradients: int
    fraction: float
    bound: str  # "exactly" | "at most"
    wall_seconds: float | None = optional()  # at the throughput of PlannedCompute.wall_source


@dataclass(frozen=True, kw_only=True)
class PlannedCompute(Result):
    """Every stage's planned compute (`tanplan run --dry-run`, and the first lines of run, fit, sweep)."""

    target_example_gradients: int  # B·S
    stages: tuple[PlannedStage, ...]
    proxy_fraction: float  # every stage but the launch, at most
    seconds_per_example: float | None = optional()  # the throughput the wall times use
    wall_source: str | None = optional()  # where it was measured (tanplan.workflow.pipeline.throughput)
    wall_lower_bound: bool | None = optional()  # True: a probe's throughput, the wall times are at least these
    # `tanplan run`: the proxies (sweep + ladder, at most) would cost more than the launch: by how much, and the
    # cheaper path (tanplan.workflow.pipeline.costs.over_budget)
    over_budget: str | None = optional()


@dataclass(frozen=True, kw_only=True)
class RunRecord(Result):
    """What a `tanplan run` in a folder was asked (run.json): its config and the options that shape its
    stages; `--resume` must ask the same."""

    config: Mapping
    options: Mapping


@dataclass(frozen=True, kw_only=True)
class ProxyCompute(Result):
    """Examples the proxy runs processed, each stage's as a fraction of the target's B·S (a run: B'·S)."""

    sweep: float
    ladder: float
    fit: float
    total: float
    runs: int

    @classmethod
    def of(cls, target_examples: int, sweep_runs, law_runs, *, ladder: bool) -> "ProxyCompute":
        """sweep_runs, law_runs: the (B', S) of every run of the sweep and of the ladder (ladder=True) or fit."""
        sweep = sum(b * s for b, s in sweep_runs) / target_examples
        law = sum(b * s for b, s in law_runs) / target_examples
        fractions = (law, 0.0) if ladder else (0.0, law)
        return cls(sweep=sweep, ladder=fractions[0], fit=fractions[1], total=sweep + law,
                   runs=len(sweep_runs) + len(law_runs))


@dataclass(frozen=True, kw_only=True)
class LadderStatus(Result):
    """What summary.json says of the ladder: whether it found the law, why it stopped, its budget and rungs."""

    found: bool
    reason: str
    spent_fraction: float
    budget_fraction: float
    seeds: int
    window: tuple[int, ...]
    law_share: float
    rungs: Mapping  # B' -> its seeds


@dataclass(frozen=True, kw_only=True)
class SweepChoice(Result):
    """The sweep's chosen configuration and its seed spread (its best.json)."""

    overrides: Mapping | None
    mean_accuracy: float | None
    std_accuracy: float | None
    reruns: Any
    search_accuracy: float | None
    flags: Any


@dataclass(frozen=True, kw_only=True)
class RunResult(Result):
    """`tanplan run` (summary.json). `epsilon` is the guarantee for the private examples: the total on the
    private set when the proxies trained on it, else the launch's (`launch_epsilon`, with epsilon_rdp,
    epsilon_pld and epsilon_replace_one the launch's own). `sweep_choice` is written once launched;
    `baselines` with --baselines; the epsilon_total_planned keys for a private config."""

    launched: bool
    launched_anyway: bool
    stopped_at: str | None
    reason: str | None
    what_to_change: str | None
    predicted_accuracy: float | None
    prediction_interval: Any
    # what the user reads beside the interval (batch_law.Prediction): one launch reaches at least
    # lower_bound with probability lower_bound_level (the interval's t, one-sided), and the interval's
    # parts as standard deviations in accuracy points with its half-width in points
    lower_bound: float | None = optional()
    lower_bound_level: float | None = optional(present_with="lower_bound")
    interval_parts_points: IntervalParts | None = optional(present_with="lower_bound")
    half_width_points: float | None = optional(present_with="lower_bound")
    # proxies on a public set smaller than the private one: the data-size term in the prediction
    # (tanplan.laws.data_size; absent where N_pub ≥ N)
    data_size: DataSizeRecord | None = optional()
    actual_accuracy: float | None
    abs_error: float | None
    actual_inside_interval: bool | None
    epsilon_rdp: float | None
    epsilon_pld: float | None
    epsilon_replace_one: float | None
    epsilon: float | None
    accountant: str
    neighbouring: str
    delta: float
    sigma: float
    batch_size: int
    steps: int
    proxy_compute: ProxyCompute
    proxy_compute_fraction: float
    proxy_runs: int
    best_overrides: Mapping
    ladder: LadderStatus | None
    law_holds: bool | None
    verdict: str | None
    model: str | None
    interval_parts: IntervalParts | None
    launch_wall_seconds: float | None
    sweep_choice: SweepChoice | None = None  # in the JSON once launched
    launch_epsilon: float | None
    tuning_data: str
    tuning: TuningRecord
    epsilon_total_rdp: float | None
    epsilon_total_pld: float | None
    epsilon_total_replace_one: float | None
    epsilon_total: float | None
    epsilon_total_accountant: str
    epsilon_total_note: str | None
    epsilon_total_runs: int
    guarantee: str
    epsilon_total_planned: float | None = optional()
    epsilon_total_planned_accountant: str | None = optional(present_with="epsilon_total_planned")
    epsilon_total_planned_runs: int | None = optional(present_with="epsilon_total_planned")
    epsilon_total_budget: float | None = optional(present_with="epsilon_total_planned")
    epsilon_total_planned_note: str | None = optional(present_with="epsilon_total_planned")
    baselines: tuple[Mapping, ...] | None = optional()
    wall_seconds: float

    def to_dict(self) -> dict[str, Any]:
        out = super().to_dict()
        if not self.launched:  # a run stopped before its launch reports no choice
            del out["sweep_choice"]
        return out
