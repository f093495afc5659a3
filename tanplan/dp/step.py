"""The DP-SGD step: one pure function of (state, batch, noise_key, public_key), jitted once for every step.

    ḡ = (1/B)·(Σ_i clip_C(g_i) + N(0, σ²C²)),   B the EXPECTED batch size (q·N), not the sampled one.

The batch is a padded Poisson batch {x, y, mask} of shape (chunks, rows, ...) (see dp.sampling). The
chunks are accumulated with lax.scan (virtual batches: the same sum as one big batch) and chunks that
hold only padding are skipped. The noise is drawn ONCE per logical step, from the step key, for the
global sum: after all chunks and, under data parallelism, after the cross-device sum (the step is the
same function; sharding is a property of its inputs). Dividing by the fixed B keeps the noisy mean a
post-processing of the noisy sum, as the accountant assumes (dividing by the sampled size would not be).

Two keys, because they have different owners: `noise_key` must come from the run's secret
(tanplan.dp.secret: whoever knows it can subtract the noise), `public_key` (augmentation views, random
gradient dropping) may come from the public experiment seed, since it reveals nothing about the data.
"""

from __future__ import annotations

from typing import Any, Callable

import flax.struct
import jax
import jax.numpy as jnp
import optax

from tanplan.dp import augmult, noise, optim
from tanplan.dp import canaries as canary_lib
from tanplan.dp.canaries import CanaryDesign


@flax.struct.dataclass
class TrainState:
    step: jax.Array
    params: Any
    opt_state: Any
    ema_params: Any = None  # None when the EMA is off


def create_train_state(params, optimizer: optax.GradientTransformation, ema_decay: float = 0.0) -> TrainState:
    ema = jax.tree.map(jnp.array, params) if ema_decay > 0 else None
    return TrainState(jnp.zeros([], jnp.int32), params, optimizer.init(params), ema)


def _zeros_like_out(grad_sum, params, chunk):
    shapes = jax.eval_shape(grad_sum, params, *chunk)
    return jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), shapes)


def accumulate(grad_sum: Callable, params, batch: dict, keys: jax.Array):
    """Σ over chunks of grad_sum, skipping all-padding chunks; also the masked sums of loss/accuracy."""
    chunks = (batch["x"], batch["y"], keys, batch["mask"])

    def one(chunk):
        x, y, k, mask = chunk
        grads, losses, acc = grad_sum(params, x, y, k, mask)
        m = mask.astype(jnp.float32)
        return grads, jnp.sum(losses * m), jnp.sum(acc * m), jnp.sum(m)

    if batch["mask"].shape[0] == 1:
        return one(jax.tree.map(lambda a: a[0], chunks))

    first = jax.tree.map(lambda a: a[0], chunks)
    zeros = jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), jax.eval_shape(one, first))

    def body(total, chunk):
        out = jax.lax.cond(jnp.any(chunk[3]), one, lambda _: zeros, chunk)
        return jax.tree.map(jnp.add, total, out), None

    total, _ = jax.lax.scan(body, zeros, chunks)
    return total


def make_noisy_grad_sum(grad_sum: Callable, noise_std: float, canaries: "CanaryDesign | None" = None):
    """(params, batch, noise_key, public_key[, canary_inputs]) -> (Σ clipped gradients + N(0, noise_std²), stats).

    With grad_sum clipping to C and noise_std = σ·C, this is the Gaussian mechanism with multiplier σ on
    a sum of sensitivity C: the privatised sum. noise_std = 0 gives the bare sum (non-private mode).
    The noise is drawn from noise_key alone; public_key only draws the per-row augmentation keys.
    canaries (the privacy audit only, tanplan.dp.canaries): the step's canaries join the clipped sum before
    the noise, and stats[canaries.OBSERVATION] is what the auditor reads of them: the noisy sum minus the
    clipped sum of its shadow batch (canary_inputs["shadow"]), projected on each canary.
    """

    def noisy_sum(params, batch, noise_key, public_key, canary_inputs=None):
        keys = augmult.row_keys(public_key, batch["mask"].shape)
        grads, loss_sum, acc_sum, count = accumulate(grad_sum, params, batch, keys)
        if canaries is not None:
            grads = canary_lib.insert(grads, canary_inputs, canaries)
        if noise_std > 0:
            grads = noise.add_gaussian_noise(grads, noise_key, noise_std)
        n = jnp.maximum(count, 1.0)
        stats = {"loss": loss_sum / n, "accuracy": acc_sum / n, "batch_size": count}
        if canaries is not None:  # the auditor's shadow batch: the same clipped sum on a second Poisson batch
            shadow, *_ = accumulate(grad_sum, params, canary_inputs["shadow"], keys)
            stats[canary_lib.OBSERVATION] = canary_lib.observe(grads, shadow, canary_inputs, canaries)
        return grads, stats

    return noisy_sum


def make_train_step(grad_sum: Callable, optimizer: optax.GradientTransformation, *, noise_std: float,
                    expected_batch_size: float, ema_decay: float = 0.0, canaries: "CanaryDesign | None" = None):
    """step(state, batch, noise_key, public_key[, canary_inputs]) -> (state, metrics): noisy sum / B, update,
    EMA. canaries: the audit's (make_noisy_grad_sum); metrics then carry their observation."""
    noisy_sum = make_noisy_grad_sum(grad_sum, noise_std, canaries)

    def step(state: TrainState, batch: dict, noise_key: jax.Array, public_key: jax.Array, canary_inputs=None):
        grads, metrics = noisy_sum(state.params, batch, noise_key, public_key, canary_inputs)
        grads = jax.tree.map(lambda g: g / expected_batch_size, grads)
        return apply_update(state, grads, optimizer, ema_decay, metrics)

    return step


def apply_update(state: TrainState, grads, optimizer: optax.GradientTransformation, ema_decay: float,
                 metrics: dict, mask_updates: Callable = lambda updates: updates):
    """The optimizer step on already-noised gradients (post-processing: no privacy cost), then the EMA."""
    updates, opt_state = optimizer.update(grads, state.opt_state, state.params)
    params = optax.apply_updates(state.params, mask_updates(updates))
    ema = state.ema_params
    if ema is not None:
        ema = optim.ema_update(ema, params, ema_decay, state.step)
    metrics["grad_norm"] = optax.global_norm(grads)
    return TrainState(state.step + 1, params, opt_state, ema), metrics
