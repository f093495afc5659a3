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

# Every result lives in tanplan.outcomes; they are re-exported here until this module goes.
from tanplan.outcomes.audit import AuditResult  # noqa: F401
from tanplan.outcomes.base import Result, optional  # noqa: F401
from tanplan.outcomes.fit import FitResult  # noqa: F401
from tanplan.outcomes.launch import LaunchAccounting, LaunchResult  # noqa: F401
from tanplan.outcomes.optimize import Comparison, FrontierRow, LaunchOutcome, OptimizeResult  # noqa: F401
from tanplan.outcomes.pipeline import RunResult  # noqa: F401
from tanplan.outcomes.planning import FrontierResult, PlanResult, Proxy, Throughput  # noqa: F401
from tanplan.outcomes.sweep import SweepResult  # noqa: F401
from tanplan.privacy.frontier import Candidate as FrontierCandidate, Dropped  # noqa: F401
