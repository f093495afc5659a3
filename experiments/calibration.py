"""Replay the pipeline's decision code on draws from the calibration pools: how often does the interval for
one launch cover a launch? (docs/calibration.md)

    .venv/bin/python experiments/calibration.py [--draws 400] [--setting demo ...] [--figures docs] [--parts] [--floor]
    .venv/bin/python experiments/calibration.py --draws 100 --before   # the yardstick, before and after issue 48
    .venv/bin/python experiments/calibration.py --draws 100 --seeds --spread-prior   # issue 48 item 6

For each setting, every draw climbs the proxy ladder as `tanplan run` does (tanplan.workflow.ladder.climb
with the defaults of [fit]: the same rule, law, interval and verdict), except that a run is not trained:
its accuracy is drawn from the pool of measured runs at that B' (seeds drawn without replacement within a
draw). The launch is a run drawn from the pool of measured launches. Reported per setting:

- refused: draws whose verdict stops the launch;
- coverage: the probability that the 95% interval of a launched draw covers one launch drawn from the
  pool (averaged over every launch of the pool: the same expectation as one drawn launch, with less
  Monte Carlo noise);
- |pred − launch mean|: median and 90th percentile of the distance to the launch pool's mean;
- half-width: the mean half-width of the intervals, against the launch pool's own 1.96·std;
- compute: the ladder's Σ B'·S ÷ the target's B·S, within what fit.compute_budget leaves after the setting's
  sweep (which comes on top, as in the pipeline);
- the launch spread the law estimated (median std) against the launch pool's std.

The yardstick (issue 48; `yardstick`, printed after the table above): coverage, median |pred − launch mean|,
mean half-width and the interval score's ratio to an oracle that knows the launches' mean and spread, each
with a bootstrap CI over launches and draws, and the law each launched draw chose. The rule of record is
each setting's config with the package's fit.law (no user sets it); --before adds the knee law alone (the
default before issue 48) on the same draws, and a config's own fit.law is shown beside it.

With --seeds, instead of the tables above: each rung's seed spread (with and without EMA) against the
launches', with the F-test (issue 48 item 6: ε 1.0's three B' = 512 seeds). With --spread-prior, instead:
the rule of record and the rule with the opt-in fit.spread_ratio = r on the same draws, r the launches'
std ÷ the rule's estimate of it (median over draws) learned leave-one-setting-out on the four settings of
record (geometric mean of the other three's; the fine-tuning settings get all four's).

With --parts, also the interval's parts for each setting (each part's std, the t quantile, and the width and
coverage the interval would have with the launch's own std known: the floor the law's part alone sets).
With --floor, also the width's floor: the narrowest 95% interval an oracle that knows one launch's std could
read off one rung within the ladder's budget, and whether it covers (width_floor); and what a rule told the
right rung (or two adjacent rungs), but reading one launch's spread off their seeds, could print there
(seed_spread_floor, pooled_pair_floor).

The same is reported for the rule before issue 22 (`previous_rule`: 2 seeds a rung, a t-test for the
knee, a + b·ln B or the flat mean on the two rungs past it), with the budget its config gave it (the
demo config's 1/8 for mnist1d, the default 1/16 for mnist5k, where it exited 2 before training).
Draws share runs (a pool holds 8-36 runs a rung and 14-28 launches), so they are not independent
experiments: the figures say how the rule behaves on these measured curves, not on every curve.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT))

from calibration_pools import POOLS, SETTINGS  # noqa: E402

from tanplan.laws.batch_law import forms_of  # noqa: E402
from tanplan.workflow.ladder import budget_of, climb  # noqa: E402


@dataclass(frozen=True)
class Pool:
    """Measured runs of one setting: accuracies by proxy B', and the launches at the target B."""

    name: str
    target_batch_size: int
    steps: int
    rungs: dict  # B' -> list of accuracies
    launches: list
    test_sizes: tuple = (None, None)
    failed: int = 0  # runs that diverged (no accuracy)

    @property
    def launch_mean(self) -> float:
        return statistics.fmean(self.launches)

    @property
    def launch_std(self) -> float:
        return statistics.stdev(self.launches)

    @property
    def half_width(self) -> float:
        """The launches' own 95% half-width, 1.96·std: the yardstick of every width ratio here."""
        return 1.96 * self.launch_std


def load_pool(path: Path, test_sizes=(None, None)) -> Pool:
    rungs: dict[int, list[float]] = {}
    launches, target, steps, failed = [], 0, 0, 0
    for line in path.read_text().splitlines():
        if not line.strip():
            continue
        row = json.loads(line)
        if row["acc"] is None:
            failed += 1
            continue
        if row["kind"] == "launch":
            launches.append(row["acc"])
            target, steps = row["b"], row["steps"] or steps
        else:
            rungs.setdefault(int(row["b"]), []).append(row["acc"])
            steps = row["steps"] or steps
    return Pool(path.stem, target, steps, dict(sorted(rungs.items())), launches, tuple(test_sizes), failed)


class Draws:
    """train(b, seeds) for the ladder: accuracies drawn from the pool without replacement within one draw."""

    def __init__(self, pool: Pool, rng: np.random.Generator):
        self.order = {b: list(rng.permutation(accs)) for b, accs in pool.rungs.items()}
        self.used = {b: 0 for b in pool.rungs}

    def __call__(self, b: int, seeds: int) -> list[float]:
        if b not in self.order or self.used[b] + seeds > len(self.order[b]):
            raise PoolExhausted(b)
        out = self.order[b][self.used[b]:self.used[b] + seeds]
        self.used[b] += seeds
        return [float(a) for a in out]


class PoolExhausted(Exception):
    pass


@dataclass(frozen=True)
class Outcome:
    """One draw: launched or refused, the prediction and interval, the compute spent, the rungs' seeds."""

    launched: bool
    prediction: float | None
    low: float | None
    high: float | None
    compute: float
    launch_std: float | None = None
    form: str | None = None
    window: tuple = ()
    seeds: tuple = ()
    parts: tuple = ()  # variances (law's mean at B, one launch, misspecification) and the t quantile
    weights: tuple = ()  # ((form, weight), ...) of the averaged law (law "auto"); () for one form
    exhausted: bool = False  # the rule asked for more seeds at a rung than the pool holds: left out of every figure


