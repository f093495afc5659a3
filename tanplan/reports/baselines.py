"""Tables (CSV, markdown, terminal) and the accuracy-against-ε figure for baseline results
(tanplan.baselines.runner.BaselineResult)."""

from __future__ import annotations

import csv
import io
from pathlib import Path

from tanplan.baselines.runner import BaselineResult
from tanplan.fileio import write_json_atomic, write_text_atomic
from tanplan.reports.figures import figure

COLUMNS = (("method", "method", "{}"), ("target_epsilon", "target ε", "{:g}"), ("epsilon", "ε spent", "{:.4g}"),
           ("delta", "δ", "{:.0e}"), ("rho", "zCDP ρ", "{:.3g}"), ("noise_multiplier", "σ", "{:.3g}"),
           ("imbalance_ratio", "IR", "{:g}"), ("n_train", "n", "{}"), ("accuracy", "acc", "{:.3f}"),
           ("balanced_accuracy", "bal. acc", "{:.3f}"), ("minority_accuracy", "minority acc", "{:.3f}"),
           ("wall_seconds", "s", "{:.2f}"))


def _cell(value, fmt: str) -> str:
    if value is None:
        return "–"
    if fmt == "{:.0e}" and value == 0:
        return "0"
    return fmt.format(value)


def table_rows(results: list[BaselineResult]) -> tuple[list[str], list[list[str]]]:
    header = [title for _, title, _ in COLUMNS]
    rows = []
    for r in results:
        row = [_cell(getattr(r, key), fmt) for key, _, fmt in COLUMNS]
        if r.repeats > 1:  # mean ± std over repeats
            for i, (key, _, _) in enumerate(COLUMNS):
                if key in ("accuracy", "balanced_accuracy", "minority_accuracy"):
                    row[i] += f" ± {getattr(r, key + '_std'):.3f}"
        rows.append(row)
    return header, rows


def markdown(results: list[BaselineResult], notes: list[str] = ()) -> str:
    header, rows = table_rows(results)
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(" --- " for _ in header) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    lines += [""] + [f"Note: {n}" for n in notes]
    return "\n".join(lines).rstrip() + "\n"


def run_section(results: list[BaselineResult], notes: list[str], epsilon: float, delta: float, source: str) -> str:
    """The section of `tanplan run`'s report.md: the baselines at the launch's ε and δ."""
    return (f"\n## Cheaper private methods at the same ε\nOn {source}, at ε = {epsilon:.4g}, δ = {delta:.2g} "
            f"(full results: [baselines/baseline.md](baselines/baseline.md)).\n\n{markdown(results, notes)}")


def text_table(results: list[BaselineResult]) -> str:
    header, rows = table_rows(results)
    widths = [max(len(x) for x in col) for col in zip(header, *rows)]
    fmt = lambda row: "  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip()  # noqa: E731
    return "\n".join([fmt(header)] + [fmt(row) for row in rows])


def csv_text(results: list[BaselineResult]) -> str:
    rows = [r.to_dict() for r in results]
    keys = [k for k in rows[0] if k != "config"] if rows else [k for k, _, _ in COLUMNS]
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=keys, extrasaction="ignore", lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow(row)
    return buf.getvalue()


def plot_accuracy_vs_epsilon(results: list[BaselineResult], path: Path, title: str = "") -> Path:
    """Accuracy, balanced accuracy and minority-class accuracy against target ε, one line per method."""
    metrics = (("accuracy", "test accuracy"), ("balanced_accuracy", "balanced accuracy"),
               ("minority_accuracy", "minority-class accuracy"))
    with figure(path, 1, 3, dpi=120, tight=False, figsize=(14, 3.8), sharey=True) as (fig, axes):
        methods = list(dict.fromkeys(r.method for r in results))
        for ax, (key, label) in zip(axes, metrics):
            for m in methods:
                pts = sorted((r.target_epsilon, getattr(r, key)) for r in results if r.method == m)
                ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=m)
            ax.set_xscale("log")
            ticks = sorted({r.target_epsilon for r in results})
            ax.set_xticks(ticks, [f"{t:g}" for t in ticks])
            ax.minorticks_off()
            ax.set_ylim(0, 1.02)
            ax.set_xlabel("ε (target)")
            ax.set_title(label)
            ax.grid(alpha=0.3)
        axes[0].set_ylabel("accuracy")
        handles, labels = axes[0].get_legend_handles_labels()
        fig.legend(handles, labels, fontsize=8, loc="center right")
        if title:
            fig.suptitle(title)
        fig.tight_layout(rect=(0, 0, 0.88, 1))
    return path


def write_outputs(out_dir, results: list[BaselineResult], notes: list[str], title: str = "") -> list[Path]:
    """baseline.json, baseline.csv, baseline.md and accuracy_vs_epsilon.png in out_dir, atomically."""
    out_dir = Path(out_dir)
    paths = [write_json_atomic(out_dir / "baseline.json", {"results": [r.to_dict() for r in results], "notes": notes}),
             write_text_atomic(out_dir / "baseline.csv", csv_text(results)),
             write_text_atomic(out_dir / "baseline.md", (f"# {title}\n\n" if title else "") + markdown(results, notes))]
    if results:
        paths.append(plot_accuracy_vs_epsilon(results, out_dir / "accuracy_vs_epsilon.png", title))
    return paths
