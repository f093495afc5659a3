"""Accounting for the baselines through dp_accounting: composed Gaussian releases and pure ε-DP.

Gaussian methods (DP-LS, DP-Newton, DP-FC, DP-Adam, DPPL-Mean) are full-batch: no subsampling, a fixed
list of Gaussian releases whose noise multipliers (noise std ÷ L2 sensitivity) are σ·c_i for a base σ
and per-method constants c_i. Their mechanism is described as data, a dp_accounting
`ComposedDpEvent` of `GaussianDpEvent`s, and reported three ways:

- ρ (zCDP, the papers' own accounting): ρ = Σ_i 1/(2(σc_i)²);
- (ε, δ) for ADD_OR_REMOVE_ONE neighbours, from one of three accountants: "analytic" (default:
  dp_accounting.gaussian_mechanism, the exact ε of a Gaussian mechanism, Balle and Wang 2018), "pld"
  (PLDAccountant, pessimistic discretisation) or "rdp" (RdpAccountant; for full-batch Gaussians this is
  exactly the zCDP conversion the papers use);
- the calibrated base σ, the smallest found whose ε is at most the target (never over it).

A composition of Gaussian mechanisms with noise multipliers s_i is exactly a Gaussian mechanism with
multiplier (Σ s_i⁻²)^(-1/2) (the privacy loss of each is N(μ_i²/2, μ_i²) with μ_i = 1/s_i, and these
add), so the accountants are handed that one equivalent `GaussianDpEvent`: same ε as composing the list,
without the PLD discretisation error piling up once per release; that is also what makes the analytic
formula exact here.

The exponential mechanism (DPPL-Public, DPPL-PublicK) is pure ε-DP: reported as (ε, 0), with the
bounded-range zCDP bound ρ = ε²/8 (Cesar and Rogers) for comparison; parallel composition over the
disjoint classes keeps the total at ε. dp_accounting is imported inside functions: only the baseline
command loads it.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass
from typing import Sequence

from tanplan.errors import UsageError

ACCOUNTANTS = ("analytic", "pld", "rdp")
NEIGHBOURING = "add/remove-one"
# No target ε above this: it is no privacy, and far beyond it (ε ≈ 1e300) the Gaussian calibration's
# arithmetic breaks down (NaN) instead of answering.
MAX_EPSILON = 1000.0


@dataclass(frozen=True)
class Guarantee:
    """What one trained baseline spent. `epsilon` is the accountant's ε at `delta` (never above target)."""

    epsilon: float
    delta: float
    rho: float  # zCDP ρ (for the exponential mechanism, the bounded-range bound ε²/8)
    mechanism: str  # "gaussian" or "exponential"
    accountant: str  # "analytic", "pld", "rdp" or "pure" (the exponential mechanism)
    noise_multiplier: float | None = None  # base σ of the Gaussian releases
    neighbouring: str = NEIGHBOURING


def gaussian_event(noise_multipliers: Sequence[float]):
    """The DpEvent of the given Gaussian releases, equal multipliers grouped as SelfComposedDpEvents."""
    from dp_accounting import dp_event

    counts = Counter(float(s) for s in noise_multipliers)
    parts = [dp_event.SelfComposedDpEvent(dp_event.GaussianDpEvent(s), n) if n > 1 else dp_event.GaussianDpEvent(s)
             for s, n in counts.items()]
    return parts[0] if len(parts) == 1 else dp_event.ComposedDpEvent(parts)


def zcdp_rho(noise_multipliers: Sequence[float]) -> float:
    """ρ of the composed releases: a Gaussian with multiplier s is 1/(2s²)-zCDP; zCDP adds up."""
    return float(sum(0.5 / float(s) ** 2 for s in noise_multipliers))


def equivalent_noise_multiplier(noise_multipliers: Sequence[float]) -> float:
    """The multiplier of the single Gaussian mechanism that the composed releases are equivalent to."""
    return float(sum(float(s) ** -2 for s in noise_multipliers) ** -0.5)


def _equivalent_event(event):
    """Reduce a composition of Gaussian events to its one equivalent GaussianDpEvent (exact)."""
    from dp_accounting import dp_event

    def inverse_squares(e) -> float:
        if isinstance(e, dp_event.GaussianDpEvent):
            return e.noise_multiplier ** -2
        if isinstance(e, dp_event.SelfComposedDpEvent):
            return e.count * inverse_squares(e.event)
        if isinstance(e, dp_event.ComposedDpEvent):
            return sum(inverse_squares(x) for x in e.events)
        raise TypeError(f"not a composition of Gaussian events: {e}")

    return dp_event.GaussianDpEvent(inverse_squares(event) ** -0.5)


def make_accountant(accountant: str):
    """A fresh dp_accounting accountant for ADD_OR_REMOVE_ONE neighbours ("pld" or "rdp")."""
    if accountant == "pld":
        from dp_accounting.pld import pld_privacy_accountant

        return pld_privacy_accountant.PLDAccountant()
    if accountant == "rdp":
        from dp_accounting.rdp import rdp_privacy_accountant

        return rdp_privacy_accountant.RdpAccountant()
    raise UsageError(f"accountant {accountant!r} is not known: use one of {', '.join(ACCOUNTANTS)}")


def gaussian_epsilon(noise_multipliers: Sequence[float], delta: float, accountant: str = "analytic") -> float:
    """ε at δ of the composed Gaussian releases (ADD_OR_REMOVE_ONE neighbours)."""
    if any(float(s) <= 0 for s in noise_multipliers):
        return math.inf
    event = _equivalent_event(gaussian_event(noise_multipliers))
    if accountant == "analytic":
        from dp_accounting import gaussian_mechanism

        return float(gaussian_mechanism.get_epsilon_gaussian(event.noise_multiplier, delta))
    return float(make_accountant(accountant).compose(event).get_epsilon(delta))


