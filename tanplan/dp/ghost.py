"""Clipped gradient sums from per-layer norms, without jax.vmap over per-example model gradients.

The vmap route (tanplan.dp.clipping, jax-privacy's `clipped_grad`) differentiates the whole model once
per example: B copies of every weight gradient, and convolution weight-gradients run one example at a
time. Here instead ("ghost clipping" with "book-keeping"; Li et al. 2022, Bu et al. 2022):

1. one forward and backward pass of Σ_i loss_i, with a zero "perturbation" added to the output of every
   parameterised layer (a flax method interceptor), gives for each layer l its inputs a_l and the
   gradients δ_l of its outputs; rows do not interact (no BatchNorm), so row i of δ_l is example i's own.
   No weight gradient is computed in this pass;
2. example i's squared gradient norm is Σ_l ||∂loss_i/∂θ_l||², each term from (a_l,i, δ_l,i) alone:
   Dense (also over token sequences), DenseGeneral (attention projections) and Conv (through patches)
   have gradient a_i^T·δ_i, whose norm comes from ||a||·||δ|| (one position), the T×T Gram identity
   <a a^T, δ δ^T> or the formed a_i^T·δ_i, whichever costs less at the layer's shapes (and fits);
   Embed from a Gram with an equality mask, WSConv from its formed kernel gradient chained through the
   weight standardisation (tanplan.dp.ghost_layers); parameters a module owns beside its sub-layers
   (a skip gain) by replaying its glue code with the sub-layers' recorded outputs (tanplan.dp.ghost_owner);
   any other layer (GroupNorm, LayerNorm scales and biases, ...) by vmapping its own vjp over examples;
3. w_i = min(1, C/||g_i||) (0 for padding rows and for non-finite norms), and the clipped sum
   Σ_i w_i·g_i is assembled layer by layer: one product a^T(w ⊙ δ), or Σ_i w_i·G_i from the formed G_i.

Guarantee: the result equals Σ_i clip_C(g_i) up to floating-point rounding, so adding or removing one
example changes it by at most C (L2): sensitivity C under ADD_OR_REMOVE_ONE, as tanplan.privacy.accounting
assumes. Only the parameters given are differentiated: with frozen ones merged in by logits_fn
(tanplan.dp.partition), a layer holding none of them is not recorded, so it adds nothing to the norms
and costs no backward pass of its own; a layer holding some but not all is refused (the vmap route).
It relies on every parameter living in exactly one layer called once per example row (a module's own
parameters beside sub-layers count as its layer, when they do not feed a sub-layer's input);
`unsupported_reason` checks that structure and compares the norms with directly computed per-example
gradients on a small batch before a run uses this route (train.grad_method = "auto" falls back to the
vmap route otherwise). Per-example losses and accuracies come back unprivatised (diagnostics only).
Weight gradients are matrix products, never convolution weight-gradients: XLA's CPU backend runs the
latter two orders of magnitude slower inside loops such as the accumulation scan.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from tanplan.dp import augmult, ghost_layers, ghost_owner

_HIGHEST = jax.lax.Precision.HIGHEST  # norms decide the clipping: no reduced-precision matmuls there


@dataclasses.dataclass
class _Call:
    path: tuple[str, ...]
    module: nn.Module  # unbound copy of the layer, to re-apply it to its recorded input
    out_shape: jax.ShapeDtypeStruct
    in_rows: int
    own: tuple[str, ...] | None = None  # a module with sub-layers: the parameters it owns itself (else None)
    inner: range = range(0)  # such a module's recorded sub-layer calls (indices into the tape's calls)


class _Tape:
    """Method interceptor: records each parameterised layer's input; adds perturbations to outputs."""

    def __init__(self, params, perturbations=None):
        self.params = params  # the parameters differentiated: a layer with none of them is frozen, not recorded
        self.perturbations = perturbations
        self.calls: list[_Call] = []
        self.inputs: list[jax.Array] = []
        self.outputs: list[jax.Array] = []  # read only by modules that own parameters beside sub-layers
        self.variables: list[Any] = []  # such a module's variables (frozen ones merged in), else None
        self.problems: list[str] = []

    def __call__(self, next_fun, args, kwargs, context):
        module = context.module
        params = module.variables.get("params", {}) if module.scope is not None else {}
        own = [k for k, v in params.items() if not isinstance(v, dict) and not hasattr(v, "items")]
        if not own:
            return next_fun(*args, **kwargs)
        path = "/".join(module.path)
        mine = _subtree(self.params, tuple(module.path))
        if mine is None:  # frozen (tanplan.dp.partition): no perturbation, no norm, no backward pass for it
            return next_fun(*args, **kwargs)
        owner = len(own) != len(params)  # parameters of its own beside sub-layers: ghost_owner
        if owner and not any(k in mine for k in own):  # its own parameters frozen: only its sub-layers train
            return next_fun(*args, **kwargs)
        if any(k not in mine for k in own):
            self.problems.append(f"layer {path} is partly frozen")
        if context.method_name != "__call__":
            if context.method_name != "setup" and not context.method_name.startswith("_"):
                self.problems.append(f"layer {path} is used through its method {context.method_name}")
            return next_fun(*args, **kwargs)
        if len(args) != 1 or kwargs:
            self.problems.append(f"layer {path} is called with more than one input")
        first = len(self.calls)
        out = next_fun(*args, **kwargs)
        index = len(self.calls)
        x = args[0]
        self.calls.append(_Call(tuple(module.path), module.clone(parent=None),
                                jax.ShapeDtypeStruct(jnp.shape(out), jnp.result_type(out)), jnp.shape(x)[0],
                                tuple(own) if owner else None, range(first, index) if owner else range(0)))
        self.inputs.append(x)
        self.variables.append(jax.tree.map(lambda v: v, dict(module.variables)) if owner else None)
        if self.perturbations is not None:
            out = out + self.perturbations[index]
        self.outputs.append(out)
        return out


