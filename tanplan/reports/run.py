"""The report of `tanplan run` (report.md), from the summaries its stages computed."""

from __future__ import annotations

import re
from pathlib import Path

from tanplan.privacy import tan
from tanplan.reports.fit import fit_markdown


def run_report(name: str, plan, fit_result: dict, summary: dict, out: Path) -> str:
    """report.md of `tanplan run`: the plan, the sweep (its sweep/sweep.md embedded), the law and the launch."""

    sweep_md = (out / "sweep" / "sweep.md").read_text() if (out / "sweep" / "sweep.md").is_file() else ""
    # Embedded one level up: drop its own title, point its figures into sweep/.
    sweep_md = re.sub(r"^#+ .*\n", "", sweep_md.lstrip()).replace("](sweep_", "](sweep/sweep_")
    low, high = summary["prediction_interval"]
    return f"""# tanplan run: {name}

## Plan
| N | B | S | σ | δ | η | ε_TAN (heuristic) | exact ε (RDP) | exact ε (PLD) | regime |
|---|---|---|---|---|---|---|---|---|---|
| {plan.dataset_size} | {plan.batch_size} | {plan.steps} | {plan.sigma:.4g} | {plan.delta:.3g} | {plan.eta:.4g} | {plan.eps_tan:.4g} | {summary['epsilon_rdp']:.4g} | {summary['epsilon_pld']:.4g} | {plan.regime.value} |

{tan.REGIME_TEXT[plan.regime]}. Full planner report: [plan/report.md](plan/report.md).

## Sweep on the proxy
{sweep_md}

## Scaling law and the full-scale run
![scaling law](scaling_law.png)

{fit_markdown(fit_result)}

| predicted | interval | actual | abs. error | inside interval |
|---|---|---|---|---|
| {summary['predicted_accuracy']:.4f} | [{low:.4f}, {high:.4f}] | {summary['actual_accuracy']:.4f} | {summary['abs_error']:.4f} | {summary['actual_inside_interval']} |

## Compute
Proxy runs ({summary['proxy_runs']}: sweep trials, re-runs and fit runs) processed
{summary['proxy_compute_fraction']:.4f} of the examples the same runs would have processed at B = {plan.batch_size}
(1/{1 / summary['proxy_compute_fraction']:.0f}). Total wall time {summary['wall_seconds']:.0f} s, of which the full-scale
run {summary['launch_wall_seconds']:.0f} s.
"""
