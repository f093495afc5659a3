"""`tanplan proxy`: shrink the target (B, σ, S) to a proxy (B', σ·B'/B, S) that costs B/B' times less."""

from __future__ import annotations

from tanplan import api
from tanplan.commands._args import positive_float, positive_int, print_json, print_table
from tanplan.commands.plan import _warn, add_target_arguments

HELP = "derive constant-TAN proxies (B', σ·B'/B, S) of a target plan for cheap hyper-parameter search"


def configure(parser) -> None:
    add_target_arguments(parser)
    size = parser.add_mutually_exclusive_group(required=True)
    size.add_argument("--proxy-batch-size", type=positive_int, action="append", metavar="B'",
                      help="proxy batch size (repeatable)")
    size.add_argument("--savings", type=positive_float, metavar="K", help="compute savings factor: B' = B/K")
    parser.add_argument("--json", action="store_true", help="print JSON (an object, or a list for several proxies)")


def execute(args) -> int:
    proxies = api.proxy(args.dataset_size, args.batch_size, args.steps, epochs=args.epochs,
                        proxy_batch_sizes=args.proxy_batch_size or (),
                        savings=args.savings, sigma=args.sigma, epsilon=args.epsilon, delta=args.delta,
                        accountant=args.accountant, neighbouring=args.neighbouring, warn=_warn)
    if args.json:
        rows = [p.to_dict() for p in proxies]
        print_json(rows[0] if len(rows) == 1 else rows)
        return 0
    t = proxies[0]
    print_table([("target", f"B={t.batch_size:,}  σ={t.sigma:.4g}  S={t.steps:,}  "
                            f"η_step={t.eta_step:.4g}  exact ε ({t.target_accountant.upper()})={t.target_epsilon:.4g}, "
                            f"RDP {t.target_eps_rdp:.4g}")],
                title="TAN proxy")
    for r in proxies:
        print(f"  proxy   B'={r.proxy_batch_size:,}  σ'={r.proxy_sigma:.4g}  S={r.steps:,}  "
              f"η_step={r.eta_step:.4g}  savings {r.savings:.4g}×")
    print(api.PROXY_CAVEAT)
    return 0
