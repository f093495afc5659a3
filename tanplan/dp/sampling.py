"""Poisson batches padded to a fixed physical layout, as the accountant assumes.

Guarantee: every example enters each step's batch independently with probability q (Poisson sampling,
drawn with jax-privacy's `CyclicPoissonSampling`, cycle length 1 and the INDEPENDENT partition, which is
the add/remove-one setting of tanplan.privacy.accounting). The batch is never truncated: it is padded up to a
fixed `BatchLayout` of `chunks × chunk_size` rows with a mask, so one compiled step serves every step;
in the rare step (probability `tail` per step) whose batch exceeds the layout, the layout grows
(one more compilation), so the sampling stays exactly Poisson.

Padded rows are zeros, not copies of real data, and the step gives them weight zero. Each row carries its
example's index in the training set (`index`): the step keys the example's augmentation views by it
(tanplan.dp.augmult.example_keys). The index, like the mask, is private: it names the sampled examples.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterator

import numpy as np

TAIL = 1e-9  # chance per step that a Poisson batch overflows the default layout


def poisson_batches(num_examples: int, q: float, steps: int, rng: np.random.Generator) -> Iterator[np.ndarray]:
    """Index arrays of `steps` Poisson batches: each index in each batch with probability q, drawn from rng.

    rng must be secret for a private run (tanplan.dp.secret.RunSecret.batch_rng): the batch selection
    is part of the mechanism, and whoever can replay it learns which examples each step used.
    """
    from jax_privacy import batch_selection

    strategy = batch_selection.CyclicPoissonSampling(
        sampling_prob=q, iterations=steps, partition_type=batch_selection.PartitionType.INDEPENDENT
    )
    return strategy.batch_iterator(num_examples, rng=rng)


def poisson_batch(num_examples: int, q: float, rng: np.random.Generator) -> np.ndarray:
    """One Poisson batch (each index in with probability q) from rng: the batch of one step."""
    return next(iter(poisson_batches(num_examples, q, 1, rng)))


def batch_size_bound(num_examples: int, q: float, tail: float = TAIL) -> int:
    """Smallest b with P(Binomial(N, q) > b) <= tail."""
    from scipy import stats

    return int(stats.binom.isf(tail, num_examples, q)) if q < 1 else num_examples


@dataclass(frozen=True)
class BatchLayout:
    """The padded shape of every step's batch: `chunks` accumulated chunks of `chunk_size` rows."""

    chunks: int
    chunk_size: int

    @property
    def capacity(self) -> int:
        return self.chunks * self.chunk_size

    def grown_to(self, batch_size: int) -> "BatchLayout":
        """The same chunk size with enough chunks for batch_size rows."""
        return BatchLayout(max(self.chunks, math.ceil(batch_size / self.chunk_size)), self.chunk_size)


def batch_layout(num_examples: int, q: float, physical_batch_size: int, num_devices: int = 1,
                 tail: float = TAIL) -> BatchLayout:
    """Chunks covering the batch bound, of at most physical_batch_size rows on each of num_devices devices
    (a chunk: a multiple of num_devices rows). Per device, so that a size fitted to one GPU's memory holds
    on eight."""
    bound = max(1, batch_size_bound(num_examples, q, tail))
    round_up = lambda n, m: -(-n // m) * m  # noqa: E731
    per_chunk = physical_batch_size * num_devices
    chunk = min(per_chunk, round_up(bound, num_devices))
    return BatchLayout(math.ceil(bound / chunk), chunk)


def pad_indices(indices: np.ndarray, layout: BatchLayout) -> tuple[np.ndarray, np.ndarray]:
    """(index, mask) arrays of shape (chunks, chunk_size): real rows first, then padding (-1, False)."""
    if len(indices) > layout.capacity:
        raise ValueError(f"batch of {len(indices)} exceeds the layout capacity {layout.capacity}")
    flat = np.full(layout.capacity, -1, dtype=np.int64)
    flat[: len(indices)] = indices
    shape = (layout.chunks, layout.chunk_size)
    return flat.reshape(shape), (flat >= 0).reshape(shape)


def row_index(index: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """The batch's `index` entry: each real row's index in the training set (int32), 0 in padding rows."""
    index = np.asarray(index)
    if index.size and int(index.max()) >= 2**31:
        raise ValueError("training sets of 2^31 examples or more are not supported (int32 row indices)")
    return np.where(mask, index, 0).astype(np.int32)


def gather_batch(x: np.ndarray, y: np.ndarray, index: np.ndarray, mask: np.ndarray) -> dict[str, np.ndarray]:
    """The padded batch {x, y, mask, index} of the rows x[index], y[index]; padded rows hold zeros (no real
    example is copied into them)."""
    safe = np.where(mask, index, 0)
    bx = x[safe.reshape(-1)].reshape(index.shape + x.shape[1:])
    by = y[safe.reshape(-1)].reshape(index.shape + y.shape[1:])
    bx[~mask] = 0
    by[~mask] = 0
    return {"x": bx, "y": by, "mask": mask, "index": row_index(index, mask)}
