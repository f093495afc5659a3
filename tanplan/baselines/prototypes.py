"""DP prototypes (Wahdany et al. 2024): DPPL-Mean, DPPL-Public and DPPL-PublicK.

A prototype classifier assigns a point to the class whose prototype(s) it is closest to. Each class's
prototypes depend only on that class's examples, and each example belongs to exactly one class, so under
add/remove-one neighbours only one class's mechanism sees a different input: the per-class mechanisms
compose in parallel and the whole release costs what one class costs.

- DPPL-Mean (§4.1, App. A.4): the class mean by CoinPress (Biswas et al. 2020), three steps with ρ split
  (5/64, 7/64, 52/64). CoinPress divides by the class size n_c, which is private under add/remove
  neighbours, so a share of the budget releases a Gaussian count first (sensitivity 1) and every step
  releases the *sum* of the points projected into a ball of radius R_t around the current centre
  (add/remove sensitivity R_t), divided by the noisy count. ρ-zCDP per class, ρ in total.
- DPPL-Public (Alg. 1, App. D.1): per class, the exponential mechanism picks one public point with
  utility u(p) = Σ_{x in class} (clip(1 + cos(x, p), d_min, d_max) − d_min). Each example adds a term in
  [0, Δu], Δu = d_max − d_min, so u is monotone with sensitivity Δu and P(p) ∝ exp(ε·u(p)/Δu) is ε-DP.
- DPPL-PublicK (App. C.3): per class, K distinct public points jointly, by the exponential mechanism on
  sets with U(S) = min_{p∈S} u(p) − u_(K) (u_(K) the K-th largest utility), ΔU = Δu, not monotone:
  P(S) ∝ exp(ε·U(S)/(2Δu)), ε-DP. Sampled exactly: the lowest-ranked member at rank y with weight
  C(y−1, K−1)·exp(ε(u_(y) − u_(K))/(2Δu)), the other K−1 uniformly among the y−1 points ranked above it.
  (The paper writes C(y, K); C(y−1, K−1) is the number of sets whose lowest-ranked member is y, which
  is what makes the sampled distribution the exponential mechanism.)
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy.special import gammaln

from tanplan.baselines.heads import PrototypeHead, average_pool, unit_rows
from tanplan.baselines.noise import gaussian

PAPER_SPLIT = (5 / 64, 7 / 64, 52 / 64)


# ----------------------------------------------------------------------------------------- DPPL-Mean

@dataclass(frozen=True)
class MeanConfig:
    """DPPL-Mean hyper-parameters.

    CoinPress assumes points ~ N(μ, scale²·I) with ‖μ‖ ≤ radius (default √d, the paper's r₀) and clips
    with the Gaussian tail bound γ(d, β). `pool` is the paper's k_pool; `count_share` the share of ρ spent
    on the noisy class counts, the rest split over the steps as `split`.
    """

    split: tuple[float, ...] = PAPER_SPLIT
    count_share: float = 0.05
    radius: float | None = None
    scale: float = 1.0
    beta: float = 0.01
    pool: int = 1
    metric: str = "cosine"


def mean_relative_multipliers(cfg: MeanConfig = MeanConfig()) -> list[float]:
    """Noise multipliers relative to σ (ρ = 1/(2σ²) in all): release i gets share w_i, multiplier σ/√w_i."""
    shares = [cfg.count_share] + [(1 - cfg.count_share) * s / sum(cfg.split) for s in cfg.split]
    return [1.0 / math.sqrt(w) for w in shares]


def gaussian_tailbound(d: int, beta: float) -> float:
    """γ with P(‖N(0, I_d)‖ > γ) ≤ β (Laurent-Massart), as in CoinPress."""
    return math.sqrt(d + 2 * math.sqrt(d * math.log(1 / beta)) + 2 * math.log(1 / beta))


def coinpress_clip_radius(radius: float, gamma: float) -> float:
    """CoinPress's projection radius for a mean known to lie within `radius` of the centre."""
    return min(math.sqrt(radius ** 2 + 6 * radius + gamma ** 2), radius + gamma)


def projected_sum(x: np.ndarray, center: np.ndarray, clip_radius: float) -> np.ndarray:
    """Σ_i proj(x_i − c): each deviation scaled into the ball of radius R (add/remove sensitivity R)."""
    dev = x - center
    norms = np.linalg.norm(dev, axis=1, keepdims=True)
    return (dev * np.minimum(1.0, clip_radius / np.maximum(norms, 1e-300))).sum(0)


def coinpress_mean(x: np.ndarray, noise_multipliers, rng: np.random.Generator, radius: float,
                   beta: float = 0.01) -> np.ndarray:
    """Private mean of the rows of x (unit-scale data): a noisy count, then one step per multiplier.

    noise_multipliers = (s_count, s_1, …, s_t). Releases: n + N(0, s_count²) (sensitivity 1), then for
    each step Σ proj(x_i − c) + N(0, (s_t·R_t)²) (sensitivity R_t). Gaussian releases of multipliers
    s_count, s_1, …: Σ 1/(2s²)-zCDP under add/remove-one neighbours. Centres and radii after the first
    step are computed from released values only.
    """
    s_count, *s_steps = noise_multipliers
    d = x.shape[1]
    gamma = gaussian_tailbound(d, beta)
    count = max(len(x) + float(gaussian(rng, s_count, ())), 1.0)
    center, r = np.zeros(d), float(radius)
    for s in s_steps:
        clip_radius = coinpress_clip_radius(r, gamma)
        total = projected_sum(x, center, clip_radius) + gaussian(rng, s * clip_radius, d)
        center = center + total / count
        r = math.sqrt(1.0 / count + (s * clip_radius / count) ** 2) * gamma
    return center


def dppl_mean(x: np.ndarray, y: np.ndarray, num_classes: int, noise_multiplier: float,
              rng: np.random.Generator, cfg: MeanConfig = MeanConfig()) -> PrototypeHead:
    """One CoinPress mean per class; ρ = 1/(2σ²)-zCDP in all (parallel composition over classes)."""
    xp = average_pool(np.asarray(x, dtype=np.float64), cfg.pool) / cfg.scale
    d = xp.shape[1]
    radius = math.sqrt(d) if cfg.radius is None else cfg.radius / cfg.scale
    multipliers = [float(noise_multiplier) * c for c in mean_relative_multipliers(cfg)]
    means = np.stack([coinpress_mean(xp[y == j], multipliers, rng, radius, cfg.beta) for j in range(num_classes)])
    return PrototypeHead(means[:, None, :] * cfg.scale, metric=cfg.metric, pool=cfg.pool)


# ------------------------------------------------------------------------------ DPPL-Public(K)

@dataclass(frozen=True)
class PublicConfig:
    """DPPL-Public(K) hyper-parameters: the similarity clip [d_min, d_max] ⊂ [0, 2] and K."""

    d_min: float = 1.0
    d_max: float = 2.0
    k: int = 1


def public_utilities(private_x: np.ndarray, public_unit: np.ndarray, d_min: float, d_max: float,
                     chunk: int = 1024) -> np.ndarray:
    """u(p) = Σ_x clip(1 + cos(x, p), d_min, d_max) − d_min for every public point p (rows of public_unit).

    Each private example adds one term in [0, d_max − d_min]: monotone, sensitivity Δu = d_max − d_min.
    """
    u = np.zeros(len(public_unit))
    xs = unit_rows(np.asarray(private_x, dtype=np.float64))
    for start in range(0, len(xs), chunk):
        sims = 1.0 + xs[start:start + chunk] @ public_unit.T
        u += (np.clip(sims, d_min, d_max) - d_min).sum(0)
    return u


def exponential_log_weights(utilities: np.ndarray, epsilon: float, sensitivity: float,
                            monotone: bool = True) -> np.ndarray:
    """Unnormalised log-probabilities of the exponential mechanism: ε·u/Δu (monotone) or ε·u/(2Δu)."""
    return epsilon * utilities / (sensitivity if monotone else 2 * sensitivity)


def sample_log_weights(rng: np.random.Generator, log_weights: np.ndarray) -> int:
    """An index drawn with probability ∝ exp(log_weights), exactly (Gumbel-max trick)."""
    return int(np.argmax(log_weights + rng.gumbel(size=log_weights.shape)))


def topk_rank_log_weights(sorted_utilities: np.ndarray, k: int, epsilon: float,
                          sensitivity: float) -> np.ndarray:
    """Log-weight of "the lowest-ranked member of the set is rank y" for y = 1…N (−inf for y < K).

    log C(y−1, K−1) + ε(u_(y) − u_(K))/(2Δu): the total mass of the sets whose minimum is u_(y) under
    the set exponential mechanism P(S) ∝ exp(ε·U(S)/(2Δu)).
    """
    n = len(sorted_utilities)
    y = np.arange(1, n + 1)
    out = np.full(n, -np.inf)
    ok = y >= k
    log_count = gammaln(y[ok]) - gammaln(k) - gammaln(y[ok] - k + 1)
    out[ok] = log_count + epsilon * (sorted_utilities[ok] - sorted_utilities[k - 1]) / (2 * sensitivity)
    return out


def sample_topk(rng: np.random.Generator, utilities: np.ndarray, k: int, epsilon: float,
                sensitivity: float) -> np.ndarray:
    """K distinct indices from the set exponential mechanism (ε-DP for utilities of sensitivity Δu)."""
    order = np.argsort(-utilities, kind="stable")  # a fixed total order: ties broken by index
    y = sample_log_weights(rng, topk_rank_log_weights(utilities[order], k, epsilon, sensitivity)) + 1
    others = rng.choice(y - 1, size=k - 1, replace=False)
    return order[np.concatenate([[y - 1], others])]


def dppl_public(x: np.ndarray, y: np.ndarray, num_classes: int, epsilon: float, public_x: np.ndarray,
                rng: np.random.Generator, cfg: PublicConfig = PublicConfig()) -> PrototypeHead:
    """One public prototype per class (K = 1, monotone EM) or K per class (set EM): ε-DP in all.

    ε-DP under add/remove-one neighbours, by parallel composition over the disjoint classes.
    """
    public_unit = unit_rows(np.asarray(public_x, dtype=np.float64))
    if not 0 <= cfg.d_min < cfg.d_max <= 2:
        raise ValueError(f"need 0 <= d_min < d_max <= 2, got d_min={cfg.d_min}, d_max={cfg.d_max}")
    if not 1 <= cfg.k <= len(public_unit):
        raise ValueError(f"k={cfg.k} must be between 1 and the number of public points ({len(public_unit)})")
    sensitivity = cfg.d_max - cfg.d_min
    chosen = []
    for j in range(num_classes):
        u = public_utilities(x[y == j], public_unit, cfg.d_min, cfg.d_max)
        if cfg.k == 1:
            chosen.append([sample_log_weights(rng, exponential_log_weights(u, epsilon, sensitivity))])
        else:
            chosen.append(sample_topk(rng, u, cfg.k, epsilon, sensitivity))
    protos = np.asarray(public_x, dtype=np.float64)[np.asarray(chosen)]
    return PrototypeHead(protos, metric="cosine")
