"""Integer pixels and the public constants that turn them into a model's inputs: (value·scale − mean) / std.

A memmap of uint8 images (tanplan.data.memmap) hands its training rows to the step reader as they are
stored: a quarter of float32's bytes through the host batch and the transfer to the device, where the
jitted step normalises them (`on_device`, tanplan.engine.batches.device_inputs). `on_host` is the same
arithmetic in numpy (the test source, a row read by `source[indices]`): the same float32 operations in
the same order, so both give the same numbers within float rounding (a fused multiply-add on the device
may round once where the host rounds twice). The constants are public (meta.json), never statistics of
the training set.
"""

from __future__ import annotations

from dataclasses import dataclass

import jax.numpy as jnp
import numpy as np


@dataclass(frozen=True)
class Pixels:
    """(value·scale − mean) / std per channel (the last axis), in float32."""

    scale: float
    mean: tuple[float, ...]
    std: tuple[float, ...]

    def on_host(self, x) -> np.ndarray:
        """float32 inputs of integer (or float) pixels x, computed in place on one float32 copy."""
        out = np.array(x, np.float32)  # a new array: the caller's (a memmap's) rows are never changed
        out *= np.float32(self.scale)
        out -= np.asarray(self.mean, np.float32)
        out /= np.asarray(self.std, np.float32)
        return out

    def on_device(self, x):
        """The same arithmetic on a jax array (inside a jitted step): float32 inputs of pixels x."""
        out = jnp.asarray(x).astype(jnp.float32)
        out = out * jnp.float32(self.scale)
        out = out - jnp.asarray(self.mean, jnp.float32)
        return out / jnp.asarray(self.std, jnp.float32)
