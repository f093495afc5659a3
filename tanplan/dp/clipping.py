"""Sums of per-example gradients over one padded chunk: clipped (private) or plain (non-private).

A grad-sum function has the signature
    grad_sum(params, x, y, keys, mask) -> (gradient sum pytree, per-example losses, per-example accuracy)
over one chunk of rows; rows with mask False are padding and contribute exactly nothing.

Guarantee of the private ones (`clipped_grad_sum`, and `tanplan.dp.ghost.ghost_clipped_grad_sum`):
each real row's gradient (the mean over its K AugMult views) is scaled to L2 norm at most C before
summing, so adding or removing one example changes the sum by at most C in L2 norm: sensitivity C under
the ADD_OR_REMOVE_ONE relation that tanplan.privacy.accounting assumes. (jax-privacy's own default relation is
REPLACE_SPECIAL, also C; under replace-one it would be 2C. We ask for ADD_OR_REMOVE_ONE explicitly.)
The per-example losses and accuracies are NOT private; they are diagnostics for the data owner.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax_privacy import clipping

from tanplan.dp import augmult, sharding


def add_remove_sensitivity(clip_norm: float) -> float:
    """L2 sensitivity of the clipped sum under ADD_OR_REMOVE_ONE, as jax-privacy certifies it."""
    import dp_accounting

    fn = clipping.clipped_grad(lambda p, x: p * x, l2_clip_norm=clip_norm)
    return float(fn.sensitivity(dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE))


def clipped_grad_sum(logits_fn, clip_norm: float, augment=None, aug_mult: int = 1, task=None):
    """Private grad-sum by jax-privacy's `clipped_grad`: vmapped per-example gradients, clipped to C.
    task: the per-example loss and metric (tanplan.task; None = cross-entropy and accuracy).
    On several devices each device clips and sums its own rows, then the sums are added
    (tanplan.dp.sharding.sum_per_device: XLA mis-partitions vmapped convolution gradients otherwise)."""
    loss = augmult.example_loss_fn(logits_fn, augment, aug_mult, task)
    grad_fn = clipping.clipped_grad(
        loss, argnums=0, has_aux=True, l2_clip_norm=clip_norm, batch_argnums=(1, 2, 3),
        keep_batch_dim=False, return_values=True,
    )

    def grad_sum(params, x, y, keys, mask):
        grads, aux = grad_fn(params, x, y, keys, is_padding_example=~mask)
        return grads, aux.values, aux.aux

    return sharding.sum_per_device(grad_sum)


def nonprivate_grad_sum(logits_fn, augment=None, aug_mult: int = 1, task=None):
    """Non-private grad-sum: the plain gradient of the sum of the real rows' losses, no clipping."""
    losses_fn = augmult.batch_loss_fn(logits_fn, augment, aug_mult, task)

    def grad_sum(params, x, y, keys, mask):
        def total(p):
            losses, acc = losses_fn(p, x, y, keys)
            return jnp.sum(jnp.where(mask, losses, 0.0)), (losses, acc)

        (_, (losses, acc)), grads = jax.value_and_grad(total, has_aux=True)(params)
        return grads, losses, acc

    return grad_sum
