"""Random-access data sources: anything with `__len__` and `__getitem__(index array) -> (x, y)`.

This is grain's random-access protocol narrowed to index arrays: a numpy memmap (tanplan.data.memmap),
an ArrayRecord file, a Hugging Face dataset (`ds.with_format("numpy")[indices]`) wrapped in a few lines all
qualify. `source[indices]` returns the rows in the order asked for: x of shape (len(indices), *input_shape)
and y of shape (len(indices),). tanplan reads each step's Poisson batch from the training source by index
(tanplan.engine.batches) and the test source in consecutive batches; nothing reads the whole training set.
A source may also offer the step reader's fast path (tanplan.data.reader): `fill(indices, x_out) -> labels`,
thread-safe, writing its rows straight into x_out in the dtype `row_dtype` (float32; a memmap's uint8 pixels,
with their normalisation constants as `pixels`, tanplan.data.pixels), `forward_reads` when ascending indices
read fastest (a file).

    >>> s = ArraySource(np.arange(12, dtype=np.float32).reshape(6, 2), np.array([0, 1, 0, 1, 0, 1]))
    >>> x, y = read_rows(s, np.array([4, 1]))
    >>> x.tolist(), y.tolist()
    ([[8.0, 9.0], [2.0, 3.0]], [0, 1])

A run needs four facts before it trains: N, the input shape, the number of classes and the rows' dtype
(float32, cast on reading). They come from public metadata only (`describe`): N = len(train); the input
shape from an `input_shape` attribute, else from the first TEST row; the number of classes as declared
(Sources.num_classes, or a `num_classes` attribute of a source), else the largest TEST label + 1. The test
set is public (docs/privacy.md); a statistic scanned from the training rows would be a release that
DP-SGD's accounting does not cover.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import numpy as np

from tanplan.errors import UsageError

# The test labels are scanned for the class count in reads of this many rows (bounded memory).
SCAN_ROWS = 65_536
# The public probe: this many test rows are read and checked before a run writes anything.
PROBE_ROWS = 8


@runtime_checkable
class DataSource(Protocol):
    """The protocol: len(source) rows; source[indices] -> (x, y) for a 1-D integer index array."""

    def __len__(self) -> int: ...

    def __getitem__(self, indices: np.ndarray) -> tuple[Any, Any]: ...


@dataclass(frozen=True, eq=False)
class ArraySource:
    """Rows of two in-memory arrays: the built-in datasets are sources of this kind (Dataset.train)."""

    x: np.ndarray
    y: np.ndarray

    def __len__(self) -> int:
        return int(self.x.shape[0])

    def __getitem__(self, indices):
        return self.x[indices], self.y[indices]

    row_dtype = np.dtype(np.float32)  # what `fill` writes

    def fill(self, indices: np.ndarray, x_out: np.ndarray) -> np.ndarray:
        """The inputs of rows `indices` into x_out (float32), in their order, one gather straight into place;
        returns their labels (the step reader's fast path, tanplan.engine.batches; thread-safe)."""
        if self.x.dtype == np.float32:
            np.take(self.x, indices, axis=0, out=x_out)
        else:
            x_out[...] = self.x[indices]
        return self.y[indices]

    @property
    def input_shape(self) -> tuple[int, ...]:
        return tuple(self.x.shape[1:])


@dataclass(frozen=True, eq=False)
class Prefix:
    """The first n rows of a source (data.train_examples): the rows past n are never read."""

    source: Any
    n: int

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, indices):
        indices = np.asarray(indices)
        if indices.size and (indices.min() < 0 or indices.max() >= self.n):
            raise IndexError(f"index out of range for the first {self.n} rows")
        return self.source[indices]

    @property
    def input_shape(self):
        return getattr(self.source, "input_shape", None)

    @property
    def fill(self):
        """The source's own fast path, when it has one (AttributeError otherwise: the reader then reads
        by __getitem__); the indices a run draws lie below n by construction."""
        return self.source.fill

    @property
    def pixels(self):
        return getattr(self.source, "pixels", None)

    @property
    def row_dtype(self):
        return getattr(self.source, "row_dtype", np.dtype(np.float32))

    @property
    def forward_reads(self):
        return getattr(self.source, "forward_reads", False)


