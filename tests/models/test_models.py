"""Models: shapes, parameter counts, no BatchNorm, and per-example independence of the logits.

Compilation dominates on a CPU, so each model is built small and probed by one jitted function.
"""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tanplan.errors import UsageError
from tanplan.models import available_models, count_params, create_model

NUM_CLASSES = 10

# name -> (options, input shape of a batch of 4): small widths and inputs keep each compile short.
SMALL = {
    "mlp": ({}, (4, 40, 1)),
    "cnn1d": ({}, (4, 40, 1)),
    "cnn2d": ({"width": 8}, (4, 12, 12, 1)),
    "wrn16_4": ({"width": 1, "depth": 10, "norm_order": "conv_relu_gn"}, (4, 8, 8, 3)),
    "resnet18_gn": ({"width": 8, "depth": 10}, (4, 8, 8, 3)),
    "nf_resnet": ({"width": 4, "depth": 10}, (4, 8, 8, 3)),
    "vit_tiny": ({"width": 32, "depth": 1}, (4, 8, 8, 3)),
}


def test_every_model_has_a_small_case():
    assert sorted(SMALL) == sorted(available_models())


def random_variables(model, x, seed=0):
    """Variables shaped as model.init makes them, filled on the host with random values of a sensible
    scale. Compiling the real initialisers costs seconds per model on a CPU; tracing them (eval_shape)
    costs little, and it still runs every init code path."""
    rng = np.random.default_rng(seed)

    def fill(path, s):
        name = str(path[-1])
        if len(s.shape) >= 2:  # kernels: variance 1 / fan-in
            return (rng.standard_normal(s.shape) / np.sqrt(np.prod(s.shape[:-1]))).astype(s.dtype)
        base = 1.0 if ("scale" in name or "gain" in name) else 0.0
        return (base + 0.1 * rng.standard_normal(s.shape)).astype(s.dtype)

    shapes = jax.eval_shape(model.init, jax.random.key(0), x)
    return jax.tree_util.tree_map_with_path(fill, shapes)


def _probe(name):
    """Variables, the module types used, and in one compiled program: the logits of two batches that
    share example 0 (the other rows differ), and the logits of each example of the first batch
    computed alone (vmap over single examples, as per-example gradients are computed)."""
    options, shape = SMALL[name]
    model = create_model(name, NUM_CLASSES, **options)
    rng = np.random.default_rng(1)  # numpy inputs: jax.random would compile a sampler per shape
    x = rng.standard_normal(shape, dtype=np.float32)
    others = 3.0 * rng.standard_normal((shape[0] - 1, *shape[1:]), dtype=np.float32) + 1.0
    batches = np.stack([x, np.concatenate([x[:1], others])])
    variables = random_variables(model, x[:1])
    seen = []

    def record(next_fun, args, kwargs, context):
        seen.append(type(context.module))
        return next_fun(*args, **kwargs)

    @jax.jit
    def run(variables, batches):
        with nn.intercept_methods(record):
            apply = lambda xb: model.apply(variables, xb)  # noqa: E731  pure: no mutable collections
            both = jax.vmap(apply)(batches)  # each batch normalised on its own, were there BatchNorm
            alone = jax.vmap(lambda xi: apply(xi[None])[0])(batches[0])
            return both[0], both[1], alone

    logits, logits_swapped, logits_alone = run(variables, batches)
    return variables, logits, logits_swapped, logits_alone, set(seen)


@pytest.fixture(scope="module", params=sorted(SMALL))
def probed(request):
    return request.param, _probe(request.param)


def test_shapes_and_finite_logits(probed):
    name, (variables, logits, _, _, _) = probed
    assert logits.shape == (SMALL[name][1][0], NUM_CLASSES)
    assert np.isfinite(np.asarray(logits)).all()
    assert count_params(variables["params"]) > 0


def test_no_batchnorm_and_no_mutable_collection(probed):
    name, (variables, _, _, _, modules) = probed
    assert set(variables) == {"params"}, f"{name} has collections {set(variables)}"
    assert not any(issubclass(m, nn.BatchNorm) for m in modules), name
    assert modules, "interception saw no module: the check would be vacuous"


def test_logits_of_an_example_ignore_the_rest_of_the_batch(probed):
    """The property per-example clipping relies on: example 0's logits are the same whatever the other
    rows hold, and every example's logits are the same as when it is alone."""
    name, (_, logits, logits_swapped, logits_alone, _) = probed
    np.testing.assert_allclose(np.asarray(logits_swapped[0]), np.asarray(logits[0]), rtol=1e-5, atol=1e-6,
                               err_msg=name)
    np.testing.assert_allclose(np.asarray(logits_alone), np.asarray(logits), rtol=1e-4, atol=1e-5,
                               err_msg=name)
    # Not vacuous: the other examples' logits did change.
    assert not np.allclose(np.asarray(logits_swapped[1:]), np.asarray(logits[1:]), atol=1e-6), name


