"""`tanplan audit --config FILE [--canaries M] [--proxy-batch-size B'] [--out DIR] [--json]`: train the run the
config describes with M gradient canaries and bound its ε from below (tanplan.workflow.audit)."""

from __future__ import annotations

from tanplan.commands._args import positive_int

HELP = ("audit a run's privacy empirically: train it with gradient canaries, bound ε from below (one-run audit) and "
        "compare with the ε it claims (exit 5 when the bound exceeds it)")


def _confidence(text: str) -> float:
    import argparse

    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not 0.5 < value < 1:
        raise argparse.ArgumentTypeError(f"{value:g} is not allowed: must be in (0.5, 1), e.g. 0.95")
    return value


def configure(parser) -> None:
    from tanplan.workflow.audit import DEFAULT_CANARIES, DEFAULT_CONFIDENCE

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
                        help="write DIR/run (the audited run: NOT a private release), audit.json, audit.md, "
                             "canary_scores.png")
    parser.add_argument("--json", action="store_true", help="print audit.json's content as JSON")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")


def run(args) -> int:
    import sys
    from pathlib import Path

    from tanplan.commands._args import print_json, print_table
    from tanplan.config import load_config
    from tanplan.errors import PrivacyViolation
    from tanplan.workflow.audit import RUN_FOLDER, check_audit, check_audit_out, run_audit
    from tanplan.workflow.inputs import check_config, check_out_dir

    overrides = list(args.overrides)
    if args.proxy_batch_size is not None:
        overrides.append(f"train.proxy_batch_size={args.proxy_batch_size}")
    cfg = load_config(args.config, overrides)  # bad keys and values fail here, before any compute
    check_config(cfg)
    check_out_dir(args.out)
    check_audit(cfg, args.canaries, args.confidence)
    check_audit_out(args.out)
    log = (lambda line: print(line, file=sys.stderr))
    result = run_audit(cfg, Path(args.out) if args.out else None, canaries=args.canaries,
                       confidence=args.confidence, progress=not args.quiet, log=log)
    data = result.to_dict()
    if args.json:
        print_json(data)
    else:
        claim = data["claim"]
        fmt = lambda v: "-" if v is None else f"{v:.4g}"  # noqa: E731
        rows = [("claimed ε (add/remove-one)", f"{fmt(claim['epsilon_rdp'])} (RDP), {fmt(claim['epsilon_pld'])} (PLD) "
                                                f"at δ = {claim['delta']:.3g}"),
                ("claimed ε (replace-one)", fmt(claim["epsilon_replace_one"]) if claim["epsilon_replace_one"] is not None
                 else "not stated by this run"),
                (f"lower bound ({data['confidence']:.0%})", f"ε ≥ {data['lower_bound']:.4g}: the one-sided interval "
                                                             f"[{data['lower_bound']:.4g}, ∞)"),
                ("bound / claim", f"{data['ratio']:.3g} (claim: {data['claimed_accountant'].upper()}, "
                                  f"{data['claimed_epsilon']:.4g})"),
                ("canaries", f"{data['canaries']} ({data['held_in']} held in); top {data['guesses']} guessed in, "
                             f"{data['correct_guesses']} right; AUROC {data['auroc']:.3f}"),
                ("run", f"{'proxy ' if data['proxy'] else ''}B = {data['batch_size']}, S = {data['steps']}, "
                        f"σ = {data['sigma']:.4g}, N = {data['dataset_size']}"),
                ("verdict", data["verdict"]),
                ("wall time", f"{data['wall_seconds']:.0f} s")]
        if args.out:
            rows.append(("written to", f"{args.out} (audit.md, audit.json, canary_scores.png; {RUN_FOLDER}/ holds the "
                                       "audited run: NOT a private release)"))
        print_table(rows, title=f"tanplan audit: {cfg.experiment.name}")
        print(data["note"])
    if data["verdict"] == "violation":
        raise PrivacyViolation(f"privacy violation: {data['reason']}")
    return 0
