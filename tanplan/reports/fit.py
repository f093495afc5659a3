"""The batch law's figure and markdown, from the FitResult that tanplan.workflow.fit computed (fit.json)."""

from __future__ import annotations

import math
import statistics
from pathlib import Path

import numpy as np

from tanplan.fileio import write_text_atomic
from tanplan.outcomes.fit import FitResult, FittedLaw
from tanplan.reports.figures import figure

FORM_TEXT = {"knee": "a − b·max(0, ln(k/B'))", "noise": "a + c/B'", "flat": "a", "log-linear": "a + b·ln B'"}


def law_value(law: FittedLaw, b):
    """The fitted law at batch size(s) b (numpy array or float)."""
    coef, b = law.coef, np.asarray(b, dtype=float)
    if law.form == "noise":
        return coef[0] + coef[1] / b
    if law.form == "log-linear":
        return coef[0] + coef[1] * np.log(b)
    if law.form == "knee":
        return coef[0] - coef[1] * np.maximum(0.0, np.log(law.knee / b))
    return coef[0] + 0.0 * b


def figure_scaling(result: FitResult, path: Path, actual: float | None = None) -> Path:
    """Every proxy run, the rung means, the law over its window and on to the target, the interval for one
    launch (and, once launched, the launch)."""
    with figure(path, figsize=(6.5, 4)) as (fig, ax):
        draw_law(ax, result, actual)
    return path


def draw_law(ax, result: FitResult, actual: float | None = None, launches=()) -> None:
    points = result.points
    sizes = sorted({p.batch_size for p in points})
    window = set(result.law.window)
    for b in sizes:
        accs = [p.test_accuracy for p in points if p.batch_size == b]
        ax.plot([b] * len(accs), accs, ".", color="0.6" if b not in window else "C0", ms=4, alpha=0.7)
        ax.errorbar([b], [statistics.fmean(accs)], yerr=[statistics.stdev(accs) if len(accs) > 1 else 0], fmt="o",
                    color="0.5" if b not in window else "C0", capsize=3, ms=5)
    target = result.target_batch_size
    xs = np.geomspace(min(window), target, 60)
    form = result.law.form
    ax.plot(xs, law_value(result.law, xs), "--", color="C0",
            label=f"law ({form}: {FORM_TEXT[form]}) on B' = {', '.join(map(str, sorted(window)))}")
    if result.predicted_accuracy is not None:
        mean = result.predicted_accuracy
        low, high = result.prediction_interval
        ax.errorbar([target], [mean], yerr=[[mean - low], [high - mean]], fmt="o", color="C1", capsize=4,
                    label=f"prediction for one launch ({result.level:.0%} interval)")
    if launches:
        ax.plot([target] * len(launches), launches, "_", color="C3", ms=10, mew=1.5, label="launches (pool)")
    if actual is not None:
        ax.plot([target], [actual], "*", ms=14, color="C3", label="the launch")
    ax.set_xscale("log", base=2)
    ax.set(xlabel="batch size B' (constant η_step and S)", ylabel="test accuracy", title="Batch law")
    ax.legend(fontsize=7, loc="lower right")


def parts_table(result: FitResult) -> str:
    """The interval's three parts (standard deviations, in accuracy points) and the total half-width."""
    std = result.std_parts
    mis = ("forward held-out error beyond seed noise" if result.misspecification_stated is None else
           "no rung held out: a stated conservative term, from the calibration pools (docs/calibration.md)")
    mean = ("seed noise of the rungs, where the knee is, and which law" if result.form == "knee" else
            "seed noise of the rungs, and which law")
    table = ("| part of the interval | std (points) |\n|---|---|\n"
             f"| the law's mean at B ({mean}) | {100 * std.mean:.2f} |\n"
             "| one launch's own spread (the proxies' seed scatter where the law meets the target) | "
             f"{100 * std.launch:.2f} |\n"
             f"| misspecification ({mis}) | {100 * std.misspecification:.2f} |\n"
             + (f"| the test sets' offset (the proxies are evaluated on another test set than the launch's: a fixed "
                f"difference of two test sets of these sizes, binomial) | {100 * std.test_sets:.2f} |\n"
                if std.test_sets else "")
             + f"| **total**: half-width = t × √(sum of squares), t = {result.quantile:.3f} | "
             f"**± {100 * result.half_width:.2f}** |")
    return table


def lower_bound_text(result) -> str:
    """"at least X with 95% probability" (a FitResult or a RunResult), or "" without a bound."""
    bound = getattr(result, "lower_bound", None)
    if bound is None or getattr(result, "predicted_accuracy", None) is None:
        return ""
    return f"at least {bound:.4f} with {result.lower_bound_level:.0%} probability"


def launch_spread_text(result: FitResult) -> str:
    """How wide one launch's own spread is, and why (the part no number of proxies removes)."""
    s = result.std_parts.launch
    return (f"One launch's own spread is about ± {result.quantile * s:.3f} ({result.level:.0%}; std "
            f"{s:.4f}): the noise of a DP-SGD run is secret and new in every run, and at constant η_step each "
            f"step of a proxy carries the same DP noise as the target's, so a launch scatters as the proxies' "
            f"seeds do. No prediction of one launch can be narrower than that.")


