"""Tiny models and batches for the engine's tests (fast to compile: the guarantees do not need size).

Imported by the tests of tests/dp as `dp_helpers` (a unique name: test folders are not packages)."""

import functools

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

LENGTH = 8


class TinyMLP(nn.Module):
    @nn.compact
    def __call__(self, x):
        x = x.reshape(x.shape[0], -1)
        return nn.Dense(3)(nn.relu(nn.Dense(8)(x)))


class TinyCNN(nn.Module):
    """Conv, GroupNorm, strided conv, pooling, dense: every layer kind the ghost route handles."""

    @nn.compact
    def __call__(self, x):
        x = nn.relu(nn.GroupNorm(num_groups=2)(nn.Conv(4, (3,))(x)))
        x = nn.relu(nn.Conv(4, (3,), strides=2)(x))
        return nn.Dense(3)(x.mean(axis=1))


def shift_augment(key, x):
    """A toy augmentation of one (length, 1) example: random circular shift plus a little noise."""
    k1, k2 = jax.random.split(key)
    return jnp.roll(x, jax.random.randint(k1, (), 0, LENGTH), axis=0) + 0.1 * jax.random.normal(k2, x.shape)


@functools.lru_cache(maxsize=None)
def make_tiny(kind="cnn", seed=0):
    model = {"mlp": TinyMLP(), "cnn": TinyCNN()}[kind]
    # compiled whole: flax's eager init compiles each initialiser op by itself (the same values)
    params = jax.jit(model.init)(jax.random.key(seed), jnp.zeros((1, LENGTH, 1)))["params"]
    return (lambda p, x: model.apply({"params": p}, x)), params


def make_rows(n, seed=0, scale=1.0):
    rng = np.random.default_rng(seed)
    x = (scale * rng.normal(size=(n, LENGTH, 1))).astype(np.float32)
    y = rng.integers(0, 3, n).astype(np.int32)
    return x, y


def tree_norm(tree):
    # On the host: eager jnp ops would compile a program per leaf shape (most of a small test's CPU).
    return float(np.sqrt(sum(np.sum(np.square(np.asarray(leaf, np.float64))) for leaf in jax.tree.leaves(tree))))


def tree_max_diff(a, b):
    pairs = zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True)
    return max(float(np.max(np.abs(np.asarray(u) - np.asarray(v)))) for u, v in pairs)


ROWS = 8  # every test batch has this many rows: one compilation per function for the whole suite


@functools.lru_cache(maxsize=None)
def grad_sum(route: str, kind: str, clip=0.7, k: int = 1):
    """Jitted grad-sum of a tiny model, cached so that tests share compilations."""
    from tanplan.dp import clipping, ghost

    logits_fn, _ = make_tiny(kind)
    aug = shift_augment if k > 1 else None
    if route == "vmap":
        fn = clipping.clipped_grad_sum(logits_fn, clip, aug, k)
    elif route == "ghost":
        fn = ghost.ghost_clipped_grad_sum(logits_fn, clip, aug, k, return_norms=True)
    else:
        fn = clipping.nonprivate_grad_sum(logits_fn, aug, k)
    return jax.jit(fn)


def leave_one_out_moves(fn, params, x, y, full_sum=None) -> list[float]:
    """‖sum over all rows − sum without row j‖ for each row j: what removing one example moves a (jitted) clipped
    grad-sum fn(params, x, y, keys, mask) by, its sensitivity. full_sum: the sum over all rows, when computed."""
    full = np.ones(len(y), bool)
    total = fn(params, x, y, row_keys(), full)[0] if full_sum is None else full_sum
    moved = []
    for j in range(len(y)):
        without = full.copy()
        without[j] = False
        moved.append(tree_norm(jax.tree.map(np.subtract, total, fn(params, x, y, row_keys(), without)[0])))
    return moved


def row_keys(n=ROWS, seed=0):
    """The augmentation keys of examples 0..n-1 (dataset indices) at one step."""
    from tanplan.dp import augmult

    return augmult.example_keys(jax.random.key(seed), jnp.arange(n))


@functools.lru_cache(maxsize=None)
def _example_grad(kind: str, k: int):
    from tanplan.dp import augmult

    logits_fn, _ = make_tiny(kind)
    loss = augmult.example_loss_fn(logits_fn, shift_augment if k > 1 else None, k)
    return jax.jit(jax.grad(lambda p, xi, yi, ki: loss(p, xi, yi, ki)[0]))


def example_grads(kind, x, y, keys, k: int = 1):
    """Reference: each example's own gradient by jax.grad, one at a time."""
    _, params = make_tiny(kind)
    grad = _example_grad(kind, k)
    return [grad(params, x[i], y[i], keys[i]) for i in range(len(x))]
