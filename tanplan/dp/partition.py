"""Trainable and frozen parameters ([init] trainable / frozen / frozen_blocks): the split DP-SGD runs on.

Guarantee. The mechanism sees the trainable parameters only: the per-example gradients are taken with
respect to them (the frozen ones enter the model as constants through `logits_fn`), each is clipped to C
over the trainable parameters alone, the noise N(0, σ²C²) is drawn in their shape, and the optimizer holds
state for them alone. The clipped sum therefore has L2 sensitivity C under add/remove-one, as the
accountant assumes (tanplan.dp.mechanism), and the frozen parameters are released exactly as they came in
(public: the init, or experiment.seed's draw): they are never a function of the private data. A frozen
parameter that entered the norms would shrink the trainable gradients' share of C; one that entered the
noise or the update would move; tests/dp/test_partition.py would catch either.

Low-rank adapters ([init] adapters, tanplan.models.adapters) are a partition like any other: the adapters'
parameters train, the base is frozen, so each example is clipped to C over the adapters alone. They are
plain Dense and Conv sub-layers of the layers they adapt, so the per-layer route records them as it records
any layer and skips the frozen base layers; tests/dp/test_adapter_route.py checks their per-example norms
against each example's own gradient and the vmap route, and the sensitivity C.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import jax

from tanplan.models.paths import path_of


@dataclass(frozen=True)
class Partition:
    """Which parameters train, by "/"-joined path (static: safe to close over inside jit)."""

    trainable: frozenset[str]

    def is_trainable(self, key_path) -> bool:
        return path_of(key_path) in self.trainable

    def split(self, params) -> tuple[dict, dict]:
        """(trainable, frozen): nested dicts holding each side's leaves under their module paths."""
        sides: tuple[dict, dict] = ({}, {})
        for key_path, leaf in jax.tree_util.tree_flatten_with_path(params)[0]:
            node = sides[0 if self.is_trainable(key_path) else 1]
            *modules, name = path_of(key_path).split("/")
            for m in modules:
                node = node.setdefault(m, {})
            node[name] = leaf
        return sides

    def merge(self, like, trainable, frozen):
        """The tree of `like`'s structure with each leaf taken from its side."""
        leaves, treedef = jax.tree_util.tree_flatten_with_path(like)
        out = []
        for key_path, _ in leaves:
            node = trainable if self.is_trainable(key_path) else frozen
            for part in path_of(key_path).split("/"):
                node = node[part]
            out.append(node)
        return jax.tree_util.tree_unflatten(treedef, out)


def grad_sum_over(partition: Partition | None, make: Callable[[Callable], Callable], logits_fn: Callable) -> Callable:
    """A grad-sum (tanplan.dp.clipping's signature) of the full params whose gradients, clipping and
    hence noise are over the trainable ones only; make(logits_fn) builds the route's grad-sum."""
    if partition is None:
        return make(logits_fn)

    def grad_sum(params, x, y, keys, mask):
        trainable, frozen = partition.split(params)
        inner = make(lambda p, xs: logits_fn(partition.merge(params, p, frozen), xs))
        return inner(trainable, x, y, keys, mask)

    return grad_sum


def logits_over(partition: Partition | None, logits_fn: Callable, params) -> tuple[Callable, Any]:
    """(logits_fn of the trainable params with the frozen ones fixed at params', the trainable params):
    what the routes' self-checks and the canaries see."""
    if partition is None:
        return logits_fn, params
    trainable, frozen = partition.split(params)
    return (lambda p, xs: logits_fn(partition.merge(params, p, frozen), xs)), trainable


def trainable_of(partition: Partition | None, params):
    return params if partition is None else partition.split(params)[0]


def with_trainable(partition: Partition | None, params, trainable):
    """params with its trainable leaves replaced (the frozen ones kept as they are, bit for bit)."""
    if partition is None:
        return trainable
    return partition.merge(params, trainable, partition.split(params)[1])
