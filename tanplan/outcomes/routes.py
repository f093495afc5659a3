"""`tanplan run --routes`'s outcome: routes.json, every key a field (tanplan.workflow.pipeline.routes). JAX-free.

Each route's prediction at the user's ε, B and S (its interval, its law's verdict), what its launch and its
proxies cost, its ε of record (checked against privacy.total_epsilon before anything trained), the
recommendation and, with --launch-best-route, the launched route's accuracy.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from tanplan.outcomes.base import Result, optional


@dataclass(frozen=True, kw_only=True)
class RoutePrediction(Result):
    """One route: its prediction for one launch, and what the launch and the prediction cost."""

    route: str  # scratch | finetune | adapters | heads
    method: str  # "DP-SGD" or "DP-LS head"
    overrides: Mapping  # the [init] keys the route changed in the user's config
    predicted_accuracy: float | None
    prediction_interval: Any  # [low, high] at fit.level, or None
    law_holds: bool  # False: not recommended (verdict says why)
    verdict: str | None
    launch_compute: int  # B·S example-gradients (DP-SGD), or example-forward passes (heads)
    launch_unit: str
    proxy_compute: int  # what its prediction processed: the proxies' Σ B'·S, or the public rows encoded
    proxy_unit: str
    epsilon_of_record: float  # the launch's ε composed with its init's: the figure checked before training
    epsilon_accountant: str
    folder: str  # where its prediction's files are, relative to the comparison's folder
    standing: str = ""  # recommended | overlaps the recommended route's interval | below it | law does not hold
    note: str | None = optional()


@dataclass(frozen=True, kw_only=True)
class RoutesResult(Result):
    """Every route's prediction, the recommendation and, when launched, the winner's actual accuracy."""

    routes: tuple[RoutePrediction, ...]
    recommended: str | None  # the highest predicted mean among the routes whose law holds; None: none holds
    recommendation: str  # why, in words (ties, overlapping intervals)
    launched: str | None  # the route launched (--launch-best-route), else None
    actual_accuracy: float | None
    actual_inside_interval: bool | None
    epsilon: float | None  # the launched route's guarantee (its ε of record)
    delta: float
    accountant: str
    epsilon_total_budget: float
    level: float  # the intervals' level
    wall_seconds: float
