"""`tanplan` command line: one sub-command per stage, each in tanplan/commands/<name>.py.

A command module defines HELP, configure(parser) and run(args) -> exit code, and imports anything heavy
(JAX, pandas, matplotlib, Ray) inside run(), so that `tanplan plan` stays fast. Errors become exit codes
here: 2 bad input, 3 privacy budget exceeded, 4 not launched (`tanplan run`), 5 privacy violation found by
`tanplan audit`, 1 internal error; always one line on stderr. Without the `train` extra only the planner
(plan, proxy) runs: any other command says which extra to install (tanplan.extras), exit 2.
"""

from __future__ import annotations

import argparse
import errno
import importlib
import os
import sys

from tanplan import __version__
from tanplan.commands._args import check_paths
from tanplan.errors import TanplanError, UsageError
from tanplan.extras import missing_extra, require_train
from tanplan.runtime import configure_process

COMMANDS = ("plan", "proxy", "bench", "train", "pretrain", "sweep", "fit", "optimize", "launch", "run", "baseline", "audit",
            "demo", "convert")


class _Parser(argparse.ArgumentParser):
    """argparse that raises UsageError (one line, exit 2) instead of printing usage and exiting."""

    def error(self, message: str):  # noqa: D401 - argparse API
        raise UsageError(f"{self.prog}: {message}")


def _load(name: str):
    return importlib.import_module(f"tanplan.commands.{name}")


def build_parser(commands=COMMANDS) -> argparse.ArgumentParser:
    parser = _Parser(prog="tanplan", description="Plan, simulate and launch DP-SGD with the TAN scaling laws.")
    parser.add_argument("--version", action="version", version=f"tanplan {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for name in commands:
        try:
            module = _load(name)
        except ModuleNotFoundError as err:
            if err.name != f"tanplan.commands.{name}":
                raise
            continue  # stage not built yet
        cmd = sub.add_parser(name, help=module.HELP, description=module.HELP)
        module.configure(cmd)
        cmd.set_defaults(_run=module.execute)
    return parser


# A path the user gave that cannot be used (exit 2), as opposed to a failure of the machine (exit 1).
_BAD_PATH_ERRNOS = {errno.ENOENT, errno.EACCES, errno.EPERM, errno.EROFS, errno.ENOTDIR, errno.EISDIR, errno.EEXIST}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    configure_process()
    try:
        # Build only the parser of the command asked for: the others may import more.
        wanted = [a for a in argv[:1] if a in COMMANDS]
        if wanted and not {"-h", "--help"} & set(argv):
            require_train(wanted[0])  # before the config is read or anything is written
        parser = build_parser(wanted or COMMANDS)
        args = parser.parse_args(argv)
        check_paths(args)  # --out "": refused on every command, before anything is read or written
        if not getattr(args, "_run", None):
            parser.print_help()
            return 2
        try:
            return int(args._run(args) or 0)
        except ModuleNotFoundError as err:  # a planner path that needs the train extra (plan --device-hours)
            raise missing_extra(err, args.command) or err
    except TanplanError as err:
        print(f"tanplan: error: {err}", file=sys.stderr)
        return err.exit_code
    except KeyboardInterrupt:
        print("tanplan: interrupted", file=sys.stderr)
        return 130
    except OSError as err:  # an unwritable or missing path, a full disk: name the path, no traceback
        where = f" {err.filename}" if err.filename else ""
        print(f"tanplan: error: cannot use{where}: {err.strerror or err}", file=sys.stderr)
        return 2 if err.errno in _BAD_PATH_ERRNOS else 1
    except Exception as err:  # an internal error: one line unless TANPLAN_DEBUG asks for the traceback
        if os.environ.get("TANPLAN_DEBUG"):
            raise
        if "RESOURCE_EXHAUSTED" in str(err):  # the config asks for more memory than the device has: its input
            print("tanplan: error: a step does not fit in the device's memory: lower train.physical_batch_size, "
                  "data.aug_mult or the model's size (ledger.json counts any step dispatched)", file=sys.stderr)
            return 2
        print(f"tanplan: internal error: {type(err).__name__}: {err} (set TANPLAN_DEBUG=1 for the traceback)",
              file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