def _record(losses_fn, params, x, y, keys, mask, perturbations=None):
    tape = _Tape(params, perturbations)
    with nn.intercept_methods(tape):
        losses, acc = losses_fn(params, x, y, keys)
    total = jnp.sum(jnp.where(mask, losses, 0.0))
    return total, (losses, acc, tape)


def _leaf_paths(params) -> dict[tuple[str, ...], Any]:
    flat = jax.tree_util.tree_flatten_with_path(params)[0]
    return {tuple(str(getattr(k, "key", k)) for k in path): leaf for path, leaf in flat}


def _structure_problems(calls: list[_Call], tape_problems: list[str], params, rows: int) -> list[str]:
    problems = list(tape_problems)
    leaves = _leaf_paths(params)
    covered: dict[tuple[str, ...], int] = {}
    for call in calls:
        sub = _subtree(params, call.path)
        if sub is None:
            problems.append(f"layer {'/'.join(call.path)} has no parameters at its path")
            continue
        if call.own is not None:  # a module with sub-layers covers only the parameters it owns itself
            sub = {k: sub[k] for k in call.own if k in sub}
        for leaf_path in _leaf_paths(sub):
            covered[call.path + leaf_path] = covered.get(call.path + leaf_path, 0) + 1
        if call.in_rows != rows or (call.out_shape.shape[:1] != (rows,)):
            problems.append(f"layer {'/'.join(call.path)} does not keep one row per example")
    for path in leaves:
        if covered.get(path, 0) == 0:
            problems.append(f"parameter {'/'.join(path)} is outside every layer call")
        elif covered[path] > 1:
            problems.append(f"parameter {'/'.join(path)} is used by more than one call (shared weights)")
    return problems


def _subtree(params, path):
    node = params
    for name in path:
        if not hasattr(node, "keys") or name not in node:
            return None
        node = node[name]
    return node


# ----------------------------------------------------------------------------------------------------
# Per-example squared norms of one layer


def _outer_sq_norms(a: jax.Array, d: jax.Array) -> jax.Array:
    """||a_i^T d_i||_F² per example for a (n, T, D), d (n, T, O), without forming a_i^T d_i:
    ||a||²·||d||² for T = 1, else the Gram identity <a a^T, d d^T> (O(T²) memory per example)."""
    if a.shape[1] == 1:
        return jnp.sum(a[:, 0] ** 2, -1) * jnp.sum(d[:, 0] ** 2, -1)
    gram_a = jnp.einsum("ntd,nsd->nts", a, a, precision=_HIGHEST)
    gram_d = jnp.einsum("nto,nso->nts", d, d, precision=_HIGHEST)
    return jnp.sum(gram_a * gram_d, axis=(1, 2))


# Per-example weight gradients of a layer are formed when they fit in this many bytes on one device;
# above it, the norms come from Gram matrices (more arithmetic, O(T²) memory per example).
MAX_PER_EXAMPLE_BYTES = 1 << 28


