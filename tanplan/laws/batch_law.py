"""The batch law and its prediction for ONE launch: pure functions of (batch size, accuracy) rows.

Proxies (B', σ·B'/B, S) at the target's η_step carry the target's DP noise in each step and differ from
it only by the sampling noise of B' gradients, so accuracy rises with B' and levels off (TAN, Sander et
al. 2023). This module fits that law (`[fit] law`: "auto", the default, the knee and noise forms averaged
by their out-of-sample fit on the top rungs; "knee", a rise in ln B' up to a knee and a plateau past it;
"noise", a + c/B'; "flat"; "log-linear") by weighted least squares on the widest window of rungs that
passes a lack-of-fit test, and predicts one launch at B with an interval of three parts: the law's mean at
B (with "auto", the forms' disagreement too), the launch's own run-to-run spread (read from the proxies'
seeds where the law meets the target) and the law's misspecification (forward held-out error beyond seed
noise).
The forms, the weights, the interval's parts and why: docs/ladder.md; how often it covers a launch:
docs/calibration.md.

Everything here is pure (numpy/scipy, no training): tanplan.workflow.ladder drives it through the engine
and experiments/calibration.py replays it on pools of measured runs.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Iterable, Sequence

import numpy as np

from tanplan.laws.data_size import DataSizeTerm
from tanplan.outcomes.fit import (ComparedForm, FittedLaw, HeldOutErrors, IntervalParts, LaunchSpread,
                                  PredictionRecord)

FORMS = ("knee", "noise", "flat", "log-linear")
AUTO_FORMS = ("knee", "noise")  # law "auto" averages these by their out-of-sample fit (averaged)
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
LOWER_BOUND_LEVEL = 0.95  # "at least X with 95% probability": the one-sided bound every report prints


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
    if len({r.batch_size for r in rs}) < 2 or pooled <= 0 or alpha <= 0:  # alpha 0: the pooled variance alone
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
    weight: float | None = None  # its weight in the averaged prediction (law "auto"); None: not averaged
    score: float | None = None  # its out-of-sample log score (out_of_sample_score); None: no rung held out

    def record(self) -> ComparedForm:
        return ComparedForm(form=self.law.form, window=self.law.window, knee=self.law.knee,
                            lack_of_fit_p=self.law.lack_of_fit_p,
                            held_out=dict(zip(self.held.batch_sizes, self.held.errors)),
                            held_out_excess=self.held.excess, var_mean=self.var_mean, mean=self.mean,
                            weight=self.weight, score=self.score)


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


def candidate(rungs: Sequence[Rung], form: str, target_batch_size: int, spread: bool = True) -> LawCandidate:
    """The form on its window, with the spread of the rungs where it meets the target: the knee form's
    plateau (rungs ≥ k, or the top two when the plateau is one rung), every rung of the window otherwise.
    spread=False leaves the spread unfitted (pooled): for out_of_sample_score, which needs only the mean.
    The noise form looks at the top NOISE_RUNGS rungs only (see there)."""
    rungs = sorted(rungs, key=lambda r: r.batch_size)
    window = window_of(rungs[-NOISE_RUNGS:] if form == "noise" else rungs, form)
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
    fitted = fit_spread(regime) if spread else fit_spread(regime, alpha=0.0)
    return LawCandidate(law=law, held=held, spread=fitted,
                        var_mean=law.mean_variance(target_batch_size), mean=mean, var_knee=var_knee)


def choose(cands: Sequence[LawCandidate]) -> LawCandidate:
    """The law of record: the candidate with the largest weight (averaged), else (one form, or weights not
    scored) the one whose held-out error exceeds what seed noise explains the least, the first form on a tie."""
    if any(c.weight is not None for c in cands):
        return max(enumerate(cands), key=lambda ic: (ic[1].weight or 0.0, -ic[0]))[1]
    return min(enumerate(cands), key=lambda ic: (ic[1].held.excess, ic[0]))[1]


# The noise form a + c/B' is fitted on the top rungs alone: its target is a, the limit of the rise, and a 1/B'
# bend fitted down the steep rise of the first rungs (which its lack-of-fit test passes, their seeds scatter
# so) set a 1.7 points above the large pool's launches; near the target it follows the slow rise that the
# knee form cuts off (fine-tuning).
NOISE_RUNGS = 4
OUT_OF_SAMPLE_RUNGS = 2  # the law is chosen by how well each form predicts the top rungs from those below them


def out_of_sample_score(rungs: Sequence[Rung], form: str, top: int = OUT_OF_SAMPLE_RUNGS) -> tuple[float, int]:
    """(Σ log predictive density, rungs scored) of the form's forward predictions of the top `top` rungs, each
    from the rungs below it (MIN_WINDOW of them at least): the form's candidate there (its window, its knee's
    average) predicts the rung's mean with variance Var(law's mean) + the knee's place + its own held-out excess + the rung mean's seed
    noise s̃²/n. Forward, because the law is used to extrapolate: the question each form must answer is
    where a larger batch lands. The same rungs for every form, so the scores compare.

        >>> rising = [Rung(b, (0.9 - 1 / b - 0.003, 0.9 - 1 / b, 0.9 - 1 / b + 0.003)) for b in (16, 32, 64, 128, 256)]
        >>> knee, noise = (out_of_sample_score(rising, f) for f in ("knee", "noise"))
        >>> noise[0] > knee[0], noise[1]
        (True, 2)
    """
    rungs = sorted(rungs, key=lambda r: r.batch_size)
    v = shrunk_variances(rungs)
    score, scored = 0.0, 0
    # A rung is scored only from MIN_WINDOW rungs below it: from two, the knee form can only put its plateau
    # at the top one, and a rise that goes on one more doubling (the demo's 32 to 64) would count against it
    # where it says nothing about a plateau further up.
    for k in range(max(MIN_WINDOW, len(rungs) - top), len(rungs)):
        below = rungs[:k]
        if coefficients(form) > len(below):
            continue
        c = candidate(below, form, rungs[k].batch_size, spread=False)
        var = c.var_mean + c.var_knee + c.held.excess + v[k] / rungs[k].n
        score += -0.5 * float(math.log(2 * math.pi * var) + (rungs[k].mean - c.mean) ** 2 / var)
        scored += 1
    return score, scored


# The forms' odds before the rungs are scored (law_weights): 3 to 1 for the knee form. One or two held-out rungs
# of 3 seeds tell the forms apart weakly, and on the demo's pool, where accuracy levels off, even odds put
# 0.35-0.5 of the weight on a noise law 2 points above the launches (interval score 2.01× the oracle's
# against the knee's 1.77×; 3:1 1.92×, 9:1 1.84×), while on fine-tuning's slow rise 9:1 covered 0.95 [0.86,
# 1.00] and 3:1 0.975 [0.92, 1.00] (30 draws each; docs/ladder.md). This one number was chosen on those pools.
LAW_PRIOR = {"knee": 3.0, "noise": 1.0}


def law_weights(scores: Sequence[float], forms: Sequence[str] | None = None) -> np.ndarray:
    """Each form's weight from its out-of-sample log score, LAW_PRIOR[form]·exp(score) normalised
    (pseudo-Bayesian model averaging)."""
    a = np.asarray(scores, dtype=float)
    prior = np.array([LAW_PRIOR.get(f, 1.0) for f in forms]) if forms is not None else np.ones(len(a))
    w = prior * np.exp(a - a.max())
    return w / w.sum()


def averaged(cands: Sequence[LawCandidate], rungs: Sequence[Rung]) -> list[LawCandidate]:
    """The candidates with their out-of-sample scores and weights (the prior alone when no rung can be held out)."""
    scored = [out_of_sample_score(rungs, c.law.form) for c in cands]
    forms = [c.law.form for c in cands]
    weights = law_weights([0.0 if any(n == 0 for _, n in scored) else s for s, _ in scored], forms)
    return [dataclasses.replace(c, weight=float(w), score=float(s) if n else None)
            for c, w, (s, n) in zip(cands, weights, scored)]


@dataclass(frozen=True, kw_only=True)
class Prediction:
    """The launch's expected accuracy at the target and a `level` interval for ONE launch, with its parts."""

    target_batch_size: int
    chosen: LawCandidate
    mean: float
    var_mean: float  # the law's mean at B: coefficients' uncertainty, and the knee's place (var_knee)
    var_launch: float  # one launch's own spread: the seeds' variance where the law meets the target, at B
    var_misspecification: float  # the forward held-out error beyond seed noise
    var_test_sets: float  # proxies and launch on different test sets: their offset (binomial), in the interval
    misspecification_measured: bool = True  # False: no rung held out, the stated UNMEASURED_MISSPECIFICATION_STD
    level: float
    quantile: float  # Student t at `level`, the launch spread's degrees of freedom
    candidates: tuple[LawCandidate, ...] = field(default=())
    dof: float = math.inf  # the interval's degrees of freedom (interval_dof): quantile = t(0.5 + level/2, dof)
    var_choice: float = 0.0  # in var_mean: the forms' disagreement around their weighted mean (law "auto")
    launch_spread: Spread | None = None  # the spread of one launch when not the chosen form's own
    spread_ratio: float = 0.0  # fit.spread_ratio: var_launch is its square × the seeds' (0: off, the seeds' own)
    data_size: DataSizeTerm | None = None  # proxies on fewer examples than N: its shift is in `mean`
    var_data_size: float = 0.0  # its variance (tanplan.laws.data_size), in the interval

    @property
    def law_mean(self) -> float:
        """The law's own mean at the target, before the data-size shift."""
        return self.mean - (self.data_size.shift if self.data_size is not None else 0.0)

    @property
    def law(self) -> Law:
        return self.chosen.law

    @property
    def spread(self) -> Spread:
        """One launch's spread against B' (the knee form's plateau when the forms are averaged)."""
        return self.launch_spread if self.launch_spread is not None else self.chosen.spread

    @property
    def variance(self) -> float:
        """The interval's variance: the law's mean, one launch, misspecification, and the known terms: the data
        size's and the two test sets' offset (a fixed difference the proxies cannot show, but the launch meets)."""
        return (self.var_mean + self.var_launch + self.var_misspecification + self.var_data_size
                + self.var_test_sets)

    @property
    def half_width(self) -> float:
        return self.quantile * math.sqrt(self.variance)

    @property
    def interval(self) -> tuple[float, float]:
        return self.mean - self.half_width, self.mean + self.half_width

    def lower_bound(self, level: float = LOWER_BOUND_LEVEL) -> float:
        """One launch reaches at least this with probability `level`: the same predictive distribution as the
        interval (mean, variance, Student t with the same dof), read one-sided, mean − t(level, dof)·√variance.

            >>> curve = ((16, 0.75), (32, 0.8), (64, 0.85), (128, 0.85))
            >>> p = predict([(b, acc + e) for b, acc in curve for e in (-0.01, 0, 0.01)], 4096)
            >>> p.interval[0] < p.lower_bound() < p.mean
            True
        """
        from scipy import stats

        return self.mean - float(stats.t.ppf(level, self.dof)) * math.sqrt(self.variance)

    def record(self) -> PredictionRecord:
        """The prediction as fit.json and ladder.json record it."""
        chosen = self.chosen
        return PredictionRecord(
            predicted_accuracy=self.mean, prediction_interval=self.interval, level=self.level,
            half_width=self.half_width, quantile=self.quantile, form=self.law.form, window=self.law.window,
            law=self.law.record(), spread=self.spread.record(),
            parts=IntervalParts(mean=self.var_mean, launch=self.var_launch, misspecification=self.var_misspecification,
                                test_sets=self.var_test_sets or None),
            std_parts=IntervalParts(mean=math.sqrt(self.var_mean), launch=math.sqrt(self.var_launch),
                                    misspecification=math.sqrt(self.var_misspecification),
                                    test_sets=math.sqrt(self.var_test_sets) or None),
            test_sets_std=math.sqrt(self.var_test_sets),
            held_out=HeldOutErrors(batch_sizes=chosen.held.batch_sizes, errors=chosen.held.errors,
                                   excess=chosen.held.excess),
            candidates=tuple(c.record() for c in self.candidates), target_batch_size=self.target_batch_size,
            misspecification_stated=None if self.misspecification_measured else UNMEASURED_MISSPECIFICATION_STD,
            dof=self.dof, lower_bound=self.lower_bound(), lower_bound_level=LOWER_BOUND_LEVEL,
            spread_ratio=self.spread_ratio or None,
            data_size=self.data_size.record() if self.data_size is not None else None)


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
            forms: Sequence[str] = ("knee",), test_sizes: tuple[int | None, int | None] = (None, None),
            spread_ratio: float = 0.0, data_size: DataSizeTerm | None = None) -> Prediction:
    """The law of record and its interval for one launch at target_batch_size (see the module docstring).

    rows: (B', accuracy) of every proxy run (two rungs or more, each with ≥ 2 seeds). forms: the candidate
    forms (one form forces it). test_sizes: (the proxies' test-set size, the launch's) when they are
    evaluated on different test sets. spread_ratio (`fit.spread_ratio`, opt-in): 0, the default, reads one
    launch's spread off the seeds as they are; r > 0 takes a launch to scatter r times as much as those
    seeds (its variance r²·v(B)), a prior from other settings' launches (scaled_launch_variance). data_size:
    the measured term of proxies on a smaller public set (tanplan.laws.data_size): its shift joins the mean,
    its variance the interval.

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
    cands = averaged(cands, rungs) if len(cands) > 1 else cands
    chosen = choose(cands)
    parts = np.array([_parts(c, target_batch_size) for c in cands])  # mean, var_mean, var_mis
    w = np.array([c.weight for c in cands]) if len(cands) > 1 else np.ones(1)
    mean = float(w @ parts[:, 0])
    # The forms' mixture, moment-matched: its mean, and each part its weights' average; the forms' own
    # disagreement, Σ w (μ_f − μ)², joins the law's mean at B (which law) so the interval carries the choice.
    var_choice = float(w @ (parts[:, 0] - mean) ** 2)
    var_mean, var_mis = float(w @ parts[:, 1]) + var_choice, float(w @ parts[:, 2])
    # One launch's spread is the seeds' where the rungs meet the target, whatever the form: the knee form's
    # plateau when it is a candidate. The noise form's own window reaches down the rise, whose seeds scatter by
    # where they sit on it, and its fit put one launch's spread at 0.3 points on the large pool (0.46).
    spread = next((c.spread for c in cands if c.law.form == "knee"), chosen.spread)
    var_launch = scaled_launch_variance(spread.at(target_batch_size), spread_ratio)
    measured = bool(chosen.held.errors)
    dof = interval_dof(var_mean, var_launch + var_mis, spread, target_batch_size)
    quantile = float(stats.t.ppf(0.5 + level / 2, dof))
    mean += data_size.shift if data_size is not None else 0.0
    return Prediction(target_batch_size=target_batch_size, chosen=chosen, mean=mean, var_mean=var_mean,
                      var_launch=var_launch, var_misspecification=var_mis,
                      var_test_sets=eval_set_variance(mean, *test_sizes), level=level, quantile=quantile,
                      candidates=tuple(cands), misspecification_measured=measured, dof=dof, var_choice=var_choice,
                      launch_spread=spread, spread_ratio=spread_ratio, data_size=data_size,
                      var_data_size=data_size.variance if data_size is not None else 0.0)


def scaled_launch_variance(seeds_variance: float, spread_ratio: float = 0.0) -> float:
    """One launch's variance from the seeds' variance where the law meets the target: as it is with
    spread_ratio 0 (off, the default: the very same float), else spread_ratio²·it. The ratio is a prior
    (launch std ÷ the spread the rule reads off its proxies, learned on other settings' launches): it
    scales the launch's part of the interval and leaves its degrees of freedom, those of the seeds' variance,
    alone. docs/calibration.md ("An opt-in spread prior") gives the leave-one-setting-out figures and the
    fine-tuning setting where it fails (the launches there scatter more than the proxies, not less).

        >>> scaled_launch_variance(4e-4), round(scaled_launch_variance(4e-4, 0.5), 12)
        (0.0004, 0.0001)
    """
    if not (math.isfinite(spread_ratio) and spread_ratio >= 0):
        raise ValueError(f"spread_ratio = {spread_ratio!r} is not allowed: must be 0 (off) or a ratio > 0")
    return seeds_variance if spread_ratio == 0 else spread_ratio**2 * seeds_variance


def _parts(c: LawCandidate, b: int) -> tuple[float, float, float]:
    """(mean, Var(law's mean) with the knee's place, misspecification) of one candidate at b."""
    mis = c.held.excess if c.held.errors else UNMEASURED_MISSPECIFICATION_STD**2
    return c.law.mean(b) if c.law.form != "knee" else c.mean, c.var_mean + c.var_knee, mis


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
        # a known part no proxy narrows: two test sets' offset (binomial in their sizes)
        named = prediction.var_test_sets >= 0.01 * prediction.variance
        offset = (f", {100 * math.sqrt(prediction.var_test_sets):.1f} points (std) of it the offset between the "
                  "proxies' test set and the launch's" if named else "")
        bigger = ", or evaluate the proxies on a larger test set" if offset else ""
        return (f"the interval for one launch {where} is ± {100 * prediction.half_width:.1f} points, wider than "
                f"fit.max_half_width = {100 * max_half_width:g}{unmeasured}{offset}",
                f"{more}, or {CLIMB}{bigger}, or raise fit.max_half_width")
    return None


__all__ = ["FORMS", "AUTO_FORMS", "LACK_OF_FIT_ALPHA", "MIN_WINDOW", "SPREAD_ALPHA", "Rung", "rungs_of",
           "pooled_variance", "shrunk_variances", "Spread", "fit_spread", "features", "Law", "fit_form", "HeldOut",
           "held_out", "knee_average", "LawCandidate", "out_of_sample_score", "law_weights", "averaged",
           "LAW_PRIOR", "NOISE_RUNGS", "OUT_OF_SAMPLE_RUNGS", "window_of", "candidate", "choose", "Prediction", "forms_of", "eval_set_variance", "interval_dof", "predict", "scaled_launch_variance", "rung_to_add", "UNMEASURED_MISSPECIFICATION_STD",
           "LOWER_BOUND_LEVEL", "verdict"]
