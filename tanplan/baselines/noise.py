"""The privacy primitives every Gaussian baseline is built from: clipping and Gaussian noise.

All noise comes from `rng.normal(0.0, std, shape)`, one call per released statistic, so that a test can
record the standard deviations actually drawn and compare them with σ × the stated sensitivity. The
generator should be seeded from the OS (np.random.default_rng(None)) for a real release: anyone who
knows the seed can subtract the noise. numpy's floating-point Gaussian sampler is not hardened against
the floating-point attacks of Mironov (2012); these are research baselines.
"""

from __future__ import annotations

import numpy as np


def clip_rows(x: np.ndarray, clip: float) -> np.ndarray:
    """Scale each row to L2 norm at most `clip`: x·min(1, clip/‖x‖). A zero row stays zero."""
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    return x * np.minimum(1.0, clip / np.maximum(norms, 1e-300))


def gaussian(rng: np.random.Generator, std: float, shape) -> np.ndarray:
    """i.i.d. N(0, std²) of the given shape, drawn in one call (zeros when std is 0: non-private)."""
    if std == 0:
        return np.zeros(shape)
    return rng.normal(0.0, std, shape)


def symmetric_gaussian(rng: np.random.Generator, std: float, dim: int) -> np.ndarray:
    """A symmetric dim×dim matrix whose upper triangle (diagonal included) is i.i.d. N(0, std²).

    Adding it to a symmetric statistic M releases a function of triu(M) + noise, and
    ‖triu(M) − triu(M')‖_2 ≤ ‖M − M'‖_F: the Frobenius sensitivity of M bounds the sensitivity of what
    is released, so std = σ·Δ_F gives a Gaussian mechanism with noise multiplier σ ("Analyze Gauss").
    """
    z = gaussian(rng, std, (dim, dim))
    upper = np.triu(z)
    return upper + np.triu(z, 1).T
