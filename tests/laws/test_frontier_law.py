"""The frontier law (accuracy against ln S): coefficients, prediction intervals that cover new runs at
their level, differences told apart only when the data can, and the auto law's choice of degree."""

import math

import numpy as np
import pytest

from tanplan.laws.frontier_law import fit_degree, fit_frontier_law

STEPS = [75, 150, 300, 600, 1200]


def parabola(s, peak=300.0, top=0.85, curve=0.02):
    return top - curve * (math.log(s) - math.log(peak)) ** 2


def runs(law, seeds, noise, rng):
    steps = [s for s in STEPS for _ in range(seeds)]
    return steps, [law(s) + rng.normal(0, noise) for s in steps]


def test_a_noiseless_parabola_is_recovered_exactly():
    steps, acc = runs(parabola, 1, 0.0, np.random.default_rng(0))
    law = fit_degree(steps, acc, 2)
    assert law.model == "quadratic" and law.dof == 2
    for s in (100, 300, 900):
        assert law.mean(s) == pytest.approx(parabola(s), abs=1e-9)
    assert law.residual_std == pytest.approx(0.0, abs=1e-9)


def test_prediction_intervals_cover_new_runs_at_their_level():
    """Over many simulated studies, a new run at each S lands in the 90% interval about 90% of the time."""
    rng = np.random.default_rng(1)
    hits = total = 0
    for _ in range(300):
        steps, acc = runs(parabola, 2, 0.01, rng)
        law = fit_degree(steps, acc, 2)
        for s in (150, 424):
            _, low, high = law.predict(s, 0.9)
            hits += low <= parabola(s) + rng.normal(0, 0.01) <= high
            total += 1
    assert 0.86 <= hits / total <= 0.94


def test_differences_are_told_apart_only_when_the_data_can():
    rng = np.random.default_rng(2)
    steps, acc = runs(parabola, 2, 0.003, rng)
    law = fit_degree(steps, acc, 2)
    diff, low, high = law.difference(300, 1200)
    assert diff == pytest.approx(parabola(300) - parabola(1200), abs=0.01) and low > 0
    flat_steps, flat_acc = runs(lambda s: 0.8, 2, 0.01, rng)
    flat = fit_degree(flat_steps, flat_acc, 2)
    _, low, high = flat.difference(150, 600)
    assert low < 0 < high


def test_auto_keeps_the_curvature_it_sees_and_drops_what_it_does_not():
    rng = np.random.default_rng(3)
    steps, acc = runs(parabola, 2, 0.003, rng)
    assert fit_frontier_law(steps, acc, "auto").model == "quadratic"
    steps, acc = runs(lambda s: 0.7 + 0.05 * math.log(s / 75), 2, 0.003, rng)
    assert fit_frontier_law(steps, acc, "auto").model == "linear"
    # flat truth: each pre-test keeps a term by chance 5% of the time, so flat wins about 90% of studies
    models = [fit_frontier_law(*runs(lambda s: 0.8, 2, 0.01, rng), "auto").model for _ in range(200)]
    assert models.count("flat") / len(models) >= 0.8
    steps, acc = runs(lambda s: 0.8, 2, 0.01, rng)
    assert fit_frontier_law(steps, acc, "flat").mean(75) == pytest.approx(np.mean(acc))


def test_too_few_runs_or_steps_for_the_degree_are_refused():
    with pytest.raises(ValueError, match="3 distinct S"):
        fit_degree([100, 100, 200, 200], [0.1, 0.2, 0.3, 0.4], 2)
    with pytest.raises(ValueError, match="4 runs"):
        fit_degree([100, 200, 400], [0.1, 0.2, 0.3], 2)
    with pytest.raises(ValueError, match="not known"):
        fit_frontier_law([100, 200, 400, 800], [0.1, 0.2, 0.3, 0.4], "cubic")


def test_lack_of_fit_rejects_a_cliff_and_is_calibrated_on_a_parabola():
    rng = np.random.default_rng(4)
    cliff = lambda s: 0.3 if s == 75 else parabola(s)  # noqa: E731
    assert fit_degree(*runs(cliff, 3, 0.01, rng), 2).lack_of_fit_p < 0.01
    rejected = [fit_degree(*runs(parabola, 3, 0.01, rng), 2).lack_of_fit_p < 0.1 for _ in range(300)]
    assert 0.05 <= sum(rejected) / len(rejected) <= 0.16
    assert fit_degree([100, 200, 400, 800], [0.1, 0.2, 0.3, 0.4], 2).lack_of_fit_p is None  # no replicates


def test_equal_variances_fail_for_an_unstable_candidate_and_hold_otherwise():
    """Bartlett's test, 3 seeds per S: one S scattering 10× more is caught in most studies; with equal
    scatter it rejects at about its level."""
    from tanplan.laws.frontier_law import equal_variance_p

    rng = np.random.default_rng(6)

    def p_value(unstable_noise):
        steps, acc = runs(parabola, 3, 0.01, rng)
        return equal_variance_p(steps, [a + (rng.normal(0, unstable_noise) if s == 75 else 0.0)
                                        for s, a in zip(steps, acc)])

    assert sum(p_value(0.1) < 0.05 for _ in range(200)) / 200 >= 0.7
    assert sum(p_value(0.0) < 0.05 for _ in range(200)) / 200 <= 0.12
    assert equal_variance_p(STEPS, [0.1, 0.2, 0.3, 0.4, 0.5]) is None  # one run per S: nothing to compare