def _count(name, shape, **options):
    model = create_model(name, NUM_CLASSES, **options)
    shapes = jax.eval_shape(model.init, jax.random.key(0), jnp.zeros(shape))
    return count_params(shapes["params"])


def test_mlp_parameter_count_follows_width_and_depth():
    width, depth, inputs = 7, 3, 40
    expected = (inputs + 1) * width + (depth - 1) * (width + 1) * width + (width + 1) * NUM_CLASSES
    assert _count("mlp", (1, inputs, 1), width=width, depth=depth) == expected


@pytest.mark.parametrize("name,shape,low,high", [
    ("cnn1d", (1, 40, 1), 10_000, 50_000),  # small enough for fast DP training on a CPU
    ("cnn2d", (1, 28, 28, 1), 350_000, 500_000),  # the 0.4M-parameter CNN of DESIGN.md
    ("wrn16_4", (1, 32, 32, 3), 2_700_000, 2_800_000),  # 2.7M in Zagoruyko & Komodakis (2016)
    ("resnet18_gn", (1, 32, 32, 3), 11_100_000, 11_300_000),  # ResNet-18, 11.2M
    ("nf_resnet", (1, 32, 32, 3), 23_000_000, 24_000_000),  # ResNet-50 body (25.6M with 1000 classes)
    ("vit_tiny", (1, 32, 32, 3), 5_000_000, 6_000_000),  # ViT-Ti, 5.7M at 224 px and 1000 classes
])
def test_default_sizes_match_the_published_architectures(name, shape, low, high):
    assert low <= _count(name, shape) <= high


def test_large_images_take_the_imagenet_stem():
    """A 7x7 stride-2 stem (more weights than the 3x3 one) above 64 px."""
    small = _count("resnet18_gn", (1, 32, 32, 3), width=8, depth=10)
    large = _count("resnet18_gn", (1, 96, 96, 3), width=8, depth=10)
    assert large - small == (7 * 7 - 3 * 3) * 3 * 8


def test_norm_order_changes_the_function_not_the_parameters():
    x = np.random.default_rng(2).standard_normal((2, 40, 1), dtype=np.float32)
    a = create_model("cnn1d", NUM_CLASSES, norm_order="conv_gn_relu")
    b = create_model("cnn1d", NUM_CLASSES, norm_order="conv_relu_gn")
    variables = random_variables(a, x)
    assert jax.tree.structure(variables) == jax.tree.structure(jax.eval_shape(b.init, jax.random.key(0), x))
    ya, yb = jax.jit(lambda v, x: (a.apply(v, x), b.apply(v, x)))(variables, x)
    assert not np.allclose(np.asarray(ya), np.asarray(yb), atol=1e-5)


@pytest.mark.parametrize("kwargs,words", [
    ({"name": "resnet50"}, ["resnet50", "wrn16_4", "vit_tiny"]),
    ({"name": "wrn16_4", "norm_order": "gn_first"}, ["gn_first", "conv_gn_relu", "conv_relu_gn"]),
    ({"name": "wrn16_4", "depth": 15}, ["15", "(depth - 4) % 6"]),
    ({"name": "resnet18_gn", "depth": 50}, ["50", "10, 18, 34"]),
    ({"name": "nf_resnet", "depth": 20}, ["20", "50"]),
    ({"name": "vit_tiny", "norm_order": "conv_relu_gn"}, ["vit_tiny", "wrn16_4"]),
    ({"name": "vit_tiny", "width": 129}, ["129", "heads"]),
    ({"name": "mlp", "width": -1}, ["model.width", "-1"]),
    ({"name": "cnn1d", "depth": 2.5}, ["model.depth", "2.5"]),
])
def test_bad_names_and_options_are_usage_errors(kwargs, words):
    name = kwargs.pop("name")
    with pytest.raises(UsageError) as err:
        create_model(name, NUM_CLASSES, **kwargs)
    message = str(err.value)
    assert "\n" not in message
    for word in words:
        assert word in message


def test_too_few_classes_is_a_usage_error():
    with pytest.raises(UsageError, match="num_classes"):
        create_model("mlp", 1)


def test_wrong_input_rank_is_a_usage_error():
    with pytest.raises(UsageError, match=r"cnn1d expects inputs \(batch, length, channels\)"):
        jax.eval_shape(create_model("cnn1d", NUM_CLASSES).init, jax.random.key(0), jnp.zeros((1, 8, 8, 3)))
    with pytest.raises(UsageError, match="wrn16_4 expects inputs"):
        jax.eval_shape(create_model("wrn16_4", NUM_CLASSES).init, jax.random.key(0), jnp.zeros((1, 40, 1)))
