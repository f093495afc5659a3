"""`tanplan plan`: σ, η, Σ, ε_TAN and the exact ε of a DP-SGD plan, its regime and what to change; or, with
--compute (or --device-hours), the budget frontier: every (B, S, σ) with B·S ≤ C at the ε budget."""

from __future__ import annotations

import sys

from tanplan import api
from tanplan.commands._args import int_list, positive_float, positive_int, print_json, print_table, probability
from tanplan.errors import UsageError
from tanplan.reports.optimize import frontier_lines
from tanplan.reports.plan import summary_rows

HELP = ("compute σ (or ε), η, TAN, ε_TAN and the exact ε of a DP-SGD plan, with its regime and advice; with "
        "--compute or --device-hours, every (B, S, σ) on the budget frontier")


def add_target_arguments(parser, *, frontier: bool = False) -> None:
    """The target (N, B, S, σ or ε, δ, accountant): shared by `plan` and `proxy`.

    With frontier=True (`plan`), --batch-size and --steps may be left out for the --compute mode; execute()
    then checks that they are given whenever no compute budget is. S comes from --steps or from --epochs E
    (exactly one; S = ceil(E·N/B): tanplan.privacy.plan.steps_of).
    """
    parser.add_argument("--dataset-size", type=positive_int, required=True, metavar="N", help="training set size N")
    parser.add_argument("--batch-size", type=positive_int, required=not frontier, metavar="B",
                        help="expected batch size B")
    parser.add_argument("--steps", type=positive_int, metavar="S", help="number of steps S (or --epochs)")
    parser.add_argument("--epochs", type=positive_float, metavar="E",
                        help="or plan by epochs, as Opacus users do: S = ceil(E·N/B), rounded up (never fewer passes "
                             "than asked); S and S·B/N are shown")
    noise = parser.add_mutually_exclusive_group(required=True)
    noise.add_argument("--sigma", type=positive_float, help="noise multiplier σ")
    noise.add_argument("--epsilon", type=positive_float, help="target ε: σ is calibrated to it")
    parser.add_argument("--delta", type=probability, help="δ (default N^-1.1, below 1/N; a δ ≥ 1/N is computed "
                        "with a warning)")
    parser.add_argument("--accountant", choices=("pld", "rdp", "both"), default="pld",
                        help="accountant of record: σ is calibrated to --epsilon with it (default pld, the tightest; "
                             "both = pld); both accountants are always reported")
    parser.add_argument("--neighbouring", choices=("add_remove", "replace_one"), default="add_remove",
                        help="relation of record, the one σ is calibrated to (replace_one: PLD only); both reported")


def configure(parser) -> None:
    add_target_arguments(parser, frontier=True)
    budget = parser.add_mutually_exclusive_group()
    budget.add_argument("--compute", type=positive_int, metavar="C",
                        help="compute budget in examples processed (B·S): list the frontier of (B, S, σ) at --epsilon "
                             "instead of one plan")
    budget.add_argument("--device-hours", type=positive_float, metavar="H",
                        help="compute budget as device hours: C = H·3600·throughput (--samples-per-second, or "
                             "measured by the DP-step benchmark of --model)")
    parser.add_argument("--samples-per-second", type=positive_float, metavar="X",
                        help="DP-SGD throughput of one device, for --device-hours (default: measure it)")
    parser.add_argument("--model", default="cnn1d", help="model whose DP step the benchmark times for --device-hours "
                        "(default cnn1d)")
    parser.add_argument("--min-batch-size", type=positive_int, default=1, metavar="B",
                        help="with --compute: the smallest batch on the frontier (default 1)")
    parser.add_argument("--steps-factor", type=positive_float, default=2.0, metavar="F",
                        help="with --compute: ratio of consecutive S on the frontier grid (default 2)")
    parser.add_argument("--dataset-sizes", type=int_list, metavar="N1,N2,...",
                        help="also show ε at these dataset sizes for the same (B, σ, S), δ = 1/N (TAN Table 5)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--out", metavar="DIR", help="write report.md, family tables (CSV) and figures here")


def record_of(args) -> str:
    """The accountant of record the arguments ask for (both = pld)."""
    return "rdp" if args.accountant == "rdp" else "pld"