def _matrix_route(a, d, n, use_bias: bool, kernel_shape, need_norms: bool = True, budget: int | None = None):
    """Per-example squared norms and the weighted sum for a layer whose gradient is a^T·δ (+ Σδ).

    a (n·rows, ..., D) are the layer's inputs (or patches), d (n·rows, ..., O) its output gradients,
    T positions per example. By cost: T = 1 (dense layers): norms ||a||·||δ||, then one product a^T(w⊙δ);
    Gram norms cheaper (ghost_layers.gram_cheaper: few positions, wide layers): Gram norms, then the same
    product; otherwise (convolutions on large maps), if they fit in `budget` bytes (None: MAX_PER_EXAMPLE_BYTES): form each example's
    gradient G_i = a_i^T δ_i once and take both its norm and Σ w_i G_i from it (no second product; the
    clipped terms are exactly the ones measured).
    """
    a = a.reshape(n, -1, a.shape[-1]).astype(jnp.float32)
    d = d.reshape(n, -1, d.shape[-1]).astype(jnp.float32)
    positions, dim_in, dim_out = a.shape[1], a.shape[2], d.shape[2]
    bias_rows = jnp.sum(d, 1) if use_bias else None
    sq = None
    gram_cheaper = ghost_layers.gram_cheaper(positions, dim_in, dim_out)
    fits = n * dim_in * dim_out * 4 <= (MAX_PER_EXAMPLE_BYTES if budget is None else budget)
    if need_norms and positions > 1 and not gram_cheaper and fits:
        per_example = jnp.einsum("ntd,nto->ndo", a, d)
        sq = jnp.sum(per_example**2, axis=(1, 2))
        if use_bias:
            sq = sq + jnp.sum(bias_rows**2, -1)

        def weighted_from_examples(w):
            keep = w > 0  # where, not product: padding rows may hold inf/nan
            grads = {"kernel": jnp.einsum("n,ndo->do", w, jnp.where(keep[:, None, None], per_example, 0.0))
                     .reshape(kernel_shape)}
            if use_bias:
                grads["bias"] = jnp.einsum("n,no->o", w, jnp.where(keep[:, None], bias_rows, 0.0))
            return grads

        return sq, weighted_from_examples
    if need_norms:
        sq = _outer_sq_norms(a, d)
        if use_bias:
            sq = sq + jnp.sum(bias_rows**2, -1)

    def weighted(w):
        keep = (w > 0)[:, None, None]
        dw = jnp.where(keep, d * w[:, None, None], 0.0)  # where, not product: padding rows may hold inf/nan
        grads = {"kernel": jnp.einsum("ntd,nto->do", jnp.where(keep, a, 0.0), dw).reshape(kernel_shape)}
        if use_bias:
            grads["bias"] = jnp.sum(dw, axis=(0, 1))
        return grads

    return sq, weighted


