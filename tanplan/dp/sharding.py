"""Data parallelism on all local devices through jax.sharding: a Mesh with one 'data' axis.

The step function is unchanged: the padded batch (chunks, rows, ...) is split along its rows over the
devices and the state is replicated; XLA inserts the cross-device sum of the clipped gradients. The
noise is drawn from the replicated step key on the replicated sum, so it is the same single draw the
one-device step makes (jax's partitionable threefry gives the same numbers under any sharding).
"""

from __future__ import annotations

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from tanplan.dp.sampling import row_index

AXIS = "data"


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
