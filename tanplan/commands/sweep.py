"""`tanplan sweep --config FILE --proxy-batch-size B' --trials T --out DIR [--address ray://...|auto]
[--resume] [--json]`: search hyper-parameters on the constant-TAN proxy with Ray Tune and Optuna."""

from __future__ import annotations

from tanplan.commands._args import positive_int

HELP = ("search hyper-parameters on the proxy (B', σ·B'/B, S) with Ray Tune + Optuna TPE; "
        "writes sweep.csv, best.json, figures and sweep.md")


def configure(parser) -> None:
    parser.add_argument("--config", default=None, help="TOML config; its [sweep] section holds the search space")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="SECTION.KEY=VALUE",
                        help="override a config key, e.g. --set train.steps=300 (repeatable)")
    parser.add_argument("--proxy-batch-size", type=positive_int, default=None, metavar="B'",
                        help="proxy batch size every trial trains (default: [sweep] proxy_batch_size)")
    parser.add_argument("--trials", type=positive_int, default=None, help="trials of the search (default: [sweep] trials)")
    parser.add_argument("--top-k", type=int, default=None, metavar="K",
                        help="best configurations to re-run over --seeds seeds (0 = none; default: [sweep] top_k)")
    parser.add_argument("--seeds", type=positive_int, default=None, help="seeds per re-run (default: [sweep] seeds)")
    parser.add_argument("--scheduler", choices=("none", "asha"), default=None,
                        help="asha: stop weak trials at intermediate evaluations (default: [sweep] scheduler)")
    parser.add_argument("--max-concurrent", type=positive_int, default=None,
                        help="trials at once (default: one per GPU, 1 without GPUs)")
    parser.add_argument("--out", required=True, metavar="DIR", help="sweep folder: study, results, figures")
    parser.add_argument("--address", default=None,
                        help="Ray cluster to attach to: auto, HOST:PORT or ray://HOST:PORT (default: a local Ray)")
    parser.add_argument("--resume", action="store_true", help="continue the sweep in DIR; finished trials are kept")
    parser.add_argument("--json", action="store_true", help="print best.json's content as JSON")


def run(args) -> int:
    import sys
    from pathlib import Path

    from tanplan.commands._args import print_json, print_table
    from tanplan.config import load_config
    from tanplan.errors import UsageError
    from tanplan.fileio import write_json_atomic
    from tanplan.workflow import privacy_spent
    from tanplan.workflow.sweep.search import check_address, prepare, run_sweep

    if args.top_k is not None and args.top_k < 0:
        raise UsageError(f"--top-k {args.top_k} is not allowed: must be >= 0")
    cfg = load_config(args.config, args.overrides)
    from tanplan.workflow import tuning
    from tanplan.workflow.inputs import check_config, check_out_dir, check_sweep_space
    from tanplan.workflow.sweep.search import check_proxy
    from tanplan.workflow.sweep.study import check_study_file

    check_config(cfg)  # names, paths, the folder, the address, the study, the space: before any data is read
    check_out_dir(args.out)
    check_address(args.address)
    check_study_file(Path(args.out), resume=args.resume)
    check_proxy(cfg, args.proxy_batch_size)
    check_sweep_space(cfg)
    tuning.check(cfg)
    tune = tuning.for_config(cfg)  # the trials train the proxies' config: [tuning] data, public by default
    spec = prepare(tune.proxy_cfg, proxy_batch_size=args.proxy_batch_size, trials=args.trials, top_k=args.top_k,
                   seeds=args.seeds, scheduler=args.scheduler, max_concurrent=args.max_concurrent)
    log = (lambda line: print(line, file=sys.stderr, flush=True)) if args.json else (lambda line: print(line, flush=True))
    t, p = spec.target, spec.proxy
    log(f"tanplan sweep: target B={t['batch_size']} σ={_g(t.get('sigma'))} S={t['steps']}  ->  proxy "
        f"B'={p['batch_size']} σ'={_g(p.get('sigma'))}  ({t['batch_size'] / p['batch_size']:.3g}x cheaper), "
        f"{spec.trials} trials over {', '.join(d.name for d in spec.dims)}; proxies learn on {tune.source}")
    try:
        summary = run_sweep(spec, Path(args.out), address=args.address, resume=args.resume, log=log)
    except KeyboardInterrupt:
        print(f"tanplan: sweep interrupted; finished trials are kept in {args.out}: continue with --resume",
              file=sys.stderr)
        return 130
    spent = privacy_spent.report(Path(args.out) / "trials", args.out, "sweep trials and re-runs", tune)
    summary["privacy_spent"] = spent
    summary["tuning"] = tune.to_dict()
    summary["trials_dir"] = "trials"  # `launch --best` composes these ledgers with the launch's (private tuning)
    write_json_atomic(Path(args.out) / "best.json", summary)
    if args.json:
        print_json(summary)
        return 0
    best = summary["best"]
    c = summary["trials"]
    rows = [("trials", ", ".join(f"{c[s]} {s}" for s in ("finished", "pruned", "diverged", "error") if c[s]) or "0")]
    if best:
        rows += [("best trial", str(best["trial"])),
                 ("parameters", " ".join(f"{k}={_g(v)}" for k, v in best["params"].items())),
                 ("search accuracy", f"{best['search_accuracy']:.4f}")]
        if best["mean_accuracy"] is not None:
            spread = f" ± {best['std_accuracy']:.4f}" if best["std_accuracy"] is not None else ""
            rows.append((f"mean over {best['reruns']} seeds", f"{best['mean_accuracy']:.4f}{spread}"))
    rows += [("wall time", f"{summary['wall_seconds']['search']:.0f} s search, "
                           f"{summary['wall_seconds']['reruns']:.0f} s re-runs"),
             ("tuning data", tune.source + (": the private set is untouched" if tune.data == "public" else
                                            ": compose this ε with the launch's (`launch --best` does)")),
             ("ε of all its runs composed", privacy_spent.describe(spent)),
             ("written to", f"{args.out} (sweep.csv, best.json, sweep.md, privacy_spent.json)")]
    print_table(rows, title=f"tanplan sweep: {cfg.experiment.name}")
    return 0


def _g(v) -> str:
    return "-" if v is None else f"{v:.4g}" if isinstance(v, float) else str(v)
