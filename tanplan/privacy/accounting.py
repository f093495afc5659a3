"""Exact ε of DP-SGD, and calibration of σ, S or B, through dp-accounting's public API. No JAX.

Mechanism accounted: S steps of the Poisson-subsampled Gaussian mechanism. Each step includes every
example independently with probability q, sums per-example gradients clipped to L2 norm C and adds
N(0, σ²C²) to the sum. This is dp_accounting's
`SelfComposedDpEvent(PoissonSampledDpEvent(q, GaussianDpEvent(σ)), S)`.

Two neighbouring relations (`RELATIONS`):
- "add_remove" (dp_accounting's ADD_OR_REMOVE_ONE, the default relation of record): one dataset is the
  other plus one example; the clipped sum has sensitivity C.
- "replace_one" (REPLACE_ONE): one example is swapped for another, so N stays the same; the sum moves by
  up to 2C when both are sampled. It is the meaningful relation when N is public (tanplan publishes it).
  Only the PLD accountant computes it for Poisson sampling.

Two accountants: "pld" (privacy loss distributions: the tightest, the accountant of record by default)
and "rdp" (Rényi DP with dp_accounting's default orders and its optimal conversion, as in the TAN paper;
reported beside PLD). Calibration guarantee: a calibrated parameter never gives ε above the target
under the accountant and relation used, and lands within 1% of it (tests/privacy/test_accounting.py).

Where the accountants are trusted (UsageError, exit 2, outside it; tests/privacy/test_soundness.py):
- 1 ≤ S ≤ MAX_STEPS = 10^7 and SIGMA_MIN = 1e-4 ≤ σ ≤ SIGMA_MAX = 1e6, 0 < q ≤ 1, 0 < δ < 1. In float64
  the RDP accountant's per-step value of a Poisson-subsampled Gaussian carries an absolute error of
  up to a few 1e-15 at each order (against 60-digit arithmetic), which S steps multiply: at S = 10^21
  the per-step value of a small signal turns negative and dp-accounting reports ε = 0 where ε_TAN
  is 2·10^4. Within 10^7 steps the error stays below 1e-7 in ε; 10^7 is over a hundred times the
  longest published DP-SGD runs.
- PLD additionally needs σ ≥ PLD_SIGMA_MIN = 0.1: below it the privacy-loss grid exhausts memory (or
  runs for minutes), and ε is in the tens per step anyway. Where PLD cannot run, a composition reported
  beside the accountant of record falls back to RDP with a note (`epsilon_with_fallback`), never a
  failure. The PLD grid (value_discretization_interval) scales with the ε being computed (`pld_grid`):
  a pessimistic PLD is an upper bound on any grid, but its excess grows with the grid and the steps (a
  fixed 1e-4 gave 0.0378 for an ε of 0.0341 on the ImageNet plan at δ = 1/N). The grid starts at 1e-2
  and is halved until halving moves ε by at most 0.3% (within a floor that bounds memory below σ = 0.5
  and the grid's points): the figure of record lands within 1% above dp_accounting's at a fine grid
  (tests/privacy/test_accounting.py).
- Every ε is checked before it is returned: it must be a number (not NaN or infinite) and must not
  lie below `epsilon_lower_bound`, an ε that the mechanism provably exceeds (a single test on the sum
  of the noisy releases). An accountant whose floating point collapsed is refused with the reason,
  rather than reported as a guarantee.
"""

from __future__ import annotations

import math
import warnings
from functools import lru_cache

from tanplan.config import MAX_STEPS, SIGMA_MAX, SIGMA_MIN
from tanplan.errors import UsageError
from tanplan.privacy import tan

ACCOUNTANTS = ("rdp", "pld")
RELATIONS = ("add_remove", "replace_one")
CALIBRATION_SLACK = 0.01  # a calibrated ε lands in [target·(1 − slack), target]
_SIGMA_MAX = 1e5  # calibration searches σ up to this

# The domain where tanplan trusts the accountants (module docstring). S and σ bound train.steps and
# privacy.sigma too, so they are defined with the config, which checks them before any data is loaded.
PLD_SIGMA_MIN = 0.1
_PLD_INTERVAL = 1e-4  # dp_accounting's default grid of privacy-loss values


def _dp():
    """The dp_accounting package (imported on first use: ~1 s, which `import tanplan` does not pay)."""
    import dp_accounting

    return dp_accounting