@dataclass(frozen=True, eq=False)
class Sources:
    """A dataset as two random-access sources and its public metadata (the out-of-memory Dataset).

    Shares the metadata of tanplan.data.Dataset (name, num_train, num_test, input_shape, data_kind,
    num_classes, mean, std, train, test), which is all that the engine reads: rows come from `train`
    and `test` by index. mean/std: the public per-channel constants the rows were normalised with
    (image augmentations that work in pixel space undo them), or None.
    """

    name: str
    train: Any
    test: Any
    num_classes: int
    input_shape: tuple[int, ...]
    mean: tuple[float, ...] | None = None
    std: tuple[float, ...] | None = None
    # What identifies the rows without reading them all (a memmap: its files' sizes and sampled content; a name
    # and version), the same for every copy of the data:
    # the resume check and the tuning-set check read it instead of hashing every row.
    fingerprint: str = ""
    label_dtype: str = ""  # the labels' dtype, from the public probe (the default task needs integers)

    @property
    def num_train(self) -> int:
        return len(self.train)

    @property
    def num_test(self) -> int:
        return len(self.test)

    @property
    def data_kind(self) -> str:
        """"image" for (H, W, C) examples, "1d" for (length, channels), "flat" for (features,) rows."""
        return {3: "image", 1: "flat"}.get(len(self.input_shape), "1d")

    @property
    def in_memory(self) -> bool:
        return False


class BadRows(UsageError):
    """Rows read from a source that cannot be trained on or evaluated: the wrong number of rows, a shape
    other than the declared one, a dtype that is not numbers, NaN or infinite inputs, labels that are not
    integers or lie outside [0, num_classes). Raised by the readers (a step's batch: tanplan.engine.batches;
    the test set) in one line that states public facts only (the source, the declared shape, the class
    count), never a count, an index or a label of the rows read: a training batch is private."""


def rows_as_asked(name: str, x, y, count: int) -> tuple[np.ndarray, np.ndarray]:
    """(x, y) as arrays, checked to hold one row per index asked for; (n, 1) labels flattened to (n,)."""
    x, y = np.asarray(x), np.asarray(y)
    if x.ndim == 0 or y.ndim == 0 or len(x) != count or len(y) != count:  # no count: a batch's size is private
        raise BadRows(f"{name}: source[indices] returned a different number of inputs or labels than the indices "
                      "asked for; it must return one row (input and label) per index, in the order asked")
    return x, (y[:, 0] if y.ndim == 2 and y.shape[1] == 1 else y)


def check_rows(name: str, x, y, input_shape, num_classes: int = 0) -> None:
    """BadRows (one line, public facts only) unless the rows x have the declared input_shape, hold finite
    numbers, and, when num_classes > 0 (the default cross-entropy task), the labels y are integers in
    [0, num_classes). Vectorised: a batch's cost, never the source's."""
    x, y = np.asarray(x), np.asarray(y)
    if tuple(x.shape[1:]) != tuple(input_shape):
        raise BadRows(f"{name}: a row has shape {tuple(x.shape[1:])} where the dataset declares "
                      f"{tuple(input_shape)}; every row must have the declared shape")
    if not (np.issubdtype(x.dtype, np.floating) or np.issubdtype(x.dtype, np.integer) or x.dtype == bool):
        raise BadRows(f"{name}: rows of dtype {x.dtype}; inputs must be numbers")
    if np.issubdtype(x.dtype, np.floating) and not np.isfinite(x).all():
        raise BadRows(f"{name}: rows hold NaN or infinite inputs; tanplan trains and evaluates on finite numbers "
                      "only: clean or re-convert the data")
    if num_classes:
        if y.ndim != 1:
            raise BadRows(f"{name}: labels of shape {tuple(y.shape[1:])} per row; the default task reads one "
                          "integer class label per example")
        if not np.issubdtype(y.dtype, np.integer):
            raise BadRows(f"{name}: labels of dtype {y.dtype}; the default task (cross-entropy, accuracy) reads "
                          f"integer class labels 0..{num_classes - 1}")
        check_labels(y, num_classes, name)


