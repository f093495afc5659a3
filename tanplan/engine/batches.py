"""Each step's Poisson batch, read by index from the training source, one step ahead.

Step t's batch is the Poisson sample drawn from the run's secret (tanplan.dp.sampling.poisson_batch with
`secret.batch_rng(BATCH, t)`: every example in with probability q, independently); `StepBatches` draws it,
places its indices in the padded layout (real rows first, padding after: tanplan.dp.sampling.pad_indices),
reads exactly the rows that land on this process's devices (tanplan.data.reader: straight into place, a
memmap's uint8 pixels as they are stored, which the jitted step normalises on the device: `device_inputs`)
and hands the padded batch to the loop as global arrays sharded over the mesh. While step t trains, a
background thread draws and reads step t+1's batch: so at any time at most two batches of rows are held or
being read (the step's and the next one's), and a source of any size is never read whole. Batches are
read one at a time (one lock); within one, a source that fills in place (thread-safe by contract: in
memory, a memmap) is read by several threads, any other by one call: it need not be thread-safe.

Several processes (hosts): every process draws the SAME selection from the shared secret (the draw of step
t is a function of (secret, t) alone, and the layout of public numbers: N, q, the config), so the Poisson
batch, its padding and which device holds which row are the same everywhere; only their materialisation is
split. Each process allocates and reads only its own devices' rows, one contiguous block per device (the
rows of every chunk that device holds: `host_blocks`), and sends each block to its device; the blocks of
all processes form the global batch, the same array one process would build alone
(jax.make_array_from_single_device_arrays). No process allocates, zero-fills or reads another's rows.

Each padded batch carries its rows' dataset indices (`index`, int32, 0 in padding): the step keys each
example's augmentation views by them (tanplan.dp.augmult.example_keys). The indices and the rows stay in
this process's memory (they are the private part of the mechanism: who knows them knows which examples
each step used); nothing here writes a file. The batches are the same whatever the prefetch, except in the
rare step whose batch outgrows the layout, when the loop grows it and the batch is placed again.
"""

from __future__ import annotations

import threading
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np

from tanplan.data.reader import RowReader
from tanplan.dp import sampling, sharding


@dataclass
class Drawn:
    """Step t's Poisson batch (private: in memory only) and this process's rows of it, placed for one layout.

    The arrays hold only the rows of this process's devices: one block per device, (blocks, chunks, rows
    per device, ...), each block contiguous in memory (what that device holds of every chunk, sent as it is).
    """

    step: int
    indices: np.ndarray
    layout: object  # tanplan.dp.sampling.BatchLayout the rows were placed for
    x: np.ndarray  # (blocks, chunks, rows, *input_shape), zeros in padding (uint8 pixels of a source with
    # `pixels`, normalised on the device: device_inputs)
    y: np.ndarray
    mask: np.ndarray  # (blocks, chunks, rows): real rows
    index: np.ndarray  # (blocks, chunks, rows) int32: each real row's index in the training set, 0 in padding
    devices: tuple = ()  # the device of each block


