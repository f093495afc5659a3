"""The sweep's figures and its section of a report, from the frames and the SweepResult the sweep computed.

Figures: accuracy against each searched key (the best trial starred), Optuna's parameter importance,
and, when pruning or gradient-dropping rates are searched, accuracy against those rates.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from tanplan.outcomes.sweep import SweepResult, TrialCounts
from tanplan.reports import pruning
from tanplan.reports.figures import figure

METRIC = "test_accuracy"
STATUSES = tuple(f.name for f in dataclasses.fields(TrialCounts) if f.name != "requested")
RATE_KEYS = {"pruning.rate": "prune_rate", "pruning.drop_rate": "grad_drop_rate"}


def write_figures(out: Path, dims, done, importances: dict[str, float], title: str) -> dict:
    """sweep_accuracy.png (finished trials `done`), sweep_importance.png and prune_drop.png when they apply."""
    files = {}
    if len(done):
        n = len(dims)
        cols = min(n, 3)
        rows = -(-n // cols)
        with figure(out / "sweep_accuracy.png", rows, cols, figsize=(4 * cols, 3.2 * rows), squeeze=False) as (fig, axes):
            best = done[METRIC].idxmax()
            for ax, dim in zip(axes.flat, dims):
                _scatter(ax, dim, done, best)
            for ax in list(axes.flat)[n:]:
                ax.set_visible(False)
            fig.suptitle(f"{title} ({len(done)} finished trials)")
        files.update(accuracy_figure="sweep_accuracy.png")
    if importances:
        with figure(out / "sweep_importance.png", figsize=(5, 0.5 + 0.4 * len(importances))) as (fig, ax):
            names = list(importances)[::-1]
            ax.barh(names, [importances[k] for k in names], color="tab:blue")
            ax.set_xlabel("importance (Optuna fANOVA)")
        files.update(importance_figure="sweep_importance.png")
    rates = _rate_frame(dims, done)
    if rates is not None:
        pruning.plot_prune_drop(rates, out / "prune_drop.png")
        files.update(prune_drop_figure="prune_drop.png")
    return files


def _rate_frame(dims, done):
    """The finished trials with short rate columns, when a pruning or dropping rate was searched."""
    searched = {d.path: d.name for d in dims if d.path in RATE_KEYS}
    if not searched or not len(done):
        return None
    return done.rename(columns={name: RATE_KEYS[path] for path, name in searched.items()})


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


def markdown(summary: SweepResult, dims, trials=None) -> str:
    """The sweep's section of the experiment report, in markdown."""
    t, p = summary.target, summary.proxy
    lines = ["## Proxy sweep", ""]
    if t.sigma is not None:
        lines.append(f"Target B = {t.batch_size}, σ = {t.sigma:.4g}, S = {t.steps}; proxy B' = "
                     f"{p.batch_size}, σ' = σ·B'/B = {p.sigma:.4g}, same S and η_step: "
                     f"{summary.compute_ratio:.3g}× cheaper per trial than the target.")
    else:
        lines.append(f"Non-private: target B = {t.batch_size}, proxy B' = {p.batch_size}, S = {t.steps}.")
    c = summary.trials
    lines += ["", f"Search: {c.requested} trials with Optuna's TPE on Ray Tune: " +
              ", ".join(f"{c.count(status)} {status}" for status in STATUSES if c.count(status)) +
              f"; {_fmt(summary.wall_seconds.search, '{:.0f}')} s of trial time, "
              f"{_fmt(summary.wall_seconds.reruns, '{:.0f}')} s of re-runs.", "",
              "| searched key | config key | values |", "| --- | --- | --- |"]
    lines += [f"| {d.name} | {d.path} | {d.describe()} |" for d in dims]
    lines += _ranking_lines(summary, dims)
    rates = _rate_frame(dims, trials[trials.status == "finished"]) if trials is not None else None
    if rates is not None:
        lines += ["", "Accuracy against the pruning and gradient-dropping rates (finished trials):", "",
                  pruning.markdown_table(rates)]
    files = summary.files
    for figure_file, title in ((files.accuracy_figure, "accuracy against each searched key"),
                               (files.importance_figure, "parameter importance (Optuna fANOVA)"),
                               (files.prune_drop_figure, "accuracy against pruning and dropping rates")):
        if figure_file is not None:
            lines += ["", f"![{title}]({figure_file})"]
    return "\n".join(lines) + "\n"


def _ranking_lines(summary: SweepResult, dims) -> list[str]:
    """The best configurations, ranked, and the command line of the best."""
    ranked = summary.ranking
    if not ranked:
        return ["", "No trial finished: see the error column of sweep.csv."]
    lines = ["", f"Best configurations (ranked by {summary.ranked_by}):", "",
             "| rank | trial | " + " | ".join(d.name for d in dims) +
             " | search acc. | mean ± std | min – max | seeds | flags |",
             "| --- " * (len(dims) + 7) + "|"]
    for i, r in enumerate(ranked, 1):
        values = " | ".join(_short(r.params.get(d.name)) for d in dims)
        lines.append(f"| {i} | {r.trial} | {values} | {_fmt(r.search_accuracy, '{:.4f}')} | "
                     f"{_fmt(r.mean_accuracy, '{:.4f}')} ± {_fmt(r.std_accuracy, '{:.4f}')} | "
                     f"{_fmt(r.min_accuracy, '{:.4f}')} – {_fmt(r.max_accuracy, '{:.4f}')} | {r.reruns} | "
                     f"{'; '.join(r.flags) or '—'} |")
    sets = " ".join(f"--set {k}={_short(v)}" for k, v in ranked[0].overrides.items())
    return lines + ["", f"Run it at the target batch with: `{sets}`"]


def _fmt(v, fmt: str) -> str:
    return "-" if v is None else fmt.format(v)


def _short(v) -> str:
    return f"{v:.4g}" if isinstance(v, float) else str(v)

