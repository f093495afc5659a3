"""Random-access data sources: anything with `__len__` and `__getitem__(index array) -> (x, y)`.

This is grain's random-access protocol narrowed to index arrays: a numpy memmap (tanplan.data.memmap),
an ArrayRecord file, a Hugging Face dataset (`ds.with_format("numpy")[indices]`) wrapped in a few lines all
qualify. `source[indices]` returns the rows in the order asked for: x of shape (len(indices), *input_shape)
and y of shape (len(indices),). tanplan reads each step's Poisson batch from the training source by index
(tanplan.engine.batches) and the test source in consecutive batches; nothing reads the whole training set.

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

    def read_into(self, indices: np.ndarray, size: int) -> tuple[np.ndarray, np.ndarray]:
        """(x, y) of `size` rows: the rows `indices` first, in their order, then zeros; one gather straight
        into place (a step's padded batch: tanplan.engine.batches)."""
        x = np.zeros((size, *self.x.shape[1:]), np.float32)
        y = np.zeros((size, *self.y.shape[1:]), self.y.dtype)
        if self.x.dtype == np.float32:
            np.take(self.x, indices, axis=0, out=x[: len(indices)])
        else:
            x[: len(indices)] = self.x[indices]
        np.take(self.y, indices, axis=0, out=y[: len(indices)])
        return x, y

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
    def read_into(self):
        """The source's own fast path, when it has one (AttributeError otherwise: the reader then reads
        by __getitem__); the indices a run draws lie below n by construction."""
        return self.source.read_into


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
    # What identifies the rows without reading them (a file's path, size and time; a name and version):
    # the resume check and the tuning-set check read it instead of hashing every row.
    fingerprint: str = ""

    @property
    def num_train(self) -> int:
        return len(self.train)

    @property
    def num_test(self) -> int:
        return len(self.test)

    @property
    def data_kind(self) -> str:
        """"image" for (H, W, C) examples, "1d" for (length, channels)."""
        return "image" if len(self.input_shape) == 3 else "1d"

    @property
    def in_memory(self) -> bool:
        return False


def rows_as_asked(name: str, x, y, count: int) -> tuple[np.ndarray, np.ndarray]:
    """(x, y) as arrays, checked to hold one row per index asked for; (n, 1) labels flattened to (n,)."""
    x, y = np.asarray(x), np.asarray(y)
    if len(x) != count or len(y) != count:
        raise UsageError(f"{name}: asked for {count} rows, got {len(x)} inputs and {len(y)} labels; "
                         "source[indices] must return one row per index")
    return x, (y[:, 0] if y.ndim == 2 and y.shape[1] == 1 else y)


def read_rows(source, indices: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """source[indices] as (float32 x, y) in the order of `indices`, read in ascending index order (a
    memmap then reads forward through its file). One call to the source, of exactly these rows."""
    indices = np.asarray(indices, dtype=np.int64)
    ascending = bool(np.all(indices[1:] >= indices[:-1]))
    order = None if ascending else np.argsort(indices, kind="stable")
    x, y = rows_as_asked(f"data source {_name(source)}", *source[indices if ascending else indices[order]],
                         len(indices))
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
    x0, y0 = read_rows(test, np.array([0]))
    shape = tuple(int(d) for d in (input_shape or getattr(train, "input_shape", None) or x0.shape[1:]))
    if tuple(x0.shape[1:]) != shape:
        raise UsageError(f"{name}: the test rows have shape {tuple(x0.shape[1:])} but the training rows are "
                         f"declared {shape}")
    if len(shape) not in (2, 3):
        raise UsageError(f"{name}: examples have shape {shape}; expected (length, channels) or "
                         "(height, width, channels)")
    classes = int(num_classes or getattr(train, "num_classes", 0) or 0)
    if classes == 0:
        if not np.issubdtype(y0.dtype, np.integer):
            raise UsageError(f"{name}: labels of dtype {y0.dtype} need a declared number of classes (num_classes)")
        classes = test_label_max(test) + 1
    if classes < 2:
        raise UsageError(f"{name}: {classes} class; a classifier needs at least 2")
    return Sources(name, train, test, classes, shape, _constants(mean), _constants(std), fingerprint)


def sources(train, test, *, num_classes: int = 0, input_shape=None, mean=None, std=None, name: str = "sources",
            fingerprint: str = "") -> Sources:
    """A plugged-in loader's return value with its metadata declared (describe() checks and completes it):
    num_classes and input_shape spare reading the test set for them; mean/std are the public per-channel
    constants the rows were normalised with (image augmentations undo them); fingerprint identifies the
    rows without reading them (e.g. a file's path, size and time)."""
    return describe(name, train, test, num_classes, input_shape, mean, std, fingerprint)


def test_label_max(test) -> int:
    """The largest label of the (public) test source, read in batches of SCAN_ROWS rows."""
    top = -1
    for start in range(0, len(test), SCAN_ROWS):
        _, y = test[np.arange(start, min(start + SCAN_ROWS, len(test)))]
        top = max(top, int(np.max(np.asarray(y))))
    return top


def check_labels(y: np.ndarray, num_classes: int, name: str) -> None:
    """UsageError unless integer labels lie in [0, num_classes) (other label types: the task's business)."""
    if y.size and np.issubdtype(y.dtype, np.integer) and (y.min() < 0 or y.max() >= num_classes):
        raise UsageError(f"{name}: a label outside [0, {num_classes}) was read; labels are class indices "
                         f"0..{num_classes - 1}")


def _constants(values) -> tuple[float, ...] | None:
    return None if values is None else tuple(float(v) for v in values)


def _name(source) -> str:
    return type(source).__name__
