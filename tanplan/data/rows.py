"""Flat rows read alike by an .npz and by a source, when a public set stands beside a private one.

A source's flat rows are (d,) and reach the model as (batch, d); the npz loader reads an (n, d) array as
(n, d, 1), a 1D signal of one channel (so that cnn1d and the 1D augmentations take it). Both hold the same
kind of example: a flat-row public .npz beside a flat-row private source (or the other way round) is the same
task, and its proxies must see rows of the private set's shape, or they would train another model (a Dense
over (d, 1) acts on the last axis alone). `agreeing` says how the public set is read so that they agree: the
public dataset wrapped by `load`, an import-path loader (so that Ray workers read it the same way), with each
row reshaped to the private set's shape. Only the row's shape changes, never its values: the near-copy check
and the proxies read the same numbers.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from tanplan.data.load import load_dataset
from tanplan.data.memmap import read_meta
from tanplan.data.npz import peek_shape
from tanplan.data.source import describe
from tanplan.plugins import is_import_path

LOADER = "tanplan.data.rows:load"
_FIXED = ("mnist1d", "mnist5k", "cifar10")  # built-ins whose rows are never flat


@dataclass(frozen=True, eq=False)
class Reshaped:
    """The rows of a source, each reshaped to `shape` (the same number of values)."""

    source: Any
    shape: tuple[int, ...]

    def __len__(self) -> int:
        return len(self.source)

    def __getitem__(self, indices):
        x, y = self.source[indices]
        x = np.asarray(x)
        return x.reshape(len(x), *self.shape), y

    @property
    def input_shape(self) -> tuple[int, ...]:
        return self.shape


def load(dataset: str, input_shape, path=None, options=None):
    """The dataset `dataset` (a data.dataset value, with its loader's `options` and path=) with every row
    reshaped to input_shape: Sources over the loaded rows."""
    inner = load_dataset(dataset, path=path, options=options or None)
    shape = tuple(int(d) for d in input_shape)
    return describe(f"{inner.name} (rows as {shape})", Reshaped(inner.train, shape), Reshaped(inner.test, shape),
                    inner.num_classes, shape, fingerprint=getattr(inner, "fingerprint", ""))


def row_shape(dataset: str, path: str, options: dict | None) -> tuple[tuple[int, ...] | None, bool]:
    """(one row's shape as it is read, or None when unknown without loading, whether it is an .npz's flat
    (n, d) read as (d, 1)). Reads headers and metadata, or calls a loader (sources read nothing yet)."""
    if dataset in _FIXED or not (dataset in ("npz", "memmap") or is_import_path(dataset)):
        return None, False
    if dataset == "npz":
        stored = peek_shape(path) if path else None
        if stored is None:
            return None, False
        return (stored[1:] + (1,), True) if len(stored) == 2 else (stored[1:], False)
    if dataset == "memmap":
        return tuple(int(d) for d in read_meta(path)["input_shape"]), False
    return tuple(load_dataset(dataset, path=path or None, options=options or None).input_shape), False


def agreeing(public: dict, private) -> dict:
    """The [data] overrides of the public set (data.dataset, data.path, data.options) made to read its rows in
    the private set's shape where one is a flat-row .npz and the other a source of flat rows (d,); `public`
    itself otherwise (other shapes are compared as they are, and refused when they differ). The cheap facts
    (an .npz's header) first: a loader is called only beside a flat-row .npz."""
    name, path, options = public["data.dataset"], public.get("data.path") or "", public.get("data.options") or {}
    if name == "npz":
        npz_shape, flat_npz = row_shape(name, path, options)
        if not flat_npz:
            return public
        other, other_npz = row_shape(private.dataset, private.path, dict(private.options))
    elif private.dataset == "npz":
        npz_shape, flat_npz = row_shape("npz", private.path, {})
        if not flat_npz:
            return public
        other, other_npz = row_shape(name, path, options)
    else:
        return public
    if other_npz or other is None or tuple(other) != tuple(npz_shape[:1]):  # only (d,) beside an .npz's (d, 1)
        return public
    shape = other if name == "npz" else npz_shape  # the private set's
    inner = {"dataset": name, "input_shape": list(shape), "options": dict(options)}
    return {**public, "data.dataset": LOADER, "data.options": inner,
            "data.path": str(Path(path).expanduser()) if path else ""}
