"""Gradient dropping (Adamczewski et al. 2023 §3.2) and the masked DP-SGD step that serves pruning and dropping.

At every step a fresh 0/1 mask m = prune_mask ⊙ drop_mask is formed:
- drop "random": per prunable layer, a uniformly random fraction `rate` of the kept weights is dropped,
  drawn from the step's public key (independent of the data: no privacy cost, nothing to hide);
- drop "magnitude": per prunable layer, the `rate` fraction of kept weights with the smallest |θ| is
  dropped; θ is the output of earlier private steps, so this is post-processing (no privacy cost).
Then, within the one step:
1. every per-example gradient is masked BEFORE clipping (the model sees gradient_mask(θ, m)), so
   clip_C(m ⊙ g_i) has norm ≤ C: the clipped sum keeps sensitivity C under ADD_OR_REMOVE_ONE and the
   step stays one Poisson-subsampled Gaussian mechanism with multiplier σ, as tanplan.privacy.accounting assumes;
2. N(0, σ²C²) is added once to the global sum (tanplan.dp.step.make_noisy_grad_sum) and the result is
   multiplied by m: masked coordinates carry neither gradient nor noise (dropping noise there is
   post-processing);
3. the optimizer's update is multiplied by m too, so momentum and weight decay cannot move a masked
   weight: pruned weights stay 0, dropped weights keep their value for this step.

Per-example gradients are materialised (the vmap route): the per-layer-norm ("ghost") route cannot
compute the norm of a coordinate-masked gradient.
"""

from __future__ import annotations

from typing import Callable

import jax
import jax.numpy as jnp
import optax

from tanplan.dp import pruning
from tanplan.dp import step as dp_step

_DROP_STREAM = 0x6D61736B  # fold_in constant: a drop key of its own, apart from any other use of the public key


def _mul(tree, mask):
    return jax.tree.map(lambda a, m: (a * m).astype(a.dtype), tree, mask)


def drop_mask(method: str, rate: float, key, params, prune_mask, kept_counts):
    """The per-step mask of kept-and-not-dropped coordinates (1.0) for method none | random | magnitude.

    kept_counts: per leaf, the static number of weights the prune mask keeps (None for unprunable leaves).
    """
    if method == "none" or rate == 0:
        return prune_mask
    leaves, treedef = jax.tree.flatten(params)
    keys = jax.random.split(key, len(leaves))
    out = []
    counts = jax.tree.leaves(kept_counts, is_leaf=lambda x: x is None)
    for p, m, k, n in zip(leaves, jax.tree.leaves(prune_mask), keys, counts):
        if n is None:
            out.append(m)
            continue
        if method == "random":
            scores = jax.random.uniform(k, p.shape)
        elif method == "magnitude":
            scores = jnp.abs(p).astype(jnp.float32)
        else:
            raise ValueError(f"unknown grad_drop_method {method!r}")
        scores = jnp.where(m > 0, scores, -jnp.inf)  # pruned weights are never selected
        out.append(pruning.top_k_mask(scores, pruning.kept_count(n, rate)))
    return jax.tree.unflatten(treedef, out)


def static_kept_counts(params, prune_mask):
    """Per leaf: the number of weights kept by the (concrete) prune mask, None for unprunable leaves."""
    import numpy as np

    return jax.tree.map(lambda p, m: int(np.asarray(m).sum()) if pruning.is_prunable(p) else None,
                        params, prune_mask)


def make_masked_train_step(build_grad_sum: Callable, logits_fn, optimizer: optax.GradientTransformation, *,
                           noise_std: float, expected_batch_size: float, prune_mask, kept_counts,
                           drop_method: str = "none", drop_rate: float = 0.0, ema_decay: float = 0.0):
    """step(state, batch, noise_key, aug_key, public_key) -> (state, metrics) like dp.step.make_train_step,
    with masks: noise_key and aug_key as there (secret; the views keyed by each row's dataset index),
    public_key draws the random drop mask (it reads no data).

    build_grad_sum(logits_fn) -> grad_sum (the engine's clipped or plain per-chunk sum); it is called
    inside the step with the masked logits_fn, so the per-step mask is part of the traced program.
    """

    def step(state: dp_step.TrainState, batch: dict, noise_key: jax.Array, aug_key: jax.Array,
             public_key: jax.Array):
        mask = drop_mask(drop_method, drop_rate, jax.random.fold_in(public_key, _DROP_STREAM), state.params,
                         prune_mask, kept_counts)
        grad_sum = build_grad_sum(pruning.masked_logits_fn(logits_fn, mask))
        grads, metrics = dp_step.make_noisy_grad_sum(grad_sum, noise_std)(state.params, batch, noise_key, aug_key)
        grads = jax.tree.map(lambda g: g / expected_batch_size, _mul(grads, mask))
        return dp_step.apply_update(state, grads, optimizer, ema_decay, metrics, lambda u: _mul(u, mask))

    return step