class StepBatches:
    """The batches of steps start, start+1, ... of a run; `take(t, layout)` gives step t's.

    draw(t) -> the indices of step t's Poisson batch (from the run's secret); source: the training source;
    num_classes: labels that are not integers in [0, num_classes) stop the run (0: a plugged-in task's
    labels, unchecked); input_shape: the declared shape of a row (default: the source's input_shape, if it
    has one). Every batch read is checked (tanplan.data.source.check_rows: shape, finite numbers, labels)
    and a bad one raises BadRows, a UsageError stating public facts only. stop: the run's last step + 1
    (nothing is read past it); prefetch: read step t+1 while step t trains (False: read on demand, in the
    calling thread); threads: the reader threads of a source that fills in place (tanplan.data.reader;
    None: one a core, bounded).
    """

    def __init__(self, source, draw, mesh, *, stop: int, num_classes: int = 0, name: str = "training source",
                 prefetch: bool = True, input_shape=None, threads: int | None = None):
        self.source, self.draw, self.mesh, self.stop = source, draw, mesh, stop
        self.input_shape = tuple(input_shape or getattr(source, "input_shape", None) or ()) or None
        self.rows = RowReader(source, name=name, input_shape=self.input_shape, num_classes=num_classes,
                              threads=threads)
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
        self.rows.close()

    def indices(self, t: int, layout) -> np.ndarray:
        """Step t's indices (drawn or prefetched); the loop grows the layout from their count if needed."""
        return self._get(t, layout).indices

    def take(self, t: int, layout) -> tuple[np.ndarray, dict]:
        """(indices, batch) of step t: the batch {x, y, mask, index} as global arrays for `layout`; then starts
        reading step t+1's in the background."""
        drawn = self.take_host(t, layout)
        return drawn.indices, to_global(drawn, self.mesh)

    def take_host(self, t: int, layout) -> Drawn:
        """Step t's batch as this process's host arrays (`Drawn`, private: in memory only), placed for
        `layout`; then starts reading step t+1's in the background (packed proxies stack them: tanplan.engine.packed)."""
        drawn = self._get(t, layout)
        if drawn.layout != layout:  # the loop grew the layout for this batch: place its rows again
            drawn = self._read(t, layout, drawn.indices)
        self._next = None
        if self._pool is not None and t + 1 < self.stop:
            self._next = (t + 1, self._pool.submit(self._read, t + 1, layout))
        return drawn

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

    def _read(self, t: int, layout, indices: np.ndarray | None = None) -> Drawn:
        """Step t's draw (or `indices`), padded for the layout; this process reads and holds its own blocks."""
        indices = self.draw(t) if indices is None else indices
        if len(indices) > layout.capacity:  # outgrew the layout: the loop grows it, then takes again
            return Drawn(t, indices, None, None, None, None, None)
        index, mask = sampling.pad_indices(indices, layout)
        blocks = host_blocks(layout, self.mesh)
        index, mask = own_blocks(index, blocks), own_blocks(mask, blocks)
        places = np.flatnonzero(mask)  # this process's real rows, in its own blocks
        with self._reading:
            x, y = self.rows.read(index.reshape(-1)[places], places, mask.size)  # checked as read
        x, y = x.reshape(mask.shape + x.shape[1:]), y.reshape(mask.shape + y.shape[1:])
        return Drawn(t, indices, layout, x, y, mask, sampling.row_index(index, mask), tuple(d for *_, d in blocks))


def host_blocks(layout, mesh) -> tuple[tuple[int, int, object], ...]:
    """(start, stop, device) for each of this process's devices, in row order: the rows [start, stop) of every
    chunk that the device holds of the batch sharded over the mesh (tanplan.dp.sharding.batch_sharding)."""
    shape = (layout.chunks, layout.chunk_size)
    held = sharding.batch_sharding(mesh).addressable_devices_indices_map(shape)
    return tuple(sorted(((*index[1].indices(layout.chunk_size)[:2], device) for device, index in held.items()),
                        key=lambda block: block[0]))


def own_blocks(a: np.ndarray, blocks) -> np.ndarray:
    """(blocks, chunks, rows, ...): each block's columns of the (chunks, chunk_size, ...) array a, contiguous."""
    return np.stack([a[:, start:stop] for start, stop, _ in blocks])


def to_global(drawn: Drawn, mesh) -> dict:
    """The placed batch as global arrays sharded by rows over every device of every process: each process
    sends each of its blocks to its device (jax.make_array_from_single_device_arrays), so it supplies its
    own devices' rows, which it alone has read; the global batch is the same with any number of processes."""
    sh = sharding.batch_sharding(mesh)
    rows = drawn.layout.chunks, drawn.layout.chunk_size
    batch = {}
    for name in ("x", "y", "mask", "index"):
        a = getattr(drawn, name)
        parts = jax.device_put(list(a), list(drawn.devices))
        batch[name] = jax.make_array_from_single_device_arrays(rows + a.shape[3:], sh, parts)
    return batch


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


def _done(value) -> Future:
    future: Future = Future()
    future.set_result(value)
    return future