def accountants_of(args) -> tuple[str, ...]:
    """Every accountant reported, the one of record first."""
    return ("rdp", "pld") if record_of(args) == "rdp" else ("pld", "rdp")


def _warn(line: str) -> None:
    print(f"tanplan: warning: {line}", file=sys.stderr)


def plan_result(args, **extra):
    """tanplan.api.plan of the arguments (σ calibrated when --epsilon is given); warns when δ ≥ 1/N."""
    return api.plan(args.dataset_size, args.batch_size, args.steps, epochs=getattr(args, "epochs", None),
                    sigma=args.sigma, epsilon=args.epsilon, delta=args.delta, accountant=args.accountant,
                    neighbouring=getattr(args, "neighbouring", "add_remove"), warn=_warn, **extra)


def execute(args) -> int:
    if args.compute is not None or args.device_hours is not None:
        return run_frontier(args)
    if args.batch_size is None:
        raise UsageError("tanplan plan: the following arguments are required: --batch-size (or --compute with "
                         "--epsilon)")
    if args.steps is None and args.epochs is None:
        raise UsageError("tanplan plan: the following arguments are required: --steps or --epochs (or --compute "
                         "with --epsilon)")
    if args.samples_per_second is not None:
        raise UsageError("--samples-per-second is not allowed without --device-hours")
    result = plan_result(args, dataset_sizes=args.dataset_sizes or (), out=args.out)
    plan, accountants = result.plan, result.accountants
    if args.json:
        print_json(result.to_dict())
        return 0
    print_table(summary_rows(plan, accountants, result.epochs_asked), title="TAN plan")
    print(f"regime: {result.regime_text}")
    for line in result.advice:
        print(f"  - {line}")
    for row in result.dataset_sizes or ():
        exact = ", ".join(f"ε {acc.upper()} {row.epsilon(acc, 'add_remove'):.4g}" for acc in accountants
                          if row.epsilon(acc, "add_remove"))
        print(f"  N = {row.dataset_size:,}: q {row.q:.4g}, η {row.eta:.4g}, N·η {row.dataset_size * row.eta:.4g}, "
              f"δ {row.delta:.2g}, {exact}, ε_TAN {row.eps_tan:.4g}")
    print("ε_TAN is a heuristic, never a guarantee; the exact ε is the accountant's.")
    if args.out:
        print(f"report: {args.out}/report.md")
    return 0


def check_frontier_arguments(args) -> None:
    """One line naming the first argument that the --compute / --device-hours mode cannot use."""
    budget = "--compute" if args.compute is not None else "--device-hours"
    if args.epsilon is None:
        raise UsageError(f"{budget} needs --epsilon (σ is calibrated to it for every candidate), not --sigma")
    for flag, value in (("--batch-size", args.batch_size), ("--steps", args.steps), ("--epochs", args.epochs),
                        ("--out", args.out),
                        ("--dataset-sizes", args.dataset_sizes)):
        if value is not None:
            raise UsageError(f"{flag} is not allowed with {budget}: the frontier chooses B and S itself")
    if args.neighbouring != "add_remove":
        raise UsageError(f"--neighbouring {args.neighbouring} is not allowed with {budget}: the frontier is "
                         "calibrated under add/remove-one")
    if args.samples_per_second is not None and args.device_hours is None:
        raise UsageError("--samples-per-second is not allowed without --device-hours")
    if args.steps_factor <= 1:
        raise UsageError(f"--steps-factor {args.steps_factor:g} is not allowed: must be > 1")


def run_frontier(args) -> int:
    """The budget frontier: every (B, S, σ) with B·S ≤ C and σ calibrated to --epsilon."""
    check_frontier_arguments(args)
    result = api.frontier(args.dataset_size, args.epsilon, delta=args.delta, compute=args.compute,
                          device_hours=args.device_hours, samples_per_second=args.samples_per_second,
                          model=args.model, min_batch_size=args.min_batch_size,
                          steps_factor=args.steps_factor, accountant=record_of(args))
    if args.json:
        print_json(result.to_dict())
        return 0
    for line in frontier_lines(result):
        print(line)
    return 0
