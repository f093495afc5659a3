"""Clipped sums: sensitivity C under add/remove-one, padding rows contribute nothing, the per-layer-norm
route equals jax-privacy's vmapped per-example clipping, and the route refuses models it cannot handle."""

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from dp_helpers import LENGTH, ROWS, example_grads, grad_sum, make_rows, make_tiny, row_keys, tree_max_diff, tree_norm

from tanplan.dp import clipping, ghost

CLIP = 0.7


def _sum(route, kind, x, y, mask, k=1):
    _, params = make_tiny(kind)
    out = grad_sum(route, kind, CLIP, k)(params, x, y, row_keys(), mask)
    return out[0], out[1]


def test_jax_privacy_certifies_sensitivity_c_for_add_remove():
    # Our accountant composes Poisson-subsampled Gaussians under ADD_OR_REMOVE_ONE: sensitivity C.
    import dp_accounting
    from jax_privacy import clipping as jp_clipping

    assert clipping.add_remove_sensitivity(2.5) == 2.5
    fn = jp_clipping.clipped_grad(lambda p, x: p * x, l2_clip_norm=2.5)
    assert fn.sensitivity(dp_accounting.NeighboringRelation.REPLACE_ONE) == 5.0  # what we do NOT assume


@pytest.mark.parametrize("route, kind", [("vmap", "cnn"), ("ghost", "cnn"),
                                         pytest.param("ghost", "mlp", marks=pytest.mark.slow)])
def test_adding_or_removing_one_example_moves_the_sum_by_at_most_c(route, kind):
    x, y = make_rows(ROWS, seed=1, scale=5.0)  # large inputs: most gradients exceed C
    full = np.ones(ROWS, bool)
    g_all, _ = _sum(route, kind, x, y, full)
    moved = []
    for j in range(ROWS):
        without = full.copy()
        without[j] = False
        moved.append(tree_norm(jax.tree.map(np.subtract, g_all, _sum(route, kind, x, y, without)[0])))
    assert max(moved) <= CLIP * (1 + 1e-5)
    assert max(moved) >= 0.99 * CLIP  # clipping binds: the bound is attained, not vacuous


@pytest.mark.parametrize("route", ["vmap", "ghost", "plain"])
def test_padding_rows_change_nothing(route):
    x, y = make_rows(ROWS, seed=2)
    mask = np.arange(ROWS) < 5
    x_zero, y_zero = x.copy(), y.copy()
    x_zero[~mask], y_zero[~mask] = 0, 0
    x_junk, y_junk = x.copy(), y.copy()
    x_junk[5], x_junk[6], x_junk[7] = 1e4, np.nan, np.inf
    y_junk[~mask] = 2
    reference, _ = _sum(route, "cnn", x_zero, y_zero, mask)
    assert all(np.isfinite(leaf).all() for leaf in jax.tree.leaves(reference))
    for xb, yb in [(x_junk, y_junk), (x, y)] if route != "plain" else [(x, y)]:
        assert tree_max_diff(_sum(route, "cnn", xb, yb, mask)[0], reference) == 0.0


@pytest.mark.parametrize("kind, k", [("cnn", 1), pytest.param("mlp", 1, marks=pytest.mark.slow),
                                     pytest.param("cnn", 3, marks=pytest.mark.slow)])
def test_ghost_route_equals_jax_privacy_clipping(kind, k):
    x, y = make_rows(ROWS, seed=3, scale=3.0)
    mask = np.arange(ROWS) != 2
    a, la = _sum("vmap", kind, x, y, mask, k)
    b, lb = _sum("ghost", kind, x, y, mask, k)
    assert tree_max_diff(a, b) < 1e-5
    np.testing.assert_allclose(la, lb, rtol=1e-5)


@pytest.mark.parametrize("k", [1, pytest.param(3, marks=pytest.mark.slow)])
def test_clipped_sum_is_the_sum_of_clipped_example_gradients(k):
    # The definition, from each example's own gradient: mean over its K views, then clip, then sum.
    x, y = make_rows(ROWS, seed=4, scale=2.0)
    mask = np.arange(ROWS) < 6
    direct = [jax.tree.map(np.asarray, g) for g in example_grads("cnn", x, y, row_keys(), k)]  # summed on the host
    expected = jax.tree.map(
        lambda *g: sum(gi * min(1.0, CLIP / tree_norm(d)) for gi, d, m in zip(g, direct, mask) if m), *direct)
    got, _ = _sum("ghost", "cnn", x, y, mask, k)
    assert tree_max_diff(got, expected) < 1e-5
    _, params = make_tiny("cnn")
    norms = grad_sum("ghost", "cnn", CLIP, k)(params, x, y, row_keys(), mask)[3]
    # norms of the real rows (padding rows get 0: they are outside the loss)
    np.testing.assert_allclose(np.asarray(norms)[mask], [tree_norm(g) for g, m in zip(direct, mask) if m], rtol=1e-5)


