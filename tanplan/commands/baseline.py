"""`tanplan baseline`: private heads and DP prototypes on frozen features, at one or more ε.

Seven methods (tanplan.baselines): DP-LS, DP-Newton, DP-FC, DP-Adam (Mehta et al.), DPPL-Mean,
DPPL-Public, DPPL-PublicK (Wahdany et al.). Each is calibrated to the target (ε, δ) under add/remove-one
neighbours, trained on x_train/y_train and scored on x_test/y_test.
"""

from __future__ import annotations

import argparse
import sys

from tanplan.commands._args import float_list, positive_int, print_json, probability

HELP = "train private heads (DP-LS, DP-Newton, DP-FC, DP-Adam) and DP prototypes (DPPL) on frozen features"


def _ratio(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not value >= 1 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"{value:g} is not allowed: must be a finite number >= 1 (1 = as given)")
    return value


def _seed(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"{value} is not allowed: must be >= 0")
    return value


def configure(parser) -> None:
    parser.add_argument("--features", metavar="F.npz",
                        help="private features: x_train, y_train, x_test, y_test (integer labels)")
    parser.add_argument("--public", metavar="P.npz", help="unlabelled public features (key x), same width; "
                        "needed by dppl-public and dppl-publick")
    parser.add_argument("--method", default="all", metavar="M",
                        help="all (default), or one or more of dp-ls, dp-newton, dp-fc, dp-adam, dppl-mean, "
                             "dppl-public, dppl-publick (comma-separated)")
    parser.add_argument("--epsilon", type=float_list, metavar="E[,E...]", help="target ε (one or a list)")
    parser.add_argument("--delta", type=probability, help="δ (default n^-1.1, n the training examples used)")
    parser.add_argument("--imbalance-ratio", type=_ratio, default=1.0, metavar="R",
                        help="subsample the training split to an exponential long tail with largest/smallest "
                             "class = R (default 1: as given)")
    parser.add_argument("--accountant", choices=("analytic", "pld", "rdp"), default="analytic",
                        help="(ε, δ) of the Gaussian methods: exact Gaussian (default), PLD or RDP/zCDP")
    parser.add_argument("--repeats", type=positive_int, default=1, metavar="N",
                        help="independent noise draws per method and ε; mean and std reported "
                             "(each draw is a separate release at the stated ε)")
    parser.add_argument("--seed", type=_seed, metavar="S",
                        help="seed of the privacy noise, for reproducible experiments only: the output is NOT "
                             "private and says so (default: fresh OS entropy)")
    parser.add_argument("--make-features", metavar="DIR",
                        help="write the demo features (encoder trained on public mnist1d) to DIR/features.npz "
                             "and DIR/public.npz; they serve as --features/--public when those are not given")
    parser.add_argument("--json", action="store_true", help="print a JSON list, one object per method and ε")
    parser.add_argument("--out", metavar="DIR", help="write baseline.{json,csv,md} and accuracy_vs_epsilon.png")


def run(args) -> int:
    from tanplan.baselines import runner
    from tanplan.baselines.data import imbalanced, load_features, load_public
    from tanplan.reports.baselines import text_table, write_outputs
    from tanplan.errors import UsageError

    from tanplan.workflow.inputs import check_out_dir

    from tanplan.baselines.accounting import MAX_EPSILON

    methods = runner.select_methods(args.method)  # an unknown name fails before any work
    for eps in args.epsilon or ():
        if eps > MAX_EPSILON:
            raise UsageError(f"--epsilon {eps:g} is not allowed: must be in (0, {MAX_EPSILON:g}] (above, a release "
                             "protects nothing)")
    check_out_dir(args.out)  # before the noise is drawn and the results printed
    check_out_dir(args.make_features, "--make-features")
    if args.features is None and not args.make_features:
        raise UsageError("--features F.npz is required (or --make-features DIR for the demo features)")
    if args.epsilon is None and not args.make_features:
        raise UsageError("--epsilon E is required: the target ε (one value or a comma-separated list)")
    if args.features is not None:  # files the user gave: checked before the demo encoder is trained
        given = load_features(args.features)
        if args.public:
            load_public(args.public, given.width)
    if args.make_features:
        from tanplan.baselines.features import write_demo_features

        features_path, public_path = write_demo_features(args.make_features)
        print(f"tanplan: wrote {features_path} and {public_path}", file=sys.stderr)
        args.features = args.features or str(features_path)
        args.public = args.public or str(public_path)
        if args.epsilon is None:
            return 0
    if args.features is None:
        raise UsageError("--features F.npz is required (or --make-features DIR for the demo features)")
    if args.epsilon is None:
        raise UsageError("--epsilon E is required: the target ε (one value or a comma-separated list)")
    data = load_features(args.features)
    public = load_public(args.public, data.width) if args.public else None
    if public is None and all(runner.REGISTRY[m].needs_public for m in methods):
        raise UsageError(f"{', '.join(methods)} need a public set: pass --public P.npz")
    n_used = len(imbalanced(data, args.imbalance_ratio).y_train)
    from tanplan.privacy.plan import default_delta

    delta = args.delta if args.delta is not None else default_delta(n_used)
    if delta >= 1.0 / n_used:  # a warning, printed once every input is known to be good
        print(f"tanplan: warning: delta={delta:g} is ≥ 1/n={1.0 / n_used:.3g}: such a δ allows releasing "
              "an example outright", file=sys.stderr)

    def progress(r) -> None:
        print(f"tanplan: {r.method} at ε={r.target_epsilon:g}: balanced accuracy {r.balanced_accuracy:.3f} "
              f"({r.wall_seconds:.1f} s)", file=sys.stderr)

    runner.warm_imports(methods)
    results, notes = runner.run_baselines(methods, data, args.epsilon, delta, public, args.imbalance_ratio,
                                          args.seed, args.repeats, args.accountant, progress=progress)
    rows = [r.to_dict() for r in results]
    for note in notes:
        print(f"tanplan: note: {note}", file=sys.stderr)
    if args.out:
        title = f"Baselines on {args.features} (imbalance ratio {args.imbalance_ratio:g}, δ = {delta:.1e})"
        for path in write_outputs(args.out, rows, notes, title):
            print(f"tanplan: wrote {path}", file=sys.stderr)
    if args.json:
        print_json(rows)
    else:
        print(text_table(rows))
        for note in notes:
            print(f"note: {note}")
    return 0
