"""Flax models selectable by name; all pure (`model.apply({"params": p}, x)`), none with BatchNorm. A user's
own model plugs in by import path (tanplan.models.plugins), checked for the same property before it trains.

Per-example privacy needs each example's logits to depend on that example alone: BatchNorm's batch
statistics would mix examples (and carry a mutable `batch_stats` collection), so the models normalise
with GroupNorm, LayerNorm or weight standardisation instead (tests/models check this for every model).

Modules: mlp, cnn (CNN1D, CNN2D), resnet (ResNet-18 with GroupNorm), wrn (Wide ResNet), nf_resnet
(normaliser-free ResNet), vit (a small Vision Transformer), layers (the blocks they share) and plugins (a
user's model by import path, and its checks); this module names them (MODELS, create_model).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import flax.linen as nn

from tanplan.errors import UsageError
from tanplan.plugins import is_import_path
from tanplan.models.cnn import CNN1D, CNN2D
from tanplan.models.layers import NORM_ORDERS
from tanplan.models.mlp import MLP
from tanplan.models.nf_resnet import STAGES as NF_DEPTHS
from tanplan.models.nf_resnet import NFResNet
from tanplan.models.plugins import create_plugin
from tanplan.models.resnet import STAGES as RESNET_DEPTHS
from tanplan.models.resnet import ResNetGN
from tanplan.models.vit import ViT, num_heads
from tanplan.models.wrn import WideResNet


@dataclass(frozen=True)
class ModelSpec:
    build: Callable[[int, int, int, str], nn.Module]  # (num_classes, width, depth, norm_order)
    width: int  # default width (units, channels, widen factor or embedding size: see `about`)
    depth: int  # default depth
    depth_rule: Callable[[int], bool]
    depth_text: str
    norm_order: bool  # whether norm_order applies
    inputs: str  # "1d", "image" or "any"
    about: str


def _positive(d: int) -> bool:
    return d >= 1


MODELS: dict[str, ModelSpec] = {
    "mlp": ModelSpec(lambda c, w, d, o: MLP(c, w, d), 128, 2, _positive, "an integer >= 1", False,
                     "any", "width = hidden units, depth = hidden layers"),
    "cnn1d": ModelSpec(lambda c, w, d, o: CNN1D(c, w, d, o), 32, 4, _positive, "an integer >= 1", True,
                       "1d", "width = first conv channels, depth = conv blocks"),
    "cnn2d": ModelSpec(lambda c, w, d, o: CNN2D(c, w, d, o), 32, 2, _positive, "an integer >= 1", True,
                       "image", "width = first conv channels, depth = conv stages"),
    "wrn16_4": ModelSpec(lambda c, w, d, o: WideResNet(c, d, w, o), 4, 16,
                         lambda d: d >= 10 and (d - 4) % 6 == 0, "10, 16, 22, 28, ... ((depth - 4) % 6 == 0)",
                         True, "image", "width = widen factor k, depth = WRN depth"),
    "resnet18_gn": ModelSpec(lambda c, w, d, o: ResNetGN(c, d, w), 64, 18, lambda d: d in RESNET_DEPTHS,
                             ", ".join(map(str, sorted(RESNET_DEPTHS))), False, "image",
                             "width = first stage channels, depth = ResNet depth"),
    "nf_resnet": ModelSpec(lambda c, w, d, o: NFResNet(c, d, w), 64, 50, lambda d: d in NF_DEPTHS,
                           ", ".join(map(str, sorted(NF_DEPTHS))), False, "image",
                           "width = first stage bottleneck channels, depth = ResNet depth"),
    "vit_tiny": ModelSpec(lambda c, w, d, o: ViT(c, w, d), 192, 12, _positive, "an integer >= 1", False,
                          "image", "width = embedding size, depth = transformer blocks"),
}


def available_models() -> tuple[str, ...]:
    return tuple(MODELS)


def create_model(name: str, num_classes: int, *, width: int = 0, depth: int = 0,
                 norm_order: str = "conv_gn_relu", options: dict | None = None, input_shape=None) -> nn.Module:
    """The flax module `name` for `num_classes` classes; width/depth 0 mean the model's default.

    `name` may also be a factory's import path "package.module:make_model" (tanplan.models.plugins), called
    with num_classes and `options` (model.options), and input_shape (one example's shape) when it takes it.
    Unknown names and options raise UsageError with one line listing what is allowed.
    """
    if is_import_path(name):
        return create_plugin(name, num_classes, width=width, depth=depth, norm_order=norm_order, options=options,
                             input_shape=input_shape)
    if options:
        raise UsageError(f"model.options is not allowed for {name}: it passes keyword arguments to a plugged-in "
                         "factory (model.name = \"package.module:make_model\")")
    if name not in MODELS:
        raise UsageError(f"unknown model {name!r}; valid: {', '.join(available_models())}, or a factory by import "
                         "path \"package.module:make_model\"")
    spec = MODELS[name]
    _check_int("num_classes", num_classes, 2, name)
    _check_int("model.width", width, 0, name)
    _check_int("model.depth", depth, 0, name)
    if norm_order not in NORM_ORDERS:
        raise UsageError(f"unknown model.norm_order {norm_order!r}; valid: {', '.join(NORM_ORDERS)}")
    if norm_order != NORM_ORDERS[0] and not spec.norm_order:
        takes = ", ".join(n for n, s in MODELS.items() if s.norm_order)
        raise UsageError(f"model.norm_order = {norm_order!r} does not apply to {name} (it has no GroupNorm "
                         f"in a conv chain); models that take it: {takes}")
    width = width or spec.width
    depth = depth or spec.depth
    if not spec.depth_rule(depth):
        raise UsageError(f"model.depth = {depth} is not allowed for {name}; valid: {spec.depth_text}")
    if name == "vit_tiny" and width % num_heads(width):
        raise UsageError(f"model.width = {width} is not allowed for vit_tiny: it must split into "
                         f"{num_heads(width)} heads (width // 64 of them); e.g. a multiple of 64")
    return spec.build(num_classes, width, depth, norm_order)


def count_params(params) -> int:
    """Number of scalars in a parameter tree."""
    import jax

    return sum(int(p.size) for p in jax.tree.leaves(params))


def _check_int(what: str, value, low: int, name: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise UsageError(f"{what} = {value!r} is not allowed for {name}: must be an integer >= {low}")
