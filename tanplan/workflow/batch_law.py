"""The batch law and its prediction for ONE launch: pure functions of (batch size, accuracy) rows.

Proxies (B', σ·B'/B, S) run at the target's per-step signal-to-noise η_step: the DP noise in each step's
averaged gradient is the same as the target's, and what differs is the sampling noise of B' clipped
gradients, whose variance falls as 1/B'. So accuracy against B' rises with B' and levels off, and at the
target B the sampling-noise term is nearly gone (TAN, Sander et al. 2023). Three forms of the law:

- ``noise``: acc = a + c/B'. The target sits at 1/B ≈ 0, next to the largest rungs: predicting it is an
  interpolation, not an extrapolation over many doublings;
- ``flat``: acc = a (the paper's CIFAR-10 finding past the knee);
- ``log-linear``: acc = a + b·ln B' (the paper's ImageNet law; it extrapolates ln(B/B'_max) beyond the data).

`[fit] law = "auto"` chooses between noise and flat. The log-linear form is not among its candidates:
both others level off as B' grows, as the sampling noise they model vanishes, while a line in ln B'
extrapolates every rung's seed noise ln(B/B'_max) further, and on a few held-out rungs it wins by chance
often enough to matter (a quarter of the draws on a pool whose truth is a + c/B', each 6 points off at
the target; docs/calibration.md). It stays available as `law = "log-linear"`.

Below a knee the smallest proxies fall off faster than 1/B', so the law is fitted on a window of rungs
B'_min, ..., B'_max: the widest window on which the noise form passes a lack-of-fit F test (seeds are
replicates: the scatter of the rung means around the law against the scatter of the seeds, at
LACK_OF_FIT_ALPHA). Within the window the form is the one with the smallest forward held-out error:
each rung predicted from the rungs below it, as the law predicts the target from the rungs below it.

The interval is for one launch at B, whose accuracy is the law's mean at B plus the launch's own
run-to-run scatter plus whatever the law gets wrong:

    Var = Var(law's mean at B)            the fitted coefficients' uncertainty (seed noise of the rungs)
        + Var(one launch)                 its own spread: the proxies' pooled seed variance in the window
        + Var(misspecification)           forward held-out error in excess of what seed noise explains, plus
                                          the difference between the proxies' and the launch's test sets

The launch's spread is taken from the proxies because, at constant η_step, each step's DP noise is the
same for the proxy and the target, and past the knee the DP noise dominates the run-to-run scatter
(docs/calibration.md checks it against pools of launches). The prediction is refused (`verdict`) when
it leaves [0, 1] or the interval is unbounded; `next_runs` says what the ladder trains next.

Everything here is pure (numpy/scipy, no training): tanplan.workflow.ladder drives it through the engine
and experiments/calibration.py replays it on pools of measured runs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Iterable, Sequence

import numpy as np

FORMS = ("noise", "flat", "log-linear")
AUTO_FORMS = ("noise", "flat")  # law "auto" chooses among these; log-linear only when asked for (see below)
LACK_OF_FIT_ALPHA = 0.05  # the noise form "fits" a window unless its lack-of-fit test rejects at this level
MIN_WINDOW = 3  # rungs a law is fitted on: two for its coefficients, one more to hold out


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


# ---------------------------------------------------------------------------------------------------
# One form fitted on one window


def _features(form: str, b: float) -> np.ndarray:
    if form == "noise":
        return np.array([1.0, 1.0 / b])
    if form == "log-linear":
        return np.array([1.0, math.log(b)])
    if form == "flat":
        return np.array([1.0])
    raise ValueError(f"unknown form {form!r}; valid: {', '.join(FORMS)}")


@dataclass(frozen=True, kw_only=True)
class Law:
    """One form fitted by least squares on every run of its window (equivalently, on the rung means
    weighted by their seed counts): coef and (XᵀX)⁻¹, so Var(law's mean at b) = s²·x(b)ᵀ(XᵀX)⁻¹x(b)."""

    form: str
    window: tuple[int, ...]
    coef: tuple[float, ...]
    xtx_inv: tuple[tuple[float, ...], ...]
    seed_variance: float  # s²: pooled within-rung variance of the window's seeds
    seed_dof: int
    lack_of_fit_p: float | None  # None when the window has no spare rung (as many rungs as coefficients)

    def mean(self, b: float) -> float:
        return float(_features(self.form, b) @ np.asarray(self.coef))

    def mean_variance(self, b: float) -> float:
        x = _features(self.form, b)
        return float(self.seed_variance * (x @ np.asarray(self.xtx_inv) @ x))

    def to_dict(self) -> dict:
        return {"form": self.form, "window": list(self.window), "coef": list(self.coef),
                "seed_variance": self.seed_variance, "seed_dof": self.seed_dof, "lack_of_fit_p": self.lack_of_fit_p}


def fit_form(rungs: Sequence[Rung], form: str) -> Law:
    """The form fitted on these rungs (a window), with its lack-of-fit test against the seeds' scatter.

        >>> law = fit_form([Rung(b, (0.9 - 1 / b, 0.9 - 1 / b)) for b in (16, 32, 64)], "noise")
        >>> round(law.mean(4096), 4), round(law.coef[1], 4)
        (0.8998, -1.0)
    """
    from scipy import stats

    p = len(_features(form, 1.0))
    if len(rungs) < p:
        raise ValueError(f"the {form} form needs {p} rungs or more")
    x = np.stack([_features(form, r.batch_size) for r in rungs])
    w = np.array([r.n for r in rungs], dtype=float)
    y = np.array([r.mean for r in rungs])
    xtx_inv = np.linalg.pinv(x.T @ (w[:, None] * x))
    coef = xtx_inv @ x.T @ (w * y)
    s2, dof = pooled_variance(rungs)
    lof_p = None
    if len(rungs) > p and dof > 0:
        ss_lof = float((w * (y - x @ coef) ** 2).sum())
        if s2 > 0:
            f_stat = (ss_lof / (len(rungs) - p)) / s2
            lof_p = float(stats.f.sf(f_stat, len(rungs) - p, dof))
        else:  # no seed scatter: the law fits exactly or not at all (up to rounding)
            lof_p = 1.0 if ss_lof <= 1e-20 * max(1.0, float((w * y**2).sum())) else 0.0
    return Law(form=form, window=tuple(r.batch_size for r in rungs), coef=tuple(float(c) for c in coef),
               xtx_inv=tuple(tuple(float(v) for v in row) for row in xtx_inv), seed_variance=s2, seed_dof=dof,
               lack_of_fit_p=lof_p)


@dataclass(frozen=True, kw_only=True)
class HeldOut:
    """Forward held-out errors: each rung's mean predicted by the form fitted on the window's rungs below it
    (the law is used to predict a larger batch than it saw, so it is tested the same way)."""

    form: str
    errors: tuple[float, ...]  # prediction − rung mean, one per held-out rung
    expected: tuple[float, ...]  # each error's variance if the form were exact (seed noise only)

    @property
    def mse(self) -> float:
        return float(np.mean(np.square(self.errors))) if self.errors else math.inf

    @property
    def excess(self) -> float:
        """Held-out squared error beyond what seed noise explains (≥ 0): the misspecification estimate."""
        if not self.errors:
            return 0.0
        return max(0.0, float(np.mean(np.square(self.errors) - np.asarray(self.expected))))


HELD_OUT_FROM = 2  # rungs below the first held-out one: every form predicts the same rungs, the third and up


def held_out(rungs: Sequence[Rung], form: str) -> HeldOut:
    """Predict each rung from the rungs below it in the window (the third rung and up, for every form alike,
    so that their errors compare).

        >>> h = held_out([Rung(b, (0.9 - 1 / b, 0.9 - 1 / b)) for b in (16, 32, 64, 128, 256)], "noise")
        >>> len(h.errors), round(max(map(abs, h.errors)), 9)
        (3, 0.0)
    """
    rungs = sorted(rungs, key=lambda r: r.batch_size)
    s2, _ = pooled_variance(rungs)
    errors, expected = [], []
    for k in range(HELD_OUT_FROM, len(rungs)):
        law = fit_form(rungs[:k], form)
        rung = rungs[k]
        errors.append(law.mean(rung.batch_size) - rung.mean)
        x = _features(form, rung.batch_size)
        expected.append(s2 * (float(x @ np.asarray(law.xtx_inv) @ x) + 1.0 / rung.n))
    return HeldOut(form=form, errors=tuple(errors), expected=tuple(expected))


# ---------------------------------------------------------------------------------------------------
# The law of record: window, form, and the interval for one launch


@dataclass(frozen=True, kw_only=True)
class Prediction:
    """The launch's expected accuracy at the target and a `level` interval for ONE launch, with its parts."""

    target_batch_size: int
    law: Law
    held_out: dict  # form -> HeldOut on the window
    mean: float
    var_mean: float  # the law's mean at B: coefficients' uncertainty
    var_launch: float  # one launch's own spread (the proxies' pooled seed variance)
    var_misspecification: float  # held-out excess + the test sets' difference
    var_test_sets: float  # of which: proxies and launch evaluated on different test sets (binomial)
    level: float
    quantile: float  # Student t at `level`, the seeds' degrees of freedom
    candidates: tuple[dict, ...] = field(default=())  # every window tried: its lack-of-fit p

    @property
    def variance(self) -> float:
        return self.var_mean + self.var_launch + self.var_misspecification

    @property
    def half_width(self) -> float:
        return self.quantile * math.sqrt(self.variance)

    @property
    def interval(self) -> tuple[float, float]:
        return self.mean - self.half_width, self.mean + self.half_width

    @property
    def law_half_width(self) -> float:
        """The half-width without the launch's own spread: what more proxy runs can still narrow."""
        return self.quantile * math.sqrt(self.var_mean + self.var_misspecification)

    def to_dict(self) -> dict:
        low, high = self.interval
        return {
            "predicted_accuracy": self.mean, "prediction_interval": [low, high], "level": self.level,
            "half_width": self.half_width, "quantile": self.quantile, "form": self.law.form,
            "window": list(self.law.window), "law": self.law.to_dict(),
            "parts": {"mean": self.var_mean, "launch": self.var_launch,
                      "misspecification": self.var_misspecification, "test_sets": self.var_test_sets},
            "std_parts": {"mean": math.sqrt(self.var_mean), "launch": math.sqrt(self.var_launch),
                          "misspecification": math.sqrt(self.var_misspecification)},
            "held_out": {f: {"errors": list(h.errors), "mse": h.mse, "excess": h.excess}
                         for f, h in self.held_out.items()},
            "windows": list(self.candidates), "target_batch_size": self.target_batch_size,
        }


def choose_window(rungs: Sequence[Rung], alpha: float = LACK_OF_FIT_ALPHA) -> tuple[list[Rung], list[dict]]:
    """The widest window (rungs B'_min and above, ≥ MIN_WINDOW of them) on which the noise form passes its
    lack-of-fit test; with none, the top MIN_WINDOW rungs (their misfit then shows in the held-out error).
    Also every window tried, with its p-value."""
    rungs = sorted(rungs, key=lambda r: r.batch_size)
    tried = []
    if len(rungs) < MIN_WINDOW:
        return list(rungs), tried
    for start in range(len(rungs) - MIN_WINDOW + 1):
        window = rungs[start:]
        p = fit_form(window, "noise").lack_of_fit_p
        tried.append({"from": window[0].batch_size, "lack_of_fit_p": p})
        if p is None or p >= alpha:
            return list(window), tried
    return list(rungs[-MIN_WINDOW:]), tried


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
            forms: Sequence[str] = AUTO_FORMS, test_sizes: tuple[int | None, int | None] = (None, None)) -> Prediction:
    """The law of record and its interval for one launch at target_batch_size (see the module docstring).

    rows: (B', accuracy) of every proxy run (two rungs or more, MIN_WINDOW for a choice of window and form;
    each with ≥ 2 seeds). forms: the candidates (one form forces it). test_sizes:
    (the proxies' test-set size, the launch's) when they are evaluated on different test sets.

        >>> rows = [(b, 0.9 - 1 / b + e) for b in (16, 32, 64, 128) for e in (-0.01, 0.0, 0.01)]
        >>> p = predict(rows, 4096)
        >>> p.law.form, round(p.mean, 3), p.law.window
        ('noise', 0.9, (16, 32, 64, 128))
    """
    from scipy import stats

    rungs = rungs_of(rows)
    if len(rungs) < 2:
        raise ValueError(f"the law needs two rungs or more; got {len(rungs)}")
    if any(r.n < 2 for r in rungs):
        raise ValueError("every rung needs two seeds or more (their scatter is the launch's spread)")
    window, tried = choose_window(rungs)
    scores = {form: held_out(window, form) for form in forms}
    # the smallest held-out error; without any (two rungs), the form with the fewest coefficients
    form = min(forms, key=lambda f: (scores[f].mse, len(_features(f, 1.0)), FORMS.index(f)))
    law = fit_form(window, form)
    mean = law.mean(target_batch_size)
    var_test = eval_set_variance(mean, *test_sizes)
    quantile = float(stats.t.ppf(0.5 + level / 2, max(law.seed_dof, 1)))
    return Prediction(target_batch_size=target_batch_size, law=law, held_out=scores, mean=mean,
                      var_mean=law.mean_variance(target_batch_size), var_launch=law.seed_variance,
                      var_misspecification=scores[form].excess + var_test, var_test_sets=var_test,
                      level=level, quantile=quantile, candidates=tuple(tried))


def verdict(prediction: Prediction) -> tuple[str, str] | None:
    """None when the prediction can be launched on; else (why not, what to change)."""
    low, high = prediction.interval
    where = f"over B' = {', '.join(map(str, prediction.law.window))} for B = {prediction.target_batch_size}"
    if not (math.isfinite(low) and math.isfinite(high)):
        return f"the interval {where} is unbounded", "train more seeds or more rungs"
    if not 0.0 <= prediction.mean <= 1.0 or low < 0.0 or high > 1.0:
        return (f"the batch law does not hold {where}: its interval for one launch, [{low:.3f}, {high:.3f}], "
                "leaves [0, 1]", "train more seeds, or raise fit.max_proxy_fraction so the ladder climbs further")
    return None


__all__ = ["FORMS", "AUTO_FORMS", "LACK_OF_FIT_ALPHA", "MIN_WINDOW", "Rung", "rungs_of", "pooled_variance", "Law", "fit_form",
           "HeldOut", "held_out", "Prediction", "choose_window", "eval_set_variance", "predict", "verdict"]