def _relation(neighbouring: str):
    if neighbouring not in RELATIONS:
        raise UsageError(f"neighbouring relation {neighbouring!r} is not known: use one of {', '.join(RELATIONS)}")
    relation = _dp().NeighboringRelation
    return relation.ADD_OR_REMOVE_ONE if neighbouring == "add_remove" else relation.REPLACE_ONE


def _quiet():
    """dp_accounting logs absl warnings for fractional orders at large q; keep them from the user."""
    import logging

    logging.getLogger("absl").setLevel(logging.ERROR)
    warnings.filterwarnings("ignore", module="dp_accounting")


def dp_sgd_event(q: float, sigma: float, steps: int):
    """The DpEvent of `steps` DP-SGD steps: Poisson sampling at rate q, Gaussian noise σ·C on the sum."""
    dp = _dp()
    return dp.SelfComposedDpEvent(dp.PoissonSampledDpEvent(q, dp.GaussianDpEvent(sigma)), int(steps))


def make_accountant(accountant: str = "pld", orders=None, sigma_min: float | None = None,
                    neighbouring: str = "add_remove", steps: int | None = None, interval: float | None = None):
    """A fresh dp_accounting accountant: "rdp" (the default or given orders; add/remove-one only) or
    "pld" on a grid fit for noise multipliers down to sigma_min and `steps` steps in all (`interval`
    overrides the grid)."""
    _quiet()
    relation = _relation(neighbouring)
    if accountant == "rdp":
        if neighbouring != "add_remove":
            raise UsageError("the RDP accountant does not compute the replace-one relation for Poisson sampling: "
                             "use the PLD accountant (privacy.accountant = \"pld\")")
        return _dp().rdp.RdpAccountant(orders)
    if accountant == "pld":
        return _dp().pld.PLDAccountant(relation, value_discretization_interval=interval or
                                       _pld_interval(sigma_min, steps))
    raise UsageError(f"accountant {accountant!r} is not known: use one of {', '.join(ACCOUNTANTS)}")


def _pld_interval(sigma_min: float | None, steps: int | None = None) -> float:
    """The PLD grid: dp_accounting's default, coarsened by (0.5/σ)² below σ = 0.5, where the privacy loss
    spreads over a range growing as 1/σ² (the grid then keeps about the same number of points), and by
    √(S/2000) beyond 2,000 steps, at most 10× (the composed loss spreads as √S)."""
    interval = _PLD_INTERVAL
    if sigma_min and sigma_min < 0.5:
        interval *= (0.5 / sigma_min) ** 2
    if steps and steps > 2000:
        interval *= min(10.0, math.sqrt(steps / 2000))
    return interval


def _check(q: float, sigma: float | None, steps: int | None, delta: float | None, accountant: str = "rdp") -> None:
    """UsageError naming the first value outside the domain where the accountant is trusted."""
    if not 0 < q <= 1:
        raise UsageError(f"sampling rate q={q:g} is not allowed: must be in (0, 1] (batch size ≤ dataset size)")
    if sigma is not None:
        if not (math.isfinite(sigma) and SIGMA_MIN <= sigma <= SIGMA_MAX):
            raise UsageError(f"sigma={sigma:g} is not allowed: must be in [{SIGMA_MIN:g}, {SIGMA_MAX:g}], where the "
                             "accountants are trusted")
        if accountant == "pld" and sigma < PLD_SIGMA_MIN:
            raise UsageError(f"sigma={sigma:g} is not allowed with the PLD accountant: it needs sigma ≥ {PLD_SIGMA_MIN:g} "
                             "(below, its privacy-loss grid exhausts memory); use the RDP accountant")
    if steps is not None and not 1 <= steps <= MAX_STEPS:
        raise UsageError(f"steps={steps} is not allowed: must be in [1, {MAX_STEPS:.0e}] (beyond, the accountant's "
                         "floating-point error grows with the steps)")
    if delta is not None:
        check_delta(delta)


def check_delta(delta) -> None:
    """UsageError unless 0 < δ < 1 and δ is a normal double (a literal that underflowed, or a subnormal, is
    no δ anyone meant: the accountants' logarithms lose their digits there)."""
    import sys

    if delta is None or not (isinstance(delta, (int, float)) and math.isfinite(delta)) or not 0 < delta < 1:
        raise UsageError(f"delta={delta} is not allowed: must be in (0, 1)")
    if delta < sys.float_info.min:
        raise UsageError(f"delta={delta:g} is not allowed: it is below {sys.float_info.min:.3g}, the smallest "
                         "normal double")


