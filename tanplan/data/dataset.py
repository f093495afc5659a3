"""The in-memory dataset every loader returns, and the checks every loader runs before returning it.

Normalisation uses fixed, public constants (or none): statistics computed from the private training
set would be a release that DP-SGD's accounting does not cover.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace

import numpy as np

from tanplan.data.source import ArraySource, Prefix, read_rows
from tanplan.errors import UsageError


@dataclass(frozen=True, eq=False)
class Dataset:
    """Train and test arrays in numpy, ready for the model.

    Images are NHWC float32, already normalised as ``(pixel - mean) / std`` with pixels in [0, 1];
    ``mean`` and ``std`` hold the per-channel constants so that augmentations that work in pixel space
    (colour jitter) can undo it. 1D signals are (n, length, channels) float32, with mean/std None.
    Labels are int32 in [0, num_classes). Loaders may pass num_classes=0 to validated(), which then
    infers it as the largest TEST label + 1 (public; the training labels are private).
    """

    name: str
    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    num_classes: int
    mean: tuple[float, ...] | None = None
    std: tuple[float, ...] | None = None

    @property
    def num_train(self) -> int:
        return int(self.x_train.shape[0])

    @property
    def num_test(self) -> int:
        return int(self.x_test.shape[0])

    @property
    def input_shape(self) -> tuple[int, ...]:
        """Shape of one example, without the batch axis."""
        return tuple(self.x_train.shape[1:])

    @property
    def data_kind(self) -> str:
        """"image" for (H, W, C) examples, "1d" for (length, channels), "flat" for (features,) rows; selects
        the augmentations."""
        return {4: "image", 2: "flat"}.get(self.x_train.ndim, "1d")

    # The random-access sources the engine reads (tanplan.data.source): a Dataset is one such pair.
    @property
    def train(self):
        return ArraySource(self.x_train, self.y_train)

    @property
    def test(self):
        return ArraySource(self.x_test, self.y_test)

    @property
    def in_memory(self) -> bool:
        return True


def with_train_examples(ds: Dataset, n: int) -> Dataset:
    """ds trained on its first n training examples (n = 0: all), the test set unchanged.

    N, the size the accountant uses (q = B/N), is then n: the examples left out are never touched.
    Sources (tanplan.data.source) keep their first n rows the same way, without reading any.
    """
    if n == 0 or n == ds.num_train:
        return ds
    if not 0 < n <= ds.num_train:
        raise UsageError(f"data.train_examples = {n} is not allowed: {ds.name} has {ds.num_train} training "
                         f"examples; use 1..{ds.num_train}, or 0 for all")
    if not ds.in_memory:
        return replace(ds, train=Prefix(ds.train, n))
    return replace(ds, x_train=ds.x_train[:n], y_train=ds.y_train[:n])


def validated(ds: Dataset, source: str) -> Dataset:
    """Return ds with canonical dtypes, or raise UsageError naming `source` and what is wrong."""
    x_train = np.asarray(ds.x_train, dtype=np.float32)
    x_test = np.asarray(ds.x_test, dtype=np.float32)
    y_train = _labels(ds.y_train, f"{source}: y_train")
    y_test = _labels(ds.y_test, f"{source}: y_test", public=True)
    if x_train.ndim not in (3, 4):
        raise UsageError(f"{source}: x_train has shape {x_train.shape}; expected (n, length, channels) "
                         "or (n, height, width, channels)")
    if x_train.shape[1:] != x_test.shape[1:]:
        raise UsageError(f"{source}: x_train examples have shape {x_train.shape[1:]} but x_test "
                         f"examples have shape {x_test.shape[1:]}")
    for split, x, y in (("train", x_train, y_train), ("test", x_test, y_test)):
        if len(x) != len(y):
            raise UsageError(f"{source}: x_{split} has {len(x)} examples but y_{split} has {len(y)} labels")
        if len(x) == 0:
            raise UsageError(f"{source}: the {split} split is empty")
        if not np.isfinite(x).all():
            raise UsageError(f"{source}: x_{split} holds NaN or infinite values")
    # an undeclared class count comes from the public test labels, never from the private training labels
    # (it is published: model.json); a training label outside it is refused below, without stating it
    num_classes = int(ds.num_classes) if ds.num_classes > 0 else int(y_test.max()) + 1
    origin = (" (an npz file's class count is its num_classes entry, else its largest test label + 1: add "
              "num_classes to the file)") if ds.name == "npz" else ""
    if y_test.min() < 0 or y_test.max() >= num_classes:  # the test set is public: its label may be named
        raise UsageError(f"{source}: labels must lie in [0, {num_classes}){origin}; the test set holds the label "
                         f"{int(y_test.max()) if y_test.max() >= num_classes else int(y_test.min())}")
    if y_train.min() < 0 or y_train.max() >= num_classes:
        raise UsageError(f"{source}: labels must lie in [0, {num_classes}){origin}; a training label lies outside it")
    if num_classes < 2:
        raise UsageError(f"{source}: found {num_classes} class; a classifier needs at least 2")
    return Dataset(ds.name, x_train, y_train, x_test, y_test, num_classes, ds.mean, ds.std)


def same_test_set(a, b, rows: int = 65_536) -> bool:
    """Whether two datasets (in-memory Datasets or Sources) hold the same test rows, inputs and labels, in
    the same order; sources are compared in slices of `rows` (the test set is public: reading it is free)."""
    if a.num_test != b.num_test or tuple(a.input_shape) != tuple(b.input_shape):
        return False
    if getattr(a, "in_memory", True) and getattr(b, "in_memory", True):
        return bool(np.array_equal(a.y_test, b.y_test) and np.array_equal(a.x_test, b.x_test))
    for start in range(0, a.num_test, rows):
        index = np.arange(start, min(start + rows, a.num_test))
        (xa, ya), (xb, yb) = read_rows(a.test, index), read_rows(b.test, index)
        if not (np.array_equal(ya, yb) and np.array_equal(xa, xb)):
            return False
    return True


def _labels(y, what: str, public: bool = False) -> np.ndarray:
    y = check_labels(y, what, public)
    return y.astype(np.int32)


# Labels are class indices 0..C-1 with C at most this: a classifier's output layer (and a one-hot of the
# labels) has C columns, so a stray huge label would otherwise exhaust memory (or wrap around in int32).
MAX_CLASSES = 100_000


def check_labels(y, what: str, public: bool = False) -> np.ndarray:
    """y as a 1-D int64 array of class indices in [0, MAX_CLASSES), or UsageError naming `what`. A bad
    label's value is stated only when the labels are `public` (a test set): a training label is private."""
    y = np.asarray(y)
    if y.ndim == 2 and y.shape[1] == 1:
        y = y[:, 0]
    if y.ndim != 1:
        raise UsageError(f"{what} has shape {y.shape}; expected one integer label per example")
    if not (np.issubdtype(y.dtype, np.integer) or np.issubdtype(y.dtype, np.floating)):
        raise UsageError(f"{what} must hold integer class labels (dtype {y.dtype})")
    if np.issubdtype(y.dtype, np.floating) and (not np.isfinite(y).all() or (y != np.round(y)).any()):
        raise UsageError(f"{what} must hold integer class labels (dtype {y.dtype}"
                         + (", with values that are not whole numbers)" if np.isfinite(y).all() else ", with NaN or "
                            "infinite values)"))
    if len(y) and not 0 <= y.min() <= y.max() < MAX_CLASSES:
        bad = f"the label {(y.min() if y.min() < 0 else y.max()):.6g}" if public else "a label outside this range"
        raise UsageError(f"{what} holds {bad}; labels must lie in [0, {MAX_CLASSES:,}): class indices 0, 1, 2, ...")
    return y.astype(np.int64)


def available_memory() -> int | None:
    """Bytes of memory available to a new allocation now (Linux's MemAvailable; else free pages; None if
    unknown): what sizes that would be held in memory (a batch, an image being resized) are checked against."""
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def normalise_images(pixels01: np.ndarray, mean: tuple[float, ...], std: tuple[float, ...]) -> np.ndarray:
    """(pixel - mean) / std per channel, float32; pixels01 is NHWC in [0, 1]."""
    m = np.asarray(mean, np.float32)
    s = np.asarray(std, np.float32)
    return ((pixels01.astype(np.float32) - m) / s).astype(np.float32)
