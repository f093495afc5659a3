"""The report of `tanplan run` (report.md), from the summaries its stages computed."""

from __future__ import annotations

import re
from pathlib import Path

from tanplan.outcomes.fit import FitResult, LadderResult
from tanplan.outcomes.pipeline import RunResult, SweepChoice
from tanplan.privacy import tan
from tanplan.reports.fit import fit_markdown
from tanplan.reports.ladder import ladder_markdown


def run_report(name: str, plan, fit_result: FitResult | None, summary: RunResult, out: Path,
               ladder: LadderResult | None = None, proxies: str = "") -> str:
    """report.md of `tanplan run`: the plan, the sweep, the ladder, the law and the launch (or why not).
    proxies: the folder of plan/, sweep/, ladder/ and fit/ relative to out, "" (out itself) or "x/y/"."""
    sections = [f"# tanplan run: {name}", _plan(plan, summary, proxies)]
    if not summary.launched:
        sections.append(_not_launched(summary))
    sweep = _sweep(out / proxies, proxies)
    if sweep:
        sections.append(f"## Sweep on the proxy\n{sweep}{_choice(summary.sweep_choice)}")
    if ladder is not None:
        at = f"{proxies}ladder/"
        sections.append(f"## Proxy ladder: the chosen configuration's proxies\n![ladder]({at}ladder.png)\n\n"
                        f"{ladder_markdown(ladder)}\n\nDetails: [{at}ladder.md]({at}ladder.md).")
    if fit_result is not None and fit_result.law is not None:
        sections.append(_law_and_launch(fit_result, summary, proxies))
    sections.append(_privacy(summary))
    sections.append(_compute(plan, summary))
    return "\n\n".join(sections) + "\n"


def _plan(plan, summary: RunResult, proxies: str = "") -> str:
    eps_rdp = summary.epsilon_rdp if summary.epsilon_rdp is not None else plan.epsilon("rdp")
    eps_pld = summary.epsilon_pld if summary.epsilon_pld is not None else plan.epsilon("pld")
    return f"""## Plan
| N | B | S | σ | δ | η | ε_TAN (heuristic) | exact ε (RDP) | exact ε (PLD) | regime |
|---|---|---|---|---|---|---|---|---|---|
| {plan.dataset_size} | {plan.batch_size} | {plan.steps} | {plan.sigma:.4g} | {plan.delta:.3g} | {plan.eta:.4g} | {plan.eps_tan:.4g} | {eps_rdp:.4g} | {eps_pld:.4g} | {plan.regime.value} |

{tan.REGIME_TEXT[plan.regime]}. Full planner report: [{proxies}plan/report.md]({proxies}plan/report.md)."""


def _not_launched(summary: RunResult) -> str:
    anyway = "" if summary.law_holds else " `tanplan run --launch-anyway` launches regardless."  # else: predict only
    return (f"## Not launched\nThe full-scale run was not launched (stopped at the {summary.stopped_at} stage): "
            f"{summary.reason}.\n\n**What to change**: {summary.what_to_change}.{anyway}")


def _sweep(out: Path, proxies: str = "") -> str:
    path = out / "sweep" / "sweep.md"
    sweep_md = path.read_text() if path.is_file() else ""
    # Embedded one level up: drop its own title, point its figures into sweep/.
    return re.sub(r"^#+ .*\n", "", sweep_md.lstrip()).replace("](sweep_", f"]({proxies}sweep/sweep_").strip()


def _choice(choice: SweepChoice | None) -> str:
    """The chosen configuration's seed spread (the sweep's re-runs)."""
    if not choice or choice.mean_accuracy is None:
        return ""
    std = f" ± {choice.std_accuracy:.4f} (std)" if choice.std_accuracy is not None else ""
    return (f"\n\n**Chosen configuration** {choice.overrides}: {choice.mean_accuracy:.4f}{std} over its "
            f"{choice.reruns} re-run seeds (search trial: {choice.search_accuracy:.4f}).")


