"""Data sources (tanplan.data.source) and the memmap format (tanplan.data.memmap): the protocol, metadata from
public information only, the converters from CIFAR-10 batches and an image folder (fixtures written here),
`tanplan convert`, and a memmap folder as data.dataset."""

import doctest
import json

import numpy as np
import pytest
from helpers import run_cli, write_cifar_fixture

from tanplan.data import load_dataset, memmap, source
from tanplan.data.cifar10 import MEAN, STD, load_cifar10
from tanplan.data.dataset import with_train_examples
from tanplan.data.source import ArraySource, describe, read_rows
from tanplan.errors import UsageError
from tanplan.job import job_of


class Recording:
    """An ArraySource that records every index array it is asked for."""

    def __init__(self, x, y, **attrs):
        self.inner, self.calls = ArraySource(x, y), []
        self.__dict__.update(attrs)

    def __len__(self):
        return len(self.inner)

    def __getitem__(self, indices):
        self.calls.append(np.asarray(indices).copy())
        return self.inner[indices]


def test_doctests():
    assert doctest.testmod(source).failed == 0


def test_rows_come_back_in_the_order_asked_from_one_ascending_read():
    x = np.arange(20, dtype=np.float32).reshape(10, 2, 1)
    s = Recording(x, np.arange(10) % 3)
    got_x, got_y = read_rows(s, np.array([7, 2, 9, 0]))
    assert got_x[:, 0, 0].tolist() == [14, 4, 18, 0] and got_y.tolist() == [1, 2, 0, 0]
    assert [c.tolist() for c in s.calls] == [[0, 2, 7, 9]]  # one call, sorted: a memmap reads forward


def test_metadata_comes_from_declarations_or_the_test_set_never_the_training_rows():
    rng = np.random.default_rng(0)
    train = Recording(rng.normal(size=(50, 4, 4, 3)).astype(np.float32), rng.integers(0, 5, 50))
    test = Recording(rng.normal(size=(20, 4, 4, 3)).astype(np.float32), np.array([0, 6] + [1] * 18))
    s = describe("toy", train, test)
    assert (s.num_train, s.num_test, s.input_shape, s.data_kind, s.num_classes) == (50, 20, (4, 4, 3), "image", 7)
    assert train.calls == []  # N from len(), shape and classes from the public test set
    assert describe("toy", train, test, num_classes=9).num_classes == 9
    assert describe("toy", Recording(train.inner.x, train.inner.y, num_classes=8), test).num_classes == 8


@pytest.mark.parametrize("train, test, message", [
    (object(), ArraySource(np.zeros((2, 3, 1)), np.zeros(2, int)), "needs __len__ and __getitem__"),
    (ArraySource(np.zeros((0, 3, 1)), np.zeros(0, int)), ArraySource(np.zeros((2, 3, 1)), np.zeros(2, int)), "empty"),
    (ArraySource(np.zeros((2, 3, 1, 1, 1)), np.zeros(2, int)), ArraySource(np.zeros((2, 3, 1, 1, 1)), np.zeros(2, int)),
     "expected \\(features,\\), \\(length, channels\\)"),
    (ArraySource(np.zeros((2, 3, 1)), np.zeros(2, int)), ArraySource(np.zeros((2, 3, 1)), np.zeros(2, int)),
     "at least 2"),
])
def test_a_source_that_breaks_the_protocol_is_one_line(train, test, message):
    with pytest.raises(UsageError, match=message):
        describe("toy", train, test)


def test_flat_feature_rows_are_a_source_of_their_own_kind():
    flat = describe("toy", ArraySource(np.zeros((4, 3), np.float32), np.arange(4) % 2),
                    ArraySource(np.zeros((2, 3), np.float32), np.array([0, 1])))
    assert (flat.input_shape, flat.data_kind) == ((3,), "flat")  # (d,) rows as given: no channel axis added


