"""Which optional part of tanplan a command needs, and the one line that says how to install it.

`pip install tanplan` is the planner alone (`plan`, `proxy`, the frontier `plan --compute`): numpy,
scipy, dp-accounting and matplotlib, no JAX. Every command that trains (and `bench`, `baseline`, `demo`)
needs the `train` extra. A command run without it stops with one line naming the extra (exit 2), before
it reads a config or writes a file; a planner path that reaches a training module anyway (`plan
--device-hours` measuring a throughput) says the same through `missing_extra`.

    >>> PLANNER_COMMANDS
    ('plan', 'proxy')
"""

from __future__ import annotations

import importlib.util

from tanplan.errors import UsageError

EXTRA = "train"
PLANNER_COMMANDS = ("plan", "proxy")
# The top-level modules of the `train` extra (pyproject.toml [project.optional-dependencies] train).
TRAIN_MODULES = ("jax", "jaxlib", "flax", "optax", "jax_privacy", "orbax", "optuna", "pandas", "ray", "mnist1d",
                 "mlxtend", "tqdm", "threadpoolctl", "tensorboardX")


def install_hint(command: str, missing: list[str]) -> str:
    """The one line: what is missing and the install command that brings it.

    >>> install_hint("train", ["jax", "flax", "optax", "ray"])
    "tanplan train needs the 'train' extra (not installed: jax, flax, optax and 1 more): pip install 'tanplan[train]'"
    """
    shown = ", ".join(missing[:3]) + (f" and {len(missing) - 3} more" if len(missing) > 3 else "")
    return f"tanplan {command} needs the '{EXTRA}' extra (not installed: {shown}): pip install 'tanplan[{EXTRA}]'"


def missing_train_modules() -> list[str]:
    """The modules of the train extra that cannot be imported here (found by spec: nothing is imported)."""
    missing = []
    for name in TRAIN_MODULES:
        try:
            found = importlib.util.find_spec(name) is not None
        except (ImportError, ValueError):  # a broken or blocked install counts as missing
            found = False
        if not found:
            missing.append(name)
    return missing


def require_train(command: str) -> None:
    """UsageError (exit 2) naming the extra unless `command` is a planner command or the extra is installed."""
    if command in PLANNER_COMMANDS:
        return
    missing = missing_train_modules()
    if missing:
        raise UsageError(install_hint(command, missing))


def missing_extra(err: ModuleNotFoundError, command: str) -> UsageError | None:
    """The install hint for an import of the train extra that failed, or None for any other module."""
    top = (err.name or "").split(".")[0]
    return UsageError(install_hint(command, [top])) if top in TRAIN_MODULES else None
