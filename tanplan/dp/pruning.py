"""Pre-pruning masks (Adamczewski et al. 2023 §3.1): random, SynFlow (data-free) and DP-SNIP (one private release).

A mask is a pytree like the params with 1.0 (kept) and 0.0 (pruned). Only weight matrices and kernels
(leaves with ndim ≥ 2) are pruned; biases and normalisation scales keep a mask of ones. Each layer
keeps the same fraction 1 − rate of its weights (per-layer top-k, so no layer collapses).
Pruned weights are set to 0 once and then never change: tanplan.dp.grad_drop gives them neither
gradient nor noise and masks their updates.

Privacy: random and SynFlow read no data (no privacy cost). DP-SNIP reads one Poisson batch:
`dp_snip_scores` returns Σ_i clip_C(θ ⊙ ∇_θ loss_i(θ)) + N(0, σ_snip²C²) — each example's saliency is
clipped to L2 norm C before the sum, so the sum has sensitivity C under ADD_OR_REMOVE_ONE and the release
is one Poisson-subsampled Gaussian mechanism with multiplier σ_snip (tanplan.privacy.snip_budget composes
it with the training). The mask is post-processing of that release.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from tanplan.dp import clipping
from tanplan.dp import step as dp_step


def is_prunable(leaf) -> bool:
    """Weight matrices and kernels only: biases and norm scales are never pruned or dropped."""
    return getattr(leaf, "ndim", 0) >= 2


def ones_mask(params):
    return jax.tree.map(lambda p: jnp.ones(p.shape, jnp.float32), params)


def apply_mask(params, mask):
    """params ⊙ mask (pruned weights set to 0)."""
    return jax.tree.map(lambda p, m: (p * m).astype(p.dtype), params, mask)


def gradient_mask(params, mask):
    """Identity on values; the gradient through it is multiplied by mask (0/1).

    p·m + stop_gradient(p·(1 − m)) equals p exactly for m ∈ {0, 1}, and ∂/∂p = m. Wrapping the model's
    parameters with it makes every per-example gradient masked BEFORE it is clipped.
    """
    return jax.tree.map(lambda p, m: p * m + jax.lax.stop_gradient(p * (1 - m)), params, mask)


def masked_logits_fn(logits_fn, mask):
    """logits_fn whose parameter gradients are masked (see gradient_mask)."""
    return lambda p, x: logits_fn(gradient_mask(p, mask), x)


def kept_count(size: int, rate: float) -> int:
    """Weights a layer of `size` keeps at pruning/dropping rate `rate` (at least one)."""
    return max(1, size - int(round(rate * size)))


def top_k_mask(scores: jax.Array, k: int) -> jax.Array:
    """1.0 at the k largest scores of the leaf (ties broken by position), 0.0 elsewhere."""
    flat = scores.reshape(-1)
    if k >= flat.size:
        return jnp.ones(scores.shape, jnp.float32)
    _, idx = jax.lax.top_k(flat, k)
    return jnp.zeros(flat.shape, jnp.float32).at[idx].set(1.0).reshape(scores.shape)


def layer_top_k(scores, params, rate: float, within=None):
    """Per prunable leaf, keep the top (1 − rate) fraction by score (of the `within` mask's ones)."""

    def one(s, p, w):
        if not is_prunable(p):
            return jnp.ones(p.shape, jnp.float32)
        n = p.size if w is None else int(np.asarray(w).sum())
        s = s if w is None else jnp.where(w > 0, s, -jnp.inf)
        return top_k_mask(s, kept_count(n, rate))

    within_leaves = jax.tree.leaves(within) if within is not None else [None] * len(jax.tree.leaves(params))
    treedef = jax.tree.structure(params)
    leaves = [one(s, p, w) for s, p, w in zip(jax.tree.leaves(scores), jax.tree.leaves(params), within_leaves)]
    return jax.tree.unflatten(treedef, leaves)


def random_mask(key, params, rate: float):
    """Uniformly random per-layer mask: each prunable leaf keeps exactly kept_count(size, rate) weights."""
    leaves, treedef = jax.tree.flatten(params)
    keys = jax.random.split(key, len(leaves))
    scores = jax.tree.unflatten(treedef, [jax.random.uniform(k, p.shape) for k, p in zip(keys, leaves)])
    return layer_top_k(scores, params, rate)


def synflow_scores(logits_fn, params, example_x, mask=None):
    """SynFlow saliency |θ ⊙ ∂R/∂θ|, R = 1ᵀ f_{|θ|}(1): the model on |θ| (masked) and an all-ones input.

    Reads no data (the input is all ones). In float32: very deep models may under/overflow.
    """
    mask = ones_mask(params) if mask is None else mask
    abs_params = jax.tree.map(lambda p, m: jnp.abs(p) * m, params, mask)
    ones = jnp.ones((1,) + tuple(example_x.shape[1:]), jnp.float32)
    grads = jax.grad(lambda p: jnp.sum(logits_fn(p, ones)))(abs_params)
    return jax.tree.map(lambda p, g: jnp.abs(p * g), abs_params, grads)


def synflow_mask(logits_fn, params, example_x, rate: float, iterations: int = 10):
    """Iterative SynFlow (Tanaka et al. 2020): prune to (1 − rate)^(j/n) per layer over n rounds."""
    mask = ones_mask(params)
    for j in range(1, iterations + 1):
        keep = (1.0 - rate) ** (j / iterations)
        scores = synflow_scores(logits_fn, params, example_x, mask)
        mask = layer_top_k(scores, params, 1.0 - keep)
    return mask


def snip_grad_sum(logits_fn, params, clip_norm: float | None):
    """grad_sum over a chunk of the per-example saliencies θ ⊙ ∇loss_i, clipped to C (None: unclipped).

    The saliency is the gradient with respect to a connectivity c at c = 1 of loss(θ ⊙ c) (SNIP), so
    the engine's clipped grad-sum applies unchanged, with c (all ones) in place of the parameters.
    """
    connect = lambda c, x: logits_fn(jax.tree.map(lambda p, ci: p * ci, params, c), x)  # noqa: E731
    if clip_norm is None:
        return clipping.nonprivate_grad_sum(connect)
    return clipping.clipped_grad_sum(connect, clip_norm)


def dp_snip_scores(logits_fn, params, batch: dict, noise_key, clip_norm: float | None, noise_std: float):
    """Σ_i clip_C(θ ⊙ ∇loss_i) + N(0, noise_std²) over one padded Poisson batch {x, y, mask}.

    Guarantee: sensitivity C (ADD_OR_REMOVE_ONE); with noise_std = σ_snip·C one Poisson-subsampled
    Gaussian mechanism with multiplier σ_snip. clip_norm None and noise_std 0: plain (non-private) SNIP.
    noise_key must be secret (tanplan.dp.secret), as must the batch's selection.
    """
    noisy_sum = dp_step.make_noisy_grad_sum(snip_grad_sum(logits_fn, params, clip_norm), noise_std)
    scores, _ = noisy_sum(ones_mask(params), batch, noise_key, noise_key)  # no augmentation: the 2nd key is unused
    return scores


def dp_snip_mask(logits_fn, params, batch: dict, noise_key, rate: float, clip_norm: float | None, noise_std: float):
    """Per-layer top-(1 − rate) of |noisy saliency sum| (post-processing of the DP-SNIP release)."""
    scores = dp_snip_scores(logits_fn, params, batch, noise_key, clip_norm, noise_std)
    return layer_top_k(jax.tree.map(jnp.abs, scores), params, rate)


def kept_fraction(mask) -> float:
    """Fraction of all parameters kept by the mask."""
    leaves = jax.tree.leaves(mask)
    return float(sum(float(jnp.sum(m)) for m in leaves) / sum(m.size for m in leaves))
