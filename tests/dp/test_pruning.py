"""Pre-pruning and gradient dropping: masked coordinates get neither gradient nor noise, sensitivity C."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from dp_helpers import make_rows, make_tiny, tree_norm

from tanplan.config import TrainConfig
from tanplan.dp import clipping, grad_drop, optim, pruning
from tanplan.dp import step as dp_step

C = 0.5

# The masks compiled whole: run eagerly, each op (a top-k per layer and kept count) compiles by itself.
random_mask = jax.jit(pruning.random_mask, static_argnums=2)


def _chunk(x, y, mask=None):
    mask = np.ones(len(x), bool) if mask is None else mask
    return jnp.asarray(x), jnp.asarray(y), jax.random.split(jax.random.key(0), len(x)), jnp.asarray(mask)


@functools.lru_cache(maxsize=None)
def _masked_clipped_sum(logits_fn):
    """The clipped sum of the model under a pruning mask given as an argument: one compile serves every mask."""
    return jax.jit(lambda params, mask, *chunk: clipping.clipped_grad_sum(pruning.masked_logits_fn(logits_fn, mask), C)(
        params, *chunk))


def _prunable_leaves(params, *trees):
    flat = [jax.tree.leaves(t) for t in (params, *trees)]
    return [tuple(np.asarray(leaf) for leaf in group) for group in zip(*flat) if pruning.is_prunable(group[0])]


def test_random_mask_keeps_exact_fraction_per_layer_and_never_masks_biases(tiny):
    _, params = tiny
    mask = random_mask(jax.random.key(1), params, 0.5)
    for p, m in zip(jax.tree.leaves(params), jax.tree.leaves(mask)):
        expected = pruning.kept_count(p.size, 0.5) if pruning.is_prunable(p) else p.size
        assert int(np.asarray(m).sum()) == expected
        assert set(np.unique(np.asarray(m))) <= {0.0, 1.0}


@pytest.mark.parametrize("method", ["synflow", "dp_snip"])
def test_synflow_and_dp_snip_masks_keep_the_asked_fraction(tiny, method):
    logits_fn, params = tiny
    x, y = make_rows(16, seed=3)
    if method == "synflow":
        mask = jax.jit(lambda p: pruning.synflow_mask(logits_fn, p, x[:1], 0.7, iterations=3))(params)
    else:
        batch = {"x": x[None], "y": y[None], "mask": np.ones((1, 16), bool), "index": np.arange(16)[None]}
        snip = jax.jit(lambda p, b, k: pruning.dp_snip_mask(logits_fn, p, b, k, 0.7, C, noise_std=2 * C))
        mask = snip(params, batch, jax.random.key(2))
    for p, m in zip(jax.tree.leaves(params), jax.tree.leaves(mask)):
        expected = pruning.kept_count(p.size, 0.7) if pruning.is_prunable(p) else p.size
        assert int(np.asarray(m).sum()) == expected


def test_mask_is_applied_before_clipping(tiny):
    """One row with a large gradient: the clipped sum is clip_C(m ⊙ g) (norm C, along m ⊙ g),
    not m ⊙ clip_C(g) (norm below C)."""
    logits_fn, params = tiny
    x, y = make_rows(8, seed=4, scale=30.0)
    one_row = _chunk(x, y, np.arange(8) == 0)  # the other 7 are padding: the chunk shape of the test below
    mask = random_mask(jax.random.key(5), params, 0.5)
    raw, _, _ = jax.jit(clipping.nonprivate_grad_sum(logits_fn))(params, *one_row)
    masked_raw = jax.tree.map(lambda g, m: np.asarray(g) * np.asarray(m), raw, mask)
    assert tree_norm(masked_raw) > C
    clipped, _, _ = _masked_clipped_sum(logits_fn)(params, mask, *one_row)
    assert tree_norm(clipped) == pytest.approx(C, rel=1e-4)
    expected = jax.tree.map(lambda g: g * C / tree_norm(masked_raw), masked_raw)
    for a, b in zip(jax.tree.leaves(clipped), jax.tree.leaves(expected)):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-3, atol=1e-6)


def test_masked_clipped_sum_keeps_sensitivity_c(tiny):
    """Adding or removing any one example moves the masked clipped sum by at most C (L2)."""
    assert clipping.add_remove_sensitivity(C) == pytest.approx(C)
    logits_fn, params = tiny
    x, y = make_rows(8, seed=6, scale=20.0)
    mask = random_mask(jax.random.key(7), params, 0.5)  # the fraction of the tests above: their compiled mask
    grad_sum = functools.partial(_masked_clipped_sum(logits_fn), params, mask)
    full, _, _ = grad_sum(*_chunk(x, y))
    for i in range(len(x)):
        without = np.ones(len(x), bool)
        without[i] = False
        other, _, _ = grad_sum(*_chunk(x, y, without))
        diff = jax.tree.map(np.subtract, full, other)
        assert tree_norm(diff) <= C * (1 + 1e-5)
        # and the difference lives on the kept coordinates only
        for d, m in zip(jax.tree.leaves(diff), jax.tree.leaves(mask)):
            assert not np.any(np.asarray(d)[np.asarray(m) == 0])


@pytest.mark.parametrize("drop_method", ["random", "magnitude"])
def test_masked_coordinates_get_neither_gradient_nor_noise_and_stay_unchanged(drop_method):
    """Large noise, momentum and weight decay: exactly the kept, not-dropped weights move each step;
    pruned weights stay 0 and dropped ones keep their value. (The CNN: dense and conv kernels.)"""
    logits_fn, params = make_tiny("cnn")
    prune = random_mask(jax.random.key(8), params, 0.5)
    params = jax.jit(pruning.apply_mask)(params, prune)  # one program (eagerly: two per leaf shape)
    cfg = TrainConfig(learning_rate=0.1, momentum=0.9, weight_decay=0.1, steps=3)
    optimizer = optim.make_optimizer(cfg)
    step = jax.jit(grad_drop.make_masked_train_step(
        lambda lf: clipping.clipped_grad_sum(lf, C), logits_fn, optimizer, noise_std=10 * C,
        expected_batch_size=8.0, prune_mask=prune, kept_counts=grad_drop.static_kept_counts(params, prune),
        drop_method=drop_method, drop_rate=0.5))
    x, y = make_rows(8, seed=9)
    batch = {"x": x[None], "y": y[None], "mask": np.ones((1, 8), bool), "index": np.arange(8)[None]}
    state = dp_step.create_train_state(params, optimizer)
    for t in range(3):  # from step 2 on the momentum buffer is non-zero on last step's coordinates
        new = step(state, batch, *jax.random.split(jax.random.key(100 + t), 3))  # noise, views, drop mask
        new_state = new[0]
        for p_old, p_new, m in _prunable_leaves(state.params, new_state.params, prune):
            moved = p_old != p_new
            assert not np.any(moved[m == 0]), "a pruned weight moved"
            assert not np.any(p_new[m == 0]), "a pruned weight is not 0"
            kept = int(m.sum())
            assert int(moved.sum()) == pruning.kept_count(kept, 0.5), "dropped weights moved (or kept ones did not)"
        state = new_state


def test_noise_reaches_every_kept_coordinate_and_no_masked_one(tiny):
    """The noisy sum after masking: zero gradient rows, so what remains is the noise itself."""
    logits_fn, params = tiny
    mask = random_mask(jax.random.key(10), params, 0.5)
    grad_sum = clipping.clipped_grad_sum(pruning.masked_logits_fn(logits_fn, mask), C)
    noisy = jax.jit(dp_step.make_noisy_grad_sum(grad_sum, 3.0))
    x, y = make_rows(4, seed=11)
    batch = {"x": x[None], "y": y[None], "mask": np.zeros((1, 4), bool),  # all padding: sum is 0
             "index": np.arange(4)[None]}
    grads, _ = noisy(params, batch, *jax.random.split(jax.random.key(12)))
    out = jax.tree.map(lambda g, m: np.asarray(g) * np.asarray(m), grads, mask)
    for g, m in zip(jax.tree.leaves(out), jax.tree.leaves(mask)):
        g, m = np.asarray(g), np.asarray(m)
        assert np.all(g[m == 0] == 0) and np.all(g[m == 1] != 0)
    kept = np.concatenate([np.asarray(g)[np.asarray(m) == 1] for g, m in zip(jax.tree.leaves(out), jax.tree.leaves(mask))])
    assert np.std(kept) == pytest.approx(3.0, rel=0.25)
