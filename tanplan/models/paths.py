"""Parameters by path: "/"-joined names ("BasicBlock_3/Conv_0/kernel"), as released model/params.npz holds
them, and the patterns [init] matches against them.

A pattern is a glob (fnmatch: `*` crosses "/") or, after "re:", a Python regex; either matches a path
whole or any of its leading modules ("Conv_0" covers "Conv_0/kernel" and "Conv_0/bias").
"""

from __future__ import annotations

import fnmatch
import re

import jax
import numpy as np


def path_of(key_path) -> str:
    """The "/"-joined name of a jax key path."""
    return "/".join(str(getattr(k, "key", getattr(k, "name", k))) for k in key_path)


def flat_params(tree) -> dict[str, np.ndarray]:
    """{path: array} of a params pytree, in the tree's leaf order."""
    return {path_of(p): np.asarray(leaf) for p, leaf in jax.tree_util.tree_flatten_with_path(tree)[0]}


def paths(tree) -> list[str]:
    """Every parameter's path, in the tree's leaf order (no array is copied)."""
    return [path_of(p) for p, _ in jax.tree_util.tree_flatten_with_path(tree)[0]]


def matches(pattern: str, path: str) -> bool:
    """Whether the pattern names the path or one of its leading modules."""
    parts = path.split("/")
    prefixes = ["/".join(parts[:i]) for i in range(1, len(parts) + 1)]
    if pattern.startswith("re:"):
        regex = re.compile(pattern[3:])
        return any(regex.fullmatch(p) for p in prefixes)
    return any(fnmatch.fnmatchcase(p, pattern) for p in prefixes)


def like(tree, flat: dict[str, np.ndarray]):
    """A tree of tree's structure holding flat's arrays (flat keyed by tree's paths)."""
    leaves, treedef = jax.tree_util.tree_flatten_with_path(tree)
    return jax.tree_util.tree_unflatten(treedef, [jax.numpy.asarray(flat[path_of(p)]) for p, _ in leaves])