def epsilon(q: float, sigma: float, steps: int, delta: float, accountant: str = "pld",
            neighbouring: str = "add_remove") -> float:
    """Exact ε of S DP-SGD steps at sampling rate q and noise multiplier σ, for the given δ."""
    _check(q, sigma, steps, delta, accountant)
    return epsilon_of_events([dp_sgd_event(q, sigma, steps)], delta, accountant, neighbouring)


def epsilon_of_events(events, delta: float, accountant: str = "pld", neighbouring: str = "add_remove",
                      interval: float | None = None) -> float:
    """ε at δ of the composition of DpEvents under the accountant and the neighbouring relation: THE
    function every ε in tanplan comes from (a run's plan, its ledger, the launch's budget check, the
    pipeline's total). 0.0 for no event.

    Guarantee: the value returned is the accountant's, and only where it can be trusted. Every DP-SGD
    event (S Poisson-subsampled Gaussian steps) must lie in the accountant's domain (module docstring),
    and the result must be a finite number not below `epsilon_lower_bound` of any event (ε of a
    composition is at least that of each part, under either relation: adding an example is replacing
    one whose gradient is zero); otherwise UsageError says why. Events of other shapes are composed as
    given, without the lower-bound check.

    PLD runs on `pld_grid` of the composition, or on `interval` when given (a ledger fixes one grid for
    its whole run, so that its ε grows with its steps: tanplan.privacy.ledger).

    Memoised: DpEvents are frozen values, and a run asks for the same composition at every evaluation
    and checkpoint (the checks above run on every call).
    """
    if not events:
        return 0.0
    check_delta(delta)
    _relation(neighbouring)
    params = [p for p in map(_dp_sgd_params, events) if p is not None]
    for q, sigma, steps in params:
        _check(q, sigma, steps, delta, accountant)
    grouped = _grouped(events)
    if accountant == "pld" and interval is None:
        interval = _pld_grid(grouped, float(delta), neighbouring)
    eps = _epsilon_of_events(grouped, float(delta), accountant, neighbouring,
                             float(interval) if accountant == "pld" else None)
    _check_sound(eps, params, delta, accountant)
    return eps


_GRID_MAX = 1e-2  # the coarsest PLD grid, tried first
_GRID_STEP_TOLERANCE = 3e-3  # halving the grid moved ε by at most this (relative): stop
_GRID_MIN_PER_EPSILON = 1e-6  # no finer than ε·1e-6 (bounds the grid's points, and the time)
_COARSE_GRID_PER_EPSILON = 1e-3  # a calibration brackets on a grid no finer than target ε × this,
_SEARCH_GRID_PER_EPSILON = 5e-5  # and refines on one no finer than target ε × this


def pld_grid(events, delta: float, neighbouring: str = "add_remove") -> float:
    """The PLD grid (value_discretization_interval) for the composition of `events` at δ: scaled with the
    ε being computed, so that ε lands within 1% of dp_accounting's at a fine grid.

    Starts at 1e-2 and halves the grid until halving moves ε by at most 0.3% (a pessimistic PLD's excess
    shrinks at least linearly with the grid, so what is left is below that), within a floor that bounds
    the grid's points (memory below σ = 0.5, as `_pld_interval`; at most ~10^6 points per unit of ε).
    Any grid gives an upper bound: this only buys precision, at the cost of a few evaluations, the
    coarse ones cheap (memoised: the figure on the grid returned is already computed)."""
    check_delta(delta)
    _relation(neighbouring)
    params = [p for p in map(_dp_sgd_params, events) if p is not None]
    for q, sigma, steps in params:
        _check(q, sigma, steps, delta, "pld")
    return _pld_grid(_grouped(events), float(delta), neighbouring)


@lru_cache(maxsize=1024)
def _pld_grid(grouped: tuple, delta: float, neighbouring: str) -> float:
    params = [p for p in map(_dp_sgd_params, grouped) if p is not None]
    if not params:
        return _PLD_INTERVAL
    sigma_min = min(p[1] for p in params)
    floor = _pld_interval(sigma_min) if sigma_min < 0.5 else 0.0  # memory: the loss spreads as 1/σ² below 0.5
    grid = _GRID_MAX
    eps = _epsilon_of_events(grouped, delta, "pld", neighbouring, grid)
    for _ in range(40):  # an accountant whose floating point collapsed (NaN, ∞) stops it: _check_sound says why
        if not (math.isfinite(eps) and grid / 2 >= max(floor, _GRID_MIN_PER_EPSILON * eps)):
            break
        grid /= 2
        finer = _epsilon_of_events(grouped, delta, "pld", neighbouring, grid)
        if eps - finer <= _GRID_STEP_TOLERANCE * finer:
            break
        eps = finer
    return grid