def read_rows(source, indices: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """source[indices] as (float32 x, y) in the order of `indices`, read in ascending index order (a
    memmap then reads forward through its file). One call to the source, of exactly these rows; BadRows
    unless it returns one row per index of finite numbers."""
    indices = np.asarray(indices, dtype=np.int64)
    ascending = bool(np.all(indices[1:] >= indices[:-1]))
    order = None if ascending else np.argsort(indices, kind="stable")
    name = f"data source {_name(source)}"
    x, y = rows_as_asked(name, *source[indices if ascending else indices[order]], len(indices))
    check_rows(name, x, y, x.shape[1:])  # numbers, finite (labels: by the caller, who knows the task)
    if ascending:  # consecutive test rows, say: already in order (no copy when the source gives float32)
        return np.asarray(x, np.float32), y
    out_x = np.empty(x.shape, np.float32)
    out_y = np.empty(y.shape, y.dtype)
    out_x[order] = x
    out_y[order] = y
    return out_x, out_y


def describe(name: str, train, test, num_classes: int = 0, input_shape=None, mean=None, std=None,
             fingerprint: str = "") -> Sources:
    """Sources with their metadata checked and completed from public information (module docstring).

    UsageError (one line naming `name`) when a source breaks the protocol, is empty, or its declared
    facts disagree with what its test rows show.
    """
    for split, source in (("train", train), ("test", test)):
        if not (hasattr(source, "__len__") and hasattr(source, "__getitem__")):
            raise UsageError(f"{name}: the {split} source is a {type(source).__name__}; a data source needs "
                             "__len__ and __getitem__(index array) -> (x, y)")
        if len(source) < 1:
            raise UsageError(f"{name}: the {split} source is empty")
    # The public probe: the first rows of the TEST source (never a training row: reading one before the run
    # would be a use of private data the accounting does not cover). A loader's source class breaks the
    # same way on both splits, so a short read, a wrong shape or NaN inputs are met here, before anything is
    # written; the training rows are checked on every batch the run reads (tanplan.engine.batches).
    x0, y0 = read_rows(test, np.arange(min(len(test), PROBE_ROWS)))
    shape = tuple(int(d) for d in (input_shape or getattr(train, "input_shape", None) or x0.shape[1:]))
    if tuple(x0.shape[1:]) != shape:
        raise UsageError(f"{name}: the test rows have shape {tuple(x0.shape[1:])} but the training rows are "
                         f"declared {shape}")
    if len(shape) not in (1, 2, 3) or min(shape) < 1:
        raise UsageError(f"{name}: examples have shape {shape}; expected (features,), (length, channels) or "
                         "(height, width, channels)")
    if y0.ndim != 1:
        raise UsageError(f"{name}: the test labels have shape {tuple(y0.shape[1:])} per example; expected one label")
    classes = int(num_classes or getattr(train, "num_classes", 0) or 0)
    if classes == 0:
        if not np.issubdtype(y0.dtype, np.integer):
            raise UsageError(f"{name}: labels of dtype {y0.dtype} need a declared number of classes (num_classes)")
        classes = test_label_max(test) + 1
    if classes < 2:
        raise UsageError(f"{name}: {classes} class; a classifier needs at least 2")
    check_rows(f"{name}: the test source", x0, y0, shape, classes if np.issubdtype(y0.dtype, np.integer) else 0)
    channels = shape[-1]
    return Sources(name, train, test, classes, shape, _constants(mean, channels, name, "mean"),
                   _constants(std, channels, name, "std"), fingerprint, label_dtype=str(y0.dtype))


def sources(train, test, *, num_classes: int = 0, input_shape=None, mean=None, std=None, name: str = "sources",
            fingerprint: str = "") -> Sources:
    """A plugged-in loader's return value with its metadata declared (describe() checks and completes it):
    num_classes and input_shape spare reading the test set for them; mean/std are the public per-channel
    constants the rows were normalised with (image augmentations undo them); fingerprint identifies the
    rows without reading them all, the same for every copy of them (e.g. sizes and sampled content)."""
    return describe(name, train, test, num_classes, input_shape, mean, std, fingerprint)


def test_label_max(test) -> int:
    """The largest label of the (public) test source, read in batches of SCAN_ROWS rows."""
    top = -1
    for start in range(0, len(test), SCAN_ROWS):
        _, y = test[np.arange(start, min(start + SCAN_ROWS, len(test)))]
        top = max(top, int(np.max(np.asarray(y))))
    return top


def check_labels(y: np.ndarray, num_classes: int, name: str) -> None:
    """BadRows unless integer labels lie in [0, num_classes) (other label types: the task's business)."""
    if y.size and np.issubdtype(y.dtype, np.integer) and (y.min() < 0 or y.max() >= num_classes):
        raise BadRows(f"{name}: a label outside [0, {num_classes}) was read; labels are class indices "
                         f"0..{num_classes - 1}")


def _constants(values, channels: int, name: str, what: str) -> tuple[float, ...] | None:
    """The per-channel normalisation constants as floats: one finite number per channel (std > 0)."""
    return None if values is None else check_constants(values, channels, f"{name}: {what}", positive=what == "std")


def check_constants(values, channels: int, what: str, positive: bool = False) -> tuple[float, ...]:
    """values as a tuple of `channels` finite floats (> 0 when `positive`: a std divides), else UsageError."""
    try:
        got = tuple(float(v) for v in np.atleast_1d(np.asarray(values, dtype=np.float64)))
    except (TypeError, ValueError):
        raise UsageError(f"{what} = {values!r} is not allowed: give {channels} number(s), one per channel") from None
    if len(got) != channels or not all(np.isfinite(got)) or (positive and min(got) <= 0):
        raise UsageError(f"{what} = {list(got)} is not allowed: give {channels} finite number(s), one per channel"
                         + (", each > 0" if positive else ""))
    return got


def _name(source) -> str:
    return type(source).__name__
