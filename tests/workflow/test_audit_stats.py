"""The audit's bounds (tanplan.workflow.audit_stats): jax-privacy's one-run analyses on counts, two-sided
guesses with abstention, guesses planned from public values only, the union bound, and the ceiling."""

import functools

import numpy as np
import pytest
from helpers import fast_norm
from jax_privacy import auditing

from tanplan.privacy import accounting
from tanplan.workflow import audit_stats as stats

DELTA = 1e-5


@pytest.fixture(name="fast_norm")
def _fast_norm(monkeypatch):
    """jax-privacy's f-DP bound with scipy.stats.norm's scalar calls as the ufuncs they call (helpers._Norm): a plan
    of six f-DP bounds on 1000 canaries 3.5 CPU-s → 0.1."""
    fast_norm(monkeypatch)


@pytest.mark.parametrize("method", [stats.EXACT, stats.FDP])
def test_the_bound_on_counts_is_jax_privacys_own_for_one_sided_guesses(method):
    """Guessing the top k "held in" through the auditor's public interface gives the same bound as the counts."""
    rng = np.random.default_rng(0)
    held_in, held_out = rng.normal(1.5, 1, size=60), rng.normal(0, 1, size=60)
    threshold = np.sort(np.concatenate([held_in, held_out]))[::-1][29]  # the top 30 guessed held in
    auditor = auditing.CanaryScoreAuditor(held_in, held_out)
    public = (auditor.epsilon_one_run_fdp if method == stats.FDP else auditor.epsilon_one_run)(
        0.05, DELTA, threshold_strategy=auditing.Explicit(threshold))
    guesses, correct = stats.counts(held_in, held_out, stats.Guesses(30, 0))
    assert (guesses, correct) == (30, int((held_in >= threshold).sum()))
    assert public > 0 and stats._epsilon(method, 120, guesses, correct, DELTA, 0.05) == pytest.approx(public)


def test_two_sided_guesses_count_the_highest_in_and_the_lowest_out():
    held_in, held_out = np.array([5.0, 4.0, 0.0, -3.0]), np.array([4.0, 1.0, -1.0, -2.0])
    # ranked: 5 (in), 4 (out, before the tied held-in one: ties count against the auditor), 4 (in), 1, 0, -1, -2, -3 (in)
    assert stats.counts(held_in, held_out, stats.Guesses(2, 0)) == (2, 1)
    assert stats.counts(held_in, held_out, stats.Guesses(3, 3)) == (6, 2 + 2)
    assert stats.counts(held_in, held_out, stats.Guesses(0, 1)) == (1, 0)


def test_abstaining_on_the_middle_beats_guessing_the_top_alone_on_ideal_canaries():
    """Ideal DP-SGD canaries (the claimed mechanism itself): the same number of guesses split over both ends
    is more often right than all at the top, and the bound follows."""
    ideal_in, ideal_out = stats.ideal_scores(0.25, 2.8, 100, 500, np.random.default_rng(1))
    one_sided = stats.bound_from_guesses(ideal_in, ideal_out, [stats.Guesses(124, 0)], DELTA, 0.95)
    two_sided = stats.bound_from_guesses(ideal_in, ideal_out, [stats.Guesses(62, 62)], DELTA, 0.95)
    assert two_sided.correct > one_sided.correct and two_sided.epsilon > one_sided.epsilon


