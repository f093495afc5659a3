"""Closed-form TAN quantities (Sander, Stock, Sablayrolles 2023, section 3). Pure Python, no JAX.

q = B/N; η_step = q/(√2·σ); η² = S·η_step² = q²S/(2σ²); Σ = 1/η (the total amount of noise).
ε_TAN(η, δ) = η² + 2η·√log(1/δ) approximates the RDP ε when σ ≥ 2. It is a heuristic for quick
reasoning, never a privacy guarantee: exact ε comes from tanplan.privacy.accounting.
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass

# σ thresholds of the paper's Figure 2: below 0.5 ε explodes, from 2 on ε ≈ ε_TAN.
WALL_SIGMA = 0.5
TAN_SIGMA = 2.0


def sampling_rate(batch_size: float, dataset_size: int) -> float:
    """q = B/N, the Poisson sampling probability of each example."""
    return batch_size / dataset_size


def eta_step(q: float, sigma: float) -> float:
    """Per-step signal-to-noise ratio η_step = q/(√2·σ)."""
    return q / (math.sqrt(2.0) * sigma)


def eta(q: float, sigma: float, steps: int) -> float:
    """Individual signal-to-noise ratio over training: η = √S·η_step."""
    return math.sqrt(steps) * eta_step(q, sigma)


def total_amount_of_noise(q: float, sigma: float, steps: int) -> float:
    """Σ = 1/η."""
    return 1.0 / eta(q, sigma, steps)


def eps_tan(eta_value: float, delta: float) -> float:
    """ε_TAN = η² + 2η·√log(1/δ) (paper eq. 4): a heuristic approximation, not a guarantee."""
    return eta_value**2 + 2.0 * eta_value * math.sqrt(math.log(1.0 / delta))


def eta_for_eps_tan(epsilon: float, delta: float) -> float:
    """The η whose ε_TAN equals epsilon: the positive root of η² + 2Lη − ε = 0, L = √log(1/δ)."""
    big_l = math.sqrt(math.log(1.0 / delta))
    return -big_l + math.sqrt(big_l**2 + epsilon)


def sigma_for_eta(q: float, steps: int, eta_value: float) -> float:
    """The σ that gives η at sampling rate q over S steps: σ = q√S/(√2·η)."""
    return q * math.sqrt(steps) / (math.sqrt(2.0) * eta_value)


def tan_optimal_order(eta_value: float, delta: float) -> float:
    """The Rényi order α minimising (α−1)η² + log(1/δ)/(α−1): α* = 1 + √log(1/δ)/η."""
    return 1.0 + math.sqrt(math.log(1.0 / delta)) / eta_value


class Regime(str, enum.Enum):
    """Where a noise multiplier sits on the paper's Figure 2."""

    PRIVACY_WALL = "privacy_wall"  # σ < 0.5: ε surges, no meaningful guarantee at any useful η
    OVERCHARGED = "overcharged"  # 0.5 ≤ σ < 2: ε is above what the TAN η would cost
    TAN = "tan"  # σ ≥ 2: ε depends (almost) only on η, ε ≈ ε_TAN


def regime(sigma: float) -> Regime:
    if sigma < WALL_SIGMA:
        return Regime.PRIVACY_WALL
    if sigma < TAN_SIGMA:
        return Regime.OVERCHARGED
    return Regime.TAN


REGIME_TEXT = {
    Regime.PRIVACY_WALL: "privacy wall (σ < 0.5): ε is dominated by sub-sampling blow-up, far above ε_TAN",
    Regime.OVERCHARGED: "overcharged (0.5 ≤ σ < 2): ε is above what the total amount of noise costs",
    Regime.TAN: "TAN regime (σ ≥ 2): ε depends only on η, ε ≈ ε_TAN",
}


@dataclass(frozen=True)
class TanPoint:
    """One (B, σ, S) setting; lr_scale multiplies the reference learning rate."""

    batch_size: int
    sigma: float
    steps: int
    lr_scale: float = 1.0

    def q(self, dataset_size: int) -> float:
        return sampling_rate(self.batch_size, dataset_size)


def proxy_family(batch_size: int, sigma: float, steps: int, batch_sizes) -> list[TanPoint]:
    """Constant S and η_step (paper Table 2): B' varies with σ' = σ·B'/B, same learning rate.

    Each member costs B/B' times less compute than the reference and trains at the same per-step
    signal-to-noise ratio, which is what makes it a faithful proxy (paper section 3.4).
    """
    return [TanPoint(int(b), sigma * b / batch_size, steps) for b in batch_sizes]


def privacy_parameter_family(batch_size: int, sigma: float, steps: int, factors) -> list[TanPoint]:
    """Constant η and σ (paper Tables 3-4): S' = S·k², B' = B/k, learning rate ∝ 1/S (scale 1/k²).

    η² = q²S/(2σ²) is unchanged because (q/k)²·(S·k²) = q²·S; the compute B'·S' = B·S·k grows with k.
    B' is rounded to the nearest integer (at least 1), so η moves by that rounding only.
    """
    points = []
    for k in factors:
        b = max(1, round(batch_size / k))
        s = max(1, round(steps * k * k))
        points.append(TanPoint(b, sigma, s, lr_scale=steps / s))
    return points


def factor_to_tan_regime(sigma: float, target_sigma: float = TAN_SIGMA) -> float:
    """k such that σ·k = target σ: multiplying B and σ by k keeps η_step and S, and reaches σ ≥ 2."""
    return max(1.0, target_sigma / sigma)
