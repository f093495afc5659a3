"""The per-layer route on every layer kind beside Dense and Conv on single positions: Dense over token
sequences (Gram norms and formed per-example gradients), attention projections (DenseGeneral), LayerNorm
and GroupNorm, Embed, weight-standardised convolutions, and parameters a module owns beside its
sub-layers. For each: the per-example norms equal those of each example's own gradient (1e-5 relative),
the clipped sum equals jax-privacy's vmapped clipping, and removing one example moves it by at most C."""

import functools

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from dp_helpers import LENGTH, ROWS, leave_one_out_moves, make_rows, row_keys, tree_max_diff, tree_norm

from tanplan.dp import augmult, clipping, ghost
from tanplan.models.layers import WSConv

CLIP = 0.5


class Tokens(nn.Module):
    """Dense layers over (n, T, d) sequences: the first forms per-example gradients, the second takes Gram
    norms (tanplan.dp.ghost_layers.gram_cheaper)."""

    @nn.compact
    def __call__(self, x):
        h = nn.gelu(nn.Dense(16)(x.reshape(x.shape[0], 4, 2)))  # T (D + O) = 72 > D·O = 32: formed
        h = nn.gelu(nn.Dense(32)(h.reshape(x.shape[0], 2, 32)))  # 2·64 = 128 < 1024: Gram norms
        return nn.Dense(3)(h.mean(axis=1))


class Attention(nn.Module):
    """Pre-LayerNorm self-attention (DenseGeneral query/key/value/out projections) on 4 tokens."""

    @nn.compact
    def __call__(self, x):
        h = nn.Dense(8)(x.reshape(x.shape[0], 4, 2))
        h = h + nn.MultiHeadDotProductAttention(num_heads=2, deterministic=True)(nn.LayerNorm()(h))
        return nn.Dense(3)(nn.LayerNorm()(h)[:, 0])


class Embedding(nn.Module):
    """Embed of ids with repeats within an example (the Gram's equality mask matters), then GroupNorm."""

    @nn.compact
    def __call__(self, x):
        ids = jnp.clip(jnp.floor(2 * x[..., 0]) + 3, 0, 5).astype(jnp.int32)  # (n, 8) ids in 0..5
        h = nn.Embed(6, 4)(ids)
        return nn.Dense(3)(nn.GroupNorm(num_groups=2)(h).mean(axis=1))


class WSConvs(nn.Module):
    """NF-ResNet's weight-standardised convolutions, stride 1 and 2, with and without bias."""

    @nn.compact
    def __call__(self, x):
        h = x.reshape(x.shape[0], 4, 2, 1)
        h = nn.relu(WSConv(4, (3, 3))(h))
        h = WSConv(4, (3, 3), (2, 2), use_bias=False)(h)
        return nn.Dense(3)(h.mean(axis=(1, 2)))


class GainBlock(nn.Module):
    """Parameters owned beside sub-layers (NF-ResNet's skip gain, a LayerScale) acting on their outputs."""

    @nn.compact
    def __call__(self, x):
        out = nn.Dense(8)(nn.relu(nn.Dense(8)(x)))
        gain = self.param("skip_gain", nn.initializers.ones, ())
        scale = self.param("scale", nn.initializers.constant(0.5), (8,))
        return x + gain * scale * out


class Owners(nn.Module):
    @nn.compact
    def __call__(self, x):
        h = GainBlock()(GainBlock()(nn.Dense(8)(x.reshape(x.shape[0], -1))))
        return nn.Dense(3)(h)


MODELS = {"tokens": Tokens, "attention": Attention, "embedding": Embedding, "wsconv": WSConvs, "owners": Owners}


def _host_params(module, seed=1):
    """module.init's shapes (traced; compiling init cost ~0.4 CPU-s a model), values drawn on the host:
    kernels of variance 1 / fan-in, scales and gains near 1, biases near 0. The tests below assert that
    clipping binds with them."""
    rng = np.random.default_rng(seed)

    def fill(path, s):
        if len(s.shape) >= 2:
            return (rng.standard_normal(s.shape) / np.sqrt(np.prod(s.shape[:-1]))).astype(s.dtype)
        near = 1.0 if any(w in str(path[-1]) for w in ("scale", "gain")) else 0.0
        return (near + 0.1 * rng.standard_normal(s.shape)).astype(s.dtype)

    shapes = jax.eval_shape(module.init, jax.random.key(seed), jnp.zeros((1, LENGTH, 1)))["params"]
    return jax.tree_util.tree_map_with_path(fill, shapes)


@functools.lru_cache(maxsize=None)
def _model(kind):
    module = MODELS[kind]()
    params = _host_params(module)
    logits_fn = lambda p, x: module.apply({"params": p}, x)  # noqa: E731
    fns = (jax.jit(ghost.ghost_clipped_grad_sum(logits_fn, CLIP, return_norms=True)),
           jax.jit(clipping.clipped_grad_sum(logits_fn, CLIP)))
    loss = augmult.example_loss_fn(logits_fn, None, 1)
    return logits_fn, params, fns, jax.jit(jax.grad(lambda p, xi, yi, ki: loss(p, xi, yi, ki)[0]))


