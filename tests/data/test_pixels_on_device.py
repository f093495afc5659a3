"""uint8 pixels to the device, normalised there (tanplan.data.pixels, tanplan.engine.batches.device_inputs): a
memmap of uint8 images hands the step reader its rows as stored (a quarter of float32's bytes through the
host batch and the transfer), and the jitted step normalises them with the same arithmetic as the host path:
the same inputs within float rounding, and the same trained parameters as a float32 memmap of those inputs."""

import json

import jax
import numpy as np
import pytest
from helpers import saved_params

from tanplan.config import load_config
from tanplan.data import load_dataset
from tanplan.data.source import read_rows
from tanplan.dp import sampling, sharding
from tanplan.engine.batches import StepBatches, device_inputs
from tanplan.job import job_of

SHAPE = (6, 6, 3)
MEAN, STD = [0.49, 0.48, 0.45], [0.25, 0.24, 0.26]


def _write(folder, x_train, x_test, dtype, scale, mean, std, seed=0):
    folder.mkdir(parents=True)
    rng = np.random.default_rng(seed)
    for split, x in (("train", x_train), ("test", x_test)):
        np.save(folder / f"{split}_x.npy", x.astype(dtype))
        np.save(folder / f"{split}_y.npy", rng.integers(0, 3, len(x)).astype(np.int32))
    meta = {"format": "tanplan-memmap", "version": 1, "name": folder.name, "num_classes": 3, "class_names": [],
            "input_shape": list(SHAPE), "dtype": np.dtype(dtype).name, "scale": scale, "mean": mean, "std": std,
            "splits": {"train": len(x_train), "test": len(x_test)}}
    (folder / "meta.json").write_text(json.dumps(meta))
    return folder


def _pixels(n, seed):
    return np.random.default_rng(seed).integers(0, 256, (n, *SHAPE), dtype=np.uint8)


@pytest.fixture
def folders(tmp_path):
    """The same images twice: uint8 pixels with their constants, and float32 inputs normalised on the host
    (scale 1, mean 0, std 1: read back bit for bit)."""
    train, test = _pixels(64, 1), _pixels(16, 2)
    uint8 = _write(tmp_path / "uint8", train, test, np.uint8, 1 / 255, MEAN, STD)
    pixels = load_dataset("memmap", path=uint8).train.pixels
    floats = _write(tmp_path / "float", pixels.on_host(train), pixels.on_host(test), np.float32, 1.0, [0.0] * 3,
                    [1.0] * 3)
    return uint8, floats


def _batch(sources, t=0, q=0.4):
    n = sources.num_train
    draw = lambda step: sampling.poisson_batch(n, q, np.random.default_rng([5, step]))  # noqa: E731
    layout = sampling.batch_layout(n, q, 64)
    with StepBatches(sources.train, draw, sharding.data_mesh(), stop=1, num_classes=3, prefetch=False) as reader:
        return draw(t), layout, reader.take(t, layout)[1]


def test_uint8_rows_travel_as_uint8_and_the_device_normalises_them_as_the_host_does(folders):
    uint8, floats = (load_dataset("memmap", path=f) for f in folders)
    assert uint8.train.pixels is not None and floats.train.pixels is None  # float rows: as they are
    indices, layout, raw = _batch(uint8)
    _, _, host = _batch(floats)
    assert raw["x"].dtype == np.uint8 and host["x"].dtype == np.float32  # 4x fewer bytes to the device
    assert raw["x"].nbytes * 4 == host["x"].nbytes
    on_device = jax.jit(device_inputs(uint8.train))(raw)
    assert on_device["x"].dtype == np.float32
    assert device_inputs(floats.train)(host) is host  # float rows: nothing to do on the device
    index, mask = sampling.pad_indices(indices, layout)
    want_x, _ = read_rows(uint8.train, np.where(mask, index, 0).reshape(-1))  # the host path: source[indices]
    want_x = np.where(mask.reshape(-1)[:, None, None, None], want_x, 0).reshape(on_device["x"].shape)
    np.testing.assert_allclose(np.asarray(on_device["x"]), want_x, rtol=1e-6, atol=1e-6)
    np.testing.assert_array_equal(np.asarray(host["x"]), want_x)  # the float memmap's rows: bit for bit
    assert not np.asarray(on_device["x"])[~mask].any()  # padding rows stay zero (not -mean/std)
    for key in ("y", "mask", "index"):
        np.testing.assert_array_equal(np.asarray(raw[key]), np.asarray(host[key]))


def test_a_run_on_uint8_pixels_trains_the_parameters_of_a_run_on_their_float32_inputs(folders, tmp_path):
    from tanplan.engine.loop import train_and_evaluate

    params = []
    for folder in folders:
        cfg = load_config(None, ["data.dataset=memmap", f'data.path="{folder}"', "model.name=mlp", "model.width=4",
                                 "model.depth=1", "train.batch_size=16", "train.steps=3", "train.eval_every=3",
                                 "privacy.sigma=1.0", "privacy.epsilon=1000", "privacy.noise_seed=3",
                                 "train.learning_rate=0.5", "tuning.data=private",
                                 "train.grad_method=vmap"])  # the route is not what is compared: no route check
        summary = train_and_evaluate(job_of(cfg), tmp_path / folder.name, progress=False)
        assert summary.steps == 3
        params.append(saved_params(tmp_path / folder.name))
    for a, b in zip(*params, strict=True):  # same batches and noise (seeded); inputs equal within rounding
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)
