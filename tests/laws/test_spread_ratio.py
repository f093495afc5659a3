"""fit.spread_ratio (issue 48, item 6): an opt-in prior on one launch's spread, off by default.

Pure numpy on fixed numbers: the default leaves the prediction exactly as it was, a ratio r scales the
interval's launch part by r² and nothing else, and a bad value is refused in one line (exit 2)."""

import dataclasses
import math

import pytest
from scipy import stats

from tanplan.config import SPREAD_RATIO_MAX, load_config
from tanplan.errors import UsageError
from tanplan.laws.batch_law import interval_dof, predict, scaled_launch_variance

# A plateau from 64 with three seeds a rung, fixed (no generator): the knee law's regime is 64-256.
CURVE = {16: 0.75, 32: 0.80, 64: 0.85, 128: 0.852, 256: 0.851}
OFFSETS = (-0.012, 0.003, 0.009)
ROWS = [(b, acc + e) for b, acc in CURVE.items() for e in OFFSETS]
TARGET = 4096


def _fields(p):
    """Every number of the prediction a user reads or the ladder decides on."""
    return (p.mean, p.var_mean, p.var_launch, p.var_misspecification, p.dof, p.quantile, p.half_width, p.interval,
            p.lower_bound(), p.law.form, p.law.window, p.record())


@pytest.mark.parametrize("forms", [("knee",), ("knee", "noise")])
def test_the_default_is_off_and_leaves_the_prediction_unchanged_bit_for_bit(forms):
    assert load_config(None).fit.spread_ratio == 0.0
    default = predict(ROWS, TARGET, forms=forms)
    off = predict(ROWS, TARGET, forms=forms, spread_ratio=0.0)
    assert _fields(default) == _fields(off)  # == on floats: the same bits, not approximately
    assert default.var_launch == default.spread.at(TARGET)  # the seeds' own variance, not rescaled
    assert scaled_launch_variance(default.var_launch) is default.var_launch


@pytest.mark.parametrize("ratio", [0.5, 0.82, 1.84])
def test_a_ratio_scales_the_launch_part_by_its_square_and_nothing_else(ratio):
    off = predict(ROWS, TARGET, forms=("knee", "noise"))
    on = predict(ROWS, TARGET, forms=("knee", "noise"), spread_ratio=ratio)
    assert on.spread_ratio == ratio and off.spread_ratio == 0.0
    assert on.var_launch == pytest.approx(ratio**2 * off.var_launch, rel=1e-12)
    # the law, its mean and its misspecification are the proxies': the prior is about one launch's spread only
    assert (on.mean, on.var_mean, on.var_misspecification, on.law.window) == \
        (off.mean, off.var_mean, off.var_misspecification, off.law.window)
    dof = interval_dof(on.var_mean, on.var_launch + on.var_misspecification, on.spread, TARGET)
    half = stats.t.ppf(0.975, dof) * math.sqrt(on.var_mean + ratio**2 * off.var_launch + on.var_misspecification)
    assert on.dof == pytest.approx(dof) and on.half_width == pytest.approx(half, rel=1e-12)
    assert (on.half_width < off.half_width) == (ratio < 1)  # below 1 narrower, above 1 wider


def test_ratio_one_is_the_seeds_own_spread():
    off, one = predict(ROWS, TARGET), predict(ROWS, TARGET, spread_ratio=1.0)
    assert one.var_launch == off.var_launch and one.interval == off.interval


@pytest.mark.parametrize("value", ["-0.5", "82", "4.5"])
def test_a_bad_value_is_refused_in_one_line_naming_it_and_the_range(value):
    with pytest.raises(UsageError) as err:
        load_config(None, [f"fit.spread_ratio={value}"])
    message = str(err.value)
    assert "\n" not in message and err.value.exit_code == 2
    assert f"fit.spread_ratio = {float(value)!r}" in message and f"(0, {SPREAD_RATIO_MAX:g}]" in message


@pytest.mark.parametrize("value", ["nan", "inf", "'x'"])
def test_a_ratio_that_is_not_a_finite_number_is_refused(value):
    with pytest.raises(UsageError, match="fit.spread_ratio.*finite number"):
        load_config(None, [f"fit.spread_ratio={value}"])


def test_good_values_are_read_and_the_function_refuses_what_the_config_refuses():
    assert load_config(None, ["fit.spread_ratio=0.82"]).fit.spread_ratio == 0.82
    assert load_config(None, [f"fit.spread_ratio={SPREAD_RATIO_MAX}"]).fit.spread_ratio == SPREAD_RATIO_MAX
    with pytest.raises(UsageError, match=r"fit.spread_ratio = -1.0"):
        dataclasses.replace(load_config(None).fit, spread_ratio=-1.0)
    for bad in (-0.1, math.nan, math.inf):
        with pytest.raises(ValueError, match="spread_ratio"):
            predict(ROWS, TARGET, spread_ratio=bad)


def test_fit_json_names_the_ratio_only_when_it_is_set():
    """A reader of fit.json (the prediction's record) sees which prior set the launch part; off writes no key."""
    off, on = predict(ROWS, TARGET).record(), predict(ROWS, TARGET, spread_ratio=0.82).record()
    assert "spread_ratio" not in off.to_dict() and off.spread_ratio is None
    assert on.to_dict()["spread_ratio"] == 0.82
