"""What the planner returns (JAX-free): `tanplan plan` (PlanResult), `tanplan proxy` (Proxy) and the budget
frontier of `tanplan plan --compute` (FrontierResult, whose candidates are tanplan.privacy.frontier's).

    >>> from tanplan.privacy.plan import Plan
    >>> r = PlanResult(plan=Plan(50000, 256, 2000, 1.0, 2e-5), accountants=("rdp",), regime_text="...", advice=())
    >>> r.sigma, r.to_dict()["batch_size"], PlanResult.from_dict(r.to_dict()) == r
    (1.0, 256, True)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from tanplan.outcomes.base import Result, plan_of
from tanplan.privacy.frontier import Candidate, Dropped, Frontier
from tanplan.privacy.plan import Plan

# Fields holding privacy.frontier's types: they sit below outcomes/, so they are not Results and the generic
# from_dict would leave them as dicts.
_FRONTIER_TYPES = {"candidates": Candidate, "dropped": Dropped}


class ReadsFrontier(Result):
    """Result.from_dict, with the frontier's candidates and dropped points read back as their types."""

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]):
        return super().from_dict({k: tuple(_FRONTIER_TYPES[k].from_dict(x) for x in v) if k in _FRONTIER_TYPES
                                  else v for k, v in data.items()})


@dataclass(frozen=True, kw_only=True)
class PlanResult(Result):
    """`tanplan plan`: the Plan (σ given or calibrated), its exact ε, the regime and what to change."""

    plan: Plan
    accountants: tuple[str, ...]
    regime_text: str
    advice: tuple[str, ...]
    dataset_sizes: tuple[Plan, ...] | None = None  # the same (B, σ, S) at other N (TAN Table 5)
    figures: Mapping | None = None  # files written by out=
    epochs_asked: float | None = None  # E when the plan was given by epochs (S = ceil(E·N/B)); None: by steps

    @property
    def sigma(self) -> float:
        return self.plan.sigma

    def epsilon(self, accountant: str | None = None) -> float:
        return self.plan.epsilon(accountant)

    def to_dict(self) -> dict[str, Any]:
        out = self.plan.to_dict(self.accountants)
        out["epochs"] = self.plan.steps * self.plan.batch_size / self.plan.dataset_size  # passes, in expectation
        if self.epochs_asked is not None:
            out["epochs_asked"] = self.epochs_asked
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
        return cls(plan=plan_of(data), accountants=accountants, regime_text=data["regime_text"],
                   advice=tuple(data["advice"]), dataset_sizes=tuple(plan_of(p) for p in sizes) if sizes else None,
                   figures=data.get("figures"), epochs_asked=data.get("epochs_asked"))


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
class Throughput(Result):
    """How `--device-hours` became a compute budget: hours × 3600 × samples per second (given or measured)."""

    device_hours: float
    samples_per_second: float
    measured: bool
    model: str | None


@dataclass(frozen=True, kw_only=True)
class FrontierResult(ReadsFrontier, Frontier):
    """`tanplan plan --compute`: every (B, S, σ) with B·S ≤ C at the ε budget (tanplan.privacy.frontier),
    with the throughput that made C from device hours, and notes."""

    throughput: Throughput | None
    notes: tuple[str, ...]


__all__ = ["Candidate", "Dropped", "FrontierResult", "PlanResult", "Proxy", "ReadsFrontier", "Throughput"]
