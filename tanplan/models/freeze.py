"""Which parameters train ([init] trainable / frozen / frozen_blocks): the set of "/"-joined paths that
tanplan.dp.partition hands the mechanism. Patterns are tanplan.models.paths's (glob, or regex after "re:").

frozen_blocks = k (Kurakin et al.'s "frozen block groups"): the stem and the first k block groups of
resnet18_gn (its stages) and wrn16_4 (its three groups), the stem and the first k encoder blocks of
vit_tiny; k = all of them freezes everything but the head.
"""

from __future__ import annotations

import re

from tanplan.config import InitConfig, ModelConfig
from tanplan.errors import UsageError
from tanplan.models import MODELS
from tanplan.models.adapters import is_adapter
from tanplan.models.paths import matches, paths
from tanplan.models.resnet import STAGES as RESNET_STAGES

BLOCK_MODELS = ("resnet18_gn", "wrn16_4", "vit_tiny")


def _groups(name: str, depth: int) -> list[tuple[str, ...]]:
    """The top-level module prefixes of each block group, the stem first; the head excluded."""
    if name == "resnet18_gn":
        stem, sizes, block = ("Conv_0", "GroupNorm_0"), RESNET_STAGES[depth], "BasicBlock"
        tail = ()
    elif name == "wrn16_4":
        stem, sizes, block = ("Conv_0",), [(depth - 4) // 6] * 3, "WRNBlock"
        tail = ("NormAct_0",)
    else:  # vit_tiny: every encoder block its own group
        stem, sizes, block = ("patch_embed", "cls_token", "pos_embed"), [1] * depth, "EncoderBlock"
        tail = ("LayerNorm_0",)
    groups, start = [], 0
    for size in sizes:
        groups.append(tuple(f"{block}_{i}" for i in range(start, start + size)))
        start += size
    groups[0] = stem + groups[0]
    groups[-1] = groups[-1] + tail
    return groups


def block_patterns(init: InitConfig, m: ModelConfig) -> tuple[str, ...]:
    """The patterns of init.frozen_blocks (none when 0); UsageError for another model or too many blocks."""
    k = init.frozen_blocks
    if k == 0:
        return ()
    if m.name not in BLOCK_MODELS:
        raise UsageError(f"init.frozen_blocks = {k} is not allowed for model {m.name!r}: it applies to "
                         f"{', '.join(BLOCK_MODELS)}; name the parameters in init.frozen instead")
    groups = _groups(m.name, m.depth or MODELS[m.name].depth)
    if k > len(groups):
        raise UsageError(f"init.frozen_blocks = {k} is not allowed for {m.name}: it has {len(groups)} block groups")
    return tuple(re.escape(name) for group in groups[:k] for name in group)


def trainable_paths(init: InitConfig, model: ModelConfig, params, reinitialised=()) -> frozenset[str] | None:
    """The trainable parameters' paths; None when every parameter trains. UsageError for a pattern that
    names no parameter, or when nothing is left to train. With init.adapters: the adapters, and the base
    parameters that init.trainable names or the head re-initialised (`reinitialised`), less init.frozen."""
    every = paths(params)
    frozen_patterns = tuple(init.frozen) + tuple(f"re:{p}" for p in block_patterns(init, model))
    if not init.trainable and not frozen_patterns and not init.adapters:
        return None
    for key, patterns in (("trainable", init.trainable), ("frozen", init.frozen)):
        for pattern in patterns:
            if not any(matches(pattern, p) for p in every):
                raise UsageError(f"init.{key} pattern {pattern!r} names no parameter; the model's are e.g. "
                                 f"{', '.join(every[:4])}")
    if init.adapters:
        return _with_adapters(init, every, frozen_patterns, reinitialised)
    chosen = [p for p in every if not init.trainable or any(matches(t, p) for t in init.trainable)]
    kept = frozenset(p for p in chosen if not any(matches(f, p) for f in frozen_patterns))
    if not kept:
        raise UsageError("init: every parameter is frozen ([init] trainable / frozen / frozen_blocks): nothing "
                         "would train")
    return None if len(kept) == len(every) else kept


def _with_adapters(init: InitConfig, every: list[str], frozen_patterns, reinitialised) -> frozenset[str]:
    """The adapters' paths and the base parameters named to train beside them; UsageError when a layer with
    an adapter would also train in full (its adapter would add nothing but noise)."""
    named = [p for p in every if not is_adapter(p)
             and (p in reinitialised or any(matches(t, p) for t in init.trainable))]
    named = [p for p in named if not any(matches(f, p) for f in frozen_patterns)]
    adapted = {p.rsplit("/", 2)[0] for p in every if is_adapter(p)}
    for p in named:
        if p.rsplit("/", 1)[0] in adapted:
            why = "it is the re-initialised head" if p in reinitialised else "init.trainable names it"
            raise UsageError(f"init.adapters: layer {p.rsplit('/', 1)[0]} has an adapter and trains in full ({why}); "
                             "leave it out of init.adapters")
    return frozenset([p for p in every if is_adapter(p)] + named)
