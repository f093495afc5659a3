"""Mixed precision (train.compute_dtype): the model's forward and backward passes in bfloat16 where asked,
everything the privacy guarantee rests on in float32.

`in_compute_dtype(logits_fn, dtype)` casts the parameters and the input to `dtype` inside the model call
and its logits back to float32, so the loss is float32. The parameters are stored and updated in float32,
and the transpose of a cast casts back: every gradient leaf is float32. Per-example norms, the clipping
weights, the clipped sum, its accumulation over chunks and the noise are float32 too: tanplan.dp.ghost
takes each layer's input and output gradient up to float32 before it forms norms and sums, jax-privacy's
vmap route takes the norms of the float32 gradients, and tanplan.dp.step adds N(0, σ²C²) to a float32
sum (jax-privacy's sharp edges: clipping, accumulation and noise at float32 or wider). Each example's
contribution is therefore its gradient, computed in bfloat16, clipped to C in float32: the sensitivity
stays C (up to float32 rounding) and the noise std σC, whatever the compute dtype.
"""

from __future__ import annotations

from typing import Callable

import jax
import jax.numpy as jnp


def in_compute_dtype(logits_fn: Callable, dtype: str = "float32") -> Callable:
    """logits_fn(params, x) computed in `dtype` (float32: logits_fn itself), logits returned as float32.
    The result's `full_precision` is logits_fn: the per-layer route's structural self-check runs on it."""
    if dtype == "float32":
        return logits_fn
    low = jnp.dtype(dtype)

    def cast(a):
        return a.astype(low) if jnp.issubdtype(a.dtype, jnp.floating) else a

    def low_precision(params, x):
        return logits_fn(jax.tree.map(cast, params), cast(x)).astype(jnp.float32)

    low_precision.full_precision = logits_fn
    return low_precision
