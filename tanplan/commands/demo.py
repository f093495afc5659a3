"""`tanplan demo [--out DIR]` (what `make demo` runs): the planner's report on the paper's ImageNet
setting, then the whole pipeline (`tanplan run --baselines`: plan → sweep → ladder → launch, the
proxies on an independent public draw) on the embedded mnist1d default.

The demo's config ships inside the package (tanplan/configs/mnist1d.toml, which in a checkout is a link
to experiments/mnist1d.toml: one file), so the demo runs from an installed wheel too."""

from __future__ import annotations

import argparse
from importlib.resources import files
from pathlib import Path

from tanplan.commands import plan, run as run_command
from tanplan.errors import UsageError

HELP = "the demo: the paper's ImageNet plan, then plan → sweep → ladder → launch → baselines on mnist1d"

IMAGENET_PLAN = ["--dataset-size", "1281167", "--batch-size", "16384", "--steps", "72000", "--sigma", "2.5",
                 "--delta", "8e-7", "--accountant", "both"]
CONFIG = Path(str(files("tanplan") / "configs" / "mnist1d.toml"))


def configure(parser) -> None:
    parser.add_argument("--out", default="reports", metavar="DIR",
                        help="reports/ by default: DIR/imagenet/plan and DIR/mnist1d")


def execute(args) -> int:
    if not CONFIG.is_file():
        raise UsageError(f"the demo config {CONFIG} is missing: reinstall tanplan (it ships in the package)")
    print("== the paper's ImageNet plan")
    code = _invoke(plan, [*IMAGENET_PLAN, "--out", f"{args.out}/imagenet/plan"])
    if code:
        return code
    print("\n== mnist1d: plan → sweep → ladder → launch (proxies on public data), then the cheaper private "
          "methods at the same ε")
    from tanplan.workflow.pipeline import RUN_FILE  # lazy: JAX; the planner install imports this module for CONFIG

    again = ["--resume"] if (Path(args.out) / "mnist1d" / RUN_FILE).is_file() else []  # a second demo reuses it
    return _invoke(run_command, ["--config", str(CONFIG), "--out", f"{args.out}/mnist1d", "--baselines", *again])


def _invoke(command, argv: list[str]) -> int:
    """Run a sub-command's module on argv, as `tanplan <command> argv` would."""
    parser = argparse.ArgumentParser(prog=f"tanplan {command.__name__.rpartition('.')[2]}")
    command.configure(parser)
    return int(command.execute(parser.parse_args(argv)) or 0)
