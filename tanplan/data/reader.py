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

A `fill` source is read by a pool of threads (`threads`, default `default_threads()`: one a core this
process may use, at most MAX_THREADS), each filling a range of the rows (ascending indices: a forward
range of the file) straight into its places: a memmap on local disk then keeps several reads in flight
(page faults in parallel; numpy copies without the GIL). The rows, their places and the checks are those
of one thread: the buffer is the same whatever the count (each row is written once, by one thread).
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from tanplan.data.source import check_rows, rows_as_asked

MAX_THREADS = 8  # beyond this a local NVMe disk gains little, and several processes may share the host
MIN_ROWS = 32  # the fewest rows worth a thread of their own


def default_threads() -> int:
    """Reader threads: one a core this process may use (its CPU affinity), at least 1, at most MAX_THREADS."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cores = os.cpu_count() or 1
    return max(1, min(MAX_THREADS, cores))


class RowReader:
    """Reads rows of `source` into place; name, input_shape, num_classes: as the checks state them; threads:
    how many fill a batch at once (None: default_threads(); a source without `fill` is read by one call)."""

    def __init__(self, source, *, name: str, input_shape, num_classes: int = 0, threads: int | None = None):
        self.source, self.name, self.num_classes = source, name, num_classes
        self.input_shape = tuple(input_shape) if input_shape else None
        self._fill = getattr(source, "fill", None) if self.input_shape else None  # its buffer needs the shape
        self.threads = max(1, threads or default_threads()) if self._fill is not None else 1
        self._pool = None

    def close(self) -> None:
        """Stop the reader threads (a read under way finishes first)."""
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None

    def read(self, wanted: np.ndarray, places: np.ndarray, size: int) -> tuple[np.ndarray, np.ndarray]:
        """(x, y) of `size` rows: source[wanted[i]] at places[i], zeros elsewhere; only these rows are read."""
        if self._fill is None:
            return self._by_index(wanted, places, size)
        forward = bool(getattr(self.source, "forward_reads", False))
        order = np.argsort(wanted, kind="stable") if forward else slice(None)
        ask, dest = wanted[order], places[order]
        x = np.zeros((size, *self.input_shape), np.dtype(self.source.row_dtype))
        pieces = self._pieces(dest, runs=not forward)
        if len(pieces) == 1:
            labels = self._piece(ask, dest, x)
        else:  # the first error (BadRows) is raised here, in the caller's thread
            if self._pool is None:
                self._pool = ThreadPoolExecutor(self.threads, thread_name_prefix="tanplan-reader")
            done = [self._pool.submit(self._piece, ask[p], dest[p], x) for p in pieces]
            labels = np.concatenate([d.result() for d in done])
        y = np.zeros((size, *labels.shape[1:]), labels.dtype)
        y[dest] = labels
        return x, y

    def _pieces(self, dest: np.ndarray, runs: bool) -> list[slice]:
        """The rows cut into at most `threads` ranges of MIN_ROWS or more, and also where a run of consecutive
        places ends when `runs` (rows in place order: each piece then fills straight into place)."""
        n = len(dest)
        count = max(1, min(self.threads, n // MIN_ROWS))
        cuts = {n * i // count for i in range(1, count)}
        if runs and count > 1:
            cuts |= set((np.flatnonzero(np.diff(dest) != 1) + 1).tolist())
        edges = [0, *sorted(cuts), n]
        return [slice(a, b) for a, b in zip(edges, edges[1:]) if b > a] or [slice(0, n)]

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
