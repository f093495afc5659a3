"""Features of a released model (tanplan.baselines.released): the inputs of its head, on the private split
as given, standardised with public statistics only."""

from __future__ import annotations

import jax
import numpy as np
import pytest

from tanplan.baselines import released
from tanplan.data.dataset import Dataset
from tanplan.engine.release import write_model
from tanplan.errors import UsageError
from tanplan.models import create_model

SHAPE = (40, 1)


@pytest.fixture(scope="module")
def model_folder(tmp_path_factory):
    """A tiny cnn1d (width 4, depth 2: 4 features) released as a run writes it, with random weights."""
    model = create_model("cnn1d", 3, width=4, depth=2, input_shape=SHAPE)
    params = model.init(jax.random.key(3), np.zeros((1, *SHAPE), np.float32))["params"]
    out = tmp_path_factory.mktemp("released")
    write_model(out, params, {"model": "cnn1d", "width": 4, "depth": 2, "norm_order": "conv_gn_relu", "options": {},
                              "num_classes": 3, "input_shape": list(SHAPE)})
    return out


def signals(n: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).normal(size=(n, *SHAPE)).astype(np.float32)


def private_set(seed: int = 0) -> Dataset:
    rng = np.random.default_rng(seed + 100)
    return Dataset("tiny", signals(7, seed), rng.integers(0, 3, 7).astype(np.int32), signals(5, seed + 1),
                   np.array([0, 1, 2, 0, 1], np.int32), 3)


def test_head_inputs_are_the_activations_before_the_last_dense(model_folder):
    run = released.load_run(model_folder)
    x = signals(6, 9)
    feats = released.head_inputs(run, x, batch=4)  # two batches, the second padded
    # Independently: cnn1d's last block output (NormAct_1), averaged over the length, is what Dense_0 receives.
    _, state = run.model.apply({"params": run.params}, x, capture_intermediates=True, mutable=["intermediates"])
    block = np.asarray(state["intermediates"]["NormAct_1"]["__call__"][0])
    np.testing.assert_allclose(feats, block.mean(axis=1), rtol=1e-5, atol=1e-6)
    dense = run.params["Dense_0"]
    np.testing.assert_allclose(feats @ np.asarray(dense["kernel"]) + np.asarray(dense["bias"]),
                               np.asarray(run.predict(x)), rtol=1e-4, atol=1e-5)
    assert feats.shape == (6, 4) and feats.dtype == np.float64


def test_private_split_kept_and_standardised_with_public_statistics_only(model_folder):
    run = released.load_run(model_folder)
    public_x, private = signals(30, 5), private_set()
    fs, pool = released.released_features(model_folder, private, public_x)
    raw_public = released.head_inputs(run, public_x)
    mean, std = raw_public.mean(0), raw_public.std(0)
    np.testing.assert_allclose(pool, (raw_public - mean) / std, rtol=1e-6, atol=1e-9)
    # Row i of each split is example i of the private split as given: the heads are scored on its test split.
    np.testing.assert_allclose(fs.x_test, (released.head_inputs(run, private.x_test) - mean) / std, atol=1e-9)
    np.testing.assert_allclose(fs.x_train, (released.head_inputs(run, private.x_train) - mean) / std, atol=1e-9)
    np.testing.assert_array_equal(fs.y_train, private.y_train)
    np.testing.assert_array_equal(fs.y_test, private.y_test)
    # Other private training examples change no test feature: no statistic of the private set is used.
    other = private_set(seed=7)
    moved = Dataset("tiny", other.x_train, other.y_train, private.x_test, private.y_test, 3)
    fs_other, _ = released.released_features(model_folder, moved, public_x)
    np.testing.assert_array_equal(fs_other.x_test, fs.x_test)
    assert not np.allclose(fs_other.x_train, fs.x_train)


def test_a_head_that_is_not_called_once_is_refused(model_folder):
    run = released.load_run(model_folder)
    with pytest.raises(UsageError, match="'Dense_7' was called 0 times"):
        released.head_inputs(run, signals(2, 0), head="Dense_7")
    named = released.head_inputs(run, signals(2, 0), head="NormAct_0")  # any module: its inputs, flattened
    assert named.shape == (2, 40 * 4)
