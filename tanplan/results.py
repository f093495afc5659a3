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

from tanplan.outcomes.base import Result, plain as _plain, typed as _typed
# The planner's and optimize's results live in tanplan.outcomes (re-exported here until this module goes).
from tanplan.outcomes.optimize import Comparison, FrontierRow, LaunchOutcome, OptimizeResult  # noqa: F401
from tanplan.outcomes.planning import FrontierResult, PlanResult, Proxy, Throughput  # noqa: F401
from tanplan.privacy.frontier import Candidate as FrontierCandidate, Dropped  # noqa: F401

# ----------------------------------------------------------------------------------------------------
# One run: launch (tanplan.outcomes.launch), the whole run (tanplan.outcomes.pipeline), re-exported here
# until this module goes.

from tanplan.outcomes.launch import LaunchAccounting, LaunchResult  # noqa: E402,F401
from tanplan.outcomes.pipeline import RunResult  # noqa: E402,F401


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
