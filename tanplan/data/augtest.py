"""AugTest (TAN paper, section 4.2): predict each test example by a majority vote over K augmentations.

The paper uses the same augmentation family and the same K as in training. A test-time procedure:
it touches the model and the test set only, not the training data, so it costs no privacy.
"""

from __future__ import annotations

from typing import Callable

import jax
import jax.numpy as jnp

from tanplan.data.augment import Augment


def majority_vote(logits: jax.Array) -> jax.Array:
    """Class with most votes among K views; logits (K, n, classes) -> (n,) int32.

    A vote is a view's argmax. Ties go to the tied class with the highest mean softmax probability:
    that term lies in [0, 1], so scaled by 1/2 it can only break ties, never overturn a vote.
    """
    num_classes = logits.shape[-1]
    votes = jax.nn.one_hot(jnp.argmax(logits, axis=-1), num_classes).sum(axis=0)
    mean_prob = jax.nn.softmax(logits, axis=-1).mean(axis=0)
    return jnp.argmax(votes + 0.5 * mean_prob, axis=-1).astype(jnp.int32)


def augtest_predict(logits_fn: Callable, params, x: jax.Array, key: jax.Array, *, k: int,
                    augment: Augment, index: jax.Array | None = None) -> jax.Array:
    """Majority-vote predictions (n,) for the batch x under K views drawn with `augment`.

    logits_fn(params, x_batch) -> (n, classes), e.g. lambda p, xb: model.apply({"params": p}, xb).
    index: each row's index in the test set (None: x is the test set from row 0). Row r's K views come
    from fold_in(key, index[r]) alone (as training keys its views: tanplan.dp.augmult), so an example gets
    the same views however the test set is cut into batches and whichever rows share its batch.
    Views are evaluated one after the other (lax.map), so memory stays that of one batch. Jit the
    whole call with k and augment static, e.g. jax.jit(partial(augtest_predict, fn, k=8, augment=a)).
    """
    n = x.shape[0]
    index = jnp.arange(n) if index is None else jnp.asarray(index)
    own = jax.vmap(jax.random.fold_in, in_axes=(None, 0))(key, index.astype(jnp.uint32))  # one key per example
    view_keys = jax.vmap(lambda kk: jax.random.split(kk, k))(own)  # (n, K)

    def view_logits(keys):
        return logits_fn(params, jax.vmap(augment)(keys, x))

    logits = jax.lax.map(view_logits, jnp.swapaxes(view_keys, 0, 1))
    return majority_vote(logits)
