"""Initial weights from public data ([init]): read a checkpoint or call a loader, and lay its arrays on
the model's parameters by path.

Sources (init.path / init.loader):
    a tanplan run folder   its released model, <folder>/model/params.npz (or the model/ folder itself); a
                           `tanplan run` folder: its launch's, <folder>/launch/model/params.npz
    file.npz               arrays under "/"-joined parameter paths ("Dense_0/kernel"), as tanplan releases them
    file.msgpack           flax.serialization bytes of a params pytree
    an orbax folder        a PyTree checkpoint (orbax.checkpoint)
    "pkg.mod:load_params"  a function called with no argument that returns the params pytree
A tree whose only top-level key is "params" (flax's variables) is read as its params.

Every parameter of the model takes the init's array at its path, with the same shape; a parameter the init
lacks, an init array the model lacks, or a shape that differs is refused (UsageError, one line naming the
path and both shapes), except for low-rank adapters (tanplan.models.adapters: they keep their fresh draw,
their up-projection zero) and the head (init.head patterns, each naming a parameter of the model; by
default the last top-level Dense of a built-in model), which keeps the model's own fresh initialisation
(experiment.seed) when the class count differs. Every array is checked when it is read (`read_source`, before
any data is loaded): real numbers (bool, integer or floating; strings, objects and complex numbers refused)
and finite, finite still once cast to the model's dtype (`load_init`); a truncated or corrupt file, a loader
that needs an argument or raises, is one line (UsageError), never a traceback. Its digest
(`InitWeights.digest`, of every path, shape, dtype and byte of the source) binds the run's identity and is
stated in summary.json and ledger.json. Where the weights were trained, and what that costs the private set
(a tanplan run's releases may compose with this run's), is tanplan.privacy.init_provenance's; init.path is
checked not to be the private data file before anything is read from it (its digest is never published).
"""

from __future__ import annotations

import hashlib
import inspect
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import flax.serialization
import numpy as np

from tanplan.config import InitConfig
from tanplan.errors import UsageError
from tanplan.models.adapters import is_adapter
from tanplan.models.paths import flat_params, like, matches
from tanplan.plugins import is_import_path, resolve
from tanplan.privacy.init_provenance import released_folder


@dataclass(frozen=True)
class InitWeights:
    """The initial parameters laid on the model, and what they came from."""

    params: Any
    source: str  # init.path or init.loader, as configured
    digest: str  # blake2b of the source's paths, shapes, dtypes and bytes
    reinitialised: tuple[str, ...]  # head parameters left at the fresh initialisation


def default_head(model_name: str, params) -> tuple[str, ...]:
    """The head of a built-in model: its last top-level Dense (every built-in model ends with one); none
    for a plugged-in model (init.head names it)."""
    if is_import_path(model_name):
        return ()
    dense = sorted((int(m.group(1)), k) for k in params if (m := re.fullmatch(r"Dense_(\d+)", k)))
    return (dense[-1][1],) if dense else ()


def read_source(init: InitConfig) -> tuple[dict[str, np.ndarray], str]:
    """({"/"-joined path: array}, source text) of [init]; UsageError when it cannot be read."""
    if init.loader:
        return checked(_flat_tree(_call_loader(init.loader), init.loader), init.loader), init.loader
    return checked(_read_path(init.path), init.path), init.path


