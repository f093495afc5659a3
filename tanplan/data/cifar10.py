"""CIFAR-10 read from a directory in the standard python-pickle format (`cifar-10-batches-py`).

The directory holds data_batch_1..5 and test_batch (each a pickled dict with b"data": uint8
(n, 3072) rows laid out as 1024 red, 1024 green, 1024 blue values of a 32x32 image in row-major order,
and b"labels": n ints) and batches.meta (b"label_names"). Nothing is ever downloaded.
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


def _unpickle(path: Path) -> dict:
    try:
        with open(path, "rb") as f:
            d = pickle.load(f, encoding="bytes")
    except Exception as e:  # corrupt or foreign file: one clear line rather than a traceback
        raise UsageError(f"cannot read CIFAR-10 file {path}: {type(e).__name__}: {e}") from None
    if not isinstance(d, dict):
        raise UsageError(f"CIFAR-10 file {path} does not hold a dict")
    # Files written by Python 2 have bytes keys, by Python 3 often str keys: accept both.
    return {(k.decode() if isinstance(k, bytes) else k): v for k, v in d.items()}


def _read_batch(path: Path) -> tuple[np.ndarray, np.ndarray]:
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


def load_cifar10(path) -> Dataset:
    root = resolve_dir(path)
    meta = _unpickle(root / META_FILE)
    num_classes = len(meta.get("label_names", [])) or 10
    train = [_read_batch(root / name) for name in TRAIN_FILES]
    x_test, y_test = _read_batch(root / TEST_FILE)
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
