"""Results of a proxy sweep, read back from its study: sweep.csv, reruns.csv, best.json, figures, sweep.md.

Everything here is computed from DIR/study.sqlite3 alone, so that a resumed sweep, or one that was
interrupted, writes the same files as one that ran in one go.
"""

from __future__ import annotations

import io
import math
from pathlib import Path
from typing import Any

from tanplan.fileio import save_figure_atomic, write_json_atomic, write_text_atomic
from tanplan.sweep import (DIVERGED, ERROR, FINISHED, INTERRUPTED, METRIC, PRUNED, STUDY_FILE, SweepSpec,
                           top_trials)
from tanplan.sweep_space import overrides

STATUSES = (FINISHED, PRUNED, DIVERGED, ERROR, INTERRUPTED)


def trials_frame(study, spec: SweepSpec):
    """One row per search trial that reached an outcome (or was interrupted), in trial order."""
    import pandas as pd
    from optuna.trial import TrialState

    rows = []
    for t in study.get_trials(deepcopy=False):
        if t.state in (TrialState.RUNNING, TrialState.WAITING):
            continue
        a = t.user_attrs
        row = {"trial": t.number, "status": a.get("status", ERROR), "seed": a.get("seed")}
        row.update({d.name: t.params.get(d.name) for d in spec.dims})
        row.update(_plan_columns(spec))
        row.update({
            METRIC: a.get(METRIC),
            f"last_eval_{METRIC}": a.get(f"last_{METRIC}", a.get(METRIC)),
            "steps_done": a.get("step"),
            "wall_seconds": a.get("wall_seconds"),
            "epsilon_rdp": a.get("epsilon_rdp"),
            "requeued_from": a.get("requeued_from"),
            "error": a.get("error", ""),
        })
        rows.append(row)
    columns = ["trial", "status", "seed", *(d.name for d in spec.dims), *_plan_columns(spec), METRIC,
               f"last_eval_{METRIC}", "steps_done", "wall_seconds", "epsilon_rdp", "requeued_from", "error"]
    return pd.DataFrame(rows, columns=columns)


def _plan_columns(spec: SweepSpec) -> dict:
    return {"proxy_batch_size": spec.proxy["batch_size"], "proxy_sigma": spec.proxy.get("sigma"),
            "steps": spec.proxy["steps"], "target_batch_size": spec.target["batch_size"],
            "target_sigma": spec.target.get("sigma")}


def reruns_frame(study, spec: SweepSpec):
    import pandas as pd

    rows = []
    for t in study.get_trials(deepcopy=False):
        a = t.user_attrs
        rows.append({"source_trial": a.get("source_trial"), "seed": a.get("seed"), "status": a.get("status", ERROR),
                     **{d.name: t.params.get(d.name) for d in spec.dims},
                     METRIC: a.get(METRIC), "wall_seconds": a.get("wall_seconds"), "error": a.get("error", "")})
    columns = ["source_trial", "seed", "status", *(d.name for d in spec.dims), METRIC, "wall_seconds", "error"]
    return pd.DataFrame(rows, columns=columns)


def ranking(search, reruns_df, spec: SweepSpec) -> list[dict]:
    """The top-k configurations ranked by mean re-run accuracy (search accuracy when none re-ran)."""
    ranked = []
    for t in top_trials(search, spec.top_k or 1):
        accs = [a for a in reruns_df.loc[(reruns_df.source_trial == t.number) & (reruns_df.status == FINISHED),
                                         METRIC].tolist() if _finite(a)]
        mean = sum(accs) / len(accs) if accs else None
        std = math.sqrt(sum((a - mean) ** 2 for a in accs) / (len(accs) - 1)) if len(accs) > 1 else None
        ranked.append({"trial": t.number, "params": dict(t.params), "overrides": overrides(spec.dims, t.params),
                       "search_accuracy": t.value, "seed": t.user_attrs.get("seed"),
                       "mean_accuracy": mean, "std_accuracy": std,
                       "min_accuracy": min(accs) if accs else None, "max_accuracy": max(accs) if accs else None,
                       "reruns": len(accs)})
    with_mean = [r for r in ranked if r["mean_accuracy"] is not None]
    if with_mean and spec.top_k:
        ranked = sorted(with_mean, key=lambda r: -r["mean_accuracy"]) + [r for r in ranked if r["mean_accuracy"] is None]
    return ranked