def _call_loader(loader: str):
    """The params tree the loader returns, called with no argument; UsageError (one line) when it cannot be."""
    fn = resolve(loader, "init.loader")
    try:
        needs = [p.name for p in inspect.signature(fn).parameters.values()
                 if p.default is p.empty and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
    except (TypeError, ValueError):  # a builtin without a signature: calling it says
        needs = []
    if needs:
        raise UsageError(f"init.loader = {loader!r} is not allowed: it takes arguments ({', '.join(needs)}); a loader "
                         "is called with none and returns the params tree")
    try:
        return fn()
    except UsageError:
        raise
    except Exception as err:  # noqa: BLE001 - the user's loader: one line naming it, never its traceback
        text = str(err).strip().splitlines()[0] if str(err).strip() else ""
        raise UsageError(f"init.loader = {loader!r}: calling it failed: {type(err).__name__}: {text}") from None


def _read_path(text: str) -> dict[str, np.ndarray]:
    """The arrays init.path names (see the module docstring)."""
    init_path = text
    path = Path(init_path).expanduser()
    try:
        exists = path.exists()
    except OSError as err:  # a symlink loop, a name too long
        raise UsageError(f"init.path = {init_path!r} cannot be read: {type(err).__name__}") from None
    if not exists:
        raise UsageError(f"init.path = {init_path!r} does not exist: give a run folder, a .npz, a .msgpack or an "
                         "orbax checkpoint folder")
    path = released_folder(path)  # a `tanplan run` folder: its launch released the model
    for folder in (path / "model", path):
        if (folder / "params.npz").is_file():
            return _read_npz(folder / "params.npz")
    if path.is_file() and path.suffix == ".npz":
        return _read_npz(path)
    if path.is_file() and path.suffix == ".msgpack":
        try:
            tree = flax.serialization.msgpack_restore(path.read_bytes())
        except Exception as err:  # noqa: BLE001 - a foreign file: one line, whatever msgpack raised
            raise UsageError(f"init.path = {init_path!r} is not a flax msgpack of params: {err}") from None
        return _flat_tree(tree, init_path)
    if path.is_dir():
        return _flat_tree(_read_orbax(path, init_path), init_path)
    raise UsageError(f"init.path = {init_path!r} is not allowed: use a run folder, a .npz, a .msgpack or an orbax "
                     "checkpoint folder")


def _read_npz(path: Path) -> dict[str, np.ndarray]:
    try:
        with np.load(path, allow_pickle=False) as f:
            return {k: np.asarray(f[k]) for k in f.files}
    except Exception as err:  # noqa: BLE001 - truncated or corrupt (BadZipFile, EOFError, zlib): one line
        why = str(err).strip().splitlines()[0] if str(err).strip() else ""
        raise UsageError(f"init.path: {str(path)!r} is not a readable .npz of arrays ({type(err).__name__}"
                         f"{': ' + why if why else ''})") from None


def checked(flat: dict[str, np.ndarray], text: str) -> dict[str, np.ndarray]:
    """flat, once every array is real numbers (bool, integer, floating) and finite; UsageError naming the
    first that is not (strings, objects, complex numbers, NaN or infinity)."""
    if not flat:
        raise UsageError(f"init: {text!r} holds no array: give the weights of the model")
    for key, a in flat.items():
        if not _real(a.dtype):
            raise UsageError(f"init: {text!r} holds {key} of dtype {a.dtype}: initial weights are real numbers "
                             "(bool, integer or floating)")
        if a.dtype.kind == "f" or a.dtype.kind == "V":
            if not np.isfinite(a.astype(np.float64)).all():
                raise UsageError(f"init: {text!r} holds NaN or infinite values in {key}: initial weights must be "
                                 "finite")
    return flat


def _real(dtype: np.dtype) -> bool:
    """bool, integers, numpy's floats and the ml_dtypes floats (bfloat16, float8_*) that JAX writes."""
    return dtype.kind in "biuf" or dtype.name == "bfloat16" or dtype.name.startswith("float8")


def _read_orbax(path: Path, text: str):
    import orbax.checkpoint as ocp  # lazy: orbax is heavy and only this source needs it

    try:
        return ocp.PyTreeCheckpointer().restore(str(path.resolve()))
    except Exception as err:  # noqa: BLE001 - a foreign folder: one line, whatever orbax raised
        raise UsageError(f"init.path = {text!r} is neither a run folder nor an orbax checkpoint: "
                         f"{str(err).splitlines()[0] if str(err) else type(err).__name__}") from None


def _flat_tree(tree, source: str) -> dict[str, np.ndarray]:
    if isinstance(tree, dict) and set(tree) == {"params"}:
        tree = tree["params"]
    if not isinstance(tree, dict) or not tree:
        raise UsageError(f"init: {source!r} gave {type(tree).__name__}, not a non-empty params tree (nested dicts of "
                         "arrays)")
    return flat_params(tree)


def digest_of(flat: dict[str, np.ndarray]) -> str:
    """blake2b (128 bits) of every path, shape, dtype and byte, in path order."""
    h = hashlib.blake2b(digest_size=16)
    for key in sorted(flat):
        a = np.ascontiguousarray(flat[key])
        h.update(f"{key}|{a.dtype}|{a.shape}|".encode())
        h.update(a.reshape(-1).view(np.uint8))
    return h.hexdigest()


def load_init(init: InitConfig, model_name: str, params, read: tuple[dict, str] | None = None) -> InitWeights | None:
    """params (the model's fresh initialisation) overlaid with [init]'s weights (`read`: read_source's,
    read again when not given); None without [init]. UsageError (one line) for a missing path, an extra
    one, or a shape mismatch outside the head."""
    if not (init.path or init.loader):
        return None
    source, text = read or read_source(init)
    mine = flat_params(params)
    head = tuple(init.head) or default_head(model_name, params)
    for pattern in init.head:  # a pattern that names nothing re-initialises nothing: a typo, refused
        if not any(matches(pattern, key) for key in mine):
            raise UsageError(f"init.head pattern {pattern!r} names no parameter of the model (its parameters: "
                             f"{', '.join(list(mine)[:4])}{', ...' if len(mine) > 4 else ''})")
    is_head = lambda key: any(matches(p, key) for p in head)  # noqa: E731
    reinit = []
    for key, fresh in mine.items():
        got = source.get(key)
        if (got is not None and got.shape == fresh.shape) or is_adapter(key):  # adapters: their fresh draw
            continue
        if is_head(key):
            reinit.append(key)
            continue
        if got is None:
            raise UsageError(f"init: parameter {key} (shape {fresh.shape}) is missing from {text!r}")
        raise UsageError(f"init: parameter {key} has shape {got.shape} in {text!r}, the model's is {fresh.shape} "
                         "(name it in init.head to re-initialise it)")
    extra = sorted(k for k in source if k not in mine and not is_head(k))
    if extra:
        raise UsageError(f"init: {text!r} holds {extra[0]} (shape {source[extra[0]].shape}), which the model has "
                         f"no parameter for ({len(extra)} such)")
    with np.errstate(over="ignore"):  # a value beyond the dtype's range becomes inf: refused just below
        laid = {k: (v if k in reinit or is_adapter(k) else np.asarray(source[k], dtype=v.dtype))
                for k, v in mine.items()}
    for key, value in laid.items():  # 1e300 in float64 is inf in the model's float32
        if not np.isfinite(np.asarray(value, np.float64)).all():
            raise UsageError(f"init: {text!r}: {key} overflows the model's dtype {mine[key].dtype} (values beyond "
                             "its range): initial weights must be finite")
    return InitWeights(like(params, laid), text, digest_of(source), tuple(reinit))
