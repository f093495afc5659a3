"""What `tanplan optimize` returns (tanplan.workflow.optimize): the simulated frontier, the law of accuracy
in ln S, the recommendation with its interval, and the launch of it. OptimizeResult.to_dict() is
optimize.json and the command's --json. JAX-free."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from tanplan.outcomes.base import Result, optional
from tanplan.outcomes.planning import ReadsFrontier
from tanplan.outcomes.privacy_spent import Spent, TuningRecord
from tanplan.privacy.frontier import Candidate, Dropped


@dataclass(frozen=True, kw_only=True)
class Settings(Result):
    """The [optimize] values the stage ran with."""

    candidates: int
    seeds: int
    extend: int
    savings: float
    min_proxy_batch_size: int
    steps_factor: float
    rescale: bool
    law: str
    level: float


@dataclass(frozen=True, kw_only=True)
class FrontierRow(Result, Candidate):
    """A frontier candidate in `tanplan optimize`: its plan, rescaled hyper-parameters, proxy runs and prediction."""

    learning_rate: float
    ema_decay: float
    warmup_steps: int
    proxy_batch_size: int
    proxy_sigma: float
    simulated: bool
    diverged: str | None
    overrides: Mapping  # the dotted config overrides of its full-scale run
    runs: tuple[float, ...]  # its proxies' test accuracies
    mean_accuracy: float | None = optional()  # with runs
    std_accuracy: float | None = optional()
    predicted_accuracy: float
    prediction_interval: tuple[float, ...]
    eligible: bool
    outside_law: bool


@dataclass(frozen=True, kw_only=True)
class LawRange(Result):
    """The simulated S the law was fitted on (tanplan.laws.frontier_law.widest_fit) and its tests' p-values
    over every simulated S."""

    low: int
    high: int
    excluded: tuple[int, ...]  # simulated S left out of the law
    passes: bool
    lack_of_fit_p: float | None
    equal_variance_p: float | None


@dataclass(frozen=True, kw_only=True)
class LawFit(Result):
    """The law of accuracy in ln S (tanplan.laws.frontier_law.FrontierLaw) as fitted, at `level`."""

    model: str
    coef: tuple[float, ...]
    residual_std: float
    n: int
    dof: int
    x_mean: float
    r2: float
    lack_of_fit_p: float | None
    level: float
    top_interval: tuple[float, ...]
    range: LawRange


@dataclass(frozen=True, kw_only=True)
class Comparison(Result):
    """The recommendation against another eligible candidate: E acc(best) − E acc(other) with its interval."""

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
class OptimizeResult(ReadsFrontier):
    """`tanplan optimize`: the simulated frontier, the law in ln S, the recommendation (and its launch)."""

    experiment: str
    dataset_size: int
    epsilon: float
    delta: float
    compute: int
    accountant: str
    reference_steps: int
    settings: Settings
    frontier: tuple[FrontierRow, ...]
    dropped: tuple[Dropped, ...]
    points: tuple[Mapping, ...]  # one per proxy run: tanplan.workflow.proxy_runs.train_points' row and its candidate
    source: str
    # the recommendation, runner-up and worst among the eligible candidates, and what the data tells apart
    recommendation: FrontierRow
    runner_up: FrontierRow
    worst: FrontierRow
    comparisons: tuple[Comparison, ...]
    tied_with_recommendation: tuple[int, ...]
    distinguishable_from_runner_up: bool
    distinguishable_from_worst: bool
    verdict: str
    law: LawFit
    proxy_examples: int
    proxy_runs: int
    proxy_compute_fraction: float
    tuning: TuningRecord | None
    # with private tuning data: the bound on the total checked before any training (workflow.total_budget)
    epsilon_total_planned: float | None = optional()
    epsilon_total_planned_accountant: str | None = optional(present_with="epsilon_total_planned")
    epsilon_total_planned_runs: int | None = optional(present_with="epsilon_total_planned")
    epsilon_total_budget: float | None = optional(present_with="epsilon_total_planned")
    epsilon_total_planned_note: str | None = optional(present_with="epsilon_total_planned")
    launch: LaunchOutcome | None
    wall_seconds: float
    simulation_seconds: float
    # with an output folder: what the proxies cost (privacy_spent) and the total ε on the private set
    privacy_spent: Spent | None = optional()
    tuning_data: str | None = optional()
    epsilon_total_rdp: float | None = optional(present_with="tuning_data")
    epsilon_total_pld: float | None = optional(present_with="tuning_data")
    epsilon_total_replace_one: float | None = optional(present_with="tuning_data")
    epsilon_total: float | None = optional(present_with="tuning_data")  # the accountant of record (else RDP)
    epsilon_total_accountant: str | None = optional(present_with="tuning_data")
    epsilon_total_note: str | None = optional(present_with="tuning_data")
    epsilon_total_runs: int | None = optional(present_with="tuning_data")
    guarantee: str | None = optional(present_with="tuning_data")


__all__ = ["Comparison", "FrontierRow", "LaunchOutcome", "LawFit", "LawRange", "OptimizeResult", "Settings"]
