"""The audit's gradient canaries (tanplan.dp.canaries): exactly orthonormal directions of norm C, added to the
clipped sum only when held in and drawn by the run's sampler, and read back as 1 per inclusion once the
shadow sum has removed the data."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.flatten_util import ravel_pytree

from tanplan.dp import canaries
from tanplan.dp.secret import RunSecret

PARAMS = {"a": jnp.zeros((30, 20)), "b": jnp.zeros(17)}  # 617 coordinates
NUM = 617


def _inputs(design, arrays, chosen):
    return {**arrays.step_inputs(), "chosen": jnp.asarray(chosen)}


def test_directions_are_disjoint_unit_vectors_and_the_coins_fair():
    design = canaries.design_for(300, NUM, clip_norm=1.0)
    arrays = canaries.draw(design, NUM, np.random.default_rng(1))
    assert design.block == NUM // 300 and arrays.index.shape == (300, design.block)
    assert len(np.unique(arrays.index)) == arrays.index.size  # disjoint supports: orthogonal directions
    assert np.allclose(np.sum(arrays.weight.astype(np.float64) ** 2, axis=1), 1.0)
    assert 100 < arrays.held_in.sum() < 200  # a fair coin each (4.6 standard deviations either side)
    with pytest.raises(ValueError, match="618 canaries"):
        canaries.design_for(618, NUM, clip_norm=1.0)


def test_insert_adds_c_times_u_for_the_chosen_held_in_canaries_only():
    design = canaries.design_for(40, NUM, clip_norm=2.5)
    arrays = canaries.draw(design, NUM, np.random.default_rng(2))
    chosen = np.random.default_rng(3).random(40) < 0.5
    flat, _ = ravel_pytree(canaries.insert(PARAMS, _inputs(design, arrays, chosen), design))
    expected = np.zeros(NUM)
    for j in np.flatnonzero(chosen & arrays.held_in):
        expected[arrays.index[j]] += 2.5 * arrays.weight[j]
    assert np.allclose(np.asarray(flat), expected, atol=1e-6)
    joined = chosen & arrays.held_in
    assert 0 < joined.sum() < chosen.sum()  # the case covers chosen held-out canaries, which stay out
    norms = [np.linalg.norm(expected[arrays.index[j]]) for j in np.flatnonzero(joined)]
    assert np.allclose(norms, 2.5, rtol=1e-5)  # each one of norm exactly C


def test_the_step_reads_one_per_inclusion_and_the_noise_around_it():
    """The step with canaries, a batch and a shadow batch of the same rows: the data cancel exactly, so each
    observation is 1[joined] without noise, and 1[joined] + N(0, σ²) with it (σ = noise_std / C)."""
    design = canaries.design_for(600, NUM, clip_norm=2.0)
    arrays = canaries.draw(design, NUM, np.random.default_rng(4))
    chosen = np.random.default_rng(5).random(600) < 0.3
    rng = np.random.default_rng(6)
    batch = {"x": jnp.asarray(rng.normal(size=(1, 8, 617)), jnp.float32), "y": jnp.zeros((1, 8), jnp.int32),
             "mask": jnp.ones((1, 8), bool), "index": jnp.arange(8, dtype=jnp.int32)[None]}

    def grad_sum(params, x, y, keys, mask):  # a data sum that is far from zero on every coordinate
        flat = jnp.sum(x * mask[:, None], axis=0)
        return {"a": flat[:600].reshape(30, 20), "b": flat[600:]}, jnp.zeros(8), jnp.zeros(8)

    inputs = {**_inputs(design, arrays, chosen), "shadow": batch}
    key = jax.random.key(0)
    joined = (chosen & arrays.held_in).astype(float)
    # compiled, as the run's step is (op by op, its many small programs cost a second)
    _, stats = jax.jit(canaries.audited_noisy_sum(grad_sum, 0.0, design))(PARAMS, batch, key, key, inputs)
    assert np.allclose(np.asarray(stats[canaries.OBSERVATION]), joined, atol=1e-4)
    _, stats = jax.jit(canaries.audited_noisy_sum(grad_sum, 2.0 * 1.5, design))(PARAMS, batch, key, key, inputs)
    residual = np.asarray(stats[canaries.OBSERVATION]) - joined
    assert abs(residual.std() - 1.5) < 0.15 and abs(residual.mean()) < 0.2  # σ = 1.5; 600 draws


def test_step_draws_come_from_the_secret_at_the_runs_rate():
    secret, other = RunSecret.fresh(), RunSecret.fresh()
    draws = [canaries.step_draws(secret, t, 500, 2000, 0.1) for t in range(40)]
    rate = np.mean([chosen.mean() for chosen, _ in draws])
    assert abs(rate - 0.1) < 0.01  # 20,000 Bernoulli(0.1): sd 0.002
    assert abs(np.mean([len(shadow) for _, shadow in draws]) - 200) < 10  # shadow: Poisson batches of the data
    again = canaries.step_draws(secret, 7, 500, 2000, 0.1)
    assert np.array_equal(again[0], draws[7][0]) and np.array_equal(again[1], draws[7][1])
    assert not np.array_equal(canaries.step_draws(other, 7, 500, 2000, 0.1)[0], draws[7][0])
    assert not np.array_equal(draws[7][0], draws[8][0])
