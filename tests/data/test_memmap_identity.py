"""A memmap folder's identity (tanplan.data.memmap.fingerprint) is its content, not its files' times: every
host of a multi-host run has its own copy, and each worker's run identity must match the driver's."""

import json
import os
import shutil

import numpy as np
import pytest

from tanplan.data import load_dataset, memmap
from tanplan.dp import secret
from tanplan.engine.run_identity import training_set
from tanplan.errors import UsageError


def _folder(path, rows=40, shape=(4, 4, 3)):
    path.mkdir()
    rng = np.random.default_rng(0)
    for split, n in (("train", rows), ("test", 8)):
        np.save(path / f"{split}_x.npy", rng.integers(0, 256, (n, *shape), dtype=np.uint8))
        np.save(path / f"{split}_y.npy", rng.integers(0, 2, n).astype(np.int32))
    meta = {"format": memmap.FORMAT, "version": memmap.VERSION, "name": "t", "num_classes": 2,
            "input_shape": list(shape), "dtype": "uint8", "scale": 1 / 255, "splits": {"train": rows, "test": 8}}
    (path / memmap.META).write_text(json.dumps(meta))
    return path


def _copy_with_other_times(src, dst):
    shutil.copytree(src, dst)  # copytree keeps times: set others, as a copy made on another host has
    for name in os.listdir(dst):
        os.utime(dst / name, ns=(10**18, 10**18 + 12345))
    return dst


def _flip_one_byte(path, offset):
    data = bytearray(path.read_bytes())
    data[offset] ^= 1
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("sampled", [False, True])
def test_a_copy_has_the_same_identity_and_a_changed_byte_another(tmp_path, monkeypatch, sampled):
    if sampled:  # files larger than the whole-file limit: size, first and last block, sampled blocks
        monkeypatch.setattr(memmap, "_WHOLE_BYTES", 1024)
        monkeypatch.setattr(memmap, "_BLOCK", 256)
        monkeypatch.setattr(memmap, "_SAMPLES", 4)
    original = _folder(tmp_path / "a", rows=200)
    copy = _copy_with_other_times(original, tmp_path / "b")
    assert os.stat(copy / "train_x.npy").st_mtime_ns != os.stat(original / "train_x.npy").st_mtime_ns
    assert memmap.fingerprint(copy) == memmap.fingerprint(original)
    assert training_set(load_dataset("memmap", path=copy)) == training_set(load_dataset("memmap", path=original))

    changed = _copy_with_other_times(original, tmp_path / "c")
    _flip_one_byte(changed / "train_x.npy", 200)  # a pixel of the first row (in the first block when sampled)
    assert memmap.fingerprint(changed) != memmap.fingerprint(original)
    assert training_set(load_dataset("memmap", path=changed)) != training_set(load_dataset("memmap", path=original))


def test_a_worker_on_a_copy_reads_the_drivers_secret_and_one_on_other_data_is_refused(tmp_path):
    """The driver binds the secret to the identity of its folder; a worker recomputes it from its own copy."""
    original = _folder(tmp_path / "a")
    copy = _copy_with_other_times(original, tmp_path / "b")
    changed = _copy_with_other_times(original, tmp_path / "c")
    _flip_one_byte(changed / "train_y.npy", 200)  # one training label
    identity = {"data.training_set": training_set(load_dataset("memmap", path=original))}
    saved = secret.for_run(tmp_path / "ckpt", -1, identity=identity, resume=False)
    on_copy = {"data.training_set": training_set(load_dataset("memmap", path=copy))}
    assert secret.for_run(tmp_path / "ckpt", -1, identity=on_copy, create=False) == saved
    other = {"data.training_set": training_set(load_dataset("memmap", path=changed))}
    with pytest.raises(UsageError, match="data.training_set"):
        secret.for_run(tmp_path / "ckpt", -1, identity=other, create=False)


def test_the_digest_of_a_large_file_reads_a_bounded_part_of_it(tmp_path, monkeypatch):
    """Cheap on large files: at most (_SAMPLES + 2) blocks are read, whatever the size."""
    path = tmp_path / "big.bin"
    with open(path, "wb") as f:
        f.truncate(memmap._WHOLE_BYTES * 4)  # sparse: 64 MiB that cost nothing on disk
    reads = []
    real_open = open

    class Counting:
        def __init__(self, f):
            self.f = f

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.f.close()

        def seek(self, offset):
            self.f.seek(offset)

        def read(self, n=-1):
            data = self.f.read(n)
            reads.append(len(data))
            return data

    monkeypatch.setattr("builtins.open", lambda p, mode="r", *a, **k: Counting(real_open(p, mode, *a, **k)))
    memmap.content_digest(path)
    assert sum(reads) <= (memmap._SAMPLES + 2) * memmap._BLOCK < memmap._WHOLE_BYTES
