"""The batch scaling law's figure and markdown, from the result dict that tanplan.workflow.fit computed."""

from __future__ import annotations

import statistics
from pathlib import Path

from tanplan.fileio import write_text_atomic
from tanplan.reports.figures import figure


def figure_scaling(result: dict, path: Path, actual: float | None = None) -> Path:
    """Points with their spread, the fitted line, the extrapolated target and its interval (paper Fig. 1)."""
    points = result["points"]
    sizes = sorted({p["batch_size"] for p in points})
    means = [statistics.fmean(p["test_accuracy"] for p in points if p["batch_size"] == b) for b in sizes]
    spread = [statistics.pstdev([p["test_accuracy"] for p in points if p["batch_size"] == b]) for b in sizes]
    target = result["target_batch_size"]
    with figure(path, figsize=(6, 4)) as (fig, ax):
        _draw_scaling(ax, result, sizes, means, spread, target, actual)
    return path


def _draw_scaling(ax, result, sizes, means, spread, target, actual) -> None:
    import numpy as np

    ax.errorbar(sizes, means, yerr=[2 * s for s in spread], fmt="x", color="C0", capsize=3,
                label="proxy runs (mean ± 2 std)")
    xs = np.geomspace(min(sizes), target, 50)
    ax.plot(xs, result["a"] + result["b"] * np.log(xs), "--", color="C0", label=f"fit a + b·ln B (R²={result['r2']:.2f})")
    if result.get("model") == "flat":
        ax.plot(xs, np.full_like(xs, result["predicted_accuracy"]), ":", color="C2",
                label="flat (b = 0: the slope's interval contains 0), used")
    if result["predicted_accuracy"] is not None:
        low, high = result["prediction_interval"]
        ax.errorbar([target], [result["predicted_accuracy"]],
                    yerr=[[result["predicted_accuracy"] - low], [high - result["predicted_accuracy"]]],
                    fmt="o", color="C1", capsize=4, label=f"prediction at B={target} ({result['level']:.0%} PI)")
    else:
        ax.axhspan(1.0, max(1.05, result["line_at_target"]), color="C3", alpha=0.1,
                   label="accuracy > 1: the line leaves [0, 1], no prediction")
    if actual is not None:
        ax.plot([target], [actual], "*", ms=14, color="C3", label="actual full-scale run")
    ax.set(xscale="log", xlabel="batch size B (constant η_step and S)", ylabel="test accuracy",
           title="Batch scaling law")
    ax.legend(fontsize=8)


def fit_markdown(result: dict) -> str:
    """The fitted law and its prediction; a prediction outside [0, 1] is shown as no prediction."""
    line = (f"accuracy = {result['a']:.4f} + ({result['b']:.4f})·ln B over {result['n']} runs at B' = "
            f"{', '.join(map(str, _sizes(result)))} (R² = {result['r2']:.3f})")
    target = result["target_batch_size"]
    if result["predicted_accuracy"] is None:
        return (f"{line}. **No prediction**: the fitted line leaves [0, 1] before B = {target} (it reaches "
                f"{result['line_at_target']:.3f} there, which is not an accuracy). {_capital(result['verdict'])}; "
                f"{result['what_to_change']}.")
    low, high = result["prediction_interval"]
    warning = (f"\n\n**Law does not hold**: {result['verdict']}; {result['what_to_change']}."
               if result.get("verdict") else "")
    if result.get("model") == "flat":
        ll = result["loglinear_prediction"]
        s_low, s_high = result["slope_interval"]
        l_low, l_high = ll["prediction_interval"]
        alone = (f"The line alone (not used) would give {ll['predicted_accuracy']:.4f} [{l_low:.4f}, {l_high:.4f}]."
                 if 0.0 <= l_low and l_high <= 1.0 else
                 f"The line alone (not used) gives no accuracy: its {result['level']:.0%} interval at the target "
                 f"leaves [0, 1].")
        warning = (f"\n\nThe slope's {result['level']:.0%} interval [{s_low:.4f}, {s_high:.4f}] contains 0: the runs "
                   f"cannot tell the law from the flat regime, so the prediction is their mean (b = 0). {alone}") + warning
    return (f"{line}; predicted at B = {target}: {result['predicted_accuracy']:.4f} "
            f"[{low:.4f}, {high:.4f}] ({result['level']:.0%} prediction interval){warning}")


def prediction_text(result: dict) -> str:
    """One line for a terminal: the prediction and its interval, or why there is none."""
    if result.get("predicted_accuracy") is None:
        return "no prediction (the fitted line leaves [0, 1] at the target)"
    low, high = result["prediction_interval"]
    return f"predicted {result['predicted_accuracy']:.4f} [{low:.4f}, {high:.4f}]"


def _capital(text: str) -> str:
    return text[:1].upper() + text[1:]


def _sizes(result: dict) -> list[int]:
    return result.get("batch_sizes") or sorted({p["batch_size"] for p in result["points"]})


def write_fit_report(result: dict, out: Path) -> None:
    write_text_atomic(out / "fit.md", f"# Batch scaling law\n\n{fit_markdown(result)}\n\n![scaling law](scaling_law.png)\n")


