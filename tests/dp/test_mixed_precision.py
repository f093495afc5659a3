"""train.compute_dtype = "bfloat16": the model computes in bfloat16, the guarantee is kept in float32 —
adding one example moves the clipped sum by at most C, and the noise has std σC (tanplan.engine.precision)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from dp_helpers import ROWS, leave_one_out_moves, make_rows, make_tiny, row_keys

from tanplan.config import load_config
from tanplan.dp import clipping, ghost, step as dp_step
from tanplan.engine.precision import in_compute_dtype
from tanplan.errors import UsageError

CLIP = 0.7


def _bf16_sum(route):
    logits_fn, params = make_tiny("cnn")
    low = in_compute_dtype(logits_fn, "bfloat16")
    fn = ghost.ghost_clipped_grad_sum(low, CLIP) if route == "ghost" else clipping.clipped_grad_sum(low, CLIP)
    return jax.jit(fn), params


def test_the_model_really_computes_in_bfloat16_and_returns_float32():
    logits_fn, params = make_tiny("cnn")
    seen = []
    low = in_compute_dtype(lambda p, x: seen.append(x.dtype) or logits_fn(p, x), "bfloat16")
    out = low(params, jnp.asarray(make_rows(2)[0]))
    assert seen == [jnp.bfloat16] and out.dtype == jnp.float32
    assert in_compute_dtype(logits_fn, "float32") is logits_fn


@pytest.mark.parametrize("route", ["ghost", "vmap"])
def test_adding_one_example_moves_the_bf16_clipped_sum_by_at_most_c(route):
    fn, params = _bf16_sum(route)
    x, y = make_rows(ROWS, seed=1, scale=5.0)  # large inputs: most gradients exceed C
    full = np.ones(ROWS, bool)
    g_all, _, _ = fn(params, x, y, row_keys(), full)[:3]
    assert all(leaf.dtype == jnp.float32 for leaf in jax.tree.leaves(g_all))  # accumulated in float32
    moved = leave_one_out_moves(fn, params, x, y, full_sum=g_all)
    assert max(moved) <= CLIP * (1 + 1e-3)
    assert max(moved) >= 0.99 * CLIP  # clipping binds: the bound is attained, not vacuous


def test_bf16_noise_is_float32_with_std_sigma_c():
    """With every row masked out the noisy sum is the noise alone: float32, std σC per coordinate."""
    fn, params = _bf16_sum("ghost")
    sigma = 1.3
    noisy = jax.jit(dp_step.make_noisy_grad_sum(fn, sigma * CLIP))
    x, y = make_rows(ROWS, seed=2)
    batch = {"x": x[None], "y": y[None], "mask": np.zeros((1, ROWS), bool), "index": np.arange(ROWS, dtype=np.int32)[None]}
    draws = []
    for i in range(20):
        grads, _ = noisy(params, batch, jax.random.key(i), jax.random.key(99))
        assert all(leaf.dtype == jnp.float32 for leaf in jax.tree.leaves(grads))
        draws.append(np.concatenate([np.ravel(leaf) for leaf in jax.tree.leaves(grads)]))
    draws = np.concatenate(draws)
    # The sample std of n normal draws is within 5/sqrt(2n) of σC (relative) with overwhelming probability.
    assert abs(draws.std() / (sigma * CLIP) - 1) < 5 / np.sqrt(2 * draws.size)
    assert abs(draws.mean()) < 5 * sigma * CLIP / np.sqrt(draws.size)


def test_compute_dtype_is_validated():
    assert load_config(None, ["train.compute_dtype=bfloat16"]).train.compute_dtype == "bfloat16"
    assert load_config(None, []).train.compute_dtype == "float32"
    with pytest.raises(UsageError, match="compute_dtype"):
        load_config(None, ["train.compute_dtype=float16"])
