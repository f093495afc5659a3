"""Each released statistic moves by at most its stated sensitivity when one example is added or removed.

Neighbouring relation: add/remove-one (the one every baseline's guarantee is stated for). Each test
removes every example in turn from a dataset that includes examples far outside the clipping norms, and
checks the bound; it also checks that the bound is reached (up to rounding) by some example, so that a
sensitivity stated too loosely, or a clip that no longer clips, would show.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from tanplan.baselines import first_order, least_squares, newton, prototypes
from tanplan.baselines.heads import unit_rows
from tanplan.baselines.noise import clip_rows

M, D = 4, 5


def dataset(seed: int, n: int = 40):
    """Features with a few huge rows (so clipping matters) and labels covering every class."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, D)) * rng.choice([0.3, 1.0, 30.0], size=(n, 1))
    y = np.arange(n) % M
    return x, y


def neighbours(x, y):
    """Every add/remove-one neighbour (D minus example i): (x', y', removed index)."""
    for i in range(len(y)):
        keep = np.arange(len(y)) != i
        yield x[keep], y[keep], i


def check(bound: float, diffs: list[float]) -> None:
    assert max(diffs) <= bound * (1 + 1e-9), (max(diffs), bound)
    assert max(diffs) >= bound * (1 - 1e-6), "the stated sensitivity is never reached: is the clip still applied?"


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_dp_ls_statistics(seed):
    x, y = dataset(seed)
    clip = 2.0
    gram, per_class, b = least_squares.ls_statistics(x, y, M, clip)
    dg, da, db, dtri = [], [], [], []
    for x2, y2, _ in neighbours(x, y):
        g2, a2, b2 = least_squares.ls_statistics(x2, y2, M, clip)
        dg.append(np.linalg.norm(gram - g2))
        da.append(np.linalg.norm(per_class - a2))  # all classes together (k = 1)
        db.append(np.linalg.norm(b - b2))
        dtri.append(np.linalg.norm(np.triu(gram - g2)))  # what the symmetric noise actually covers
    check(clip ** 2, dg)
    check(clip ** 2, da)
    check(clip, db)
    assert max(dtri) <= clip ** 2 * (1 + 1e-9)


@pytest.mark.parametrize("seed", [0, 1])
def test_dp_newton_statistics(seed):
    """Theorem 2.1: per class ‖Δg_j‖ ≤ C and ‖ΔH_j‖_F ≤ β_H·C²; all m classes: √m·C and √m·β_H·C²."""
    x, y = dataset(seed)
    clip = 2.0
    theta = np.random.default_rng(seed + 10).normal(size=(D, M)) * 3  # any iterate
    labels = least_squares.one_hot(y, M)
    grad, hess = newton.newton_statistics(clip_rows(x, clip), labels, theta)
    g_class, h_class, g_all, h_all = [], [], [], []
    for i in range(len(y)):
        keep = np.arange(len(y)) != i
        g2, h2 = newton.newton_statistics(clip_rows(x[keep], clip), labels[keep], theta)
        g_class.append(np.linalg.norm(grad - g2, axis=0).max())
        h_class.append(np.linalg.norm(hess - h2, axis=(1, 2)).max())
        g_all.append(np.linalg.norm(grad - g2))
        h_all.append(np.linalg.norm(hess - h2))
    assert max(g_class) <= clip * (1 + 1e-9) and max(g_class) > 0.5 * clip
    assert max(h_class) <= newton.BETA_H * clip ** 2 * (1 + 1e-9) and max(h_class) > 0.1 * newton.BETA_H * clip ** 2
    assert max(g_all) <= math.sqrt(M) * clip * (1 + 1e-9)
    assert max(h_all) <= math.sqrt(M) * newton.BETA_H * clip ** 2 * (1 + 1e-9)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_clipped_gradient_sum(seed):
    """DP-FC and DP-Adam release Σ clip_C(∇(W,b) ℓ_i): sensitivity C over W and b together."""
    x, y = dataset(seed)
    clip = 0.5
    rng = np.random.default_rng(seed)
    w, b = rng.normal(size=(D, M)), rng.normal(size=M)
    labels = least_squares.one_hot(y, M)
    gw, gb = first_order.clipped_gradient_sum(x, labels, w, b, clip)
    diffs = []
    for i in range(len(y)):
        keep = np.arange(len(y)) != i
        gw2, gb2 = first_order.clipped_gradient_sum(x[keep], labels[keep], w, b, clip)
        diffs.append(math.sqrt(np.sum((gw - gw2) ** 2) + np.sum((gb - gb2) ** 2)))
    check(clip, diffs)


