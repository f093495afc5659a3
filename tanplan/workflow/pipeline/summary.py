"""summary.json of `tanplan run` (the RunResult) and its report.md: the prediction against the launch, the
launch's ε and the total on the private set, the proxies' compute; or, not launched, why and what to change."""

from __future__ import annotations

import json
import time
from pathlib import Path

from tanplan.fileio import write_json_atomic, write_text_atomic
from tanplan.outcomes.fields import fields_of
from tanplan.outcomes.fit import FitResult, LadderResult
from tanplan.outcomes.launch import LaunchResult
from tanplan.outcomes.pipeline import LadderStatus, ProxyCompute, RunResult, SweepChoice
from tanplan.outcomes.privacy_spent import PlannedTotal, Totals
from tanplan.privacy.plan import Plan
from tanplan.reports.run import run_report

CHOICE_KEYS = ("overrides", "mean_accuracy", "std_accuracy", "reruns", "search_accuracy", "flags")


def sweep_choice(out: Path) -> SweepChoice | None:
    """The chosen configuration and its seed spread, from the sweep's best.json."""
    path = out / "sweep" / "best.json"
    if not path.is_file():
        return None
    best = json.loads(path.read_text()).get("best") or {}
    return SweepChoice(**{k: best.get(k) for k in CHOICE_KEYS})


def ladder_status(ladder: LadderResult | None) -> LadderStatus | None:
    """What summary.json says of the ladder's result (its rungs: B' -> seeds)."""
    if ladder is None:
        return None
    return LadderStatus(found=ladder.found, reason=ladder.reason, spent_fraction=ladder.spent_fraction,
                        budget_fraction=ladder.budget_fraction, seeds=ladder.seeds, window=ladder.window,
                        law_share=ladder.law_share, rungs={r.batch_size: r.seeds for r in ladder.rungs})


def read_out(fit: FitResult) -> dict:
    """The prediction as the user reads it (RunResult's lower_bound, interval_parts_points, half_width_points):
    none of it without a prediction that is an accuracy."""
    if fit.predicted_accuracy is None or fit.std_parts is None or fit.lower_bound is None:
        return {}
    return dict(lower_bound=fit.lower_bound, lower_bound_level=fit.lower_bound_level,
                interval_parts_points=fit.std_parts.in_points(),
                half_width_points=100 * fit.half_width if fit.half_width is not None else None,
                data_size=fit.data_size)


def run_result(plan: Plan, ladder: LadderResult | None, fit_result: FitResult | None, best_overrides,
               compute: ProxyCompute, *,
               totals: Totals, planned: PlannedTotal | None, started: float, launched: LaunchResult | None = None,
               actual: float | None = None, anyway: bool = False, choice: SweepChoice | None = None,
               baselines=None, stage: str | None = None, reason: str | None = None,
               what_to_change: str | None = None) -> RunResult:
    """The summary of a run launched (launched, its accuracy `actual`) or stopped before it (stage, reason,
    what_to_change). `epsilon` is the guarantee for the private examples: the total whenever the proxies
    trained on them, the launch's otherwise; the launch's own ε of record stays under `launch_epsilon`."""
    fit = fit_result or FitResult()
    predicted, interval = fit.predicted_accuracy, fit.prediction_interval
    accounting = launched.accounting if launched is not None else None
    launch_epsilon = accounting.epsilon if accounting else None
    # with public tuning the guarantee is the launch's ε of record: its own, or composed with its [init]'s
    guarantee = (launched.epsilon or launch_epsilon) if launched is not None else launch_epsilon
    private_total = totals.tuning_data == "private"
    return RunResult(
        launched=launched is not None, launched_anyway=anyway, stopped_at=stage, reason=reason,
        what_to_change=what_to_change, predicted_accuracy=predicted, prediction_interval=interval,
        **read_out(fit),
        actual_accuracy=actual,
        abs_error=abs(actual - predicted) if actual is not None and predicted is not None else None,
        actual_inside_interval=bool(interval[0] <= actual <= interval[1]) if actual is not None and interval else None,
        epsilon_rdp=accounting.epsilon_rdp if accounting else None,
        epsilon_pld=accounting.epsilon_pld if accounting else None,
        epsilon_replace_one=accounting.epsilon_replace_one if accounting else None,
        epsilon=totals.epsilon_total if private_total else guarantee,
        accountant=plan.accountant, neighbouring=plan.neighbouring, delta=plan.delta, sigma=plan.sigma,
        batch_size=plan.batch_size, steps=plan.steps, proxy_compute=compute, proxy_compute_fraction=compute.total,
        proxy_runs=compute.runs, best_overrides=best_overrides, ladder=ladder_status(ladder),
        law_holds=fit.law_holds, verdict=fit.verdict, model=fit.model, interval_parts=fit.std_parts,
        launch_wall_seconds=launched.wall_seconds if launched is not None else None, sweep_choice=choice,
        launch_epsilon=launch_epsilon, **fields_of(totals), **fields_of(planned),
        baselines=tuple(baselines) if baselines is not None else None,
        wall_seconds=time.perf_counter() - started)


def write_run(result: RunResult, name: str, plan: Plan, fit_result: FitResult | None, out: Path,
              ladder: LadderResult | None, extra_markdown: str = "", proxies: str = "") -> RunResult:
    """summary.json and report.md of the run; the result. proxies: where the plan, sweep, ladder and fit
    folders are, relative to out ("routes/finetune/"; "": in out)."""
    write_json_atomic(out / "summary.json", result.to_dict())
    write_text_atomic(out / "report.md", run_report(name, plan, fit_result, result, out, ladder, proxies)
                      + extra_markdown + released_model(out, result.launched))
    return result


def released_model(out: Path, launched: bool) -> str:
    """report.md's last section: where the launch's released model is, and what reads it."""
    if not launched:
        return ""
    return (f"\n\n## The released model\n`{out / 'launch' / 'model'}` (model.json, params.npz): "
            f"`tanplan.load_run(\"{out}\")` reads it back, and `init.path = \"{out}\"` starts a run from it.\n")
