"""Reader threads (tanplan.data.reader): a source that fills in place (a memmap, in memory) is read by several
threads at once, each a range of the rows, and the batch is the same as one thread's, bit for bit; a bad row
met by any thread stops the read in the caller; any other source is read by one call; the default count
follows the cores this process may use, bounded."""

import json
import threading

import numpy as np
import pytest

from tanplan.data import load_dataset, reader
from tanplan.data.reader import RowReader
from tanplan.data.source import ArraySource, BadRows

SHAPE = (5, 5, 3)


def _memmap(folder, dtype, n=400):
    folder.mkdir()
    rng = np.random.default_rng(0)
    x = rng.integers(0, 256, (n, *SHAPE)) if dtype == np.uint8 else rng.normal(size=(n, *SHAPE))
    for split, rows in (("train", x), ("test", x[:20])):
        np.save(folder / f"{split}_x.npy", rows.astype(dtype))
        np.save(folder / f"{split}_y.npy", (np.arange(len(rows)) % 3).astype(np.int32))
    meta = {"format": "tanplan-memmap", "version": 1, "name": "t", "num_classes": 3, "input_shape": list(SHAPE),
            "dtype": np.dtype(dtype).name, "scale": 1 / 255 if dtype == np.uint8 else 1.0,
            "mean": [0.5, 0.4, 0.3], "std": [0.2, 0.3, 0.25], "splits": {"train": n, "test": 20}}
    (folder / "meta.json").write_text(json.dumps(meta))
    return load_dataset("memmap", path=folder).train


def _rows(n, size, seed=1):
    """Poisson-like rows of a padded batch over 4 device blocks: `wanted` in batch order, real rows first
    in each block (their places), as tanplan.engine.batches asks."""
    rng = np.random.default_rng(seed)
    wanted = rng.choice(n, size=size * 3 // 4, replace=False)
    block = size // 4
    per = np.array_split(np.arange(len(wanted)), 4)
    places = np.concatenate([k * block + np.arange(len(p)) for k, p in enumerate(per)])
    return wanted, places


@pytest.mark.parametrize("kind", ["uint8 memmap", "float32 memmap", "in memory"])
def test_several_threads_read_the_same_batch_as_one(tmp_path, kind):
    if kind == "in memory":
        rng = np.random.default_rng(0)
        source = ArraySource(rng.normal(size=(400, *SHAPE)).astype(np.float32), np.arange(400) % 3)
    else:
        source = _memmap(tmp_path / "mm", np.uint8 if kind == "uint8 memmap" else np.float32)
    wanted, places = _rows(400, 256)
    got = {}
    for threads in (1, 4):
        rows = RowReader(source, name="t", input_shape=SHAPE, num_classes=3, threads=threads)
        assert len(rows._pieces(places, runs=True)) >= (4 if threads == 4 else 1)  # 4 threads really split it
        got[threads] = rows.read(wanted, places, 256)
        rows.close()
    assert got[1][0].dtype == (np.uint8 if kind == "uint8 memmap" else np.float32)
    for a, b in zip(got[1], got[4]):
        assert a.dtype == b.dtype
        np.testing.assert_array_equal(a, b)
    x, y = source[wanted]  # the host path (normalised): the rows at their places, zeros elsewhere
    placed = got[4][0][places]
    np.testing.assert_array_equal(source.pixels.on_host(placed) if kind == "uint8 memmap" else placed, x)
    np.testing.assert_array_equal(got[4][1][places], y)
    empty = np.setdiff1d(np.arange(256), places)
    assert not got[4][0][empty].any() and not got[4][1][empty].any()


class Meeting(ArraySource):
    """An in-memory source whose fill waits until two threads are in it at once (a serial reader never gets
    past it: BrokenBarrierError), recording the threads that filled."""

    def __init__(self, x, y):
        super().__init__(x, y)
        object.__setattr__(self, "barrier", threading.Barrier(2, timeout=120))
        object.__setattr__(self, "threads", set())

    def fill(self, indices, x_out):
        self.threads.add(threading.get_ident())
        self.barrier.wait()
        return super().fill(indices, x_out)


def test_the_pieces_are_read_at_once_by_different_threads():
    source = Meeting(np.ones((200, 3, 1), np.float32), np.zeros(200, np.int32))
    rows = RowReader(source, name="t", input_shape=(3, 1), threads=2)
    x, _ = rows.read(np.arange(128), np.arange(128), 128)
    rows.close()
    assert len(source.threads) == 2 and threading.get_ident() not in source.threads and x.all()


def test_a_bad_row_met_by_any_thread_stops_the_read(tmp_path):
    source = _memmap(tmp_path / "mm", np.float32)
    x = np.load(tmp_path / "mm" / "train_x.npy", mmap_mode="r+")
    x[390, 0, 0, 0] = np.nan  # in the last thread's range
    x.flush()
    rows = RowReader(source, name="training source", input_shape=SHAPE, threads=4)
    with pytest.raises(BadRows, match="NaN or infinite"):
        rows.read(np.arange(0, 400, 2)[::-1].copy(), np.arange(200), 200)
    rows.close()


def test_a_source_without_fill_is_read_by_one_call_whatever_the_threads():
    calls = []

    class Plain:
        input_shape = (3, 1)

        def __len__(self):
            return 100

        def __getitem__(self, indices):
            calls.append(np.asarray(indices).copy())
            return np.ones((len(indices), 3, 1)), np.zeros(len(indices), np.int32)

    rows = RowReader(Plain(), name="t", input_shape=(3, 1), threads=8)
    x, _ = rows.read(np.array([50, 3, 70, *range(80, 100)]), np.arange(23), 30)
    assert rows.threads == 1 and len(calls) == 1 and np.all(np.diff(calls[0]) > 0) and x.dtype == np.float32


def test_the_default_count_follows_the_cores_bounded(monkeypatch):
    for cores, want in ((1, 1), (3, 3), (64, reader.MAX_THREADS)):
        monkeypatch.setattr(reader.os, "sched_getaffinity", lambda pid, cores=cores: set(range(cores)))
        assert reader.default_threads() == want