def test_per_example_gradient_norm_is_the_true_norm():
    """The closed-form per-example norm √(‖x‖²+1)·‖r‖ is the norm of the actual (W, b) gradient."""
    x, y = dataset(3, n=6)
    rng = np.random.default_rng(0)
    w, b = rng.normal(size=(D, M)), rng.normal(size=M)
    labels = least_squares.one_hot(y, M)
    huge = 1e9  # no clipping: the sum is the plain gradient
    gw, gb = first_order.clipped_gradient_sum(x, labels, w, b, huge)

    def loss(w_flat, b_vec):  # sigmoid cross-entropy summed over examples and classes
        z = x @ w_flat.reshape(D, M) + b_vec
        return np.sum(np.logaddexp(0, z) - labels * z)

    eps = 1e-6
    num_w = np.array([(loss(w.ravel() + eps * e, b) - loss(w.ravel() - eps * e, b)) / (2 * eps)
                      for e in np.eye(D * M)]).reshape(D, M)
    num_b = np.array([(loss(w.ravel(), b + eps * e) - loss(w.ravel(), b - eps * e)) / (2 * eps) for e in np.eye(M)])
    np.testing.assert_allclose(gw, num_w, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(gb, num_b, rtol=1e-5, atol=1e-5)


def test_feature_covariance_of_dp_fc():
    x, y = dataset(4)
    clip = 1.5
    xc = clip_rows(x, clip)
    diffs = [np.linalg.norm(np.outer(xc[i], xc[i])) for i in range(len(x))]  # G(D) − G(D − i)
    check(clip ** 2, diffs)


@pytest.mark.parametrize("seed", [0, 1])
def test_coinpress_step_sum(seed):
    """A CoinPress step releases Σ proj(x − c) (sensitivity R) and the count (sensitivity 1)."""
    x, y = dataset(seed)
    rng = np.random.default_rng(seed)
    center = rng.normal(size=D)
    radius = prototypes.coinpress_clip_radius(1.0, prototypes.gaussian_tailbound(D, 0.01))
    total = prototypes.projected_sum(x, center, radius)
    diffs = [np.linalg.norm(total - prototypes.projected_sum(x2, center, radius)) for x2, _, _ in neighbours(x, y)]
    check(radius, diffs)


def test_prototype_classes_compose_in_parallel(blobs):
    """Removing an example changes only its own class's prototype (same noise seed): parallel composition."""
    x, y = blobs["x_train"], blobs["y_train"]
    keep = np.arange(len(y)) != 0
    changed = y[0]
    for fit in (lambda xx, yy: prototypes.dppl_mean(xx, yy, 4, 2.0, np.random.default_rng(5)),
                lambda xx, yy: prototypes.dppl_public(xx, yy, 4, 1.0, blobs["public"], np.random.default_rng(5)),
                lambda xx, yy: prototypes.dppl_public(xx, yy, 4, 1.0, blobs["public"], np.random.default_rng(5),
                                                      prototypes.PublicConfig(k=3))):
        a, b = fit(x, y).prototypes, fit(x[keep], y[keep]).prototypes
        for c in range(4):
            if c != changed:
                np.testing.assert_array_equal(a[c], b[c])


@pytest.mark.parametrize("d_min,d_max", [(0.0, 2.0), (1.0, 2.0), (0.5, 1.5)])
def test_public_utilities_are_monotone_with_sensitivity_du(d_min, d_max):
    x, y = dataset(5)
    public_unit = unit_rows(np.random.default_rng(0).normal(size=(30, D)))
    members = x[y == 1]
    u = prototypes.public_utilities(members, public_unit, d_min, d_max)
    diffs = []
    for i in range(len(members)):
        u2 = prototypes.public_utilities(np.delete(members, i, axis=0), public_unit, d_min, d_max)
        assert (u - u2 >= -1e-12).all()  # monotone: removing an example never raises a utility
        diffs.append((u - u2).max())
    assert max(diffs) <= (d_max - d_min) * (1 + 1e-12)


def test_topk_set_utility_sensitivity():
    """U(S) = min_S u − u_(K) moves by at most Δu when one example is removed (checked on every set)."""
    from itertools import combinations

    x, y = dataset(6)
    public_unit = unit_rows(np.random.default_rng(1).normal(size=(7, D)))
    members, k, du = x[y == 2], 3, 1.0
    u = prototypes.public_utilities(members, public_unit, 1.0, 2.0)
    for i in range(len(members)):
        u2 = prototypes.public_utilities(np.delete(members, i, axis=0), public_unit, 1.0, 2.0)
        uk, uk2 = np.sort(u)[::-1][k - 1], np.sort(u2)[::-1][k - 1]
        for s in combinations(range(7), k):
            assert abs((u[list(s)].min() - uk) - (u2[list(s)].min() - uk2)) <= du * (1 + 1e-12)
