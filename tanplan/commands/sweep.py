"""`tanplan sweep --config FILE --proxy-batch-size B' --trials T --out DIR [--address ray://...|auto]
[--resume] [--json]`: search hyper-parameters on the constant-TAN proxy with Ray Tune and Optuna."""

from __future__ import annotations

import sys

from tanplan import api
from tanplan.commands._args import positive_int, print_json, print_table
from tanplan.outcomes.sweep import SweepResult
from tanplan.workflow import privacy_spent

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


def execute(args) -> int:
    log = (lambda line: print(line, file=sys.stderr, flush=True)) if args.json else (lambda line: print(line, flush=True))
    try:  # every input (config, folder, address, study, space, tuning data) is checked before any data is read
        result = api.sweep(args.config, args.out, overrides=args.overrides, proxy_batch_size=args.proxy_batch_size,
                           trials=args.trials, top_k=args.top_k, seeds=args.seeds, scheduler=args.scheduler,
                           max_concurrent=args.max_concurrent, address=args.address, resume=args.resume, log=log)
    except KeyboardInterrupt:
        print(f"tanplan: sweep interrupted; finished trials are kept in {args.out}: continue with --resume",
              file=sys.stderr)
        return 130
    if args.json:
        print_json(result.to_dict())
        return 0
    name = api.as_config(args.config, args.overrides).experiment.name
    print_table(_rows(result, args.out), title=f"tanplan sweep: {name}")
    return 0


def _rows(result: SweepResult, out) -> list[tuple[str, str]]:
    """The sweep's outcome as (label, value) rows: trials, the best configuration, time, its ε."""
    best, c, spent, tune = result.best, result.trials, result.privacy_spent, result.tuning
    rows = [("trials", ", ".join(f"{c.count(s)} {s}" for s in ("finished", "pruned", "diverged", "error")
                                 if c.count(s)) or "0")]
    if best:
        rows += [("best trial", str(best.trial)),
                 ("parameters", " ".join(f"{k}={_g(v)}" for k, v in best.params.items())),
                 ("search accuracy", f"{best.search_accuracy:.4f}")]
        if best.mean_accuracy is not None:
            spread = f" ± {best.std_accuracy:.4f}" if best.std_accuracy is not None else ""
            rows.append((f"mean over {best.reruns} seeds", f"{best.mean_accuracy:.4f}{spread}"))
    return rows + [
        ("wall time", f"{result.wall_seconds.search:.0f} s search, {result.wall_seconds.reruns:.0f} s re-runs"),
        ("tuning data", tune["source"] + (": the private set is untouched" if tune["tuning_data"] == "public" else
                                          ": compose this ε with the launch's (`launch --best` does)")),
        ("ε of all its runs composed" if tune["tuning_data"] == "private" else
         "its runs' ε (on the public set)", privacy_spent.describe(spent)),
        ("written to", f"{out} (sweep.csv, best.json, sweep.md, privacy_spent.json)")]


def _g(v) -> str:
    return "-" if v is None else f"{v:.4g}" if isinstance(v, float) else str(v)
