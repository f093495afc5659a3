"""The final-model audit's outputs: final_audit.json, final_audit.md (the threat model first), the scores of the
held-in and held-out canaries (final_scores.npz, each side sorted: no canary's identity) and their figure
(final_scores.png), from the result of tanplan.workflow.final_audit.run_final_audit."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np

from tanplan.fileio import write_bytes_atomic, write_json_atomic, write_text_atomic
from tanplan.outcomes.final_audit import FinalAuditResult
from tanplan.reports.figures import figure


def figure_scores(result: FinalAuditResult, scores_in, scores_out, path: Path) -> Path:
    """The canaries' scores on the released model, held in against held out."""
    with figure(path, figsize=(6.5, 4)) as (fig, ax):
        bins = np.histogram_bin_edges(np.concatenate([scores_in, scores_out]), bins=40)
        ax.hist(scores_out, bins=bins, alpha=0.55, color="C0", label=f"held out ({len(scores_out)})")
        ax.hist(scores_in, bins=bins, alpha=0.55, color="C3", label=f"held in ({len(scores_in)})")
        ax.set(xlabel="logit margin of the canary's label, z_y − max_{k≠y} z_k", ylabel="canaries",
               title=f"final model only: ε ≥ {result.lower_bound:.3g} ({result.confidence:.0%}) vs claimed "
                     f"{result.claimed_epsilon:.3g}: {result.verdict}")
        ax.legend(fontsize=8)
    return path


def final_audit_markdown(result: FinalAuditResult) -> str:
    claim, threat = result.claim, result.threat_model
    fmt = lambda v: "—" if v is None else f"{v:.4g}"  # noqa: E731
    rows = [
        ("verdict", f"**{result.verdict}**: {result.reason}"),
        ("claimed ε (add/remove-one)", f"{fmt(claim.epsilon_rdp)} (RDP), {fmt(claim.epsilon_pld)} (PLD) at "
                                       f"δ = {claim.delta:.3g}; accountant of record: {claim.accountant.upper()}"),
        (f"empirical lower bound ({result.confidence:.0%})", f"ε ≥ {result.lower_bound:.4g}: the one-sided "
                                                                  f"interval [{result.lower_bound:.4g}, ∞)"),
        ("bound / claim", f"{result.ratio:.3g}"),
        ("guesses", f"{result.correct_guesses} right of {result.guesses} (half the top scores guessed in, half the "
                    "bottom ones out)"),
        ("score", result.score),
        ("AUROC of the scores", f"{result.auroc:.4f}"),
        ("canaries", f"{result.canaries} {result.canary_kind} ({result.held_in} held in, {result.held_out} held out)"),
        ("audited run", f"{'proxy ' if result.proxy else ''}N = {result.dataset_size}, B = {result.batch_size}, "
                        f"S = {result.steps}, σ = {result.sigma:.4g}, C = {result.clip_norm:g}, test accuracy "
                        f"{fmt(result.test_accuracy)}"),
        ("method", result.method),
        ("wall time", f"{result.wall_seconds:.1f} s"),
    ]
    table = "\n".join(["| | |", "|---|---|", *(f"| {k} | {v} |" for k, v in rows)])
    threats = "\n".join(f"- **{name}**: {text}." for name, text in (
        ("The adversary sees", threat.sees), ("It chooses", threat.chooses), ("It does not see", threat.does_not_see),
        ("This audit can show", threat.can_show), ("It cannot show", threat.cannot_show)))
    return (f"# Final-model (black-box) privacy audit\n\n## Threat model\n\n{threats}\n\n## Result\n\n{table}\n\n"
            f"{result.note}\n\n![canary scores](final_scores.png)\n")


def write_final_audit(result: FinalAuditResult, scores_in, scores_out, out: Path) -> list[Path]:
    """final_audit.json, final_audit.md, final_scores.npz and final_scores.png in out; returns the paths written."""
    out = Path(out)
    buffer = io.BytesIO()
    np.savez(buffer, scores_in=np.sort(scores_in), scores_out=np.sort(scores_out))
    return [write_json_atomic(out / "final_audit.json", result.to_dict()),
            write_text_atomic(out / "final_audit.md", final_audit_markdown(result)),
            write_bytes_atomic(out / "final_scores.npz", buffer.getvalue()),
            figure_scores(result, scores_in, scores_out, out / "final_scores.png")]
