"""CIFAR-10 read from a directory in the standard python-pickle format (`cifar-10-batches-py`).

The directory holds data_batch_1..5 and test_batch (each a pickled dict with b"data": uint8
(n, 3072) rows laid out as 1024 red, 1024 green, 1024 blue values of a 32x32 image in row-major order,
and b"labels": n ints) and batches.meta (b"label_names"). Nothing is ever downloaded.

Security: a pickle can run any code while it loads, and these files come from wherever the user got
them. They are read by `SafeUnpickler`, which resolves no global but numpy's array reconstructors, so
a crafted file fails with one line (exit 2) before anything of it runs; what it built must then be
the format's dicts, lists, bytes, strings, ints and numeric arrays.
"""

from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np

from tanplan.data.dataset import Dataset, normalise_images
from tanplan.errors import UsageError

TRAIN_FILES = tuple(f"data_batch_{i}" for i in range(1, 6))
TEST_FILE = "test_batch"
META_FILE = "batches.meta"
FOLDER = "cifar-10-batches-py"
# Per-channel CIFAR-10 pixel mean and std: published constants, so no statistic of the private
# training set is released outside DP-SGD's accounting.
MEAN = (0.4914, 0.4822, 0.4465)
STD = (0.2470, 0.2435, 0.2616)


def resolve_dir(path) -> Path:
    """The batches directory: `path` itself, or `path`/cifar-10-batches-py when that exists."""
    if path is None or str(path) == "":
        raise UsageError("data.path is empty: cifar10 needs the directory holding cifar-10-batches-py "
                         f"({', '.join(TRAIN_FILES[:1])}..5, {TEST_FILE}, {META_FILE})")
    root = Path(path).expanduser()
    if (root / FOLDER).is_dir():
        root = root / FOLDER
    if not root.is_dir():
        raise UsageError(f"CIFAR-10 directory not found: {root}")
    for name in (*TRAIN_FILES, TEST_FILE, META_FILE):
        if not (root / name).is_file():
            raise UsageError(f"CIFAR-10 file missing: {root / name} (expected the python-pickle "
                             f"format: {', '.join(TRAIN_FILES)}, {TEST_FILE}, {META_FILE})")
    return root


def _latin1_bytes(text, encoding="latin1"):
    """How Python 3 writes bytes at pickle protocol 2: _codecs.encode(text, "latin1"). Only that."""
    if not isinstance(text, str) or encoding not in ("latin1", "latin-1"):
        raise pickle.UnpicklingError("_codecs.encode is allowed only to rebuild bytes from latin-1 text")
    return text.encode("latin1")


# The only globals a CIFAR-10 batch needs: numpy's array reconstructors under their numpy 1 and 2 module
# paths (pickle protocols 2 to 5), and protocol 2's way of writing bytes. Anything else is refused.
_NUMPY_GLOBALS = {
    ("numpy", "ndarray"), ("numpy", "dtype"),
    ("numpy.core.multiarray", "_reconstruct"), ("numpy._core.multiarray", "_reconstruct"),
    ("numpy.core.numeric", "_frombuffer"), ("numpy._core.numeric", "_frombuffer"),
}


def _numpy_global(name: str):
    """numpy's own object `name`, whatever module path the file names."""
    try:
        from numpy._core import multiarray, numeric
    except ImportError:  # numpy 1.x
        from numpy.core import multiarray, numeric
    return {"ndarray": np.ndarray, "dtype": np.dtype, "_reconstruct": multiarray._reconstruct,
            "_frombuffer": numeric._frombuffer}[name]


class SafeUnpickler(pickle.Unpickler):
    """An Unpickler that resolves only numpy's array reconstructors and latin-1 bytes, so that loading a
    file runs no other code (os.system, builtins.eval, ... raise UnpicklingError before being called)."""

    def find_class(self, module: str, name: str):
        if (module, name) in _NUMPY_GLOBALS:
            return _numpy_global(name)
        if (module, name) == ("_codecs", "encode"):
            return _latin1_bytes
        raise pickle.UnpicklingError(f"global {module}.{name} is not allowed in a CIFAR-10 batch")


def _check_plain(value, path: Path, depth: int = 0) -> None:
    """UsageError unless value is made of dicts, lists, bytes, strings, ints and numeric numpy arrays."""
    if depth > 4:
        raise UsageError(f"CIFAR-10 file {path} is nested deeper than the format")
    if isinstance(value, dict):
        for key, item in value.items():
            _check_plain(key, path, depth + 1)
            _check_plain(item, path, depth + 1)
    elif isinstance(value, list):
        for item in value:
            _check_plain(item, path, depth + 1)
    elif isinstance(value, np.ndarray):
        if value.dtype.kind not in "biuf":
            raise UsageError(f"CIFAR-10 file {path} holds an array of dtype {value.dtype}; the format has numbers")
    elif not isinstance(value, (bytes, str, int)):
        raise UsageError(f"CIFAR-10 file {path} holds a {type(value).__name__}; the format has dicts, lists, "
                         "bytes, strings, ints and numpy arrays only")


def _unpickle(path: Path) -> dict:
    try:
        with open(path, "rb") as f:
            d = SafeUnpickler(f, encoding="bytes").load()
    except pickle.UnpicklingError as e:
        raise UsageError(f"cannot read CIFAR-10 file {path}: {e} (refused without running it)") from None
    except Exception as e:  # corrupt or foreign file: one clear line rather than a traceback
        raise UsageError(f"cannot read CIFAR-10 file {path}: {type(e).__name__}: {e}") from None
    if not isinstance(d, dict):
        raise UsageError(f"CIFAR-10 file {path} does not hold a dict")
    _check_plain(d, path)
    # Files written by Python 2 have bytes keys, by Python 3 often str keys: accept both.
    return {(k.decode() if isinstance(k, bytes) else k): v for k, v in d.items()}


def read_batch(path: Path) -> tuple[np.ndarray, np.ndarray]:
    d = _unpickle(path)
    if "data" not in d or "labels" not in d:
        raise UsageError(f"CIFAR-10 file {path} lacks 'data' or 'labels'")
    data = np.asarray(d["data"])
    labels = np.asarray(d["labels"], dtype=np.int64)
    if data.ndim != 2 or data.shape[1] != 3 * 32 * 32 or len(data) != len(labels):
        raise UsageError(f"CIFAR-10 file {path}: data has shape {data.shape} for {len(labels)} labels; "
                         "expected (n, 3072)")
    images = data.reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1)  # planes -> NHWC
    return images, labels


def read_meta(root: Path) -> dict:
    """batches.meta of the batches directory `root` (label_names, ...)."""
    return _unpickle(root / META_FILE)


def load_cifar10(path) -> Dataset:
    root = resolve_dir(path)
    meta = read_meta(root)
    num_classes = len(meta.get("label_names", [])) or 10
    train = [read_batch(root / name) for name in TRAIN_FILES]
    x_test, y_test = read_batch(root / TEST_FILE)
    x_train = np.concatenate([x for x, _ in train])
    y_train = np.concatenate([y for _, y in train])
    return Dataset(
        "cifar10",
        x_train=normalise_images(x_train / np.float32(255.0), MEAN, STD),
        y_train=y_train,
        x_test=normalise_images(x_test / np.float32(255.0), MEAN, STD),
        y_test=y_test,
        num_classes=num_classes,
        mean=MEAN,
        std=STD,
    )
