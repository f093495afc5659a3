"""The yardstick of experiments/calibration.py (issue 48, item 1): coverage, median error, mean half-width and
the interval score against an oracle that knows the launches' mean and spread, each with a bootstrap CI."""

import statistics
import sys

import numpy as np
import pytest
from helpers import ROOT
from scipy import stats

sys.path.insert(0, str(ROOT / "experiments"))

from calibration import Outcome, Pool, oracle_score, winkler, yardstick  # noqa: E402


def _pool(launches):
    return Pool("tiny", 1024, 30, {16: [0.8, 0.81]}, list(launches))


def test_the_interval_score_is_width_plus_2_over_alpha_times_the_miss():
    assert winkler(0.80, 0.90, 0.85) == pytest.approx(0.10)
    assert winkler(0.80, 0.90, 0.95) == pytest.approx(0.10 + 40 * 0.05)  # 2/α = 40 at α = 0.05
    assert winkler(0.80, 0.90, 0.78) == pytest.approx(0.10 + 40 * 0.02)


def test_the_oracle_knows_the_launches_mean_and_spread():
    launches = np.array([0.85, 0.86, 0.87, 0.84, 0.88])
    m, sd, z = launches.mean(), launches.std(ddof=1), stats.norm.ppf(0.975)
    assert oracle_score(launches) == pytest.approx(np.mean(winkler(m - z * sd, m + z * sd, launches)))


def test_the_yardstick_is_computed_as_by_hand_and_its_cis_bracket_it():
    launches = [0.85, 0.86, 0.87, 0.84, 0.88, 0.86]
    outs = [Outcome(True, 0.86, 0.82, 0.90, 0.2, form="knee"), Outcome(True, 0.84, 0.83, 0.85, 0.2, form="noise"),
            Outcome(False, None, None, None, 0.3)]
    y = yardstick(_pool(launches), outs, "rule", boot=300)
    L = np.array(launches)
    covered = np.mean([np.mean((L >= o.low) & (L <= o.high)) for o in outs[:2]])
    score = np.mean([np.mean(winkler(o.low, o.high, L)) for o in outs[:2]])
    assert y.refused == pytest.approx(1 / 3) and y.coverage[0] == pytest.approx(covered)
    assert y.median_error[0] == pytest.approx(np.median([abs(0.86 - L.mean()), abs(0.84 - L.mean())]))
    assert y.half_width[0] == pytest.approx(statistics.fmean([0.04, 0.01]))
    assert y.score_ratio[0] == pytest.approx(score / oracle_score(L))
    assert y.laws == {"knee": 1, "noise": 1} and y.compute == pytest.approx(0.7 / 3)
    for est, low, high in (y.coverage, y.median_error, y.half_width, y.score_ratio):
        assert low - 1e-9 <= est <= high + 1e-9
    assert "| tiny | rule | 3 | 0.333 |" in y.row() and "knee 1" in y.row()


def test_an_interval_too_wide_scores_worse_than_the_oracle_even_when_it_covers_everything():
    rng = np.random.default_rng(0)
    launches = 0.86 + rng.normal(0, 0.01, 20)
    wide = [Outcome(True, 0.86, 0.80, 0.92, 0.2, form="knee")] * 3
    y = yardstick(_pool(launches), wide, "wide", boot=200)
    assert y.coverage[0] == 1.0 and y.score_ratio[0] > 2.5  # coverage cannot tell; the score can
