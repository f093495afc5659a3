"""Datasets (numpy, loaded by name) and augmentations (pure JAX, one example at a time).

Modules: load (load_dataset, the one entry point, and dataset_kind), dataset (the in-memory Dataset and the
checks every loader runs), source (random-access sources, for data larger than memory), memmap (a folder of
.npy files read through memmaps, and its converters), the built-in datasets mnist1d, mnist5k, cifar10 and
npz, cache (where generated datasets are cached), augment (the augmentations) and augtest (AugTest's
majority vote at test time).

Loading data imports no JAX; the augmentation names are imported on first use, so that
`from tanplan.data import load_dataset` stays cheap.
"""

import importlib

from tanplan.data.dataset import Dataset
from tanplan.data.load import available_datasets, dataset_kind, load_dataset

_LAZY = {
    "make_augmentation": "tanplan.data.augment",
    "available_augmentations": "tanplan.data.augment",
    "augtest_predict": "tanplan.data.augtest",
    "majority_vote": "tanplan.data.augtest",
}

__all__ = ["Dataset", "available_datasets", "dataset_kind", "load_dataset", *_LAZY]


def __getattr__(name):
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'tanplan.data' has no attribute {name!r}")
