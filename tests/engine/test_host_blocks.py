"""Each process allocates and reads only its own rows of the global batch (tanplan.engine.batches): one
contiguous block per device it holds, while the Poisson selection (drawn from the shared secret) is the
same in every process. Two "processes" are stood for by the blocks each would hold; four real devices (a
subprocess with forced host devices) check the assembly into the global array; the two-process run
(tests/engine/test_two_processes.py) checks the same parameters as one process."""

import subprocess
import sys

import numpy as np
from helpers import ROOT, env

from tanplan.data.source import ArraySource
from tanplan.dp import sampling, sharding
from tanplan.engine import batches

N, Q, ROW = 300, 0.3, (4, 2)


class Recording(ArraySource):
    """An in-memory source that records the indices of every row it fills."""

    def __init__(self, x, y):
        super().__init__(x, y)
        object.__setattr__(self, "filled", [])

    def fill(self, indices, x_out):
        self.filled.append(np.asarray(indices).copy())
        return super().fill(indices, x_out)


def _data():
    rng = np.random.default_rng(0)
    return rng.normal(size=(N, *ROW)).astype(np.float32), rng.integers(0, 3, N).astype(np.int32)


def _draw(t):
    return sampling.poisson_batch(N, Q, np.random.default_rng([11, t]))


def test_each_process_holds_and_reads_only_its_own_blocks_which_make_the_global_batch(monkeypatch):
    x, y = _data()
    layout = sampling.BatchLayout(3, 48)  # 4 devices of 12 rows a chunk, two on each of two processes
    devices = [(0, 12, "d0"), (12, 24, "d1"), (24, 36, "d2"), (36, 48, "d3")]
    held = {"A": devices[:2], "B": devices[2:]}
    drawn, sources = {}, {}
    for process, blocks in held.items():
        monkeypatch.setattr(batches, "host_blocks", lambda layout, mesh, blocks=blocks: tuple(blocks))
        sources[process] = Recording(x, y)
        with batches.StepBatches(sources[process], _draw, None, stop=1, num_classes=3, prefetch=False) as reader:
            drawn[process] = reader._read(0, layout)
    index, mask = sampling.pad_indices(_draw(0), layout)
    want = sampling.gather_batch(x, y, index, mask)
    for process, blocks in held.items():
        got = drawn[process]
        assert got.x.shape == (2, 3, 12, *ROW) and got.devices == tuple(d for *_, d in blocks)
        assert got.x.nbytes == x.itemsize * 3 * 24 * np.prod(ROW)  # half the padded batch: its own rows only
        for k, (start, stop, _) in enumerate(blocks):
            assert got.x[k].flags.c_contiguous  # each device's block is one piece of memory
            for key in ("x", "y", "mask", "index"):
                np.testing.assert_array_equal(getattr(got, key)[k], want[key][:, start:stop])
        read = np.concatenate(sources[process].filled)
        mine = np.concatenate([index[:, start:stop][mask[:, start:stop]] for start, stop, _ in blocks])
        assert sorted(read.tolist()) == sorted(mine.tolist())  # its own rows, each once, no other
    assert np.array_equal(drawn["A"].indices, drawn["B"].indices)  # the same selection in both


FOUR_DEVICES = """
import numpy as np, jax
from tanplan.data.source import ArraySource
from tanplan.dp import sampling, sharding
from tanplan.engine.batches import StepBatches, host_blocks
assert jax.device_count() == 4
rng = np.random.default_rng(0)
x, y = rng.normal(size=(300, 4, 2)).astype(np.float32), rng.integers(0, 3, 300).astype(np.int32)
draw = lambda t: sampling.poisson_batch(300, 0.3, np.random.default_rng([11, t]))
mesh = sharding.data_mesh()
layout = sampling.batch_layout(300, 0.3, 8, 4)
assert [b[:2] for b in host_blocks(layout, mesh)] == [(0, 8), (8, 16), (16, 24), (24, 32)]
with StepBatches(ArraySource(x, y), draw, mesh, stop=3, num_classes=3) as reader:
    for t in range(3):
        layout = layout.grown_to(len(reader.indices(t, layout)))
        _, batch = reader.take(t, layout)
        index, mask = sampling.pad_indices(draw(t), layout)
        want = sampling.gather_batch(x, y, index, mask)
        for key in ("x", "y", "mask", "index"):
            assert batch[key].sharding == sharding.batch_sharding(mesh)
            np.testing.assert_array_equal(np.asarray(batch[key]), want[key])
            for shard in batch[key].addressable_shards:
                np.testing.assert_array_equal(np.asarray(shard.data), want[key][shard.index])
print("ok")
"""


def test_four_devices_assemble_the_global_batch_from_their_blocks():
    done = subprocess.run([sys.executable, "-c", FOUR_DEVICES], env=env(4), cwd=ROOT, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-3000:]
