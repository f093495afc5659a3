"""The accountant is trusted only where it is sound: S and σ within documented bounds, PLD above its
smallest σ, and every ε checked against a lower bound that the mechanism provably exceeds.

The lower bound (accounting.delta_lower_bound) is a theorem about the mechanism, not about an
accountant: these tests check that no accountant undercuts it anywhere on a grid, that it is close to
them where floating point is at risk (many steps, small per-step signal), and that an accountant that
collapses anyway is refused. The bound on S rests on the RDP accountant's per-step error, measured here
against the same sum evaluated with 60 significant digits.
"""

import math
from decimal import Decimal, localcontext, MAX_EMAX, MIN_EMIN

import pytest

from tanplan.config import MAX_STEPS, SIGMA_MAX, SIGMA_MIN, load_config
from tanplan.errors import UsageError
from tanplan.privacy import accounting
from tanplan.privacy.run_plan import resolve_plan
from tanplan.privacy.plan import Plan


@pytest.mark.parametrize("kwargs, message", [
    (dict(steps=10**21, epsilon=1.0), "steps 1000000000000000000000 is not allowed"),  # the issue's plan
    (dict(steps=MAX_STEPS + 1, epsilon=1.0), "must be an integer in [1, 1e+07]"),
    (dict(steps=100, sigma=1e-300), "sigma 1e-300 is not allowed"),
    (dict(steps=100, sigma=1e300), "sigma 1e+300 is not allowed"),
    (dict(steps=100, sigma=SIGMA_MAX * 2), "where the accountants are trusted"),
])
def test_plans_outside_the_trusted_domain_are_refused(kwargs, message):
    with pytest.raises(UsageError) as err:
        if "epsilon" in kwargs:
            Plan.from_budget(50_000, 256, kwargs["steps"], kwargs["epsilon"])
        else:
            Plan(50_000, 256, kwargs["steps"], kwargs["sigma"], 2e-5)
    assert message in str(err.value)


def test_the_domain_edges_are_accounted():
    q, delta = 256 / 50_000, 2e-5
    for sigma in (SIGMA_MIN, SIGMA_MAX):
        assert math.isfinite(accounting.epsilon(q, sigma, 100, delta, "rdp"))
    assert math.isfinite(accounting.epsilon(q, SIGMA_MAX, 100, delta, "pld"))
    assert math.isfinite(accounting.epsilon(q, 2.0, MAX_STEPS, delta, "rdp"))


def test_pld_below_its_smallest_sigma_is_refused_and_so_is_a_full_scale_run_there():
    with pytest.raises(UsageError, match="PLD accountant"):
        accounting.epsilon(0.005, accounting.PLD_SIGMA_MIN / 2, 100, 1e-5, "pld")
    assert accounting.epsilon(0.005, accounting.PLD_SIGMA_MIN / 2, 100, 1e-5, "rdp") > 0  # RDP still answers
    cfg = load_config(None, ["privacy.sigma=0.05", "train.batch_size=100", "train.steps=10"])
    with pytest.raises(UsageError, match="full-scale run"):
        resolve_plan(cfg, 1000)
    assert resolve_plan(cfg.with_overrides({"train.proxy_batch_size": 10}), 1000).sigma > 0  # a proxy is fine


# ---------------------------------------------------------------- the lower bound


GRID = [(q, sigma, steps) for q in (1e-3, 0.05, 1.0) for sigma in (0.6, 2.0, 10.0) for steps in (1, 100, 10_000)]


@pytest.mark.parametrize("q, sigma, steps", GRID)
def test_no_accountant_undercuts_the_lower_bound(q, sigma, steps):
    delta = 1e-5
    bound = accounting.epsilon_lower_bound(q, sigma, steps, delta)
    accountants = ("rdp", "pld") if steps <= 100 else ("rdp",)  # PLD at 10^4 steps costs seconds each
    for name in accountants:
        eps = accounting.epsilon(q, sigma, steps, delta, name)  # would raise if below the bound
        assert eps >= bound, (name, eps, bound)
        assert accounting.delta_lower_bound(q, sigma, steps, eps) <= delta


