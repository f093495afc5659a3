"""The budget frontier's table, figure and report: `tanplan plan --compute`'s lines (a FrontierResult) and
`tanplan optimize`'s report.md, frontier.png and candidates.csv (an OptimizeResult, tanplan.outcomes)."""

from __future__ import annotations

import csv
import io
from pathlib import Path

from tanplan.fileio import write_text_atomic
from tanplan.outcomes.optimize import FrontierRow, LawFit, OptimizeResult
from tanplan.outcomes.planning import FrontierResult
from tanplan.reports.figures import figure

# Overrides a candidate's launch command spells out (the others are the config's own or fixed by launch).
_SHOWN = ("train.batch_size", "train.steps", "train.learning_rate", "train.ema_decay", "train.warmup_steps")


def frontier_lines(result: FrontierResult) -> list[str]:
    """`tanplan plan --compute` for humans: the budget, then one line per candidate."""
    lines = []
    t = result.throughput
    if t:
        how = f"measured on {t.model}" if t.measured else "given"
        lines.append(f"compute: {t.device_hours:g} device-hours × 3600 × {t.samples_per_second:.4g} samples/s "
                     f"({how}) = {result.compute:,} examples")
    lines.append(f"frontier at ε = {result.epsilon:g} (RDP), δ = {result.delta:.3g}, N = {result.dataset_size:,}, "
                 f"C = {result.compute:,} examples (B·S ≤ C):")
    lines.append(f"  {'B':>8} {'S':>8} {'σ':>9} {'ε RDP':>7} {'η_step':>10} {'B·S/C':>6}  regime")
    for c in result.candidates:
        lines.append(f"  {c.batch_size:>8,} {c.steps:>8,} {c.sigma:>9.4g} {c.eps_rdp:>7.4f} "
                     f"{c.eta_step:>10.4g} {c.compute / result.compute:>6.3f}  {c.regime}")
    for d in result.dropped:
        lines.append(f"  dropped B = {d.batch_size}, S = {d.steps}: {d.reason}")
    lines += [f"note: {n}" for n in result.notes]
    lines.append("σ is calibrated so that each plan's exact ε (RDP) is at most the budget; which split of C trains "
                 "best is for `tanplan optimize` to find.")
    return lines


def launch_command(source: str, row: FrontierRow, out: str) -> str:
    """The `tanplan launch` command that trains the candidate of `row` at full scale."""
    sets = " ".join(f"--set {k}={_value(row.overrides[k])}" for k in _SHOWN if k in row.overrides
                    and not (k in ("train.ema_decay", "train.warmup_steps") and not row.overrides[k]))
    return " ".join(p for p in ("tanplan launch", source, sets, f"--out {out}") if p)


def _value(v) -> str:
    return repr(float(v)) if isinstance(v, float) else str(v)


def _pct(x: float) -> str:
    return f"{100 * x:.1f}"


def figure_frontier(result: OptimizeResult, path: Path) -> Path:
    """Predicted accuracy against S along the frontier, its prediction band, the proxy runs, the chosen
    point and the runner-up, and after a launch the actual full-scale accuracy."""
    rows, law = result.frontier, result.law
    with figure(path, figsize=(6.5, 4.2)) as (fig, ax):
        s = [r.steps for r in rows]
        ax.fill_between(s, [r.prediction_interval[0] for r in rows], [r.prediction_interval[1] for r in rows],
                        color="C0", alpha=0.15, label=f"{law.level:.0%} prediction interval")
        inside = [r for r in rows if r.eligible]
        ax.plot([r.steps for r in inside], [r.predicted_accuracy for r in inside], "-", color="C0",
                label=f"{law.model} law in ln S")
        ax.plot(s, [r.predicted_accuracy for r in rows], ":", color="C0", label="extrapolated (not recommended)")
        for inside, style, name in ((True, "x", "proxy runs (B' = max(B/savings, floor))"),
                                    (False, "+", "proxy runs left out of the law")):
            runs = [(r.steps, a) for r in rows if (law.range.low <= r.steps <= law.range.high) == inside
                    for a in r.runs]
            if runs:
                ax.plot([x for x, _ in runs], [y for _, y in runs], style, color="C7" if inside else "C3", label=name)
        for row, style, name in ((result.recommendation, "o", "recommended"), (result.runner_up, "s", "runner-up")):
            low, high = row.prediction_interval
            ax.errorbar([row.steps], [row.predicted_accuracy], yerr=[[row.predicted_accuracy - low],
                        [high - row.predicted_accuracy]], fmt=style, color="C1" if name == "recommended" else "C2",
                        capsize=4, label=f"{name}: B = {row.batch_size:,}, S = {row.steps:,}")
        if result.launch:
            ax.plot([result.launch.steps], [result.launch.actual_accuracy], "*", ms=14, color="C3",
                    label="actual full-scale run")
        ax.set(xscale="log", xlabel="steps S (batch B = ⌊C/S⌋, σ calibrated to ε)", ylabel="test accuracy",
               title=f"Budget frontier: ε = {result.epsilon:g}, C = {result.compute:,} examples")
        ax.legend(fontsize=7)
    return path


