"""Results of a proxy sweep, read back from its study: sweep.csv, reruns.csv, best.json, figures, sweep.md.

Everything here is computed from DIR/study.sqlite3 alone, so that a resumed sweep, or one that was
interrupted, writes the same files as one that ran in one go.
"""

from __future__ import annotations

import dataclasses
import io
import math
import warnings
from pathlib import Path

from tanplan.fileio import write_json_atomic, write_text_atomic
from tanplan.outcomes.sweep import RankedConfig, SweepFiles, SweepResult, SweepSeconds, TrialCounts
from tanplan.reports import sweep as sweep_report
from tanplan.workflow.sweep.study import (DIVERGED, ERROR, FINISHED, INTERRUPTED, METRIC, PRUNED, STUDY_FILE,
                                          SweepSpec, TrialRecord, finite, top_trials)
from tanplan.workflow.sweep.space import overrides

STATUSES = (FINISHED, PRUNED, DIVERGED, ERROR, INTERRUPTED)


def trials_frame(study, spec: SweepSpec):
    """One row per search trial that reached an outcome (or was interrupted), in trial order."""
    import pandas as pd
    from optuna.trial import TrialState

    rows = []
    for t in study.get_trials(deepcopy=False):
        if t.state in (TrialState.RUNNING, TrialState.WAITING):
            continue
        a = TrialRecord.of(t.user_attrs)
        row = {"trial": t.number, "status": a.status, "seed": a.seed}
        row.update({d.name: t.params.get(d.name) for d in spec.dims})
        row.update(_plan_columns(spec))
        row.update({
            METRIC: a.test_accuracy,
            f"last_eval_{METRIC}": a.last_test_accuracy if a.last_test_accuracy is not None else a.test_accuracy,
            "steps_done": a.step,
            "wall_seconds": a.wall_seconds,
            "epsilon_rdp": a.epsilon_rdp,
            "requeued_from": a.requeued_from,
            "error": a.error,
        })
        rows.append(row)
    columns = ["trial", "status", "seed", *(d.name for d in spec.dims), *_plan_columns(spec), METRIC,
               f"last_eval_{METRIC}", "steps_done", "wall_seconds", "epsilon_rdp", "requeued_from", "error"]
    return pd.DataFrame(rows, columns=columns)


def _plan_columns(spec: SweepSpec) -> dict:
    return {"proxy_batch_size": spec.proxy.batch_size, "proxy_sigma": spec.proxy.sigma,
            "steps": spec.proxy.steps, "target_batch_size": spec.target.batch_size,
            "target_sigma": spec.target.sigma}


def reruns_frame(study, spec: SweepSpec):
    import pandas as pd

    rows = []
    for t in study.get_trials(deepcopy=False):
        a = TrialRecord.of(t.user_attrs)
        rows.append({"source_trial": a.source_trial, "seed": a.seed, "status": a.status,
                     **{d.name: t.params.get(d.name) for d in spec.dims},
                     METRIC: a.test_accuracy, "wall_seconds": a.wall_seconds, "error": a.error})
    columns = ["source_trial", "seed", "status", *(d.name for d in spec.dims), METRIC, "wall_seconds", "error"]
    return pd.DataFrame(rows, columns=columns)


SPREAD_ALPHA = 0.05  # one-sided level of "this configuration's seeds scatter more than the others'"


def ranking(search, reruns_df, spec: SweepSpec) -> list[RankedConfig]:
    """The top-k configurations ranked by mean re-run accuracy (search accuracy when none re-ran), the ones
    flagged unstable last: a re-run that diverged or failed, or seeds that scatter more than the other
    configurations' (one-sided F test of its variance against theirs pooled, at SPREAD_ALPHA: with 3
    seeds it takes a seed far off the others, a spike, not the ordinary scatter of a few seeds). Such a
    configuration is at the edge of stability and transfers badly to the launch, whose noise is new."""
    ranked = [_ranked(t, reruns_df, spec) for t in top_trials(search, spec.top_k or 1)]
    ranked = [dataclasses.replace(r, flags=r.flags + _scatter_flags(r, ranked)) for r in ranked]
    with_mean = [r for r in ranked if r.mean_accuracy is not None]
    if with_mean and spec.top_k:
        ranked = (sorted(with_mean, key=lambda r: (bool(r.flags), -r.mean_accuracy))
                  + [r for r in ranked if r.mean_accuracy is None])
    return ranked


