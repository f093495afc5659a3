"""Hostile data for tests/commands/test_bad_input.py (issue 28): memmap folders whose meta.json or files
lie, a user's loader whose sources break the protocol, plug-in models that break per-example independence
or the class count, an image folder for `tanplan convert`. Each writer returns {name: path}."""

import json
import textwrap
from pathlib import Path

import numpy as np

LOADER = '''
import numpy as np


class Rows:
    """A random-access source over two arrays; short=True returns one row too few."""

    def __init__(self, x, y, short=False):
        self.x, self.y, self.short = x, y, short

    def __len__(self):
        return len(self.y)

    def __getitem__(self, indices):
        x, y = self.x[indices], self.y[indices]
        return (x[:-1], y[:-1]) if self.short else (x, y)


def _arrays(n, seed):
    rng = np.random.default_rng(seed)
    return rng.normal(size=(n, 16, 1)).astype(np.float32), (np.arange(n) % 3).astype(np.int64)


def load(kind="ok"):
    (x, y), (xt, yt) = _arrays(400, 0), _arrays(60, 1)
    extra = {}
    if kind == "float_labels":  # declared classes, labels as floats: the default task needs integers
        y, yt, extra = y.astype(np.float32), yt.astype(np.float32), {"num_classes": 3}
    elif kind == "shape":  # rows of another shape than the one declared
        extra = {"input_shape": (8, 2)}
    elif kind == "nan":
        x[3, 0, 0], xt[0, 5, 0] = np.nan, np.inf
    elif kind == "strings":
        x, xt = x.astype(str), xt.astype(str)
    elif kind == "wide_labels":
        y, yt = np.stack([y, y], 1), np.stack([yt, yt], 1)
    elif kind == "negative_label":
        yt[4] = -1
    elif kind == "nan_mean":
        extra = {"mean": [float("nan")], "std": [1.0]}
    elif kind == "train_labels":  # out of range in the training split only: met on the first batch read
        y = y + 5
    elif kind == "train_nan":  # NaN in every training row: met on the first batch read
        x[:] = np.nan
    train, test = Rows(x, y, short=kind == "short"), Rows(xt, yt, short=kind == "short")
    return {"train": train, "test": test, **extra}
'''

NETS = '''
import flax.linen as nn


class RowMixing(nn.Module):
    """Adds row i-1's features into row i: row 0 ignores the others, every later row does not."""

    num_classes: int

    @nn.compact
    def __call__(self, x):
        h = nn.Dense(8)(x.reshape(x.shape[0], -1))
        return nn.Dense(self.num_classes)(h.at[1:].add(h[:-1]))


class Dense(nn.Module):
    outputs: int

    @nn.compact
    def __call__(self, x):
        return nn.Dense(self.outputs)(nn.relu(nn.Dense(8)(x.reshape(x.shape[0], -1))))


def row_mixing(num_classes, **options):
    return RowMixing(num_classes)


def narrow(num_classes, **options):
    return Dense(num_classes - 1)


def wide(num_classes, **options):
    return Dense(2 * num_classes)


def nan_loss(logits, label):
    import jax.numpy as jnp

    return jnp.where(label == logits.shape[-1] - 1, jnp.nan, -logits[label])
'''


def write_package(root: Path) -> dict:
    package = root / "pkgs" / "hostilepkg"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "data.py").write_text(textwrap.dedent(LOADER))
    (package / "nets.py").write_text(textwrap.dedent(NETS))
    return {"pkgs": str(root / "pkgs")}


def write_memmap(folder: Path, n_train: int = 400, n_test: int = 60, **change) -> Path:
    """A valid 1-D memmap folder (float32 (16, 1) rows, 3 classes), then `change`: meta keys replaced, or
    x_dtype / y_dtype / train_label / truncate (bytes cut from train_x.npy)."""
    rng = np.random.default_rng(0)
    folder.mkdir(parents=True)
    x_dtype, y_dtype = change.pop("x_dtype", np.float32), change.pop("y_dtype", np.int32)
    train_label, truncate = change.pop("train_label", None), change.pop("truncate", 0)
    for split, n in (("train", n_train), ("test", n_test)):
        y = (np.arange(n) % 3).astype(y_dtype)
        if split == "train" and train_label is not None:
            y[n // 2] = train_label
        np.save(folder / f"{split}_x.npy", rng.normal(size=(n, 16, 1)).astype(x_dtype))
        np.save(folder / f"{split}_y.npy", y)
    meta = {"format": "tanplan-memmap", "version": 1, "name": "hostile", "num_classes": 3, "class_names": [],
            "input_shape": [16, 1], "dtype": "float32", "scale": 1.0, "mean": [0.0], "std": [1.0],
            "splits": {"train": n_train, "test": n_test}, **change}
    (folder / "meta.json").write_text(json.dumps(meta))
    if truncate:
        path = folder / "train_x.npy"
        path.write_bytes(path.read_bytes()[:-truncate])
    return folder


MEMMAPS = {
    "mm_ok": {},
    "mm_zero_std": {"std": [0.0]},
    "mm_nan_scale": {"scale": float("nan")},
    "mm_negative_scale": {"scale": -1.0},
    "mm_dtype": {"dtype": "uint8"},
    "mm_truncated": {"truncate": 64},
    "mm_train_label": {"train_label": 7},
    "mm_channels": {"mean": [0.0, 0.0, 0.0]},
    "mm_inf_mean": {"mean": [float("inf")]},
    "mm_float_labels": {"y_dtype": np.float32},
    "mm_zero_length": {"input_shape": [0, 1]},
}


def write_memmaps(root: Path) -> dict:
    return {name: str(write_memmap(root / name, **dict(change))) for name, change in MEMMAPS.items()}


def write_npz(root: Path) -> dict:
    rng = np.random.default_rng(1)
    x, xt = rng.normal(size=(300, 12)), rng.normal(size=(60, 12))
    y, yt = np.arange(300) % 4, np.arange(60) % 4
    files = {
        "train_label.npz": dict(y_train=np.r_[y[:-1], 7]),  # 0..7 on the training set, 0..3 on the test set
        "half_labels.npz": dict(y_train=y + 0.5),
        "inf_test.npz": dict(x_test=np.where(np.arange(60)[:, None] == 3, np.inf, xt)),
        "nan_train.npz": dict(x_train=np.where(np.arange(300)[:, None] == 9, np.nan, x)),
    }
    for name, change in files.items():
        np.savez(root / name, **{"x_train": x, "y_train": y, "x_test": xt, "y_test": yt, **change})
    return {name: str(root / name) for name in files}


def write_image_folder(root: Path) -> dict:
    from PIL import Image

    for split in ("train", "test"):
        for label in ("a", "b"):
            folder = root / "images" / split / label
            folder.mkdir(parents=True)
            Image.fromarray(np.full((6, 6, 3), 40 if label == "a" else 200, np.uint8)).save(folder / "0.png")
    # the same with one test image that is not an image: met after the training images were written
    import shutil

    shutil.copytree(root / "images", root / "broken_images")
    (root / "broken_images" / "test" / "b" / "1.png").write_bytes(b"not a png")
    return {"images": str(root / "images"), "broken_images": str(root / "broken_images")}
