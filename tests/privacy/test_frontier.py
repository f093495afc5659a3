"""The budget frontier (JAX-free): every candidate within the compute and the ε budget, σ calibrated
exactly, the grid geometric around its anchor, and budgets that leave no frontier refused."""

import math

import pytest

from tanplan.errors import UsageError
from tanplan.privacy import accounting
from tanplan.privacy import frontier as fr
from tanplan.privacy.plan import Plan

N, EPS, C = 10_000, 1.0, 200_000


@pytest.fixture(scope="module")
def front():
    # dp_accounting's _compute_log_a as installed, without the test session's shared memo (tests/conftest.py):
    # no other test asks for this frontier's curves, and storing each of their values in the memo's SQLite file
    # costs more than computing them
    from dp_accounting.rdp import rdp_privacy_accountant as rdp

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(rdp, "_compute_log_a", getattr(rdp._compute_log_a, "plain", rdp._compute_log_a))
        return fr.frontier(N, EPS, C, factor=4.0, accountant="rdp")


def test_every_candidate_is_within_both_budgets(front):
    assert len(front.candidates) >= 4
    for c in front.candidates:
        assert 1 <= c.batch_size <= N
        assert c.batch_size * c.steps <= C
        assert c.batch_size == C // c.steps  # the whole compute goes into the run, up to B's rounding
        assert c.eps_rdp <= EPS


def test_sigma_is_calibrated_exactly_under_rdp(front):
    """ε of each candidate, recomputed from (q, σ, S, δ) by the accountant, is the budget within 1%; a σ
    2% smaller would exceed it, so no candidate carries noise it does not need."""
    delta = N ** -1.1  # the default δ
    for c in front.candidates:
        eps = accounting.epsilon(c.batch_size / N, c.sigma, c.steps, delta, "rdp")
        assert eps == pytest.approx(c.eps_rdp, rel=1e-12)
        assert EPS * (1 - accounting.CALIBRATION_SLACK) <= eps <= EPS
        assert accounting.epsilon(c.batch_size / N, c.sigma * 0.98, c.steps, delta, "rdp") > EPS


def test_fewer_steps_mean_larger_batches_and_more_noise(front):
    steps = [c.steps for c in front.candidates]
    assert steps == sorted(steps)
    batches, sigmas = [c.batch_size for c in front.candidates], [c.sigma for c in front.candidates]
    assert batches == sorted(batches, reverse=True) and sigmas == sorted(sigmas, reverse=True)
    d = front.to_dict()
    assert set(d["candidates"][0]) >= {"batch_size", "steps", "sigma", "eps_rdp", "eta_step", "regime"}


def test_grid_is_geometric_around_its_anchor_and_inside_the_batch_range():
    grid = fr.steps_grid(16_000, 4096 * 300, min_batch_size=256, factor=2.0, anchor=300)
    assert 300 in grid
    assert all(256 <= 4096 * 300 // s <= 16_000 for s in grid)
    ratios = [b / a for a, b in zip(grid[1:-1], grid[2:-1])]
    assert all(r == pytest.approx(2.0, rel=0.01) for r in ratios)
    assert grid[0] == math.ceil(4096 * 300 / 16_000)  # the end B ≤ N joins the grid ...
    assert grid[-1] == 4800 and 4096 * 300 // 256 == 4800  # ... the other end is a grid point already
    assert grid[1] / grid[0] <= 2
    # an anchor outside the feasible steps moves to the nearest end
    assert fr.anchor_steps(16_000, 4096 * 300, 10, 256) == math.ceil(4096 * 300 / 16_000)
    assert fr.anchor_steps(16_000, 4096 * 300, 10**9, 256) == 4096 * 300 // 256


def test_a_candidate_whose_epsilon_cannot_be_met_is_dropped_with_its_reason(monkeypatch):
    real = Plan.from_budget.__func__

    def bounded(cls, n, b, s, eps, delta=None, accountant="rdp"):
        if b < 2_000:
            raise UsageError(f"epsilon={eps:g} cannot be reached with sigma ≤ 100000")
        return real(cls, n, b, s, eps, delta, accountant)

    monkeypatch.setattr(Plan, "from_budget", classmethod(bounded))
    front = fr.frontier(N, EPS, C, factor=4.0)
    assert front.candidates and all(c.batch_size >= 2_000 for c in front.candidates)
    assert front.dropped and all("cannot be reached" in d.reason and d.batch_size < 2_000 for d in front.dropped)
    assert all(d["batch_size"] < 2_000 for d in front.to_dict()["dropped"])


@pytest.mark.parametrize("kwargs, words", [
    ({"compute": 5, "min_batch_size": 10}, "compute 5 is not allowed"),
    ({"epsilon": 0.0}, "epsilon 0.0 is not allowed"),
    ({"epsilon": -1.0}, "epsilon -1.0 is not allowed"),
    ({"epsilon": 1e-4, "accountant": "rdp"}, "cannot be reached by any sigma"),
    ({"factor": 1.0}, "steps factor 1 is not allowed"),
    ({"min_batch_size": 20_000}, "minimum batch size 20000 is not allowed"),
])
def test_budgets_that_leave_no_frontier_are_usage_errors(kwargs, words):
    args = {"dataset_size": N, "epsilon": EPS, "compute": C, **kwargs}
    with pytest.raises(UsageError, match=words):
        fr.frontier(**args)
