"""Poisson batches: sizes follow Binomial(N, q), every example enters with probability q independently,
the padded layout never truncates, padding rows hold no data."""

import numpy as np
import pytest
from scipy import stats

from tanplan.dp import sampling


def test_batch_sizes_follow_binomial():
    n, q, steps = 400, 0.05, 3000
    sizes = np.array([len(b) for b in sampling.poisson_batches(n, q, steps, np.random.default_rng(1))])
    # Chi-square goodness of fit on the central bins (pooled tails), against Binomial(N, q).
    lo, hi = int(stats.binom.ppf(0.01, n, q)), int(stats.binom.ppf(0.99, n, q))
    edges = np.arange(lo, hi + 1)
    observed = [np.sum(sizes < lo)] + [np.sum(sizes == k) for k in edges] + [np.sum(sizes > hi)]
    probs = [stats.binom.cdf(lo - 1, n, q)] + [stats.binom.pmf(k, n, q) for k in edges] + [stats.binom.sf(hi, n, q)]
    result = stats.chisquare(observed, np.array(probs) * steps / np.sum(probs))
    assert result.pvalue > 1e-3
    assert abs(sizes.mean() - n * q) < 4 * np.sqrt(n * q * (1 - q) / steps)


def test_each_example_enters_with_probability_q_independently():
    n, q, steps = 50, 0.2, 4000
    counts = np.zeros(n)
    pair = 0
    for batch in sampling.poisson_batches(n, q, steps, np.random.default_rng(2)):
        assert len(np.unique(batch)) == len(batch) and (batch >= 0).all() and (batch < n).all()
        counts[batch] += 1
        pair += (0 in batch) and (1 in batch)
    # Each inclusion count ~ Binomial(steps, q); joint inclusion of two examples ~ q².
    assert np.all(np.abs(counts - steps * q) < 5 * np.sqrt(steps * q * (1 - q)))
    assert abs(pair / steps - q * q) < 5 * np.sqrt(q * q * (1 - q * q) / steps)


def test_same_seed_same_batches():
    a = [b.tolist() for b in sampling.poisson_batches(100, 0.1, 5, np.random.default_rng([3, 1]))]
    b = [b.tolist() for b in sampling.poisson_batches(100, 0.1, 5, np.random.default_rng([3, 1]))]
    c = [b.tolist() for b in sampling.poisson_batches(100, 0.1, 5, np.random.default_rng([4, 1]))]
    assert a == b and a != c


@pytest.mark.parametrize("n, q, physical, devices", [(48000, 4096 / 48000, 256, 1), (1000, 0.05, 512, 8),
                                                     (100, 1.0, 32, 1), (60000, 0.5, 1024, 3)])
def test_layout_covers_the_batch_bound(n, q, physical, devices):
    layout = sampling.batch_layout(n, q, physical, devices)
    bound = sampling.batch_size_bound(n, q)
    assert layout.capacity >= bound and layout.chunk_size % devices == 0
    assert layout.chunk_size <= physical * devices  # physical_batch_size counts the rows of one device
    assert layout.chunk_size == physical * devices or layout.chunks == 1
    assert stats.binom.sf(bound, n, q) <= sampling.TAIL  # overflowing the layout is that rare


def test_padding_rows_hold_zeros_and_real_rows_come_first():
    x = np.arange(10 * 3, dtype=np.float32).reshape(10, 3) + 1
    y = np.arange(10, dtype=np.int32) + 1
    layout = sampling.BatchLayout(chunks=2, chunk_size=4)
    index, mask = sampling.pad_indices(np.array([7, 2, 5, 9, 0]), layout)
    assert index.shape == mask.shape == (2, 4)
    assert mask.sum() == 5 and mask.reshape(-1)[:5].all() and not mask.reshape(-1)[5:].any()
    batch = sampling.gather_batch(x, y, index, mask)
    assert batch["x"].shape == (2, 4, 3)
    np.testing.assert_array_equal(batch["x"].reshape(-1, 3)[:5], x[[7, 2, 5, 9, 0]])
    assert not batch["x"][~mask].any() and not batch["y"][~mask].any()


def test_layout_grows_instead_of_truncating():
    layout = sampling.BatchLayout(chunks=2, chunk_size=4)
    with pytest.raises(ValueError):
        sampling.pad_indices(np.arange(9), layout)
    grown = layout.grown_to(9)
    assert grown.chunk_size == 4 and grown.capacity >= 9
    index, mask = sampling.pad_indices(np.arange(9), grown)
    assert mask.sum() == 9
