"""Shared synthetic features for the baseline tests: separable Gaussian blobs, plus a recording RNG."""

from __future__ import annotations

import numpy as np
import pytest


def make_blobs(n_per_class: int, num_classes: int, dim: int, separation: float, seed: int):
    """Class c ~ N(μ_c, I) with ‖μ_c‖ = separation; returns x, y (shuffled) and the centres."""
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(num_classes, dim))
    centres *= separation / np.linalg.norm(centres, axis=1, keepdims=True)
    y = np.repeat(np.arange(num_classes), n_per_class)
    x = centres[y] + rng.normal(size=(len(y), dim))
    perm = rng.permutation(len(y))
    return x[perm], y[perm], centres


@pytest.fixture
def blobs():
    """Train/test/public features: 4 well-separated classes in 8 dimensions."""
    x, y, centres = make_blobs(150, 4, 8, 6.0, seed=0)
    x_test, y_test, _ = make_blobs(50, 4, 8, 6.0, seed=0)
    rng = np.random.default_rng(1)
    public = np.concatenate([centres[rng.integers(0, 4, 300)] + rng.normal(size=(300, 8)),
                             rng.normal(size=(100, 8)) * 3])
    return {"x_train": x, "y_train": y, "x_test": x_test, "y_test": y_test, "public": public}


class RecordingRng:
    """A numpy Generator that records the standard deviation and shape of every normal() draw."""

    def __init__(self, seed: int = 0):
        self._rng = np.random.default_rng(seed)
        self.normal_calls: list[tuple[float, tuple]] = []

    def normal(self, loc=0.0, scale=1.0, size=None):
        self.normal_calls.append((float(scale), tuple(np.atleast_1d(size)) if size != () else ()))
        return self._rng.normal(loc, scale, size)

    def __getattr__(self, name):
        return getattr(self._rng, name)


@pytest.fixture
def recording_rng():
    return RecordingRng
