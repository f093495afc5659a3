"""`tanplan optimize`: the best (B, S, σ) for the config's ε and a compute budget, chosen from proxies."""

from __future__ import annotations

import shlex
from pathlib import Path

from tanplan import api
from tanplan.commands._args import positive_float, positive_int, print_json

HELP = ("simulate plans on the budget frontier (B·S ≤ C, σ calibrated to ε) by constant-η_step proxies, fit "
        "accuracy against ln S and recommend one (B, S, σ) with an interval; --launch trains it")


def configure(parser) -> None:
    parser.add_argument("--config", required=True, help="experiment TOML (privacy.epsilon is the budget)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a config key")
    parser.add_argument("--best", help="best.json of a sweep: its configuration is the one simulated")
    budget = parser.add_mutually_exclusive_group()
    budget.add_argument("--compute", type=positive_int, metavar="C", help="compute budget in examples (B·S); default "
                        "[optimize] compute, else the config's train.batch_size × train.steps")
    budget.add_argument("--device-hours", type=positive_float, metavar="H",
                        help="compute budget as device hours × 3600 × --samples-per-second")
    parser.add_argument("--samples-per-second", type=positive_float, metavar="X",
                        help="DP-SGD throughput of one device, with --device-hours (measure it with `tanplan bench`)")
    parser.add_argument("--launch", action="store_true", help="then launch the recommendation, as `tanplan run` does")
    parser.add_argument("--out", required=True, metavar="DIR")
    parser.add_argument("--json", action="store_true")


def execute(args) -> int:
    source = " ".join(["--config", shlex.quote(args.config)] + [f"--set {shlex.quote(s)}" for s in args.set]
                      + ([f"--best {shlex.quote(args.best)}"] if args.best else []))
    log = (lambda *a, **k: None) if args.json else print
    result = api.optimize(args.config, Path(args.out), overrides=args.set, best=args.best, compute=args.compute,
                          device_hours=args.device_hours, samples_per_second=args.samples_per_second,
                          launch=args.launch, log=log, progress=not args.json, source=source)
    if args.json:
        print_json(result.to_dict())
        return 0
    for name, r in (("recommendation", result.recommendation), ("runner-up", result.runner_up)):
        low, high = r.prediction_interval
        print(f"{name}: B = {r.batch_size:,}, S = {r.steps:,}, σ = {r.sigma:.4g} "
              f"(ε = {r.epsilon:.4f} {r.accountant.upper()}, RDP {r.eps_rdp:.4f}), learning rate "
              f"{r.learning_rate:.4g}: predicted accuracy "
              f"{r.predicted_accuracy:.4f} [{low:.4f}, {high:.4f}]")
    print(f"verdict: {result.verdict}")
    print(f"proxy compute: {result.proxy_compute_fraction:.3f} of one launch; simulated in "
          f"{result.simulation_seconds:.0f} s")
    if result.launch:
        a = result.launch
        print(f"launched: actual accuracy {a.actual_accuracy:.4f} "
              f"({'inside' if a.inside_interval else 'OUTSIDE'} the interval); ε = {a.epsilon_rdp:.4g} (RDP), "
              f"total ε on the private set {result.epsilon_total:.4g} ({result.epsilon_total_accountant.upper()}; "
              f"{result.tuning_data} tuning data)")
    print(f"report: {Path(args.out) / 'report.md'}")
    return 0
