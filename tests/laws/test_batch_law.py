"""The batch law on synthetic rows (pure, no training): forms, knee, window, the interval for one launch and
its parts, its coverage of new launches, and the verdict."""

import math

import numpy as np
import pytest

from tanplan.laws.batch_law import (AUTO_FORMS, Rung, eval_set_variance, fit_form, fit_spread, forms_of,
                                        held_out, knee_average, predict, rungs_of, verdict, window_of)

SIZES = (16, 32, 64, 128, 256)
HINGE = lambda b: 0.85 - 0.05 * max(0.0, math.log2(64 / b))  # noqa: E731  rising 5 points a doubling to 64


def rows(curve, rng, seeds=4, noise=0.01, sizes=SIZES):
    return [(b, curve(b) + e) for b in sizes for e in rng.normal(0, noise, seeds)]


def test_each_form_recovers_its_own_noiseless_curve_exactly():
    for form, curve, coef in (("noise", lambda b: 0.9 - 1.5 / b, (0.9, -1.5)),
                              ("log-linear", lambda b: 0.5 + 0.03 * math.log(b), (0.5, 0.03)),
                              ("flat", lambda b: 0.8, (0.8,)),
                              ("knee", HINGE, (0.85, 0.05 / math.log(2)))):
        law = fit_form([Rung(b, (curve(b) - 1e-3, curve(b) + 1e-3)) for b in SIZES], form)
        assert law.coef == pytest.approx(coef) and law.lack_of_fit_p == pytest.approx(1.0)
        assert law.mean(4096) == pytest.approx(curve(4096))
    assert fit_form([Rung(b, (HINGE(b) - 1e-3, HINGE(b) + 1e-3)) for b in SIZES], "knee").knee == 64


def test_weighted_least_squares_weighs_each_rung_by_its_seeds_over_their_variance():
    rng = np.random.default_rng(0)
    data = [(b, 0.85 - 1 / b + e) for b, n in ((16, 6), (32, 3), (64, 4), (128, 5)) for e in rng.normal(0, 0.02, n)]
    rungs = rungs_of(data)
    law = fit_form(rungs, "noise")
    pooled = sum((r.n - 1) * r.std**2 for r in rungs) / sum(r.n - 1 for r in rungs)
    v = np.array([((r.n - 1) * r.std**2 + 4 * pooled) / (r.n - 1 + 4) for r in rungs])  # shrunk toward pooled
    x = np.array([[1, 1 / r.batch_size] for r in rungs])
    w = np.array([r.n for r in rungs]) / v
    inv = np.linalg.inv(x.T @ (w[:, None] * x))
    assert law.coef == pytest.approx(inv @ x.T @ (w * np.array([r.mean for r in rungs])))
    x0 = np.array([1, 1 / 4096])
    assert law.mean_variance(4096) == pytest.approx(x0 @ inv @ x0)


def test_the_knee_law_uses_every_rung_and_its_plateau_is_the_prediction():
    rng = np.random.default_rng(1)
    p = predict(rows(HINGE, rng, seeds=6, noise=0.005), 4096)
    assert p.law.form == "knee" and p.law.knee == 64 and p.law.window == SIZES
    assert p.mean == pytest.approx(0.85, abs=0.004)
    falling = [Rung(b, (0.9 - 0.01 * i - 1e-3, 0.9 - 0.01 * i + 1e-3)) for i, b in enumerate(SIZES)]
    assert fit_form(falling, "knee").knee == 16  # no rise: the flat law, not a knee with a negative slope