def fit_markdown(result: FitResult) -> str:
    """The law, its prediction for one launch with the interval's parts; or why there is none."""
    if result.law is None:
        return f"**No law**: {result.verdict}; {result.what_to_change}."
    law, target = result.law, result.target_batch_size
    coef = ", ".join(f"{c:.4g}" for c in law.coef)
    knee = f", k = {law.knee}" if law.knee is not None else ""
    errors = result.held_out.errors
    held = (f"; its forward held-out errors (each rung from the rungs below it) "
            f"{', '.join(f'{e:+.4f}' for e in errors)}" if errors else "")
    others = [c for c in result.candidates or () if c.form != law.form]
    compared = "".join(f"; the {c.form} law's held-out excess {math.sqrt(c.held_out_excess):.4f}" for c in others)
    weighted = [c for c in result.candidates or () if c.weight is not None]
    if weighted:  # law "auto": the prediction is the forms' average, weighted by their out-of-sample fit
        compared = ("; the prediction averages the forms by how well each predicted the top rungs from those below: "
                    + ", ".join(f"{c.form} {c.mean:.4f} (weight {c.weight:.2f})" for c in weighted)
                    + ", their disagreement counted in the law's mean")
    line = (f"Law: accuracy = {FORM_TEXT[law.form]} ({law.form}; coefficients {coef}{knee}), fitted on "
            f"{len(result.points)} runs at B' = {', '.join(map(str, law.window))}{held}{compared}.")
    if result.predicted_accuracy is None:
        return (f"{line} **No prediction**: the law gives {result.law_at_target:.3f} at B = {target}, not an "
                f"accuracy. {_capital(result.verdict)}; {result.what_to_change}.")
    low, high = result.prediction_interval
    warning = (f"\n\n**Law does not hold**: {result.verdict}; {result.what_to_change}." if result.verdict else "")
    bound = lower_bound_text(result)
    bound = f"; one launch reaches **{bound}**" if bound else ""
    return (f"{line} Predicted for one launch at B = {target}: **{result.predicted_accuracy:.4f} "
            f"[{low:.4f}, {high:.4f}]** ({result.level:.0%} interval){bound}.\n\n{parts_table(result)}\n\n"
            f"{launch_spread_text(result)}{data_size_text(result)}{warning}")


def data_size_text(result) -> str:
    """The data-size term (tanplan.laws.data_size) as a paragraph, or "" without one."""
    d = getattr(result, "data_size", None)
    if d is None:
        return ""
    return (f"\n\nData size: the proxies learned on {d.public_size} public examples, the launch trains on "
            f"{d.private_size}. B' = {d.batch_size} trained again on the first {d.half_size} gave "
            f"{100 * d.per_halving:+.2f} points per halving of the data; carried over {d.doublings:.2f} doublings to N, "
            f"{100 * d.shift:+.2f} points in the prediction (the law's own mean is {result.law_at_target:.4f}) and a std "
            f"of {100 * d.std:.2f} points in its interval (the two sizes' seed noise and half of the shift, a "
            "stated misspecification of the log-linear data law).")


def prediction_text(result) -> str:
    """One line for a terminal (a FitResult or a RunResult): the prediction, its interval, the one-sided lower
    bound and the interval's parts in points; or why there is none."""
    if result.predicted_accuracy is None:
        return "no prediction (the law's value at the target is not an accuracy)"
    low, high = result.prediction_interval
    level = getattr(result, "level", None)
    text = (f"predicted {result.predicted_accuracy:.4f} [{low:.4f}, {high:.4f}]"
            f" ({f'{level:.0%} ' if level else ''}interval)")
    bound = lower_bound_text(result)
    text += f", {bound}" if bound else ""
    parts = getattr(result, "interval_parts_points", None)
    half = getattr(result, "half_width_points", None)
    if parts is None and getattr(result, "std_parts", None) is not None and getattr(result, "half_width", None):
        std = result.std_parts
        parts, half = std.in_points(), 100 * result.half_width
    if parts is not None and half is not None:
        text += (f"; ± {half:.2f} points: std of the law's mean {parts.mean:.2f}, of one launch {parts.launch:.2f}, "
                 f"misspecification {parts.misspecification:.2f}"
                 + (f", the test sets' offset {parts.test_sets:.2f}" if parts.test_sets else "") + " points")
    data = getattr(result, "data_size", None)
    if data is not None:
        text += (f"; data size N_pub = {data.public_size} → N = {data.private_size}: {100 * data.shift:+.2f} points "
                 f"in the mean, std {100 * data.std:.2f} points in the interval")
    return text


def _capital(text: str) -> str:
    return text[:1].upper() + text[1:]


def write_fit_report(result: FitResult, out: Path) -> None:
    write_text_atomic(out / "fit.md", f"# Batch law\n\n{fit_markdown(result)}\n\n![batch law](scaling_law.png)\n")
