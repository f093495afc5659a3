"""Each step's Poisson batch read by index from a source (tanplan.engine.batches): the same padded batch as
the in-memory gather, with and without prefetch, through a layout that grows; and a source of 10^7 rows
synthesised on demand trains 20 steps, each read being exactly one step's batch.

jax-privacy's Poisson sampler permutes all N indices at every step (its cyclic partition, even of cycle
length 1): about 0.2 s at N = 10^7 on an idle CPU core, several seconds on a loaded one. That is the
sampler's cost, not the reader's, so the 10^7-row test draws each step's batch with an equivalent O(B)
sampler (a Binomial(N, q) count, then that many distinct indices uniformly: Poisson sampling)."""

import numpy as np
import pytest

from tanplan.config import load_config
from tanplan.data.source import ArraySource
from tanplan.dp import sampling, sharding
from tanplan.engine.batches import StepBatches
from tanplan.job import job_of

ROWS = 10**7


def _draws(n, q, seed=0):
    return lambda t: sampling.poisson_batch(n, q, np.random.default_rng([seed, t]))


@pytest.mark.parametrize("prefetch", [True, False])
def test_batches_equal_the_in_memory_gather_and_follow_a_grown_layout(prefetch):
    rng = np.random.default_rng(1)
    x = rng.normal(size=(500, 4, 1)).astype(np.float32)
    y = rng.integers(0, 3, 500).astype(np.int32)
    draw = _draws(500, 0.1)
    mesh = sharding.data_mesh()
    layout = sampling.batch_layout(500, 0.1, 32)
    small = sampling.BatchLayout(1, 16)  # too small for a batch of ~50: the loop grows it
    with StepBatches(ArraySource(x, y), draw, mesh, stop=5, num_classes=3, prefetch=prefetch) as reader:
        for t in range(5):
            use = small if t == 2 else layout
            indices = reader.indices(t, use)
            np.testing.assert_array_equal(indices, draw(t))  # the draw of step t, whatever was prefetched
            if len(indices) > use.capacity:
                use = use.grown_to(len(indices))
            got_indices, batch = reader.take(t, use)
            index, mask = sampling.pad_indices(draw(t), use)
            want = sampling.gather_batch(x, y, index, mask)
            np.testing.assert_array_equal(got_indices, draw(t))
            for key in ("x", "y", "mask", "index"):  # bit for bit, rows in the batch's own order, zeros in padding
                np.testing.assert_array_equal(np.asarray(batch[key]), want[key])


def test_a_label_outside_the_classes_stops_the_read():
    from tanplan.errors import UsageError

    x, y = np.zeros((50, 2, 1), np.float32), np.full(50, 7, np.int32)
    with StepBatches(ArraySource(x, y), _draws(50, 0.5), sharding.data_mesh(), stop=1, num_classes=3) as reader:
        with pytest.raises(UsageError, match=r"label outside \[0, 3\)"):
            reader.take(0, sampling.batch_layout(50, 0.5, 64))


class Synthetic:
    """ROWS rows made on demand from their index (two classes, 16-long signals); records every read."""

    num_classes = 2
    input_shape = (16, 1)

    def __init__(self, n):
        self.n, self.reads = n, []

    def __len__(self):
        return self.n

    def __getitem__(self, indices):
        indices = np.asarray(indices)
        self.reads.append(indices.copy())
        y = (indices % 2).astype(np.int32)
        x = np.sin(np.outer(indices % 1000, np.arange(1, 17)) * 0.01) + (2.0 * y - 1)[:, None]
        return x[..., None].astype(np.float32), y


SOURCES = {}


def load_synthetic(**options):
    SOURCES["train"], SOURCES["test"] = Synthetic(ROWS), Synthetic(300)
    return SOURCES["train"], SOURCES["test"]


def test_ten_million_rows_on_demand_train_twenty_steps_reading_only_each_batch(monkeypatch):
    from tanplan.engine.loop import train_and_evaluate

    drawn = []

    def poisson(n, q, rng):  # each index in with probability q, independently (see the module docstring)
        drawn.append(rng.choice(n, size=rng.binomial(n, q), replace=False))
        return drawn[-1]

    monkeypatch.setattr(sampling, "poisson_batch", poisson)
    cfg = load_config(None, [f"data.dataset={__name__}:load_synthetic", "model.name=mlp", "model.width=8",
                             "model.depth=1", "train.batch_size=64", "train.steps=20", "train.eval_every=20",
                             "train.physical_batch_size=128", "train.eval_batch_size=128", "privacy.sigma=1.0", "train.grad_method=vmap",
                             "privacy.epsilon=100", "privacy.noise_seed=5", "train.learning_rate=0.5"])
    summary = train_and_evaluate(job_of(cfg), None, progress=False)
    reads = SOURCES["train"].reads
    assert summary.steps == 20 and summary.dataset_size == ROWS and 0 <= summary.test_accuracy <= 1
    # one read per step, none past the last (the prefetch stops there), each exactly that step's Poisson batch
    assert len(drawn) == 20 and len(reads) == 20
    layout = sampling.batch_layout(ROWS, 64 / ROWS, 128)
    for batch, read in zip(drawn, reads):
        assert np.array_equal(read, np.sort(batch)) and len(read) <= layout.capacity
    assert sum(len(r) for r in reads) == sum(len(b) for b in drawn) < 20 * 100  # B = 64 a step on average
    # the (public) test source is read in batches of at most eval_batch_size rows
    test_reads = [len(r) for r in SOURCES["test"].reads]
    assert max(test_reads) <= 128 and sum(test_reads[-3:]) == 300