def _ranked(t, reruns_df, spec: SweepSpec) -> RankedConfig:
    """A top trial with its re-runs' accuracies (a failed re-run flags it)."""
    mine = reruns_df[reruns_df.source_trial == t.number]
    accs = [a for a in mine.loc[mine.status == FINISHED, METRIC].tolist() if finite(a)]
    mean = sum(accs) / len(accs) if accs else None
    std = math.sqrt(sum((a - mean) ** 2 for a in accs) / (len(accs) - 1)) if len(accs) > 1 else None
    failed = int((mine.status != FINISHED).sum())
    return RankedConfig(trial=t.number, params=dict(t.params), overrides=overrides(spec.dims, t.params),
                        search_accuracy=t.value, seed=TrialRecord.of(t.user_attrs).seed,
                        mean_accuracy=mean, std_accuracy=std, accuracies=tuple(accs),
                        min_accuracy=min(accs) if accs else None, max_accuracy=max(accs) if accs else None,
                        reruns=len(accs), failed_reruns=failed, flags=("diverged or failed",) if failed else ())


def _scatter_flags(r: RankedConfig, ranked: list[RankedConfig]) -> tuple[str, ...]:
    """("seeds scatter ...",) when r's seeds scatter more than the other configurations' (F test)."""
    from scipy import stats

    others = [o for o in ranked if o is not r and o.std_accuracy is not None]
    dof = sum(o.reruns - 1 for o in others)
    if r.std_accuracy is None or dof <= 0:
        return ()
    pooled = sum((o.reruns - 1) * o.std_accuracy ** 2 for o in others) / dof
    ratio = r.std_accuracy ** 2 / pooled if pooled > 0 else (math.inf if r.std_accuracy > 0 else 1.0)
    if stats.f.sf(ratio, r.reruns - 1, dof) < SPREAD_ALPHA:
        return (f"seeds scatter {math.sqrt(ratio):.1f}× the others' (F test, p < {SPREAD_ALPHA:g})",)
    return ()


def write_results(out: Path, spec: SweepSpec, search, reruns) -> SweepResult:
    """Write every result file of the sweep in DIR; returns what best.json holds."""
    out = Path(out)
    df = trials_frame(search, spec)
    rr = reruns_frame(reruns, spec)
    write_text_atomic(out / "sweep.csv", _csv(df))
    write_text_atomic(out / "reruns.csv", _csv(rr))
    ranked = ranking(search, rr, spec)
    best = ranked[0] if ranked else None
    title = f"proxy sweep: B'={spec.proxy.batch_size} for B={spec.target.batch_size}, S={spec.proxy.steps}"
    figures = sweep_report.write_figures(out, spec.dims, df[df.status == FINISHED], param_importances(search), title)
    summary = SweepResult(
        best=best,
        ranked_by=("mean over re-runs, unstable configurations last" if best and best.mean_accuracy is not None
                   else "search accuracy"),
        ranking=tuple(ranked),
        target=spec.target,
        proxy=spec.proxy,
        compute_ratio=spec.target.batch_size / spec.proxy.batch_size,
        space=tuple(d.to_dict() for d in spec.dims),
        trials=TrialCounts(requested=spec.trials, **{s: int((df.status == s).sum()) for s in STATUSES}),
        wall_seconds=SweepSeconds(search=_sum(df.wall_seconds), reruns=_sum(rr.wall_seconds)),
        files=SweepFiles(trials="sweep.csv", reruns="reruns.csv", study=STUDY_FILE, **figures),
    )
    write_json_atomic(out / "best.json", summary.to_dict())
    write_text_atomic(out / "sweep.md", sweep_report.markdown(summary, spec.dims, df))
    return summary


def param_importances(study) -> dict[str, float]:
    """Optuna's fANOVA importances; empty when there are too few finished trials to compute them."""
    import optuna
    from optuna.trial import TrialState

    complete = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    if len(complete) < 2:
        return {}
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return dict(optuna.importance.get_param_importances(study))
    except Exception:  # e.g. every finished trial has the same parameters
        return {}


def _csv(df) -> str:
    buf = io.StringIO()
    df.to_csv(buf, index=False)
    return buf.getvalue()


def _sum(series) -> float | None:
    values = [v for v in series.tolist() if finite(v)]
    return float(sum(values)) if values else 0.0

