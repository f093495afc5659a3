"""Accuracy against pre-pruning and gradient-dropping rates: a table and a figure for sweep reports.

Reads any frame with one row per run and the columns prune_rate and grad_drop_rate (short sweep names,
or the dotted pruning.rate / pruning.drop_rate), plus the metric (test_accuracy by default):
a sweep's trials frame, or the records of a grid of `tanplan train` runs.
"""

from __future__ import annotations

import math
from pathlib import Path

from tanplan.reports.figures import figure

RATE_COLUMNS = ("prune_rate", "grad_drop_rate")


def _normalised(df):
    """The frame with the rate columns under their short names; absent rates read as 0 (not searched)."""
    df = df.rename(columns={"pruning.rate": "prune_rate", "pruning.drop_rate": "grad_drop_rate",
                            "train.prune_rate": "prune_rate", "train.grad_drop_rate": "grad_drop_rate"})
    for c in RATE_COLUMNS:
        if c not in df.columns:
            df = df.assign(**{c: 0.0})
    return df


def prune_drop_table(df, metric: str = "test_accuracy"):
    """Mean, standard deviation (ddof 1), min, max and count of the metric per (prune_rate, grad_drop_rate)."""
    df = _normalised(df)
    df = df[df[metric].notna()]
    out = df.groupby(list(RATE_COLUMNS))[metric].agg(["mean", "std", "min", "max", "count"]).reset_index()
    return out.sort_values(list(RATE_COLUMNS)).reset_index(drop=True)


def plot_prune_drop(df, path: str | Path, metric: str = "test_accuracy", title: str = "") -> Path:
    """Metric against gradient-drop rate, one line per pre-pruning rate, mean ± std over seeds."""
    table = prune_drop_table(df, metric)
    with figure(path, figsize=(5, 3.5)) as (fig, ax):
        for prune, group in table.groupby("prune_rate"):
            cells = list(group.itertuples())  # one per drop rate: its mean, std (NaN for one seed), ...
            ax.errorbar([c.grad_drop_rate for c in cells], [c.mean for c in cells],
                        yerr=[0.0 if math.isnan(c.std) else c.std for c in cells], marker="o", capsize=3,
                        label=f"prune rate {prune:g}")
        ax.set_xlabel("gradient-drop rate")
        ax.set_ylabel(metric.replace("_", " "))
        ax.set_title(title or "accuracy against pre-pruning and gradient-dropping rates", fontsize=9)
        ax.legend(fontsize=8)
        ax.grid(alpha=0.3)
    return Path(path)


def markdown_table(df, metric: str = "test_accuracy") -> str:
    """The table as Markdown: mean ± std (n) per cell, rows = prune rate, columns = drop rate."""
    table = prune_drop_table(df, metric)
    drops = sorted(table.grad_drop_rate.unique())
    lines = ["| prune \\ drop | " + " | ".join(f"{d:g}" for d in drops) + " |",
             "| --- |" + " --- |" * len(drops)]
    for prune, group in table.groupby("prune_rate"):
        cells = {row.grad_drop_rate: row for row in group.itertuples()}
        row = []
        for d in drops:
            c = cells.get(d)
            row.append("" if c is None else f"{c.mean:.4f} ± {0.0 if c.count < 2 else c.std:.4f} (n={c.count})")
        lines.append(f"| {prune:g} | " + " | ".join(row) + " |")
    return "\n".join(lines)
