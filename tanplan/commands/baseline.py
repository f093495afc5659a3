"""`tanplan baseline`: private heads and DP prototypes on frozen features, at one or more ε.

Seven methods (tanplan.baselines): DP-LS, DP-Newton, DP-FC, DP-Adam (Mehta et al.), DPPL-Mean,
DPPL-Public, DPPL-PublicK (Wahdany et al.). Each is calibrated to the target (ε, δ) under add/remove-one
neighbours, trained on x_train/y_train and scored on x_test/y_test.
"""

from __future__ import annotations

import argparse

from tanplan.commands._args import float_list, positive_int, print_json, probability
from tanplan.reports.baselines import text_table
from tanplan.workflow.baseline import run_baseline

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


def execute(args) -> int:
    ran = run_baseline(method=args.method, epsilons=args.epsilon, features=args.features, public=args.public,
                       delta=args.delta, imbalance_ratio=args.imbalance_ratio, accountant=args.accountant,
                       repeats=args.repeats, seed=args.seed, make_features=args.make_features, out=args.out)
    if ran is None:  # only the demo features were asked for
        return 0
    results, notes = ran
    if args.json:
        print_json([r.to_dict() for r in results])
    else:
        print(text_table(results))
        for note in notes:
            print(f"note: {note}")
    return 0
