"""Low-rank adapters (tanplan.models.adapters) on the per-layer route: with the base frozen, each example's
gradient norm over the adapters alone equals that of its own gradient (jax.grad) and the vmap route's
(1e-5 relative), the clipped sum equals the vmap route's, and adding or removing one example moves it by at
most C: sensitivity C over the adapters, as the accountant assumes."""

import functools

import jax
import numpy as np
import pytest
from dp_helpers import LENGTH, ROWS, TinyCNN, leave_one_out_moves, make_rows, row_keys, tree_max_diff, tree_norm

from tanplan.dp import augmult, clipping, ghost
from tanplan.dp.partition import Partition, grad_sum_over, logits_over
from tanplan.models.adapters import adapt, is_adapter
from tanplan.models.paths import flat_params

CLIP = 0.05  # below every example's adapter gradient norm at these inputs: clipping binds


@functools.lru_cache(maxsize=None)
def _adapted():
    """The tiny CNN (conv, GroupNorm, strided conv, dense) with rank-2 adapters on both convs and the dense
    layer; the adapters' up-projections moved off zero, so every adapter parameter has a gradient."""
    model = adapt(TinyCNN(), ("Conv_*", "Dense_0"), 2)
    params = jax.jit(model.init)(jax.random.key(0), np.zeros((1, LENGTH, 1), np.float32))["params"]
    params = jax.tree_util.tree_map_with_path(
        lambda p, v: v + 0.3 * jax.random.normal(jax.random.key(len(str(p))), v.shape) if "lora_b" in str(p) else v,
        params)
    part = Partition(frozenset(k for k in flat_params(params) if is_adapter(k)))
    return (lambda p, x: model.apply({"params": p}, x)), params, part


@functools.lru_cache(maxsize=None)
def _sum_fn(route):
    logits_fn, _, part = _adapted()
    make = ((lambda f: ghost.ghost_clipped_grad_sum(f, CLIP, return_norms=True)) if route == "ghost"
            else (lambda f: clipping.clipped_grad_sum(f, CLIP)))
    return jax.jit(grad_sum_over(part, make, logits_fn))


def _own_grads(x, y):
    """Each example's own gradient with respect to the adapters alone (jax.grad, one at a time)."""
    logits_fn, params, part = _adapted()
    fn, trainable = logits_over(part, logits_fn, params)
    loss = augmult.example_loss_fn(fn, None, 1)
    grad = jax.jit(jax.grad(lambda p, xi, yi, ki: loss(p, xi, yi, ki)[0]))
    keys = row_keys()
    return [grad(trainable, x[i], y[i], keys[i]) for i in range(len(x))]


def test_the_adapters_alone_train_and_the_per_layer_route_takes_them():
    logits_fn, params, part = _adapted()
    assert {k.split("/")[0] for k in part.trainable} == {"Conv_0", "Conv_1", "Dense_0"}
    assert all(k.endswith(("lora_a/kernel", "lora_b/kernel")) for k in part.trainable)
    x = np.zeros((2, LENGTH, 1), np.float32)
    assert ghost.unsupported_reason(*logits_over(part, logits_fn, params), x) is None  # norms checked there too


def test_per_example_norms_over_the_adapters_equal_their_own_gradients_and_the_vmap_route():
    _, params, part = _adapted()
    x, y = make_rows(ROWS, seed=1, scale=5.0)
    mask = np.ones(ROWS, bool)
    got, _, _, norms = _sum_fn("ghost")(params, x, y, row_keys(), mask)
    own = _own_grads(x, y)
    expected = np.array([tree_norm(g) for g in own])
    np.testing.assert_allclose(np.asarray(norms), expected, rtol=1e-5)
    assert expected.min() > CLIP  # every example is clipped: a wrong norm would move the sum
    assert set(flat_params(got)) == part.trainable  # no gradient for the frozen base
    via_vmap = _sum_fn("vmap")(params, x, y, row_keys(), mask)[0]
    assert tree_max_diff(got, via_vmap) <= 1e-5 * tree_norm(via_vmap)
    clipped = jax.tree.map(lambda *g: sum(gi * min(1.0, CLIP / n) for gi, n in zip(g, expected)), *own)
    assert tree_max_diff(got, clipped) <= 1e-5 * tree_norm(clipped)


@pytest.mark.parametrize("route", ["ghost", "vmap"])
def test_adding_or_removing_one_example_moves_the_adapter_sum_by_at_most_c(route):
    _, params, _ = _adapted()
    moved = leave_one_out_moves(_sum_fn(route), params, *make_rows(ROWS, seed=2, scale=5.0))
    assert max(moved) <= CLIP * (1 + 1e-5)
    assert max(moved) >= 0.99 * CLIP  # the bound is attained, not vacuous