def _conv_geometry(module: nn.Conv, rank: int):
    """(kernel size, strides, dilation, lax padding, pre-pad) of a flax Conv, or None if unsupported."""
    kernel = (module.kernel_size,) if isinstance(module.kernel_size, int) else tuple(module.kernel_size)
    if len(kernel) != rank:
        return None
    bc = lambda v: (1,) * rank if v is None else ((v,) * rank if isinstance(v, int) else tuple(v))  # noqa: E731
    strides, dilation, in_dilation = bc(module.strides), bc(module.kernel_dilation), bc(module.input_dilation)
    if any(v != 1 for v in in_dilation) or module.feature_group_count != 1 or module.mask is not None:
        return None
    if not module.shared_weights:
        return None
    padding = nn.linear.canonicalize_padding(module.padding, rank)
    prepad = None
    if padding in ("CIRCULAR", "REFLECT"):
        sizes = [(k - 1) * r + 1 for k, r in zip(kernel, dilation)]
        prepad = ([(0, 0)] + [((s - 1) // 2, s // 2) for s in sizes] + [(0, 0)],
                  {"CIRCULAR": "wrap", "REFLECT": "reflect"}[padding])
        padding = "VALID"
    elif padding == "CAUSAL":
        if rank != 1:
            return None
        prepad = ([(0, 0), (dilation[0] * (kernel[0] - 1), 0), (0, 0)], "constant")
        padding = "VALID"
    return kernel, strides, dilation, padding, prepad


def _patches(a, kernel, strides, dilation, padding):
    """(n, *spatial, C) -> (n, *out_spatial, prod(kernel)·C) by strided slices of the padded input.

    lax.conv_general_dilated_patches would do it as a convolution with a one-hot kernel, C times the
    work of the convolution itself on CPU; slicing is only data movement. Column order is irrelevant
    here: only norms of patches^T·δ are taken.
    """
    rank = len(kernel)
    dilated = [(k - 1) * r + 1 for k, r in zip(kernel, dilation)]
    if isinstance(padding, str):
        pads = jax.lax.padtype_to_pads(a.shape[1:-1], dilated, strides, padding)
    else:
        pads = list(padding)
    a = jnp.pad(a, [(0, 0)] + [tuple(p) for p in pads] + [(0, 0)])
    out = [(a.shape[1 + i] - dilated[i]) // strides[i] + 1 for i in range(rank)]
    cols = []
    for offset in np.ndindex(*kernel):
        start = [0] + [o * r for o, r in zip(offset, dilation)] + [0]
        limit = [a.shape[0]] + [s + (m - 1) * st + 1 for s, m, st in zip(start[1:], out, strides)] + [a.shape[-1]]
        cols.append(jax.lax.slice(a, start, limit, [1] + list(strides) + [1]))
    return jnp.concatenate(cols, axis=-1)


def _conv_patches(module: nn.Conv, a):
    rank = a.ndim - 2
    kernel, strides, dilation, padding, prepad = _conv_geometry(module, rank)
    if prepad is not None:
        a = jnp.pad(a, prepad[0], mode=prepad[1])
    return _patches(a, kernel, strides, dilation, padding)


def _generic_route(call: _Call, params, a, d, n, need_norms: bool = True):
    """Any other layer: each example's gradient of its parameters by vmapping the layer's own vjp.

    Without need_norms (non-private sums) no per-example gradient is formed: one batched vjp.
    """
    if not need_norms:
        def weighted_batch(w):
            rows = jnp.repeat(w, a.shape[0] // n).reshape((-1,) + (1,) * (d.ndim - 1))
            _, vjp = jax.vjp(lambda p: call.module.apply({"params": p}, jnp.where(rows > 0, a, 0)), params)
            return vjp(jnp.where(rows > 0, d * rows.astype(d.dtype), 0))[0]

        return jnp.zeros((n,), jnp.float32), weighted_batch

    a = a.reshape((n, -1) + a.shape[1:])
    d = d.reshape((n, -1) + d.shape[1:])

    def one(ai, di):
        _, vjp = jax.vjp(lambda p: call.module.apply({"params": p}, ai), params)
        return vjp(di)[0]

    per_example = jax.tree.map(jnp.nan_to_num, jax.vmap(one)(a, d))
    sq = sum(jnp.sum(jnp.reshape(g, (n, -1)).astype(jnp.float32) ** 2, -1) for g in jax.tree.leaves(per_example))

    def weighted(w):
        return jax.tree.map(lambda g: jnp.tensordot(w, g.astype(jnp.float32), axes=1), per_example)

    return sq, weighted


def _kind(call: _Call, a) -> str:
    m = call.module
    if call.own is not None:
        return "owner"
    if type(m) is nn.Dense:
        return "dense"
    if type(m) is nn.DenseGeneral and jnp.ndim(a) >= 2 and ghost_layers.dense_general_axes(m, jnp.ndim(a)):
        return "dense_general"
    if type(m) is nn.Conv and jnp.ndim(a) >= 3 and _conv_geometry(m, jnp.ndim(a) - 2) is not None:
        return "conv"
    if type(m) is nn.Embed and m.num_embeddings > 1 and jnp.issubdtype(jnp.result_type(a), jnp.integer):
        return "embed"
    if ghost_layers.is_wsconv(m, a):
        return "wsconv"
    return "generic"


def _layer_route(calls: list[_Call], index: int, p, a, d, n: int, need_norms: bool, budget: int, tape_out):
    """(squared norms (n,), weighted) of the recorded layer call calls[index], by its kind; weighted(w) =
    Σ_i w_i·g_i shaped like the layer's parameters. tape_out: (outputs, variables) of the recording pass."""
    call = calls[index]
    kind = _kind(call, a)
    if kind == "owner":  # its sub-layers are replayed from their recorded outputs
        outputs, variables = tape_out
        inner = {calls[i].path: _at_least_f32(outputs[i]) for i in call.inner}
        return ghost_owner.owner_route(call.module, variables[index], call.own, call.path, a, d, inner, n)
    if kind == "embed":
        return ghost_layers.embed_route(call.module, a, d, n, need_norms)
    if kind == "wsconv":
        patches = _patches(a, call.module.kernel_size, call.module.strides, (1,) * (a.ndim - 2), "SAME")
        return ghost_layers.wsconv_route(call.module, p, patches, d, n, budget, need_norms)
    if kind == "generic":
        return _generic_route(call, p, a, d, n, need_norms)
    if kind == "conv":
        a = _conv_patches(call.module, a)
    elif kind == "dense_general":
        a, d = ghost_layers.dense_general_inputs(call.module, a, d)
    sq, weighted = _matrix_route(a, d, n, "bias" in p, p["kernel"].shape, need_norms, budget)
    return sq, lambda w: {k: g.reshape(p[k].shape) for k, g in weighted(w).items()}


def _at_least_f32(a):
    """A layer's input or output gradient, in float32 where the model computed in a narrower float."""
    return a.astype(jnp.promote_types(a.dtype, jnp.float32)) if jnp.issubdtype(a.dtype, jnp.floating) else a


# ----------------------------------------------------------------------------------------------------
# The grad-sum function


def ghost_clipped_grad_sum(logits_fn, clip_norm: float | None, augment=None, aug_mult: int = 1,
                           return_norms: bool = False, task=None, devices: int = 1):
    """Private grad-sum (see tanplan.dp.clipping for the signature) by per-layer norms; sensitivity C.

    clip_norm None gives the plain, unclipped sum (non-private mode) by the same passes, which keep
    weight gradients as matrix products: XLA's CPU backend runs convolution weight-gradients inside
    loops (the accumulation scan) two orders of magnitude slower than outside.
    With return_norms, also returns each row's gradient norm before clipping (not private). task: the
    per-example loss and metric (tanplan.task; None = cross-entropy and accuracy). devices: how many devices
    share the chunk's rows (sharded): a layer's per-example gradients are formed when one device's share
    fits in MAX_PER_EXAMPLE_BYTES (the rule follows the rows a device holds, not the chunk's total).
    """
    need_norms = clip_norm is not None or return_norms
    losses_fn = augmult.batch_loss_fn(logits_fn, augment, aug_mult, task)

    def grad_sum(params, x, y, keys, mask):
        n = x.shape[0]
        budget = MAX_PER_EXAMPLE_BYTES * devices  # read when traced (tests lower it)
        probe = _Tape(params)
        with nn.intercept_methods(probe):
            jax.eval_shape(lambda *a: losses_fn(*a), params, x, y, keys)  # fresh fn: no trace cache
        calls = probe.calls
        zeros = [jnp.zeros(c.out_shape.shape, c.out_shape.dtype) for c in calls]

        def forward(perturbations):
            total, (losses, acc, tape) = _record(losses_fn, params, x, y, keys, mask, perturbations)
            return total, (losses, acc, tape.inputs, (tape.outputs, tape.variables))

        (_, (losses, acc, inputs, tape_out)), deltas = jax.value_and_grad(forward, has_aux=True)(zeros)

        # Squared norm of each example's gradient, layer by layer, and how to sum them weighted.
        sq = jnp.zeros((n,), jnp.float32)
        routes = []
        for index, (call, a, d) in enumerate(zip(calls, inputs, deltas)):
            a, d = _at_least_f32(a), _at_least_f32(d)  # bfloat16 layers: norms and sums in float32
            layer_sq, weighted = _layer_route(calls, index, _subtree(params, call.path), a, d, n, need_norms,
                                              budget, tape_out)
            if need_norms:
                sq = sq + layer_sq
            routes.append((call.path, weighted))
        norms = jnp.sqrt(sq)
        if clip_norm is None:
            weights = mask.astype(jnp.float32)
        else:
            weights = jnp.nan_to_num(jnp.minimum(1.0, clip_norm / norms), nan=0.0, posinf=0.0)
            weights = jnp.where(mask & jnp.isfinite(norms), weights, 0.0)

        # Σ_i w_i g_i, layer by layer, as one batched weight gradient each ("book-keeping").
        layer_grads = {path: weighted(weights) for path, weighted in routes}

        flat, treedef = jax.tree_util.tree_flatten_with_path(params)
        out = []
        for path, leaf in flat:
            keys_ = tuple(str(getattr(k, "key", k)) for k in path)
            for cut in range(len(keys_) - 1, -1, -1):
                if keys_[:cut] in layer_grads:
                    out.append(_subtree(layer_grads[keys_[:cut]], keys_[cut:]).astype(leaf.dtype))
                    break
        grads = jax.tree_util.tree_unflatten(treedef, out)
        return (grads, losses, acc, norms) if return_norms else (grads, losses, acc)

    return grad_sum


# ----------------------------------------------------------------------------------------------------
# Support check


def per_example_grads(logits_fn, params, x, y, keys, augment=None, aug_mult: int = 1) -> list:
    """Reference: each example's gradient from its own jax.grad, one at a time (checks and tests)."""
    loss = augmult.example_loss_fn(logits_fn, augment, aug_mult)
    grad = jax.jit(jax.grad(lambda p, xi, yi, ki: loss(p, xi, yi, ki)[0]))
    return [grad(params, x[i], y[i], keys[i]) for i in range(x.shape[0])]


def _tree_norm(tree) -> float:
    """The L2 norm of a tree, on the host in float64 (eager jnp would compile a program per leaf shape)."""
    return float(np.sqrt(sum(np.sum(np.asarray(leaf, np.float64) ** 2) for leaf in jax.tree.leaves(tree))))


def unsupported_reason(logits_fn, params, example_x, *, numeric: bool = True, rtol: float = 1e-3) -> str | None:
    """None if the ghost route applies to this model, else why not.

    Structure: every parameter in exactly one layer, each layer called once and row-wise. Numbers (when
    `numeric`): on two inputs, the route's per-example norms and its clipped sum of one example match
    the example's own gradient (jax.grad), which would catch a layer that mixes rows. Both sides are
    computed at full float32 matmul precision: on a GPU JAX's default (TF32) would leave them ~1e-3 apart
    and make every model fall back to the slower vmap route.
    """
    with jax.default_matmul_precision("highest"):
        return _unsupported_reason(logits_fn, params, example_x, numeric=numeric, rtol=rtol)


def _unsupported_reason(logits_fn, params, example_x, *, numeric: bool, rtol: float) -> str | None:
    rng = np.random.default_rng(0)
    x = jnp.asarray(np.asarray(example_x[:2], np.float32) + rng.normal(size=np.shape(example_x[:2])).astype(np.float32))
    n = x.shape[0]
    y = jnp.arange(n, dtype=jnp.int32) % 2
    keys = augmult.example_keys(jax.random.key(0), jnp.arange(n))
    losses_fn = augmult.batch_loss_fn(logits_fn, None, 1)
    probe = _Tape(params)
    try:
        with nn.intercept_methods(probe):
            jax.eval_shape(lambda *a: losses_fn(*a), params, x, y, keys)  # fresh fn: no trace cache
    except Exception as err:  # a model this route cannot trace: use the vmap route
        return f"tracing failed ({type(err).__name__}: {err})"
    problems = _structure_problems(probe.calls, probe.problems, params, n)
    if problems:
        return problems[0]
    fn = jax.jit(ghost_clipped_grad_sum(logits_fn, 1.0, return_norms=True))
    try:  # tracing refuses a module whose own parameters feed its sub-layers (ghost_owner.reaching)
        jax.eval_shape(fn, params, x, y, keys, jnp.ones((n,), bool))
    except ValueError as err:
        return str(err)
    if not numeric:
        return None
    direct = per_example_grads(logits_fn, params, x, y, keys)
    clip = 0.5 * _tree_norm(direct[0])  # binds for example 0
    fn = jax.jit(ghost_clipped_grad_sum(logits_fn, clip, return_norms=True))
    _, _, _, norms = fn(params, x, y, keys, jnp.ones((n,), bool))
    expected = np.array([_tree_norm(g) for g in direct])
    if not np.allclose(np.asarray(norms), expected, rtol=rtol, atol=1e-9):
        return (f"per-layer norms {np.asarray(norms).tolist()} differ from per-example gradient norms "
                f"{expected.tolist()}")
    summed, _, _, _ = fn(params, x, y, keys, jnp.arange(n) == 0)
    diff = jax.tree.map(lambda a, b: np.asarray(a, np.float64) - 0.5 * np.asarray(b, np.float64), summed, direct[0])
    if _tree_norm(diff) > rtol * clip:
        return f"clipped sum of one example is off by {_tree_norm(diff):g} (clip norm {clip:g})"
    return None
