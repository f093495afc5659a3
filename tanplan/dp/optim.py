"""Optimizers and learning-rate schedules (optax), and the EMA of the weights.

Post-processing of the noisy gradient only: nothing here touches privacy.
SGD follows PyTorch's semantics (momentum buffer b ← μ·b + (1 − d)·g, first step b = g; Nesterov
uses g + μ·b; weight decay added to the gradient), since the TAN paper's grids (momentum, dampening,
learning rates 1-16) were tuned with them.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import optax

from tanplan.errors import UsageError


class MomentumState(NamedTuple):
    count: jax.Array
    buffer: optax.Updates


def torch_momentum(momentum: float, dampening: float = 0.0, nesterov: bool = False) -> optax.GradientTransformation:
    """PyTorch SGD momentum with dampening: b_0 = g_0, b_t = μ·b_{t-1} + (1 − d)·g_t."""

    def init(params):
        return MomentumState(jnp.zeros([], jnp.int32), jax.tree.map(jnp.zeros_like, params))

    def update(updates, state, params=None):
        del params
        first = state.count == 0
        buffer = jax.tree.map(lambda b, g: jnp.where(first, g, momentum * b + (1.0 - dampening) * g),
                              state.buffer, updates)
        out = jax.tree.map(lambda b, g: g + momentum * b, buffer, updates) if nesterov else buffer
        return out, MomentumState(state.count + 1, buffer)

    return optax.GradientTransformation(init, update)


def learning_rate_schedule(learning_rate: float, steps: int, schedule: str = "constant",
                           warmup_steps: int = 0) -> optax.Schedule:
    """Linear warm-up from 0 over warmup_steps, then constant or cosine decay to 0 at `steps`."""
    if schedule == "constant":
        after = optax.constant_schedule(learning_rate)
    elif schedule == "cosine":
        after = optax.cosine_decay_schedule(learning_rate, max(1, steps - warmup_steps))
    else:
        raise UsageError(f"train.schedule = {schedule!r} is not allowed: use constant or cosine")
    if warmup_steps <= 0:
        return after
    warmup = optax.linear_schedule(0.0, learning_rate, warmup_steps)
    return optax.join_schedules([warmup, after], [warmup_steps])


def make_optimizer(train) -> optax.GradientTransformation:
    """The optimizer of a TrainConfig (sgd | adam | adamw) with its schedule."""
    lr = learning_rate_schedule(train.learning_rate, train.steps, train.schedule, train.warmup_steps)
    decay = [optax.add_decayed_weights(train.weight_decay)] if train.weight_decay else []
    if train.optimizer == "sgd":
        momentum = [torch_momentum(train.momentum, train.dampening, train.nesterov)] if train.momentum else []
        return optax.chain(*decay, *momentum, optax.scale_by_learning_rate(lr))
    if train.optimizer == "adam":
        return optax.chain(*decay, optax.scale_by_adam(), optax.scale_by_learning_rate(lr))
    if train.optimizer == "adamw":
        return optax.adamw(lr, weight_decay=train.weight_decay)
    raise UsageError(f"train.optimizer = {train.optimizer!r} is not allowed: use sgd, adam or adamw")


def ema_decay_at(decay: float, step: jax.Array) -> jax.Array:
    """EMA decay with the usual warm-up min(decay, (1 + t)/(10 + t)), so early weights fade fast."""
    t = step.astype(jnp.float32)
    return jnp.minimum(decay, (1.0 + t) / (10.0 + t))


def ema_update(ema_params, params, decay: float, step: jax.Array):
    """ema ← d·ema + (1 − d)·params (optax.incremental_update), with d = ema_decay_at(decay, step)."""
    return optax.incremental_update(params, ema_params, 1.0 - ema_decay_at(decay, step))