@lru_cache(maxsize=1024)
def _epsilon_of_events(events: tuple, delta: float, accountant: str, neighbouring: str,
                       interval: float | None) -> float:
    acc = make_accountant(accountant, neighbouring=neighbouring, interval=interval)
    try:
        for event in events:
            acc.compose(event)
        return float(acc.get_epsilon(delta))
    except (MemoryError, OverflowError) as err:  # the PLD grid outgrew the machine, or exp() overflowed
        raise UsageError(f"the {accountant.upper()} accountant cannot represent this mechanism "
                         f"({type(err).__name__}); use the RDP accountant or more noise") from None


def _grouped(events) -> tuple:
    """The same composition with the DP-SGD events of equal (q, σ) merged into one of their summed steps
    (composition is commutative, so ε is unchanged): the seeds of one proxy are one event, not several,
    and the PLD accountant builds one distribution per (q, σ)."""
    dp = _dp()
    steps: dict[tuple[float, float], int] = {}
    others = []
    for event in events:
        params = _dp_sgd_params(event)
        if params is None:
            others.append(event)
        else:
            steps[params[:2]] = steps.get(params[:2], 0) + params[2]
    merged = [dp_sgd_event(q, sigma, n) if n > 1 else dp.PoissonSampledDpEvent(q, dp.GaussianDpEvent(sigma))
              for (q, sigma), n in sorted(steps.items())]
    return tuple(merged + others)


def pld_unavailable(events) -> str | None:
    """Why the PLD accountant cannot compose these events (a DP-SGD event below PLD_SIGMA_MIN), or None."""
    low = [p for p in map(_dp_sgd_params, events) if p is not None and p[1] < PLD_SIGMA_MIN]
    if not low:
        return None
    return (f"PLD needs sigma ≥ {PLD_SIGMA_MIN:g} and a run here has sigma = {min(s for _, s, _ in low):.3g}: "
            "composed by RDP")


def epsilon_with_fallback(events, delta: float, accountant: str = "pld",
                          neighbouring: str = "add_remove") -> tuple[float | None, str | None, str | None]:
    """(ε, the accountant that gave it, a note) for a composition reported beside the accountant of
    record: PLD where it can run, else RDP with a note saying why (add/remove-one; under replace-one,
    which RDP does not compute for Poisson sampling, ε is None with the note). Never fails for
    σ < PLD_SIGMA_MIN: it is what stages call after their runs have trained."""
    if not events:
        return 0.0, accountant, None
    why = pld_unavailable(events) if accountant == "pld" else None
    if why is None:
        return epsilon_of_events(events, delta, accountant, neighbouring), accountant, None
    if neighbouring != "add_remove":
        return None, None, why.replace("composed by RDP", "no replace-one figure (RDP does not compute it)")
    return epsilon_of_events(events, delta, "rdp"), "rdp", why


def _dp_sgd_params(event) -> tuple[float, float, int] | None:
    """(q, σ, S) of SelfComposed(PoissonSampled(q, Gaussian(σ)), S) or PoissonSampled(q, Gaussian(σ)), else None."""
    dp = _dp()
    steps = 1
    if isinstance(event, dp.SelfComposedDpEvent):
        event, steps = event.event, int(event.count)
    if isinstance(event, dp.PoissonSampledDpEvent) and isinstance(event.event, dp.GaussianDpEvent):
        return float(event.sampling_probability), float(event.event.noise_multiplier), steps
    return None


def _check_sound(eps: float, params: list[tuple[float, float, int]], delta: float, accountant: str) -> None:
    """UsageError unless eps is a number at or above the lower bound of every DP-SGD event."""
    where = "; ".join(f"q={q:.4g}, sigma={s:.4g}, S={n}" for q, s, n in params) or "these events"
    if not math.isfinite(eps) or eps < 0:
        raise UsageError(f"the {accountant.upper()} accountant gives epsilon = {eps} for {where} at delta={delta:g}: "
                         "no finite guarantee; use more noise, fewer steps or a smaller batch")
    for q, sigma, steps in params:
        if delta_lower_bound(q, sigma, steps, eps) > delta * (1 + 1e-3):
            bound = epsilon_lower_bound(q, sigma, steps, delta)
            raise UsageError(
                f"the {accountant.upper()} accountant gives epsilon = {eps:.4g} for q={q:.4g}, sigma={sigma:.4g}, "
                f"S={steps} at delta={delta:g}, below {bound:.4g}, which this mechanism provably exceeds: its "
                "floating point has collapsed here, so tanplan does not trust it; use fewer steps or less noise")


