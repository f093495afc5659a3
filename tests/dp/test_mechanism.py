"""The run's mechanism as one value (tanplan.dp.mechanism): its batches are Poisson at rate q from the run's
secret alone, its clipped sum has sensitivity C and gets N(0, σ²C²) from the noise key alone, its events are
the plan's, and a private plan is never paired with the unclipped route; the canaries wrap it at its C."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tanplan.dp import canaries, mechanism, sampling
from tanplan.dp.secret import BATCH, RunSecret
from tanplan.privacy import accounting
from tanplan.privacy.run_plan import RunPlan

PLAN = RunPlan(dataset_size=1000, batch_size=100, steps=50, sigma=2.0, delta=1e-5, clip_norm=1.5)
PARAMS = {"w": jnp.zeros(4000)}


def _zero_sum(params, x, y, keys, mask):  # a clipped sum that is exactly zero: what remains is the noise
    rows = x.shape[0]
    return jax.tree.map(jnp.zeros_like, params), jnp.zeros(rows), jnp.zeros(rows)


def _batch(rows=4):
    return {"x": jnp.zeros((1, rows, 1)), "y": jnp.zeros((1, rows), jnp.int32), "mask": jnp.ones((1, rows), bool),
            "index": jnp.arange(rows, dtype=jnp.int32)[None]}


def test_the_batches_are_poisson_at_rate_q_from_the_secret_alone():
    secret = RunSecret.fresh()
    mech = mechanism.build(PLAN, "vmap", _zero_sum, secret)
    again = mechanism.build(PLAN, "ghost", _zero_sum, secret)  # another route, the same secret: the same batches
    other = mechanism.build(PLAN, "vmap", _zero_sum, RunSecret.fresh())
    draws = [mech.batch(t) for t in range(400)]
    assert all(np.array_equal(d, again.batch(t)) for t, d in enumerate(draws))  # a function of (secret, t): resumable
    assert all(np.array_equal(d, sampling.poisson_batch(1000, 0.1, secret.batch_rng(BATCH, t)))
               for t, d in enumerate(draws[:5]))
    assert sum(np.array_equal(d, other.batch(t)) for t, d in enumerate(draws)) == 0  # another secret, other batches
    inclusion = np.zeros(1000)
    for d in draws:
        assert len(np.unique(d)) == len(d) and d.min() >= 0 and d.max() < 1000
        inclusion[d] += 1
    rate = inclusion / len(draws)  # each example in independently with probability q = 0.1
    assert abs(rate.mean() - 0.1) < 0.005  # 400,000 Bernoulli(0.1): sd 0.0005
    assert abs(rate.std() - np.sqrt(0.1 * 0.9 / 400)) < 0.003  # binomial spread: no example favoured


def test_the_noise_is_sigma_c_on_every_coordinate_and_a_function_of_the_noise_key():
    mech = mechanism.build(PLAN, "vmap", _zero_sum, RunSecret.fresh())
    assert mech.sensitivity == 1.5 and mech.noise_std == pytest.approx(2.0 * 1.5) and mech.q == 0.1
    noisy = jax.jit(mech.noisy_sum())
    key, aug = jax.random.key(1), jax.random.key(2)
    grads, stats = noisy(PARAMS, _batch(), key, aug)
    assert abs(float(jnp.std(grads["w"])) - 3.0) < 0.15 and abs(float(jnp.mean(grads["w"]))) < 0.15
    same, _ = noisy(PARAMS, _batch(), key, jax.random.key(3))  # the views' key draws no noise
    other, _ = noisy(PARAMS, _batch(), jax.random.key(4), aug)
    assert np.array_equal(np.asarray(grads["w"]), np.asarray(same["w"]))
    assert not np.allclose(np.asarray(grads["w"]), np.asarray(other["w"]))
    assert float(stats["batch_size"]) == 4


def test_its_events_and_relation_are_the_plans():
    mech = mechanism.build(PLAN, "ghost", _zero_sum, RunSecret.fresh())
    assert mech.neighbouring == "add_remove" and mech.events() == PLAN.events() and mech.events(10) == PLAN.events(10)
    expected = accounting.epsilon_of_events([accounting.dp_sgd_event(0.1, 2.0, 50)], 1e-5, "pld", "add_remove")
    assert accounting.epsilon_of_events(mech.events(), 1e-5, "pld", mech.neighbouring) == pytest.approx(expected)
    public = RunPlan(dataset_size=1000, batch_size=100, steps=50, sigma=0.0, delta=None, private=False)
    plain = mechanism.build(public, "plain", _zero_sum, RunSecret.fresh())
    assert plain.sensitivity is None and plain.noise_std == 0.0 and plain.events() == []


def test_a_private_plan_needs_a_clipped_sum_and_the_canaries_wrap_it_at_its_c():
    with pytest.raises(ValueError, match="clipped gradient sum"):
        mechanism.build(PLAN, "plain", _zero_sum, RunSecret.fresh())
    mech = mechanism.build(PLAN, "vmap", _zero_sum, RunSecret.fresh())
    audited = canaries.wrap(mech, 10, PARAMS)
    assert audited.mechanism is mech and audited.design.clip_norm == mech.sensitivity == 1.5
    assert audited.design.count == 10 and audited.arrays.index.shape == (10, audited.design.block)
    masked = mechanism.build(PLAN, "vmap", None, mech.secret)  # the masked step's: no dense clipped sum
    public = mechanism.build(RunPlan(dataset_size=1000, batch_size=100, steps=5, sigma=0.0, delta=None, private=False),
                             "plain", _zero_sum, mech.secret)
    for unfit in (masked, public):
        with pytest.raises(ValueError, match="canaries need"):
            canaries.wrap(unfit, 10, PARAMS)
