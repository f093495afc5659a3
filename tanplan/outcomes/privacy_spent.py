"""What runs spent on the data they trained on (privacy_spent.json), the total on the private set, and the
bound on that total checked before any training (tanplan.workflow.privacy_spent, .total_budget).

Each field is a key of the JSON the stages write, in its order: `Spent` is privacy_spent.json, `Totals`
and `PlannedTotal` are the keys a workflow's own JSON (summary.json, launch.json, optimize.json) carries
at its top level. JAX-free.
"""

from __future__ import annotations

from dataclasses import dataclass

from tanplan.outcomes.base import Result, optional


@dataclass(frozen=True, kw_only=True)
class TuningRecord(Result):
    """Where the proxies learned (tanplan.workflow.tuning.Tuning.record): public data or the private set."""

    tuning_data: str  # "public" | "private"
    source: str  # in words
    private_size: int | None = None  # N (None: a record that does not say, e.g. recomputed from a sweep's runs)
    tuning_size: int | None = None  # N_pub, or N when private
    sizes_differ: bool | None = None


@dataclass(frozen=True, kw_only=True)
class Spent(Result):
    """Every release of some runs' ledgers composed at their δ (privacy_spent.spent; ε None: a non-private run,
    0: nothing released). `epsilon` is the tightest figure that could run, by `accountant`; `note` says why
    PLD did not. privacy_spent.json adds what the runs are (`what`) and, for a stage, its tuning record."""

    runs: int
    delta: float | None
    epsilon_rdp: float | None
    epsilon_pld: float | None
    epsilon_replace_one: float | None
    epsilon: float | None
    accountant: str
    note: str | None
    what: str | None = optional()
    tuning: TuningRecord | None = optional()


@dataclass(frozen=True, kw_only=True)
class Totals(Result):
    """The total ε of every release that touched the private training set (privacy_spent.totals), and which
    ε is the guarantee for the private examples."""

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


@dataclass(frozen=True, kw_only=True)
class PlannedTotal(Result):
    """The bound on the total ε a workflow will release on the private set, checked against
    privacy.total_epsilon before anything trains (total_budget.check)."""

    epsilon_total_planned: float
    epsilon_total_planned_accountant: str
    epsilon_total_planned_runs: int
    epsilon_total_budget: float
    epsilon_total_planned_note: str | None