def test_an_unclear_knee_averages_the_plateaus_by_likelihood_and_counts_their_spread():
    # B' = 32 may be on the plateau or still rising: knees at 32 and 64 both fit. Every rung's seeds scatter
    # alike (±0.02), so each rung's weight is n/s² = 2/0.0008 and each knee's χ² is that times its residuals'
    # sum of squares: the average is recomputed here by plain least squares, independently of the module.
    means = {16: 0.75, 32: 0.84, 64: 0.85, 128: 0.86}
    rungs = [Rung(b, (m - 0.02, m + 0.02)) for b, m in means.items()]
    b, y = np.array(list(means)), np.array(list(means.values()))
    plateaus, chi2 = [], []
    for k in b:
        x = np.stack([np.ones(len(b)), -np.maximum(0.0, np.log(k / b))], axis=1)
        coef, *_ = np.linalg.lstsq(x, y, rcond=None)
        if k == b[0] or coef[1] > 0:
            plateaus.append(coef[0])
            chi2.append(2 / 0.0008 * float(((y - x @ coef) ** 2).sum()))
    w = np.exp(-(np.array(chi2) - min(chi2)) / 2)
    w /= w.sum()
    mean = float(w @ plateaus)
    assert knee_average(rungs) == pytest.approx((mean, float(w @ (np.array(plateaus) - mean) ** 2)))
    p = predict([(r.batch_size, a) for r in rungs for a in r.accuracies], 4096)
    best = p.law.coef[0]  # the best knee's plateau
    assert p.law.knee == 32 and p.mean == pytest.approx(mean) and mean > best  # pulled toward the later knee
    assert p.chosen.var_knee > 1e-5 and p.var_mean == pytest.approx(p.chosen.var_mean + p.chosen.var_knee)
    # a clear knee: its plateau, and a spread that hardly counts beside the coefficients' own uncertainty
    clear = predict(rows(HINGE, np.random.default_rng(1), seeds=6, noise=0.005), 4096)
    assert clear.chosen.var_knee < 0.01 * clear.chosen.var_mean
    assert clear.mean == pytest.approx(clear.law.coef[0], abs=1e-4)


def test_a_window_leaves_out_a_cliff_the_noise_form_cannot_fit():
    rng = np.random.default_rng(2)
    cliff = lambda b: 0.5 if b == 16 else 0.85 - 0.5 / b  # noqa: E731
    assert window_of(rungs_of(rows(cliff, rng, noise=0.005)), "noise")[0].batch_size == 32
    starts = [window_of(rungs_of(rows(lambda b: 0.85 - 0.5 / b, rng, noise=0.005)), "noise")[0].batch_size
              for _ in range(40)]
    assert starts.count(16) >= 32  # on the law itself the test rejects about 5% of the time


def test_auto_chooses_the_noise_law_when_the_knee_law_is_shown_wrong_and_never_the_line():
    rng = np.random.default_rng(3)
    rising = lambda b: 0.9 - 2.0 / b  # noqa: E731  still rising at every rung: no plateau
    chosen = [predict(rows(rising, rng, noise=0.003), 4096, forms=forms_of("auto")).law.form for _ in range(20)]
    assert chosen.count("noise") >= 15 and AUTO_FORMS == ("knee", "noise")
    flat = [predict(rows(HINGE, rng, noise=0.003), 4096, forms=forms_of("auto")).law.form for _ in range(20)]
    assert flat.count("knee") >= 15
    with pytest.raises(ValueError, match="unknown law"):
        forms_of("line")


def test_the_interval_has_three_parts_and_a_wrong_form_shows_as_misspecification():
    rng = np.random.default_rng(4)
    data = rows(lambda b: 0.9 - 2 / b, rng, seeds=6, noise=0.01)
    p = predict(data, 4096, forms=("noise",))
    assert p.variance == pytest.approx(p.var_mean + p.var_launch + p.var_misspecification)
    assert p.half_width == pytest.approx(p.quantile * math.sqrt(p.variance))
    assert p.interval == pytest.approx((p.mean - p.half_width, p.mean + p.half_width))
    assert 0.006 < math.sqrt(p.var_launch) < 0.016 and p.var_launch == pytest.approx(p.spread.at(4096))
    flat = predict(data, 4096, forms=("flat",))  # the wrong form: its held-out error exceeds seed noise
    assert flat.var_misspecification > 10 * max(p.var_misspecification, 1e-6) and flat.half_width > p.half_width
    assert p.record().std_parts.launch == pytest.approx(math.sqrt(p.var_launch))