def candidates_csv(result: OptimizeResult) -> str:
    keys = ("batch_size", "steps", "sigma", "eps_rdp", "eta_step", "regime", "compute", "learning_rate", "ema_decay",
            "proxy_batch_size", "proxy_sigma", "simulated", "mean_accuracy", "predicted_accuracy", "low", "high",
            "eligible")
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(keys)
    for r in result.frontier:
        low, high = r.prediction_interval
        values = {**r.to_dict(), "low": low, "high": high}
        writer.writerow(["" if values.get(k) is None else values.get(k) for k in keys])
    return buf.getvalue()


def optimize_markdown(result: OptimizeResult) -> str:
    level, settings = result.law.level, result.settings
    best, runner, worst = result.recommendation, result.runner_up, result.worst
    lines = [f"# Budget frontier: {result.experiment}", "",
             f"Privacy budget ε = {result.epsilon:g} at δ = {result.delta:.3g} (RDP, Poisson sampling, "
             f"add/remove-one), N = {result.dataset_size:,} examples, compute C = {result.compute:,} examples "
             f"(B·S). Every candidate below spends at most C and at most ε: B = ⌊C/S⌋, σ calibrated to ε.", ""]

    def pick(name: str, row: FrontierRow) -> str:
        low, high = row.prediction_interval
        return (f"- **{name}**: B = {row.batch_size:,}, S = {row.steps:,}, σ = {row.sigma:.4g} (ε = "
                f"{row.eps_rdp:.4f}, {row.regime}), learning rate {row.learning_rate:.4g}: predicted "
                f"accuracy {_pct(row.predicted_accuracy)}% [{_pct(low)}, {_pct(high)}]")

    lines += ["## Recommendation", "", pick("recommended", best), pick("runner-up", runner),
              pick("worst-predicted", worst), "", f"Verdict: {result.verdict}.", ""]
    comp = {c.steps: c for c in result.comparisons}
    for name, row in (("runner-up", runner), ("worst-predicted", worst)):
        c = comp[row.steps]
        lines.append(f"- recommended − {name}: {_pct(c.difference)} points, {level:.0%} interval "
                     f"[{_pct(c.interval[0])}, {_pct(c.interval[1])}] → "
                     f"{'told apart' if c.distinguishable else 'cannot be told apart'}")
    launched = result.launch
    if launched:
        low, high = launched.prediction_interval
        lines += ["", "## Launch", "",
                  f"The recommendation trained at full scale reached **{_pct(launched.actual_accuracy)}%** "
                  f"(predicted {_pct(launched.predicted_accuracy)}% [{_pct(low)}, {_pct(high)}]: "
                  f"{'inside' if launched.inside_interval else 'OUTSIDE'} the interval), exact ε = "
                  f"{launched.epsilon_rdp:.4g} (RDP), {launched.epsilon_pld:.4g} (PLD) in "
                  f"{launched.wall_seconds:.0f} s; files in {launched.folder}."]
    law = result.law
    coef = f"{law.coef[0]:.4g}" + "".join(f" {'−' if c < 0 else '+'} {abs(c):.4g}·u{'²' if k == 2 else ''}"
                                          for k, c in enumerate(law.coef) if k)
    lines += ["", "## How it was chosen", "",
              f"{len(result.points)} proxy runs: {settings.candidates} candidates nearest S_ref = "
              f"{result.reference_steps} (spaced ×{settings.steps_factor:g}) × {settings.seeds} seeds, each "
              f"at B' = max(B/{settings.savings:g}, {settings.min_proxy_batch_size}) with σ·B'/B and the same S "
              f"(constant η_step): one savings factor for all, as in TAN's privacy-parameter search, but no proxy "
              f"below the batch law's knee, where sampling noise the target does not have moves its accuracy. "
              + ("The learning rate is scaled by S_ref/S and the EMA horizon by S/S_ref (TAN §4.3). "
                 if settings.rescale else "Hyper-parameters are the config's, unscaled. "),
              "",
              f"Law ({law.model}, u = ln S − {law.x_mean:.4g}): accuracy = {coef}; residual std "
              f"{_pct(law.residual_std)} points over {law.n} runs ({law.dof} degrees of freedom), "
              f"R² = {law.r2:.3f}. Intervals are {level:.0%} prediction intervals for one new run at proxy "
              f"scale: they cover seed noise and the law's uncertainty, not a systematic gap between a proxy and "
              f"its full-scale run (small where accuracy is flat in B at constant η_step, TAN Fig. 4). Candidates "
              f"outside the law's range are extrapolated and never recommended.", "", _range_text(law), "",
              f"Proxy compute: {result.proxy_examples:,} examples = **{result.proxy_compute_fraction:.3f}** "
              f"of one launch of the recommendation ({best.compute:,} examples); the simulation took "
              f"{result.simulation_seconds:.0f} s.", "", "![frontier](frontier.png)", "",
              "## Every candidate", "",
              "| B | S | σ | exact ε (RDP) | η_step | regime | cost B·S (÷ C) | lr | proxy B' | proxy runs | "
              "predicted [interval] |",
              "|---|---|---|---|---|---|---|---|---|---|---|"]
    lines += [_candidate_line(r, result.compute) for r in result.frontier]
    lines += [f"\nDropped B = {d.batch_size}, S = {d.steps}: {d.reason}" for d in result.dropped]
    source = result.source or "--config CONFIG"
    lines += ["", "## Launch a candidate", "", "The recommendation (what `--launch` runs) and the worst-predicted "
              "candidate, each through the same launch as `tanplan run`:", "", "```sh",
              launch_command(source, best, f"runs/launch_S{best.steps}"),
              launch_command(source, worst, f"runs/launch_S{worst.steps}"), "```", "",
              "", "## Privacy", "", _privacy_text(result)]
    return "\n".join(lines) + "\n"