def calibrate_gaussian(relative_multipliers: Sequence[float], epsilon: float, delta: float,
                       accountant: str = "analytic") -> float:
    """The base σ such that releases with multipliers σ·c_i spend at most (ε, δ), within 0.1% of ε.

    "analytic": dp_accounting.gaussian_mechanism.get_sigma_gaussian on the equivalent multiplier.
    "pld"/"rdp": dp_accounting's `calibrate_dp_mechanism` (Brent's method on ε(σ) − ε_target, which
    returns a point whose gap is not positive) inside an explicit bracket. Either way the answer is
    checked again and σ nudged up if the accountant ever says otherwise: the returned σ never
    overspends the target under the accountant used.
    """
    from dp_accounting import dp_event, mechanism_calibration

    _check_target(epsilon, delta)
    c = [float(x) for x in relative_multipliers]
    if not c or min(c) <= 0:
        raise ValueError(f"relative noise multipliers must be positive, got {c}")
    scale = equivalent_noise_multiplier(c)  # σ_eff = σ·scale

    def eps_of(sigma: float) -> float:
        return gaussian_epsilon([sigma * x for x in c], delta, accountant)

    if accountant == "analytic":
        from dp_accounting import gaussian_mechanism

        sigma = gaussian_mechanism.get_sigma_gaussian(epsilon, delta) / scale
        return _never_over(eps_of, sigma, epsilon)
    make_accountant(accountant)  # fails early on an unknown name

    # Classic bound σ_eff = √(2 ln(1.25/δ))/ε as a first guess; then bracket geometrically.
    hi = math.sqrt(2 * math.log(1.25 / delta)) / epsilon / scale
    while eps_of(hi) > epsilon:
        hi *= 2
    lo = hi / 2
    while eps_of(lo) <= epsilon:
        hi, lo = lo, lo / 2
        if lo < 1e-8:
            raise UsageError(f"epsilon={epsilon:g} needs no noise at all for delta={delta:g}")
    sigma = mechanism_calibration.calibrate_dp_mechanism(
        lambda: make_accountant(accountant),
        lambda s: dp_event.GaussianDpEvent(s * scale),
        epsilon, delta,
        bracket_interval=mechanism_calibration.ExplicitBracketInterval(lo, hi),
        tol=lo * 1e-4,
    )
    return _never_over(eps_of, sigma, epsilon)


def _never_over(eps_of, sigma: float, epsilon: float) -> float:
    """Nudge σ up until the accountant's ε is at most the target (root finders stop within a tolerance)."""
    for _ in range(200):
        if eps_of(sigma) <= epsilon:
            return float(sigma)
        sigma *= 1.00001
    raise RuntimeError(f"calibration failed to reach epsilon={epsilon:g}")


def gaussian_guarantee(noise_multipliers: Sequence[float], delta: float, accountant: str = "analytic",
                       base: float | None = None) -> Guarantee:
    return Guarantee(epsilon=gaussian_epsilon(noise_multipliers, delta, accountant), delta=float(delta),
                     rho=zcdp_rho(noise_multipliers), mechanism="gaussian", accountant=accountant,
                     noise_multiplier=base)


def exponential_guarantee(epsilon: float) -> Guarantee:
    """Pure ε-DP of one exponential mechanism per class, composed in parallel over disjoint classes."""
    _check_target(epsilon, 0.5)
    return Guarantee(epsilon=float(epsilon), delta=0.0, rho=float(epsilon) ** 2 / 8, mechanism="exponential",
                     accountant="pure")


def calibrated(relative_multipliers: Sequence[float], epsilon: float, delta: float,
               accountant: str = "analytic") -> tuple[float, Guarantee]:
    """(base σ, its Guarantee) for a target (ε, δ)."""
    sigma = calibrate_gaussian(relative_multipliers, epsilon, delta, accountant)
    multipliers = [sigma * c for c in relative_multipliers]
    return sigma, gaussian_guarantee(multipliers, delta, accountant, base=sigma)


def composed_guarantee(rhos: Sequence[float], delta: float) -> dict:
    """(ε, δ) of every release together, the baselines being run on one dataset: their zCDP ρ add up (each
    Gaussian release exactly 1/(2s²); each exponential mechanism by its bounded-range bound ε²/8, Cesar
    and Rogers 2021), and ρ-zCDP is converted to (ε, δ) by dp-accounting's RDP accountant (ρ-zCDP is
    (α, ρα)-RDP at every order α), under add/remove-one neighbours.

        >>> composed_guarantee([0.005, 0.005], 1e-5)["rho"]
        0.01
    """
    import dp_accounting

    rho = float(sum(rhos))
    if rho == 0:
        return {"epsilon": 0.0, "delta": float(delta), "rho": 0.0, "releases": len(rhos), "accountant": "zcdp"}
    acc = dp_accounting.rdp.RdpAccountant()
    acc.compose(dp_accounting.ZCDpEvent(rho))
    return {"epsilon": float(acc.get_epsilon(delta)), "delta": float(delta), "rho": rho, "releases": len(rhos),
            "accountant": "zcdp (Gaussian releases exact, exponential mechanisms ε²/8), converted by RDP",
            "neighbouring": NEIGHBOURING}


def _check_target(epsilon: float, delta: float) -> None:
    if not (isinstance(epsilon, (int, float)) and math.isfinite(epsilon) and 0 < epsilon <= MAX_EPSILON):
        raise UsageError(f"epsilon={epsilon!r} is not allowed: must be a number in (0, {MAX_EPSILON:g}]")
    if not 0 < delta < 1:
        raise UsageError(f"delta={delta!r} is not allowed: must be in (0, 1)")


