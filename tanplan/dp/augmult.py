"""AugMult (TAN, Sander et al. 2023 appendix C): K augmentations of each example, losses averaged before clipping.

An example's loss is the mean over its K augmented views, so its gradient is the mean of the K view
gradients and is clipped as ONE per-example gradient: the sensitivity of the clipped sum stays C.
Per-example keys come from the step key and the row's position in the padded batch, not from how the
batch is chunked or sharded, so accumulation and data parallelism see the same augmentations.
"""

from __future__ import annotations

from typing import Callable

import jax
import jax.numpy as jnp
import optax

from tanplan.task import DEFAULT as DEFAULT_TASK

Augment = Callable[[jax.Array, jax.Array], jax.Array]  # (key, one example) -> one example


def identity(key, x):
    del key
    return x


def row_keys(key: jax.Array, shape: tuple[int, ...]) -> jax.Array:
    """One key per row of a padded batch of the given (chunks, rows) shape."""
    size = 1
    for n in shape:
        size *= n
    return jax.random.split(key, size).reshape(shape)


def views(x: jax.Array, key: jax.Array, augment: Augment | None, k: int) -> jax.Array:
    """The K augmented views of one example, stacked: shape (K, *x.shape)."""
    if augment is None:
        return jnp.broadcast_to(x, (k,) + x.shape)
    return jax.vmap(augment, in_axes=(0, None))(jax.random.split(key, k), x)


def batch_views(x: jax.Array, keys: jax.Array, augment: Augment | None, k: int) -> jax.Array:
    """Views of a batch of examples: (n, *shape) -> (n, K, *shape)."""
    if augment is None:
        return jnp.broadcast_to(x[:, None], (x.shape[0], k) + x.shape[1:])
    return jax.vmap(views, in_axes=(0, 0, None, None))(x, keys, augment, k)


def cross_entropy(logits: jax.Array, labels: jax.Array) -> jax.Array:
    return optax.softmax_cross_entropy_with_integer_labels(logits, labels)


def example_loss_fn(logits_fn, augment: Augment | None, k: int, task=None):
    """f(params, x, y, key) -> (loss, metric) of ONE example: means over its K views.

    task (tanplan.task.Task): the per-example loss and metric; None = cross-entropy and accuracy."""
    task = task or DEFAULT_TASK

    def loss(params, x, y, key):
        v = views(x, key, augment, k)
        logits = logits_fn(params, v)
        labels = jnp.broadcast_to(y, (k,) + jnp.shape(y))
        return task.loss(logits, labels).mean(), task.metric(logits, labels).mean()

    return loss


def batch_loss_fn(logits_fn, augment: Augment | None, k: int, task=None):
    """f(params, x, y, keys) -> (losses, metrics), one entry per example of the batch."""
    task = task or DEFAULT_TASK

    def losses(params, x, y, keys):
        n = x.shape[0]
        v = batch_views(x, keys, augment, k).reshape((n * k,) + x.shape[1:])
        logits = logits_fn(params, v)
        labels = jnp.repeat(y, k, axis=0)
        return task.loss(logits, labels).reshape(n, k).mean(1), task.metric(logits, labels).reshape(n, k).mean(1)

    return losses
