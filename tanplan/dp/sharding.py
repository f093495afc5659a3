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
