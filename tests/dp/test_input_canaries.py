"""The audit's input-space canaries (tanplan.dp.input_canaries): crafted examples with their own identities,
clipped by the run's clipped sum with the batch, joining it only when held in and drawn, and read back as
‖clip_C(g_j)‖/C along their own clipped gradient; a clipping bound above C shows in what the auditor reads."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree

from tanplan.dp import clipping, input_canaries

C = 0.5
PARAMS = {"w": jnp.asarray(np.random.default_rng(0).normal(size=(6, 4)), jnp.float32), "b": jnp.zeros(4)}


def _logits(params, x):
    return x @ params["w"] + params["b"]


def _arrays(count=40, seed=1):
    return input_canaries.draw(input_canaries.InputDesign(count, C, 0.0), (6,), 4, 1000, np.random.default_rng(seed))


def _step(clip_norm, chosen, arrays, noise_std=0.0):
    """(noisy sum, observation, real rows' sum) of one audited step on a batch of 8 real rows."""
    grad_sum = clipping.clipped_grad_sum(_logits, clip_norm)
    rng = np.random.default_rng(2)
    batch = {"x": jnp.asarray(rng.normal(size=(1, 8, 6)), jnp.float32), "y": jnp.asarray(rng.integers(0, 4, (1, 8))),
             "mask": jnp.ones((1, 8), bool), "index": jnp.arange(8, dtype=jnp.int32)[None]}
    # compiled once for both calls, as the run's step compiles it (op by op, its many small programs cost seconds)
    noisy_sum = jax.jit(input_canaries.audited_noisy_sum(grad_sum, noise_std,
                                                         input_canaries.InputDesign(arrays.x.shape[0], C, 0.0)))
    inputs = {**arrays.step_inputs(), "chosen": jnp.asarray(chosen)}
    grads, stats = noisy_sum(PARAMS, batch, jax.random.key(3), jax.random.key(4), inputs)
    joined_none = {**inputs, "chosen": jnp.zeros_like(inputs["chosen"])}
    real, _ = noisy_sum(PARAMS, batch, jax.random.key(3), jax.random.key(4), joined_none)
    return ravel_pytree(grads)[0], np.asarray(stats["canary_observation"]), ravel_pytree(real)[0]


def test_the_canaries_are_crafted_examples_with_identities_of_their_own_and_fair_coins():
    arrays = _arrays(400)
    assert arrays.x.shape == (400, 6) and arrays.index.tolist() == list(range(1000, 1400))  # after the N rows
    assert np.std(arrays.x) > 3 and set(np.unique(arrays.y)) <= {0, 1, 2, 3}
    assert 130 < arrays.held_in.sum() < 270  # a fair coin each (6.5 standard deviations either side)


def test_a_joined_canary_moves_the_sum_by_its_clipped_gradient_only_and_reads_one():
    arrays = _arrays()
    j = int(np.flatnonzero(arrays.held_in)[0])
    chosen = np.zeros(40, bool)
    chosen[j] = True
    chosen[np.flatnonzero(~arrays.held_in)[:5]] = True  # drawn but held out: they stay out
    noisy, observed, real = _step(C, chosen, arrays)
    moved = np.linalg.norm(np.asarray(noisy - real))
    assert np.isclose(moved, C, rtol=1e-4)  # one added example moves the sum by C: the bound is reached, not exceeded
    assert np.isclose(observed[j], 1.0, rtol=1e-4)  # its crafted input's gradient exceeds C, so it is clipped to C
    assert np.all(np.abs(np.delete(observed, j)) <= 1 + 1e-4)  # the others read only their overlap with it


def test_a_clipping_bound_above_c_shows_in_what_the_auditor_reads():
    """The break the gradient canaries cannot see: examples clipped to 3C while the noise assumes C."""
    arrays = _arrays()
    j = int(np.flatnonzero(arrays.held_in)[0])
    chosen = np.zeros(40, bool)
    chosen[j] = True
    noisy, observed, real = _step(3 * C, chosen, arrays)
    assert np.isclose(np.linalg.norm(np.asarray(noisy - real)), 3 * C, rtol=1e-4)
    assert observed[j] > 2.9


def test_with_noise_a_held_out_canary_reads_the_noise_along_its_own_clipped_gradient():
    """What the auditor reads is the released sum minus the real rows' clipped sum, projected on each canary's
    unit clipped gradient: with none joined, the noise N(0, σ²C²) alone, divided by C."""
    arrays = _arrays(200, seed=5)
    noisy, observed, _ = _step(C, np.zeros(200, bool), arrays, noise_std=2 * C)
    _, _, real = _step(C, np.zeros(200, bool), arrays)  # the same rows without noise
    inputs = {**arrays.step_inputs(), "chosen": jnp.zeros(200, bool)}
    clipped = jax.jit(functools.partial(input_canaries.clipped_gradients, clipping.clipped_grad_sum(_logits, C)))
    gradients = np.asarray(clipped(PARAMS, inputs, jax.random.key(4)))
    units = gradients / np.linalg.norm(gradients, axis=1, keepdims=True)
    assert np.allclose(observed, units @ np.asarray(noisy - real) / C, atol=1e-4)
    assert 1.3 < np.std(observed) < 2.7  # σ = 2 along every direction (one draw, 28 coordinates)


def test_the_reading_is_less_the_overlap_the_other_canaries_are_expected_to_add():
    """At rate q, half the canaries held in: Σ_{k≠j} ⟨c_k, u_j⟩ is expected to add (q/2)·that to canary j's
    reading; it is taken off, from every canary's gradient alike (the coins are not used)."""
    rng = np.random.default_rng(7)
    gradients = jnp.asarray(rng.normal(size=(5, 9)), jnp.float32)
    released, real = {"w": jnp.asarray(rng.normal(size=9), jnp.float32)}, {"w": jnp.zeros(9)}
    g = np.asarray(gradients, np.float64)
    units = g / np.linalg.norm(g, axis=1, keepdims=True)
    others = np.array([units[j] @ np.delete(g, j, axis=0).sum(0) for j in range(5)])
    expected = (units @ np.asarray(released["w"]) - 0.3 / 2 * others) / C
    got = input_canaries.observe(released, real, gradients, C, rate=0.3)
    assert np.allclose(np.asarray(got), expected, atol=1e-4)
