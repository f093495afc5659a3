"""The noise actually drawn is σ × the stated sensitivity, once per release the accountant composes.

A recording generator captures every Gaussian draw (std and shape). Each test derives the expected list
from the paper's algorithm and checks std/sensitivity against the noise multipliers that
tanplan.baselines.accounting composes for the same configuration.
"""

from __future__ import annotations

import math

import pytest

from tanplan.baselines import accounting, first_order, least_squares, newton, prototypes

SIGMA = 1.7


def assert_draws(calls, expected):
    """Same number of draws, same shapes, same standard deviations (to rounding)."""
    assert [shape for _, shape in calls] == [shape for _, shape in expected]
    assert [std for std, _ in calls] == pytest.approx([std for std, _ in expected], rel=1e-12)


def test_dp_ls_noise(blobs, recording_rng):
    x, y = blobs["x_train"], blobs["y_train"]
    cfg = least_squares.LSConfig(clip=3.0)
    rng = recording_rng()
    least_squares.dp_ls(x, y, 4, SIGMA, rng, cfg)
    d, c = x.shape[1], cfg.clip
    expected = [(SIGMA * c ** 2, (d, d))] + [(SIGMA * c ** 2, (d, d))] * 4 + [(SIGMA * c, (d, 4))]
    assert_draws(rng.normal_calls, expected)
    # G (sensitivity C²), all A_j jointly (√k·C², one class per example), all b_j jointly (√k·C)
    assert least_squares.relative_multipliers(cfg) == [1.0, 1.0, 1.0]


def test_dp_newton_noise(blobs, recording_rng):
    x, y = blobs["x_train"], blobs["y_train"]
    cfg = newton.NewtonConfig(clip=2.0, steps=3)
    rng = recording_rng()
    newton.dp_newton(x, y, 4, SIGMA, rng, cfg)
    d, m, c = x.shape[1], 4, cfg.clip
    per_step = [(SIGMA * math.sqrt(m) * c, (d, m))] + [(SIGMA * math.sqrt(m) * newton.BETA_H * c ** 2, (d, d))] * m
    assert_draws(rng.normal_calls, per_step * cfg.steps)
    # gradient of all classes: sensitivity √m·C, std σ√m·C -> multiplier σ; Hessians: m releases of
    # multiplier σ√m each, which compose to one of multiplier σ: 2 per step
    hess_each = SIGMA * math.sqrt(m)
    assert accounting.equivalent_noise_multiplier([hess_each] * m) == pytest.approx(SIGMA)
    assert len(newton.relative_multipliers(cfg)) == 2 * cfg.steps


def test_dp_fc_noise(blobs, recording_rng):
    x, y = blobs["x_train"], blobs["y_train"]
    cfg = first_order.FCConfig(grad_clip=0.7, cov_clip=2.5, steps=4)
    rng = recording_rng()
    first_order.dp_fc(x, y, 4, SIGMA, rng, cfg)
    d = x.shape[1]
    expected = [(SIGMA * cfg.cov_clip ** 2, (d, d))] + [(SIGMA * cfg.grad_clip, (d + 1, 4))] * cfg.steps
    assert_draws(rng.normal_calls, expected)
    assert first_order.fc_relative_multipliers(cfg) == [1.0] * (cfg.steps + 1)


def test_dp_adam_noise(blobs, recording_rng):
    x, y = blobs["x_train"], blobs["y_train"]
    cfg = first_order.AdamConfig(grad_clip=0.7, steps=5)
    rng = recording_rng()
    first_order.dp_adam(x, y, 4, SIGMA, rng, cfg)
    assert_draws(rng.normal_calls, [(SIGMA * cfg.grad_clip, (x.shape[1] + 1, 4))] * cfg.steps)
    assert first_order.adam_relative_multipliers(cfg) == [1.0] * cfg.steps


def test_dppl_mean_noise(blobs, recording_rng, monkeypatch):
    """Per class: a count (std σ_count), then one sum per step with std s_t·R_t, R_t its clip radius."""
    radii = []
    original = prototypes.projected_sum

    def recording_sum(x, center, clip_radius):
        radii.append(clip_radius)
        return original(x, center, clip_radius)

    monkeypatch.setattr(prototypes, "projected_sum", recording_sum)
    x, y = blobs["x_train"], blobs["y_train"]
    cfg = prototypes.MeanConfig()
    rng = recording_rng()
    prototypes.dppl_mean(x, y, 4, SIGMA, rng, cfg)
    multipliers = [SIGMA * c for c in prototypes.mean_relative_multipliers(cfg)]
    d = x.shape[1]
    expected = []
    for j in range(4):
        expected.append((multipliers[0], ()))
        expected += [(s * r, (d,)) for s, r in zip(multipliers[1:], radii[3 * j:3 * j + 3])]
    assert_draws(rng.normal_calls, expected)
    # the first step clips at CoinPress's radius for r0 = √d
    assert radii[0] == pytest.approx(prototypes.coinpress_clip_radius(math.sqrt(d), prototypes.gaussian_tailbound(d, 0.01)))
    # the budget split: ρ_i = w_i·ρ with the paper's (5, 7, 52)/64 over the steps
    rho = accounting.zcdp_rho(multipliers)
    shares = [0.5 / s ** 2 / rho for s in multipliers]
    assert shares == pytest.approx([cfg.count_share] + [(1 - cfg.count_share) * w for w in prototypes.PAPER_SPLIT])
