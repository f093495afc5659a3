"""Accuracy along the budget frontier: a polynomial in ln S, fitted on proxy runs, with intervals.

On the frontier (ε and C = B·S fixed) the total signal-to-noise η is nearly fixed and the candidates
differ in how they split C: more steps mean a smaller batch and a smaller σ. TAN's privacy-parameter
search (Sander, Stock, Sablayrolles 2023, §4.3, Tables 3-4) finds accuracy rising then falling along
such a family (−6.2, +1.3, 0, −1.9 points from S/8 to 4·S on ImageNet), so the law is a parabola in
x = ln S:

    accuracy ≈ β₀ + β₁·(x − x̄) + β₂·(x − x̄)²,

ordinary least squares on every (candidate, seed) proxy run. For a new run at S the `level`
prediction interval is ŷ ± t·s·√(1 + x₀ᵀ(XᵀX)⁻¹x₀) (t with n − p degrees of freedom). Two candidates
are told apart when the `level` confidence interval of the difference of their expected accuracies,
(x₁ − x₂)ᵀβ ± t·s·√((x₁ − x₂)ᵀ(XᵀX)⁻¹(x₁ − x₂)), excludes 0; otherwise the data cannot tell them apart.

law "quadratic", "linear" or "flat" fixes the degree (2, 1, 0); "auto" starts from 2 and drops the top
term while its `level` interval contains 0 (a pre-test).

Seeds are replicates, so the law can be checked against the data: the lack-of-fit F test compares the
scatter of the candidates' mean accuracies around the law with the scatter of the seeds around their
candidate's mean (pure error). A small p-value says the law does not hold over the range fitted (a
cliff, say, where a candidate's rescaled learning rate is too large). The intervals also assume that every
candidate's seeds scatter alike; Bartlett's test (equal_variance_p) checks it: an unstable candidate
whose seeds scatter far more than the others' fails it. widest_fit fits the law over the widest run of
consecutive S on which both tests pass, so such a candidate is left out of the law rather than bending it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np

from tanplan.outcomes.optimize import LawFit, LawRange

DEGREES = {"quadratic": 2, "linear": 1, "flat": 0}
LAWS = ("auto", *DEGREES)


@dataclass(frozen=True)
class FrontierLaw:
    """accuracy ≈ Σ_k coef[k]·(ln S − x_mean)^k, fitted on n runs."""

    coef: tuple[float, ...]
    xtx_inv: tuple[tuple[float, ...], ...]  # (XᵀX)⁻¹
    residual_std: float  # s, with n − p degrees of freedom
    n: int
    x_mean: float
    r2: float
    lack_of_fit_p: float | None = None  # p-value of the lack-of-fit F test; None without spare cells or seeds

    @property
    def degree(self) -> int:
        return len(self.coef) - 1

    @property
    def model(self) -> str:
        return {2: "quadratic", 1: "linear", 0: "flat"}[self.degree]

    @property
    def dof(self) -> int:
        return self.n - len(self.coef)

    def _row(self, steps: float) -> np.ndarray:
        x = math.log(steps) - self.x_mean
        return np.array([x**k for k in range(len(self.coef))])

    def _t(self, level: float) -> float:
        from scipy import stats

        return float(stats.t.ppf(0.5 + level / 2, self.dof)) if self.dof >= 1 else math.inf

    def _quad(self, row: np.ndarray) -> float:
        return float(row @ np.asarray(self.xtx_inv) @ row)

    def mean(self, steps: float) -> float:
        return float(self._row(steps) @ np.asarray(self.coef))

    def predict(self, steps: float, level: float = 0.95) -> tuple[float, float, float]:
        """(prediction, low, high): a `level` prediction interval for one new run at `steps`."""
        row = self._row(steps)
        mean = float(row @ np.asarray(self.coef))
        half = self._t(level) * self.residual_std * math.sqrt(1.0 + self._quad(row))
        return mean, mean - half, mean + half

    def difference(self, steps_a: float, steps_b: float, level: float = 0.95) -> tuple[float, float, float]:
        """(E acc(a) − E acc(b), low, high): a `level` confidence interval of the difference."""
        row = self._row(steps_a) - self._row(steps_b)
        diff = float(row @ np.asarray(self.coef))
        quad = self._quad(row)
        half = self._t(level) * self.residual_std * math.sqrt(quad) if quad > 0 else 0.0
        return diff, diff - half, diff + half

    def top_interval(self, level: float = 0.95) -> tuple[float, float]:
        """The `level` confidence interval of the highest-degree coefficient (−∞, ∞ for the flat law)."""
        if self.degree == 0:
            return -math.inf, math.inf
        k = self.degree
        half = self._t(level) * self.residual_std * math.sqrt(self.xtx_inv[k][k])
        return self.coef[k] - half, self.coef[k] + half

    def to_dict(self) -> dict:
        return {"model": self.model, "coef": list(self.coef), "residual_std": self.residual_std, "n": self.n,
                "dof": self.dof, "x_mean": self.x_mean, "r2": self.r2, "lack_of_fit_p": self.lack_of_fit_p}


def fit_degree(steps, accuracies, degree: int) -> FrontierLaw:
    """Least squares of accuracy on powers of ln S − mean(ln S), up to `degree`."""
    x = np.log(np.asarray(steps, dtype=float))
    y = np.asarray(accuracies, dtype=float)
    if x.shape != y.shape:
        raise ValueError("steps and accuracies must have the same length")
    distinct = len(set(np.round(x, 12)))
    if distinct < degree + 1 or x.size < degree + 2:
        raise ValueError(f"a degree-{degree} law needs {degree + 1} distinct S and {degree + 2} runs; "
                         f"got {distinct} and {x.size}")
    x_mean = float(x.mean())
    design = np.stack([(x - x_mean) ** k for k in range(degree + 1)], axis=1)
    xtx_inv = np.linalg.inv(design.T @ design)
    coef = xtx_inv @ design.T @ y
    residuals = y - design @ coef
    ss_res = float(residuals @ residuals)
    ss_tot = float(((y - y.mean()) ** 2).sum())
    dof = x.size - (degree + 1)
    return FrontierLaw(tuple(float(c) for c in coef), tuple(tuple(float(v) for v in r) for r in xtx_inv),
                       math.sqrt(ss_res / dof), int(x.size), x_mean, 1.0 - ss_res / ss_tot if ss_tot > 0 else 1.0,
                       lack_of_fit(x, y, ss_res, degree + 1))


def lack_of_fit(x: np.ndarray, y: np.ndarray, ss_res: float, params: int) -> float | None:
    """p-value of the lack-of-fit F test: F = (SS_lof/(m − p)) / (SS_pe/(n − m)), m distinct x, SS_pe the
    squares of the replicates around their x's mean and SS_lof = SS_res − SS_pe. None when m ≤ p or n ≤ m."""
    from scipy import stats

    groups: dict[float, list[float]] = {}
    for xi, yi in zip(np.round(x, 12), y):
        groups.setdefault(float(xi), []).append(float(yi))
    m, n = len(groups), len(y)
    if m <= params or n <= m:
        return None
    ss_pe = sum(float(((np.asarray(g) - np.mean(g)) ** 2).sum()) for g in groups.values())
    ss_lof = max(0.0, ss_res - ss_pe)
    if ss_pe <= 0:
        return 0.0 if ss_lof > 0 else 1.0
    f = (ss_lof / (m - params)) / (ss_pe / (n - m))
    return float(stats.f.sf(f, m - params, n - m))