# ---------------------------------------------------------------- a lower bound no sound accountant can undercut

def delta_lower_bound(q: float, sigma: float, steps: int, eps: float) -> float:
    """A δ that S Poisson-subsampled Gaussian steps (q, σ) provably exceed at ε: their δ(ε) ≥ this.

    Take D = {} and D' = {x} with x's clipped gradient of norm C, and T = the sum over the S steps of the
    noisy sums projected on that gradient, divided by C. Under D, T ~ N(0, Sσ²); under D',
    T = K + σ√S·Z with K ~ Binomial(S, q), the steps that sampled x. For any m ≤ Sq, Chernoff gives
    P(K ≥ m) ≥ A = 1 − exp(−(Sq − m)²/(2Sq)), and P(K ≥ ⌊Sq⌋) ≥ 1/2 (a binomial's median is ⌊Sq⌋ or
    ⌈Sq⌉), P(K ≥ 1) = 1 − (1 − q)^S. So P_D'(T > t) ≥ A·Φ̄((t − m)/(σ√S)), and (ε, δ)-DP requires
    δ ≥ P_D'(T > t) − e^ε·P_D(T > t) for every t. The best t gives A·δ_μ(ε − log A), with δ_μ the
    (ε, δ) curve of the Gaussian mechanism of sensitivity μ = m/(σ√S) (Dong, Roth, Su 2019, "Gaussian
    differential privacy"). This returns the largest of these over a few m: every one is a valid bound.
    Near-tight when S·q is large (the central-limit regime of TAN), loose for a handful of steps.
    """
    import numpy as np
    from scipy import special

    mu = steps * q
    scale = sigma * math.sqrt(steps)
    shifts = np.array([0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 5.0, 6.0, 8.0])
    m = np.concatenate([mu - shifts * math.sqrt(mu), [math.floor(mu), 1.0]])
    mass = np.concatenate([-np.expm1(-shifts**2 / 2), [0.5, -math.expm1(steps * math.log1p(-q)) if q < 1 else 1.0]])
    if q == 1:  # K = S exactly
        m, mass = np.append(m, float(steps)), np.append(mass, 1.0)
    keep = (m >= 1.0) & (m <= max(mu, 1.0)) & (mass > 0) & (m / scale > 1e-9)
    if not keep.any():
        return 0.0
    a, mass = m[keep] / scale, mass[keep]
    e = eps - np.log(mass)
    log_tail_x = special.log_ndtr(-(e / a - a / 2))  # log Φ̄(ε'/μ − μ/2)
    log_tail_y = special.log_ndtr(-(e / a + a / 2))  # log Φ̄(ε'/μ + μ/2)
    bounds = mass * np.exp(log_tail_x) * -np.expm1(np.minimum(e + log_tail_y - log_tail_x, 0.0))
    return float(max(bounds.max(), 0.0))


def epsilon_lower_bound(q: float, sigma: float, steps: int, delta: float) -> float:
    """An ε that S Poisson-subsampled Gaussian steps (q, σ) provably exceed at δ (see delta_lower_bound):
    no sound accountant may report less. 0.0 when the bound says nothing at this δ."""
    if delta_lower_bound(q, sigma, steps, 0.0) <= delta:
        return 0.0
    lo, hi = 0.0, 1.0
    while delta_lower_bound(q, sigma, steps, hi) > delta:
        lo, hi = hi, hi * 2
    for _ in range(60):  # invariant: bound(lo) > δ ≥ bound(hi)
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if delta_lower_bound(q, sigma, steps, mid) > delta else (lo, mid)
    return lo


def delta_for_epsilon(q: float, sigma: float, steps: int, eps: float, accountant: str = "pld",
                      neighbouring: str = "add_remove") -> float:
    """The smallest δ the accountant certifies for (q, σ, S) at the given ε."""
    _check(q, sigma, steps, None, accountant)
    acc = make_accountant(accountant, sigma_min=sigma, neighbouring=neighbouring, steps=steps)
    return float(acc.compose(dp_sgd_event(q, sigma, steps)).get_delta(eps))


def rdp_orders() -> tuple[float, ...]:
    """The Rényi orders of the RDP accountant (dp_accounting's defaults)."""
    return tuple(float(a) for a in _dp().rdp.rdp_privacy_accountant.DEFAULT_RDP_ORDERS)


