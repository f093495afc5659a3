"""The algorithms compute what the papers say: DP-LS → ridge as σ → 0, every method learns separable data."""

from __future__ import annotations

import numpy as np
import pytest

from tanplan.baselines import least_squares, runner
from tanplan.baselines.data import balanced_accuracy, feature_set
from tanplan.baselines.noise import clip_rows


def weighted_ridge(x, y, num_classes, alpha, lam):
    """argmin_θj Σ_i ½[y_ij(x_iᵀθ_j − y_ij)² + α(x_iᵀθ_j)²] + λ/2‖θ_j‖², by least squares on stacked rows."""
    n, d = x.shape
    thetas = []
    for j in range(num_classes):
        pos = x[y == j]
        rows = np.vstack([pos, np.sqrt(alpha) * x, np.sqrt(lam) * np.eye(d)])
        target = np.concatenate([np.ones(len(pos)), np.zeros(n), np.zeros(d)])
        thetas.append(np.linalg.lstsq(rows, target, rcond=None)[0])
    return np.stack(thetas, axis=1)


@pytest.mark.parametrize("clip", [1e6, 1.5])  # no clipping, and clipping active on most rows
def test_dp_ls_tends_to_the_ridge_solution(clip):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(60, 4)) * 2
    y = rng.integers(0, 3, 60)
    cfg = least_squares.LSConfig(clip=clip, alpha=0.5, ridge=0.3)
    expected = weighted_ridge(clip_rows(x, clip), y, 3, alpha=0.5, lam=0.3)
    exact = least_squares.dp_ls(x, y, 3, 0.0, rng, cfg).weights
    np.testing.assert_allclose(exact, expected, rtol=1e-8, atol=1e-10)
    previous = np.inf
    for noise_std in (1e-2, 1e-4, 1e-6):  # std of the noise on G: σ·C²
        sigma = noise_std / clip ** 2
        err = np.abs(least_squares.dp_ls(x, y, 3, sigma, np.random.default_rng(1), cfg).weights - expected).max()
        assert err < previous  # converges as σ → 0
        previous = err
    assert previous < 1e-6 * max(1.0, np.abs(expected).max())


@pytest.mark.parametrize("method", runner.METHODS)
def test_every_method_learns_separable_blobs(method, blobs):
    data = feature_set(blobs["x_train"], blobs["y_train"], blobs["x_test"], blobs["y_test"])
    result = runner.run_baseline(method, data, epsilon=20.0, delta=1e-5, public=blobs["public"], seed=0)
    assert result.balanced_accuracy > 0.9, result
    assert result.epsilon <= 20.0 and result.delta <= 1e-5


def test_more_privacy_means_more_noise(blobs):
    data = feature_set(blobs["x_train"], blobs["y_train"], blobs["x_test"], blobs["y_test"])
    loose = runner.run_baseline("dp-ls", data, 10.0, 1e-5, seed=0)
    tight = runner.run_baseline("dp-ls", data, 0.01, 1e-5, seed=0)
    assert tight.noise_multiplier > 100 * loose.noise_multiplier
    assert tight.balanced_accuracy < loose.balanced_accuracy


def test_public_methods_without_public_set_are_skipped(blobs):
    data = feature_set(blobs["x_train"], blobs["y_train"], blobs["x_test"], blobs["y_test"])
    results, notes = runner.run_baselines(["dp-ls", "dppl-public"], data, [1.0], 1e-5, public=None, seed=0)
    assert [r.method for r in results] == ["dp-ls"]
    assert "dppl-public" in notes[0]


def test_imbalanced_runs_train_on_the_long_tail(blobs):
    data = feature_set(blobs["x_train"], blobs["y_train"], blobs["x_test"], blobs["y_test"])
    res, _ = runner.run_baselines(["dp-ls", "dppl-public"], data, [2.0], 1e-5, blobs["public"],
                                  imbalance_ratio=50, seed=0)
    tail = sum(int(150 * 50 ** (-c / 3)) for c in range(4))  # 150 per class, ratio 50 over 4 classes
    assert {r.n_train for r in res} == {tail}
    assert all(0 <= r.minority_accuracy <= 1 and r.imbalance_ratio == 50 for r in res)


def test_predictions_are_deterministic_given_a_seed(blobs):
    data = feature_set(blobs["x_train"], blobs["y_train"], blobs["x_test"], blobs["y_test"])
    a = runner.run_baseline("dppl-mean", data, 1.0, 1e-5, seed=3, repeats=2)
    b = runner.run_baseline("dppl-mean", data, 1.0, 1e-5, seed=3, repeats=2)
    assert a.balanced_accuracy == b.balanced_accuracy and a.repeats == 2
    assert balanced_accuracy(np.array([0, 0, 1]), np.array([0, 1, 1])) == pytest.approx(0.75)
