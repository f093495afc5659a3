"""What a proxy sweep returns: best.json as a typed value (tanplan.workflow.sweep.results writes it).

The best configuration and the ranking are `RankedConfig`s (trial, params, overrides, search / mean / std
accuracy, re-runs, flags); the trial counts, wall seconds and files are typed too. The proxy and the
target are `SweepScale`s: a Plan's figures (Plan.to_dict) for a private sweep, (B, S, private=false)
otherwise. Field names are best.json's keys, in its order. JAX-free.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from tanplan.outcomes.base import Result, optional
from tanplan.outcomes.privacy_spent import Spent, TuningRecord

_PLAN = "sigma"  # a private scale has a Plan's figures, all present together (some may be None)


@dataclass(frozen=True, kw_only=True)
class SweepScale(Result):
    """The target's or the proxy's (B, S): Plan.to_dict() when private, else {batch_size, steps, private}."""

    dataset_size: int | None = optional(present_with=_PLAN)
    batch_size: int
    steps: int
    sigma: float | None = optional()
    delta: float | None = optional(present_with=_PLAN)
    q: float | None = optional(present_with=_PLAN)
    eta: float | None = optional(present_with=_PLAN)
    eta_step: float | None = optional(present_with=_PLAN)
    tan: float | None = optional(present_with=_PLAN)
    eps_tan: float | None = optional(present_with=_PLAN)
    eps_rdp: float | None = optional(present_with=_PLAN)
    eps_pld: float | None = optional(present_with=_PLAN)
    eps_replace_one: float | None = optional(present_with=_PLAN)
    target_epsilon: float | None = optional(present_with=_PLAN)
    accountant: str | None = optional(present_with=_PLAN)
    neighbouring: str | None = optional(present_with=_PLAN)
    regime: str | None = optional(present_with=_PLAN)
    private: bool | None = optional()


@dataclass(frozen=True, kw_only=True)
class RankedConfig(Result):
    """One of the top-k configurations: its search trial and its re-runs over fresh seeds."""

    trial: int
    params: Mapping[str, Any]  # searched name -> value
    overrides: Mapping[str, Any]  # config key -> value (what `--best` trains)
    search_accuracy: float
    seed: int | None
    mean_accuracy: float | None  # over the finished re-runs; None when none re-ran
    std_accuracy: float | None
    accuracies: tuple[float, ...]
    min_accuracy: float | None
    max_accuracy: float | None
    reruns: int
    failed_reruns: int
    flags: tuple[str, ...]  # why it is ranked last: diverged or failed re-runs, seeds that scatter


@dataclass(frozen=True, kw_only=True)
class TrialCounts(Result):
    requested: int
    finished: int
    pruned: int
    diverged: int
    error: int
    interrupted: int

    def count(self, status: str) -> int:
        """The trials that ended in `status` (tanplan.workflow.sweep.study's states)."""
        return getattr(self, status)


@dataclass(frozen=True, kw_only=True)
class SweepSeconds(Result):
    search: float | None
    reruns: float | None


@dataclass(frozen=True, kw_only=True)
class SweepFiles(Result):
    trials: str
    reruns: str
    study: str
    accuracy_figure: str | None = optional()
    importance_figure: str | None = optional()
    prune_drop_figure: str | None = optional()


@dataclass(frozen=True, kw_only=True)
class SweepResult(Result):
    """`tanplan sweep` (best.json): the best proxy configuration found, and what its runs cost.

    best: None when no trial finished; privacy_spent: every trial's and re-run's releases composed (the
    cost to the tuning data: public by default, `tuning`); both added by the sweep's stage (api.sweep)."""

    best: RankedConfig | None
    ranked_by: str
    ranking: tuple[RankedConfig, ...]
    target: SweepScale
    proxy: SweepScale
    compute_ratio: float
    space: tuple[Mapping[str, Any], ...]  # Dimension.to_dict() of each searched key
    trials: TrialCounts
    wall_seconds: SweepSeconds
    files: SweepFiles
    privacy_spent: Spent | None = optional()  # tanplan.workflow.privacy_spent.report
    tuning: TuningRecord | None = optional()  # tanplan.workflow.tuning.Tuning.record
    trials_dir: str | None = optional()  # `launch --best` composes these ledgers with the launch's

    @property
    def best_params(self) -> Mapping | None:
        """The hyper-parameters of the best configuration (what `launch --best` trains)."""
        return self.best.params if self.best else None


__all__ = ["SweepScale", "RankedConfig", "TrialCounts", "SweepSeconds", "SweepFiles", "SweepResult"]