def new_rule(pool: Pool, rng, *, cfg=None, floor: int | None = None, forms=None, sweep_spent: float = 0.0,
             sets: tuple = ()) -> Outcome:
    """The pipeline's rule (tanplan.workflow.ladder with cfg's [fit], by default [fit]'s defaults: the same
    Budget the pipeline builds, budget_of, after the sweep's Σ B' a step, sweep_spent) on draws from the pool;
    floor, forms and sets ("fit.key=value" overrides) change fit.min_proxy_budget, fit.law and any other
    setting (variants)."""
    from tanplan.config import load_config, parse_override

    target = pool.target_batch_size
    base = cfg if cfg is not None else load_config(None)
    more = list(sets) + ([f"fit.min_proxy_budget={floor}"] if floor else [])
    cfg = base.with_overrides({"train.batch_size": target, **dict(parse_override(o) for o in more)})
    f = cfg.fit
    budget = budget_of(cfg, sweep_spent)
    try:
        outcome = climb(Draws(pool, rng), budget, test_sizes=pool.test_sizes, level=f.level,
                        forms=forms or forms_of(f.law), spread_ratio=f.spread_ratio)
    except PoolExhausted:  # the draw's generator calls are all made in Draws(): the next draw is unaffected
        return Outcome(False, None, None, None, math.nan, exhausted=True)
    compute = sum(r.n * r.batch_size for r in outcome.rungs) / target
    p = outcome.prediction
    seeds_used = tuple((r.batch_size, r.n) for r in outcome.rungs)
    if outcome.refusal is not None:
        return Outcome(False, None, None, None, compute, seeds=seeds_used)
    low, high = p.interval
    weights = tuple((c.law.form, c.weight) for c in p.candidates if c.weight is not None)
    return Outcome(True, p.mean, low, high, compute, math.sqrt(p.var_launch), p.law.form, p.law.window, seeds_used,
                   (p.var_mean, p.var_launch, p.var_misspecification, p.quantile), weights)


# ---------------------------------------------------------------------------------------------------
# The rule before issue 22, for comparison (tanplan 0.x: ladder.find_knee and scaling.fit_log_linear)


def previous_rule(pool: Pool, rng, *, start=16, seeds=2, fraction=0.125, alpha=0.25, level=0.95) -> Outcome:
    """2 seeds a rung from 16, doubled while Σ seeds·B' ≤ fraction·B; stop at the first rise a one-sided
    pooled t-test (α = 0.25) does not find significant; fit a + b·ln B on the two rungs past the knee
    (the mean when the slope's 95% interval contains 0) with a t prediction interval; refuse with no
    knee within the budget or an interval outside [0, 1]."""
    from scipy import stats

    target, draw = pool.target_batch_size, Draws(pool, rng)
    rungs, spent, b, knee = [], 0, start, None
    if seeds * (start + 2 * start) > fraction * target:  # fewer than two rungs fit: it exited 2 before training
        return Outcome(False, None, None, None, 0.0)
    while b < target and spent + seeds * b <= fraction * target * (1 + 1e-9):
        rungs.append((b, draw(b, seeds)))
        spent += seeds * b
        if len(rungs) >= 2:
            (_, lo), (_, hi) = rungs[-2], rungs[-1]
            t = stats.ttest_ind(hi, lo, equal_var=True, alternative="greater")
            if not (t.pvalue < alpha):
                knee = rungs[-2][0]
                break
        b *= 2
    compute = spent / target
    if knee is None:
        return Outcome(False, None, None, None, compute)
    fit = [(bb, a) for bb, accs in rungs[-2:] for a in accs]
    x = np.log([bb for bb, _ in fit])
    y = np.array([a for _, a in fit])
    n, xm = len(y), x.mean()
    sxx = ((x - xm) ** 2).sum()
    slope = ((x - xm) * (y - y.mean())).sum() / sxx
    intercept = y.mean() - slope * xm
    s = math.sqrt(((y - intercept - slope * x) ** 2).sum() / (n - 2))
    t = stats.t.ppf(0.5 + level / 2, n - 2)
    half_slope = t * s / math.sqrt(sxx)
    if slope - half_slope <= 0 <= slope + half_slope:  # flat: the mean and a new run's interval
        mean = y.mean()
        half = stats.t.ppf(0.5 + level / 2, n - 1) * y.std(ddof=1) * math.sqrt(1 + 1 / n)
    else:
        x0 = math.log(target)
        mean = intercept + slope * x0
        half = t * s * math.sqrt(1 + 1 / n + (x0 - xm) ** 2 / sxx)
    low, high = mean - half, mean + half
    if not (0 <= mean <= 1) or low < 0 or high > 1:
        return Outcome(False, None, None, None, compute)
    return Outcome(True, mean, low, high, compute, form="flat" if half_slope >= abs(slope) else "log-linear")


# ---------------------------------------------------------------------------------------------------
# Figures of merit


@dataclass(frozen=True)
class Calibration:
    setting: str
    rule: str
    draws: int
    refused: float
    coverage: float
    median_error: float
    p90_error: float
    mean_half_width: float
    pool_half_width: float
    compute: float
    launch_std_estimate: float | None
    launch_std_pool: float
    launches: int

    def row(self) -> str:
        est = f"{self.launch_std_estimate:.4f}" if self.launch_std_estimate is not None else "—"
        if math.isnan(self.coverage):  # every draw refused: nothing launched to measure
            launched = "— | — | — | —"
        else:
            ratio = self.mean_half_width / self.pool_half_width
            launched = (f"{self.coverage:.3f} | {100 * self.median_error:.2f} | {100 * self.p90_error:.2f} | "
                        f"{100 * self.mean_half_width:.2f} ({ratio:.2f}×)")
        return (f"| {self.setting} | {self.rule} | {self.draws} | {self.refused:.3f} | {launched} | "
                f"{100 * self.pool_half_width:.2f} | {self.compute:.3f} | {est} vs {self.launch_std_pool:.4f} "
                f"({self.launches}) |")