def per_step_rdp(q: float, sigma: float, orders=None):
    """g_α(σ, q): the RDP of one Poisson-subsampled Gaussian step at each order (paper Figure 3)."""
    _check(q, sigma, 1, None)
    dp = _dp()
    acc = make_accountant("rdp", orders)
    acc.compose(dp.PoissonSampledDpEvent(q, dp.GaussianDpEvent(sigma)))
    return acc.orders, acc.rdp  # public properties (copies) of dp_accounting's RdpAccountant


def rdp_floor(delta: float) -> float:
    """The smallest ε the RDP accountant can certify at δ: log(1/δ)/(α_max − 1), reached as σ → ∞."""
    return math.log(1.0 / delta) / (max(rdp_orders()) - 1.0)


def _check_target(eps: float, delta: float, accountant: str) -> None:
    if not eps > 0:
        raise UsageError(f"epsilon={eps:g} is not allowed: must be > 0")
    _check(0.5, None, None, delta)
    if accountant == "rdp" and eps <= rdp_floor(delta) * 1.001:
        raise UsageError(
            f"epsilon={eps:g} cannot be reached by any sigma under the RDP accountant at delta={delta:g}: "
            f"its floor is {rdp_floor(delta):.4g}; use the PLD accountant, or a larger epsilon or delta"
        )


def _solve_decreasing(eps_of, guess: float, target: float, hi_limit: float = _SIGMA_MAX,
                      close: float = 1e-4, lo_limit: float = SIGMA_MIN, accountant: str = "", step: float = 1.5) -> float:
    """A σ with target·(1 − close) ≤ eps_of(σ) ≤ target, for ε falling as σ rises.

    Brackets geometrically from the guess (by `step`, squared at each move, up to 4), then runs Illinois false position on log ε against log σ
    (nearly linear there, so a handful of evaluations suffice). The answer is always a point that was
    evaluated at or under the target, so the guarantee never rests on interpolation.
    """
    lo, f_lo, hi, f_hi = guess, eps_of(guess), guess, None
    if f_lo <= target:  # walk down until over the target
        hi, f_hi = lo, f_lo
        while f_lo <= target:
            if f_lo >= target * (1 - close):
                return lo
            hi, f_hi, lo = lo, f_lo, lo / step
            step = min(step * step, 4.0)  # a far guess is bracketed in a few evaluations
            if lo < lo_limit:
                if lo_limit > SIGMA_MIN:  # PLD's domain ends first: σ = hi is the best it can certify
                    raise UsageError(f"epsilon={target:g} is reached only with sigma < {lo_limit:g}, below the domain "
                                     f"of the {accountant.upper() or 'PLD'} accountant: use the RDP accountant "
                                     "(privacy.accountant = \"rdp\") or a smaller epsilon")
                raise UsageError(f"epsilon={target:g} is reached only with sigma < {SIGMA_MIN:g}, below the range "
                                 "where the accountants are trusted: ask for a smaller epsilon")
            f_lo = eps_of(lo)
    else:  # walk up until at or under the target
        while True:
            hi = lo * step
            step = min(step * step, 4.0)
            if hi > hi_limit:
                raise UsageError(f"epsilon={target:g} cannot be reached with sigma ≤ {hi_limit:g}")
            f_hi = eps_of(hi)
            if f_hi <= target:
                break
            lo, f_lo = hi, f_hi
    g = lambda f: math.log(f / target) if f > 0 else -50.0  # noqa: E731
    g_lo, g_hi, side = g(f_lo), g(f_hi), 0
    for _ in range(100):
        if f_hi >= target * (1 - close) or hi / lo < 1 + 1e-9:
            return hi
        x_lo, x_hi = math.log(lo), math.log(hi)
        x = x_hi - g_hi * (x_hi - x_lo) / (g_hi - g_lo)
        if not x_lo < x < x_hi:
            x = 0.5 * (x_lo + x_hi)
        mid = math.exp(x)
        f_mid = eps_of(mid)
        if f_mid <= target:
            hi, f_hi, g_hi = mid, f_mid, g(f_mid)
            if side == 1:
                g_lo /= 2  # Illinois step: keep the stale end from stalling the search
            side = 1
        else:
            lo, f_lo, g_lo = mid, f_mid, g(f_mid)
            if side == -1:
                g_hi /= 2
            side = -1
    return hi


