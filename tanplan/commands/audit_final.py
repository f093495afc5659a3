"""`tanplan audit --final-model [--canary-kind K] ...`: the black-box audit (tanplan.workflow.final_audit), run
from the audit command: the config's run trained with M input canaries, scored on its released model only."""

from __future__ import annotations

import sys

from tanplan import api
from tanplan.commands._audit_output import finish
from tanplan.outcomes.final_audit import FinalAuditResult


def execute_final(args) -> int:
    # every input is checked before any compute (tanplan.api.final_audit)
    result = api.final_audit(args.config, args.out, overrides=args.overrides, canaries=args.canaries,
                             kind=args.canary_kind, proxy_batch_size=args.proxy_batch_size,
                             confidence=args.confidence, progress=not args.quiet,
                             log=lambda line: print(line, file=sys.stderr))
    return finish(result, args, "tanplan audit --final-model", _rows(result, args.out))


def _rows(result: FinalAuditResult, out: str | None) -> list[tuple[str, str]]:
    """The terminal's table of a final-model audit, its threat model first."""
    claim, threat = result.claim, result.threat_model
    fmt = lambda v: "-" if v is None else f"{v:.4g}"  # noqa: E731
    rows = [("adversary sees", threat.sees), ("adversary chooses", threat.chooses),
            ("it does not see", threat.does_not_see),
            ("claimed ε (add/remove-one)", f"{fmt(claim.epsilon_rdp)} (RDP), {fmt(claim.epsilon_pld)} (PLD) "
                                            f"at δ = {claim.delta:.3g}"),
            (f"lower bound ({result.confidence:.0%})", f"ε ≥ {result.lower_bound:.4g}: the one-sided interval "
                                                        f"[{result.lower_bound:.4g}, ∞)"),
            ("bound / claim", f"{result.ratio:.3g} (claim: {result.claimed_accountant.upper()}, "
                              f"{result.claimed_epsilon:.4g})"),
            ("canaries", f"{result.canaries} {result.canary_kind} ({result.held_in} held in); {result.guesses} "
                         f"guessed, {result.correct_guesses} right; AUROC {result.auroc:.3f}"),
            ("run", f"{'proxy ' if result.proxy else ''}B = {result.batch_size}, S = {result.steps}, "
                    f"σ = {result.sigma:.4g}, N = {result.dataset_size}, test accuracy {fmt(result.test_accuracy)}"),
            ("verdict", result.verdict),
            ("what it cannot show", threat.cannot_show),
            ("wall time", f"{result.wall_seconds:.0f} s")]
    if out:
        rows.append(("written to", f"{out} (final_audit.md, final_audit.json, final_scores.png; run/ holds the "
                                   "audited run: NOT a private release)"))
    return rows