@pytest.mark.parametrize("q, sigma, steps", [(0.005, 2.0, 100_000), (0.05, 5.0, 100_000), (0.3, 20.0, 100_000)])
def test_the_lower_bound_is_close_where_floating_point_is_at_risk(q, sigma, steps):
    """Many steps of a small per-step signal (S·q in the hundreds, σ ≥ 2): the bound is within 40% of
    the RDP ε, so an accountant collapsing to well under its value would be caught."""
    delta = 1e-5
    bound = accounting.epsilon_lower_bound(q, sigma, steps, delta)
    assert accounting.epsilon(q, sigma, steps, delta, "rdp") <= 1.4 * bound


def test_the_issue_plan_is_far_above_zero():
    """`plan --steps 1e21 --epsilon 1` was calibrated to σ ≈ 4e7 with an exact ε of 0: the mechanism's ε is
    provably in the tens."""
    assert accounting.epsilon_lower_bound(256 / 50_000, 4e7, 10**21, 2e-5) > 20


class _Collapsed:
    """An accountant whose floating point has collapsed: it answers `value` whatever it is given."""

    def __init__(self, value):
        self.value = value

    def compose(self, event):
        return self

    def get_epsilon(self, delta):
        return self.value


@pytest.mark.parametrize("value, message", [
    (0.0, "floating point has collapsed"),
    (1.0, "floating point has collapsed"),
    (float("nan"), "no finite guarantee"),
    (float("inf"), "no finite guarantee"),
])
def test_an_accountant_that_collapses_is_refused(monkeypatch, value, message):
    event = accounting.dp_sgd_event(0.05, 2.0, 100_000)  # its ε is provably above 60
    assert accounting.epsilon_of_events([event], 1e-5) > 60
    accounting._epsilon_of_events.cache_clear()  # so that the collapsed accountant below is asked
    accounting._pld_grid.cache_clear()  # (its grid search too: it must stop on a collapsed figure)
    monkeypatch.setattr(accounting, "make_accountant", lambda *a, **k: _Collapsed(value))
    with pytest.raises(UsageError, match=message):
        accounting.epsilon_of_events([event], 1e-5)
    accounting._epsilon_of_events.cache_clear()  # forget the collapsed answer
    accounting._pld_grid.cache_clear()


# ---------------------------------------------------------------- why S stops at 10^7


def _exact_rdp(q: float, sigma: float, alpha: int) -> Decimal:
    """One step's RDP at integer order α, log(Σ_k C(α,k)(1−q)^(α−k) q^k e^((k²−k)/(2σ²)))/(α − 1), to 60 digits."""
    with localcontext() as ctx:
        ctx.prec, ctx.Emax, ctx.Emin = 60, MAX_EMAX, MIN_EMIN
        dq, two_var = Decimal(q), 2 * Decimal(sigma) ** 2
        total = sum(math.comb(alpha, k) * (1 - dq) ** (alpha - k) * dq**k * ((k * k - k) / two_var).exp()
                    for k in range(alpha + 1))
        return total.ln() / (alpha - 1)


@pytest.mark.parametrize("q, sigma", [(1e-6, 1.0), (1e-3, 1e3), (0.01, SIGMA_MAX), (0.3, 0.3), (0.5, SIGMA_MIN)])
def test_rdp_per_step_error_stays_negligible_over_max_steps(q, sigma):
    """dp-accounting's per-step RDP at the integer orders ≤ 256, against 60 digits: S = 10^7 steps of its
    error move the composed RDP (and so ε) by less than 1e-6 absolute or 1e-9 relative."""
    orders, curve = accounting.per_step_rdp(q, sigma)
    for alpha, got in zip(orders, curve):
        if alpha != int(alpha) or not 2 <= alpha <= 256:
            continue
        exact = _exact_rdp(q, sigma, int(alpha))
        error = abs(Decimal(float(got)) - exact)
        assert error * MAX_STEPS <= Decimal("1e-6") + Decimal("1e-9") * exact * MAX_STEPS, (alpha, got, exact)
