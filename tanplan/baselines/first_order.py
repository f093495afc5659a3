"""Full-batch DP gradient methods on a linear head: DP-FC and DP-Adam (Mehta et al. 2023).

Model: scores = x·W + b, sigmoid cross-entropy per class (one-vs-rest, labels one-hot), W₀ = 0 and
b₀ = −10 as in the paper (the negative bias keeps the per-example gradient on the true class at first,
so clipping spends its budget on signal). The per-example gradient is [x_i; 1]·r_iᵀ with
r_i = σ(z_i) − y_i, so its norm is √(‖x_i‖² + 1)·‖r_i‖ in closed form: no per-example autodiff.

Released statistics, add/remove-one neighbours, n a public normaliser:
- the sum of per-example gradients clipped to L2 norm C_g (over W and b together): sensitivity C_g,
  noise N(0, (σC_g)²) per coordinate, noise multiplier σ; one release per step;
- DP-FC only, once: the feature covariance G = Σ x̃_i x̃_iᵀ on features clipped to C_G: Frobenius
  sensitivity C_G², symmetric noise of std σC_G², noise multiplier σ.

DP-FC (Alg. 4) with T steps is (T+1)/(2σ²)-zCDP; DP-Adam (Alg. 1, Adam as the first-order optimizer,
full batch) with T steps is T/(2σ²)-zCDP. What the optimizer does with the noisy gradients (Adam's
moments, the preconditioner G̃⁻¹) is post-processing.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tanplan.baselines.heads import LinearHead
from tanplan.baselines.least_squares import one_hot
from tanplan.baselines.newton import sigmoid
from tanplan.baselines.noise import clip_rows, gaussian, symmetric_gaussian

INITIAL_BIAS = -10.0


@dataclass(frozen=True)
class FCConfig:
    """DP-FC hyper-parameters; the ridge on G̃ is ridge + ridge_noise × 2√d·σC_G²/n (public quantities)."""

    grad_clip: float = 4.0  # C_g
    cov_clip: float = 4.0  # C_G
    steps: int = 10
    learning_rate: float = 3.0
    ridge: float = 0.05
    ridge_noise: float = 1.0
    initial_bias: float = INITIAL_BIAS


@dataclass(frozen=True)
class AdamConfig:
    grad_clip: float = 4.0
    steps: int = 100
    learning_rate: float = 0.02
    weight_decay: float = 0.0
    initial_bias: float = INITIAL_BIAS


def fc_relative_multipliers(cfg: FCConfig = FCConfig()) -> list[float]:
    return [1.0] * (cfg.steps + 1)  # G once, then one gradient per step


def adam_relative_multipliers(cfg: AdamConfig = AdamConfig()) -> list[float]:
    return [1.0] * cfg.steps


def clipped_gradient_sum(x: np.ndarray, labels: np.ndarray, weights: np.ndarray, bias: np.ndarray,
                         clip: float):
    """(Σ_i clip_C(∇_W ℓ_i), Σ_i clip_C(∇_b ℓ_i)): each example's (W, b) gradient clipped jointly to C."""
    residual = sigmoid(x @ weights + bias) - labels  # (n, m)
    norms = np.sqrt((x ** 2).sum(1) + 1.0) * np.linalg.norm(residual, axis=1)
    scaled = residual * np.minimum(1.0, clip / np.maximum(norms, 1e-300))[:, None]
    return x.T @ scaled, scaled.sum(0)


def noisy_mean_gradient(x, labels, weights, bias, clip, noise_multiplier, rng):
    """One Gaussian release of the clipped gradient sum (multiplier σ), divided by the public n."""
    grad_w, grad_b = clipped_gradient_sum(x, labels, weights, bias, clip)
    d, m = grad_w.shape
    noise = gaussian(rng, noise_multiplier * clip, (d + 1, m))  # one draw for the whole (W, b) vector
    n = len(x)
    return (grad_w + noise[:d]) / n, (grad_b + noise[d]) / n


def dp_fc(x: np.ndarray, y: np.ndarray, num_classes: int, noise_multiplier: float,
          rng: np.random.Generator, cfg: FCConfig = FCConfig()) -> LinearHead:
    """Alg. 4: noisy covariance once, then T preconditioned noisy gradient steps; (T+1)/(2σ²)-zCDP."""
    x = np.asarray(x, dtype=np.float64)
    labels = one_hot(y, num_classes)
    n, d = x.shape
    sigma = float(noise_multiplier)
    xg = clip_rows(x, cfg.cov_clip)
    cov_std = sigma * cfg.cov_clip ** 2
    cov = (xg.T @ xg + symmetric_gaussian(rng, cov_std, d)) / n
    cov += (cfg.ridge + cfg.ridge_noise * 2 * np.sqrt(d) * cov_std / n) * np.eye(d)
    vals, vecs = np.linalg.eigh(cov)  # factor once: G̃ is fixed for all steps
    weights = np.zeros((d, num_classes))
    bias = np.full(num_classes, cfg.initial_bias)
    for _ in range(cfg.steps):
        grad_w, grad_b = noisy_mean_gradient(x, labels, weights, bias, cfg.grad_clip, sigma, rng)
        weights = weights - cfg.learning_rate * _apply_inverse(vals, vecs, grad_w)
        bias = bias - cfg.learning_rate * grad_b
    return LinearHead(weights, bias)


def _apply_inverse(vals, vecs, g):
    floor = max(1e-6, 1e-3 * np.abs(vals).max())
    return vecs @ ((vecs.T @ g) / np.maximum(vals, floor)[:, None])


def dp_adam(x: np.ndarray, y: np.ndarray, num_classes: int, noise_multiplier: float,
            rng: np.random.Generator, cfg: AdamConfig = AdamConfig()) -> LinearHead:
    """Alg. 1 with optax's Adam (AdamW when weight_decay > 0), full batch: T/(2σ²)-zCDP."""
    import jax
    import optax

    x = np.asarray(x, dtype=np.float64)
    labels = one_hot(y, num_classes)
    d = x.shape[1]
    params = {"w": np.zeros((d, num_classes), np.float32), "b": np.full(num_classes, cfg.initial_bias, np.float32)}
    opt = optax.adamw(cfg.learning_rate, weight_decay=cfg.weight_decay) if cfg.weight_decay else \
        optax.adam(cfg.learning_rate)

    @jax.jit
    def update(grads, state, params):  # post-processing of the released gradient
        updates, state = opt.update(grads, state, params)
        return optax.apply_updates(params, updates), state

    state = opt.init(params)
    for _ in range(cfg.steps):
        w, b = np.asarray(params["w"], np.float64), np.asarray(params["b"], np.float64)
        grad_w, grad_b = noisy_mean_gradient(x, labels, w, b, cfg.grad_clip, float(noise_multiplier), rng)
        params, state = update({"w": grad_w.astype(np.float32), "b": grad_b.astype(np.float32)}, state, params)
    return LinearHead(np.asarray(params["w"], np.float64), np.asarray(params["b"], np.float64))
