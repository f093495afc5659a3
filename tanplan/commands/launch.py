"""`tanplan launch`: the full-scale run, refused (exit 3) before any step if it would exceed the budget."""

from __future__ import annotations

from tanplan.commands._args import positive_int, print_json

HELP = "run the full-scale DP-SGD training of a config, exactly accounted (exit 3 if over the ε budget)"


def non_negative_int(text: str) -> int:
    import argparse

    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not allowed: use an integer >= 0")
    return value


def configure(parser) -> None:
    parser.add_argument("--config", required=True, help="experiment TOML")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a config key")
    parser.add_argument("--best", help="best.json of a sweep: its configuration is the one launched")
    parser.add_argument("--out", required=True, metavar="DIR")
    parser.add_argument("--resume", action="store_true",
                        help="continue the last checkpoint in DIR exactly (same batches and noise)")
    parser.add_argument("--backend", choices=("local", "ray"), default="local",
                        help="local: every local device (default); ray: workers through Ray Train's JaxTrainer")
    parser.add_argument("--num-workers", type=positive_int, default=1, help="ray: number of worker processes")
    parser.add_argument("--gpus-per-worker", type=non_negative_int, default=0, help="ray: GPUs per worker (0 = CPU)")
    parser.add_argument("--address", help="ray: address of a running cluster (default: start a local one)")
    parser.add_argument("--allow-public-noise", action="store_true",
                        help="accept privacy.noise_seed (noise reproducible from the config: NOT private; tests only)")
    parser.add_argument("--json", action="store_true")


def run(args) -> int:
    import json
    from pathlib import Path

    from tanplan.workflow import fit
    from tanplan.config import load_config, with_tuned
    from tanplan.errors import UsageError
    from tanplan.ray_session import check_address
    from tanplan.workflow.inputs import check_config, check_out_dir, check_resume
    from tanplan.workflow.launch import check_tuning_runs, launch, tuning_of_best, with_tuning

    cfg = load_config(args.config, args.set)
    cfg = with_tuned(cfg, fit.load_best_overrides(args.best), f"--best {args.best}")
    if args.backend == "local" and (args.num_workers != 1 or args.gpus_per_worker or args.address):
        raise UsageError("--num-workers, --gpus-per-worker and --address are not allowed with --backend local: "
                         "use --backend ray")
    check_address(args.address)  # malformed or unreachable: before any data is read
    check_config(cfg)
    check_out_dir(args.out)
    check_resume(args.out, args.resume)
    record = trials = note = None
    if args.best:  # where the sweep's proxies trained: composed with the launch when it was the private set
        record, trials, note = tuning_of_best(json.loads(Path(args.best).read_text(encoding="utf-8")), args.best)
    check = (lambda run: check_tuning_runs(trials, run)) if trials is not None else None
    result = launch(cfg, args.out, progress=not args.json, backend=args.backend, resume=args.resume,
                    num_workers=args.num_workers, gpus_per_worker=args.gpus_per_worker, address=args.address,
                    allow_public_noise=args.allow_public_noise, before_training=check)
    if record is not None and result["accounting"]:
        result = with_tuning(result, Path(args.out), record, trials)
    result["tuning_note"] = note
    if args.json:
        print_json(result)
        return 0
    s, a = result["summary"], result["accounting"]
    if a:
        relation = "" if a["neighbouring"] == "add_remove" else ", replace-one of record"
        eps = (f"ε = {a['epsilon']:.4g} ({a['accountant'].upper()}{relation}; RDP {a['epsilon_rdp']:.4g}, PLD "
               f"{a['epsilon_pld']:.4g}, replace-one {a['epsilon_replace_one']:.4g}) at δ = {a['delta']:.3g}")
    else:
        eps = "non-private"
    print(f"test accuracy {s['test_accuracy']:.4f}; {eps}; {result['wall_seconds']:.1f} s")
    if note:
        print(note)
    if "epsilon_total" in result and result["tuning_data"] == "private":
        print(f"total ε on the private set (the sweep's {result['epsilon_total_runs'] - 1} runs and the launch): "
              f"{result['epsilon_total']:.4g} ({result['epsilon_total_accountant'].upper()}; RDP "
              f"{result['epsilon_total_rdp']:.4g}) at δ = {a['delta']:.3g}"
              + (f" ({result['epsilon_total_note']})" if result["epsilon_total_note"] else ""))
    return 0
