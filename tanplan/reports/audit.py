"""The privacy audit's outputs: audit.json, audit.md, the canary scores (canary_scores.npz) and their figure
(canary_scores.png), from the result of tanplan.workflow.audit.run_audit."""

from __future__ import annotations

import io
import math
from pathlib import Path

import numpy as np

from tanplan.fileio import write_bytes_atomic, write_json_atomic, write_text_atomic
from tanplan.outcomes.audit import AuditResult
from tanplan.reports.figures import figure


def figure_scores(result: AuditResult, scores_in, scores_out, sums_in, sums_out, path: Path) -> Path:
    """Left: the audit's scores, held in against held out, with the threshold of the bound's guesses. Right:
    Σ_t ⟨noisy sum_t, u_j⟩/C per canary, against N(0, S·σ²), what a held-out canary shows of pure noise."""
    with figure(path, 1, 2, figsize=(11, 4)) as (fig, (left, right)):
        bins = np.histogram_bin_edges(np.concatenate([scores_in, scores_out]), bins=40)
        left.hist(scores_out, bins=bins, alpha=0.55, color="C0", label=f"held out ({len(scores_out)})")
        left.hist(scores_in, bins=bins, alpha=0.55, color="C3", label=f"held in ({len(scores_in)})")
        ranked = np.sort(np.concatenate([scores_in, scores_out]))[::-1]
        if result.guessed_in:
            left.axvline(ranked[result.guessed_in - 1], color="C3", ls="--", lw=1,
                         label=f"top {result.guessed_in} guessed in")
        if result.guessed_out:
            left.axvline(ranked[len(ranked) - result.guessed_out], color="C0", ls="--", lw=1,
                         label=f"bottom {result.guessed_out} guessed out ({result.correct_guesses} of "
                               f"{result.guesses} right)")
        left.set(xlabel="score: Σ_t log(1 − q + q·exp((x_t − ½)/σ²))", ylabel="canaries",
                 title=f"ε ≥ {result.lower_bound:.3g} (f-DP {result.fdp_estimate:.3g}; {result.confidence:.0%}) vs "
                       f"claimed {result.claimed_epsilon:.3g}: {result.verdict}")
        left.legend(fontsize=8)
        bins = np.histogram_bin_edges(np.concatenate([sums_in, sums_out]), bins=40)
        right.hist(sums_out, bins=bins, alpha=0.55, color="C0", density=True, label="held out")
        right.hist(sums_in, bins=bins, alpha=0.55, color="C3", density=True, label="held in")
        spread = result.sigma * math.sqrt(result.steps)
        grid = np.linspace(bins[0], bins[-1], 200)
        right.plot(grid, np.exp(-0.5 * (grid / spread) ** 2) / (spread * math.sqrt(2 * math.pi)), "k-", lw=1,
                   label=f"N(0, S·σ²): noise alone (σ = {result.sigma:.3g})")
        right.set(xlabel="Σ_t ⟨noisy sum_t − shadow sum_t, c_j⟩ / C²" if result.canary_kind == "gradient" else
                  "Σ_t ⟨noisy sum_t − real rows' sum_t, u_jt⟩ / C, less its label's mean", ylabel="density",
                  title=f"{result.canaries} canaries, S = {result.steps}, q = "
                        f"{result.batch_size / result.dataset_size:.3g}")
        right.legend(fontsize=8)
    return path


def audit_markdown(result: AuditResult) -> str:
    claim = result.claim
    fmt = lambda v: "—" if v is None else f"{v:.4g}"  # noqa: E731
    rows = [
        ("verdict", f"**{result.verdict}**: {result.reason}"),
        ("claimed ε (add/remove-one)", f"{fmt(claim.epsilon_rdp)} (RDP), {fmt(claim.epsilon_pld)} (PLD) at "
                                       f"δ = {claim.delta:.3g}; accountant of record: {claim.accountant.upper()}"),
        ("claimed ε (replace-one)", fmt(claim.epsilon_replace_one) if claim.epsilon_replace_one is not None
         else "not stated by this run"),
        (f"empirical lower bound ({result.confidence:.0%})", f"ε ≥ {result.lower_bound:.4g}: the one-sided "
                                                                  f"interval [{result.lower_bound:.4g}, ∞)"),
        ("bound / claim", f"{result.ratio:.3g}"),
        ("guesses", f"{result.correct_guesses} of {result.guesses} right: the {result.guessed_in} highest scores "
                    f"guessed held in, the {result.guessed_out} lowest held out, no guess on the rest"),
        (f"f-DP estimate ({result.confidence:.0%})", f"ε ≥ {result.fdp_estimate:.4g} if the trade-off curve is "
                                                       f"Gaussian (μ-GDP); ratio {result.fdp_ratio:.3g}; "
                                                       f"{result.fdp_correct_guesses} of {result.fdp_guesses} right"),
        ("ceiling at this canary count", f"ε ≥ {result.ceiling:.4g} (bound), {result.fdp_ceiling:.4g} (f-DP "
                                         "estimate): what perfect guesses on every canary would prove"),
        ("AUROC of the scores", f"{result.auroc:.4f}"),
        ("canaries", f"{result.canaries} ({result.held_in} held in, {result.held_out} held out), "
                     + (f"{result.canary_coordinates} coordinates each, norm C = {result.clip_norm:g}"
                        if result.canary_coordinates is not None else
                        f"crafted examples clipped to C = {result.clip_norm:g} with each batch (input-space)")),
        ("run", f"{'proxy ' if result.proxy else ''}N = {result.dataset_size}, B = {result.batch_size}, "
                f"S = {result.steps}, σ = {result.sigma:.4g}"),
        ("method", result.method),
        ("wall time", f"{result.wall_seconds:.1f} s"),
    ]
    table = "\n".join(["| | |", "|---|---|", *(f"| {k} | {v} |" for k, v in rows)])
    return f"# Privacy audit\n\n{table}\n\n{result.note}\n\n![canary scores](canary_scores.png)\n"


def write_audit(result: AuditResult, scores_in, scores_out, sums_in, sums_out, out: Path) -> list[Path]:
    """audit.json, audit.md, canary_scores.npz and canary_scores.png in out; returns the paths written."""
    out = Path(out)
    buffer = io.BytesIO()
    np.savez(buffer, scores_in=scores_in, scores_out=scores_out, sums_in=sums_in, sums_out=sums_out)
    return [write_json_atomic(out / "audit.json", result.to_dict()),
            write_text_atomic(out / "audit.md", audit_markdown(result)),
            write_bytes_atomic(out / "canary_scores.npz", buffer.getvalue()),
            figure_scores(result, scores_in, scores_out, sums_in, sums_out, out / "canary_scores.png")]