HEADER = ("| setting | rule | draws | refused | coverage | median \\|pred − launch mean\\| (pts) | 90th pct (pts) | "
          "mean half-width (pts, × pool's) | pool's own 95% half-width (pts) | proxy compute | launch std: "
          "estimated vs pool (launches) |\n|---|---|---|---|---|---|---|---|---|---|---|")


def evaluate(pool: Pool, outcomes: list[Outcome], rule: str) -> Calibration:
    exhausted = sum(o.exhausted for o in outcomes)
    outcomes = [o for o in outcomes if not o.exhausted]
    rule += f" ({exhausted} draws past the pool left out)" if exhausted else ""
    launched = [o for o in outcomes if o.launched]
    launches = np.asarray(pool.launches)
    cover = [float(np.mean((launches >= o.low) & (launches <= o.high))) for o in launched]
    errors = [abs(o.prediction - pool.launch_mean) for o in launched]
    halves = [(o.high - o.low) / 2 for o in launched]
    stds = [o.launch_std for o in launched if o.launch_std is not None]
    nan = math.nan
    return Calibration(
        setting=pool.name, rule=rule, draws=len(outcomes), refused=1 - len(launched) / len(outcomes),
        coverage=statistics.fmean(cover) if cover else nan,
        median_error=float(np.median(errors)) if errors else nan,
        p90_error=float(np.percentile(errors, 90)) if errors else nan,
        mean_half_width=statistics.fmean(halves) if halves else nan, pool_half_width=pool.half_width,
        compute=statistics.fmean(o.compute for o in outcomes), launch_std_estimate=float(np.median(stds)) if stds else None,
        launch_std_pool=pool.launch_std, launches=len(pool.launches))


# ---------------------------------------------------------------------------------------------------
# The yardstick (issue 48): what a user judges, each figure with a bootstrap CI


ALPHA = 0.05  # the interval score's level: a 95% interval


def winkler(low, high, y, alpha: float = ALPHA):
    """The interval score of [low, high] at observation(s) y (Winkler 1972; Gneiting and Raftery 2007): its width,
    plus 2/α times the distance by which y falls outside. Proper: its expectation is least for the true
    α/2 and 1 − α/2 quantiles, so it rewards sharpness and punishes misses, where coverage alone does not.

        >>> round(float(winkler(0.8, 0.9, 0.85)), 6), round(float(winkler(0.8, 0.9, 0.95)), 6)
        (0.1, 2.1)
    """
    low, high, y = np.asarray(low), np.asarray(high), np.asarray(y)
    return (high - low) + (2 / alpha) * (np.maximum(low - y, 0) + np.maximum(y - high, 0))


def oracle_score(launches, alpha: float = ALPHA) -> float:
    """The mean interval score over these launches of the oracle that knows their mean and spread: mean ±
    z·std, z the normal quantile (the narrowest proper 95% interval for one launch, if launches are normal)."""
    from scipy import stats

    launches = np.asarray(launches)
    z = float(stats.norm.ppf(1 - alpha / 2))
    m, sd = launches.mean(), launches.std(ddof=1)
    return float(winkler(m - z * sd, m + z * sd, launches, alpha).mean())


@dataclass(frozen=True)
class Yardstick:
    """One rule on one setting: each figure (estimate, 2.5%, 97.5%) over a bootstrap of launches and draws."""

    setting: str
    rule: str
    draws: int
    refused: float
    coverage: tuple
    median_error: tuple  # |prediction − launch mean|, accuracy
    half_width: tuple  # accuracy
    score_ratio: tuple  # mean interval score ÷ the oracle's
    compute: float
    laws: dict  # the law each launched draw chose (the largest weight): draws

    def row(self) -> str:
        if math.isnan(self.coverage[0]):
            return (f"| {self.setting} | {self.rule} | {self.draws} | {self.refused:.3f} | — | — | — | — | "
                    f"{self.compute:.3f} | — |")
        ci = lambda t, k=1, f=".3f": f"{k * t[0]:{f}} [{k * t[1]:{f}}, {k * t[2]:{f}}]"  # noqa: E731
        laws = ", ".join(f"{form} {n}" for form, n in sorted(self.laws.items(), key=lambda kv: -kv[1]))
        return (f"| {self.setting} | {self.rule} | {self.draws} | {self.refused:.3f} | {ci(self.coverage)} | "
                f"{ci(self.median_error, 100, '.2f')} | {ci(self.half_width, 100, '.2f')} | "
                f"{ci(self.score_ratio, 1, '.2f')} | {self.compute:.3f} | {laws} |")


YARDSTICK_HEADER = ("| setting | rule | draws | refused | coverage [95% CI] | median \\|pred − launch mean\\| (pts) [CI] | "
                    "mean half-width (pts) [CI] | interval score ÷ oracle's [CI] | proxy compute | law chosen (launched "
                    "draws) |\n|---|---|---|---|---|---|---|---|---|---|")


