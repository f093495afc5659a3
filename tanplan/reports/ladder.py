"""The proxy ladder's figure and markdown, from the LadderResult of tanplan.workflow.ladder.run_ladder."""

from __future__ import annotations

from pathlib import Path

from tanplan.fileio import write_text_atomic
from tanplan.outcomes.fit import LadderResult, LadderStep
from tanplan.reports.figures import figure


def figure_ladder(result: LadderResult, path: Path) -> Path:
    """Accuracy against B' per rung (every seed, mean ± std), the law's window and its fitted curve."""
    rungs = result.rungs
    sizes = [r.batch_size for r in rungs]
    with figure(path, figsize=(6.5, 4)) as (fig, ax):
        for r in rungs:
            ax.plot([r.batch_size] * len(r.accuracies), r.accuracies, ".", color="0.6", ms=5)
        ax.errorbar(sizes, [r.mean for r in rungs], yerr=[r.std for r in rungs], fmt="o-", color="C0",
                    capsize=3, label="rung mean ± std (grey: each seed)")
        for r in rungs:
            ax.annotate(f"{r.seeds}", (r.batch_size, r.mean), textcoords="offset points", xytext=(6, -10),
                        fontsize=7, color="C0")
        if result.window:
            window = result.window
            ax.axvspan(min(window) / 1.25, max(window) * 1.25, color="C2", alpha=0.12, label="the law's window")
        pred = result.prediction
        title = (f"Proxy ladder: {pred.form} law, {pred.predicted_accuracy:.3f} ± {pred.half_width:.3f} at "
                 f"B={result.target_batch_size}" if pred else "Proxy ladder: no law within the budget")
        ax.set_xscale("log", base=2)
        ax.set_xticks(sizes, [str(b) for b in sizes])
        ax.set(xlabel="proxy batch size B' (numbers: seeds)", ylabel="test accuracy", title=title)
        ax.legend(fontsize=7, loc="lower right")
    return path


def ladder_markdown(result: LadderResult) -> str:
    """Every rung, the steps the rule took and why, where it stopped, and the budget."""
    lines = ["| B' | σ' | seeds | accuracies | mean ± std |", "|---|---|---|---|---|"]
    for r in result.rungs:
        accs = ", ".join(f"{a:.3f}" for a in r.accuracies)
        sigma = f"{r.sigma:.4g}" if r.sigma is not None else "—"
        lines.append(f"| {r.batch_size} | {sigma} | {r.seeds} | {accs} | {r.mean:.4f} ± {r.std:.4f} |")
    steps = "; ".join(_steps(result.steps))
    budget = (f"Budget: Σ B'·S ≤ {result.budget_per_step:g}·S, i.e. {result.budget_fraction:.4g} of the "
              f"target's B·S (B = {result.target_batch_size}, S = {result.steps_per_run}: the larger of "
              f"fit.max_proxy_fraction = {result.max_proxy_fraction:g} and fit.min_proxy_budget = "
              f"{result.min_proxy_budget}); it spent {result.spent_fraction:.4f} on "
              f"{sum(r.seeds for r in result.rungs)} runs.")
    rule = (f"Rule: rungs B' = {result.start}, doubled, × {result.seeds} seeds until the law has three; then, "
            f"while the law's part of the interval exceeds fit.law_share = {result.law_share:g} × one launch's "
            "spread, the next rung, or (when it no longer fits the budget) one seed where it narrows the law's "
            "mean the most per example.")
    change = f"\n\n**What to change**: {result.what_to_change}." if result.what_to_change else ""
    return (f"{chr(10).join(lines)}\n\n**{_capital(result.reason)}.**{change}\n\nSteps: {steps}.\n\n{rule}\n\n"
            f"{budget}")


def _steps(steps: tuple[LadderStep, ...]) -> list[str]:
    """The rule's steps, consecutive ones with the same size and reason merged: "B'=16 × 4 (why)"."""
    merged: list[list] = []
    for s in steps:
        if merged and merged[-1][0] == s.batch_size and merged[-1][2] == s.why:
            merged[-1][1] += s.seeds
        else:
            merged.append([s.batch_size, s.seeds, s.why])
    return [f"B'={b} × {n} ({why})" for b, n, why in merged]


def write_ladder_report(result: LadderResult, out: Path) -> None:
    figure_ladder(result, out / "ladder.png")
    write_text_atomic(out / "ladder.md", f"# Proxy ladder\n\n![ladder](ladder.png)\n\n{ladder_markdown(result)}\n")


def _capital(text: str) -> str:
    return text[:1].upper() + text[1:]
