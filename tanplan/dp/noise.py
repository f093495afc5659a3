"""Gaussian noise on the clipped sum, through jax-privacy's `gaussian_privatizer`.

Guarantee: `add_gaussian_noise(s, key, sigma * C)` adds i.i.d. N(0, (σC)²) to every coordinate of s.
With s the clipped sum of a Poisson batch (L2 sensitivity C under add/remove-one neighbours), one call
per logical step is one Poisson-subsampled Gaussian mechanism with noise multiplier σ, which is what
tanplan.privacy.accounting composes. The step calls it once, on the global sum, after all accumulation chunks
and across all devices; never per chunk or per device.

The pytree is flattened to one vector first, so that the noise is one draw of one random-number
program: drawn leaf by leaf, XLA compiles one threefry kernel per leaf (seconds each on CPU).
"""

from __future__ import annotations

import jax
from jax.flatten_util import ravel_pytree
from jax_privacy import noise_addition


def add_gaussian_noise(grad_sum, key: jax.Array, stddev: float):
    """grad_sum + N(0, stddev²) per coordinate, drawn from key (same key => same noise)."""
    flat, unravel = ravel_pytree(grad_sum)
    privatizer = noise_addition.gaussian_privatizer(stddev=stddev, prng_key=key)
    noisy, _ = privatizer.update(flat, privatizer.init(flat))
    return unravel(noisy)