@pytest.mark.usefixtures("fast_norm")
@pytest.mark.parametrize("method", [stats.EXACT, stats.FDP])
def test_the_planned_guesses_depend_on_public_values_alone_and_keep_the_intact_claim(method, monkeypatch):
    # jax-privacy's bound on counts, a pure function of six numbers (the f-DP one: a second each), memoised: the
    # plan made again recomputes its ideal scores and counts, and reads the bounds of equal counts back
    monkeypatch.setattr(stats, "_epsilon", functools.cache(stats._epsilon))
    q, sigma, steps = 0.25, 2.8, 100
    claim = accounting.epsilon(q, sigma, steps, DELTA, "pld")
    plan = stats.planned_guesses(1000, q, sigma, steps, DELTA, 0.045, method)
    assert plan == stats.planned_guesses(1000, q, sigma, steps, DELTA, 0.045, method)  # no secret, no scores
    assert 0 < plan.k_in + plan.k_out < 1000  # it abstains on the middle
    tried = [stats.Guesses(plan.k_in, plan.k_out, 0.9), stats.Guesses(500, 500, 0.1)]
    ideal_in, ideal_out = stats.ideal_scores(q, sigma, steps, 500, np.random.default_rng(2))
    bound = stats.bound_from_guesses(ideal_in, ideal_out, tried, DELTA, 0.95, method)
    assert 0.25 * claim < bound.epsilon < claim, (bound, claim)  # a quarter of the claim at least, never above
    assert bound.epsilon < stats.ceiling(1000, tried, DELTA, 0.95, method)


@pytest.mark.usefixtures("fast_norm")
def test_the_f_dp_estimate_is_tighter_than_the_epsilon_bound_on_the_same_guesses():
    ideal_in, ideal_out = stats.ideal_scores(0.25, 2.8, 100, 500, np.random.default_rng(3))
    tried = [stats.Guesses(125, 125)]
    exact = stats.bound_from_guesses(ideal_in, ideal_out, tried, DELTA, 0.95)
    fdp = stats.bound_from_guesses(ideal_in, ideal_out, tried, DELTA, 0.95, stats.FDP)
    assert (fdp.guesses, fdp.correct) == (exact.guesses, exact.correct) and 0 < exact.epsilon < fdp.epsilon


def test_a_union_over_guesses_pays_for_each_and_perfect_guesses_reach_the_ceiling():
    separated_in, separated_out = np.arange(100.0) + 1000, np.arange(100.0)
    every = [stats.Guesses(100, 100)]
    alone = stats.bound_from_guesses(separated_in, separated_out, every, DELTA, 0.95)
    shared = [stats.Guesses(100, 100, 0.5), stats.Guesses(10, 10, 0.5)]
    with_another = stats.bound_from_guesses(separated_in, separated_out, shared, DELTA, 0.95)
    assert with_another.epsilon < alone.epsilon == pytest.approx(stats.ceiling(200, every, DELTA, 0.95))
    assert with_another.epsilon == pytest.approx(stats.ceiling(200, shared, DELTA, 0.95))
    assert stats.ceiling(200, every, DELTA, 0.95) < stats.ceiling(2000, [stats.Guesses(1000, 1000)], DELTA, 0.95)
    with pytest.raises(ValueError, match="sum to 1"):
        stats.bound_from_guesses(separated_in, separated_out, [stats.Guesses(1, 1), stats.Guesses(2, 2)], DELTA, 0.95)


def test_centring_by_group_takes_off_what_a_group_shares_and_keeps_each_canarys_own_signal():
    """Input canaries of one label overlap: each step adds an offset shared by the label's canaries (a steady
    part, as when a label holds more held-in canaries than another, and a part that changes from step to
    step), which swamps the signal; centring per label at each step takes it off without the coins."""
    rng = np.random.default_rng(4)
    steps, count = 100, 400
    labels, held_in = rng.integers(0, 4, count), rng.random(count) < 0.5
    joined = held_in & (rng.random((steps, count)) < 0.3)
    shared = (rng.standard_normal(4) + 2 * rng.standard_normal((steps, 4)))[:, labels]  # alike within a label
    x = joined + rng.standard_normal((steps, count)) + shared
    centred = stats.centred_by_group(x, labels)
    assert np.allclose([centred[:, labels == g].mean(axis=1) for g in range(4)], 0)
    auroc = lambda z: auditing.CanaryScoreAuditor(z.sum(0)[held_in], z.sum(0)[~held_in]).attack_auroc()  # noqa: E731
    assert auroc(centred) > 0.95 > 0.8 > auroc(x)
