"""The scaling-law fit on synthetic data with known a, b and noise."""

import math

import numpy as np
import pytest

from tanplan.privacy import tan
from tanplan.workflow.scaling import fit_log_linear

BATCHES = [32, 64, 128, 256]


def synthetic(rng, a, b, noise, seeds=3):
    bs = np.repeat(BATCHES, seeds)
    return bs, a + b * np.log(bs) + rng.normal(0, noise, bs.size)


def test_noiseless_fit_recovers_a_and_b_exactly():
    bs = np.array(BATCHES)
    fit = fit_log_linear(bs, 0.8 - 0.02 * np.log(bs))
    assert fit.a == pytest.approx(0.8) and fit.b == pytest.approx(-0.02) and fit.r2 == pytest.approx(1.0)


def test_estimates_are_close_to_the_truth_with_noise():
    rng = np.random.default_rng(0)
    estimates = np.array([[f.a, f.b] for f in (fit_log_linear(*synthetic(rng, 0.7, -0.015, 0.005))
                                               for _ in range(400))])
    assert estimates[:, 0].mean() == pytest.approx(0.7, abs=0.003)
    assert estimates[:, 1].mean() == pytest.approx(-0.015, abs=0.0006)


def test_prediction_interval_covers_new_runs_at_the_target_95_percent_of_the_time():
    rng = np.random.default_rng(1)
    a, b, noise, target = 0.7, -0.015, 0.01, 4096
    hits = 0
    trials = 2000
    for _ in range(trials):
        fit = fit_log_linear(*synthetic(rng, a, b, noise))
        _, lo, hi = fit.predict(target)
        actual = a + b * math.log(target) + rng.normal(0, noise)
        hits += lo <= actual <= hi
    assert 0.93 <= hits / trials <= 0.97


def test_interval_is_wider_further_from_the_data():
    rng = np.random.default_rng(2)
    fit = fit_log_linear(*synthetic(rng, 0.7, -0.01, 0.01))
    width = lambda b: fit.predict(b)[2] - fit.predict(b)[1]  # noqa: E731
    assert width(64) < width(1024) < width(16384)


def test_fit_needs_two_distinct_batch_sizes():
    with pytest.raises(ValueError):
        fit_log_linear([64, 64], [0.5, 0.6])


def test_privacy_parameter_family_has_equal_eta_at_every_k():
    n, b, steps, sigma = 48_000, 4096, 400, 3.0
    reference = tan.eta(b / n, sigma, steps)
    for point in tan.privacy_parameter_family(b, sigma, steps, (0.25, 0.5, 1, 2, 4)):
        assert tan.eta(point.batch_size / n, point.sigma, point.steps) == pytest.approx(reference, rel=1e-9)


def _coverage_of_choose(rng, a, b, noise, target, trials=1500):
    hits, flats = 0, 0
    for _ in range(trials):
        fit = fit_log_linear(*synthetic(rng, a, b, noise))
        model, (_, lo, hi) = fit.choose(target)
        flats += model == "flat"
        actual = a + b * math.log(target) + rng.normal(0, noise)
        hits += lo <= actual <= hi
    return hits / trials, flats / trials


def test_flat_truth_is_predicted_by_the_mean_and_still_covered():
    coverage, flat_share = _coverage_of_choose(np.random.default_rng(3), 0.8, 0.0, 0.015, 4096)
    assert flat_share >= 0.9  # the slope test keeps the line only ~5% of the time
    assert coverage >= 0.93


def test_a_clear_slope_is_kept_and_covered():
    coverage, flat_share = _coverage_of_choose(np.random.default_rng(4), 0.5, 0.05, 0.005, 4096)
    assert flat_share == 0.0
    assert 0.93 <= coverage <= 0.97


def test_flat_prediction_is_the_mean_with_a_t_interval():
    y = np.array([0.82, 0.85, 0.84, 0.85, 0.85, 0.85, 0.82, 0.82])
    fit = fit_log_linear([64] * 4 + [128] * 4, y)
    mean, lo, hi = fit.predict_flat()
    assert mean == pytest.approx(y.mean())
    from scipy import stats
    half = stats.t.ppf(0.975, 7) * y.std(ddof=1) * math.sqrt(1 + 1 / 8)
    assert (lo, hi) == (pytest.approx(mean - half), pytest.approx(mean + half))


def test_flat_mean_below_a_line_that_leaves_0_1_is_not_trusted():
    """The measured failure: proxies at B' = 16, 32 whose slope interval contained 0 chose the flat mean
    (0.80, inside [0, 1]) while the line reached 1.1 at the target; the launch landed at 0.90, outside."""
    from tanplan.workflow.scaling import verdict

    assert verdict(0.80, 0.69, 0.90) is None  # the flat mean alone looks fine
    why, change = verdict(0.80, 0.69, 0.90, line_at_target=1.106)
    assert "below the knee" in why and "1.11" in why and "auto" in change
    assert verdict(0.80, 0.69, 0.90, line_at_target=0.95) is None
    assert verdict(0.80, -0.1, 0.90, line_at_target=0.95)[0].startswith("the batch law does not hold")
