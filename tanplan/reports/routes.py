"""The report of `tanplan run --routes` (routes.md) and its figure (routes.png), from the RoutesResult."""

from __future__ import annotations

from pathlib import Path

from tanplan.outcomes.routes import RoutePrediction, RoutesResult
from tanplan.reports.figures import figure


def _prediction(r: RoutePrediction) -> str:
    if r.predicted_accuracy is None:
        return "—"
    low, high = r.prediction_interval or (None, None)
    return f"{r.predicted_accuracy:.4f} [{low:.4f}, {high:.4f}]" if low is not None else f"{r.predicted_accuracy:.4f}"


def _epsilon(r: RoutePrediction) -> str:
    if r.epsilon_of_record is None:
        return "∞ (not private)"
    return f"{r.epsilon_of_record:.4g} ({r.epsilon_accountant.upper()})"


def _verdict(r: RoutePrediction) -> str:
    why = f"; {r.verdict}" if r.verdict and not r.law_holds else ""
    note = f" ({r.note})" if r.note else ""
    return f"{r.standing}{why}{note}".replace("|", "/")


def routes_markdown(result: RoutesResult) -> str:
    """routes.md: one row a route, the recommendation, and the launched route's accuracy when it launched."""
    lines = [
        "# tanplan run --routes: the routes compared by prediction",
        "",
        f"Each route's prediction for one launch at the config's ε, B and S (δ = {result.delta:.3g}), with its "
        f"{result.level:.0%} interval; its ε of record is the launch's composed with what its init inherited, "
        f"checked against privacy.total_epsilon = {result.epsilon_total_budget:g} before anything trained.",
        "",
        "| route | method | predicted accuracy [interval] | launch compute | proxy compute | ε of record | verdict |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in result.routes:
        lines.append(f"| {r.route} | {r.method} | {_prediction(r)} | {r.launch_compute:,} {r.launch_unit} | "
                     f"{r.proxy_compute:,} {r.proxy_unit} | {_epsilon(r)} | {_verdict(r)} |")
    lines += ["", f"**Recommendation**: {result.recommendation}.", "",
              "The highest predicted mean wins among the routes whose law holds (an exact tie: the route named "
              "first); overlapping intervals are reported, not resolved: the proxies cannot separate those routes. "
              "Launch compute is the launch's B·S example-gradients for DP-SGD (an example-gradient of a frozen or "
              "adapter route costs less than a full one), example-forward passes of the encoder for the head; "
              "proxy compute is what the prediction processed so far. Each route's files: routes/<route>/.",
              "", "![predicted accuracy per route](routes.png)"]
    if result.launched is not None:
        inside = "inside" if result.actual_inside_interval else "outside"
        where = "launch/head.json" if result.launched == "heads" else "report.md, launch/"
        lines += ["", f"## Launched: {result.launched}",
                  f"Actual accuracy {result.actual_accuracy:.4f}, {inside} its interval; ε of record "
                  f"{result.epsilon:.4g} (δ = {result.delta:.3g}). Its files: {where}."]
    return "\n".join(lines) + "\n"


def routes_figure(result: RoutesResult, path: str | Path) -> None:
    """Predicted accuracy with its interval per route (grey: not recommended, its law does not hold); a star
    at the launched route's actual accuracy."""
    rows = [r for r in result.routes if r.predicted_accuracy is not None]
    with figure(path, figsize=(max(4.0, 1.3 * len(result.routes) + 1.5), 3.8)) as (fig, ax):
        for i, r in enumerate(result.routes):
            if r.predicted_accuracy is None:
                continue
            low, high = r.prediction_interval
            colour = "C2" if r.route == result.recommended else ("C0" if r.law_holds else "0.6")
            ax.errorbar([i], [r.predicted_accuracy], yerr=[[r.predicted_accuracy - low], [high - r.predicted_accuracy]],
                        fmt="o", color=colour, capsize=5)
            if r.route == result.launched and result.actual_accuracy is not None:
                ax.plot([i], [result.actual_accuracy], "*", ms=14, color="C3", label="launched: actual")
        ax.set_xticks(range(len(result.routes)), [r.route for r in result.routes])
        ax.set_xlim(-0.6, len(result.routes) - 0.4)
        ax.set_ylabel(f"predicted test accuracy ({result.level:.0%} interval)")
        ax.set_title("routes compared by prediction" + (f" (recommended: {result.recommended})"
                                                         if result.recommended else ""))
        ax.grid(alpha=0.3, axis="y")
        if rows and result.launched is not None:
            ax.legend(fontsize=8, loc="lower right")
