"""The jitted step: a hand-written DP-SGD reference, accumulation over chunks, noise drawn once per step
with std σ·C, AugMult K = 1 is plain DP-SGD, EMA, and one compilation for every Poisson batch."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from dp_helpers import ROWS, make_rows, make_tiny, shift_augment, tree_max_diff, tree_norm

from tanplan.config import TrainConfig
from tanplan.dp import augmult, ghost, noise, optim, sampling
from tanplan.dp import step as dp_step

CLIP, SIGMA, B, LR, EMA = 0.7, 1.3, 6.0, 0.5, 0.9


def _batch(x, y, mask, chunks):
    shape = (chunks, ROWS // chunks)
    return {"x": x.reshape(shape + x.shape[1:]), "y": y.reshape(shape), "mask": mask.reshape(shape),
            "index": np.arange(ROWS, dtype=np.int32).reshape(shape)}  # row r holds example r of the set


@functools.lru_cache(maxsize=None)
def _step(k=1, augment=None, private=True):
    """(jitted step, initial state, params) of the tiny CNN; cached: tests share compilations."""
    logits_fn, params = make_tiny("cnn")
    gs = ghost.ghost_clipped_grad_sum(logits_fn, CLIP if private else None, augment, k)
    opt = optim.make_optimizer(TrainConfig(learning_rate=LR))
    fn = jax.jit(dp_step.make_train_step(gs, opt, noise_std=SIGMA * CLIP if private else 0.0,
                                         expected_batch_size=B, ema_decay=EMA))
    return fn, dp_step.create_train_state(params, opt, EMA), params


@functools.lru_cache(maxsize=None)
def _view_grad(k):
    logits_fn, _ = make_tiny("cnn")

    def loss(p, views, label):  # views (K, length, 1): the mean of the K views' cross-entropies
        labels = jnp.broadcast_to(label, (views.shape[0],))
        return optax.softmax_cross_entropy_with_integer_labels(logits_fn(p, views), labels).mean()

    return jax.jit(jax.grad(loss))


# The noise of one step, compiled once (eagerly, each leaf's sampler compiles by itself).
_add_noise = jax.jit(noise.add_gaussian_noise, static_argnums=2)


def _reference(params, x, y, mask, key, k=1, augment=None):
    """DP-SGD written out: per-example gradient (mean over K views), clip, sum, one noise draw, /B, SGD.
    The arithmetic on the host (numpy): eager jnp ops would compile a program per leaf shape."""
    noise_key, aug_key = jax.random.split(key)
    keys = augmult.example_keys(aug_key, np.arange(ROWS))  # example i's views: its dataset index i
    total = jax.tree.map(lambda p: np.zeros(p.shape, np.float32), params)
    for i in np.flatnonzero(mask):
        view_keys = jax.random.split(keys[i], k)
        views = jnp.stack([x[i] if augment is None else augment(view_keys[j], x[i]) for j in range(k)])
        g = jax.tree.map(np.asarray, _view_grad(k)(params, views, y[i]))
        scale = min(1.0, CLIP / tree_norm(g))
        total = jax.tree.map(lambda t, gi: t + np.float32(scale) * gi, total, g)
    noisy = _add_noise(total, noise_key, SIGMA * CLIP)
    return jax.tree.map(lambda p, g: np.asarray(p) - np.float32(LR / B) * np.asarray(g), params, noisy)


def test_step_equals_written_out_dp_sgd():
    fn, state, params = _step()
    x, y = make_rows(ROWS, seed=1, scale=3.0)
    mask = np.arange(ROWS) < 6
    key = jax.random.key(7)
    new, metrics = fn(state, _batch(x, y, mask, 1), *jax.random.split(key))
    assert tree_max_diff(new.params, _reference(params, x, y, mask, key)) < 1e-5
    assert float(metrics["batch_size"]) == 6


def test_augmult_k1_equals_plain_dp_sgd_on_the_augmented_rows():
    fn, state, params = _step(k=1, augment=shift_augment)
    x, y = make_rows(ROWS, seed=2)
    mask = np.arange(ROWS) < 7
    key = jax.random.key(3)
    new, _ = fn(state, _batch(x, y, mask, 1), *jax.random.split(key))
    expected = _reference(params, x, y, mask, key, k=1, augment=shift_augment)
    assert tree_max_diff(new.params, expected) < 1e-5
    # and without augmentation, K = 1 is DP-SGD on the rows themselves
    plain, plain_state, _ = _step(k=1)
    assert tree_max_diff(plain(plain_state, _batch(x, y, mask, 1), *jax.random.split(key))[0].params,
                         _reference(params, x, y, mask, key)) < 1e-5


@pytest.mark.slow
def test_augmult_averages_k_view_gradients_before_clipping():
    fn, state, params = _step(k=3, augment=shift_augment)
    x, y = make_rows(ROWS, seed=4, scale=2.0)
    mask = np.ones(ROWS, bool)
    key = jax.random.key(5)
    expected = _reference(params, x, y, mask, key, k=3, augment=shift_augment)
    assert tree_max_diff(fn(state, _batch(x, y, mask, 1), *jax.random.split(key))[0].params, expected) < 1e-5


def test_accumulating_chunks_equals_one_big_batch():
    fn, state, _ = _step()
    x, y = make_rows(ROWS, seed=6, scale=2.0)
    mask = np.arange(ROWS) < 5  # chunk 2 of 2 is partly padding
    key = jax.random.key(11)
    one, m1 = fn(state, _batch(x, y, mask, 1), *jax.random.split(key))
    two, m2 = fn(state, _batch(x, y, mask, 2), *jax.random.split(key))
    assert tree_max_diff(one.params, two.params) < 1e-6
    np.testing.assert_allclose(float(m1["loss"]), float(m2["loss"]), rtol=1e-6)


def test_noise_is_drawn_once_per_step_with_std_sigma_c():
    # An all-padding batch: the clipped sum is 0, so SGD moves the params by -LR·noise/B exactly.
    fn, state, params = _step()
    x, y = make_rows(ROWS)
    mask = np.zeros(ROWS, bool)
    key = jax.random.key(0)
    moved = []
    for chunks in (1, 2):  # accumulation must not add a second draw
        new, _ = fn(state, _batch(x, y, mask, chunks), *jax.random.split(key))
        moved.append(jax.tree.map(lambda new_p, p: (np.asarray(p) - np.asarray(new_p)) * B / LR,
                                  new.params, params))
    assert tree_max_diff(moved[0], moved[1]) < 1e-5
    expected = _add_noise(jax.tree.map(jnp.zeros_like, params), jax.random.split(key)[0], SIGMA * CLIP)
    assert tree_max_diff(moved[0], expected) < 1e-4


def test_empirical_noise_std_matches_sigma_c():
    tree = {"a": jnp.zeros((300, 300)), "b": jnp.zeros((10_000,))}
    draws = np.concatenate([np.ravel(v) for v in jax.tree.leaves(noise.add_gaussian_noise(tree, jax.random.key(1), 2.5))])
    n = draws.size
    assert abs(draws.std() - 2.5) < 5 * 2.5 / np.sqrt(2 * n)
    assert abs(draws.mean()) < 5 * 2.5 / np.sqrt(n)
    again = noise.add_gaussian_noise(tree, jax.random.key(1), 2.5)
    other = noise.add_gaussian_noise(tree, jax.random.key(2), 2.5)
    assert tree_max_diff(again, noise.add_gaussian_noise(tree, jax.random.key(1), 2.5)) == 0
    assert tree_max_diff(again, other) > 1


@pytest.mark.slow
def test_nonprivate_step_is_sgd_on_the_sum_over_b():
    fn, state, params = _step(private=False)
    logits_fn, _ = make_tiny("cnn")
    x, y = make_rows(ROWS, seed=8)
    mask = np.arange(ROWS) < 4

    def total(p):
        ce = optax.softmax_cross_entropy_with_integer_labels(logits_fn(p, x[:4]), y[:4])
        return ce.sum() / B

    expected = jax.tree.map(lambda p, g: p - LR * g, params, jax.grad(total)(params))
    assert tree_max_diff(fn(state, _batch(x, y, mask, 1), *jax.random.split(jax.random.key(0)))[0].params, expected) < 1e-5


def test_ema_follows_its_update_rule():
    fn, state, _ = _step()
    x, y = make_rows(ROWS, seed=9)
    batch = _batch(x, y, np.ones(ROWS, bool), 1)
    s1, _ = fn(state, batch, *jax.random.split(jax.random.key(0)))
    s2, _ = fn(s1, batch, *jax.random.split(jax.random.key(1)))
    d1 = float(optim.ema_decay_at(EMA, jnp.asarray(1)))
    expected = jax.tree.map(lambda e, p: d1 * np.asarray(e) + (1 - d1) * np.asarray(p), s1.ema_params, s2.params)
    assert tree_max_diff(s2.ema_params, expected) < 1e-6
    assert d1 == pytest.approx(2 / 11)  # warm-up min(decay, (1 + t)/(10 + t)) at t = 1


def test_one_compilation_serves_every_poisson_batch():
    fn, state, _ = _step()
    x_all, y_all = make_rows(40, seed=10)
    layout = sampling.BatchLayout(chunks=2, chunk_size=ROWS // 2)
    sizes, compiled = [], []
    for t, idx in enumerate(sampling.poisson_batches(40, 0.2, 6, np.random.default_rng(0))):
        idx = idx[:ROWS]
        sizes.append(len(idx))
        index, mask = sampling.pad_indices(idx, layout)
        state, _ = fn(state, sampling.gather_batch(x_all, y_all, index, mask), *jax.random.split(jax.random.key(t)))
        compiled.append(fn._cache_size())
    assert len(set(sizes)) > 1 and len(set(compiled)) == 1  # batches of several sizes, no new compilation
