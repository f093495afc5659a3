"""Any dataset stored as one .npz file with x_train, y_train, x_test, y_test (and optionally num_classes).

The number of classes (the model's output width, published in model.json) comes from public information
only: the file's `num_classes` entry (a scalar) when it has one, else the largest TEST label + 1 (the test
set is used for evaluation and is not protected: docs/privacy.md). Never from the training labels, whose
largest value is a noiseless function of the private data; a training label outside that range is refused.

The arrays are used as given (cast to float32): normalise them beforehand with public constants.
uint8 arrays are taken as pixels and scaled to [0, 1]. Shapes: (n, d) is read as a 1D signal
(n, d, 1); (n, length, channels) as 1D; (n, height, width, channels) as images (NHWC).
"""

from __future__ import annotations

import zipfile
from pathlib import Path

import numpy as np

from tanplan.data.dataset import MAX_CLASSES, Dataset, check_labels
from tanplan.errors import UsageError

KEYS = ("x_train", "y_train", "x_test", "y_test")


def load_npz(path) -> Dataset:
    if path is None or str(path) == "":
        raise UsageError("data.path is empty: the npz dataset needs a .npz file with " + ", ".join(KEYS))
    path = Path(path).expanduser()
    if not path.is_file():
        raise UsageError(f"npz file not found: {path}")
    try:
        with np.load(path, allow_pickle=False) as f:
            missing = [k for k in KEYS if k not in f.files]
            if missing:
                raise UsageError(f"{path} lacks {', '.join(missing)}; it must hold {', '.join(KEYS)} "
                                 f"(found: {', '.join(f.files) or 'nothing'})")
            arrays = {k: f[k] for k in KEYS}
            declared = f["num_classes"] if "num_classes" in f.files else None
    except UsageError:
        raise
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as e:
        raise UsageError(f"cannot read {path} as .npz: {e}") from None
    x_train, x_test = _inputs(arrays["x_train"], path, "x_train"), _inputs(arrays["x_test"], path, "x_test")
    return Dataset("npz", x_train, arrays["y_train"], x_test, arrays["y_test"],
                   num_classes=public_num_classes(declared, arrays["y_test"], path))


def public_num_classes(declared, y_test, path) -> int:
    """The class count from the file's num_classes entry, else from the test labels (public)."""
    if declared is not None:
        value = np.asarray(declared)
        if value.shape != () or not np.issubdtype(value.dtype, np.integer) or not 2 <= int(value) <= MAX_CLASSES:
            raise UsageError(f"{path}: num_classes must be one whole number in [2, {MAX_CLASSES:,}], found {value!r}")
        return int(value)
    labels = check_labels(y_test, f"{path}: y_test", public=True)
    return int(labels.max()) + 1 if len(labels) else 0


def _inputs(x: np.ndarray, path: Path, key: str) -> np.ndarray:
    if x.dtype == np.uint8:
        x = x.astype(np.float32) / 255.0
    elif not (np.issubdtype(x.dtype, np.floating) or np.issubdtype(x.dtype, np.integer)):
        raise UsageError(f"{path}: {key} has dtype {x.dtype}; expected numbers")
    if x.ndim == 2:
        x = x[..., None]
    if x.ndim == 4 and x.shape[1] in (1, 3) and x.shape[3] not in (1, 3):
        raise UsageError(f"{path}: {key} has shape {x.shape}, which looks channels-first; store images "
                         "as (n, height, width, channels)")
    if x.ndim not in (3, 4):
        raise UsageError(f"{path}: {key} has shape {x.shape}; expected (n, d), (n, length, channels) "
                         "or (n, height, width, channels)")
    return x.astype(np.float32)


def peek_shape(path) -> tuple[int, ...] | None:
    """The shape of x_train in the .npz at path as stored, from its header alone (None if unreadable)."""
    try:
        with zipfile.ZipFile(Path(path).expanduser()) as archive, archive.open("x_train.npy") as f:
            fmt = np.lib.format
            major, _ = fmt.read_magic(f)
            read = fmt.read_array_header_1_0 if major == 1 else fmt.read_array_header_2_0
            shape, _, _ = read(f)
    except (OSError, KeyError, ValueError, TypeError, zipfile.BadZipFile):
        return None
    return tuple(int(d) for d in shape)


def peek_rank(path) -> int | None:
    """The number of dimensions of x_train in the .npz at path, from its header alone (None if unreadable)."""
    shape = peek_shape(path)
    if shape is None:
        return None
    return len(shape) + (1 if len(shape) == 2 else 0)  # (n, d) is read as (n, d, 1)
