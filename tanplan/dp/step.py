"""The DP-SGD step: one pure function of (state, batch, noise_key, aug_key), jitted once for every step.

    ḡ = (1/B)·(Σ_i clip_C(g_i) + N(0, σ²C²)),   B the EXPECTED batch size (q·N), not the sampled one.

The batch is a padded Poisson batch {x, y, mask, index} of shape (chunks, rows, ...) (see dp.sampling):
`index` holds each row's index in the training set (private, like the mask). The chunks are accumulated
with lax.scan (virtual batches: the same sum as one big batch), EVERY chunk, padding-only ones included:
a step's cost does not depend on how many examples the secret Poisson draw held (skipping padding chunks
made it: 41.8 ms with 256 real rows against 64.1 ms with 257 on a 3×128 layout, readable from the
published steps per second). The noise is drawn ONCE per logical step, from the step key, for the
global sum: after all chunks and, under data parallelism, after the cross-device sum (the step is the
same function; sharding is a property of its inputs). Dividing by the fixed B keeps the noisy mean a
post-processing of the noisy sum, as the accountant assumes (dividing by the sampled size would not be).

Both keys come from the run's secret (tanplan.dp.secret): `noise_key` (whoever knows it can subtract the
noise) and `aug_key`, from which each example's AugMult views are drawn by its dataset index
(tanplan.dp.augmult.example_keys): never by its position in the batch, which the other examples shift.
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
    """Σ over every chunk of grad_sum (none skipped: the cost is the layout's, whatever the draw held);
    also the masked sums of loss/accuracy."""
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

    def body(total, chunk):  # no branch on the mask: a padding-only chunk costs what a full one does
        return jax.tree.map(jnp.add, total, one(chunk)), None

    total, _ = jax.lax.scan(body, zeros, chunks)
    return total


def make_noisy_grad_sum(grad_sum: Callable, noise_std: float, canaries: "CanaryDesign | None" = None):
    """(params, batch, noise_key, aug_key[, canary_inputs]) -> (Σ clipped gradients + N(0, noise_std²), stats).

    With grad_sum clipping to C and noise_std = σ·C, this is the Gaussian mechanism with multiplier σ on
    a sum of sensitivity C: the privatised sum. noise_std = 0 gives the bare sum (non-private mode).
    The noise is drawn from noise_key alone. aug_key only draws the augmentation views: row r's from
    fold_in(aug_key, batch["index"][r]), its example's dataset index, so adding or removing one example
    leaves every other example's views, hence its clipped gradient, unchanged (the bound C needs that).
    canaries (the privacy audit only, tanplan.dp.canaries): the step's canaries join the clipped sum before
    the noise, and stats[canaries.OBSERVATION] is what the auditor reads of them: the noisy sum minus the
    clipped sum of its shadow batch (canary_inputs["shadow"], keyed by its own indices), projected on each
    canary.
    """

    def noisy_sum(params, batch, noise_key, aug_key, canary_inputs=None):
        grads, loss_sum, acc_sum, count = accumulate(grad_sum, params, batch, _keys(batch, aug_key))
        if canaries is not None:
            grads = canary_lib.insert(grads, canary_inputs, canaries)
        if noise_std > 0:
            grads = noise.add_gaussian_noise(grads, noise_key, noise_std)
        n = jnp.maximum(count, 1.0)
        stats = {"loss": loss_sum / n, "accuracy": acc_sum / n, "batch_size": count}
        if canaries is not None:  # the auditor's shadow batch: the same clipped sum on a second Poisson batch
            shadow_batch = canary_inputs["shadow"]
            shadow, *_ = accumulate(grad_sum, params, shadow_batch, _keys(shadow_batch, aug_key))
            stats[canary_lib.OBSERVATION] = canary_lib.observe(grads, shadow, canary_inputs, canaries)
        return grads, stats

    return noisy_sum


def _keys(batch: dict, aug_key: jax.Array) -> jax.Array:
    """Each row's augmentation key, from its dataset index (batch["index"]); never from its position."""
    if "index" not in batch:
        raise ValueError("a DP-SGD batch needs 'index' (each row's index in the training set) beside x, y and "
                         "mask: augmentation keys come from it, never from the row's position")
    return augmult.example_keys(aug_key, batch["index"])


def make_train_step(grad_sum: Callable, optimizer: optax.GradientTransformation, *, noise_std: float,
                    expected_batch_size: float, ema_decay: float = 0.0, canaries: "CanaryDesign | None" = None):
    """step(state, batch, noise_key, aug_key[, canary_inputs]) -> (state, metrics): noisy sum / B, update,
    EMA. canaries: the audit's (make_noisy_grad_sum); metrics then carry their observation."""
    noisy_sum = make_noisy_grad_sum(grad_sum, noise_std, canaries)

    def step(state: TrainState, batch: dict, noise_key: jax.Array, aug_key: jax.Array, canary_inputs=None):
        grads, metrics = noisy_sum(state.params, batch, noise_key, aug_key, canary_inputs)
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
