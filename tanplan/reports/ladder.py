"""The proxy ladder's figure and markdown, from the result dict of tanplan.workflow.ladder.run_ladder."""

from __future__ import annotations

from pathlib import Path

from tanplan.fileio import write_text_atomic
from tanplan.reports.figures import figure


def figure_ladder(result: dict, path: Path) -> Path:
    """Accuracy against B' per rung (every seed, mean ± std), each tested rise, the knee and the fitted rungs."""
    rungs = result["rungs"]
    sizes = [r["batch_size"] for r in rungs]
    with figure(path, figsize=(6.5, 4)) as (fig, ax):
        for r in rungs:
            ax.plot([r["batch_size"]] * len(r["accuracies"]), r["accuracies"], ".", color="0.6", ms=6)
        ax.errorbar(sizes, [r["mean"] for r in rungs], yerr=[r["std"] for r in rungs], fmt="o-", color="C0",
                    capsize=3, label=f"rung mean ± std ({result['seeds']} seeds; grey: each seed)")
        for t in result["tests"]:
            upper = next(r for r in rungs if r["batch_size"] == t["upper"])
            ax.annotate(f"{t['rise']:+.3f}\np={t['p_value']:.2f}", ((t["lower"] * t["upper"]) ** 0.5, upper["mean"]),
                        textcoords="offset points", xytext=(0, 12), ha="center", fontsize=7,
                        color="C0" if t["rising"] else "C3")
        if result["knee"] is not None:
            fitted = result["past_knee"]
            ax.axvspan(min(fitted) / 1.25, max(fitted) * 1.25, color="C2", alpha=0.12, label="rungs the law is fitted on")
            ax.axvline(result["knee"], color="C3", ls="--", label=f"knee B'={result['knee']} (rise not significant, "
                                                                   f"α={result['alpha']:g})")
            title = f"Proxy ladder: knee at B'={result['knee']}"
        else:
            title = f"Proxy ladder: no knee within {result['max_proxy_fraction']:.3g} of the target's compute"
        ax.set_xscale("log", base=2)
        ax.set_xticks(sizes, [str(b) for b in sizes])
        ax.set(xlabel="proxy batch size B' (constant η_step and S)", ylabel="test accuracy", title=title)
        ax.legend(fontsize=7, loc="lower right")
    return path


def ladder_markdown(result: dict) -> str:
    """Every rung, each tested rise, the knee (or why there is none) and the budget."""
    tests = {t["upper"]: t for t in result["tests"]}
    lines = ["| B' | σ' | accuracies | mean ± std | rise from the rung below | one-sided p | verdict |",
             "|---|---|---|---|---|---|---|"]
    for r in result["rungs"]:
        t = tests.get(r["batch_size"])
        rise = f"{t['rise']:+.4f} ± {t['se']:.4f}" if t else "—"
        p = f"{t['p_value']:.3f}" if t else "—"
        verdict = ("rising" if t["rising"] else f"not rising: knee at B'={t['lower']}") if t else "first rung"
        accs = ", ".join(f"{a:.4f}" for a in r["accuracies"])
        lines.append(f"| {r['batch_size']} | {r['sigma']:.4g} | {accs} | {r['mean']:.4f} ± {r['std']:.4f} | {rise} | "
                     f"{p} | {verdict} |")
    budget = (f"Budget: the ladder may spend {result['max_proxy_fraction']:.4g} of the target's B·S "
              f"(B = {result['target_batch_size']}, S = {result['steps']}; fit.max_proxy_fraction); it spent "
              f"{result['spent_fraction']:.4f} on {sum(len(r['accuracies']) for r in result['rungs'])} runs.")
    rule = (f"Rule: double B' from {result['start']} with {result['seeds']} seeds a rung; stop at the first rise "
            f"that a one-sided t-test (pooled variance of the two rungs) does not find significant at "
            f"α = {result['alpha']:g}; the knee is the lower rung of that pair.")
    change = f"\n\n**What to change**: {result['what_to_change']}." if result.get("what_to_change") else ""
    return "\n".join(lines) + f"\n\n**{_capital(result['reason'])}.**{change}\n\n{rule}\n\n{budget}"


def write_ladder_report(result: dict, out: Path) -> None:
    figure_ladder(result, out / "ladder.png")
    write_text_atomic(out / "ladder.md", f"# Proxy ladder\n\n![ladder](ladder.png)\n\n{ladder_markdown(result)}\n")


def _capital(text: str) -> str:
    return text[:1].upper() + text[1:]
