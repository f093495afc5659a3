"""`tanplan run`: plan → sweep → fit → launch, with one report comparing prediction and result."""

from __future__ import annotations

from tanplan.commands._args import positive_int, print_json

HELP = "chain plan, proxy sweep, scaling-law fit and the full-scale launch; write report.md and summary.json"


def configure(parser) -> None:
    parser.add_argument("--config", required=True, help="experiment TOML")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a config key")
    parser.add_argument("--trials", type=positive_int, help="sweep trials (default [sweep] trials)")
    parser.add_argument("--address", help="Ray cluster address for the sweep (default: local)")
    parser.add_argument("--baselines", action="store_true", help="also run the private heads and DP prototypes "
                        "on frozen features at the launch's ε (demo features unless --baseline-features)")
    parser.add_argument("--baseline-features", metavar="F.npz", help="private features for --baselines")
    parser.add_argument("--baseline-public", metavar="P.npz", help="public features for --baselines (DPPL-Public)")
    parser.add_argument("--out", required=True, metavar="DIR")
    parser.add_argument("--json", action="store_true")


def run(args) -> int:
    from tanplan.config import load_config
    from tanplan.workflow.pipeline import run_pipeline

    cfg = load_config(args.config, args.set)
    summary = run_pipeline(cfg, args.out, trials=args.trials, address=args.address,
                           log=(lambda *a: None) if args.json else print, baselines=args.baselines,
                           baseline_features=args.baseline_features, baseline_public=args.baseline_public)
    if args.json:
        print_json(summary)
    else:
        low, high = summary["prediction_interval"]
        print(f"predicted {summary['predicted_accuracy']:.4f} [{low:.4f}, {high:.4f}], actual "
              f"{summary['actual_accuracy']:.4f}; ε = {summary['epsilon_rdp']:.4g} (RDP); proxy compute "
              f"{summary['proxy_compute_fraction']:.4f} of target scale; report {args.out}/report.md")
    return 0