def _full_rdp(q: float, sigma: float, steps: int, delta: float) -> tuple[float, float]:
    """(ε, optimal order) with every default order."""
    eps, order = make_accountant("rdp").compose(dp_sgd_event(q, sigma, steps)).get_epsilon_and_optimal_order(delta)
    return float(eps), float(order)


@lru_cache(maxsize=256)  # every proxy run of a fit or sweep calibrates the same target
def calibrate_sigma(q: float, steps: int, eps: float, delta: float, accountant: str = "pld",
                    neighbouring: str = "add_remove") -> float:
    """The smallest σ (to 0.2% in ε) whose exact ε for (q, S, δ) is at most the target ε under the
    accountant and the neighbouring relation.

    Guarantee: target·(1 − 1%) ≤ epsilon(q, σ, S, δ, accountant, neighbouring) ≤ target for the σ returned.
    RDP: the search uses only the few default orders next to the optimal one: the ε of a subset of
    orders is never below the ε of all orders, so the σ it finds is already safe; one evaluation with
    every order then confirms that it is within 1% (else the window moves to the new optimal order).
    PLD: RDP's σ brackets it (RDP's ε is never below PLD's at the same σ); the search runs on twice the
    grid `pld_grid` picks at the guess (faster, still an upper bound), and one evaluation on the figure
    of record's own grid confirms the answer (else the search is redone on that grid).
    """
    _check(q, None, steps, delta)
    _check_target(eps, delta, accountant)
    _relation(neighbouring)
    if accountant == "pld":
        return _calibrate_pld(q, steps, eps, delta, neighbouring)
    if neighbouring != "add_remove":
        make_accountant("rdp", neighbouring=neighbouring)  # raises: RDP has no replace-one for Poisson sampling
    sigma = tan.sigma_for_eta(q, steps, tan.eta_for_eps_tan(eps, delta))
    all_orders = rdp_orders()
    tan_order = tan.tan_optimal_order(tan.eta_for_eps_tan(eps, delta), delta)
    _, order = _full_rdp(q, sigma, steps, delta)
    for _ in range(4):
        window = _neighbours(all_orders, order) | _neighbours(all_orders, tan_order)
        try:
            found = _solve_decreasing(lambda s: _eps_with_orders(q, s, steps, delta, sorted(window)), sigma, eps)
        except UsageError:
            break  # the window cannot reach the target at all: search with every order
        full, order = _full_rdp(q, found, steps, delta)
        sigma = found
        if full >= eps * (1 - CALIBRATION_SLACK / 2):
            return sigma
    return _solve_decreasing(lambda s: epsilon(q, s, steps, delta, "rdp"), sigma, eps)


def _calibrate_pld(q: float, steps: int, eps: float, delta: float, neighbouring: str) -> float:
    """calibrate_sigma for PLD: one RDP evaluation brackets it from above (RDP's ε is never below PLD's at
    the same σ), a search on a coarse PLD grid finds it, one evaluation on the fine grid confirms it."""
    guess = tan.sigma_for_eta(q, steps, tan.eta_for_eps_tan(eps, delta))  # the closed form: close for σ ≥ 2
    if neighbouring != "add_remove":
        guess *= 2  # replacing one example moves the sum by up to 2C: about twice the noise
    guess = min(max(guess, PLD_SIGMA_MIN), _SIGMA_MAX)
    if neighbouring == "add_remove" and guess < _SIGMA_MAX:
        rdp = epsilon(q, guess, steps, delta, "rdp")  # ε falls about as 1/σ: where RDP would meet the target
        guess = min(max(guess * rdp / eps, PLD_SIGMA_MIN), _SIGMA_MAX)  # RDP's σ, nearly: PLD's is at or below

    return solve_pld(lambda s: [dp_sgd_event(q, s, steps)], guess, eps, delta, neighbouring)


