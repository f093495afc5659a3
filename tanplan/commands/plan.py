"""`tanplan plan`: σ, η, Σ, ε_TAN and the exact ε of a DP-SGD plan, its regime and what to change."""

from __future__ import annotations

import sys

from tanplan.commands._args import int_list, positive_float, positive_int, print_json, print_table, probability

HELP = "compute σ (or ε), η, TAN, ε_TAN and the exact ε of a DP-SGD plan, with its regime and advice"


def add_target_arguments(parser) -> None:
    """The target (N, B, S, σ or ε, δ, accountant): shared by `plan` and `proxy`."""
    parser.add_argument("--dataset-size", type=positive_int, required=True, metavar="N", help="training set size N")
    parser.add_argument("--batch-size", type=positive_int, required=True, metavar="B", help="expected batch size B")
    parser.add_argument("--steps", type=positive_int, required=True, metavar="S", help="number of steps S")
    noise = parser.add_mutually_exclusive_group(required=True)
    noise.add_argument("--sigma", type=positive_float, help="noise multiplier σ")
    noise.add_argument("--epsilon", type=positive_float, help="target ε: σ is calibrated to it")
    parser.add_argument("--delta", type=probability, help="δ (default 1/N)")
    parser.add_argument("--accountant", choices=("rdp", "pld", "both"), default="rdp",
                        help="exact accountant; with --epsilon, σ is calibrated with rdp unless pld is asked")


def configure(parser) -> None:
    add_target_arguments(parser)
    parser.add_argument("--dataset-sizes", type=int_list, metavar="N1,N2,...",
                        help="also show ε at these dataset sizes for the same (B, σ, S), δ = 1/N (TAN Table 5)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--out", metavar="DIR", help="write report.md, family tables (CSV) and figures here")


def accountants_of(args) -> tuple[str, ...]:
    return ("rdp", "pld") if args.accountant == "both" else (args.accountant,)


def plan_of(args):
    """The Plan the arguments describe (σ calibrated when --epsilon is given)."""
    from tanplan.errors import UsageError
    from tanplan.privacy.plan import Plan, default_delta

    if args.batch_size > args.dataset_size:
        raise UsageError(f"--batch-size {args.batch_size} is not allowed: must be ≤ --dataset-size {args.dataset_size}")
    delta = args.delta if args.delta is not None else default_delta(args.dataset_size)
    if args.delta is not None and args.delta > 1.0 / args.dataset_size:
        print(f"tanplan: warning: delta={args.delta:g} exceeds 1/N={1.0 / args.dataset_size:.3g}: such a δ "
              f"allows releasing some examples outright", file=sys.stderr)
    calibrator = "pld" if args.accountant == "pld" else "rdp"
    if args.epsilon is not None:
        return Plan.from_budget(args.dataset_size, args.batch_size, args.steps, args.epsilon, delta, calibrator)
    return Plan(args.dataset_size, args.batch_size, args.steps, args.sigma, delta, None, calibrator)


def run(args) -> int:
    from tanplan.privacy import tan
    from tanplan.privacy.plan import advice
    from tanplan.reports.plan import summary_rows

    plan = plan_of(args)
    accountants = accountants_of(args)
    result = plan.to_dict(accountants)
    result["regime_text"] = tan.REGIME_TEXT[plan.regime]
    result["advice"] = advice(plan, accountants[0])
    if args.dataset_sizes:
        from tanplan.privacy.plan import with_dataset_size

        result["dataset_sizes"] = [with_dataset_size(plan, n).to_dict(accountants) for n in args.dataset_sizes]
    if args.out:
        from tanplan.reports.plan import write_plan_report

        result["figures"] = write_plan_report(plan, args.out, accountants)
    if args.json:
        print_json(result)
        return 0
    print_table(summary_rows(plan, accountants), title="TAN plan")
    print(f"regime: {result['regime_text']}")
    for line in result["advice"]:
        print(f"  - {line}")
    for row in result.get("dataset_sizes", []):
        exact = ", ".join(f"ε {acc.upper()} {row['eps_' + acc]:.4g}" for acc in accountants)
        print(f"  N = {row['dataset_size']:,}: q {row['q']:.4g}, η {row['eta']:.4g}, N·η {row['dataset_size'] * row['eta']:.4g}, "
              f"δ {row['delta']:.2g}, {exact}, ε_TAN {row['eps_tan']:.4g}")
    print("ε_TAN is a heuristic, never a guarantee; the exact ε is the accountant's.")
    if args.out:
        print(f"report: {args.out}/report.md")
    return 0
