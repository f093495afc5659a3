"""Packed proxies (tanplan.engine.packed) vmap one run's step over K runs: one example changed in proxy k's
batch moves proxy k's clipped sum by at most C, and no other proxy's sum at all (vmap maps no row of one
slice into another), on the ghost route and on vmap's, AugMult views included."""

import functools

import jax
import numpy as np
import pytest
from dp_helpers import ROWS, make_rows, make_tiny, shift_augment, tree_norm

from tanplan.dp import clipping, ghost
from tanplan.dp import step as dp_step

CLIP, K = 0.7, 3


@functools.lru_cache(maxsize=None)
def _packed_sum(route: str):
    """jit(vmap(the step's clipped sum, no noise)) over K proxies of the tiny CNN, AugMult 2."""
    logits_fn, _ = make_tiny("cnn")
    make = ghost.ghost_clipped_grad_sum if route == "ghost" else clipping.clipped_grad_sum
    noisy_sum = dp_step.make_noisy_grad_sum(make(logits_fn, CLIP, shift_augment, 2), 0.0)
    return jax.jit(jax.vmap(noisy_sum))


def _inputs():
    """K proxies: their own parameters (experiment seeds 0..K-1), rows, masks and augmentation keys."""
    params = [make_tiny("cnn", seed)[1] for seed in range(K)]
    rows = [make_rows(ROWS, seed=10 + k, scale=3.0) for k in range(K)]  # large inputs: most rows are clipped
    batch = {"x": np.stack([x for x, _ in rows])[:, None], "y": np.stack([y for _, y in rows])[:, None],
             "mask": np.ones((K, 1, ROWS), bool), "index": np.tile(np.arange(ROWS, dtype=np.int32), (K, 1, 1))}
    keys = jax.random.split(jax.random.key(3), K)
    stacked = jax.tree.map(lambda *leaves: np.stack(leaves), *params)
    return stacked, batch, keys


@pytest.mark.parametrize("route", ["ghost", "vmap"])
def test_one_example_of_proxy_k_moves_only_proxy_ks_clipped_sum_by_at_most_c(route):
    fn = _packed_sum(route)
    params, batch, keys = _inputs()
    full = fn(params, batch, keys, keys)[0]
    k = 1
    for j in range(ROWS):
        mask = batch["mask"].copy()
        mask[k, 0, j] = False  # example j leaves proxy k's batch only
        moved = fn(params, {**batch, "mask": mask}, keys, keys)[0]
        for other in range(K):
            delta = tree_norm(jax.tree.map(lambda a, b: np.asarray(a[other]) - np.asarray(b[other]), full, moved))
            if other == k:
                assert delta <= CLIP * (1 + 1e-5)
            else:
                assert delta == 0.0  # bit for bit: another proxy's sum never sees proxy k's rows
    x = batch["x"].copy()
    x[k, 0, 0] *= -5.0  # replace-one within proxy k: its sum moves by at most 2C, the others' not at all
    replaced = fn(params, {**batch, "x": x}, keys, keys)[0]
    deltas = [tree_norm(jax.tree.map(lambda a, b: np.asarray(a[o]) - np.asarray(b[o]), full, replaced)) for o in range(K)]
    assert 0 < deltas[k] <= 2 * CLIP * (1 + 1e-5) and deltas[0] == deltas[2] == 0.0
