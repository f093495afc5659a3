"""Checks of a command's input that need no data: names, files, folders. Commands call them before any
data is loaded or generated, any noise is drawn or any step is trained, so that a typo costs a second
and one line (UsageError, exit 2) rather than a dataset generation, a sweep or a spent budget.

    >>> from tanplan.config import load_config
    >>> check_inputs(load_config(None, ["model.name=cnn1d"]))  # mnist1d, a 1D model: fine
"""

from __future__ import annotations

import os
from pathlib import Path

from tanplan import task
from tanplan.config import Config
from tanplan.data import dataset_kind
from tanplan.data.cifar10 import resolve_dir
from tanplan.data.memmap import read_meta
from tanplan.errors import UsageError
from tanplan.job import job_of
from tanplan.plugins import is_import_path
from tanplan.workflow.sweep.space import default_space, parse_space


def check_inputs(cfg: Config) -> None:
    """The dataset (name, and its path where it reads one), the model (name, width, depth, norm order,
    and that it reads this dataset's kind of input) and the augmentation family, without loading data.

    [init]'s weights are read and checked, and their provenance read (tanplan.engine.setup.check_init).
    Plug-ins (import paths in data.dataset, model.name, [task]) are imported here, so a bad path is one line
    before anything is written; a plugged-in model is then checked for per-example independence on a
    public synthetic batch of the data's input shape (tanplan.engine.setup.build_model), which needs the
    data's metadata: a plugged-in loader or a memmap folder reads none of its rows for it, a built-in
    dataset is loaded."""
    from tanplan.data import available_augmentations  # lazy: JAX; the commands' parsers import this module
    from tanplan.models import MODELS, create_model  # lazy: JAX; the API (the planner's) imports this module

    d, m = cfg.data, cfg.model
    task.from_config(cfg)  # the [task] import paths
    _check_data_path(d.dataset, d.path)
    if cfg.init.path or cfg.init.loader:
        from tanplan.engine.setup import check_init  # lazy: JAX (flax reads the weights); the parsers import this module

        check_init(job_of(cfg))  # the weights read and checked, and where they were trained (an audit's run refused)
    kind = dataset_kind(d.dataset, d.path or None, d.options)
    if not is_import_path(m.name):  # a plug-in is built below, with the data's input shape (its factory may need it)
        create_model(m.name, 2, width=m.width, depth=m.depth, norm_order=m.norm_order, options=m.options)  # names, sizes
    if is_import_path(m.name) or cfg.task.loss or cfg.task.metric:
        from tanplan.engine.setup import build_model, load_data  # lazy: JAX; the API (the planner's) imports this module

        data = load_data(cfg.data)
        build_model(job_of(cfg), data.num_classes, data.input_shape)  # per-example independence, the task's shapes
    reads = MODELS[m.name].inputs if m.name in MODELS else "any"
    if reads not in ("any", kind):
        takes = ", ".join(name for name, spec in MODELS.items() if spec.inputs in ("any", kind))
        raise UsageError(f"model.name = {m.name!r} reads {reads} inputs but data.dataset = {d.dataset!r} holds {kind} "
                         f"data; models for it: {takes}")
    if d.augmentation != "none" and d.augmentation not in available_augmentations(kind):
        raise UsageError(f"data.augmentation = {d.augmentation!r} is not allowed for {kind} data; valid: "
                         f"{', '.join(available_augmentations(kind))}")


def _check_data_path(dataset: str, path: str) -> None:
    if dataset == "cifar10":
        resolve_dir(path)  # the directory and its six files exist
    elif dataset == "npz":
        if not path:
            raise UsageError("data.path is empty: the npz dataset needs a .npz file with x_train, y_train, x_test, "
                             "y_test")
        if not Path(path).expanduser().is_file():
            raise UsageError(f"data.path = {path!r} is not allowed: no such file (the npz dataset reads one .npz)")
    elif dataset == "memmap":
        if not path:
            raise UsageError("data.path is empty: the memmap dataset needs the folder that `tanplan convert` wrote")
        read_meta(path)  # meta.json and the .npy headers agree


def check_out_dir(path: str | os.PathLike | None, flag: str = "--out") -> None:
    """UsageError unless `path` is a folder this process can write, or can be created as one."""
    if path is None:
        return
    if not os.fspath(path).strip():  # Path("") is ".": an empty name would write into the current folder
        raise UsageError(f"{flag} {os.fspath(path)!r} is not allowed: name a folder")
    path = Path(path)
    if path.exists():
        if not path.is_dir():
            raise UsageError(f"{flag} {str(path)!r} is not allowed: it is a file, not a folder")
        if not os.access(path, os.W_OK | os.X_OK):
            raise UsageError(f"{flag} {str(path)!r} is not allowed: the folder is not writable")
        return
    parent = path.absolute().parent
    while not parent.exists():
        parent = parent.parent
    if not parent.is_dir():
        raise UsageError(f"{flag} {str(path)!r} is not allowed: {str(parent)!r} is a file, not a folder")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise UsageError(f"{flag} {str(path)!r} is not allowed: it cannot be created in {str(parent)!r} "
                         "(not writable)")


def check_resume(out: str | os.PathLike | None, resume: bool) -> None:
    """With --resume, UsageError unless `out` holds a run to continue (its private folder and secret):
    a resume into a folder that does not exist is a typo, not a fresh run."""
    if not resume:
        return
    if out is None:
        raise UsageError("--resume needs --out DIR: the folder of the run to continue")
    folder = Path(out)
    if not folder.is_dir():
        raise UsageError(f"--resume is not allowed: {str(folder)!r} does not exist; drop --resume to start a new run "
                         "there")
    if not (folder / "checkpoint" / "run_secret.json").is_file():
        raise UsageError(f"--resume is not allowed: {str(folder)!r} holds no run to continue (no "
                         "checkpoint/run_secret.json); drop --resume to start a new run there")


def check_sweep_space(cfg: Config) -> None:
    """[sweep.space] (or the default space of the dataset's kind), every value a trial could take."""
    from tanplan.data import available_augmentations  # lazy: JAX; the commands' parsers import this module
    from tanplan.models import available_models  # lazy: JAX; the API (the planner's) imports this module

    kind = dataset_kind(cfg.data.dataset, cfg.data.path or None, cfg.data.options)
    parse_space(cfg.sweep.space or default_space(kind), cfg, augmentations=available_augmentations(kind),
                models=available_models())


