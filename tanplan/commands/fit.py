"""`tanplan fit`: the batch scaling law over proxy batch sizes, or the privacy-parameter search."""

from __future__ import annotations

from tanplan import api
from tanplan.commands._args import float_list, int_list, positive_int, print_json, print_table
from tanplan.errors import NotLaunched
from tanplan.reports import fit as fit_report

HELP = "fit the batch law over proxy batch sizes and predict one launch at the target (or search S at constant η)"


def sizes_or_auto(text: str):
    """"auto" (the proxy ladder finds the knee) or comma-separated positive integers."""
    return "auto" if text.strip() == "auto" else int_list(text)


def configure(parser) -> None:
    parser.add_argument("--config", required=True, help="experiment TOML")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a config key")
    parser.add_argument("--best", help="best.json of a sweep: its configuration is the one trained")
    parser.add_argument("--batch-sizes", type=sizes_or_auto, help="proxy batch sizes, e.g. 64,128,256, or auto: the "
                        "proxy ladder chooses rungs and seeds within its budget (default [fit] batch_sizes)")
    parser.add_argument("--seeds", type=positive_int, help="seeds per batch size (default [fit] seeds)")
    parser.add_argument("--vary", choices=("batch", "steps", "data"), default="batch",
                        help="batch: the scaling law; steps: the privacy-parameter search at constant η and σ; "
                             "data: the dataset-size study at fixed (B, σ, S), δ = 1/N")
    parser.add_argument("--factors", type=float_list, help="k values for --vary steps (S·k², B/k) or data (N·k, "
                        "at most the training set size)")
    parser.add_argument("--proxy-batch-size", type=positive_int, help="proxy batch for --vary steps or data "
                        "(default: the smallest of explicit --batch-sizes)")
    parser.add_argument("--law", choices=("knee", "noise", "flat", "log-linear", "auto"), help="the form of the batch "
                        "law: a rise to a knee then a plateau, a + c/B', a, a + b·ln B', or auto (knee and noise averaged by "
                        "out-of-sample fit on the top rungs; default [fit] law)")
    parser.add_argument("--launch-anyway", action="store_true", help="exit 0 even when the verdict says the law "
                        "cannot be launched on (an interval wider than fit.max_half_width, or outside [0, 1])")
    parser.add_argument("--out", required=True, metavar="DIR")
    parser.add_argument("--json", action="store_true")


def execute(args) -> int:
    # every input (config, best.json, folder, tuning data, the ladder's or the sizes') is checked before any data
    result = api.fit(args.config, args.out, overrides=args.set, best=args.best, batch_sizes=args.batch_sizes,
                     seeds=args.seeds, vary=args.vary, factors=args.factors, proxy_batch_size=args.proxy_batch_size,
                     law=args.law, log=(lambda *a, **k: None) if args.json else print)
    if args.json:
        print_json(result.to_dict())
        _refuse(result, args)
        return 0
    if args.vary == "data":
        print_table([(f"N={m.dataset_size:,}", f"ε RDP {m.eps_rdp:.3g} (ε_TAN {m.eps_tan:.3g}), δ {m.delta:.2g}, "
                      f"proxy accuracy {m.mean_accuracy:.4f} ± {m.std_accuracy:.4f}")
                     for m in result.members], title="dataset size at fixed (B, σ, S)")
    elif args.vary == "steps":
        best = result.best
        print(f"best k = {best.k:g}: full-scale B = {best.batch_size}, S = {best.steps}, "
              f"σ = {best.sigma:.4g}, exact ε (RDP) = {best.eps_rdp:.4g}, proxy accuracy "
              f"{best.mean_accuracy:.4f} ± {best.std_accuracy:.4f}")
    elif result.ladder is not None and result.law is None:
        print(f"{result.ladder.reason}: no law fitted, no prediction; {result.ladder.what_to_change}")
        print(f"report: {args.out}/ladder/ladder.md")
    else:
        print(fit_report.fit_markdown(result))
        print(f"figure: {args.out}/scaling_law.png")
    _refuse(result, args)
    return 0


def _refuse(result, args) -> None:
    """Exit 4 (NotLaunched) when the law's verdict says a launch should not go on it, unless --launch-anyway."""
    if args.vary == "batch" and result.law is not None and not result.law_holds and not args.launch_anyway:
        raise NotLaunched(f"not to be launched on: {result.verdict}; {result.what_to_change} (or --launch-anyway); "
                          f"report {args.out}/fit.md")
