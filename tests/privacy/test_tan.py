import math

import pytest

from tanplan.privacy import tan
from tanplan.privacy.plan import Plan

IMAGENET = dict(dataset_size=1_281_167, batch_size=16_384, steps=72_000, sigma=2.5, delta=8e-7)


def test_eta_and_eps_tan_match_the_paper_formulas_by_hand():
    plan = Plan(**IMAGENET)
    q = 16_384 / 1_281_167
    eta = math.sqrt(q * q * 72_000 / (2 * 2.5**2))
    assert plan.q == pytest.approx(q)
    assert plan.eta == pytest.approx(eta, rel=1e-12)
    assert plan.eta_step == pytest.approx(q / (math.sqrt(2) * 2.5))
    assert plan.eta == pytest.approx(math.sqrt(72_000) * plan.eta_step)
    assert plan.tan == pytest.approx(1 / eta)
    by_hand = eta**2 + 2 * eta * math.sqrt(math.log(1 / 8e-7))
    assert abs(plan.eps_tan - by_hand) < 0.01


def test_eta_for_eps_tan_inverts_eps_tan():
    for eps in (0.1, 1.0, 8.0, 30.0):
        for delta in (1e-3, 1e-5, 1e-9):
            assert tan.eps_tan(tan.eta_for_eps_tan(eps, delta), delta) == pytest.approx(eps, rel=1e-9)


@pytest.mark.parametrize("sigma, expected", [(0.3, tan.Regime.PRIVACY_WALL), (0.5, tan.Regime.OVERCHARGED),
                                             (1.99, tan.Regime.OVERCHARGED), (2.0, tan.Regime.TAN),
                                             (7.0, tan.Regime.TAN)])
def test_regime_thresholds(sigma, expected):
    assert tan.regime(sigma) is expected


def test_proxy_family_keeps_eta_step_and_steps():
    for point in tan.proxy_family(4096, 3.0, 1000, [32, 128, 1024, 4096]):
        assert point.steps == 1000
        assert tan.eta_step(point.batch_size / 50_000, point.sigma) == pytest.approx(
            tan.eta_step(4096 / 50_000, 3.0))


def test_privacy_parameter_family_keeps_eta_and_sigma_and_scales_lr():
    n, b, s, sigma = 1_000_000, 4096, 1000, 3.0
    reference = tan.eta(b / n, sigma, s)
    for k, point in zip((0.5, 1, 2, 4), tan.privacy_parameter_family(b, sigma, s, (0.5, 1, 2, 4))):
        assert point.sigma == sigma
        assert point.steps == round(s * k * k)
        assert point.lr_scale == pytest.approx(s / point.steps)
        assert tan.eta(point.batch_size / n, sigma, point.steps) == pytest.approx(reference, rel=1e-12)