def solve_pld(events_of, guess: float, eps: float, delta: float, neighbouring: str = "add_remove") -> float:
    """The smallest σ whose composition events_of(σ) has PLD ε in [eps·(1 − 1%), eps] (never over): bracketed
    on a coarse grid, refined on the grid the answer needs (each an upper bound), confirmed by one evaluation
    on the figure of record's own grid (else searched again on it).

    Why two grids: the guess can sit far from the answer (RDP's closed form misses by up to 60× at tiny q
    and many steps), and a grid fine enough for the guess's small ε costs minutes an evaluation at the
    answer's σ. A coarser grid's ε is never below a finer one's, so the coarse σ is at or above the answer
    and the refinement only walks down from it, in small steps."""

    def on_grid(grid: float):
        def eps_of(sigma: float) -> float:
            events = events_of(sigma)
            for q, s, n in (p for p in map(_dp_sgd_params, events) if p is not None):
                _check(q, s, n, delta, "pld")
            return _epsilon_of_events(_grouped(events), float(delta), "pld", neighbouring, grid)
        return eps_of

    search = dict(lo_limit=PLD_SIGMA_MIN, accountant="pld")
    coarse = max(2 * pld_grid(events_of(guess), delta, neighbouring), _COARSE_GRID_PER_EPSILON * eps)
    sigma = _solve_decreasing(on_grid(coarse), guess, eps, close=2e-2, step=1.1, **search)
    refined = max(2 * pld_grid(events_of(sigma), delta, neighbouring), _SEARCH_GRID_PER_EPSILON * eps)
    sigma = _solve_decreasing(on_grid(refined), sigma, eps, close=2e-3, step=1.02, **search)
    fine = lambda s: epsilon_of_events(events_of(s), delta, "pld", neighbouring)  # noqa: E731
    if eps * (1 - CALIBRATION_SLACK) <= fine(sigma) <= eps:
        return sigma
    return _solve_decreasing(fine, sigma, eps, close=2e-3, step=1.02, **search)


def _neighbours(orders: tuple[float, ...], alpha: float, k: int = 3) -> set[float]:
    """The k orders on each side of the one closest to alpha."""
    i = min(range(len(orders)), key=lambda j: abs(orders[j] - alpha))
    return set(orders[max(0, i - k): i + k + 1])


def _eps_with_orders(q: float, sigma: float, steps: int, delta: float, orders) -> float:
    return float(make_accountant("rdp", orders).compose(dp_sgd_event(q, sigma, steps)).get_epsilon(delta))


def calibrate_steps(q: float, sigma: float, eps: float, delta: float, accountant: str = "pld",
                    max_steps: int = MAX_STEPS, neighbouring: str = "add_remove") -> int:
    """The largest S whose exact ε for (q, σ, δ) is at most the target ε (never over).

    Raises UsageError when even one step exceeds the target.
    """
    _check(q, sigma, None, delta, accountant)
    _check_target(eps, delta, accountant)
    if accountant == "rdp" and neighbouring == "add_remove":
        orders, curve = per_step_rdp(q, sigma)  # ε(S) needs the per-step curve only once
        compute = _dp().rdp.compute_epsilon
        eps_of = lambda s: float(compute(orders, curve * s, delta)[0])  # noqa: E731
    else:
        eps_of = lambda s: epsilon(q, sigma, s, delta, accountant, neighbouring)  # noqa: E731
    if eps_of(1) > eps:
        raise UsageError(f"epsilon={eps:g} cannot be reached: one step at q={q:g}, sigma={sigma:g} already costs "
                         f"{eps_of(1):.4g}")
    lo, hi = 1, 2
    while eps_of(hi) <= eps:
        lo, hi = hi, hi * 2
        if hi > max_steps:
            return max_steps
    while hi - lo > 1:  # invariant: eps_of(lo) ≤ eps < eps_of(hi)
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if eps_of(mid) <= eps else (lo, mid)
    return lo


def calibrate_batch_size(dataset_size: int, sigma: float, steps: int, eps: float, delta: float,
                         accountant: str = "pld", neighbouring: str = "add_remove") -> int:
    """The largest expected batch size B ≤ N whose exact ε for (σ, S, δ) is at most the target ε."""
    _check(0.5, sigma, steps, delta, accountant)
    _check_target(eps, delta, accountant)
    eps_of = lambda b: epsilon(b / dataset_size, sigma, steps, delta, accountant, neighbouring)  # noqa: E731
    if eps_of(1) > eps:
        raise UsageError(f"epsilon={eps:g} cannot be reached: batch size 1 with sigma={sigma:g} and "
                         f"{steps} steps already costs {eps_of(1):.4g}")
    if eps_of(dataset_size) <= eps:
        return dataset_size
    lo, hi = 1, dataset_size  # invariant: eps_of(lo) ≤ eps < eps_of(hi)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if eps_of(mid) <= eps else (lo, mid)
    return lo


@lru_cache(maxsize=4096)
def cached_epsilon(q: float, sigma: float, steps: int, delta: float, accountant: str = "pld",
                   neighbouring: str = "add_remove") -> float:
    """epsilon() memoised: reports and figures ask for the same points more than once."""
    return epsilon(q, sigma, steps, delta, accountant, neighbouring)
