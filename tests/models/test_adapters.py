"""Low-rank adapters (tanplan.models.adapters) on cnn1d: the adapted model starts as the base model (up-projections
zero), the merged release computes the adapted model's function in the base model's shapes (strided and
padded convolutions and the dense head), the init lays the pretrained weights on the base and leaves the
adapters at their fresh draw, and which parameters train is the adapters (plus what is named to train)."""

import functools

import jax
import numpy as np
import pytest

from tanplan.config import InitConfig, ModelConfig
from tanplan.errors import UsageError
from tanplan.models import create_model, freeze
from tanplan.models.adapters import adapt, is_adapter, merged
from tanplan.models.init import load_init
from tanplan.models.paths import flat_params

X = np.random.default_rng(0).normal(size=(3, 24, 1)).astype(np.float32)


@functools.lru_cache(maxsize=None)
def _models():
    base = create_model("cnn1d", 10, width=4, depth=3)
    model = adapt(base, ("Conv_*", "Dense_0"), 2)
    params = jax.jit(model.init)(jax.random.key(0), X[:1])["params"]
    return _Jitted(base), _Jitted(model), params


class _Jitted:
    """A model whose apply is compiled whole (eager flax compiles each op by itself)."""

    def __init__(self, model):
        self.init, self._apply = model.init, jax.jit(model.apply)

    def apply(self, variables, x):
        return self._apply(variables, x)


def test_the_adapted_model_starts_as_the_base_model():
    base, model, params = _models()
    plain = {k: v for k, v in flat_params(params).items() if not is_adapter(k)}
    assert {k.rsplit("/", 2)[0] for k in flat_params(params) if is_adapter(k)} == {"Conv_0", "Conv_1", "Conv_2",
                                                                                    "Dense_0"}
    assert params["Conv_1"]["lora_a"]["kernel"].shape == (3, 4, 2)  # the base's window, rank 2
    assert params["Conv_1"]["lora_b"]["kernel"].shape == (1, 2, 4)  # a 1x1 conv back to the base's channels
    np.testing.assert_array_equal(model.apply({"params": params}, X), base.apply({"params": merged(params)}, X))
    assert set(flat_params(merged(params))) == set(plain)


def test_the_merged_release_computes_the_adapted_function():
    base, model, params = _models()
    rng = np.random.default_rng(1)
    moved = jax.tree_util.tree_map_with_path(
        lambda p, v: v + rng.normal(size=v.shape).astype(np.float32) if "lora" in str(p) else v, params)
    adapted = np.asarray(model.apply({"params": moved}, X))
    released = np.asarray(base.apply({"params": merged(moved)}, X))
    assert np.abs(adapted - np.asarray(base.apply({"params": params}, X))).max() > 1e-2  # the adapters act
    np.testing.assert_allclose(released, adapted, rtol=1e-4, atol=1e-4)


def test_the_init_lays_the_base_and_keeps_the_adapters_fresh():
    base, _, params = _models()
    pretrained = flat_params(jax.jit(base.init)(jax.random.key(5), X[:1])["params"])
    got = load_init(InitConfig(path="p.npz"), "cnn1d", params, (pretrained, "p.npz"))
    flat = flat_params(got.params)
    assert all(np.array_equal(flat[k], pretrained[k]) for k in pretrained)
    assert all(np.array_equal(flat[k], v) for k, v in flat_params(params).items() if is_adapter(k))
    assert got.digest and got.reinitialised == ()


def test_only_the_adapters_and_what_is_named_train():
    _, _, params = _models()
    init = InitConfig(path="p.npz", adapters=("Conv_*",))
    trainable = freeze.trainable_paths(init, ModelConfig(name="cnn1d"), params)
    assert trainable == {k for k in flat_params(params) if is_adapter(k)}
    init = InitConfig(path="p.npz", adapters=("Conv_*",), trainable=("NormAct_*",), frozen=("NormAct_0",))
    named = freeze.trainable_paths(init, ModelConfig(name="cnn1d"), params) - trainable
    assert named == {"NormAct_1/GroupNorm_0/scale", "NormAct_1/GroupNorm_0/bias", "NormAct_2/GroupNorm_0/scale",
                     "NormAct_2/GroupNorm_0/bias"}
    with pytest.raises(UsageError, match="Dense_0 has an adapter and trains in full"):
        freeze.trainable_paths(InitConfig(path="p.npz", adapters=("Dense_0",)), ModelConfig(name="cnn1d"), params,
                               ("Dense_0/kernel", "Dense_0/bias"))


def test_a_pattern_naming_no_dense_or_conv_layer_is_refused():
    base = create_model("cnn1d", 10, width=4, depth=3)
    with pytest.raises(UsageError, match="'NormAct_0' names no Dense or Conv layer"):
        jax.eval_shape(lambda: adapt(base, ("Conv_*", "NormAct_0"), 2).init(jax.random.key(0), X[:1]))