def test_held_out_predicts_each_rung_from_the_rungs_below_it_and_the_knee_law_counts_its_plateau():
    rungs = [Rung(b, (HINGE(b) - 0.01, HINGE(b) + 0.01)) for b in SIZES]
    h = held_out(rungs, "knee")
    assert h.batch_sizes == (64, 128, 256)
    # 64 from 16, 32 (the knee law carries 32 on: 5 points low), 128 from 16-64 and 256 from 16-128: exact
    assert h.errors[0] == pytest.approx(HINGE(32) - HINGE(64)) and h.errors[1:] == pytest.approx((0, 0), abs=1e-9)
    p = predict([(r.batch_size, a) for r in rungs for a in r.accuracies], 4096)
    assert p.law.knee == 64 and p.chosen.held.batch_sizes == (128, 256)  # the rungs past the knee
    assert p.var_misspecification == 0


def test_the_launch_spread_falls_with_b_only_when_the_seeds_show_it():
    rng = np.random.default_rng(5)
    falling = [Rung(b, tuple(0.8 + rng.normal(0, math.sqrt(1e-5 + 0.01 / b), 40))) for b in SIZES]
    spread = fit_spread(falling)
    assert spread.v1 > 0 and spread.at(4096) < min(r.std**2 for r in falling)
    flat = fit_spread([Rung(b, tuple(0.8 + rng.normal(0, 0.01, 4))) for b in SIZES])
    assert flat.v1 == 0 and flat.effective_dof(4096) == 15


def test_the_interval_covers_about_95_percent_of_new_launches():
    rng = np.random.default_rng(6)
    noise, target = 0.015, 2048
    hits = []
    # 100 draws of 20 launches: the mean coverage has a standard error of 0.011 (0.94 here), so an interval
    # covering 90% fails the lower bound 0.92 with probability 0.96 (0.995 with 200 draws, twice the CPU)
    for _ in range(100):
        low, high = predict(rows(HINGE, rng, noise=noise), target).interval
        launches = HINGE(target) + rng.normal(0, noise, 20)
        hits.append(np.mean((launches >= low) & (launches <= high)))
    assert 0.92 <= np.mean(hits) <= 0.995


def test_where_the_seeds_scatter_less_at_larger_b_the_interval_follows_the_launchs_own_spread():
    # sampling noise falls with B' (v1/B'), the DP noise does not (v0): a launch at B scatters by √(v0 + v1/B),
    # fitted on the plateau's rungs (64 … 1024 here), where the law meets the target
    rng = np.random.default_rng(9)
    sizes, v0, v1, target = (16, 32, 64, 128, 256, 512, 1024), 0.005**2, 0.0096, 4096
    launch_std = math.sqrt(v0 + v1 / target)
    hits, widths, stds = [], [], []
    # 100 draws (200 before, twice the CPU): on seeds 9 and 20-24 the median σ/pooled is 0.66-0.82 (pooled:
    # 1.0), the fall is fitted in 42-55% of the draws and its widths are 0.61-0.67 of the others
    for _ in range(100):
        data = [(b, HINGE(b) + e) for b in sizes for e in rng.normal(0, math.sqrt(v0 + v1 / b), 4)]
        p = predict(data, target)
        low, high = p.interval
        launches = HINGE(target) + rng.normal(0, launch_std, 20)
        hits.append(np.mean((launches >= low) & (launches <= high)))
        widths.append((p.spread.v1 > 0, p.half_width))
        stds.append(math.sqrt(p.var_launch))
    assert 0.90 <= np.mean(hits) <= 0.999
    # not the plateau's pooled scatter (√(v0 + v1/256) ≈ 1.5 × the launch's): the fall is fitted
    pooled = math.sqrt(v0 + v1 / 256)
    assert np.median(stds) < 0.85 * pooled
    fitted = [w for falls, w in widths if falls]  # 4 seeds a rung: the fall is significant in a part of the draws
    assert len(fitted) >= len(widths) / 3
    assert np.median(fitted) < np.median([w for falls, w in widths if not falls])


