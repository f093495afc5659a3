"""Calibrated σ meets the target ε (never over); ρ and the Gaussian-composition reduction are right."""

from __future__ import annotations

import math

import numpy as np
import pytest

from tanplan.baselines import accounting, first_order, least_squares, newton, prototypes
from tanplan.errors import UsageError

METHOD_MULTIPLIERS = {
    "dp-ls": least_squares.relative_multipliers(),
    "dp-newton": newton.relative_multipliers(newton.NewtonConfig(steps=3)),
    "dp-fc": first_order.fc_relative_multipliers(),
    "dp-adam": first_order.adam_relative_multipliers(),
    "dppl-mean": prototypes.mean_relative_multipliers(),
}


@pytest.mark.parametrize("method", sorted(METHOD_MULTIPLIERS))
@pytest.mark.parametrize("epsilon,delta", [(0.1, 1e-5), (1.0, 1e-6), (8.0, 1e-5)])
@pytest.mark.parametrize("acc", ["analytic", "rdp"])
def test_calibrated_sigma_meets_the_target_never_over(method, epsilon, delta, acc):
    rel = METHOD_MULTIPLIERS[method]
    sigma = accounting.calibrate_gaussian(rel, epsilon, delta, acc)
    spent = accounting.gaussian_epsilon([sigma * c for c in rel], delta, acc)
    assert spent <= epsilon
    assert spent >= epsilon * (1 - 1e-3)  # and not wastefully far below it


def test_pld_calibration_never_over():
    rel = METHOD_MULTIPLIERS["dppl-mean"]
    sigma = accounting.calibrate_gaussian(rel, 0.2, 1e-5, "pld")
    spent = accounting.gaussian_epsilon([sigma * c for c in rel], 1e-5, "pld")
    assert 0.2 * (1 - 1e-3) <= spent <= 0.2


def test_analytic_agrees_with_the_pld_accountant_on_the_composed_event():
    """The one-Gaussian reduction is exact: PLD on the un-reduced composition gives (nearly) the same ε."""
    from dp_accounting.pld import pld_privacy_accountant

    multipliers = [3.0 * c for c in prototypes.mean_relative_multipliers()]  # four different Gaussians
    event = accounting.gaussian_event(multipliers)
    pld = pld_privacy_accountant.PLDAccountant().compose(event).get_epsilon(1e-5)
    analytic = accounting.gaussian_epsilon(multipliers, 1e-5, "analytic")
    assert analytic <= pld <= analytic * 1.01


def test_zcdp_rho_matches_the_rdp_accountant():
    """ρ = Σ 1/(2s²): a ZCDpEvent(ρ) and the composed Gaussians have the same RDP curve, hence ε."""
    from dp_accounting import dp_event
    from dp_accounting.rdp import rdp_privacy_accountant

    multipliers = [2.0, 2.0, 5.0, 0.7]
    rho = accounting.zcdp_rho(multipliers)
    assert rho == pytest.approx(sum(0.5 / s ** 2 for s in multipliers))
    via_gauss = rdp_privacy_accountant.RdpAccountant().compose(accounting.gaussian_event(multipliers))
    via_zcdp = rdp_privacy_accountant.RdpAccountant().compose(dp_event.ZCDpEvent(rho))
    assert via_gauss.get_epsilon(1e-5) == pytest.approx(via_zcdp.get_epsilon(1e-5), rel=1e-9)


def test_paper_zcdp_statements():
    """Theorems 2.1-2.3 of seeds/000 in ρ: DP-LS 3/(2σ²), DP-Newton T/σ², DP-FC (T+1)/(2σ²)."""
    s = 2.5
    assert accounting.zcdp_rho([s * c for c in least_squares.relative_multipliers()]) == pytest.approx(3 / (2 * s * s))
    cfg = newton.NewtonConfig(steps=4)
    assert accounting.zcdp_rho([s * c for c in newton.relative_multipliers(cfg)]) == pytest.approx(4 / s ** 2)
    fc = first_order.FCConfig(steps=10)
    assert accounting.zcdp_rho([s * c for c in first_order.fc_relative_multipliers(fc)]) == pytest.approx(11 / (2 * s * s))
    # DPPL-Mean: the whole budget ρ = 1/(2σ²) is split between the count and the three steps
    assert accounting.zcdp_rho([s * c for c in prototypes.mean_relative_multipliers()]) == pytest.approx(1 / (2 * s * s))


def test_exponential_mechanism_is_pure():
    g = accounting.exponential_guarantee(0.7)
    assert (g.epsilon, g.delta, g.rho, g.mechanism) == (0.7, 0.0, pytest.approx(0.7 ** 2 / 8), "exponential")


def test_event_groups_equal_releases():
    from dp_accounting import dp_event

    event = accounting.gaussian_event([1.0, 1.0, 1.0])
    assert event == dp_event.SelfComposedDpEvent(dp_event.GaussianDpEvent(1.0), 3)
    assert accounting.equivalent_noise_multiplier([1.0, 1.0, 1.0]) == pytest.approx(1 / math.sqrt(3))


@pytest.mark.parametrize("epsilon,delta", [(0.0, 1e-5), (-1.0, 1e-5), (1.0, 0.0), (1.0, 1.0), (math.inf, 1e-5)])
def test_bad_targets_are_usage_errors(epsilon, delta):
    with pytest.raises(UsageError):
        accounting.calibrate_gaussian([1.0], epsilon, delta)


def test_no_noise_is_infinite_epsilon():
    assert accounting.gaussian_epsilon([0.0, 1.0], 1e-5) == math.inf
    assert np.isfinite(accounting.gaussian_epsilon([1.0], 1e-5))
