"""Per-example gradients of the parameters a module owns directly beside its sub-layers (NF-ResNet's
skip gain, a LayerScale, a learnt residual weight), for the per-layer route (tanplan.dp.ghost).

The module's own parameters p act in its glue code between its sub-layers. Example i's gradient of p is
the vjp of the module's own function at its output gradient d_i, with every parameterised sub-layer
replaced by its output as recorded in the forward pass ("stubs"): the sub-layers' own gradients are
taken by their own routes, and replaying only the glue costs elementwise work. That vjp is exact only
when p does not reach a stubbed sub-layer's input (then the sub-layer's output does not depend on p);
`reaching` checks it on the traced program (conservatively: any data dependence counts) and the route
is refused for such a module (the vmap route is taken, and the run's route note names the module).

Guarantee: the per-example gradients computed here are exact, so they enter example i's norm in full and
w_i = min(1, C/||g_i||) bounds its whole contribution to the clipped sum by C (sensitivity C under
add/remove-one, tanplan.dp.ghost); the Gaussian noise is added to that whole sum, these parameters
included (tanplan.dp.step).
"""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp
from jax.extend.core import Literal


class _Stubs:
    """Method interceptor for a replay of the module at `root`: a recorded sub-layer's call returns its
    recorded output (and notes its input) instead of running."""

    def __init__(self, root: tuple[str, ...], outputs: dict):
        self.root, self.outputs = root, outputs
        self.inputs: dict[tuple[str, ...], jax.Array] = {}

    def __call__(self, next_fun, args, kwargs, context):
        path = self.root + tuple(context.module.path)
        if context.method_name != "__call__" or path == self.root or path not in self.outputs:
            return next_fun(*args, **kwargs)
        self.inputs[path] = args[0] if args else None
        return self.outputs[path]


def _replay(module, variables, own_keys, root, p_own, a, outputs):
    """The module applied to `a` with its own parameters p_own and its sub-layers stubbed; (out, stubs)."""
    params = {**variables["params"], **p_own}
    stubs = _Stubs(root, outputs)
    with nn.intercept_methods(stubs):
        out = module.apply({**variables, "params": params}, a)
    return out, stubs


def reaching(module, variables, own_keys, root, a, outputs) -> list[str]:
    """The stubbed sub-layers whose input depends on the module's own parameters (one example's replay,
    traced): where this is not empty the stubs' replay would miss a path of the gradient."""
    own = {k: variables["params"][k] for k in own_keys}
    names: list[tuple[str, ...]] = []

    def inputs_of(p):
        _, stubs = _replay(module, variables, own_keys, root, p, a, outputs)
        names.extend(stubs.inputs)
        return [x for x in stubs.inputs.values() if x is not None]

    closed = jax.make_jaxpr(inputs_of)(own)
    depends = _depends_on_inputs(closed.jaxpr)
    return ["/".join(name) for name, dep in zip(names, depends) if dep]


def _depends_on_inputs(jaxpr) -> list[bool]:
    """For each output of jaxpr, whether any data path leads to it from an input (an equation counts
    as depending when any of its inputs does: conservative across nested calls)."""
    live = set(jaxpr.invars)
    for eqn in jaxpr.eqns:
        if any(not isinstance(v, Literal) and v in live for v in eqn.invars):
            live.update(eqn.outvars)
    return [not isinstance(v, Literal) and v in live for v in jaxpr.outvars]


def owner_route(module, variables, own_keys, root, a, d, outputs: dict, n: int):
    """(squared norms (n,), weighted) of the module's own parameters: each example's gradient by the
    stubbed replay's vjp (vmapped over examples; a, d and the recorded outputs have N = n·K rows).
    Raises ValueError when an own parameter reaches a sub-layer (see `reaching`)."""
    split = lambda x: x.reshape((n, -1) + x.shape[1:])  # noqa: E731  (n examples × K views)
    a, d = split(a), split(d)
    outputs = {k: split(v) for k, v in outputs.items()}
    one = jax.tree.map(lambda x: x[0], (a, outputs))
    reached = reaching(module, variables, own_keys, root, *one)
    if reached:
        raise ValueError(f"layer {'/'.join(root) or '(the model itself)'} feeds its own parameters into its sub-layer {reached[0]}")
    own = {k: variables["params"][k] for k in own_keys}

    def example(ai, di, outs_i):
        out, pullback = jax.vjp(lambda p: _replay(module, variables, own_keys, root, p, ai, outs_i)[0], own)
        return pullback(di.astype(out.dtype))[0]

    per_example = jax.tree.map(lambda g: jnp.nan_to_num(g.astype(jnp.float32)), jax.vmap(example)(a, d, outputs))
    sq = sum(jnp.sum(g.reshape(n, -1) ** 2, -1) for g in jax.tree.leaves(per_example))

    def weighted(w):
        keep = w > 0
        return jax.tree.map(
            lambda g: jnp.tensordot(w, jnp.where(keep.reshape((n,) + (1,) * (g.ndim - 1)), g, 0.0), axes=1),
            per_example)

    return sq, weighted