def fit_frontier_law(steps, accuracies, law: str = "quadratic", level: float = 0.95) -> FrontierLaw:
    """The law of `law` ("auto" drops the top term while its `level` interval contains 0)."""
    if law not in LAWS:
        raise ValueError(f"law {law!r} is not known: use one of {', '.join(LAWS)}")
    if law != "auto":
        return fit_degree(steps, accuracies, DEGREES[law])
    distinct = len(set(int(s) for s in steps))
    degree = min(2, distinct - 1, len(steps) - 2)
    while True:
        fitted = fit_degree(steps, accuracies, degree)
        low, high = fitted.top_interval(level)
        if degree == 0 or not low <= 0.0 <= high:
            return fitted
        degree -= 1


def equal_variance_p(steps, accuracies) -> float | None:
    """p-value of Bartlett's test that the accuracies of every S with two runs or more share one variance;
    None with fewer than two such S, or when every such S has runs of one value."""
    from scipy import stats

    groups: dict[int, list[float]] = {}
    for s, a in zip(steps, accuracies):
        groups.setdefault(int(s), []).append(float(a))
    samples = [g for g in groups.values() if len(g) >= 2]
    if len(samples) < 2 or all(np.var(g) == 0 for g in samples):
        return None
    if any(np.var(g) == 0 for g in samples):
        return 0.0  # one S repeats exactly while another scatters: the variances differ
    return float(stats.bartlett(*samples).pvalue)


def widest_fit(runs: Mapping[int, Sequence[float]], law: str, level: float) -> tuple[FrontierLaw, LawRange]:
    """(law, range): the law of `law` over the widest run of consecutive S on which it passes the lack-of-fit
    and the equal-variance tests at 1 − level; among equally wide runs, the one with the smallest residual
    scatter. With no such run of three or more, the three consecutive S with the smallest scatter, and
    range.passes is False. The range's p-values are those over every S.

    runs: the accuracies of each S's proxy runs (three S or more), in the order they were trained (the fit's
    rows keep that order)."""
    trained = sorted(runs)

    def fit(span):
        used = [(s, a) for s, accuracies in runs.items() if span[0] <= s <= span[-1] for a in accuracies]
        steps, acc = [s for s, _ in used], [a for _, a in used]
        fitted, equal_p = fit_frontier_law(steps, acc, law, level), equal_variance_p(steps, acc)
        passes = all(p is None or p >= 1 - level for p in (fitted.lack_of_fit_p, equal_p))
        return fitted, equal_p, passes

    fitted, equal_p, passes = fit(trained)
    first = fitted.lack_of_fit_p, equal_p
    span = trained
    if not passes:
        for width in range(len(trained) - 1, 2, -1):
            fits = [(fit(trained[i:i + width]), trained[i:i + width]) for i in range(len(trained) - width + 1)]
            good = [f for f in fits if f[0][2]] or (fits if width == 3 else [])
            if good:
                (fitted, equal_p, passes), span = min(good, key=lambda f: f[0][0].residual_std)
                break
    excluded = tuple(s for s in trained if not span[0] <= s <= span[-1])
    return fitted, LawRange(low=span[0], high=span[-1], excluded=excluded, passes=passes, lack_of_fit_p=first[0],
                            equal_variance_p=first[1])


def law_fit(law: FrontierLaw, level: float, span: LawRange) -> LawFit:
    """What optimize.json says of the law: its fit, its top coefficient's `level` interval and its range."""
    return LawFit(model=law.model, coef=law.coef, residual_std=law.residual_std, n=law.n, dof=law.dof,
                  x_mean=law.x_mean, r2=law.r2, lack_of_fit_p=law.lack_of_fit_p, level=level,
                  top_interval=tuple(law.top_interval(level)), range=span)


__all__ = ["FrontierLaw", "LAWS", "equal_variance_p", "fit_degree", "fit_frontier_law", "lack_of_fit", "law_fit",
           "widest_fit"]