def test_the_scatter_of_the_rise_below_a_knee_does_not_set_the_launchs_spread():
    # Below the knee a seed also scatters by where it sits on the rise: 4 and 1.5 points at B' = 16 and 32, a
    # fall far steeper than 1/B', then 0.5 points on the plateau, as a launch scatters. Fitted across every
    # rung, v0 + v1/B' would put v0 at 0 and promise a launch almost without spread.
    rng = np.random.default_rng(10)
    std = {16: 0.04, 32: 0.015}
    sizes, target = (16, 32, 64, 128, 256), 16384
    stds, across = [], []
    for _ in range(50):
        data = [(b, HINGE(b) + e) for b in sizes for e in rng.normal(0, std.get(b, 0.005), 3)]
        stds.append(math.sqrt(predict(data, target).var_launch))
        across.append(math.sqrt(fit_spread(rungs_of(data)).at(target)))
    assert 0.6 * 0.005 < np.median(stds) < 1.5 * 0.005
    assert np.median(across) < 0.5 * 0.005  # what the plateau's rungs alone avoid


def test_a_test_set_difference_is_in_the_interval_as_a_part_of_its_own():
    """Proxies evaluated on another test set than the launch's: the two sets' offset (binomial) joins the
    interval's variance as a known part, and the record names it; on one test set there is no such part."""
    rng = np.random.default_rng(7)
    data = rows(lambda b: 0.8, rng, noise=0.01)
    same, other = predict(data, 4096), predict(data, 4096, test_sizes=(1000, 1000))
    assert other.var_test_sets == pytest.approx(eval_set_variance(other.mean, 1000, 1000)) and same.var_test_sets == 0
    assert other.mean == same.mean and other.quantile == same.quantile
    assert other.variance == pytest.approx(same.variance + other.var_test_sets)
    assert other.half_width == pytest.approx(same.quantile * math.sqrt(same.variance + other.var_test_sets))
    assert other.interval[0] < same.interval[0] and other.interval[1] > same.interval[1]
    assert other.record().test_sets_std == pytest.approx(math.sqrt(other.var_test_sets))
    assert other.record().std_parts.test_sets == pytest.approx(math.sqrt(other.var_test_sets))
    assert same.record().std_parts.test_sets is None and "test_sets" not in same.record().std_parts.to_dict()


def test_two_rungs_predict_from_the_top_one():
    data = [(16, 0.80), (16, 0.82), (32, 0.85), (32, 0.87)]
    # The rise ends where the data end: the top rung's mean, but for the flat law's weight in the knee's
    # average (exp(−χ²/2) with χ² = 12.5 here: 0.2%, which moves the mean by 0.01 points)
    assert predict(data, 1024).mean == pytest.approx(0.86, abs=2e-4)
    assert held_out(rungs_of(data), "knee").errors == ()


def test_verdict_refuses_a_law_that_leaves_0_1_and_accepts_a_sound_one():
    rng = np.random.default_rng(8)
    assert verdict(predict(rows(HINGE, rng), 4096)) is None
    steep = predict(rows(lambda b: 0.3 + 0.2 * math.log2(b / 16), rng), 4096, forms=("log-linear",))
    why, change = verdict(steep)
    assert steep.mean > 1 and "does not hold" in why and change
    sound = predict(rows(HINGE, rng), 4096)
    why, change = verdict(sound, max_half_width=sound.half_width / 2)  # too wide: what to change names both budgets
    assert "wider than fit.max_half_width" in why and "fit.max_proxy_fraction" in change and "fit.compute_budget" in change


def test_predict_needs_two_rungs_of_two_seeds():
    with pytest.raises(ValueError, match="two rungs"):
        predict([(16, 0.8), (16, 0.81)], 4096)
    with pytest.raises(ValueError, match="two seeds"):
        predict([(16, 0.8), (16, 0.81), (32, 0.8)], 4096)


def test_a_refusal_names_the_test_sets_offset_and_what_narrows_it():
    rng = np.random.default_rng(7)
    data = rows(lambda b: 0.8, rng, noise=0.01)
    p = predict(data, 4096, test_sizes=(100, 100))  # ± 5.7 points (std) between two 100-row test sets
    why, change = verdict(p, max_half_width=0.05)
    assert f"{100 * math.sqrt(p.var_test_sets):.1f} points (std) of it the offset between the proxies' test set" in why
    assert "evaluate the proxies on a larger test set" in change
    why, change = verdict(predict(data, 4096), max_half_width=0.001)  # one test set: no such part to name
    assert "offset" not in why and "larger test set" not in change
