"""DP-Newton: Newton's method for one-vs-rest logistic regression (Mehta et al. 2023, Alg. 2).

Features are clipped to L2 norm C once; then, for T steps and each class j, the gradient
g_j = Σ_i ℓ'(θ_jᵀx̃_i, y_ij)·x̃_i and the Hessian H_j = Σ_i ℓ''(θ_jᵀx̃_i, y_ij)·x̃_i x̃_iᵀ are released with
Gaussian noise and θ_j ← θ_j − η·(H̃_j/n + λI)⁻¹ g̃_j/n. Sigmoid cross-entropy: |ℓ'| ≤ 1, |ℓ''| ≤ β_H = ¼.

Guarantee (Theorem 2.1), add/remove-one neighbours: per class ‖Δg_j‖ ≤ C and ‖ΔH_j‖_F ≤ β_H·C², so
over all m classes ‖Δ[g_1 … g_m]‖ ≤ √m·C and ‖Δ[H_1 … H_m]‖_F ≤ √m·β_H·C². With noise std σ√m·C on
every gradient coordinate and σ√m·β_H·C² on every Hessian entry, each step makes two Gaussian releases
of noise multiplier σ: T steps are T/σ²-zCDP. n, the dataset size, is a public normaliser.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from tanplan.baselines.heads import LinearHead
from tanplan.baselines.least_squares import one_hot
from tanplan.baselines.noise import clip_rows, gaussian, symmetric_gaussian

BETA_H = 0.25  # bound on the second derivative of the sigmoid cross-entropy


@dataclass(frozen=True)
class NewtonConfig:
    """DP-Newton hyper-parameters. The damping used is λ = ridge + ridge_noise × 2√d·(Hessian noise std)/n."""

    clip: float = 4.0
    steps: int = 1
    learning_rate: float = 1.0
    ridge: float = 0.05
    ridge_noise: float = 4.0


def relative_multipliers(cfg: NewtonConfig = NewtonConfig()) -> list[float]:
    return [1.0] * (2 * cfg.steps)  # a gradient and a (per-class) Hessian release per step


def sigmoid(z: np.ndarray) -> np.ndarray:
    return 0.5 * (1.0 + np.tanh(0.5 * z))


def newton_statistics(xc: np.ndarray, labels: np.ndarray, theta: np.ndarray):
    """(g, H) on clipped features xc: g is (d, m), H is (m, d, d), both sums over examples."""
    p = sigmoid(xc @ theta)
    grad = xc.T @ (p - labels)  # ℓ'(z, y) = σ(z) − y
    curvature = p * (1.0 - p)  # ℓ''(z) = σ(z)(1 − σ(z)) ≤ ¼
    hess = np.stack([(xc * curvature[:, j:j + 1]).T @ xc for j in range(theta.shape[1])])
    return grad, hess


def dp_newton(x: np.ndarray, y: np.ndarray, num_classes: int, noise_multiplier: float,
              rng: np.random.Generator, cfg: NewtonConfig = NewtonConfig()) -> LinearHead:
    """Alg. 2, θ₀ = 0: T/σ²-zCDP under add/remove-one neighbours (module docstring)."""
    xc = clip_rows(np.asarray(x, dtype=np.float64), cfg.clip)
    labels = one_hot(y, num_classes)
    n, d = xc.shape
    sigma, m, c = float(noise_multiplier), num_classes, cfg.clip
    hess_std = sigma * math.sqrt(m) * BETA_H * c ** 2
    lam = cfg.ridge + cfg.ridge_noise * 2 * math.sqrt(d) * hess_std / n
    theta = np.zeros((d, m))
    for _ in range(cfg.steps):
        grad, hess = newton_statistics(xc, labels, theta)
        grad = (grad + gaussian(rng, sigma * math.sqrt(m) * c, grad.shape)) / n
        for j in range(m):
            h = (hess[j] + symmetric_gaussian(rng, hess_std, d)) / n + lam * np.eye(d)
            theta[:, j] -= cfg.learning_rate * _solve_pd(h, grad[:, j])
    return LinearHead(theta, np.zeros(m))


def _solve_pd(h: np.ndarray, g: np.ndarray) -> np.ndarray:
    """h⁻¹g with h's eigenvalues floored at a small positive value (noise can make h indefinite)."""
    vals, vecs = np.linalg.eigh(h)
    floor = max(1e-6, 1e-3 * np.abs(vals).max())
    return vecs @ ((vecs.T @ g) / np.maximum(vals, floor))
