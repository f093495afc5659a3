"""mnist1d, generated offline with the `mnist1d` package and cached on disk after the first build.

`mnist1d.data.make_dataset` makes num_samples // 10 signals per class from ten 1D templates (padding,
scaling, translation, correlated and i.i.d. noise, shear, resampling to 40 points), shuffles them,
standardises the whole set with one global mean and std (part of the benchmark's definition: the data
are synthetic) and puts the first 80% in the training split. It is deterministic given the seed.
Building 60,000 samples takes about a minute on one CPU core, hence the cache.
"""

from __future__ import annotations

import hashlib
import json
import random
import sys
from importlib import metadata
from pathlib import Path

import numpy as np

from tanplan.data.cache import build_lock, cache_dir, load_arrays, save_arrays
from tanplan.data.dataset import Dataset
from tanplan.errors import UsageError
from tanplan.fileio import write_json_atomic

NUM_CLASSES = 10
KEYS = ("x_train", "y_train", "x_test", "y_test")


def generator_args(num_samples: int, seed: int) -> dict:
    """mnist1d's own default arguments, with our sample count and seed."""
    # mnist1d.data imports matplotlib.pyplot, scipy.interpolate and requests (about 1.5 CPU-s): only to generate
    from mnist1d.data import get_dataset_args

    args = get_dataset_args(as_dict=True)
    args.update(num_samples=int(num_samples), seed=int(seed))
    args.pop("url", None)  # the download location plays no part in what is generated
    return args


def _version() -> str:
    try:
        return metadata.version("mnist1d")
    except metadata.PackageNotFoundError:
        return "unknown"


def _key_args(num_samples: int, seed: int, version: str) -> dict:
    """generator_args as the cache key reads them (JSON): from a note of the package's defaults beside the cache,
    written by the first process that imported it, so that a process reading cached data never imports mnist1d
    (its defaults are fixed for an installed version, and the version is part of the key)."""
    note = cache_dir() / "mnist1d" / f"defaults_{hashlib.sha256(version.encode()).hexdigest()[:12]}.json"
    try:
        defaults = json.loads(note.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        defaults = json.loads(json.dumps(generator_args(0, 0)))
        try:
            write_json_atomic(note, defaults)
        except OSError:  # an unwritable cache costs time, not correctness
            pass
    return {**defaults, "num_samples": int(num_samples), "seed": int(seed)}


def cache_path(num_samples: int, seed: int) -> Path:
    """File name keyed by everything that changes the data: arguments and the package version."""
    version = _version()
    args = _key_args(num_samples, seed, version)
    digest = hashlib.sha256(json.dumps([args, version], sort_keys=True).encode()).hexdigest()[:12]
    return cache_dir() / "mnist1d" / f"mnist1d_n{num_samples}_seed{seed}_{digest}.npz"


def build_arrays(num_samples: int, seed: int) -> dict[str, np.ndarray]:
    """Generate the dataset; leaves the global numpy and Python random states as they were."""
    from mnist1d.data import make_dataset
    from mnist1d.utils import ObjectView

    np_state, py_state = np.random.get_state(), random.getstate()
    try:
        d = make_dataset(ObjectView(generator_args(num_samples, seed)))
    finally:
        np.random.set_state(np_state)
        random.setstate(py_state)
    return {
        "x_train": d["x"].astype(np.float32)[..., None],
        "y_train": d["y"].astype(np.int32),
        "x_test": d["x_test"].astype(np.float32)[..., None],
        "y_test": d["y_test"].astype(np.int32),
    }


def load_mnist1d(num_samples: int = 60_000, seed: int = 0) -> Dataset:
    """mnist1d with num_samples signals in all (rounded down to a multiple of 10), 80% for training.

    The first call for a (num_samples, seed) pair generates and caches it; later calls read the cache.
    """
    if isinstance(num_samples, bool) or not isinstance(num_samples, (int, np.integer)) or num_samples < 20:
        raise UsageError(f"data.num_samples = {num_samples!r} is not allowed for mnist1d: "
                         "must be an integer >= 20 (two signals per class)")
    num_samples = int(num_samples)
    path = cache_path(num_samples, seed)
    arrays = load_arrays(path, KEYS)
    if arrays is None:
        try:
            with build_lock(path):
                arrays = load_arrays(path, KEYS)  # another process may have built it meanwhile
                if arrays is None:
                    arrays = _build_and_save(path, num_samples, seed)
        except OSError:  # no writable cache directory: build in memory
            arrays = arrays or build_arrays(num_samples, seed)
    return Dataset("mnist1d", num_classes=NUM_CLASSES, **arrays)


def _build_and_save(path: Path, num_samples: int, seed: int) -> dict[str, np.ndarray]:
    if sys.stderr.isatty():  # a progress note for a person waiting; never a stray line before a later error
        print(f"tanplan: generating mnist1d ({num_samples} samples, seed {seed}) once; cache: {path}",
              file=sys.stderr)
    arrays = build_arrays(num_samples, seed)
    try:
        save_arrays(path, arrays)
    except OSError as e:  # an unwritable cache costs time, not correctness
        print(f"tanplan: could not cache mnist1d at {path}: {e}", file=sys.stderr)
    return arrays