def test_nonprivate_sums_agree():
    x, y = make_rows(ROWS, seed=6)
    mask = np.arange(ROWS) != 3
    direct = [jax.tree.map(np.asarray, g) for g in example_grads("cnn", x, y, row_keys())]  # summed on the host
    expected = jax.tree.map(lambda *g: sum(gi for gi, m in zip(g, mask) if m), *direct)
    _, params = make_tiny("cnn")
    unclipped = jax.jit(ghost.ghost_clipped_grad_sum(make_tiny("cnn")[0], None))
    assert tree_max_diff(_sum("plain", "cnn", x, y, mask)[0], expected) < 1e-5
    assert tree_max_diff(unclipped(params, x, y, row_keys(), mask)[0], expected) < 1e-5


def test_ghost_support_check_accepts_the_tiny_model():
    logits_fn, params = make_tiny("cnn")
    assert ghost.unsupported_reason(logits_fn, params, make_rows(2)[0]) is None


def test_ghost_self_check_runs_at_full_precision_whatever_the_default(monkeypatch):
    """On a GPU JAX's default matmuls are TF32 (~1e-3 relative error), which would fail the rtol 1e-3 check
    and silently pick the vmap route: both sides of the check run at "highest" precision instead. A
    reference gradient that is TF32-coarse unless computed at highest precision stands in for the GPU."""
    logits_fn, params = make_tiny("cnn")
    real = ghost.per_example_grads

    def tf32_unless_highest(*args, **kwargs):
        grads = real(*args, **kwargs)
        if str(jax.config.jax_default_matmul_precision).lower() != "highest":
            grads = [jax.tree.map(lambda g: g * (1 + 3e-3), gi) for gi in grads]  # TF32's 10-bit mantissa
        return grads

    monkeypatch.setattr(ghost, "per_example_grads", tf32_unless_highest)
    with jax.default_matmul_precision("tensorfloat32"):
        assert ghost.unsupported_reason(logits_fn, params, make_rows(2)[0]) is None


class LooseParam(nn.Module):
    """A parameter used outside any layer: the per-layer route cannot see its per-example gradient."""

    @nn.compact
    def __call__(self, x):
        bias = self.param("offset", nn.initializers.zeros, (LENGTH, 1))
        return nn.Dense(3)((x + bias).reshape(x.shape[0], -1))


class MixesRows(nn.Module):
    """Subtracts the batch mean (what BatchNorm does): examples are no longer independent."""

    @nn.compact
    def __call__(self, x):
        h = nn.Dense(4)(x.reshape(x.shape[0], -1))
        return nn.Dense(3)(h - h.mean(axis=0, keepdims=True))


class SharedLayer(nn.Module):
    @nn.compact
    def __call__(self, x):
        layer = nn.Dense(LENGTH)
        return nn.Dense(3)(layer(layer(x.reshape(x.shape[0], -1))))


@pytest.mark.parametrize("module, words", [(LooseParam(), "feeds its own parameters"), (MixesRows(), "differ"),
                                           (SharedLayer(), "more than one")])
def test_ghost_support_check_refuses_what_it_cannot_clip(module, words):
    # shapes traced, values drawn on the host (no compile): the numeric check needs rows that are not all alike
    shapes = jax.eval_shape(module.init, jax.random.key(0), jnp.zeros((1, LENGTH, 1)))["params"]
    rng = np.random.default_rng(0)
    params = jax.tree.map(lambda s: (rng.standard_normal(s.shape) / np.sqrt(s.shape[0])).astype(s.dtype), shapes)
    reason = ghost.unsupported_reason(lambda p, x: module.apply({"params": p}, x), params, make_rows(2)[0])
    assert reason is not None and words in reason


def test_gram_norms_when_per_example_gradients_are_not_formed(monkeypatch):
    # Above MAX_PER_EXAMPLE_BYTES the route takes norms from Gram matrices instead: same norms, same sum.
    monkeypatch.setattr(ghost, "MAX_PER_EXAMPLE_BYTES", 0)
    logits_fn, params = make_tiny("cnn")
    x, y = make_rows(ROWS, seed=9, scale=2.0)
    mask = np.arange(ROWS) < 7
    grads, _, _, norms = jax.jit(ghost.ghost_clipped_grad_sum(logits_fn, CLIP, return_norms=True))(
        params, x, y, row_keys(), mask)
    direct = example_grads("cnn", x, y, row_keys())
    np.testing.assert_allclose(np.asarray(norms)[mask], [tree_norm(g) for g, m in zip(direct, mask) if m], rtol=1e-5)
    assert tree_max_diff(grads, _sum("vmap", "cnn", x, y, mask)[0]) < 1e-5
