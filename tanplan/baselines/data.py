"""Feature files for the baselines: loading with one-line errors, class imbalance, metrics.

F.npz holds x_train, y_train, x_test, y_test (features (n, d), integer labels), the keys of tanplan's
.npz data loader; P.npz holds x, unlabelled public features of the same width d.
"""

from __future__ import annotations

import math
import zipfile
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from tanplan.data.dataset import check_labels
from tanplan.errors import UsageError

FEATURE_KEYS = ("x_train", "y_train", "x_test", "y_test")


@dataclass(frozen=True, eq=False)
class FeatureSet:
    """Private features: train (what the baselines learn from) and test (what they are scored on)."""

    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    num_classes: int

    @property
    def width(self) -> int:
        return int(self.x_train.shape[1])

    def class_counts(self) -> np.ndarray:
        return np.bincount(self.y_train, minlength=self.num_classes)


def _read_npz(path, keys: tuple[str, ...], what: str) -> dict[str, np.ndarray]:
    path = Path(path)
    if not path.is_file():
        raise UsageError(f"{what} file {str(path)!r} does not exist")
    try:
        with np.load(path, allow_pickle=False) as f:
            missing = [k for k in keys if k not in f.files]
            if missing:
                raise UsageError(f"{what} file {str(path)!r} lacks {', '.join(missing)}: it must hold "
                                 f"{', '.join(keys)} (found {', '.join(f.files) or 'nothing'})")
            return {k: f[k] for k in keys}
    except UsageError:
        raise
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as e:
        raise UsageError(f"{what} file {str(path)!r} is not a readable .npz file ({type(e).__name__})") from None


def _features(x, name: str) -> np.ndarray:
    x = np.asarray(x)
    if x.ndim != 2:
        raise UsageError(f"{name} has shape {x.shape}; expected (examples, features)")
    if x.shape[1] == 0:
        raise UsageError(f"{name} has shape {x.shape}: 0 features per example; expected at least 1")
    if not (np.issubdtype(x.dtype, np.floating) or np.issubdtype(x.dtype, np.integer)):
        raise UsageError(f"{name} has dtype {x.dtype}; expected numbers")
    x = x.astype(np.float64)
    if not np.isfinite(x).all():
        raise UsageError(f"{name} holds NaN or infinite values; features must be finite")  # no count: private
    return x


def _labels(y, name: str) -> np.ndarray:
    return check_labels(y, name, public=name.endswith("y_test"))  # class indices 0..C-1, C at most data.dataset.MAX_CLASSES


def feature_set(x_train, y_train, x_test, y_test, source: str = "features") -> FeatureSet:
    """Validate arrays into a FeatureSet, or raise UsageError naming what is wrong."""
    x_train, x_test = _features(x_train, f"{source}: x_train"), _features(x_test, f"{source}: x_test")
    y_train, y_test = _labels(y_train, f"{source}: y_train"), _labels(y_test, f"{source}: y_test")
    for split, x, y in (("train", x_train, y_train), ("test", x_test, y_test)):
        if len(x) != len(y):
            raise UsageError(f"{source}: x_{split} has {len(x)} examples but y_{split} has {len(y)} labels")
        if len(x) == 0:
            raise UsageError(f"{source}: the {split} split is empty")
    if x_train.shape[1] != x_test.shape[1]:
        raise UsageError(f"{source}: x_train has {x_train.shape[1]} features but x_test has {x_test.shape[1]}")
    num_classes = int(max(y_train.max(), y_test.max())) + 1
    if num_classes < 2:
        raise UsageError(f"{source}: found a single class; a classifier needs at least 2")
    return FeatureSet(x_train, y_train, x_test, y_test, num_classes)


def load_features(path) -> FeatureSet:
    return feature_set(**_read_npz(path, FEATURE_KEYS, "features"), source=str(path))


def load_public(path, width: int) -> np.ndarray:
    """Unlabelled public features (key x) whose width must match the private features'."""
    x = _features(_read_npz(path, ("x",), "public")["x"], f"{path}: x")
    if x.shape[1] != width:
        raise UsageError(f"public features {str(path)!r} have {x.shape[1]} features per example but the "
                         f"private features have {width}; they must come from the same encoder")
    if len(x) == 0:
        raise UsageError(f"public features {str(path)!r} hold no examples")
    return x


def long_tail_counts(largest: int, num_classes: int, ratio: float) -> list[int]:
    """Exponential long tail (Cui et al. 2019): n_c = ⌊largest·ratio^(−c/(m−1))⌋, at least 1."""
    return [max(1, int(largest * ratio ** (-c / (num_classes - 1)))) for c in range(num_classes)]


def imbalanced(fs: FeatureSet, ratio: float, seed: int = 0) -> FeatureSet:
    """Subsample the training split to an exponential long tail with largest/smallest class = ratio.

    Class 0 stays the largest; the test split is untouched (balanced accuracy, as in Wahdany et al. 2024). The
    subsample is a fixed function of `seed`, independent of the privacy noise.
    """
    if ratio < 1:
        raise UsageError(f"imbalance ratio {ratio:g} is not allowed: must be >= 1 (1 = as given)")
    if ratio == 1:
        return fs
    counts = fs.class_counts()
    largest = int(counts[counts > 0].min()) if (counts > 0).any() else 0
    targets = long_tail_counts(largest, fs.num_classes, ratio)
    rng = np.random.default_rng(seed)
    keep = []
    for c, target in enumerate(targets):
        idx = np.flatnonzero(fs.y_train == c)
        keep.append(np.sort(rng.permutation(idx)[:min(target, len(idx))]))
    keep = np.sort(np.concatenate(keep))
    return replace(fs, x_train=fs.x_train[keep], y_train=fs.y_train[keep])


# ------------------------------------------------------------------------------------------ metrics

def accuracy(y_true: np.ndarray, y_pred: np.ndarray) -> float:
    return float(np.mean(y_true == y_pred))


def balanced_accuracy(y_true: np.ndarray, y_pred: np.ndarray) -> float:
    """Mean over the classes present in y_true of the per-class recall."""
    classes = np.unique(y_true)
    return float(np.mean([np.mean(y_pred[y_true == c] == c) for c in classes]))


def minority_classes(train_counts: np.ndarray) -> np.ndarray:
    """The ⌈m/4⌉ classes with the fewest training examples (ties: lower class index first)."""
    m = len(train_counts)
    return np.argsort(train_counts, kind="stable")[:max(1, math.ceil(m / 4))]


def minority_accuracy(y_true: np.ndarray, y_pred: np.ndarray, train_counts: np.ndarray) -> float:
    """Accuracy on the test examples of the minority classes (Wahdany et al. 2024 §5.2: the smallest 25%)."""
    mask = np.isin(y_true, minority_classes(train_counts))
    return float(np.mean(y_true[mask] == y_pred[mask])) if mask.any() else float("nan")


def public_standardiser(public_features: np.ndarray):
    """f -> (f − mean) / std with the PUBLIC features' statistics (a dead unit, std 0, is left centred)."""
    mean, std = public_features.mean(0), public_features.std(0)
    std = np.where(std > 1e-8, std, 1.0)
    return lambda f: (f - mean) / std
