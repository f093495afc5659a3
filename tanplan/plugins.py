"""User code named by import path, "package.module:attribute": a model factory (model.name), a data loader
(data.dataset), a per-example loss or metric ([task]), a tracking writer ([tracking] writers).

    >>> is_import_path("my_pkg.nets:make_model"), is_import_path("cnn1d")
    (True, False)
    >>> resolve("math:sqrt", "task.loss")(4.0)
    2.0

`resolve` imports the module in this process and returns the attribute; anything that goes wrong is
one line naming the setting and the path (UsageError, exit 2), raised before a run writes anything.
The same text travels in the config to Ray workers, which import it themselves: the module must be on
their path too (`worker_path` lists the folders this process imported plug-ins from, which the Ray
stages add to the workers' PYTHONPATH).
"""

from __future__ import annotations

import importlib
import os
import re
import sys
from pathlib import Path
from typing import Any

from tanplan.errors import UsageError

IMPORT_PATH = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*:[A-Za-z_]\w*")


def is_import_path(text: str) -> bool:
    return isinstance(text, str) and ":" in text


def resolve(path: str, setting: str, *, what: str = "callable") -> Any:
    """The attribute that `path` names, imported now; UsageError naming `setting` when it cannot be."""
    if not isinstance(path, str) or not IMPORT_PATH.fullmatch(path):
        raise UsageError(f"{setting} = {path!r} is not allowed: an import path reads \"package.module:name\"")
    module_name, _, attribute = path.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as err:
        if err.name and (module_name == err.name or module_name.startswith(err.name + ".")):
            raise UsageError(f"{setting} = {path!r} is not allowed: no module named {err.name!r} (is its folder on "
                             "PYTHONPATH?)") from None
        raise UsageError(f"{setting} = {path!r}: importing {module_name} failed: {err}") from None
    except Exception as err:  # the user's module raised while importing: one line, not its traceback
        raise UsageError(f"{setting} = {path!r}: importing {module_name} failed ({type(err).__name__}: {err})") from None
    if not hasattr(module, attribute):
        raise UsageError(f"{setting} = {path!r} is not allowed: module {module_name} has no attribute {attribute!r}")
    value = getattr(module, attribute)
    if what == "callable" and not callable(value):
        raise UsageError(f"{setting} = {path!r} is not allowed: {attribute} is a {type(value).__name__}, not a "
                         "function or class")
    return value


def worker_path(paths) -> str:
    """PYTHONPATH for worker processes that must import the plug-ins `paths` (import paths; others ignored):
    the folder each top-level package was imported from, then the current PYTHONPATH."""
    folders = []
    for path in paths:
        if not is_import_path(path):
            continue
        top = sys.modules.get(path.partition(":")[0].split(".")[0])
        origin = getattr(top, "__file__", None)
        if origin is None:
            continue
        origin = Path(origin).resolve()
        folder = origin.parent.parent if origin.name == "__init__.py" else origin.parent
        if str(folder) not in folders:
            folders.append(str(folder))
    current = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    return os.pathsep.join(folders + [p for p in current if p not in folders])


def of_config(cfg) -> list[str]:
    """The import paths a config names: its data loaders (private and public), model factory, [task] functions,
    tracking writers."""
    names = [cfg.data.dataset, cfg.tuning.dataset, cfg.model.name, cfg.task.loss, cfg.task.metric, *cfg.tracking.writers]
    return [n for n in names if is_import_path(n)]


def worker_env(cfg) -> dict:
    """Environment variables for Ray workers that must import cfg's plug-ins: {"PYTHONPATH": ...} when
    it names any (each resolved first, so the folders are known), else {}."""
    paths = of_config(cfg)
    for path in paths:
        resolve(path, "a plug-in", what="any")
    return {"PYTHONPATH": worker_path(paths)} if paths else {}