def _law_and_launch(fit_result: FitResult, summary: RunResult, proxies: str = "") -> str:
    figure = "scaling_law.png" if summary.launched else f"{proxies}fit/scaling_law.png"
    text = f"## Batch law{' and the full-scale run' if summary.launched else ''}\n![batch law]({figure})\n\n" \
           f"{fit_markdown(fit_result)}"
    if not summary.launched:
        return text
    anyway = ("\n\nLaunched with `--launch-anyway` although the proxies could not be trusted to predict it."
              if summary.launched_anyway else "")
    if summary.predicted_accuracy is None:
        return text + anyway + f"\n\nActual accuracy of the full-scale run: {summary.actual_accuracy:.4f} (no prediction)."
    low, high = summary.prediction_interval
    bound = f"{summary.lower_bound:.4f}" if summary.lower_bound is not None else "—"
    level = f" ({summary.lower_bound_level:.0%}, one-sided)" if summary.lower_bound is not None else ""
    return text + anyway + f"""

| predicted | interval | at least{level} | actual | abs. error | inside interval |
|---|---|---|---|---|---|
| {summary.predicted_accuracy:.4f} | [{low:.4f}, {high:.4f}] | {bound} | {summary.actual_accuracy:.4f} | {summary.abs_error:.4f} | {summary.actual_inside_interval} |"""


def _privacy(summary: RunResult) -> str:
    """What the pipeline cost the private training examples, and which ε is the guarantee."""
    tuning = summary.tuning
    fmt = lambda v: "-" if v is None else f"{v:.4g}"  # noqa: E731
    sizes = ""
    if tuning.tuning_data == "public" and tuning.sizes_differ:
        sizes = (f" The public set has {tuning.tuning_size} examples against N = {tuning.private_size}: the "
                 "proxies keep the target's σ/B (σ' = σ·B'/B: the noise on the mean gradient is the launch's), and "
                 "the law is extrapolated across data sizes as well as batch sizes"
                 + (", with the data-size term in the prediction (the batch law's section above)."
                    if summary.data_size is not None else "."))
    note = f" {summary.epsilon_total_note}." if summary.epsilon_total_note else ""
    return f"""## Privacy
Proxies learned on {tuning.source} (tuning data: **{tuning.tuning_data}**).{sizes}

| | ε (RDP, add/remove-one) | ε (PLD, add/remove-one) | ε (PLD, replace-one) | δ |
|---|---|---|---|---|
| the launch alone | {fmt(summary.epsilon_rdp)} | {fmt(summary.epsilon_pld)} | {fmt(summary.epsilon_replace_one)} | {summary.delta:.3g} |
| every release on the private set ({summary.epsilon_total_runs} runs) | {fmt(summary.epsilon_total_rdp)} | {fmt(summary.epsilon_total_pld)} | {fmt(summary.epsilon_total_replace_one)} | {summary.delta:.3g} |

Accountant of record: {summary.accountant.upper()}, relation of record:
{summary.neighbouring.replace('_', '/')} (σ is calibrated to it; docs/privacy.md says when
each relation holds).{note}
Which is the guarantee: {summary.guarantee}."""


def _compute(plan, summary: RunResult) -> str:
    c = summary.proxy_compute
    wall = f"Total wall time {summary.wall_seconds:.0f} s"
    if summary.launch_wall_seconds is not None:
        wall += f", of which the full-scale run {summary.launch_wall_seconds:.0f} s"
    return f"""## Compute
Proxy runs ({c.runs}) processed, as a fraction of the examples of the full-scale run (B·S = {plan.batch_size} × {plan.steps}):

| sweep | ladder | fit | total |
|---|---|---|---|
| {c.sweep:.4f} | {c.ladder:.4f} | {c.fit:.4f} | {c.total:.4f} |

The ladder's budget (fit.max_proxy_fraction, fit.min_proxy_budget) bounds the ladder; the sweep's cost is
set by [sweep] (trials, re-runs). {wall}."""
