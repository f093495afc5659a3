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
from tanplan.dp.partition import Partition, trainable_of, with_trainable


@flax.struct.dataclass
class TrainState:
    step: jax.Array
    params: Any
    opt_state: Any
    ema_params: Any = None  # None when the EMA is off


def create_train_state(params, optimizer: optax.GradientTransformation, ema_decay: float = 0.0,
                       partition: Partition | None = None) -> TrainState:
    """The state at step 0; the optimizer holds state for the trainable parameters only (tanplan.dp.partition)."""
    ema = jax.tree.map(jnp.array, params) if ema_decay > 0 else None
    return TrainState(jnp.zeros([], jnp.int32), params, optimizer.init(trainable_of(partition, params)), ema)


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


def make_noisy_grad_sum(grad_sum: Callable, noise_std: float):
    """(params, batch, noise_key, aug_key) -> (Σ clipped gradients + N(0, noise_std²), stats).

    With grad_sum clipping to C and noise_std = σ·C, this is the Gaussian mechanism with multiplier σ on
    a sum of sensitivity C: the privatised sum. noise_std = 0 gives the bare sum (non-private mode).
    The noise is drawn from noise_key alone. aug_key only draws the augmentation views: row r's from
    fold_in(aug_key, batch["index"][r]), its example's dataset index, so adding or removing one example
    leaves every other example's views, hence its clipped gradient, unchanged (the bound C needs that).
    (The privacy audit's canaries join the sum before the noise by their own wrapper: tanplan.dp.canaries.)
    """

    def noisy_sum(params, batch, noise_key, aug_key):
        grads, loss_sum, acc_sum, count = accumulate(grad_sum, params, batch, example_keys(batch, aug_key))
        grads = jax.tree.map(lambda g: g.astype(jnp.promote_types(g.dtype, jnp.float32)), grads)  # sum, noise: f32
        if noise_std > 0:
            grads = noise.add_gaussian_noise(grads, noise_key, noise_std)
        n = jnp.maximum(count, 1.0)
        return grads, {"loss": loss_sum / n, "accuracy": acc_sum / n, "batch_size": count}

    return noisy_sum


def example_keys(batch: dict, aug_key: jax.Array) -> jax.Array:
    """Each row's augmentation key, from its dataset index (batch["index"]); never from its position."""
    if "index" not in batch:
        raise ValueError("a DP-SGD batch needs 'index' (each row's index in the training set) beside x, y and "
                         "mask: augmentation keys come from it, never from the row's position")
    return augmult.example_keys(aug_key, batch["index"])


def make_train_step(grad_sum: Callable, optimizer: optax.GradientTransformation, *, noise_std: float,
                    expected_batch_size: float, ema_decay: float = 0.0, partition: Partition | None = None):
    """step(state, batch, noise_key, aug_key) -> (state, metrics): noisy sum (make_noisy_grad_sum) / B,
    update, EMA (partition: grad_sum's sum is over its trainable parameters: tanplan.dp.partition)."""
    return train_step(make_noisy_grad_sum(grad_sum, noise_std), optimizer, expected_batch_size=expected_batch_size,
                      ema_decay=ema_decay, partition=partition)


def train_step(noisy_sum: Callable, optimizer: optax.GradientTransformation, *, expected_batch_size: float,
               ema_decay: float = 0.0, partition: Partition | None = None):
    """step(state, batch, noise_key, aug_key, *extra) -> (state, metrics) around a privatised sum
    noisy_sum(params, batch, noise_key, aug_key, *extra) -> (sum, stats): divided by the fixed B, then the
    update and the EMA (post-processing). extra: the audit's canary inputs (tanplan.dp.canaries.audited_noisy_sum).
    partition: noisy_sum's sum is over its trainable parameters, and only they are updated."""

    def step(state: TrainState, batch: dict, noise_key: jax.Array, aug_key: jax.Array, *extra):
        grads, metrics = noisy_sum(state.params, batch, noise_key, aug_key, *extra)
        grads = jax.tree.map(lambda g: g / expected_batch_size, grads)
        return apply_update(state, grads, optimizer, ema_decay, metrics, partition=partition)

    return step


def apply_update(state: TrainState, grads, optimizer: optax.GradientTransformation, ema_decay: float,
                 metrics: dict, mask_updates: Callable = lambda updates: updates, partition: Partition | None = None):
    """The optimizer step on already-noised gradients (post-processing: no privacy cost), then the EMA.
    With a partition, grads are the trainable parameters'; the frozen ones are kept bit for bit."""
    trainable = trainable_of(partition, state.params)
    updates, opt_state = optimizer.update(grads, state.opt_state, trainable)
    params = with_trainable(partition, state.params, optax.apply_updates(trainable, mask_updates(updates)))
    ema = state.ema_params
    if ema is not None:
        new = optim.ema_update(trainable_of(partition, ema), trainable_of(partition, params), ema_decay, state.step)
        ema = with_trainable(partition, ema, new)
    metrics["grad_norm"] = optax.global_norm(grads)
    return TrainState(state.step + 1, params, opt_state, ema), metrics
