"""Low-rank adapters ([init] adapters, adapters_rank): LoRA (Hu et al. 2021) on chosen Dense and Conv layers
of a pretrained model, the base frozen.

Each targeted layer y = f(x; W, b) becomes y = f(x; W, b) + up(down(x)), two ordinary flax sub-layers of
it, without bias:
    Dense  down = Dense(r) (d_in -> r), up = Dense(d_out) (r -> d_out)
    Conv   down = Conv(r) with the base's window, strides, padding and dilation, up = a 1x1 Conv(c_out)
named `lora_a` (down) and `lora_b` (up), so their parameters sit at "<layer>/lora_a/kernel" and
"<layer>/lora_b/kernel". `lora_b` starts at zero: before any step the adapted model is the base model.
They are added by a flax method interceptor around init and apply (`Adapted`), so any model — built-in or
plugged in — takes them without a line of its own, and the per-layer clipping route (tanplan.dp.ghost)
records them as the plain Dense and Conv layers they are.

Targets are [init]'s patterns (tanplan.models.paths) on the "/"-joined module paths ("Conv_*", "Dense_0",
"re:BasicBlock_[4-7]"); a pattern that names a parent module covers its Dense and Conv layers. A pattern
naming no Dense or Conv layer, a grouped convolution, or a layer called more than once (shared weights)
is refused (UsageError, one line). Which parameters train is tanplan.models.freeze's: the adapters, and
the base parameters that init.trainable names or the head re-initialises; the rest is frozen.

Released model: merged. Both sides are linear in x, so up(down(x)) is the layer with kernel A·B (Dense:
A (d_in, r) @ B (r, d_out); Conv: A (*window, c_in, r) contracted with B's (r, c_out)), and `merged`
folds it into the base kernel: the released params.npz has the base model's paths and shapes, `load_run`
and `init.path` read it as the base model (model.json's `adapters` says it was merged).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import flax.linen as nn
import numpy as np

from tanplan.errors import UsageError
from tanplan.models.paths import flat_params, matches

DOWN, UP = "lora_a", "lora_b"


def is_adapter(path: str) -> bool:
    """Whether a "/"-joined parameter path is an adapter's."""
    return any(part in (DOWN, UP) for part in path.split("/"))


@dataclasses.dataclass
class _Adder:
    """The method interceptor: after each targeted Dense or Conv call, adds its adapter's output."""

    targets: tuple[str, ...]
    rank: int
    adapted: list = dataclasses.field(default_factory=list)  # module paths adapted, in call order

    def __call__(self, next_fun, args, kwargs, context):
        out = next_fun(*args, **kwargs)
        module = context.module
        if context.method_name != "__call__" or type(module) not in (nn.Dense, nn.Conv) or module.name in (DOWN, UP):
            return out
        path = "/".join(module.path)
        if not any(matches(t, path) for t in self.targets):
            return out
        if path in self.adapted:
            raise UsageError(f"init.adapters: layer {path} is called more than once (shared weights); adapters "
                             "need one call per layer")
        self.adapted.append(path)
        return out + _adapter(module, self.rank, args[0], path)


def _adapter(module: nn.Module, rank: int, x, path: str):
    """up(down(x)) of a base Dense or Conv, built as its sub-layers (it is the scope's current module)."""
    common = dict(use_bias=False, dtype=module.dtype, param_dtype=module.param_dtype, precision=module.precision)
    zeros = nn.initializers.zeros
    if type(module) is nn.Dense:
        return nn.Dense(module.features, kernel_init=zeros, name=UP, **common)(nn.Dense(rank, name=DOWN, **common)(x))
    if module.feature_group_count != 1 or module.mask is not None or not module.shared_weights:
        raise UsageError(f"init.adapters: layer {path} is a grouped, masked or unshared convolution; adapters "
                         "take plain Conv layers")
    down = nn.Conv(rank, module.kernel_size, strides=module.strides, padding=module.padding,
                   input_dilation=module.input_dilation, kernel_dilation=module.kernel_dilation, name=DOWN,
                   **common)(x)
    return nn.Conv(module.features, (1,) * (x.ndim - 2), kernel_init=zeros, name=UP, **common)(down)


@dataclasses.dataclass(frozen=True)
class Adapted:
    """A flax model with adapters: `init` and `apply` as the base's (the same arguments), run under the
    interceptor that adds each targeted layer's adapter. `init` refuses a pattern that adapts no layer."""

    base: Any
    targets: tuple[str, ...]
    rank: int

    def init(self, rngs, *args, **kwargs):
        adder = _Adder(self.targets, self.rank)
        with nn.intercept_methods(adder):
            variables = self.base.init(rngs, *args, **kwargs)
        for pattern in self.targets:
            if not any(matches(pattern, p) for p in adder.adapted):
                raise UsageError(f"init.adapters pattern {pattern!r} names no Dense or Conv layer of the model")
        return variables

    def apply(self, variables, *args, **kwargs):
        with nn.intercept_methods(_Adder(self.targets, self.rank)):
            return self.base.apply(variables, *args, **kwargs)


def adapt(model, targets: tuple[str, ...], rank: int):
    """model with adapters on `targets` (none: model itself)."""
    return Adapted(model, tuple(targets), int(rank)) if targets else model


def split_base(params) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """({path: array} of the base's parameters, {path: array} of the adapters')."""
    flat = flat_params(params)
    return ({k: v for k, v in flat.items() if not is_adapter(k)}, {k: v for k, v in flat.items() if is_adapter(k)})


def merged(params) -> dict:
    """The base model's parameter tree (nested dicts of numpy arrays) with every adapter folded into its
    layer's kernel (kernel + A·B): the same function of the input as the adapted model, in the base model's
    paths and shapes."""
    base, extra = split_base(params)
    for key in [k for k in extra if k.endswith(f"/{DOWN}/kernel")]:
        layer = key[: -len(f"/{DOWN}/kernel")]
        a, b = extra[key].astype(np.float64), extra[f"{layer}/{UP}/kernel"].astype(np.float64)
        kernel = base[f"{layer}/kernel"]
        delta = np.tensordot(a, b.reshape(b.shape[-2], b.shape[-1]), axes=1)  # over the rank axis
        base[f"{layer}/kernel"] = (kernel.astype(np.float64) + delta).astype(kernel.dtype)
    tree: dict = {}
    for key, value in base.items():
        *modules, name = key.split("/")
        node = tree
        for m in modules:
            node = node.setdefault(m, {})
        node[name] = value
    return tree
