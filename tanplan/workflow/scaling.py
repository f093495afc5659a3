"""The batch scaling law (TAN paper Fig. 1 and 4): accuracy = a + b·log B at constant η_step and S.

Ordinary least squares on every (B, seed) point; the prediction at the target batch size comes with a
Student-t prediction interval for a new run, ŷ ± t·s·√(1 + 1/n + (x₀ − x̄)²/Sxx), x = log B.

Extrapolating 30-100× beyond the proxies multiplies the slope's error by ln(B/B'): with seed noise of
1-2 points that alone is ±5 points. When the slope's interval contains 0 the data cannot tell the law
from the flat regime the paper reports on CIFAR-10 (accuracy constant in B at constant η_step), so
`choose` predicts with b = 0 (the mean of the runs, ȳ ± t·s_y·√(1 + 1/n)) and says so. This is a
pre-test: when the true slope is small but not zero its interval covers a little less than `level`.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np


@dataclass(frozen=True)
class ScalingFit:
    """accuracy ≈ a + b·ln(B), fitted on n points."""

    a: float
    b: float
    r2: float
    n: int
    residual_std: float  # s, with n − 2 degrees of freedom
    x_mean: float
    sxx: float
    y_std: float = 0.0  # sample standard deviation of the accuracies (n − 1 degrees of freedom)

    def slope_interval(self, level: float = 0.95) -> tuple[float, float]:
        """The `level` confidence interval of b."""
        from scipy import stats

        if self.n <= 2 or self.sxx <= 0:
            return -math.inf, math.inf
        half = float(stats.t.ppf(0.5 + level / 2, self.n - 2)) * self.residual_std / math.sqrt(self.sxx)
        return self.b - half, self.b + half

    def predict_flat(self, level: float = 0.95) -> tuple[float, float, float]:
        """(prediction, low, high) with b = 0: the mean of the runs and a `level` interval for a new run."""
        from scipy import stats

        mean = self.a + self.b * self.x_mean
        if self.n <= 1:
            return mean, -math.inf, math.inf
        half = float(stats.t.ppf(0.5 + level / 2, self.n - 1)) * self.y_std * math.sqrt(1 + 1 / self.n)
        return mean, mean - half, mean + half

    def choose(self, batch_size: float, level: float = 0.95, law: str = "auto") -> tuple[str, tuple[float, float, float]]:
        """(model, (prediction, low, high)) under `law`: "log-linear", "flat", or "auto" (flat when b's
        interval contains 0, else log-linear)."""
        if law == "auto":
            low, high = self.slope_interval(level)
            law = "flat" if low <= 0.0 <= high and math.isfinite(low) else "log-linear"
        return law, self.predict_flat(level) if law == "flat" else self.predict(batch_size, level)

    def predict(self, batch_size: float, level: float = 0.95) -> tuple[float, float, float]:
        """(prediction, low, high) for one new run at batch_size, with a `level` prediction interval."""
        from scipy import stats

        x0 = math.log(batch_size)
        mean = self.a + self.b * x0
        if self.n <= 2 or self.sxx <= 0:
            return mean, -math.inf, math.inf
        t = float(stats.t.ppf(0.5 + level / 2, self.n - 2))
        half = t * self.residual_std * math.sqrt(1 + 1 / self.n + (x0 - self.x_mean) ** 2 / self.sxx)
        return mean, mean - half, mean + half

    def to_dict(self) -> dict:
        return asdict(self)


def fit_log_linear(batch_sizes, accuracies) -> ScalingFit:
    """Least-squares fit of accuracy against ln(batch size); every (B, accuracy) pair is one point."""
    x = np.log(np.asarray(batch_sizes, dtype=float))
    y = np.asarray(accuracies, dtype=float)
    if x.shape != y.shape or x.size < 2:
        raise ValueError("need at least two (batch size, accuracy) points of matching length")
    x_mean = float(x.mean())
    sxx = float(((x - x_mean) ** 2).sum())
    if sxx == 0:
        raise ValueError("need at least two distinct batch sizes to fit a slope")
    b = float(((x - x_mean) * (y - y.mean())).sum() / sxx)
    a = float(y.mean() - b * x_mean)
    residuals = y - (a + b * x)
    ss_res = float((residuals**2).sum())
    ss_tot = float(((y - y.mean()) ** 2).sum())
    r2 = 1.0 - ss_res / ss_tot if ss_tot > 0 else 1.0
    dof = max(1, x.size - 2)
    return ScalingFit(a, b, r2, int(x.size), math.sqrt(ss_res / dof), x_mean, sxx, float(y.std(ddof=1)))


def verdict(prediction: float, low: float, high: float, line_at_target: float | None = None,
            where: str = "over this range") -> tuple[str, str] | None:
    """None when the law's extrapolation is usable; else (why not, what to change): an accuracy lives in [0, 1].
    `where` names the proxy range in the reason (e.g. "over B' = 16, 32 for B = 2048").

    Whichever model predicts (the line, or the flat mean when the slope's interval contains 0), a fitted
    line a + b·ln B that leaves [0, 1] before the target says the proxies still rise too fast to be past
    the knee: the flat mean of such proxies under-predicts, the line over-predicts; neither is trusted.
    """
    if not (math.isfinite(low) and math.isfinite(high)):
        return "the interval is unbounded (n ≤ 2)", "train more seeds or more batch sizes"
    if line_at_target is not None and not 0.0 <= line_at_target <= 1.0:
        return (f"the batch law does not hold {where}: the proxies are below the knee, accuracy still rises "
                f"with B' so fast that the fitted line reaches {line_at_target:.3g} at the target, outside [0, 1]",
                'move the proxies up past the knee (fit.batch_sizes = "auto" finds it), or lower ε / raise S')
    if not 0.0 <= prediction <= 1.0 or low < 0.0 or high > 1.0:
        return (f"the batch law does not hold {where}: its prediction interval leaves [0, 1], the proxy runs "
                "are too few or too noisy to bound the target's accuracy",
                "train more seeds, or move the proxies closer to the target")
    return None
