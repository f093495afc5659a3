"""`tanplan proxy`: shrink the target (B, σ, S) to a proxy (B', σ·B'/B, S) that costs B/B' times less."""

from __future__ import annotations

from tanplan.commands._args import positive_float, positive_int, print_json, print_table
from tanplan.commands.plan import add_target_arguments, plan_of

HELP = "derive constant-TAN proxies (B', σ·B'/B, S) of a target plan for cheap hyper-parameter search"

CAVEAT = ("The proxy is a simulation for choosing hyper-parameters: it trains at the target's η_step and S, "
          "so it should behave like the target. Its own ε is no guarantee for anything you release, and it is "
          "not accounted in the target's ε: it is what the proxy costs the data it trains on (large: σ' is "
          "small). Train proxies on public data of the same task (`tanplan run` does by default, [tuning] data = "
          "\"public\"), or count them: with [tuning] data = \"private\" `tanplan run` reports the total ε, and "
          "`tanplan sweep` and `tanplan fit` write privacy_spent.json.")


def configure(parser) -> None:
    add_target_arguments(parser)
    size = parser.add_mutually_exclusive_group(required=True)
    size.add_argument("--proxy-batch-size", type=positive_int, action="append", metavar="B'",
                      help="proxy batch size (repeatable)")
    size.add_argument("--savings", type=positive_float, metavar="K", help="compute savings factor: B' = B/K")
    parser.add_argument("--json", action="store_true", help="print JSON (an object, or a list for several proxies)")


def run(args) -> int:
    from tanplan.errors import UsageError

    target = plan_of(args)
    if args.savings is not None:
        if args.savings < 1:
            raise UsageError(f"--savings {args.savings:g} is not allowed: must be ≥ 1")
        sizes = [max(1, round(target.batch_size / args.savings))]
    else:
        sizes = args.proxy_batch_size
    for b in sizes:
        if b > target.batch_size:
            raise UsageError(f"--proxy-batch-size {b} is not allowed: must be ≤ the target batch size {target.batch_size}")
    rows = []
    for b in sizes:
        proxy = target.proxy(b)
        rows.append({
            "proxy_batch_size": proxy.batch_size, "proxy_sigma": proxy.sigma, "steps": proxy.steps,
            "eta_step": proxy.eta_step, "savings": target.savings(proxy), "proxy_regime": proxy.regime.value,
            "dataset_size": target.dataset_size, "batch_size": target.batch_size, "sigma": target.sigma,
            "delta": target.delta, "target_epsilon": target.epsilon(), "target_accountant": target.accountant,
            "target_eps_rdp": target.epsilon("rdp"), "note": CAVEAT,
        })
    if args.json:
        print_json(rows[0] if len(rows) == 1 else rows)
        return 0
    print_table([("target", f"B={target.batch_size:,}  σ={target.sigma:.4g}  S={target.steps:,}  "
                            f"η_step={target.eta_step:.4g}  exact ε ({target.accountant.upper()})={target.epsilon():.4g}, "
                            f"RDP {target.epsilon('rdp'):.4g}")],
                title="TAN proxy")
    for r in rows:
        print(f"  proxy   B'={r['proxy_batch_size']:,}  σ'={r['proxy_sigma']:.4g}  S={r['steps']:,}  "
              f"η_step={r['eta_step']:.4g}  savings {r['savings']:.4g}×")
    print(CAVEAT)
    return 0
