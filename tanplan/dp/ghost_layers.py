"""Per-example squared gradient norms, and the weighted sum Σ_i w_i·g_i, of the layer kinds that the
per-layer route (tanplan.dp.ghost) handles beside Dense and Conv: DenseGeneral (attention projections),
Embed, and tanplan's weight-standardised convolution (WSConv).

Each handler takes the layer's recorded input a (N rows, N = n examples × K views) and the gradient d of
its output, and returns (squared norms (n,), weighted) where weighted(w) is Σ_i w_i·g_i as the layer's
parameter dict; rows with w_i = 0 (padding, non-finite norms) are excluded with `where`, never a product,
so that inf/nan in them cannot leak into the sum. The norms are those of each example's exact gradient,
so w_i = min(1, C/||g_i||) bounds each example's contribution to the sum by C: sensitivity C under
add/remove-one (tanplan.dp.ghost), and the noise N(0, σ²C²) covers the whole sum (tanplan.dp.step).
"""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp

from tanplan.models.layers import WSConv, standardize

_HIGHEST = jax.lax.Precision.HIGHEST  # norms decide the clipping: no reduced-precision matmuls there


def gram_cheaper(positions: int, dim_in: int, dim_out: int) -> bool:
    """Whether a layer with gradient a_iᵀ·d_i (T positions, D inputs, O outputs) takes Gram norms rather
    than forming each example's gradient: Gram norms cost T²(D + O) an example, forming it T·D·O. After
    Gram norms the weighted sum still needs a^T(w⊙d), T·D·O more, but as ONE large matrix product, where
    forming runs n small ones. Timed on the loaded 2-core CPU (issue #46), the clipped grad-sum of cnn1d at
    B 256 took 104-128 ms where FLOPs alone chose (Gram when T²(D + O) < D·O) and 89-96 ms with this rule,
    ViT-Tiny's at B 32 3% less: so the large product is not counted."""
    return positions * (dim_in + dim_out) < dim_in * dim_out


def dense_general_axes(module: nn.DenseGeneral, ndim: int) -> int | None:
    """How many trailing input axes a DenseGeneral contracts, or None when the route cannot take it
    (batch_dims, or contracted axes that are not the trailing ones)."""
    if module.batch_dims:
        return None
    axis = (module.axis,) if isinstance(module.axis, int) else tuple(module.axis)
    axes = sorted(a % ndim for a in axis)
    if 0 in axes or axes != list(range(ndim - len(axes), ndim)):
        return None
    return len(axes)


def dense_general_inputs(module: nn.DenseGeneral, a, d):
    """(a, d) of a DenseGeneral flattened to a Dense's: (N, ..., prod(in axes)) and (N, ..., prod(features))."""
    k = dense_general_axes(module, a.ndim)
    features = (module.features,) if isinstance(module.features, int) else tuple(module.features)
    a = a.reshape(a.shape[: a.ndim - k] + (-1,))
    d = d.reshape(d.shape[: d.ndim - len(features)] + (-1,))
    return a, d


def embed_route(module: nn.Embed, ids, d, n: int, need_norms: bool = True):
    """Embed: example i's gradient scatters its output gradients into the rows of its ids, so
    ||g_i||² = Σ_{t,s} [id_t = id_s]·<d_t, d_s> (a T×T Gram with an equality mask; the table's
    per-example gradient, vocabulary × features, is never formed). Out-of-range ids get no gradient."""
    vocab = module.num_embeddings
    ids = ids.reshape(n, -1)
    d = d.reshape(n, ids.shape[1], -1).astype(jnp.float32)
    valid = (ids >= 0) & (ids < vocab)
    d = jnp.where(valid[..., None], d, 0.0)
    sq = jnp.zeros((n,), jnp.float32)
    if need_norms:
        same = (ids[:, :, None] == ids[:, None, :]) & valid[:, :, None] & valid[:, None, :]
        gram = jnp.einsum("ntf,nsf->nts", d, d, precision=_HIGHEST)
        sq = jnp.sum(jnp.where(same, gram, 0.0), axis=(1, 2))

    def weighted(w):
        keep = (w > 0)[:, None, None]
        rows = jnp.where(keep, d * w[:, None, None], 0.0).reshape(-1, d.shape[-1])
        table = jnp.zeros((vocab, d.shape[-1]), jnp.float32)
        return {"embedding": table.at[jnp.where(valid, ids, 0).reshape(-1)].add(rows)}

    return sq, weighted


def is_wsconv(module, a) -> bool:
    return type(module) is WSConv and a.ndim == len(module.kernel_size) + 2