def test_train_examples_keeps_a_prefix_of_a_source_without_reading_it():
    x = np.zeros((30, 3, 1), np.float32)
    s = describe("toy", Recording(x, np.arange(30) % 2), ArraySource(x[:5], np.arange(5) % 2))
    cut = with_train_examples(s, 12)
    assert cut.num_train == 12 and s.train.calls == []
    with pytest.raises(IndexError):
        cut.train[np.array([12])]


def test_cifar10_converts_to_a_memmap_that_reads_the_same_pixels(tmp_path):
    write_cifar_fixture(tmp_path / "cifar")
    out = memmap.convert_cifar10(tmp_path / "cifar", tmp_path / "mm")
    meta = memmap.read_meta(out)
    assert meta["splits"] == {"train": 10, "test": 3} and meta["num_classes"] == 10 and meta["class_names"][0] == "airplane"
    assert meta["mean"] == list(MEAN) and meta["std"] == list(STD)  # CIFAR-10's published constants
    assert np.load(out / "train_x.npy", mmap_mode="r").dtype == np.uint8  # stored as pixels: a quarter of float32
    ds, sources = load_cifar10(tmp_path / "cifar"), load_dataset("memmap", path=out)
    assert (sources.num_train, sources.input_shape, sources.num_classes) == (10, (32, 32, 3), 10)
    idx = np.array([9, 0, 4])
    x, y = read_rows(sources.train, idx)
    np.testing.assert_allclose(x, ds.x_train[idx], rtol=1e-5, atol=1e-5)
    assert y.tolist() == ds.y_train[idx].tolist()
    x, y = read_rows(sources.test, np.arange(3))
    np.testing.assert_allclose(x, ds.x_test, rtol=1e-5, atol=1e-5)
    with pytest.raises(UsageError, match="not an empty folder"):  # never overwritten
        memmap.convert_cifar10(tmp_path / "cifar", out)


def _image_folder(root):
    from PIL import Image

    rng = np.random.default_rng(0)
    written = {}
    for split, count in (("train", 3), ("val", 1)):
        for name in ("cat", "dog"):
            (root / split / name).mkdir(parents=True)
            for i in range(count):
                pixels = rng.integers(0, 256, (6 + i, 10, 3), dtype=np.uint8)  # 6x10 and larger: resized, cropped
                Image.fromarray(pixels).save(root / split / name / f"{i}.png")
                written[(split, name, i)] = pixels
    (root / "train" / "cat" / "notes.txt").write_text("not an image")
    return written


def test_an_image_folder_converts_with_classes_in_name_order_and_square_crops(tmp_path):
    written = _image_folder(tmp_path / "images")
    out = memmap.convert_image_folder(tmp_path / "images", tmp_path / "mm", image_size=4)
    meta = memmap.read_meta(out)
    assert meta["class_names"] == ["cat", "dog"] and meta["splits"] == {"train": 6, "test": 2}
    assert meta["input_shape"] == [4, 4, 3] and meta["mean"] == list(memmap.IMAGENET_MEAN)
    y = np.load(out / "train_y.npy")
    assert y.tolist() == [0, 0, 0, 1, 1, 1]  # cat/0..2.png, then dog; notes.txt skipped
    from PIL import Image

    expected = memmap._square(Image.fromarray(written[("train", "dog", 0)]), 4)
    np.testing.assert_array_equal(np.load(out / "train_x.npy")[3], expected)
    x, _ = read_rows(load_dataset("memmap", path=out).train, np.array([3]))
    np.testing.assert_allclose(x[0], (expected / 255 - np.array(memmap.IMAGENET_MEAN)) / np.array(memmap.IMAGENET_STD),
                               rtol=1e-5, atol=1e-5)


