"""The batch law on synthetic rows (pure, no training): forms, window, the interval for one launch and its
parts, its coverage of new launches, and the verdict."""

import math

import numpy as np
import pytest

from tanplan.workflow.batch_law import (AUTO_FORMS, FORMS, Rung, choose_window, eval_set_variance, fit_form, held_out, predict,
                                        rungs_of, verdict)

SIZES = (16, 32, 64, 128, 256)


def rows(curve, rng, seeds=4, noise=0.01, sizes=SIZES):
    return [(b, curve(b) + e) for b in sizes for e in rng.normal(0, noise, seeds)]


def test_each_form_recovers_its_own_noiseless_curve_exactly():
    for form, curve, coef in (("noise", lambda b: 0.9 - 1.5 / b, (0.9, -1.5)),
                              ("log-linear", lambda b: 0.5 + 0.03 * math.log(b), (0.5, 0.03)),
                              ("flat", lambda b: 0.8, (0.8,))):
        law = fit_form([Rung(b, (curve(b),) * 3) for b in SIZES], form)
        assert law.coef == pytest.approx(coef) and law.lack_of_fit_p == 1.0
        assert law.mean(4096) == pytest.approx(curve(4096)) and law.mean_variance(4096) == pytest.approx(0, abs=1e-20)


def test_least_squares_on_rung_means_weighted_by_seeds_is_least_squares_on_every_run():
    rng = np.random.default_rng(0)
    data = [(b, 0.85 - 1 / b + e) for b, n in ((16, 6), (32, 3), (64, 4), (128, 2)) for e in rng.normal(0, 0.02, n)]
    law = fit_form(rungs_of(data), "noise")
    x = np.array([[1, 1 / b] for b, _ in data])
    y = np.array([a for _, a in data])
    coef = np.linalg.lstsq(x, y, rcond=None)[0]
    assert law.coef == pytest.approx(coef)
    within = sum((a - np.mean([c for bb, c in data if bb == b])) ** 2 for b, a in data) / (len(data) - 4)
    assert law.seed_variance == pytest.approx(within) and law.seed_dof == len(data) - 4
    # Var(mean at B) = s²·x₀ᵀ(XᵀX)⁻¹x₀ with the runs' design matrix
    x0 = np.array([1, 1 / 4096])
    assert law.mean_variance(4096) == pytest.approx(within * x0 @ np.linalg.inv(x.T @ x) @ x0)


def test_the_window_leaves_out_a_cliff_below_the_knee():
    rng = np.random.default_rng(1)
    cliff = lambda b: 0.5 if b == 16 else 0.85 - 0.5 / b  # noqa: E731  rung 16 far below the 1/B' curve
    window, tried = choose_window(rungs_of(rows(cliff, rng, noise=0.005)))
    assert window[0].batch_size == 32 and tried[0]["lack_of_fit_p"] < 0.05
    starts = [choose_window(rungs_of(rows(lambda b: 0.85 - 0.5 / b, rng, noise=0.005)))[0][0].batch_size
              for _ in range(60)]
    assert starts.count(16) >= 48  # on the law itself the test rejects about 5% of the time


def test_held_out_error_picks_the_form_of_the_curve_and_auto_never_picks_the_line():
    rng = np.random.default_rng(2)
    chosen = {name: [predict(rows(curve, rng, noise=0.004), 4096, forms=FORMS).law.form for _ in range(30)]
              for name, curve in (("noise", lambda b: 0.9 - 2 / b), ("log-linear", lambda b: 0.6 + 0.04 * math.log(b)),
                                  ("flat", lambda b: 0.8))}
    assert chosen["noise"].count("noise") >= 25 and chosen["log-linear"].count("log-linear") >= 25
    assert chosen["flat"].count("flat") >= 20
    line = [predict(rows(lambda b: 0.6 + 0.04 * math.log(b), rng, noise=0.004), 4096).law.form for _ in range(10)]
    assert "log-linear" not in line and AUTO_FORMS == ("noise", "flat")


def test_the_interval_has_three_parts_and_misspecification_shows_a_wrong_form():
    rng = np.random.default_rng(3)
    data = rows(lambda b: 0.9 - 2 / b, rng, seeds=6, noise=0.01)
    p = predict(data, 4096)
    assert p.var_launch == pytest.approx(p.law.seed_variance) and 0.004 < math.sqrt(p.var_launch) < 0.016
    assert p.variance == pytest.approx(p.var_mean + p.var_launch + p.var_misspecification)
    assert p.half_width == pytest.approx(p.quantile * math.sqrt(p.variance))
    assert p.interval == pytest.approx((p.mean - p.half_width, p.mean + p.half_width))
    flat = predict(data, 4096, forms=("flat",))  # the wrong form: the held-out error exceeds seed noise
    assert flat.var_misspecification > 10 * p.var_misspecification and flat.half_width > p.half_width
    parts = p.to_dict()["std_parts"]
    assert parts["launch"] == pytest.approx(math.sqrt(p.var_launch))


def test_the_interval_covers_about_95_percent_of_new_launches():
    rng = np.random.default_rng(4)
    curve, noise, target = (lambda b: 0.88 - 1.2 / b), 0.015, 2048
    hits = []
    for _ in range(300):
        low, high = predict(rows(curve, rng, noise=noise), target).interval
        launches = curve(target) + rng.normal(0, noise, 20)
        hits.append(np.mean((launches >= low) & (launches <= high)))
    assert 0.92 <= np.mean(hits) <= 0.99


def test_test_set_difference_widens_the_interval_by_its_binomial_variance():
    rng = np.random.default_rng(5)
    data = rows(lambda b: 0.8, rng, noise=0.01)
    same, other = predict(data, 4096), predict(data, 4096, test_sizes=(1000, 1000))
    assert other.var_test_sets == pytest.approx(eval_set_variance(other.mean, 1000, 1000))
    assert other.var_misspecification == pytest.approx(same.var_misspecification + other.var_test_sets)
    assert eval_set_variance(0.8, None, None) == 0.0


def test_two_rungs_fit_the_flat_form_and_held_out_starts_at_the_third_rung():
    data = [(16, 0.80), (16, 0.82), (32, 0.81), (32, 0.83)]
    assert predict(data, 1024).law.form == "flat"  # no held-out error to compare: the fewest coefficients
    assert held_out(rungs_of(data), "noise").errors == held_out(rungs_of(data), "flat").errors == ()
    three = rungs_of(data + [(64, 0.84), (64, 0.86)])
    assert len(held_out(three, "flat").errors) == len(held_out(three, "noise").errors) == 1


def test_verdict_refuses_a_law_that_leaves_0_1_and_accepts_a_sound_one():
    rng = np.random.default_rng(6)
    assert verdict(predict(rows(lambda b: 0.8 - 1 / b, rng), 4096)) is None
    steep = predict(rows(lambda b: 0.3 + 0.2 * math.log2(b / 16), rng), 4096, forms=("log-linear",))
    why, change = verdict(steep)
    assert steep.mean > 1 and "does not hold" in why and change


def test_predict_needs_two_rungs_of_two_seeds():
    with pytest.raises(ValueError, match="two rungs"):
        predict([(16, 0.8), (16, 0.81)], 4096)
    with pytest.raises(ValueError, match="two seeds"):
        predict([(16, 0.8), (16, 0.81), (32, 0.8)], 4096)