def wsconv_route(module: WSConv, params, patches, d, n: int, budget: int, need_norms: bool = True):
    """WSConv: the output is conv(a, W) + b with W = standardize(kernel, gain), so example i's gradient
    of W is G_i = patches_iᵀ·d_i and its gradient of (kernel, gain) is the vjp of `standardize` at G_i
    (linear in G_i: the weighted sum is that vjp at Σ_i w_i·G_i). The norms come from the formed G_i when
    they fit in `budget` bytes and Gram norms do not cost less (`gram_cheaper`), else from Gram matrices
    (`_wsconv_gram_norms`)."""
    kernel = params["kernel"]
    rows = patches.reshape(n, -1, patches.shape[-1]).astype(jnp.float32)
    d = d.reshape(n, -1, d.shape[-1]).astype(jnp.float32)
    positions, dim_in, dim_out = rows.shape[1], rows.shape[2], d.shape[2]
    _, pullback = jax.vjp(lambda k, g: standardize(k, g, module.eps), kernel, params["gain"])
    bias_rows = jnp.sum(d, axis=1)
    if need_norms and not gram_cheaper(positions, dim_in, dim_out) and 2 * n * dim_in * dim_out * 4 <= budget:
        return _wsconv_formed(rows, d, bias_rows, pullback, kernel.shape, "bias" in params, n)
    sq = jnp.zeros((n,), jnp.float32)
    if need_norms:
        sq = _wsconv_gram_norms(rows, d, kernel.reshape(dim_in, dim_out), params["gain"], module.eps)
    if need_norms and "bias" in params:
        sq = sq + jnp.sum(bias_rows**2, -1)

    def weighted(w):
        keep = (w > 0)[:, None, None]
        dw = jnp.where(keep, d * w[:, None, None], 0.0)  # where, not product: padding rows may hold inf/nan
        summed = jnp.einsum("ntd,nto->do", jnp.where(keep, rows, 0.0), dw, precision=_HIGHEST)
        kernel_g, gain_g = pullback(summed.reshape(kernel.shape))
        grads = {"kernel": kernel_g, "gain": gain_g}
        if "bias" in params:
            grads["bias"] = jnp.sum(dw, axis=(0, 1))
        return grads

    return sq, weighted


def _wsconv_formed(rows, d, bias_rows, pullback, kernel_shape, use_bias: bool, n: int):
    """Norms and weighted sum from each example's formed gradient of (kernel, gain, bias)."""
    weight_grads = jnp.einsum("ntd,nto->ndo", rows, d, precision=_HIGHEST).reshape((n,) + kernel_shape)
    kernel_g, gain_g = jax.vmap(pullback)(weight_grads)
    per_example = {"kernel": kernel_g, "gain": gain_g}
    if use_bias:
        per_example["bias"] = bias_rows
    per_example = jax.tree.map(jnp.nan_to_num, per_example)
    sq = sum(jnp.sum(g.reshape(n, -1) ** 2, -1) for g in per_example.values())

    def weighted(w):
        keep = w > 0
        return {k: jnp.tensordot(w, jnp.where(keep.reshape((n,) + (1,) * (g.ndim - 1)), g, 0.0), axes=1)
                for k, g in per_example.items()}

    return sq, weighted


def _wsconv_gram_norms(rows, d, kernel, gain, eps):
    """Σ ||∂/∂(kernel, gain)||² per example without forming G_i = rows_iᵀ·d_i (F = fan-in, per output
    channel o: z = kernel - mean, r = (var·F + eps)^-1/2, m = mean_d G, c = <z, G>):
        ∂kernel = r·g·(G - m - r²·c·z),  so ||∂kernel||² = (r g)²(||G||² - F m² - 2 r² c² + r⁴ ||z||² c²),
        ∂gain = r·c.
    ||G_o||² weighted over o comes from the T×T Grams, m and c from products no larger than the layer's."""
    fan_in = kernel.shape[0]
    z = kernel - jnp.mean(kernel, axis=0)
    r = jax.lax.rsqrt(jnp.var(kernel, axis=0) * fan_in + eps)
    alpha = (r * gain) ** 2
    gram_a = jnp.einsum("ntd,nsd->nts", rows, rows, precision=_HIGHEST)
    gram_d = jnp.einsum("nto,nso,o->nts", d, d, alpha, precision=_HIGHEST)
    g_sq = jnp.sum(gram_a * gram_d, axis=(1, 2))
    m = jnp.einsum("nt,nto->no", jnp.sum(rows, -1), d, precision=_HIGHEST) / fan_in
    c = jnp.einsum("nto,nto->no", jnp.einsum("ntd,do->nto", rows, z, precision=_HIGHEST), d)
    z_sq = jnp.sum(z**2, axis=0)
    rest = alpha * (-fan_in * m**2 - 2 * r**2 * c**2 + r**4 * z_sq * c**2)
    kernel_sq = jnp.maximum(g_sq + jnp.sum(rest, -1), 0.0)  # rounding only: the exact value is a norm
    return kernel_sq + jnp.sum((r * c) ** 2, -1)
