"""The launch's outcome (launch.json): its exact accounting, checked before any step, and its run's summary
(tanplan.workflow.launch). JAX-free."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tanplan.outcomes.base import Result, optional
from tanplan.outcomes.privacy_spent import TuningRecord
from tanplan.outcomes.run_summary import RunSummary


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


@dataclass(frozen=True, kw_only=True)
class LaunchResult(Result):
    """`tanplan launch`: the run's summary and its accounting (None for a non-private run); with `--best` of
    a sweep that recorded its tuning data, the total ε on the private set (privacy_spent.totals) and
    `epsilon`, the guarantee for the private examples. launch.json is `record()`: every key but the note."""

    summary: RunSummary  # the launch's run (its summary.json)
    accounting: LaunchAccounting | None
    wall_seconds: float
    tuning_note: str | None = None  # with best=: where the sweep's proxies trained, and what that means
    tuning_data: str | None = optional()
    tuning: TuningRecord | None = optional(present_with="tuning_data")
    epsilon_total_rdp: float | None = optional(present_with="tuning_data")
    epsilon_total_pld: float | None = optional(present_with="tuning_data")
    epsilon_total_replace_one: float | None = optional(present_with="tuning_data")
    epsilon_total: float | None = optional(present_with="tuning_data")
    epsilon_total_accountant: str | None = optional(present_with="tuning_data")
    epsilon_total_note: str | None = optional(present_with="tuning_data")
    epsilon_total_runs: int | None = optional(present_with="tuning_data")
    guarantee: str | None = optional(present_with="tuning_data")
    epsilon: float | None = optional()  # the guarantee: the total with private tuning data, else the launch's

    def record(self) -> dict[str, Any]:
        """launch.json: the result without the API's note."""
        out = self.to_dict()
        del out["tuning_note"]
        return out
