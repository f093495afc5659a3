"""`tanplan launch`: the full-scale run, refused (exit 3) before any step if it would exceed the budget."""

from __future__ import annotations

import argparse

from tanplan import api
from tanplan.commands._args import positive_int, print_json
from tanplan.commands.train import init_line
from tanplan.workflow.best import REGISTRY

HELP = "run the full-scale DP-SGD training of a config, exactly accounted (exit 3 if over the ε budget)"


def non_negative_int(text: str) -> int:
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


def execute(args) -> int:
    # every input (config, best.json and its tuning runs, backend, address, folder) is checked before any data is read
    result = api.launch(args.config, args.out, overrides=args.set, best=args.best, progress=not args.json,
                        backend=args.backend, resume=args.resume, num_workers=args.num_workers,
                        gpus_per_worker=args.gpus_per_worker, address=args.address,
                        allow_public_noise=args.allow_public_noise)
    if args.json:
        print_json(result.to_dict())
        return 0
    a = result.accounting
    if a:
        relation = "" if a.neighbouring == "add_remove" else ", replace-one of record"
        eps = (f"ε = {a.epsilon:.4g} ({a.accountant.upper()}{relation}; RDP {a.epsilon_rdp:.4g}, PLD "
               f"{a.epsilon_pld:.4g}, replace-one {a.epsilon_replace_one:.4g}) at δ = {a.delta:.3g}")
        if result.epsilon is not None and result.epsilon != a.epsilon:  # the guarantee composes more than the launch
            eps = f"ε = {result.epsilon:.4g} of record, this launch's own {eps}"
    else:
        eps = "non-private"
    print(f"test accuracy {result.summary.test_accuracy:.4f}; {eps}; {result.wall_seconds:.1f} s")
    if init_line(result.summary):  # the ε of record composes what its [init] inherited
        print(f"init: {init_line(result.summary)}")
    if result.tuning_note:
        print(result.tuning_note)
    if result.tuning_data == "private":
        runs = result.epsilon_total_runs - 1  # registry: fits recorded for best.json (private_releases.json) too
        whose = (f"the {runs} tuning runs on it" if result.tuning and REGISTRY in result.tuning.source else
                 f"the sweep's {runs} runs")
        print(f"total ε on the private set ({whose} and the launch): "
              f"{result.epsilon_total:.4g} ({result.epsilon_total_accountant.upper()}; RDP "
              f"{result.epsilon_total_rdp:.4g}) at δ = {a.delta:.3g}"
              + (f" ({result.epsilon_total_note})" if result.epsilon_total_note else ""))
    return 0
