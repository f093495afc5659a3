"""`tanplan run`: plan → sweep → ladder (the batch law) → launch, with one report comparing prediction and result."""

from __future__ import annotations

from tanplan import api
from tanplan.commands._args import positive_int, print_json
from tanplan.errors import NotLaunched, UsageError
from tanplan.reports.fit import prediction_text

HELP = ("chain plan, sweep, proxy ladder (the batch law and its interval for one launch) and the full-scale launch "
        "(not launched, exit 4, when the proxies cannot predict it); write report.md and summary.json")


def configure(parser) -> None:
    parser.add_argument("--config", required=True, help="experiment TOML")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a config key")
    parser.add_argument("--trials", type=positive_int, help="sweep trials (default [sweep] trials)")
    parser.add_argument("--proxy-batch-size", type=positive_int, help="sweep at this B' (default [sweep] "
                        "proxy_batch_size, else the ladder's third rung, or the smallest of an explicit [fit] batch_sizes)")
    parser.add_argument("--launch-anyway", action="store_true", help="launch even when the ladder cannot fit the law "
                        "within its budget or the law does not hold (otherwise: no launch, exit 4)")
    parser.add_argument("--tune-data", choices=("public", "private"), help="where the proxies learn: public data of "
                        "the same task (default [tuning] data), or the private set, every release then composed "
                        "into the total ε")
    parser.add_argument("--address", help="Ray cluster address for the sweep (default: local)")
    parser.add_argument("--baselines", action="store_true", help="also run the private heads and DP prototypes "
                        "on frozen features at the launch's ε (demo features unless --baseline-features)")
    parser.add_argument("--baseline-features", metavar="F.npz", help="private features for --baselines")
    parser.add_argument("--baseline-public", metavar="P.npz", help="public features for --baselines (DPPL-Public)")
    parser.add_argument("--out", required=True, metavar="DIR")
    parser.add_argument("--resume", action="store_true", help="continue the run in DIR (same --config, --set and "
                        "options): finished sweep trials, ladder rungs and launch are kept, stopped runs continue")
    parser.add_argument("--dry-run", action="store_true", help="print each stage's planned compute (example-"
                        "gradients, and as a fraction of the target's) and its wall time at a measured throughput (the "
                        "runs already in --out, else a few timed steps of the model on random inputs) after every "
                        "check the run makes before it trains (the data loaded, the public set checked against the "
                        "private one); train nothing")
    parser.add_argument("--no-probe", action="store_true", help="with --dry-run: no timed probe of the model's step "
                        "(wall times only from runs already in --out or a probe in the cache)")
    parser.add_argument("--routes", metavar="R1,R2", help="compare routes by prediction before any launches: "
                        "scratch, finetune ([init] as written), adapters, heads (a DP-LS head on the [init] model's "
                        "features), each predicted at the config's ε, B and S into DIR/routes/<route>; writes "
                        "DIR/routes.md, routes.json and routes.png")
    parser.add_argument("--launch-best-route", action="store_true", help="with --routes: launch the recommended "
                        "route (the highest predicted mean whose law holds), and only it, into DIR/launch")
    parser.add_argument("--json", action="store_true")


def execute(args) -> int:
    if args.launch_best_route and not args.routes:
        raise UsageError("--launch-best-route is not allowed without --routes: it launches the best of the routes "
                         "named there (e.g. --routes scratch,finetune,adapters,heads)")
    if args.routes is not None:
        return _routes(args)
    if args.dry_run:
        return _dry_run(args)
    result = api.run(args.config, args.out, overrides=args.set, trials=args.trials, tune_data=args.tune_data,
                     address=args.address, log=(lambda *a: None) if args.json else print, baselines=args.baselines,
                     baseline_features=args.baseline_features, baseline_public=args.baseline_public,
                     proxy_batch_size=args.proxy_batch_size, launch_anyway=args.launch_anyway, resume=args.resume)
    if args.json:
        print_json(result.to_dict())
    if not result.launched:
        raise NotLaunched(f"not launched: {result.reason}; {result.what_to_change} "
                          f"(or rerun with --resume --launch-anyway: its runs are kept); report {args.out}/report.md")
    if not args.json:
        print(f"{prediction_text(result)}, actual {result.actual_accuracy:.4f}; launch ε = "
              f"{result.launch_epsilon:.4g} ({result.accountant.upper()}; RDP {result.epsilon_rdp:.4g}, replace-one "
              f"{result.epsilon_replace_one:.4g}), total ε on the private set = {result.epsilon_total:.4g} "
              f"({result.epsilon_total_accountant.upper()}; {result.tuning_data} tuning data); proxy compute "
              f"{result.proxy_compute_fraction:.4f} of the target's; report {args.out}/report.md")
    return 0


