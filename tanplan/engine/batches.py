"""Each step's Poisson batch, read by index from the training source, one step ahead.

Step t's batch is the Poisson sample drawn from the run's secret (tanplan.dp.sampling.poisson_batch with
`secret.batch_rng(BATCH, t)`: every example in with probability q, independently); `StepBatches` draws it,
reads exactly those rows from the source (one call, in ascending index order; a source with `fill`, in
memory or a memmap, writes them straight into place, a memmap's uint8 pixels as they are: the jitted step
normalises them on the device, `device_inputs`), places them in the padded layout (real rows first, zeros after:
tanplan.dp.sampling.pad_indices) and hands the padded batch to the loop as global arrays sharded over the
mesh. While step t trains, a background thread draws and reads step t+1's batch: so at any time at most
two batches of rows are held or being read (the step's and the next one's), and a source of any size is
never read whole. Reads of the source never overlap (one lock): a source need not be thread-safe.

Each padded batch carries its rows' dataset indices (`index`, int32, 0 in padding): the step keys each
example's augmentation views by them (tanplan.dp.augmult.example_keys). The indices and the rows stay in
this process's memory (they are the private part of the mechanism: who
knows them knows which examples each step used); nothing here writes a file. With several processes,
each reads only the rows that land on its own devices. The batches are the same whatever the prefetch:
the draw of step t depends on (secret, t) alone, and the layout on public numbers (N, q, the config),
except in the rare step whose batch outgrows it, when the loop grows it and the batch is placed again.
"""

from __future__ import annotations

import threading
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np

from tanplan.data.source import check_rows, rows_as_asked
from tanplan.dp import sampling, sharding


@dataclass
class Drawn:
    """Step t's Poisson batch (private: in memory only) and its rows, placed for one layout."""

    step: int
    indices: np.ndarray
    layout: object  # tanplan.dp.sampling.BatchLayout the rows were placed for
    x: np.ndarray  # (chunks, chunk_size, *input_shape), zeros in padding and other processes' rows (uint8 pixels
    # of a source with `pixels`, normalised on the device: device_inputs)
    y: np.ndarray
    mask: np.ndarray  # (chunks, chunk_size): real rows
    index: np.ndarray  # (chunks, chunk_size) int32: each real row's index in the training set, 0 in padding


