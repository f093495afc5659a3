"""AugMult (TAN, Sander et al. 2023 appendix C): K augmentations of each example, losses averaged before clipping.

An example's loss is the mean over its K augmented views, so its gradient is the mean of the K view
gradients and is clipped as ONE per-example gradient: the sensitivity of the clipped sum stays C.

That bound needs every OTHER example's views to stay the same when one example is added or removed.
So the key of an example's views is a function of the step's key and the example's own identity, its
index in the training set (`example_keys`), never of its position in the padded batch: with position
keys, one example inserted first shifts every later row onto another key, the other examples get other
views and other clipped gradients, and the clipped sum moved by up to 5.9 C (shift_scale_noise, 100
rows: experiments/augmentation_keys.py; tests/dp/test_augmentation_keys.py checks every route). The
step's key comes from the run's secret (tanplan.dp.secret, stream AUGMENT), so the views are also
unknown to whoever reads the run's outputs.
The keys do not depend on how the batch is chunked or sharded, nor on the other rows, so accumulation,
data parallelism, the audit's shadow batch and a resumed run see the same augmentations.
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


def example_keys(step_key: jax.Array, index: jax.Array) -> jax.Array:
    """The key of each row's views: fold_in(step_key, the row's dataset index), of index's shape.

    index: the dataset index of each row of a padded batch (any integers in padding rows, which the
    mask discards). A row's key depends on step_key and its own index only: the same example gets the
    same views whichever other examples share its batch, and wherever it sits in it.
    """
    flat = jnp.ravel(jnp.asarray(index)).astype(jnp.uint32)
    return jax.vmap(jax.random.fold_in, in_axes=(None, 0))(step_key, flat).reshape(jnp.shape(index))


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