def _dry_run(args) -> int:
    """The stages' planned compute (PlannedCompute), checked as `run` checks them before any data; no folder."""
    from tanplan.workflow.pipeline import costs  # lazy: JAX (the ladder's module); the cli imports every command
    from tanplan.workflow.pipeline.run import dry_check  # lazy: JAX

    cfg = api.as_config(args.config, args.set)
    planned = costs.dry_run(cfg, args.proxy_batch_size, args.trials)
    dry_check(cfg, args.out, proxy_batch_size=args.proxy_batch_size, trials=args.trials, address=args.address)
    planned = costs.timed(planned, cfg, args.out, measure=not args.no_probe)  # the runs in --out, else a probe
    if args.json:
        print_json(planned.to_dict())
    else:
        print("\n".join(costs.compute_lines(planned)))
        print(f"dry run: nothing trained; the proxies at most {planned.proxy_fraction:.3g} of the target's compute")
    return 0


_NOT_WITH_ROUTES = (("launch_anyway", "--launch-anyway"), ("baselines", "--baselines"),
                    ("baseline_features", "--baseline-features"), ("baseline_public", "--baseline-public"))


def _routes(args) -> int:
    """`run --routes`: every route's prediction compared (RoutesResult), the best launched with
    --launch-best-route; with --dry-run, each route's planned compute."""
    for name, flag in _NOT_WITH_ROUTES:
        if getattr(args, name):
            raise UsageError(f"{flag} is not allowed with --routes: a route whose law does not hold is not "
                             "recommended, and the routes are compared by their own predictions")
    if args.dry_run:
        from tanplan.workflow.pipeline.routes import dry_run_routes  # lazy: JAX; the cli imports every command
        from tanplan.workflow.pipeline.run import with_tune_data  # lazy: JAX

        cfg = with_tune_data(api.as_config(args.config, args.set), args.tune_data)
        planned, lines = dry_run_routes(cfg, args.routes, args.out, proxy_batch_size=args.proxy_batch_size,
                                        trials=args.trials, address=args.address, measure=not args.no_probe)
        if args.json:
            print_json({r: p if isinstance(p, dict) else p.to_dict() for r, p in planned.items()})
        else:
            print("\n".join(lines))
            print("dry run: nothing trained")
        return 0
    result = api.compare_routes(args.config, args.out, args.routes, overrides=args.set, trials=args.trials,
                                tune_data=args.tune_data, address=args.address, proxy_batch_size=args.proxy_batch_size,
                                launch_best=args.launch_best_route, resume=args.resume,
                                log=(lambda *a: None) if args.json else print)
    if args.json:
        print_json(result.to_dict())
    else:
        for r in result.routes:
            low, high = r.prediction_interval or (float("nan"), float("nan"))
            shown = f"{r.predicted_accuracy:.4f} [{low:.4f}, {high:.4f}]" if r.predicted_accuracy is not None else "—"
            print(f"{r.route}: {shown}, {r.standing}")
        launched = (f"; launched {result.launched}: actual {result.actual_accuracy:.4f}, ε of record "
                    f"{result.epsilon:.4g}" if result.launched else "")
        print(f"recommended: {result.recommendation}{launched}; report {args.out}/routes.md")
    return 0