class StepBatches:
    """The batches of steps start, start+1, ... of a run; `take(t, layout)` gives step t's.

    draw(t) -> the indices of step t's Poisson batch (from the run's secret); source: the training source;
    num_classes: labels that are not integers in [0, num_classes) stop the run (0: a plugged-in task's
    labels, unchecked); input_shape: the declared shape of a row (default: the source's input_shape, if it
    has one). Every batch read is checked (tanplan.data.source.check_rows: shape, finite numbers, labels)
    and a bad one raises BadRows, a UsageError stating public facts only. stop: the run's last step + 1
    (nothing is read past it); prefetch: read step t+1 while step t trains (False: read on demand, in the
    calling thread).
    """

    def __init__(self, source, draw, mesh, *, stop: int, num_classes: int = 0, name: str = "training source",
                 prefetch: bool = True, input_shape=None):
        self.source, self.draw, self.mesh, self.stop = source, draw, mesh, stop
        self.num_classes, self.name = num_classes, name
        self.input_shape = tuple(input_shape or getattr(source, "input_shape", None) or ()) or None
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="tanplan-batches") if prefetch else None
        self._next: tuple[int, Future] | None = None
        self._reading = threading.Lock()  # the prefetch and the loop's own reads take turns at the source

    def __enter__(self) -> "StepBatches":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        """Stop the background reader (a read under way finishes first); the prefetched batch is dropped."""
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None
        self._next = None

    def indices(self, t: int, layout) -> np.ndarray:
        """Step t's indices (drawn or prefetched); the loop grows the layout from their count if needed."""
        return self._get(t, layout).indices

    def take(self, t: int, layout) -> tuple[np.ndarray, dict]:
        """(indices, batch) of step t: the batch {x, y, mask, index} as global arrays for `layout`; then starts
        reading step t+1's in the background."""
        drawn = self._get(t, layout)
        if drawn.layout != layout:  # the loop grew the layout for this batch: place its rows again
            drawn = self._read(t, layout, drawn.indices)
        self._next = None
        if self._pool is not None and t + 1 < self.stop:
            self._next = (t + 1, self._pool.submit(self._read, t + 1, layout))
        return drawn.indices, to_global(drawn, self.mesh)

    def place(self, indices: np.ndarray, layout) -> dict:
        """Any other batch of training rows (the audit's shadow batch), read now and placed for `layout`
        as global arrays, exactly as a step's batch is."""
        return to_global(self._read(-1, layout, indices), self.mesh)

    def _get(self, t: int, layout) -> Drawn:
        if self._next is not None and self._next[0] == t:
            drawn = self._next[1].result()  # an error of the reader is raised here, in the loop's thread
        else:
            drawn = self._read(t, layout)
        self._next = (t, _done(drawn))
        return drawn

    def _placed(self, wanted: np.ndarray, places: np.ndarray, size: int) -> tuple[np.ndarray, np.ndarray]:
        """(x, y) of `size` flat rows: source[wanted] read in ascending index order (one call: a memmap then
        reads forward through its file), each row put at its place, zeros elsewhere. A source with `fill`
        writes its rows (uint8 pixels as they are) straight into place when they arrive in place's order."""
        order = np.argsort(wanted, kind="stable")
        ascending, dest = wanted[order], places[order]
        fill = getattr(self.source, "fill", None)
        direct = fill is not None and np.array_equal(dest, np.arange(len(dest)))
        with self._reading:
            if fill is not None:
                shape, dtype = self.input_shape, np.dtype(self.source.row_dtype)
                x = np.zeros((size, *shape), dtype)
                x_rows = x[: len(dest)] if direct else np.empty((len(dest), *shape), dtype)
                x_rows, y_rows = rows_as_asked(self.name, x_rows, fill(ascending, x_rows), len(wanted))
            else:
                x_rows, y_rows = rows_as_asked(self.name, *self.source[ascending], len(wanted))
                x = np.zeros((size, *x_rows.shape[1:]), np.float32)  # cast as placed
        check_rows(self.name, x_rows, y_rows, self.input_shape or x_rows.shape[1:], self.num_classes)
        if not direct:
            x[dest] = x_rows
        y = np.zeros((size, *y_rows.shape[1:]), y_rows.dtype)
        y[dest] = y_rows
        return x, y

    def _read(self, t: int, layout, indices: np.ndarray | None = None) -> Drawn:
        indices = self.draw(t) if indices is None else indices
        if len(indices) > layout.capacity:  # outgrew the layout: the loop grows it, then takes again
            return Drawn(t, indices, None, None, None, None, None)
        index, mask = sampling.pad_indices(indices, layout)
        local = (local_rows(layout, self.mesh) & mask).reshape(-1)
        wanted = index.reshape(-1)[local]  # this process's rows, in the batch's order
        places = np.flatnonzero(local)  # where they go in the flat padded batch
        x, y = self._placed(wanted, places, index.size)  # checked as read
        x, y = x.reshape(index.shape + x.shape[1:]), y.reshape(index.shape + y.shape[1:])
        return Drawn(t, indices, layout, x, y, mask, sampling.row_index(index, mask))


def device_inputs(source) -> Callable[[dict], dict]:
    """batch -> the batch with its rows as the model's float32 inputs, for the jitted step (traced there):
    a source with `pixels` (tanplan.data.pixels: uint8 rows of a memmap) hands its rows over as they are
    stored, and they are normalised here, on the device, padding rows kept at zero; identity otherwise
    (float rows were normalised when read)."""
    pixels = getattr(source, "pixels", None)
    if pixels is None:
        return lambda batch: batch

    def inputs(batch: dict) -> dict:
        x, mask = batch["x"], batch["mask"]
        if not jnp.issubdtype(x.dtype, jnp.integer):
            return batch
        real = mask.reshape(mask.shape + (1,) * (x.ndim - mask.ndim))
        return {**batch, "x": jnp.where(real, pixels.on_device(x), 0.0)}

    return inputs


def local_rows(layout, mesh) -> np.ndarray:
    """(chunks, chunk_size) booleans: the positions of the padded batch that this process's devices hold
    (every position with one process)."""
    shape = (layout.chunks, layout.chunk_size)
    if jax.process_count() == 1:
        return np.ones(shape, bool)
    local = np.zeros(shape, bool)
    for index in sharding.batch_sharding(mesh).addressable_devices_indices_map(shape).values():
        local[index] = True
    return local


def to_global(drawn: Drawn, mesh) -> dict:
    """The placed batch as global arrays sharded by rows over every device of every process (each
    process supplies its own devices' rows, which it alone has read)."""
    sh = sharding.batch_sharding(mesh)
    return {name: jax.make_array_from_callback(a.shape, sh, lambda idx, a=a: a[idx])
            for name, a in (("x", drawn.x), ("y", drawn.y), ("mask", drawn.mask), ("index", drawn.index))}


def _done(value) -> Future:
    future: Future = Future()
    future.set_result(value)
    return future
