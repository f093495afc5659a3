"""experiments/calibration.py's item-6 tables (issue 48): each rung's seed spread against the launches' (--seeds)
and the spread ratio learned leave-one-setting-out (--spread-prior). Fixed numbers and the stored ε 1.0 pool;
nothing is replayed."""

import math
import sys

import pytest
from helpers import ROOT

sys.path.insert(0, str(ROOT / "experiments"))

from calibration import FOUR, Outcome, Pool, learned_ratio, own_ratio, seeds_rows  # noqa: E402


def test_the_ratio_is_learned_on_the_other_settings_of_record_only():
    ratios = {"demo": 0.8, "eps1_b2048": 0.5, "mnist5k": 0.8, "large_b16384": 1.0, "finetune_all": 1.5}
    r, on = learned_ratio(ratios, "demo")
    assert on == ("eps1_b2048", "mnist5k", "large_b16384") and r == pytest.approx((0.5 * 0.8 * 1.0) ** (1 / 3))
    r, on = learned_ratio(ratios, "finetune_all")  # a fine-tuning setting: all four, never its own
    assert on == FOUR and r == pytest.approx((0.8 * 0.5 * 0.8 * 1.0) ** 0.25)
    assert math.isnan(learned_ratio({"finetune": 1.0}, "finetune")[0])  # nothing of the four to learn from


def test_a_settings_own_ratio_is_the_launches_std_over_the_rules_median_estimate():
    pool = Pool("x", 1024, 30, {16: [0.8, 0.82]}, [0.85, 0.87, 0.86])  # launches' std 0.01
    outcomes = [Outcome(True, 0.86, 0.8, 0.9, 0.1, launch_std=s) for s in (0.01, 0.02, 0.04)]
    outcomes.append(Outcome(False, None, None, None, 0.1))  # a refused draw reads no spread
    assert own_ratio(pool, outcomes) == pytest.approx(0.5)


def test_the_eps1_b512_seeds_are_three_real_runs_and_the_f_test_says_how_unlikely_their_agreement_is():
    rows = seeds_rows(ROOT / "experiments" / "calibration_pools" / "eps1_b2048.jsonl")
    cells = next(r for r in rows if r.startswith("| eps1_b2048 | 512 |")).strip("| ").split(" | ")
    assert cells[2:] == ["3", "0.901, 0.90025, 0.901", "0.04", "1.07", "1.27", "864", "0.0012", "1"]
