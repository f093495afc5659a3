"""An npz dataset's class count (the model's output width, published in model.json) comes from public
information: the file's num_classes entry, else its test labels; never from the training labels."""

import numpy as np
import pytest

from tanplan.data import load_dataset
from tanplan.errors import UsageError


def _write(path, y_train, y_test, **extra):
    np.savez(path, x_train=np.zeros((len(y_train), 4)), y_train=y_train, x_test=np.zeros((len(y_test), 4)),
             y_test=y_test, **extra)
    return path


def test_the_class_count_is_read_from_the_test_labels_or_the_files_entry(tmp_path):
    assert load_dataset("npz", path=_write(tmp_path / "a.npz", [0, 1, 2], [0, 1, 2, 3])).num_classes == 4
    declared = _write(tmp_path / "b.npz", [0, 4], [0, 1], num_classes=np.int64(7))
    assert load_dataset("npz", path=declared).num_classes == 7


def test_a_training_label_beyond_the_public_count_is_refused(tmp_path):
    with pytest.raises(UsageError, match="add num_classes to the file"):
        load_dataset("npz", path=_write(tmp_path / "c.npz", [0, 1, 5], [0, 1, 2]))
    with pytest.raises(UsageError, match="num_classes must be one whole number"):
        load_dataset("npz", path=_write(tmp_path / "d.npz", [0, 1], [0, 1], num_classes=np.float32(2.5)))