def write_results(out: Path, spec: SweepSpec, search, reruns) -> dict:
    """Write every result file of the sweep in DIR; returns what best.json holds."""
    out = Path(out)
    df = trials_frame(search, spec)
    rr = reruns_frame(reruns, spec)
    write_text_atomic(out / "sweep.csv", _csv(df))
    write_text_atomic(out / "reruns.csv", _csv(rr))
    ranked = ranking(search, rr, spec)
    counts = {s: int((df.status == s).sum()) for s in STATUSES}
    best = ranked[0] if ranked else None
    summary = {
        "best": best,
        "ranked_by": "mean over re-runs" if best and best["mean_accuracy"] is not None else "search accuracy",
        "ranking": ranked,
        "target": spec.target,
        "proxy": spec.proxy,
        "compute_ratio": spec.target["batch_size"] / spec.proxy["batch_size"],
        "space": [d.to_dict() for d in spec.dims],
        "trials": {"requested": spec.trials, **counts},
        "wall_seconds": {"search": _sum(df.wall_seconds), "reruns": _sum(rr.wall_seconds)},
        "files": {"trials": "sweep.csv", "reruns": "reruns.csv", "study": STUDY_FILE},
    }
    figures = write_figures(out, spec, df, search)
    summary["files"].update(figures)
    write_json_atomic(out / "best.json", summary)
    write_text_atomic(out / "sweep.md", report_section(summary, spec))
    return summary


def write_figures(out: Path, spec: SweepSpec, df, study) -> dict:
    """Accuracy against each searched key, and Optuna's parameter importance when it can be computed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    files = {}
    done = df[df.status == FINISHED]
    if len(done):
        n = len(spec.dims)
        cols = min(n, 3)
        rows = -(-n // cols)
        fig, axes = plt.subplots(rows, cols, figsize=(4 * cols, 3.2 * rows), squeeze=False)
        best = done[METRIC].idxmax()
        for ax, dim in zip(axes.flat, spec.dims):
            _scatter(ax, dim, done, best)
        for ax in list(axes.flat)[n:]:
            ax.set_visible(False)
        fig.suptitle(f"proxy sweep: B'={spec.proxy['batch_size']} for B={spec.target['batch_size']}, "
                     f"S={spec.proxy['steps']} ({len(done)} finished trials)")
        fig.tight_layout()
        save_figure_atomic(fig, out / "sweep_accuracy.png", dpi=110)
        plt.close(fig)
        files["accuracy_figure"] = "sweep_accuracy.png"
    importances = param_importances(study)
    if importances:
        fig, ax = plt.subplots(figsize=(5, 0.5 + 0.4 * len(importances)))
        names = list(importances)[::-1]
        ax.barh(names, [importances[k] for k in names], color="tab:blue")
        ax.set_xlabel("importance (Optuna fANOVA)")
        fig.tight_layout()
        save_figure_atomic(fig, out / "sweep_importance.png", dpi=110)
        plt.close(fig)
        files["importance_figure"] = "sweep_importance.png"
    return files


def _scatter(ax, dim, done, best) -> None:
    y = done[METRIC].astype(float)
    if dim.is_choice:
        labels = [str(c) for c in dim.choices]
        x = done[dim.name].map(lambda v: labels.index(str(v)) if str(v) in labels else -1).astype(float)
        jitter = ((done.index.to_series() * 0.6180339) % 1 - 0.5) * 0.25  # deterministic spread
        ax.scatter(x + jitter, y, s=18, alpha=0.75)
        ax.scatter([x[best] + jitter[best]], [y[best]], s=60, marker="*", color="tab:red", zorder=3)
        ax.set_xticks(range(len(labels)), labels, rotation=30 if max(map(len, labels)) > 5 else 0)
    else:
        x = done[dim.name].astype(float)
        ax.scatter(x, y, s=18, alpha=0.75)
        ax.scatter([x[best]], [y[best]], s=60, marker="*", color="tab:red", zorder=3)
        if dim.log:
            from matplotlib.ticker import FuncFormatter

            ax.set_xscale("log")
            plain = FuncFormatter(lambda v, _: f"{v:g}")
            ax.xaxis.set_major_formatter(plain)
            ax.xaxis.set_minor_formatter(plain)
    ax.set_xlabel(dim.name + (" (log)" if dim.log else ""))
    ax.set_ylabel(METRIC)
    ax.grid(alpha=0.3)


def param_importances(study) -> dict[str, float]:
    """Optuna's fANOVA importances; empty when there are too few finished trials to compute them."""
    import warnings

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


