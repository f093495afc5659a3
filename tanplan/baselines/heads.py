"""What a baseline releases, as a classifier: a linear head or a set of class prototypes.

Both are released under DP; predicting with them is post-processing and costs no privacy.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True, eq=False)
class LinearHead:
    """scores = x·W + b, W of shape (d, m), b of shape (m,)."""

    weights: np.ndarray
    bias: np.ndarray

    def scores(self, x: np.ndarray) -> np.ndarray:
        return x @ self.weights + self.bias

    def predict(self, x: np.ndarray) -> np.ndarray:
        return np.argmax(self.scores(x), axis=1)


def unit_rows(x: np.ndarray) -> np.ndarray:
    """Rows scaled to unit L2 norm; a zero row stays zero (cosine 0 with everything)."""
    norms = np.linalg.norm(x, axis=-1, keepdims=True)
    return x / np.maximum(norms, 1e-12)


def average_pool(x: np.ndarray, k: int) -> np.ndarray:
    """Mean over consecutive groups of k features (DPPL's k_pool); the last d mod k features are dropped."""
    if k <= 1:
        return x
    d = (x.shape[-1] // k) * k
    return x[..., :d].reshape(*x.shape[:-1], d // k, k).mean(-1)


@dataclass(frozen=True, eq=False)
class PrototypeHead:
    """K prototypes per class, shape (m, K, d'); a point goes to the class it is closest to on average.

    metric "cosine": score_c(x) = mean_k cos(x, p_ck) (DPPL-Public and -PublicK);
    "euclidean": score_c(x) = −mean_k ‖x − p_ck‖. `pool` average-pools x first (DPPL-Mean's k_pool).
    """

    prototypes: np.ndarray
    metric: str = "cosine"
    pool: int = 1

    def scores(self, x: np.ndarray) -> np.ndarray:
        x = average_pool(np.asarray(x, dtype=np.float64), self.pool)
        m, k, d = self.prototypes.shape
        flat = self.prototypes.reshape(m * k, d)
        if self.metric == "cosine":
            sims = unit_rows(x) @ unit_rows(flat).T
        elif self.metric == "euclidean":
            sq = (x ** 2).sum(1)[:, None] - 2 * x @ flat.T + (flat ** 2).sum(1)[None, :]
            sims = -np.sqrt(np.maximum(sq, 0.0))
        else:
            raise ValueError(f"metric {self.metric!r} is not known: use cosine or euclidean")
        return sims.reshape(len(x), m, k).mean(-1)

    def predict(self, x: np.ndarray) -> np.ndarray:
        return np.argmax(self.scores(x), axis=1)
