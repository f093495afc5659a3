"""Frozen parameters (tanplan.dp.partition): the clipped sum is over the trainable parameters alone (each
example clipped to C over them, sensitivity C), the noise has their shape, the optimizer holds state for
them alone, and the frozen parameters come out of training bit for bit as they went in."""

import jax
import numpy as np
import optax
import pytest
from dp_helpers import (ROWS, example_grads, leave_one_out_moves, make_rows, make_tiny, row_keys, tree_max_diff,
                        tree_norm)

from tanplan.dp import clipping, ghost
from tanplan.dp import step as dp_step
from tanplan.dp.partition import Partition, grad_sum_over, logits_over
from tanplan.models.paths import flat_params

CLIP = 0.7
FROZEN = ("Conv_0", "GroupNorm_0")  # the tiny CNN's first block: its stem


def _partition(params, frozen=FROZEN):
    return Partition(frozenset(k for k in flat_params(params) if k.split("/")[0] not in frozen))


def _make(route):
    if route == "ghost":
        return lambda f: ghost.ghost_clipped_grad_sum(f, CLIP)
    return lambda f: clipping.clipped_grad_sum(f, CLIP)


def _sum_fn(route):
    logits_fn, params = make_tiny("cnn")
    part = _partition(params)
    return jax.jit(grad_sum_over(part, _make(route), logits_fn)), params, part


@pytest.mark.parametrize("route", ["vmap", "ghost"])
def test_each_example_is_clipped_to_c_over_the_trainable_parameters_alone(route):
    fn, params, part = _sum_fn(route)
    x, y = make_rows(ROWS, seed=1, scale=5.0)  # large inputs: clipping binds
    mask = np.arange(ROWS) < 6
    got = fn(params, x, y, row_keys(), mask)[0]
    assert set(flat_params(got)) == part.trainable  # no gradient for a frozen parameter
    # The definition from each example's own full gradient, restricted to the trainable parameters:
    # a norm that counted the frozen ones would scale every example down further, and fail here.
    direct = [part.split(g)[0] for g in example_grads("cnn", x, y, row_keys())]
    expected = jax.tree.map(
        lambda *g: sum(gi * min(1.0, CLIP / tree_norm(d)) for gi, d, m in zip(g, direct, mask) if m), *direct)
    assert tree_max_diff(got, expected) < 1e-5
    full = [tree_norm(g) for g in example_grads("cnn", x, y, row_keys())]
    assert max(abs(a - tree_norm(b)) for a, b in zip(full, direct)) > 1e-3  # the frozen part weighs: the test bites


@pytest.mark.parametrize("route", ["vmap", "ghost"])
def test_adding_or_removing_one_example_moves_the_trainable_sum_by_at_most_c(route):
    fn, params, _ = _sum_fn(route)
    moved = leave_one_out_moves(fn, params, *make_rows(ROWS, seed=2, scale=5.0))
    assert max(moved) <= CLIP * (1 + 1e-5)
    assert max(moved) >= 0.99 * CLIP  # the bound is attained, not vacuous


def test_the_noise_has_the_trainable_parameters_shape():
    fn, params, part = _sum_fn("ghost")
    noisy = dp_step.make_noisy_grad_sum(fn, noise_std=3.0)
    x, y = make_rows(ROWS, seed=3)
    batch = {"x": x[None], "y": y[None], "mask": np.zeros((1, ROWS), bool), "index": np.arange(ROWS)[None]}
    out, _ = noisy(params, batch, jax.random.key(1), jax.random.key(2))  # an empty batch: noise alone
    shapes = {k: v.shape for k, v in flat_params(out).items()}
    assert shapes == {k: v.shape for k, v in flat_params(part.split(params)[0]).items()}
    assert all(np.std(v) > 1.0 for v in flat_params(out).values() if v.size > 8)  # N(0, 3²) on every coordinate


def test_ghost_records_no_frozen_layer_and_refuses_a_partly_frozen_one():
    logits_fn, params = make_tiny("cnn")
    x = np.zeros((2, 8, 1), np.float32)
    assert ghost.unsupported_reason(*logits_over(_partition(params), logits_fn, params), x) is None
    part = Partition(frozenset(k for k in flat_params(params) if k != "Conv_0/kernel"))
    assert "partly frozen" in ghost.unsupported_reason(*logits_over(part, logits_fn, params), x)


def test_training_keeps_frozen_parameters_bit_for_bit_and_their_optimizer_state_empty():
    fn, params, part = _sum_fn("ghost")
    optimizer = optax.adam(0.05)
    step = jax.jit(dp_step.make_train_step(fn, optimizer, noise_std=CLIP, expected_batch_size=ROWS,
                                           ema_decay=0.9, partition=part))
    state = dp_step.create_train_state(params, optimizer, 0.9, part)
    mu = flat_params(state.opt_state[0].mu)
    assert set(mu) == part.trainable  # Adam's moments exist for the trainable parameters only
    x, y = make_rows(ROWS, seed=4)
    batch = {"x": x[None], "y": y[None], "mask": np.ones((1, ROWS), bool), "index": np.arange(ROWS)[None]}
    for t in range(3):
        state, _ = step(state, batch, jax.random.key(10 + t), jax.random.key(20 + t))
    before, after, ema = flat_params(params), flat_params(state.params), flat_params(state.ema_params)
    for k in before:
        if k in part.trainable:
            assert not np.array_equal(before[k], after[k]), k
        else:
            assert np.array_equal(before[k], after[k]) and np.array_equal(before[k], ema[k]), k