def report_section(summary: dict, spec: SweepSpec) -> str:
    """The sweep's section of the experiment report, in markdown."""
    t, p = summary["target"], summary["proxy"]
    lines = ["## Proxy sweep", ""]
    if "sigma" in t:
        lines.append(f"Target B = {t['batch_size']}, σ = {t['sigma']:.4g}, S = {t['steps']}; proxy B' = "
                     f"{p['batch_size']}, σ' = σ·B'/B = {p['sigma']:.4g}, same S and η_step: "
                     f"{summary['compute_ratio']:.3g}× cheaper per trial than the target.")
    else:
        lines.append(f"Non-private: target B = {t['batch_size']}, proxy B' = {p['batch_size']}, S = {t['steps']}.")
    c = summary["trials"]
    lines += ["", f"Search: {c['requested']} trials with Optuna's TPE on Ray Tune: " +
              ", ".join(f"{c[s]} {s}" for s in STATUSES if c[s]) +
              f"; {_fmt(summary['wall_seconds']['search'], '{:.0f}')} s of trial time, "
              f"{_fmt(summary['wall_seconds']['reruns'], '{:.0f}')} s of re-runs.", "",
              "| searched key | config key | values |", "| --- | --- | --- |"]
    lines += [f"| {d.name} | {d.path} | {d.describe()} |" for d in spec.dims]
    ranked = summary["ranking"]
    if ranked:
        lines += ["", f"Best configurations (ranked by {summary['ranked_by']}):", "",
                  "| rank | trial | " + " | ".join(d.name for d in spec.dims) +
                  " | search acc. | mean ± std | min – max | seeds |",
                  "| --- " * (len(spec.dims) + 6) + "|"]
        for i, r in enumerate(ranked, 1):
            values = " | ".join(_short(r["params"].get(d.name)) for d in spec.dims)
            lines.append(f"| {i} | {r['trial']} | {values} | {_fmt(r['search_accuracy'], '{:.4f}')} | "
                         f"{_fmt(r['mean_accuracy'], '{:.4f}')} ± {_fmt(r['std_accuracy'], '{:.4f}')} | "
                         f"{_fmt(r['min_accuracy'], '{:.4f}')} – {_fmt(r['max_accuracy'], '{:.4f}')} | {r['reruns']} |")
        best = ranked[0]
        sets = " ".join(f"--set {k}={_short(v)}" for k, v in best["overrides"].items())
        lines += ["", f"Run it at the target batch with: `{sets}`"]
    else:
        lines += ["", "No trial finished: see the error column of sweep.csv."]
    files = summary["files"]
    for key, title in (("accuracy_figure", "accuracy against each searched key"),
                       ("importance_figure", "parameter importance (Optuna fANOVA)")):
        if key in files:
            lines += ["", f"![{title}]({files[key]})"]
    return "\n".join(lines) + "\n"


def _csv(df) -> str:
    buf = io.StringIO()
    df.to_csv(buf, index=False)
    return buf.getvalue()


def _sum(series) -> float | None:
    values = [v for v in series.tolist() if _finite(v)]
    return float(sum(values)) if values else 0.0


def _finite(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _fmt(v, fmt: str) -> str:
    return "-" if v is None else fmt.format(v)


def _short(v) -> str:
    return f"{v:.4g}" if isinstance(v, float) else str(v)