def _candidate_line(r: FrontierRow, compute: int) -> str:
    """One candidate's row of the report's table."""
    low, high = r.prediction_interval
    runs = ", ".join(_pct(a) for a in r.runs) if r.runs else "-"
    mark = "" if r.eligible else (" (outside the law's range)" if r.outside_law else " (extrapolated)")
    return (f"| {r.batch_size:,} | {r.steps:,} | {r.sigma:.4g} | {r.eps_rdp:.4f} | "
            f"{r.eta_step:.3g} | {r.regime} | {r.compute:,} ({r.compute / compute:.3f}) | "
            f"{r.learning_rate:.3g} | {r.proxy_batch_size} | {runs} | {_pct(r.predicted_accuracy)} "
            f"[{_pct(low)}, {_pct(high)}]{mark} |")


def _privacy_text(result: OptimizeResult) -> str:
    """Which ε is the guarantee for the private examples, given where the proxies learned."""
    if result.tuning_data is None:  # no output folder: no ledgers to compose
        return "The proxies' runs were not accounted (no output folder)."
    spent = result.privacy_spent  # tanplan.workflow.privacy_spent.report's
    epsilon, note = spent.epsilon, spent.note
    figure = (f"ε = {epsilon:.4g} ({spent.accountant.upper()}; RDP {spent.epsilon_rdp:.4g})"
              if epsilon is not None else "no guarantee (a non-private run)")
    note = f" ({note})" if note else ""
    text = (f"Tuning data: {result.tuning_data} ({result.tuning.source}). The {spent.runs} proxy runs "
            f"composed spent {figure}{note} on the data they trained on. Which is the guarantee: "
            f"{result.guarantee}.")
    if result.epsilon_total_runs:
        pld = result.epsilon_total_pld
        text += (f" Total ε on the private training set: **{result.epsilon_total_rdp:.4g}** (RDP), "
                 f"{'-' if pld is None else f'{pld:.4g}'} (PLD) at δ = {spent.delta:.3g}.")
    else:
        text += " Nothing has been released about the private training set yet."
    return text


def _range_text(law: LawFit) -> str:
    span = law.range
    tests = [f"{name} p = {p:.3g}" for name, p in (("lack of fit", span.lack_of_fit_p),
                                                   ("equal variances (Bartlett)", span.equal_variance_p))
             if p is not None]
    tests = "; ".join(tests) if tests else "no test possible without spare candidates or seeds"
    if not span.excluded:
        return f"The law covers S = {span.low:,} to {span.high:,} (over every simulated candidate: {tests})."
    how = ("the widest run of consecutive simulated S on which it passes both tests at "
           f"{1 - law.level:.2g}, the least scattered among equally wide ones" if span.passes else
           "NO run of three or more consecutive simulated S passes both tests: these three scatter least, and the "
           "intervals assume what the tests reject")
    return (f"The law covers S = {span.low:,} to {span.high:,}, {how}: simulated S = "
            f"{', '.join(f'{s:,}' for s in span.excluded)} left out (over every simulated candidate: {tests}).")


def write_optimize_report(result: OptimizeResult, out: Path) -> None:
    """report.md, frontier.png and candidates.csv in out."""
    out = Path(out)
    figure_frontier(result, out / "frontier.png")
    write_text_atomic(out / "candidates.csv", candidates_csv(result))
    write_text_atomic(out / "report.md", optimize_markdown(result))


__all__ = ["frontier_lines", "figure_frontier", "candidates_csv", "optimize_markdown", "write_optimize_report",
           "launch_command"]
