"""Rows of a source read by index into a host buffer, each row straight into its place (the step reader's
rows: tanplan.engine.batches).

`RowReader.read(wanted, places, size)` returns (x, y) of `size` rows: source row wanted[i] at place
places[i], zeros elsewhere. Every row read is checked (tanplan.data.source.check_rows: shape, finite
numbers, labels; BadRows states public facts only). How it reads:

- a source with `fill(indices, x_out) -> labels` (in memory: ArraySource; a memmap) writes its rows
  straight into the buffer, in the dtype it declares (`row_dtype`: uint8 pixels stay uint8) — in
  ascending index order when it says it reads forward (`forward_reads`: a file), else in place order;
- any other source is read by one call `source[indices]`, in ascending index order, and its rows are
  cast to float32 as they are placed (one call: such a source need not be thread-safe).
"""

from __future__ import annotations

import numpy as np

from tanplan.data.source import check_rows, rows_as_asked


class RowReader:
    """Reads rows of `source` into place; name, input_shape, num_classes: as the checks state them."""

    def __init__(self, source, *, name: str, input_shape, num_classes: int = 0):
        self.source, self.name, self.num_classes = source, name, num_classes
        self.input_shape = tuple(input_shape) if input_shape else None
        self._fill = getattr(source, "fill", None) if self.input_shape else None  # its buffer needs the shape

    def read(self, wanted: np.ndarray, places: np.ndarray, size: int) -> tuple[np.ndarray, np.ndarray]:
        """(x, y) of `size` rows: source[wanted[i]] at places[i], zeros elsewhere; only these rows are read."""
        if self._fill is None:
            return self._by_index(wanted, places, size)
        forward = bool(getattr(self.source, "forward_reads", False))
        order = np.argsort(wanted, kind="stable") if forward else slice(None)
        ask, dest = wanted[order], places[order]
        x = np.zeros((size, *self.input_shape), np.dtype(self.source.row_dtype))
        labels = self._piece(ask, dest, x)
        y = np.zeros((size, *labels.shape[1:]), labels.dtype)
        y[dest] = labels
        return x, y

    def _piece(self, ask: np.ndarray, dest: np.ndarray, x: np.ndarray) -> np.ndarray:
        """source rows `ask` filled into x at `dest` (a run of consecutive places: straight into x, else
        through one piece-sized buffer), checked; returns their labels."""
        n = len(dest)
        run = n > 0 and dest[-1] - dest[0] == n - 1 and bool(np.all(np.diff(dest) == 1))
        rows = x[dest[0]:dest[0] + n] if run else np.empty((n, *x.shape[1:]), x.dtype)
        rows, labels = rows_as_asked(self.name, rows, self._fill(ask, rows), n)
        check_rows(self.name, rows, labels, self.input_shape, self.num_classes)
        if not run:
            x[dest] = rows
        return labels

    def _by_index(self, wanted: np.ndarray, places: np.ndarray, size: int) -> tuple[np.ndarray, np.ndarray]:
        order = np.argsort(wanted, kind="stable")
        x_rows, y_rows = rows_as_asked(self.name, *self.source[wanted[order]], len(wanted))
        check_rows(self.name, x_rows, y_rows, self.input_shape or x_rows.shape[1:], self.num_classes)
        x = np.zeros((size, *x_rows.shape[1:]), np.float32)  # cast as placed
        y = np.zeros((size, *y_rows.shape[1:]), y_rows.dtype)
        x[places[order]], y[places[order]] = x_rows, y_rows
        return x, y