def yardstick(pool: Pool, outcomes: list[Outcome], rule: str, boot: int = 1000, seed: int = 0) -> Yardstick:
    """The figures a user judges a prediction by, for the launched draws against the pool's launches:
    coverage, median |prediction − launches' mean|, mean half-width and the interval score's ratio to the
    oracle's (oracle_score). Each with a percentile bootstrap that resamples the launches (their mean, spread
    and the oracle move with them) and the draws (the replay's own Monte Carlo error) together."""
    from collections import Counter

    exhausted = sum(o.exhausted for o in outcomes)
    outcomes = [o for o in outcomes if not o.exhausted]
    rule += f" ({exhausted} draws past the pool left out)" if exhausted else ""
    launched = [o for o in outcomes if o.launched]
    refused, compute = 1 - len(launched) / len(outcomes), statistics.fmean(o.compute for o in outcomes)
    nan3 = (math.nan,) * 3
    if not launched:
        return Yardstick(pool.name, rule, len(outcomes), refused, nan3, nan3, nan3, nan3, compute, {})
    launches = np.asarray(pool.launches)
    low, high = np.array([o.low for o in launched]), np.array([o.high for o in launched])
    pred = np.array([o.prediction for o in launched])
    cover = (launches[None] >= low[:, None]) & (launches[None] <= high[:, None])
    score = winkler(low[:, None], high[:, None], launches[None])
    half = (high - low) / 2

    def figures(d, lidx):
        ls = launches[lidx]
        oracle = oracle_score(ls)  # 0 for a resample of one launch repeated: no ratio then
        return (cover[np.ix_(d, lidx)].mean(), np.median(np.abs(pred[d] - ls.mean())), half[d].mean(),
                score[np.ix_(d, lidx)].mean() / oracle if oracle > 0 else math.nan)

    everything = figures(np.arange(len(launched)), np.arange(len(launches)))
    rng = np.random.default_rng(seed)
    reps = np.array([figures(rng.integers(0, len(launched), len(launched)), rng.integers(0, len(launches), len(launches)))
                     for _ in range(boot)])
    lo, hi = np.nanpercentile(reps, 2.5, axis=0), np.nanpercentile(reps, 97.5, axis=0)
    est = [(float(e), float(a), float(b)) for e, a, b in zip(everything, lo, hi)]
    return Yardstick(pool.name, rule, len(outcomes), refused, *est, compute, dict(Counter(o.form for o in launched)))


PARTS_HEADER = ("| setting | std of the law's mean at B (pts) | one launch's std, estimated (pts) | launch pool's std (pts) | "
                "misspecification std (pts) | t quantile | share of the variance: mean / launch / misspecification | "
                "half-width ratio | ratio with the launch's std known (1.96, pool's std) | coverage with it known | "
                "ratio of the launch's part alone (t · its estimated std) |\n"
                "|---|---|---|---|---|---|---|---|---|---|---|")


def width_ratio(pool: Pool, launched: list[Outcome]) -> float:
    """The launched draws' mean half-width ÷ the launch pool's own 1.96·std."""
    return statistics.fmean((o.high - o.low) / 2 for o in launched) / pool.half_width


def parts_row(pool: Pool, outcomes: list[Outcome]) -> str:
    """Markdown: the interval's parts (means over launched draws of each part's std), what the half-width
    ratio and coverage would be if the launch's own std were known exactly (the pool's, normal quantile): the
    law's own part alone sets that floor; and the other way round, the ratio of t times the launch's std as
    the rule estimates it, alone: the width the rule would print if the law's mean at B were known exactly
    and nothing were misspecified."""
    launched = [o for o in outcomes if o.launched and o.parts]
    if not launched:
        return f"| {pool.name} | — | — | {100 * pool.launch_std:.2f} | — | — | — | — | — | — | — |"
    a = np.array([o.parts for o in launched])
    var = a[:, :3]
    shares = (var / var.sum(axis=1, keepdims=True)).mean(axis=0)
    known = 1.96 * np.sqrt(var[:, 0] + pool.launch_std**2 + var[:, 2])
    launches = np.asarray(pool.launches)
    cover = np.mean([np.mean(np.abs(launches - o.prediction) <= h) for o, h in zip(launched, known)])
    sd = 100 * np.sqrt(var).mean(axis=0)
    ratio = width_ratio(pool, launched)
    return (f"| {pool.name} | {sd[0]:.2f} | {sd[1]:.2f} | {100 * pool.launch_std:.2f} | {sd[2]:.2f} | "
            f"{a[:, 3].mean():.2f} | {shares[0]:.2f} / {shares[1]:.2f} / {shares[2]:.2f} | {ratio:.2f}× | "
            f"{known.mean() / pool.half_width:.2f}× | {cover:.3f} | "
            f"{np.mean(a[:, 3] * np.sqrt(var[:, 1])) / pool.half_width:.2f}× |")


@dataclass(frozen=True)
class FloorRung:
    """The oracle's interval when it reads n seeds at one rung B' (width_floor)."""

    batch_size: int
    seeds: int
    ratio: float  # its half-width ÷ the launches' own 1.96·std
    coverage: float  # the probability that it covers one launch