@pytest.mark.parametrize("kind", sorted(MODELS))
def test_per_layer_norms_and_sums_equal_per_example_gradients(kind):
    logits_fn, params, (ghost_fn, vmap_fn), example_grad = _model(kind)
    # The structure is accepted; the check's numeric half (norms against jax.grad) is what this test does
    # itself below, at 1e-5 and on 8 rows: running it twice would compile the route twice.
    assert ghost.unsupported_reason(logits_fn, params, make_rows(2)[0], numeric=False) is None
    x, y = make_rows(ROWS, seed=3, scale=3.0)
    mask = np.arange(ROWS) != 2
    grads, losses, _, norms = ghost_fn(params, x, y, row_keys(), mask)
    direct = [example_grad(params, x[i], y[i], row_keys()[i]) for i in range(ROWS)]
    expected = np.array([tree_norm(g) for g in direct])
    np.testing.assert_allclose(np.asarray(norms)[mask], expected[mask], rtol=1e-5)
    assert expected[mask].max() > CLIP  # clipping binds for some rows
    reference, ref_losses, _ = vmap_fn(params, x, y, row_keys(), mask)
    assert tree_max_diff(grads, reference) < 1e-5 * max(1.0, tree_norm(reference))
    np.testing.assert_allclose(losses, ref_losses, rtol=1e-5)


@pytest.mark.parametrize("kind", sorted(MODELS))
def test_removing_one_example_moves_the_clipped_sum_by_at_most_c(kind):
    _, params, (ghost_fn, _), _ = _model(kind)
    moved = leave_one_out_moves(ghost_fn, params, *make_rows(ROWS, seed=1, scale=5.0))
    assert max(moved) <= CLIP * (1 + 1e-5)
    assert max(moved) >= 0.99 * CLIP  # the bound is attained: clipping binds


class FeedsChild(nn.Module):
    """An own parameter scaling a sub-layer's INPUT: replaying the sub-layer from its recorded output
    would miss that gradient path, so the route must refuse the module."""

    @nn.compact
    def __call__(self, x):
        scale = self.param("scale", nn.initializers.ones, ())
        return nn.Dense(3)(scale * x.reshape(x.shape[0], -1))


class RootTokens(nn.Module):
    """Position embeddings as a parameter of the model itself (not a layer): they feed every block."""

    @nn.compact
    def __call__(self, x):
        h = nn.Dense(4)(x.reshape(x.shape[0], 4, 2))
        h = h + self.param("pos", nn.initializers.normal(0.02), (1, 4, 4))
        return nn.Dense(3)(nn.LayerNorm()(h).mean(axis=1))


@pytest.mark.parametrize("module, child", [(FeedsChild(), "Dense_0"), (RootTokens(), "LayerNorm_0")])
def test_own_parameters_that_feed_a_sub_layer_are_refused_and_named(module, child):
    params = jax.eval_shape(module.init, jax.random.key(0), jnp.zeros((1, LENGTH, 1)))["params"]  # shapes suffice
    reason = ghost.unsupported_reason(lambda p, x: module.apply({"params": p}, x), params, make_rows(2)[0])
    assert reason is not None and reason.endswith(f"feeds its own parameters into its sub-layer {child}")


def test_gain_parameters_frozen_leave_their_block_to_its_sub_layers():
    # frozen own parameters (tanplan.dp.partition): only the sub-layers train, each by its own route
    logits_fn, params, _, example_grad = _model("owners")
    trainable = jax.tree.map(lambda v: v, dict(params))
    frozen = {k: {n: v for n, v in trainable[k].items() if n not in ("skip_gain", "scale")} for k in ("GainBlock_0",)}
    trainable["GainBlock_0"] = frozen["GainBlock_0"]
    merged = lambda p, x: logits_fn({**p, "GainBlock_0": {**params["GainBlock_0"], **p["GainBlock_0"]}}, x)  # noqa: E731
    x, y = make_rows(ROWS, seed=5, scale=2.0)
    grads, _, _, norms = jax.jit(ghost.ghost_clipped_grad_sum(merged, CLIP, return_norms=True))(
        trainable, x, y, row_keys(), np.ones(ROWS, bool))
    assert "skip_gain" not in grads["GainBlock_0"]
    loss = augmult.example_loss_fn(merged, None, 1)
    grad = jax.jit(jax.grad(lambda p, xi, yi, ki: loss(p, xi, yi, ki)[0]))
    expected = [tree_norm(grad(trainable, x[i], y[i], row_keys()[i])) for i in range(ROWS)]
    np.testing.assert_allclose(norms, expected, rtol=1e-5)


@pytest.mark.parametrize("kind", ["wsconv", "tokens"])
def test_gram_norms_where_per_example_gradients_do_not_fit(monkeypatch, kind):
    # With no memory for per-example gradients every layer takes Gram norms (WSConv's chained through its
    # weight standardisation): the same norms and the same clipped sum.
    monkeypatch.setattr(ghost, "MAX_PER_EXAMPLE_BYTES", 0)
    logits_fn, params, (_, vmap_fn), example_grad = _model(kind)
    x, y = make_rows(ROWS, seed=7, scale=3.0)
    mask = np.arange(ROWS) < 7
    grads, _, _, norms = jax.jit(ghost.ghost_clipped_grad_sum(logits_fn, CLIP, return_norms=True))(
        params, x, y, row_keys(), mask)
    expected = [tree_norm(example_grad(params, x[i], y[i], row_keys()[i])) for i in range(ROWS)]
    np.testing.assert_allclose(np.asarray(norms)[mask], np.asarray(expected)[mask], rtol=1e-5)
    reference = vmap_fn(params, x, y, row_keys(), mask)[0]
    assert tree_max_diff(grads, reference) < 1e-5 * max(1.0, tree_norm(reference))
