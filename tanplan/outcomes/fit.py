"""What the batch law's stages return: the proxy runs, the law's prediction (fit.json), the privacy-parameter
and dataset-size studies, and the proxy ladder (ladder.json). JAX-free.

tanplan.laws.batch_law computes the prediction and records it as a `PredictionRecord`;
tanplan.workflow.fit and .ladder build the rest. Field names are the files' keys, in their order.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Mapping

from tanplan.outcomes.base import Result, optional
from tanplan.outcomes.privacy_spent import Spent, TuningRecord

_PREDICTED = "level"  # a prediction's keys are written together, with its level
_FITTED = "law_holds"  # so are the batch law's (fit.json), with its verdict


@dataclass(frozen=True, kw_only=True)
class ProxyRun(Result):
    """One proxy run of the batch law: its batch size, seed and what it measured (the engine's summary)."""

    batch_size: int
    seed: int
    test_accuracy: float
    sigma: float
    steps: int
    wall_seconds: float
    source: str | None = optional()  # "ladder" for the ladder's own runs


# ---------------------------------------------------------------------------------------------------
# The law and its prediction for one launch (tanplan.laws.batch_law.Prediction.record)


@dataclass(frozen=True, kw_only=True)
class FittedLaw(Result):
    """One form fitted on its window: coefficients, the knee form's k, its lack-of-fit p-value."""

    form: str
    window: tuple[int, ...]
    knee: int | None
    coef: tuple[float, ...]
    lack_of_fit_p: float | None


@dataclass(frozen=True, kw_only=True)
class LaunchSpread(Result):
    """The seeds' variance against B': v0 + v1/B' over dof degrees of freedom."""

    v0: float
    v1: float
    dof: int


@dataclass(frozen=True, kw_only=True)
class IntervalParts(Result):
    """The interval's parts (variances, or their standard deviations): three always, and the test sets' offset
    where the proxies and the launch are evaluated on different test sets."""

    mean: float
    launch: float
    misspecification: float
    test_sets: float | None = optional()

    def in_points(self) -> "IntervalParts":
        """The same standard deviations in accuracy points (× 100)."""
        return IntervalParts(mean=100 * self.mean, launch=100 * self.launch,
                             misspecification=100 * self.misspecification,
                             test_sets=100 * self.test_sets if self.test_sets else None)


@dataclass(frozen=True, kw_only=True)
class DataSizeRecord(Result):
    """The data-size term of a prediction from proxies on a smaller public set (tanplan.laws.data_size): the top
    rung's accuracies at N_pub and at N_pub/2, one halving's effect carried over log2(N/N_pub) doublings."""

    public_size: int
    private_size: int
    half_size: int
    batch_size: int
    public_accuracies: tuple[float, ...]
    half_accuracies: tuple[float, ...]
    doublings: float
    per_halving: float
    shift: float  # added to the law's mean
    std: float  # in the interval: the two means' seed noise and the log-linear law's stated misspecification


@dataclass(frozen=True, kw_only=True)
class HeldOutErrors(Result):
    batch_sizes: tuple[int, ...]
    errors: tuple[float, ...]
    excess: float


@dataclass(frozen=True, kw_only=True)
class ComparedForm(Result):
    """One candidate form of the law (batch_law.LawCandidate) as the prediction compared it."""

    form: str
    window: tuple[int, ...]
    knee: int | None
    lack_of_fit_p: float | None
    held_out: Mapping[Any, float]  # held-out batch size -> error
    held_out_excess: float
    var_mean: float
    mean: float | None = optional()  # its prediction at the target
    weight: float | None = optional()  # its weight in the averaged prediction (law "auto")
    score: float | None = optional()  # its out-of-sample log score (the top rungs, each from those below)


@dataclass(frozen=True, kw_only=True)
class PredictionRecord(Result):
    """The law's prediction for one launch at the target, with its interval and parts. Every field is
    present when `level` is (a FitResult of --vary steps or data has none)."""

    predicted_accuracy: float | None = optional(present_with=_PREDICTED)  # None in fit.json when not in [0, 1]
    prediction_interval: tuple[float, ...] | None = optional(present_with=_PREDICTED)
    level: float | None = optional()
    half_width: float | None = optional(present_with=_PREDICTED)
    quantile: float | None = optional(present_with=_PREDICTED)
    form: str | None = optional(present_with=_PREDICTED)
    window: tuple[int, ...] | None = optional(present_with=_PREDICTED)
    law: FittedLaw | None = optional(present_with=_PREDICTED)
    spread: LaunchSpread | None = optional(present_with=_PREDICTED)
    parts: IntervalParts | None = optional(present_with=_PREDICTED)
    std_parts: IntervalParts | None = optional(present_with=_PREDICTED)
    test_sets_std: float | None = optional(present_with=_PREDICTED)
    held_out: HeldOutErrors | None = optional(present_with=_PREDICTED)
    candidates: tuple[ComparedForm, ...] | None = optional(present_with=_PREDICTED)
    target_batch_size: int | None = optional(present_with=_PREDICTED)
    # the stated misspecification std where no rung was held out (batch_law.UNMEASURED_MISSPECIFICATION_STD)
    misspecification_stated: float | None = optional()
    # the interval's degrees of freedom, and one launch's one-sided lower bound from the same predictive
    # distribution: mean − t(lower_bound_level, dof)·√variance ("at least this with 95% probability")
    dof: float | None = optional()
    lower_bound: float | None = optional()
    lower_bound_level: float | None = optional(present_with="lower_bound")
    # fit.spread_ratio when set (the launch part is its square × the seeds' variance); absent: off
    spread_ratio: float | None = optional()
    # proxies on a public set smaller than the private one: the measured data-size term, in the mean and the
    # interval (tanplan.laws.data_size); absent where N_pub ≥ N
    data_size: DataSizeRecord | None = optional()


# ---------------------------------------------------------------------------------------------------
# `tanplan fit`: the batch law (fit.json), or the members of --vary steps / data


@dataclass(frozen=True, kw_only=True)
class StepsMember(Result):
    """A member of the privacy-parameter search: (B/k, S·k²) at constant η and σ, simulated at proxy scale."""

    k: float
    batch_size: int
    steps: int
    sigma: float
    eta: float
    learning_rate: float
    proxy_batch_size: int
    mean_accuracy: float
    std_accuracy: float
    eps_rdp: float


@dataclass(frozen=True, kw_only=True)
class DataMember(Result):
    """A member of the dataset-size study: N' = k·N at fixed (B, σ, S), δ = 1/N'."""

    k: float
    dataset_size: int
    batch_size: int
    steps: int
    sigma: float
    delta: float
    q: float
    eta: float
    eps_tan: float
    eps_rdp: float
    proxy_batch_size: int
    mean_accuracy: float
    std_accuracy: float


@dataclass(frozen=True, kw_only=True)
class LadderSummary(Result):
    """What `tanplan fit` with batch_sizes "auto" tells of its ladder (the whole of it: ladder/ladder.json)."""

    found: bool
    reason: str
    what_to_change: str | None
    spent_fraction: float
    window: tuple[int, ...]


@dataclass(frozen=True, kw_only=True)
class FitResult(PredictionRecord):
    """`tanplan fit`: the batch law and its prediction for the target (predicted_accuracy,
    prediction_interval, law_holds, verdict: fit.json), or with vary="steps"/"data" the members of the
    privacy-parameter search or the dataset-size study (members, best); privacy_spent: what its runs cost."""

    law_setting: str | None = optional(present_with=_FITTED)
    model: str | None = optional(present_with=_FITTED)
    law_at_target: float | None = optional(present_with=_FITTED)
    law_holds: bool | None = optional()
    verdict: str | None = optional(present_with=_FITTED)
    what_to_change: str | None = optional(present_with=_FITTED)
    points: tuple[ProxyRun, ...] | None = optional(present_with=_FITTED)
    batch_sizes: tuple[int, ...] | None = optional(present_with=_FITTED)
    proxy_examples: int | None = optional(present_with=_FITTED)
    wall_seconds: float | None = optional(present_with=_FITTED)
    members: tuple[StepsMember, ...] | tuple[DataMember, ...] | None = optional()
    best: StepsMember | None = optional()
    ladder: LadderSummary | None = optional()  # batch_sizes "auto"
    # what the fit's runs cost (workflow.privacy_spent) and on which data (workflow.tuning)
    privacy_spent: Spent | None = optional()
    tuning: TuningRecord | None = optional()
    # with private tuning data: the bound on the total checked before any run (workflow.total_budget)
    epsilon_total_planned: float | None = optional()
    epsilon_total_planned_accountant: str | None = optional(present_with="epsilon_total_planned")
    epsilon_total_planned_runs: int | None = optional(present_with="epsilon_total_planned")
    epsilon_total_budget: float | None = optional(present_with="epsilon_total_planned")
    epsilon_total_planned_note: str | None = optional(present_with="epsilon_total_planned")

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "FitResult":
        result = super().from_dict(data)
        members = result.members or ()
        if members and isinstance(members[0], Mapping):  # the two member types: data has a dataset size
            kind = DataMember if "dataset_size" in members[0] else StepsMember
            result = dataclasses.replace(result, members=tuple(kind.from_dict(m) for m in members))
        return result


# ---------------------------------------------------------------------------------------------------
# The proxy ladder (ladder.json)


@dataclass(frozen=True, kw_only=True)
class LadderStep(Result):
    """The ladder's next runs: `seeds` more seeds at `batch_size`, and why."""

    batch_size: int
    seeds: int
    why: str


@dataclass(frozen=True, kw_only=True)
class LadderRung(Result):
    batch_size: int
    accuracies: tuple[float, ...]
    mean: float
    std: float
    seeds: int
    sigma: float | None  # σ' of its runs


@dataclass(frozen=True, kw_only=True)
class LadderProgress(Result):
    """ladder.json while the ladder climbs: the runs so far and what they depend on (reused by a rerun)."""

    basis: Mapping[str, Any]
    points: tuple[ProxyRun, ...]
    partial: bool = True

    @classmethod
    def within(cls, data: Mapping[str, Any]) -> "LadderProgress":
        """The runs of a ladder.json, partial or final (a final one has more keys)."""
        return cls.from_dict({k: data[k] for k in ("basis", "points") if k in data})


@dataclass(frozen=True, kw_only=True)
class LadderResult(Result):
    """The ladder where its rule stopped (ladder.json): rungs, steps, the prediction and its budget."""

    found: bool
    reason: str
    what_to_change: str | None
    rungs: tuple[LadderRung, ...]
    steps: tuple[LadderStep, ...]
    prediction: PredictionRecord | None
    window: tuple[int, ...]
    target_batch_size: int
    steps_per_run: int
    start: int
    seeds: int
    law_share: float
    law_setting: str
    budget_per_step: float
    budget_fraction: float
    max_proxy_fraction: float
    min_proxy_budget: float
    spent_fraction: float
    test_sizes: tuple[int | None, ...]
    points: tuple[ProxyRun, ...]
    basis: Mapping[str, Any]
    wall_seconds: float


__all__ = ["ProxyRun", "FittedLaw", "LaunchSpread", "IntervalParts", "HeldOutErrors", "ComparedForm",
           "PredictionRecord", "StepsMember", "DataMember", "LadderSummary", "FitResult", "LadderStep",
           "LadderRung", "LadderProgress", "LadderResult"]