def test_convert_command_writes_a_folder_and_refuses_bad_input_in_one_line(tmp_path, capsys):
    _image_folder(tmp_path / "images")
    code, out, err = run_cli(capsys, "convert", "--from", "image-folder", str(tmp_path / "images"), "--out",
                             str(tmp_path / "mm"), "--image-size", "5", "--channels", "1", "--json")
    assert code == 0, err
    assert json.loads(out)["input_shape"] == [5, 5, 1] and (tmp_path / "mm" / "meta.json").is_file()
    for argv, message in ((["--from", "image-folder", str(tmp_path / "nothing"), "--out", str(tmp_path / "m2")],
                           "has no train/ folder"),
                          (["--from", "image-folder", str(tmp_path / "images"), "--out", str(tmp_path / "mm")],
                           "not an empty folder"),
                          (["--from", "cifar10", str(tmp_path / "images"), "--out", str(tmp_path / "m3")],
                           "CIFAR-10 file missing")):
        code, out, err = run_cli(capsys, "convert", *argv)
        assert code == 2 and len(err.strip().splitlines()) == 1 and message in err, (argv, err)
    assert not (tmp_path / "m2").exists() and not (tmp_path / "m3").exists()


def test_a_broken_memmap_folder_is_refused_before_training(tmp_path):
    write_cifar_fixture(tmp_path / "cifar")
    out = memmap.convert_cifar10(tmp_path / "cifar", tmp_path / "mm")
    meta = json.loads((out / "meta.json").read_text())
    meta["splits"]["train"] = 11
    (out / "meta.json").write_text(json.dumps(meta))
    from tanplan.config import load_config
    from tanplan.workflow.inputs import check_inputs

    with pytest.raises(UsageError, match="shape \\(10, 32, 32, 3\\) where meta.json says \\(11, 32, 32, 3\\)"):
        check_inputs(load_config(None, ["data.dataset=memmap", f'data.path="{out}"', "model.name=cnn2d"]))


def test_a_memmap_folder_trains_through_the_loop(tmp_path):
    from tanplan.config import load_config
    from tanplan.engine.loop import train_and_evaluate

    write_cifar_fixture(tmp_path / "cifar")
    out = memmap.convert_cifar10(tmp_path / "cifar", tmp_path / "mm")
    cfg = load_config(None, ["data.dataset=memmap", f'data.path="{out}"', "model.name=mlp", "model.width=4",
                             "model.depth=1", "train.batch_size=4", "train.steps=2", "train.eval_every=2",
                             "privacy.sigma=1.0", "privacy.epsilon=1000", "train.grad_method=vmap",
                             "tuning.data=private"])
    summary = train_and_evaluate(job_of(cfg), tmp_path / "run", progress=False)
    assert summary.steps == 2 and summary.dataset_size == 10 and summary.test_accuracy is not None
    card = json.loads((tmp_path / "run" / "model" / "model.json").read_text())
    assert card["input_shape"] == [32, 32, 3] and card["num_classes"] == 10


def test_a_failed_conversion_into_an_empty_folder_leaves_that_folder(tmp_path, capsys):
    """--out may be an existing empty folder: a conversion that fails part-way (a broken test image, met after
    the training images were written) leaves it as it was, empty, and nothing beside it; one that succeeds fills it."""
    _image_folder(tmp_path / "images")
    (tmp_path / "images" / "val" / "dog" / "0.png").write_bytes(b"not a png")
    (tmp_path / "out").mkdir()
    code, _, err = run_cli(capsys, "convert", "--from", "image-folder", str(tmp_path / "images"), "--out",
                           str(tmp_path / "out"), "--image-size", "4")
    assert code == 2 and len(err.strip().splitlines()) == 1 and "cannot read image" in err, err
    assert (tmp_path / "out").is_dir() and not any((tmp_path / "out").iterdir())
    assert sorted(p.name for p in tmp_path.iterdir()) == ["images", "out"]
    (tmp_path / "images" / "val" / "dog" / "0.png").unlink()
    code, _, err = run_cli(capsys, "convert", "--from", "image-folder", str(tmp_path / "images"), "--out",
                           str(tmp_path / "out"), "--image-size", "4")
    assert code == 0, err
    assert memmap.read_meta(tmp_path / "out")["splits"] == {"train": 6, "test": 1}
