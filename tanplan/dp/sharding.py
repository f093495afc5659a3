"""Data parallelism on all local devices through jax.sharding: a Mesh with one 'data' axis.

The step function is unchanged: the padded batch (chunks, rows, ...) is split along its rows over the
devices and the state is replicated; XLA inserts the cross-device sum of the clipped gradients (the vmap
route adds its devices' sums itself, `sum_per_device`: XLA mis-partitions its per-example gradients). The
noise is drawn from the replicated step key on the replicated sum, so it is the same single draw the
one-device step makes (jax's partitionable threefry gives the same numbers under any sharding).
A run uses every device (`run_devices`), unless it starts inside `on_devices` (a proxy on one device).
"""

from __future__ import annotations

import contextlib
import contextvars

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from tanplan.dp.sampling import row_index

AXIS = "data"

# The devices of the runs started in this thread (None: all of them); per thread: proxies train at once.
_RUN_DEVICES: contextvars.ContextVar = contextvars.ContextVar("tanplan_run_devices", default=None)


def run_devices() -> list:
    """The devices a run started here uses: every device (jax.devices()), unless `on_devices` chose some."""
    chosen = _RUN_DEVICES.get()
    return list(chosen) if chosen is not None else jax.devices()


@contextlib.contextmanager
def on_devices(devices):
    """Runs started inside (in this thread) use only `devices`: their mesh, and arrays made without a
    placement (jax.default_device: the first of them)."""
    token = _RUN_DEVICES.set(tuple(devices))
    try:
        with jax.default_device(devices[0]):
            yield
    finally:
        _RUN_DEVICES.reset(token)


def data_mesh(devices=None) -> Mesh:
    devices = jax.local_devices() if devices is None else devices
    return Mesh(np.asarray(devices), (AXIS,))


def batch_sharding(mesh: Mesh) -> NamedSharding:
    """Rows of every chunk split over the devices: arrays of shape (chunks, rows, ...)."""
    return NamedSharding(mesh, PartitionSpec(None, AXIS))


def replicated(mesh: Mesh) -> NamedSharding:
    return NamedSharding(mesh, PartitionSpec())


def shard_batch(batch: dict, mesh: Mesh) -> dict:
    return jax.device_put(batch, batch_sharding(mesh))


def replicate(tree, mesh: Mesh):
    return jax.device_put(tree, replicated(mesh))


def sum_per_device(grad_sum):
    """grad_sum(params, x, y, keys, mask) -> (sum, losses, accuracies) of one chunk, computed device by device:
    each device runs grad_sum on its own rows (jax.shard_map over AXIS of data_mesh(run_devices())) and the
    devices' sums are added (psum); the per-row losses and accuracies stay split by rows.

    Why: with the rows sharded, XLA's SPMD partitioner (jaxlib 0.10.2) partitions the grouped convolution that
    vmap(grad(conv)) lowers to with an all-to-all that gives every device but the first wrong per-example
    gradients (2 CPU devices, a 1-D conv: device 1's rows off by 50-100%). Each row is still clipped on its own,
    so what changes is only where the rows run: the sum is that of the one-device step. One device (or a chunk
    whose rows do not split evenly over the devices) runs grad_sum as it is.
    """

    def summed(params, x, y, keys, mask):
        grads, losses, acc = grad_sum(params, x, y, keys, mask)
        return jax.lax.psum(grads, AXIS), losses, acc

    def per_device(params, x, y, keys, mask):  # the devices are looked up when traced, not when built
        mesh = data_mesh(run_devices())
        if mesh.devices.size == 1 or x.shape[0] % mesh.devices.size:
            return grad_sum(params, x, y, keys, mask)
        rows, same = PartitionSpec(AXIS), PartitionSpec()
        split = jax.shard_map(summed, mesh=mesh, in_specs=(same, rows, rows, rows, rows),
                              out_specs=(same, rows, rows), check_vma=False)  # check_vma off: no psum for params
        return split(params, x, y, keys, mask)

    return per_device


def global_batch(x: np.ndarray, y: np.ndarray, index: np.ndarray, mask: np.ndarray, mesh: Mesh) -> dict:
    """The padded batch {x, y, mask, index} as global arrays sharded by rows over every device of every process.

    Each process gathers only the rows that live on its own devices (jax.make_array_from_callback);
    padding rows hold zeros, never a real example. With one process this equals shard_batch.
    """
    sh = batch_sharding(mesh)

    def rows(source):
        def fetch(idx):
            i, m = index[idx[:2]], mask[idx[:2]]
            out = source[np.where(m, i, 0).reshape(-1)].reshape(i.shape + source.shape[1:])
            out[~m] = 0
            return out
        return fetch

    shape, rows_index = index.shape, row_index(index, mask)
    return {"x": jax.make_array_from_callback(shape + x.shape[1:], sh, rows(x)),
            "y": jax.make_array_from_callback(shape + y.shape[1:], sh, rows(y)),
            "mask": jax.make_array_from_callback(shape, sh, lambda idx: mask[idx[:2]]),
            "index": jax.make_array_from_callback(shape, sh, lambda idx: rows_index[idx[:2]])}


def replicate_global(tree, mesh: Mesh):
    """Every leaf (host values, equal in every process) replicated on every device of the mesh."""
    rep = replicated(mesh)

    def put(leaf):
        a = np.asarray(leaf)
        return jax.make_array_from_callback(a.shape, rep, lambda idx: a[idx])

    return jax.tree.map(put, tree)
