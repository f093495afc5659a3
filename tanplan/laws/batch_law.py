"""The batch law and its prediction for ONE launch: pure functions of (batch size, accuracy) rows.

Proxies (B', σ·B'/B, S) at the target's η_step carry the target's DP noise in each step and differ from
it only by the sampling noise of B' gradients, so accuracy rises with B' and levels off (TAN, Sander et
al. 2023). This module fits that law (`[fit] law`: "knee", the default, a rise in ln B' up to a knee and
a plateau past it; "noise", a + c/B'; "flat"; "log-linear"; "auto") by weighted least squares on the
widest window of rungs that passes a lack-of-fit test, and predicts one launch at B with an interval of
three parts: the law's mean at B, the launch's own run-to-run spread (read from the proxies' seeds where
the law meets the target) and the law's misspecification (forward held-out error beyond seed noise).
The forms, the weights, the interval's parts and why: docs/ladder.md; how often it covers a launch:
docs/calibration.md.

Everything here is pure (numpy/scipy, no training): tanplan.workflow.ladder drives it through the engine
and experiments/calibration.py replays it on pools of measured runs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Iterable, Sequence

import numpy as np

from tanplan.outcomes.fit import (ComparedForm, FittedLaw, HeldOutErrors, IntervalParts, LaunchSpread,
                                  PredictionRecord)

FORMS = ("knee", "noise", "flat", "log-linear")
AUTO_FORMS = ("knee", "noise")  # law "auto" chooses between these by held-out error
LACK_OF_FIT_ALPHA = 0.05  # a form "fits" a window unless its lack-of-fit test rejects at this level
MIN_WINDOW = 3  # rungs a law is fitted on when it has a choice: two for its coefficients, one more to hold out
HELD_OUT_FROM = 2  # rungs below the first held-out one: the third rung of a window and up are predicted
SHRINK_DOF = 4  # a rung's variance is shrunk toward the pooled one as if the pool had this many more seeds
SPREAD_ALPHA = 0.05  # the part of the seeds' variance that falls with B' (v1) is kept when significant here
# Where no rung is held out (two rungs: an explicit list, or a ladder that fits no third), misspecification
# cannot be measured and the interval carries this std instead: the root mean square distance between the
# knee law's two-rung prediction (the top rung's mean) and the launches' mean over the 14 pairs of adjacent
# rungs (16 and 32 up to 256 and 512) of the three calibration pools, 1.4 points, rounded up
# (docs/calibration.md, "Two rungs"). It includes the rung's and the launches' own seed noise: conservative.
UNMEASURED_MISSPECIFICATION_STD = 0.015


# ---------------------------------------------------------------------------------------------------
# Rows and rungs


@dataclass(frozen=True)
class Rung:
    """One proxy batch size and the test accuracy of each of its seeds."""

    batch_size: int
    accuracies: tuple[float, ...]

    @property
    def n(self) -> int:
        return len(self.accuracies)

    @property
    def mean(self) -> float:
        return sum(self.accuracies) / len(self.accuracies)

    @property
    def std(self) -> float:
        """Sample standard deviation (n − 1); 0 for one seed."""
        n = len(self.accuracies)
        if n < 2:
            return 0.0
        return math.sqrt(sum((a - self.mean) ** 2 for a in self.accuracies) / (n - 1))


def rungs_of(rows: Iterable[tuple[int, float]]) -> list[Rung]:
    """(batch size, accuracy) rows grouped into rungs, in increasing batch size.

        >>> [(r.batch_size, r.n) for r in rungs_of([(32, 0.8), (16, 0.7), (32, 0.82)])]
        [(16, 1), (32, 2)]
    """
    by_size: dict[int, list[float]] = {}
    for b, acc in rows:
        by_size.setdefault(int(b), []).append(float(acc))
    return [Rung(b, tuple(by_size[b])) for b in sorted(by_size)]


def pooled_variance(rungs: Sequence[Rung]) -> tuple[float, int]:
    """(pooled within-rung variance of the seeds, its degrees of freedom Σ(n_k − 1))."""
    dof = sum(r.n - 1 for r in rungs)
    if dof <= 0:
        return 0.0, 0
    return sum((r.n - 1) * r.std**2 for r in rungs) / dof, dof


def shrunk_variances(rungs: Sequence[Rung]) -> np.ndarray:
    """Each rung's seed variance shrunk toward the pooled one: ((n_k − 1)·s_k² + SHRINK_DOF·s²)/(n_k − 1 +
    SHRINK_DOF). A rung of 4 seeds alone gives its variance within a factor of 3; pooling the rungs
    assumes they scatter alike, which they do not below a knee."""
    pooled, _ = pooled_variance(rungs)
    floor = max(pooled, 1e-12) * 1e-3
    return np.array([max(((r.n - 1) * r.std**2 + SHRINK_DOF * pooled) / (r.n - 1 + SHRINK_DOF), floor)
                     for r in rungs])


# ---------------------------------------------------------------------------------------------------
# One launch's own spread: the seeds' variance against B'


@dataclass(frozen=True, kw_only=True)
class Spread:
    """Run-to-run variance of one proxy against B': v(B') = v0 + v1/B' (v0, v1 ≥ 0).

    At constant η_step every proxy step carries the target's DP noise, which scatters runs alike at every
    B' (v0), and the sampling noise of B' gradients adds a part that falls as 1/B' (v1/B'). A launch at B
    scatters by v(B). Fitted by maximum likelihood on the rungs' sample variances s_k² (fit_spread); cov
    is the inverse Fisher information, Σ (n_k − 1)/(2·v(B'_k)²)·a_k a_kᵀ with a_k = (1, 1/B'_k). v1 is kept only when a likelihood-ratio test finds it above 0 at SPREAD_ALPHA; otherwise v
    is the pooled variance (extrapolating a fall that the data do not show would only add uncertainty).
    """

    v0: float
    v1: float
    cov: tuple[tuple[float, float], tuple[float, float]]  # of (v0, v1)
    dof: int  # Σ(n_k − 1)

    def at(self, b: float) -> float:
        return self.v0 + self.v1 / b

    def effective_dof(self, b: float) -> float:
        """Degrees of freedom of v(b): all the seeds' for the pooled variance; Satterthwaite's 2·v(b)²/Var(v̂(b))
        when v1 is fitted (within [2, dof])."""
        if self.v1 == 0:
            return float(max(self.dof, 1))
        a = np.array([1.0, 1.0 / b])
        var = float(a @ np.asarray(self.cov) @ a)
        return float(min(max(2 * self.at(b) ** 2 / var, 2.0), max(self.dof, 2))) if var > 0 else float(self.dof)

    def record(self) -> LaunchSpread:
        return LaunchSpread(v0=self.v0, v1=self.v1, dof=self.dof)


def fit_spread(rungs: Sequence[Rung], alpha: float = SPREAD_ALPHA) -> Spread:
    """The seeds' variance against B' (see Spread) on these rungs: v0, v1 ≥ 0 by maximum likelihood of the
    rungs' sample variances ((n_k − 1)·s_k²/v(B'_k) ~ χ²(n_k − 1) for Gaussian seeds), v1 kept when the
    likelihood ratio against the pooled variance (v1 = 0) is significant at alpha (one-sided: ½χ²(1) on the
    boundary). The log-likelihood weighs each rung's variance on the log scale, where 4 seeds a rung still
    show a fall over several doublings that a least-squares fit of s² misses. cov is the inverse Fisher
    information of (v0, v1).

        >>> flat = fit_spread([Rung(b, (0.80, 0.82, 0.84)) for b in (16, 64, 256)])
        >>> flat.v1, round(flat.v0, 6), flat.effective_dof(4096)
        (0.0, 0.0004, 6.0)
    """
    from scipy import optimize, stats

    rs = [r for r in rungs if r.n >= 2]
    dof = sum(r.n - 1 for r in rs)
    pooled, _ = pooled_variance(rs)
    flat = Spread(v0=pooled, v1=0.0, cov=((2 * pooled**2 / max(dof, 1), 0.0), (0.0, 0.0)), dof=dof)
    if len({r.batch_size for r in rs}) < 2 or pooled <= 0:
        return flat
    n1 = np.array([r.n - 1 for r in rs], dtype=float)
    s2 = np.array([r.std**2 for r in rs])
    inv_b = np.array([1.0 / r.batch_size for r in rs])
    floor = pooled * 1e-4

    def nll(theta):  # in units of the pooled variance, so the optimiser sees numbers of order 1
        v = np.maximum(theta[0] + theta[1] * inv_b, floor / pooled) * pooled
        return float(0.5 * np.sum(n1 * (np.log(v) + s2 / v)))

    slope0 = max(float(np.polyfit(inv_b, s2, 1)[0]), 0.0) / pooled
    fit = optimize.minimize(nll, x0=[0.5, slope0 or 1.0], bounds=[(0.0, None), (0.0, None)], method="L-BFGS-B")
    v0, v1 = fit.x[0] * pooled, fit.x[1] * pooled
    ratio = 2 * (nll([1.0, 0.0]) - fit.fun)
    if v1 <= 0 or ratio <= 0 or 0.5 * stats.chi2.sf(ratio, 1) >= alpha:
        return flat
    a = np.stack([np.ones_like(inv_b), inv_b], axis=1)
    v = np.maximum(v0 + v1 * inv_b, floor)
    cov = np.linalg.pinv(a.T @ ((n1 / (2 * v**2))[:, None] * a))
    return Spread(v0=float(v0), v1=float(v1),
                  cov=((float(cov[0, 0]), float(cov[0, 1])), (float(cov[1, 0]), float(cov[1, 1]))), dof=dof)


# ---------------------------------------------------------------------------------------------------
# One form fitted on one window


def features(form: str, b: float, knee: int | None = None) -> np.ndarray:
    """The regressors of a form at batch size b (the knee form needs its knee)."""
    if form == "noise":
        return np.array([1.0, 1.0 / b])
    if form == "log-linear":
        return np.array([1.0, math.log(b)])
    if form == "flat":
        return np.array([1.0])
    if form == "knee":
        return np.array([1.0, -max(0.0, math.log(knee / b))])
    raise ValueError(f"unknown form {form!r}; valid: {', '.join(FORMS)}")


def coefficients(form: str) -> int:
    return {"flat": 1}.get(form, 2)


@dataclass(frozen=True, kw_only=True)
class Law:
    """One form fitted by weighted least squares on the rung means of its window (weights n_k/s̃_k²):
    coef and (XᵀWX)⁻¹, so Var(law's mean at b) = x(b)ᵀ(XᵀWX)⁻¹x(b)."""

    form: str
    window: tuple[int, ...]
    knee: int | None  # the knee form's k (its plateau: rungs ≥ k)
    coef: tuple[float, ...]
    xtx_inv: tuple[tuple[float, ...], ...]
    lack_of_fit_p: float | None  # None when the window has no spare rung or no seed scatter

    def x(self, b: float) -> np.ndarray:
        return features(self.form, b, self.knee)

    def mean(self, b: float) -> float:
        return float(self.x(b) @ np.asarray(self.coef))

    def mean_variance(self, b: float) -> float:
        x = self.x(b)
        return float(x @ np.asarray(self.xtx_inv) @ x)

    def record(self) -> FittedLaw:
        return FittedLaw(form=self.form, window=self.window, knee=self.knee, coef=self.coef,
                         lack_of_fit_p=self.lack_of_fit_p)


def _weighted_fit(rungs: Sequence[Rung], form: str, knee: int | None, v: np.ndarray):
    x = np.stack([features(form, r.batch_size, knee) for r in rungs])
    w = np.array([r.n for r in rungs], dtype=float) / v
    y = np.array([r.mean for r in rungs])
    xtx_inv = np.linalg.pinv(x.T @ (w[:, None] * x))
    coef = xtx_inv @ x.T @ (w * y)
    return coef, xtx_inv, float((w * (y - x @ coef) ** 2).sum())


def _knee_fits(rungs: Sequence[Rung], v: np.ndarray) -> list:
    """((coef, xtx_inv, χ²), k) of the knee form at every possible knee k of these sorted rungs: each rung
    that gives a rise (b > 0), and the first (the flat law: a falling "rise" is not a knee)."""
    fits = [(_weighted_fit(rungs, "knee", r.batch_size, v), r.batch_size) for r in rungs]
    return [f for f in fits if f[1] == rungs[0].batch_size or f[0][0][1] > 0]


def knee_average(rungs: Sequence[Rung]) -> tuple[float, float]:
    """The knee law's plateau averaged over the knee's places, and the variance of the plateaus around it.

    Each rung that gives a rise (b > 0), and the first rung (flat), is a possible knee k; its weighted fit
    has χ²_k, and the data weigh it by its likelihood exp(−χ²_k/2) (every place equally likely before the
    data: the same number of coefficients each). The mean of the plateaus under those weights is the
    prediction; their variance under the same weights, Σ w_k (a_k − ā)², is what not knowing the knee adds
    to Var(law's mean at B). A clear knee: nearly the best fit's plateau, a small spread; an unclear one
    (a rung that may still be rising, here B' = 32): a plateau between the places, and a spread that counts.

        >>> hinge = [Rung(b, (acc - 0.01, acc + 0.01)) for b, acc in ((16, 0.75), (32, 0.8), (64, 0.85), (128, 0.85))]
        >>> [round(100 * x, 2) for x in (knee_average(hinge)[0], knee_average(hinge)[1] ** 0.5)]  # points
        [85.03, 0.23]
        >>> unclear = [Rung(b, (acc - 0.02, acc + 0.02)) for b, acc in ((16, 0.75), (32, 0.84), (64, 0.85), (128, 0.86))]
        >>> fit_form(unclear, "knee").knee, [round(100 * x, 2) for x in (knee_average(unclear)[0], knee_average(unclear)[1] ** 0.5)]
        (32, [85.48, 0.8])
    """
    rungs = sorted(rungs, key=lambda r: r.batch_size)
    fits = _knee_fits(rungs, shrunk_variances(rungs))
    chi2 = np.array([f[0][2] for f in fits])
    weights = np.exp(-(chi2 - chi2.min()) / 2)
    weights /= weights.sum()
    plateaus = np.array([f[0][0][0] for f in fits])
    mean = float(weights @ plateaus)
    return mean, float(weights @ (plateaus - mean) ** 2)


def fit_form(rungs: Sequence[Rung], form: str) -> Law:
    """The form fitted on these rungs (a window), with its lack-of-fit test: Σ n_k(ȳ_k − ŷ_k)²/s̃_k² over the
    K − p spare rungs against F(K − p, the seeds' degrees of freedom). The knee form tries every rung as
    its knee and keeps the best fit (the first rung: flat).

        >>> law = fit_form([Rung(b, (0.9 - 1 / b - 0.01, 0.9 - 1 / b + 0.01)) for b in (16, 32, 64)], "noise")
        >>> round(law.mean(4096), 4), round(law.coef[1], 4)
        (0.8998, -1.0)
        >>> hinge = [Rung(b, (acc - 0.01, acc + 0.01)) for b, acc in ((16, 0.75), (32, 0.8), (64, 0.85), (128, 0.85))]
        >>> law = fit_form(hinge, "knee")
        >>> law.knee, round(law.mean(4096), 4)
        (64, 0.85)
    """
    from scipy import stats

    rungs = sorted(rungs, key=lambda r: r.batch_size)
    p = coefficients(form)
    if len(rungs) < p:
        raise ValueError(f"the {form} form needs {p} rungs or more")
    v = shrunk_variances(rungs)
    # the knee form: every possible knee (k at the first rung: flat); the others: their one fit
    fits = _knee_fits(rungs, v) if form == "knee" else [(_weighted_fit(rungs, form, None, v), None)]
    (coef, xtx_inv, chi2), knee = min(fits, key=lambda f: f[0][2] - 1e-15 * (f[1] or 0))
    _, dof = pooled_variance(rungs)
    spare = len(rungs) - p - (1 if form == "knee" else 0)  # the knee's place costs a degree of freedom
    lof_p = float(stats.f.sf(chi2 / spare, spare, dof)) if spare > 0 and dof > 0 else None
    return Law(form=form, window=tuple(r.batch_size for r in rungs), knee=knee,
               coef=tuple(float(c) for c in coef), xtx_inv=tuple(tuple(float(e) for e in row) for row in xtx_inv),
               lack_of_fit_p=lof_p)


@dataclass(frozen=True, kw_only=True)
class HeldOut:
    """Forward held-out errors: each rung's mean predicted by the form fitted on the window's rungs below it
    (the law predicts a larger batch than it saw, so it is tested the same way)."""

    form: str
    batch_sizes: tuple[int, ...]  # the rungs held out
    errors: tuple[float, ...]  # prediction − rung mean
    expected: tuple[float, ...]  # each error's variance if the form were exact (seed noise only)

    def where(self, keep) -> "HeldOut":
        """Only the held-out rungs where keep(i) is true."""
        idx = [i for i in range(len(self.errors)) if keep(i)]
        return HeldOut(form=self.form, batch_sizes=tuple(self.batch_sizes[i] for i in idx),
                       errors=tuple(self.errors[i] for i in idx), expected=tuple(self.expected[i] for i in idx))

    def mse(self, sizes: Iterable[int] | None = None) -> float:
        keep = set(self.batch_sizes if sizes is None else sizes)
        errs = [e for b, e in zip(self.batch_sizes, self.errors) if b in keep]
        return float(np.mean(np.square(errs))) if errs else math.inf

    @property
    def excess(self) -> float:
        """Held-out squared error beyond what seed noise explains (≥ 0): the misspecification estimate."""
        if not self.errors:
            return 0.0
        return max(0.0, float(np.mean(np.square(self.errors) - np.asarray(self.expected))))


def held_out(rungs: Sequence[Rung], form: str) -> HeldOut:
    """Predict each rung of the window from the rungs below it (the third rung and up).

        >>> h = held_out([Rung(b, (0.9 - 1 / b - 0.01, 0.9 - 1 / b + 0.01)) for b in (16, 32, 64, 128, 256)], "noise")
        >>> h.batch_sizes, round(max(map(abs, h.errors)), 9)
        ((64, 128, 256), 0.0)
    """
    rungs = sorted(rungs, key=lambda r: r.batch_size)
    v = shrunk_variances(rungs)
    sizes, errors, expected = [], [], []
    for k in range(HELD_OUT_FROM, len(rungs)):
        law = fit_form(rungs[:k], form)
        rung = rungs[k]
        sizes.append(rung.batch_size)
        errors.append(law.mean(rung.batch_size) - rung.mean)
        expected.append(law.mean_variance(rung.batch_size) + v[k] / rung.n)
    return HeldOut(form=form, batch_sizes=tuple(sizes), errors=tuple(errors), expected=tuple(expected))


# ---------------------------------------------------------------------------------------------------
# The law of record and the interval for one launch


@dataclass(frozen=True, kw_only=True)
class LawCandidate:
    """One form on its window: the law, its forward held-out errors, the launch's spread where it meets the
    target, and Var(law's mean at the target)."""

    law: Law
    held: HeldOut
    spread: Spread
    var_mean: float  # the coefficients' uncertainty at the target (the law's knee as fitted)
    mean: float  # the prediction at the target: the knee law's plateau averaged over its knee's places
    var_knee: float = 0.0  # the knee law: the variance of the plateaus over the knee's places (knee_average)

    def record(self) -> ComparedForm:
        return ComparedForm(form=self.law.form, window=self.law.window, knee=self.law.knee,
                            lack_of_fit_p=self.law.lack_of_fit_p,
                            held_out=dict(zip(self.held.batch_sizes, self.held.errors)),
                            held_out_excess=self.held.excess, var_mean=self.var_mean)


def window_of(rungs: Sequence[Rung], form: str, alpha: float = LACK_OF_FIT_ALPHA) -> list[Rung]:
    """The widest window of rungs B'_min and above (MIN_WINDOW or more; all rungs when fewer) on which the form
    passes its lack-of-fit test; with none, the narrowest (its misfit then shows in the held-out error)."""
    rungs = sorted(rungs, key=lambda r: r.batch_size)
    size = max(min(MIN_WINDOW, len(rungs)), coefficients(form))
    starts = range(len(rungs) - size + 1)
    for start in starts:
        p = fit_form(rungs[start:], form).lack_of_fit_p
        if p is None or p >= alpha:
            return list(rungs[start:])
    return list(rungs[starts[-1]:]) if len(starts) else list(rungs)


def candidate(rungs: Sequence[Rung], form: str, target_batch_size: int) -> LawCandidate:
    """The form on its window, with the spread of the rungs where it meets the target: the knee form's
    plateau (rungs ≥ k, or the top two when the plateau is one rung), every rung of the window otherwise."""
    window = window_of(rungs, form)
    law = fit_form(window, form)
    held, regime = held_out(window, form), window
    mean, var_knee = law.mean(target_batch_size), 0.0
    if form == "knee":
        mean, var_knee = knee_average(window)
        regime = [r for r in window if r.batch_size >= law.knee]
        regime = regime if len(regime) >= 2 else window[-2:]
        # The knee law claims the plateau goes on past its knee k: the rungs past k, each predicted from the
        # rungs below it (k among them), test that claim; errors within the rise do not bear on the target.
        # With no rung past k (no plateau seen), every held-out error counts: the rise may go on.
        past = held.where(lambda i: held.batch_sizes[i] > law.knee)
        held = past if past.errors else held
    # One launch's spread from the regime's seeds alone: below a knee a seed also scatters by where it sits on
    # a steep rise, a fall far faster than 1/B' (the large calibration pool: 20-fold from B' = 16 to 64) that
    # pulled v0 to 0 when fitted across the window and promised a launch almost without spread (0.13 points
    # against the launches' 0.33; docs/calibration.md, "One launch's spread: the plateau's rungs").
    return LawCandidate(law=law, held=held, spread=fit_spread(regime),
                        var_mean=law.mean_variance(target_batch_size), mean=mean, var_knee=var_knee)


def choose(cands: Sequence[LawCandidate]) -> LawCandidate:
    """The law of record: the candidate whose held-out error exceeds what seed noise explains the least (its
    misspecification), the first form (the knee) on a tie. A few held-out rungs cannot tell the forms'
    errors apart at the scale of seed noise, so the knee law stands unless its own errors show it wrong
    (a curve still rising past its apparent knee), and then the noise law, which keeps rising, may take over."""
    return min(enumerate(cands), key=lambda ic: (ic[1].held.excess, ic[0]))[1]


@dataclass(frozen=True, kw_only=True)
class Prediction:
    """The launch's expected accuracy at the target and a `level` interval for ONE launch, with its parts."""

    target_batch_size: int
    chosen: LawCandidate
    mean: float
    var_mean: float  # the law's mean at B: coefficients' uncertainty, and the knee's place (var_knee)
    var_launch: float  # one launch's own spread: the seeds' variance where the law meets the target, at B
    var_misspecification: float  # the forward held-out error beyond seed noise
    var_test_sets: float  # NOT in the interval: proxies and launch evaluated on different test sets (binomial)
    misspecification_measured: bool = True  # False: no rung held out, the stated UNMEASURED_MISSPECIFICATION_STD
    level: float
    quantile: float  # Student t at `level`, the launch spread's degrees of freedom
    candidates: tuple[LawCandidate, ...] = field(default=())

    @property
    def law(self) -> Law:
        return self.chosen.law

    @property
    def spread(self) -> Spread:
        return self.chosen.spread

    @property
    def variance(self) -> float:
        return self.var_mean + self.var_launch + self.var_misspecification

    @property
    def half_width(self) -> float:
        return self.quantile * math.sqrt(self.variance)

    @property
    def interval(self) -> tuple[float, float]:
        return self.mean - self.half_width, self.mean + self.half_width

    def record(self) -> PredictionRecord:
        """The prediction as fit.json and ladder.json record it."""
        chosen = self.chosen
        return PredictionRecord(
            predicted_accuracy=self.mean, prediction_interval=self.interval, level=self.level,
            half_width=self.half_width, quantile=self.quantile, form=self.law.form, window=self.law.window,
            law=self.law.record(), spread=self.spread.record(),
            parts=IntervalParts(mean=self.var_mean, launch=self.var_launch, misspecification=self.var_misspecification),
            std_parts=IntervalParts(mean=math.sqrt(self.var_mean), launch=math.sqrt(self.var_launch),
                                    misspecification=math.sqrt(self.var_misspecification)),
            test_sets_std=math.sqrt(self.var_test_sets),
            held_out=HeldOutErrors(batch_sizes=chosen.held.batch_sizes, errors=chosen.held.errors,
                                   excess=chosen.held.excess),
            candidates=tuple(c.record() for c in self.candidates), target_batch_size=self.target_batch_size,
            misspecification_stated=None if self.misspecification_measured else UNMEASURED_MISSPECIFICATION_STD)


def forms_of(law: str) -> tuple[str, ...]:
    """The candidate forms of a [fit] law setting: "auto" → AUTO_FORMS, a form → itself.

        >>> forms_of("auto"), forms_of("knee")
        (('knee', 'noise'), ('knee',))
    """
    if law == "auto":
        return AUTO_FORMS
    if law not in FORMS:
        raise ValueError(f"unknown law {law!r}; valid: auto, {', '.join(FORMS)}")
    return (law,)


def eval_set_variance(accuracy: float, proxy_test_size: int | None, launch_test_size: int | None) -> float:
    """Var of the difference between two independent test sets' accuracies of one model (binomial):
    p(1 − p)(1/n_proxy + 1/n_launch); 0 when the proxies are evaluated on the launch's own test set
    (sizes None).

        >>> round(eval_set_variance(0.8, 4000, 4000) ** 0.5, 4)
        0.0089
    """
    if not proxy_test_size or not launch_test_size:
        return 0.0
    p = min(max(accuracy, 0.0), 1.0)
    return p * (1 - p) * (1 / proxy_test_size + 1 / launch_test_size)


def predict(rows: Iterable[tuple[int, float]], target_batch_size: int, *, level: float = 0.95,
            forms: Sequence[str] = ("knee",), test_sizes: tuple[int | None, int | None] = (None, None)) -> Prediction:
    """The law of record and its interval for one launch at target_batch_size (see the module docstring).

    rows: (B', accuracy) of every proxy run (two rungs or more, each with ≥ 2 seeds). forms: the candidate
    forms (one form forces it). test_sizes: (the proxies' test-set size, the launch's) when they are
    evaluated on different test sets.

        >>> rows = [(b, acc + e) for b, acc in ((16, 0.75), (32, 0.8), (64, 0.85), (128, 0.85)) for e in (-0.01, 0, 0.01)]
        >>> p = predict(rows, 4096)
        >>> p.law.form, p.law.knee, round(p.mean, 3)
        ('knee', 64, 0.85)
    """
    from scipy import stats

    rungs = rungs_of(rows)
    if len(rungs) < 2:
        raise ValueError(f"the law needs two rungs or more; got {len(rungs)}")
    if any(r.n < 2 for r in rungs):
        raise ValueError("every rung needs two seeds or more (their scatter is the launch's spread)")
    forms = [f for f in forms if coefficients(f) <= len(rungs)] or ["flat"]
    cands = [candidate(rungs, form, target_batch_size) for form in forms]
    chosen = choose(cands)
    mean, var_mean = chosen.mean, chosen.var_mean + chosen.var_knee
    var_launch = chosen.spread.at(target_batch_size)
    measured = bool(chosen.held.errors)
    var_mis = chosen.held.excess if measured else UNMEASURED_MISSPECIFICATION_STD**2
    dof = interval_dof(var_mean, var_launch + var_mis, chosen.spread, target_batch_size)
    quantile = float(stats.t.ppf(0.5 + level / 2, dof))
    return Prediction(target_batch_size=target_batch_size, chosen=chosen, mean=mean, var_mean=var_mean,
                      var_launch=var_launch, var_misspecification=var_mis,
                      var_test_sets=eval_set_variance(mean, *test_sizes), level=level, quantile=quantile,
                      candidates=tuple(cands), misspecification_measured=measured)


def interval_dof(var_mean: float, var_rest: float, spread: Spread, b: float) -> float:
    """Degrees of freedom of the interval's variance (Welch-Satterthwaite): the law's mean, estimated from
    every seed (Σ(n_k − 1)), and the launch's spread (with the misspecification), whose own degrees of freedom
    are the spread's at b (fewer when v1 is fitted: v0 is an extrapolation). At most the seeds' (the pooled
    spread and the law's mean share one estimate of the variance: then exactly the seeds').

        >>> pooled = Spread(v0=1e-4, v1=0.0, cov=((1e-9, 0.0), (0.0, 0.0)), dof=15)
        >>> interval_dof(1e-4, 1e-4, pooled, 4096)
        15.0
    """
    seeds = float(max(spread.dof, 1))
    rest = spread.effective_dof(b)
    denominator = var_mean**2 / seeds + var_rest**2 / rest
    total = (var_mean + var_rest) ** 2 / denominator if denominator > 0 else seeds
    return float(min(max(total, 1.0), seeds))


def rung_to_add(prediction: Prediction) -> int | None:
    """The next doubling above the law's largest rung, below the target (None when there is none)."""
    top = 2 * max(prediction.law.window)
    return top if top < prediction.target_batch_size else None


# What lets the ladder reach rungs closer to the target (both of verdict's refusals name it)
CLIMB = "raise fit.max_proxy_fraction (and fit.compute_budget, when set) so the ladder climbs further"


def verdict(prediction: Prediction, max_half_width: float = 0.0) -> tuple[str, str] | None:
    """None when the prediction can be launched on; else (why not, what to change). max_half_width (> 0): an
    interval for one launch wider than this (accuracy) is a refusal too: it would tell the user nothing."""
    low, high = prediction.interval
    where = f"over B' = {', '.join(map(str, prediction.law.window))} for B = {prediction.target_batch_size}"
    add = rung_to_add(prediction)
    more = f"add the rung B' = {add} (fit.batch_sizes)" if add is not None else "train more seeds a rung"
    if not (math.isfinite(low) and math.isfinite(high)):
        return f"the interval {where} is unbounded", "train more seeds or more rungs"
    if not 0.0 <= prediction.mean <= 1.0 or low < 0.0 or high > 1.0:
        return (f"the batch law does not hold {where}: its interval for one launch, [{low:.3f}, {high:.3f}], "
                "leaves [0, 1]", f"train more seeds, or {CLIMB}")
    if max_half_width > 0 and prediction.half_width > max_half_width:
        unmeasured = ("" if prediction.misspecification_measured else
                      f", {100 * UNMEASURED_MISSPECIFICATION_STD:g} points (std) of it a stated misspecification "
                      "term: no rung was held out")
        return (f"the interval for one launch {where} is ± {100 * prediction.half_width:.1f} points, wider than "
                f"fit.max_half_width = {100 * max_half_width:g}{unmeasured}",
                f"{more}, or {CLIMB}, or raise fit.max_half_width")
    return None


__all__ = ["FORMS", "AUTO_FORMS", "LACK_OF_FIT_ALPHA", "MIN_WINDOW", "SPREAD_ALPHA", "Rung", "rungs_of",
           "pooled_variance", "shrunk_variances", "Spread", "fit_spread", "features", "Law", "fit_form", "HeldOut",
           "held_out", "knee_average", "LawCandidate", "window_of", "candidate", "choose", "Prediction", "forms_of", "eval_set_variance", "interval_dof", "predict", "rung_to_add", "UNMEASURED_MISSPECIFICATION_STD",
           "verdict"]
