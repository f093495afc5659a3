"""`tanplan audit --config FILE [--canaries M] [--canary-kind gradient|input] [--proxy-batch-size B'] [--out DIR] [--json]`:
train the run the config describes with M canaries and bound its ε from below (tanplan.workflow.audit)."""

from __future__ import annotations

import argparse
import sys

from tanplan import api
from tanplan.commands._args import positive_int
from tanplan.commands._audit_output import finish
from tanplan.commands.audit_final import execute_final
from tanplan.errors import UsageError
from tanplan.outcomes.audit import AuditResult
from tanplan.outcomes.final_audit import CANARY_KINDS as FINAL_KINDS
from tanplan.outcomes.final_audit import DEFAULT_KIND
from tanplan.workflow.audit import CANARY_KINDS, DEFAULT_CANARIES, DEFAULT_CONFIDENCE, RUN_FOLDER

HELP = ("audit a run's privacy empirically: train it with gradient canaries, bound ε from below (one-run audit) and "
        "compare with the ε it claims (exit 5 when the bound exceeds it)")


def _confidence(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not 0.5 < value < 1:
        raise argparse.ArgumentTypeError(f"{value:g} is not allowed: must be in (0.5, 1), e.g. 0.95")
    return value


def configure(parser) -> None:
    parser.add_argument("--config", default=None, help="TOML config of the run to audit (default: built-in defaults)")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="SECTION.KEY=VALUE",
                        help="override a config key, e.g. --set train.steps=100 (repeatable)")
    parser.add_argument("--canaries", type=positive_int, default=DEFAULT_CANARIES, metavar="M",
                        help=f"gradient canaries, each held in by a secret fair coin (default {DEFAULT_CANARIES}; "
                             "more give a tighter bound, up to a ceiling: docs/privacy.md)")
    parser.add_argument("--proxy-batch-size", type=positive_int, default=None, metavar="B'",
                        help="audit the proxy (B', σ·B'/B, S) instead of the target; its own ε is the claim")
    parser.add_argument("--confidence", type=_confidence, default=DEFAULT_CONFIDENCE, metavar="P",
                        help=f"confidence of the lower bound (default {DEFAULT_CONFIDENCE:g})")
    parser.add_argument("--out", default=None, metavar="DIR",
                        help="a new or empty folder: write DIR/run (the audited run: NOT a private release, never "
                             "resumed), audit.json, audit.md, canary_scores.png")
    parser.add_argument("--json", action="store_true", help="print audit.json's content as JSON")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    parser.add_argument("--final-model", action="store_true",
                        help="the black-box audit instead: M input canaries, each trained in by a secret fair coin, "
                             "scored on the released model only (writes final_audit.json, final_audit.md)")
    parser.add_argument("--canary-kind", choices=(*CANARY_KINDS, *FINAL_KINDS), default=None,
                        help="white-box: gradient (vectors of norm C added after clipping; the default) or input "
                             "(crafted examples clipped with the batch, which also see a break in clipping); with "
                             "--final-model: mislabelled training examples or crafted out-of-distribution inputs "
                             f"(default {DEFAULT_KIND})")


def execute(args) -> int:
    if args.final_model:
        if args.canary_kind in CANARY_KINDS:
            raise UsageError(f"--canary-kind {args.canary_kind} is allowed only without --final-model: with it, "
                             f"use one of {', '.join(FINAL_KINDS)}")
        return execute_final(args)
    if args.canary_kind in FINAL_KINDS:
        raise UsageError(f"--canary-kind {args.canary_kind} is allowed only with --final-model: the white-box "
                         f"audit's canaries are {' or '.join(CANARY_KINDS)}")
    # every input is checked before any compute (tanplan.api.audit)
    result = api.audit(args.config, args.out, overrides=args.overrides, canaries=args.canaries,
                       proxy_batch_size=args.proxy_batch_size, confidence=args.confidence, progress=not args.quiet,
                       log=lambda line: print(line, file=sys.stderr), canary_kind=args.canary_kind or "gradient")
    return finish(result, args, "tanplan audit", _rows(result, args.out))


def _rows(result: AuditResult, out: str | None) -> list[tuple[str, str]]:
    """The terminal's table of an audit."""
    claim = result.claim
    fmt = lambda v: "-" if v is None else f"{v:.4g}"  # noqa: E731
    rows = [("claimed ε (add/remove-one)", f"{fmt(claim.epsilon_rdp)} (RDP), {fmt(claim.epsilon_pld)} (PLD) "
                                            f"at δ = {claim.delta:.3g}"),
            ("claimed ε (replace-one)", fmt(claim.epsilon_replace_one) if claim.epsilon_replace_one is not None
             else "not stated by this run"),
            (f"lower bound ({result.confidence:.0%})", f"ε ≥ {result.lower_bound:.4g}: the one-sided interval "
                                                        f"[{result.lower_bound:.4g}, ∞)"),
            ("bound / claim", f"{result.ratio:.3g} (claim: {result.claimed_accountant.upper()}, "
                              f"{result.claimed_epsilon:.4g})"),
            (f"f-DP estimate ({result.confidence:.0%})", f"ε ≥ {result.fdp_estimate:.4g} if μ-GDP; ratio "
                                                           f"{result.fdp_ratio:.3g}"),
            ("ceiling (M canaries)", f"{result.ceiling:.4g} (bound), {result.fdp_ceiling:.4g} (f-DP)"),
            ("canaries", f"{result.canaries} ({result.held_in} held in); top {result.guessed_in} guessed in, "
                         f"bottom {result.guessed_out} out, {result.correct_guesses} of {result.guesses} right; "
                         f"AUROC {result.auroc:.3f}"),
            ("run", f"{'proxy ' if result.proxy else ''}B = {result.batch_size}, S = {result.steps}, "
                    f"σ = {result.sigma:.4g}, N = {result.dataset_size}"),
            ("verdict", result.verdict),
            ("wall time", f"{result.wall_seconds:.0f} s")]
    if out:
        rows.append(("written to", f"{out} (audit.md, audit.json, canary_scores.png; {RUN_FOLDER}/ holds the "
                                   "audited run: NOT a private release)"))
    return rows