def paid_rungs(pool: Pool, per_step: float, least: int):
    """(B', n, d, σ_B') for each proxy rung of the pool whose n = ⌊per_step / B'⌋ seeds the budget pays is at
    least `least`: d the launches' mean minus the rung's, σ_B' the rung's seed std (the floors' inputs)."""
    for b, accs in pool.rungs.items():
        n = int(per_step // b)
        if b < pool.target_batch_size and n >= least and len(accs) >= 2:
            yield b, n, pool.launch_mean - statistics.fmean(accs), statistics.stdev(accs)


def width_floor(pool: Pool, per_step: float, level: float = 0.95) -> list[FloorRung]:
    """The narrowest honest interval any ladder within per_step (Σ seeds·B', the ladder's budget) could print,
    rung by rung: an oracle that knows one launch's std σ_L exactly (no spread to estimate, no t quantile)
    and that the launches' mean is the mean of rung B' (no law, no knee, no misspecification to measure)
    reads it off the n = ⌊per_step / B'⌋ seeds it can pay there. Its `level` interval for one launch,
    z·τ around the seeds' mean m̂ with τ² = σ_L² + s²/n (s: the rung's seed std), is √(1 + s²/(n·σ_L²)) times the
    launches' own z·σ_L; L − m̂ ~ N(d, τ²) with d the launches' mean minus the rung's, so it covers one
    launch with probability Φ(z − d/τ) − Φ(−z − d/τ): below `level` where the rung's mean is not the
    launches'. Every figure is the pool's (its rungs' means and stds, its launches'): the floor is as
    precise as the pool's top rungs are.
    """
    from scipy import stats

    z = float(stats.norm.ppf(0.5 + level / 2))
    var_launch = pool.launch_std**2
    out = []
    for b, n, d, sigma_b in paid_rungs(pool, per_step, least=1):
        tau = math.sqrt(var_launch + sigma_b**2 / n)
        cover = float(stats.norm.cdf(z - d / tau) - stats.norm.cdf(-z - d / tau))
        out.append(FloorRung(b, n, tau / math.sqrt(var_launch), cover))
    return out


def seed_spread_floor(pool: Pool, per_step: float, level: float = 0.95, grid: int = 4000) -> list[FloorRung]:
    """What a rule told the right rung but not one launch's std could print, rung by rung: it reads the launch
    off the n = ⌊per_step / B'⌋ seeds the budget pays at B' (n ≥ 2), mean m̂ and std s, as the textbook
    prediction interval for one more draw, m̂ ± t_{n−1}·s·√(1 + 1/n). A rule that reads the spread off one
    rung's seeds pays this on top of finding the rung: the Student quantile of n − 1 degrees of freedom and
    the rung's own spread σ_B' in place of the launches' σ_L (pooled_pair_floor pools two rungs, which buys
    degrees of freedom where they scatter alike). With the rung's seeds
    normal (σ_B', mean the rung's), s and m̂ are independent and L − m̂ ~ N(d, σ_L² + σ_B'²/n), so the mean
    half-width and the coverage are integrals over s's χ² law (on `grid` of its quantiles): exact, not
    resampled, and as precise as the pool's rung std and launches are."""
    from scipy import stats

    z = float(stats.norm.ppf(0.5 + level / 2))
    sigma_l = pool.launch_std
    out = []
    for b, n, d, sigma_b in paid_rungs(pool, per_step, least=2):
        tau = math.sqrt(sigma_l**2 + sigma_b**2 / n)
        chi2 = stats.chi2.ppf((np.arange(grid) + 0.5) / grid, n - 1)
        half = float(stats.t.ppf(0.5 + level / 2, n - 1)) * math.sqrt(1 + 1 / n) * sigma_b * np.sqrt(chi2 / (n - 1))
        cover = stats.norm.cdf((half - d) / tau) - stats.norm.cdf((-half - d) / tau)
        out.append(FloorRung(b, n, float(half.mean()) / (z * sigma_l), float(cover.mean())))
    return out


@dataclass(frozen=True)
class PooledFloor:
    """seed_spread_floor on two adjacent rungs read as one plateau: n1 seeds at B'1, n2 at B'2."""

    seeds: tuple  # ((B'1, n1), (B'2, n2))
    ratio: float
    coverage: float


def pooled_pair_floor(pool: Pool, per_step: float, level: float = 0.95, draws: int = 20000,
                      seed: int = 0) -> list[PooledFloor]:
    """seed_spread_floor where a rule, told that two adjacent rungs are the plateau, pools them: every split
    n1·B'1 + n2·B'2 ≤ per_step with n1, n2 ≥ 1 and n1 + n2 ≥ 4, the launch read as the seeds' mean m̂, the
    spread as their pooled std s (n1 + n2 − 2 degrees of freedom: more than one rung gives, where the two
    scatter alike), m̂ ± t·s·√(1 + 1/(n1 + n2)). The rungs' seeds are normal at their pool's mean and std,
    the launch normal at the launches'; the mean half-width and coverage are Monte Carlo means over `draws`
    (fixed `seed`: the table is reproducible)."""
    from scipy import stats

    z = float(stats.norm.ppf(0.5 + level / 2))
    rng = np.random.default_rng(seed)
    proxies = sorted(b for b, accs in pool.rungs.items() if b < pool.target_batch_size and len(accs) >= 2)
    out = []
    for b1, b2 in zip(proxies, proxies[1:]):
        (m1, s1), (m2, s2) = ((statistics.fmean(pool.rungs[b]), statistics.stdev(pool.rungs[b])) for b in (b1, b2))
        for n2 in range(1, int(per_step // b2) + 1):
            n1 = int((per_step - n2 * b2) // b1)
            if n1 < 1 or n1 + n2 < 4:
                continue
            x1, x2 = rng.normal(m1, s1, (draws, n1)), rng.normal(m2, s2, (draws, n2))
            n = n1 + n2
            spread = np.sqrt((((x1 - x1.mean(1, keepdims=True)) ** 2).sum(1)
                              + ((x2 - x2.mean(1, keepdims=True)) ** 2).sum(1)) / (n - 2))
            half = float(stats.t.ppf(0.5 + level / 2, n - 2)) * math.sqrt(1 + 1 / n) * spread
            launch = rng.normal(pool.launch_mean, pool.launch_std, draws)
            covered = np.abs(launch - (x1.sum(1) + x2.sum(1)) / n) <= half
            out.append(PooledFloor(((b1, n1), (b2, n2)), float(half.mean()) / (z * pool.launch_std),
                                   float(covered.mean())))
    return out


FLOOR_HEADER = ("| setting | the ladder's budget (Σ seeds·B', of B) | the oracle at each rung: B' × seeds, half-width "
                "ratio (coverage) | the floor: the narrowest that covers ≥ 0.90 | knowing the law too | told the "
                "rung, its spread from the seeds: each rung | the narrowest of those that covers ≥ 0.90 | told two "
                "adjacent rungs, their seeds pooled: the narrowest that covers ≥ 0.90 | the rule's ratio |\n"
                "|---|---|---|---|---|---|---|---|---|")


def _each_rung(rungs: list[FloorRung]) -> str:
    return "; ".join(f"{r.batch_size} × {r.seeds}: {r.ratio:.2f}× ({r.coverage:.2f})" for r in rungs)


def _narrowest_covering(rungs: list[FloorRung]) -> str:
    honest = [r for r in rungs if r.coverage >= 0.90]
    best = min(honest, key=lambda r: r.ratio) if honest else None
    return f"{best.ratio:.2f}× (B' = {best.batch_size}, {best.seeds} seeds)" if best else "none covers"


def floor_row(pool: Pool, per_step: float, outcomes: list[Outcome]) -> str:
    """Markdown: width_floor at every rung, and the narrowest ratio whose coverage is ≥ 0.90, beside the rule's."""
    rungs = width_floor(pool, per_step)
    launched = [o for o in outcomes if o.launched]
    ratio = width_ratio(pool, launched) if launched else math.nan
    floor = _narrowest_covering(rungs)
    # An oracle that also knows the law (the launches' mean minus each rung's) corrects the offset: it covers
    # at every rung, and its narrowest ratio is the least any rule could print within this budget.
    exact = min(rungs, key=lambda r: r.ratio) if rungs else None
    law = f"{exact.ratio:.2f}× (B' = {exact.batch_size}, {exact.seeds} seeds)" if exact else "—"
    # A rule that must read one launch's spread off the seeds pays Student's quantile and the rung's spread.
    seeded = seed_spread_floor(pool, per_step)
    return (f"| {pool.name} | {per_step:.0f} ({per_step / pool.target_batch_size:.3f}) | {_each_rung(rungs)} | "
            f"{floor} | {law} | {_each_rung(seeded)} | {_narrowest_covering(seeded)} | {_narrowest_pooled(pool, per_step)} | "
            f"{ratio:.2f}× |")


def _narrowest_pooled(pool: Pool, per_step: float) -> str:
    honest = [r for r in pooled_pair_floor(pool, per_step) if r.coverage >= 0.90]
    if not honest:
        return "none covers"
    best = min(honest, key=lambda r: r.ratio)
    (b1, n1), (b2, n2) = best.seeds
    return f"{best.ratio:.2f}× ({b1} × {n1} + {b2} × {n2}; covers {best.coverage:.2f})"


def replay(pool: Pool, draws: int, seed: int = 0, previous_fraction: float = 0.125,
           **rule_args) -> tuple[list[Outcome], list[Outcome]]:
    """(the pipeline's rule, the previous rule) on `draws` draws each."""
    rng = np.random.default_rng(seed)
    new = [new_rule(pool, rng, **rule_args) for _ in range(draws)]
    old = [previous_rule(pool, rng, fraction=previous_fraction) for _ in range(draws)]
    return new, old


def figure(pool: Pool, new: list[Outcome], old: list[Outcome], path: Path, shown: int = 40) -> None:
    """The pool (every run, rung means ± std), the launches, and `shown` draws' intervals of each rule."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7.5, 4.2))
    for b, accs in pool.rungs.items():
        ax.plot([b] * len(accs), accs, ".", color="0.65", ms=3)
        ax.errorbar([b], [statistics.fmean(accs)], yerr=[statistics.stdev(accs)], fmt="o", color="C0", capsize=3, ms=4)
    target = pool.target_batch_size
    from tanplan.laws.batch_law import predict

    whole = predict([(b, a) for b, accs in pool.rungs.items() for a in accs], target, test_sizes=pool.test_sizes)
    xs = np.geomspace(min(pool.rungs), target, 80)
    ax.plot(xs, [whole.law.mean(x) for x in xs], "--", color="C0", lw=1,
            label=f"the knee law on every run of the pool (knee {whole.law.knee})")
    ax.plot([target] * len(pool.launches), pool.launches, "_", color="C3", ms=12, mew=1.5, label="launches (pool)")
    ax.axhline(pool.launch_mean, color="C3", lw=0.6, ls=":")
    for k, (outs, colour, label, side) in enumerate(((new, "C1", "this rule", 1.35), (old, "C2", "previous rule", 1 / 1.35))):
        launched = [o for o in outs if o.launched][:shown]
        xs = target * side * np.exp(np.linspace(-0.12, 0.12, len(launched))) if launched else []
        for x, o in zip(xs, launched):
            ax.plot([x, x], [o.low, o.high], color=colour, lw=0.7, alpha=0.6)
            ax.plot([x], [o.prediction], ".", color=colour, ms=3)
        ax.plot([], [], color=colour, label=f"{label}: {len(launched)} draws' intervals")
    ax.set_xscale("log", base=2)
    ax.set(xlabel="batch size (proxies B' at the target's η_step and S; launches at B)", ylabel="test accuracy",
           title=f"{pool.name}: pools, and intervals for one launch")
    ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def pools_table(pools: list[Pool]) -> str:
    """Markdown: mean ± std (seeds) of every rung and of the launches, one row per pool."""
    sizes = sorted({b for p in pools for b in p.rungs})
    lines = ["| setting | target B | " + " | ".join(f"B' = {b}" for b in sizes) + " | launches |",
             "|---|---|" + "---|" * (len(sizes) + 1)]
    for p in pools:
        cells = [f"{statistics.fmean(p.rungs[b]):.3f} ± {statistics.stdev(p.rungs[b]):.3f} ({len(p.rungs[b])})"
                 if len(p.rungs.get(b, [])) > 1 else "—" for b in sizes]
        launches = (f"{p.launch_mean:.3f} ± {p.launch_std:.3f} ({len(p.launches)})" if len(p.launches) > 1 else
                    " ".join(f"{a:.3f}" for a in p.launches) + f" ({len(p.launches)})")
        lines.append(f"| {p.name} | {p.target_batch_size or '—'} | " + " | ".join(cells) + f" | {launches} |")
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------------
# The seeds' spread against the launches' (issue 48 item 6: ε 1.0's B' = 512 rung)


def seed_rows(path: Path) -> list[dict]:
    """The pool's rows with an accuracy (diverged runs left out), as calibration_pools.py wrote them."""
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return [r for r in rows if r["acc"] is not None]


SEEDS_HEADER = ("| setting | B' | seeds | accuracies (EMA) | std (pts) | std without EMA (pts) | launches' std (pts) | "
                "F = launches' var ÷ rung's | p (a rung this tight or tighter) | p (this loose or looser) |\n"
                "|---|---|---|---|---|---|---|---|---|---|")


def seeds_rows(path: Path, shown: int = 6) -> list[str]:
    """Markdown, one row per rung: its seeds' std with and without EMA against the launches', and the F-test of
    the launches' variance over the rung's (one-sided each way). Are a rung's seeds independent runs? The
    EMA-free accuracies of the same runs scatter like any rung's when they are; a cached or repeated run
    gives the same accuracy both ways."""
    from scipy import stats

    rows = seed_rows(path)
    launches = [r["acc"] for r in rows if r["kind"] == "launch"]
    sl = statistics.stdev(launches)
    out = []
    for b in sorted({int(r["b"]) for r in rows if r["kind"] == "rung"}):
        runs = [r for r in rows if r["kind"] == "rung" and int(r["b"]) == b]
        if len(runs) < 2:
            continue
        acc = [r["acc"] for r in runs]
        s, s_raw = statistics.stdev(acc), statistics.stdev(r["acc_no_ema"] for r in runs)
        f = sl**2 / s**2 if s > 0 else math.inf
        tight = float(stats.f.sf(f, len(launches) - 1, len(acc) - 1))  # launches this much looser, by chance
        listed = ", ".join(f"{a:.5g}" for a in acc[:shown]) + (" …" if len(acc) > shown else "")
        out.append(f"| {path.stem} | {b} | {len(acc)} | {listed} | {100 * s:.2f} | {100 * s_raw:.2f} | {100 * sl:.2f} | "
                   f"{f:.3g} | {tight:.2g} | {1 - tight:.2g} |")
    return out


# ---------------------------------------------------------------------------------------------------
# An opt-in spread prior (issue 48 item 6): fit.spread_ratio learned leave-one-setting-out


FOUR = ("demo", "eps1_b2048", "mnist5k", "large_b16384")  # the settings of record; fine-tuning is held out of every r


def own_ratio(pool: Pool, outcomes: list[Outcome]) -> float:
    """The launches' std ÷ the median over launched draws of one launch's std as the rule read it off its
    proxies' seeds (the spread_ratio that would have been right for this setting, with hindsight)."""
    stds = [o.launch_std for o in outcomes if o.launched and o.launch_std]
    return pool.launch_std / float(np.median(stds))


def learned_ratio(ratios: dict, left_out: str) -> tuple[float, tuple]:
    """(r, the settings it was learned on): the geometric mean of the four settings' own ratios, `left_out`
    excluded (a fine-tuning setting is never among the four: it gets all four's)."""
    on = tuple(n for n in FOUR if n != left_out and n in ratios)
    return (float(np.exp(np.mean([np.log(ratios[n]) for n in on]))) if on else math.nan), on


PRIOR_HEADER = ("| setting | own ratio (launches' std ÷ the rule's) | r applied (learned on) | rule | coverage [CI] | "
                "median \\|pred − launch mean\\| (pts) [CI] | mean half-width (pts) [CI] | interval score ÷ oracle's "
                "[CI] | half-width change |\n|---|---|---|---|---|---|---|---|---|")


def prior_rows(replays: dict, draws: int, boot: int) -> list[str]:
    """Markdown: for each replayed setting, the rule of record (fit.spread_ratio = 0) and the same draws with
    fit.spread_ratio = r learned leave-one-setting-out on the four settings of record. replays: {name: (pool,
    the config, sweep_spent, the rule of record's outcomes)}."""
    ratios = {n: own_ratio(pool, outs) for n, (pool, _, _, outs) in replays.items()}
    lines = []
    for name, (pool, cfg, spent, outs) in replays.items():
        r, on = learned_ratio(ratios, name)
        if not on:  # --setting chose none of the other settings of record: nothing to learn r from
            lines.append(f"| {name} | {ratios[name]:.2f} | — (replay the four settings of record too) |")
            continue
        rng = np.random.default_rng(0)  # the same draws as the rule of record's (replay's seed)
        prior = [new_rule(pool, rng, cfg=cfg, sweep_spent=spent, sets=(f"fit.spread_ratio={r:.4f}",))
                 for _ in range(draws)]
        rows = (yardstick(pool, outs, "fit.spread_ratio = 0 (off)", boot),
                yardstick(pool, prior, f"fit.spread_ratio = {r:.2f}", boot))
        change = rows[1].half_width[0] / rows[0].half_width[0] - 1
        learned = f"{r:.2f} ({', '.join(on)})"
        for y, delta in zip(rows, ("", f"{100 * change:+.1f}%")):
            cells = y.row().split(" | ")  # | setting | rule | draws | refused | coverage | error | half | score | ...
            lines.append(f"| {name} | {ratios[name]:.2f} | {learned} | {y.rule} | {cells[4]} | {cells[5]} | "
                         f"{cells[6]} | {cells[7]} | {delta} |")
    return lines


def item6(args, names: list[str]) -> None:
    """--seeds and --spread-prior: their tables alone, the second on the rule of record's draws (the package's
    fit.law in each setting's config, within the pipeline's budget after the sweep, as main replays it)."""
    if args.seeds:
        print(SEEDS_HEADER + "\n" + "\n".join(row for n in names for row in seeds_rows(Path(args.pools) / f"{n}.jsonl")))
    if not args.spread_prior:
        return
    replays = {}
    for name in names:
        pool = load_pool(Path(args.pools) / f"{name}.jsonl", SETTINGS[name].test_sizes)
        spent, cfg = sweep_spent(SETTINGS[name]), setting_config(SETTINGS[name])
        cfg = cfg.with_overrides({"fit.law": type(cfg.fit)().law})
        rng = np.random.default_rng(0)  # main's replay seed: the same draws as its rule of record
        replays[name] = (pool, cfg, spent, [new_rule(pool, rng, cfg=cfg, sweep_spent=spent) for _ in range(args.draws)])
    print("\n" + PRIOR_HEADER + "\n" + "\n".join(prior_rows(replays, args.draws, args.boot)))


VARIANTS = {  # the same replay with one setting of [fit] changed
    "law = knee": {"forms": forms_of("knee")},
    "law = noise": {"forms": forms_of("noise")},
    "law = auto": {"forms": forms_of("auto")},
    "budget floor 2048": {"floor": 2048},
}
BUDGET_VARIANTS = {  # fit.compute_budget (sweep + ladder ≤ 1/4 of B·S at B ≤ 4096) on and off; 4 seeds a rung
    "compute_budget 0 (the ladder's own)": {"sets": ("fit.compute_budget=0",)},
    "compute_budget 0.25": {"sets": ("fit.compute_budget=0.25",)},
    "compute_budget 0, 4 seeds": {"sets": ("fit.compute_budget=0", "fit.ladder_seeds=4")},
    "compute_budget 0.25, 4 seeds": {"sets": ("fit.compute_budget=0.25", "fit.ladder_seeds=4")},
}


def setting_config(setting):
    """The setting's config as `tanplan run` reads it: its file and overrides (its [fit] and [sweep] included)."""
    from tanplan.config import load_config

    return load_config(ROOT.parent / setting.config).with_overrides(setting.overrides)


def sweep_spent(setting) -> int:
    """The setting's sweep, Σ B' a step over its runs, as `tanplan run` plans it (its config's [sweep])."""
    from tanplan.workflow.pipeline.checks import sweep_batch_size, sweep_per_step

    cfg = setting_config(setting)
    return sweep_per_step(cfg, sweep_batch_size(cfg, None))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--setting", action="append", choices=sorted(SETTINGS))
    parser.add_argument("--draws", type=int, default=400)
    parser.add_argument("--pools", default=str(POOLS))
    parser.add_argument("--figures", help="write <setting>.png figures into this folder (docs/calibration/)")
    parser.add_argument("--parts", action="store_true", help="also the interval's parts for the rule of record "
                        "(docs/calibration.md, 'What the width is made of')")
    parser.add_argument("--variants", action="store_true", help="also the rule with law knee, noise, auto, and a "
                        "budget floor of 2048 (docs/calibration.md, 'Variants')")
    parser.add_argument("--floor", action="store_true", help="also the width's floor: the narrowest interval an "
                        "oracle within the ladder's budget could print (docs/calibration.md, 'The width's floor')")
    parser.add_argument("--budget", action="store_true", help="also the rule with fit.compute_budget 0 and 0.25, "
                        "with 3 (the default) and 4 seeds a rung (docs/calibration.md, 'Results')")
    parser.add_argument("--before", action="store_true", help="also the rule before issue 48 (fit.law = knee, the "
                        "default until then) on the same draws' seeds (docs/calibration.md, 'The yardstick')")
    parser.add_argument("--boot", type=int, default=1000, help="bootstrap replicates of the yardstick's CIs")
    parser.add_argument("--seeds", action="store_true", help="instead: each rung's seed spread against the "
                        "launches' (with and without EMA, F-test; docs/calibration.md, 'The B' = 512 seeds')")
    parser.add_argument("--spread-prior", action="store_true", help="instead: the rule of record and the same draws "
                        "with fit.spread_ratio learned leave-one-setting-out (docs/calibration.md, 'An opt-in "
                        "spread prior')")
    args = parser.parse_args()
    names = [n for n in (args.setting or list(SETTINGS)) if (Path(args.pools) / f"{n}.jsonl").is_file()]
    print(pools_table([load_pool(Path(args.pools) / f"{n}.jsonl", SETTINGS[n].test_sizes) for n in names]) + "\n")
    if args.seeds or args.spread_prior:  # issue 48 item 6: its tables alone (the rule of record's draws only)
        return item6(args, names)
    print(HEADER)
    parts, floors, sticks = [], [], []
    for name in args.setting or list(SETTINGS):
        path = Path(args.pools) / f"{name}.jsonl"
        if not path.is_file():
            print(f"| {name} | (no pool: experiments/calibration_pools.py --setting {name}) |")
            continue
        pool = load_pool(path, SETTINGS[name].test_sizes)
        if len(pool.launches) < SETTINGS[name].launches:  # a pool being trained: its coverage would say nothing
            print(f"| {name} | (pool incomplete: {len(pool.launches)} of {SETTINGS[name].launches} launches; "
                  f"experiments/calibration_pools.py --setting {name} resumes it) |")
            continue
        spent = sweep_spent(SETTINGS[name])  # the pipeline's ladder gets what fit.compute_budget leaves after it
        cfg = setting_config(SETTINGS[name])  # the rule of record is the setting's config's [fit] ...
        own_law, default_law = cfg.fit.law, type(cfg.fit)().law
        cfg = cfg.with_overrides({"fit.law": default_law})  # ... with the package's law: no user sets fit.law
        new, old = replay(pool, args.draws, previous_fraction=SETTINGS[name].previous_fraction, sweep_spent=spent,
                          cfg=cfg)
        print(evaluate(pool, new, "this rule").row())
        print(evaluate(pool, old, "previous").row())
        sticks.append(yardstick(pool, new, f"this rule (fit.law = {default_law})", args.boot).row())
        # Every draw builds its Draws from the same number of generator calls, whatever the rule: the same seed
        # gives the same draws, so the rows below are paired with the one above.
        others = ([("before: fit.law = knee", "knee")] if args.before else []) + \
            ([(f"the config's fit.law = {own_law}", own_law)] if own_law not in (default_law, "knee") else [])
        for label, law in others:
            rng = np.random.default_rng(0)
            outs = [new_rule(pool, rng, cfg=cfg, sweep_spent=spent, sets=(f"fit.law={law}",)) for _ in range(args.draws)]
            sticks.append(yardstick(pool, outs, label, args.boot).row())
        parts.append(parts_row(pool, new))
        floors.append(floor_row(pool, budget_of(cfg, spent).per_step, new))
        chosen = {**(VARIANTS if args.variants else {}), **(BUDGET_VARIANTS if args.budget else {})}
        if chosen:
            for label, kwargs in chosen.items():
                rng = np.random.default_rng(0)
                try:
                    print(evaluate(pool, [new_rule(pool, rng, cfg=cfg, sweep_spent=spent, **kwargs)
                                          for _ in range(args.draws)], label).row())
                except PoolExhausted as err:  # a variant that climbs past what the pool was sized for
                    print(f"| {name} | {label} | the pool holds too few seeds at B' = {err.args[0]} for this variant |")
        if args.figures:
            Path(args.figures).mkdir(parents=True, exist_ok=True)
            figure(pool, new, old, Path(args.figures) / f"{name}.png")
    print("\n" + YARDSTICK_HEADER + "\n" + "\n".join(sticks))
    if args.parts:
        print("\n" + PARTS_HEADER + "\n" + "\n".join(parts))
    if args.floor:
        print("\n" + FLOOR_HEADER + "\n" + "\n".join(floors))


if __name__ == "__main__":
    main()
