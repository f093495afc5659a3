"""The released model: its own artifact, separate from the private checkpoint.

    out/model/params.npz   the parameters a user deploys: the EMA when the EMA is on, else the final ones
    out/model/model.json   what they are: the model (name, width, depth, norm_order, options, classes, input
                           shape: all `load_run` needs to rebuild it), which weights, (ε, δ) spent

Nothing here can replay the run's noise: no PRNG key, no secret, no optimizer state. Read it back with
`load_params` (arrays by path) or `load_run` (tanplan.load_run: the module, its params and a jitted predict).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import jax
import numpy as np

from tanplan.errors import UsageError
from tanplan.fileio import write_bytes_atomic, write_json_atomic
from tanplan.models import create_model
from tanplan.models.paths import flat_params, like, paths

FOLDER = "model"


@dataclass(frozen=True)
class LoadedRun:
    """A released model read back: its flax module, its parameters, predict(x) -> logits (jitted; x a batch of
    inputs in the form the run's data gave them) and model.json's card."""

    model: Any
    params: Any
    predict: Callable
    card: dict


def load_run(folder: str | Path) -> LoadedRun:
    """The released model of a run folder (or of its model/ folder): rebuilt from model.json, its params laid
    by path with shapes checked (UsageError, one line, otherwise). A plugged-in model's import path must be
    importable, as it was for the run."""
    folder = Path(folder)
    folder = folder / FOLDER if (folder / FOLDER / "model.json").is_file() else folder
    if not (folder / "model.json").is_file() or not (folder / "params.npz").is_file():
        raise UsageError(f"{str(folder)!r} holds no released model (model.json and params.npz): a run writes them "
                         "into <run>/model when it finishes")
    card = json.loads((folder / "model.json").read_text(encoding="utf-8"))
    shape = tuple(card["input_shape"])
    model = create_model(card["model"], card["num_classes"], width=card.get("width", 0), depth=card.get("depth", 0),
                         norm_order=card.get("norm_order", "conv_gn_relu"), options=card.get("options") or None,
                         input_shape=shape)
    template = jax.eval_shape(lambda: model.init(jax.random.key(0), np.zeros((1, *shape), np.float32))["params"])
    flat = load_params(folder)
    wanted = {p: tuple(leaf.shape) for p, leaf in zip(paths(template), jax.tree.leaves(template))}
    for path, want in wanted.items():
        got = flat.get(path)
        if got is None or got.shape != want:
            raise UsageError(f"{str(folder)!r}: parameter {path} has shape {None if got is None else got.shape}, "
                             f"the model of model.json needs {want}")
    params = like(template, flat)
    predict = jax.jit(lambda x: model.apply({"params": params}, x))
    return LoadedRun(model, params, predict, card)


def write_model(out: Path, params, card: dict) -> Path:
    """out/model/params.npz and out/model/model.json (card: what describes the weights); returns the folder."""
    import io

    folder = Path(out) / FOLDER
    buf = io.BytesIO()
    np.savez(buf, **flat_params(params))
    write_bytes_atomic(folder / "params.npz", buf.getvalue())
    write_json_atomic(folder / "model.json", card)
    return folder


def load_params(folder: str | Path) -> dict[str, np.ndarray]:
    """The released parameters as {"layer/name": array} (no pickled objects are read)."""
    with np.load(Path(folder) / "params.npz", allow_pickle=False) as f:
        return {k: f[k] for k in f.files}
