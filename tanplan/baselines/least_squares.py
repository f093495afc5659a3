"""DP-LS: differentially private least squares on frozen features (Mehta et al. 2023, Alg. 3).

Loss per example and class j: ½·(y_ij·(x_iᵀθ_j − y_ij)² + α·(x_iᵀθ_j)²) + λ/2·‖θ_j‖² (Hu et al.'s
weighting of positives and negatives). Its minimiser is θ_j = (A_j + αG + λI)⁻¹ b_j with, on features
clipped to L2 norm C,

    G = Σ_i x̃_i x̃_iᵀ,   A_j = Σ_{i: y_ij = 1} x̃_i x̃_iᵀ,   b_j = Σ_{i: y_ij = 1} x̃_i.

Guarantee (Theorem 2.2), add/remove-one neighbours, at most k positive classes per example (k = 1 for
single-label data): ‖ΔG‖_F ≤ C², ‖Δ[A_1 … A_m]‖_F ≤ √k·C², ‖Δ[b_1 … b_m]‖_2 ≤ √k·C. Three Gaussian
releases, each with noise multiplier σ (std σC², σ√kC², σ√kC), G shared by all classes: 3/(2σ²)-zCDP,
whatever the number of classes. The matrices get symmetric noise (see noise.symmetric_gaussian).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from tanplan.baselines.heads import LinearHead
from tanplan.baselines.noise import clip_rows, gaussian, symmetric_gaussian


@dataclass(frozen=True)
class LSConfig:
    """DP-LS hyper-parameters (the paper tunes α, λ and C; these defaults suit standardised features).

    The ridge actually used is λ = ridge + ridge_noise × 2√d·(noise std of Ã_j + αG̃), i.e. a multiple of
    the expected spectral norm of the noise added to the matrix that gets inverted: a function of public
    quantities only, which keeps the noisy system well-posed at any ε.
    """

    clip: float = 4.0
    alpha: float = 1.0
    ridge: float = 1.0
    ridge_noise: float = 2.0
    max_positive: int = 1  # k


RELATIVE_MULTIPLIERS = (1.0, 1.0, 1.0)  # G, A, b: one noise multiplier σ each


def relative_multipliers(cfg: LSConfig = LSConfig()) -> list[float]:
    return list(RELATIVE_MULTIPLIERS)


def one_hot(y: np.ndarray, num_classes: int) -> np.ndarray:
    out = np.zeros((len(y), num_classes))
    out[np.arange(len(y)), y] = 1.0
    return out


def ls_statistics(x: np.ndarray, y: np.ndarray, num_classes: int, clip: float):
    """(G, A, b): the sufficient statistics of Alg. 3 on clipped features; A is (m, d, d), b is (d, m)."""
    xc = clip_rows(np.asarray(x, dtype=np.float64), clip)
    labels = one_hot(y, num_classes)
    gram = xc.T @ xc
    per_class = np.stack([xc[y == j].T @ xc[y == j] for j in range(num_classes)])
    return gram, per_class, xc.T @ labels


def dp_ls(x: np.ndarray, y: np.ndarray, num_classes: int, noise_multiplier: float,
          rng: np.random.Generator, cfg: LSConfig = LSConfig()) -> LinearHead:
    """Alg. 3: release G, A_j, b_j with Gaussian noise (multiplier σ each) and solve per class.

    3/(2σ²)-zCDP under add/remove-one neighbours (sensitivities in the module docstring). σ = 0 gives
    the non-private ridge solution on clipped features.
    """
    gram, per_class, b = ls_statistics(x, y, num_classes, cfg.clip)
    d = gram.shape[0]
    sigma, k, c = float(noise_multiplier), cfg.max_positive, cfg.clip
    gram = gram + symmetric_gaussian(rng, sigma * c ** 2, d)
    per_class = per_class + np.stack([symmetric_gaussian(rng, sigma * math.sqrt(k) * c ** 2, d)
                                      for _ in range(num_classes)])
    b = b + gaussian(rng, sigma * math.sqrt(k) * c, b.shape)
    noise_std = sigma * c ** 2 * math.sqrt(k + cfg.alpha ** 2)
    lam = cfg.ridge + cfg.ridge_noise * 2 * math.sqrt(d) * noise_std
    eye = np.eye(d)
    weights = np.stack([_solve(per_class[j] + cfg.alpha * gram + lam * eye, b[:, j])
                        for j in range(num_classes)], axis=1)
    return LinearHead(weights, np.zeros(num_classes))


def _solve(a: np.ndarray, rhs: np.ndarray) -> np.ndarray:
    try:
        return np.linalg.solve(a, rhs)
    except np.linalg.LinAlgError:  # a singular noisy system: least squares is still post-processing
        return np.linalg.lstsq(a, rhs, rcond=None)[0]
