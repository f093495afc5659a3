"""The proxy ladder: find the knee of accuracy against the proxy batch size B', within a compute budget.

At constant η_step and S (TAN, Sander et al. 2023), small proxies are held back by sampling noise that
the target does not have: accuracy rises with B' up to a knee, then is nearly flat, and only past the
knee does the batch law extrapolate. `[fit] batch_sizes = "auto"` finds the knee instead of asking
the user for it:

1. rungs B'₀, 2B'₀, 4B'₀, ... (`fit.ladder_start`), each trained with n ≥ 2 seeds (`fit.ladder_seeds`)
   at the target's η_step and S, as long as the ladder's total Σ n·B'·S stays within
   `fit.max_proxy_fraction` of the target's B·S;
2. after each rung k ≥ 1, a one-sided two-sample t-test of "mean accuracy rises from rung k−1 to k",
   with the pooled variance of those two rungs (2n − 2 degrees of freedom), at level α = 0.25
   (RISE_ALPHA): rising when the rise's one-sided 75% lower confidence bound is above 0;
3. the first rise that is not significant ends the ladder: the knee is rung k−1 and the law is fitted
   on the rungs past it (k−1 and k). When the next rung would leave the budget while the last rise is
   still significant, there is no knee within the budget and `tanplan run` does not launch.

Why a test of "still rising" and why α = 0.25: with two or three seeds a rise of a few points per
doubling is rarely significant at 5%, so "not significant at 5%" would stop on a curve that is still
rising (a false knee, which biases the prediction). A large α makes "rising" easy to conclude and so
keeps climbing when in doubt; the price is a rung more than needed now and then, or no knee within a
small budget (a refusal to launch, which is the safe error). The error rates on synthetic and on
measured curves are in docs/ladder.md (experiments/ladder_error_rates.py reproduces them).

The functions on (batch size, accuracies) points are pure (numpy/scipy, no training): `rise_test`,
`find_knee`, `plan_rungs`. `run_ladder` trains the rungs through the engine, one call of
`train_and_evaluate` per seed (tanplan.workflow.fit.train_points).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

from tanplan.config import Config
from tanplan.errors import UsageError
from tanplan.fileio import write_json_atomic

RISE_ALPHA = 0.25  # one-sided level of "accuracy still rises over the last doubling"
LADDER_FILE = "ladder.json"


# ---------------------------------------------------------------------------------------------------
# The stopping rule: pure functions of (batch size, accuracies)


@dataclass(frozen=True)
class Rung:
    """One proxy batch size and the test accuracy of each of its seeds."""

    batch_size: int
    accuracies: tuple[float, ...]

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


@dataclass(frozen=True)
class RiseTest:
    """Does the mean accuracy rise from the rung `lower` to the rung `upper`? (one-sided t-test)"""

    lower: int
    upper: int
    rise: float  # mean(upper) − mean(lower)
    se: float  # its standard error, from the two rungs' pooled variance
    dof: int
    t: float
    p_value: float  # one-sided, H1: rise > 0
    alpha: float

    @property
    def rising(self) -> bool:
        return self.p_value < self.alpha

    @property
    def lower_bound(self) -> float:
        """The rise's one-sided (1 − α) lower confidence bound: rising ⇔ it is above 0."""
        from scipy import stats

        return self.rise - float(stats.t.ppf(1 - self.alpha, self.dof)) * self.se

    def to_dict(self) -> dict:
        return {"lower": self.lower, "upper": self.upper, "rise": self.rise, "se": self.se, "dof": self.dof,
                "t": self.t, "p_value": self.p_value, "alpha": self.alpha, "rising": self.rising}


def rise_test(lower: Rung, upper: Rung, alpha: float = RISE_ALPHA) -> RiseTest:
    """One-sided two-sample t-test of mean(upper) > mean(lower), pooled variance of the two rungs.

    Seeds are independent runs, so the two means are independent; their pooled variance has
    n_lower + n_upper − 2 degrees of freedom (each rung needs two seeds or more). Identical accuracies
    (no spread) make any positive rise significant and any other not.

        >>> test = rise_test(Rung(16, (0.70, 0.72)), Rung(32, (0.80, 0.82)))
        >>> test.rising, round(test.rise, 3)
        (True, 0.1)
    """
    from scipy import stats

    n1, n2 = len(lower.accuracies), len(upper.accuracies)
    if n1 < 2 or n2 < 2:
        raise ValueError("each rung needs two seeds or more to test a rise")
    dof = n1 + n2 - 2
    pooled = ((n1 - 1) * lower.std**2 + (n2 - 1) * upper.std**2) / dof
    se = math.sqrt(pooled * (1 / n1 + 1 / n2))
    rise = upper.mean - lower.mean
    if se > 0:
        t = rise / se
        p = float(stats.t.sf(t, dof))
    else:
        t = math.copysign(math.inf, rise) if rise else 0.0
        p = 0.0 if rise > 0 else 1.0
    return RiseTest(lower.batch_size, upper.batch_size, rise, se, dof, t, p, alpha)


@dataclass(frozen=True)
class Knee:
    """The ladder's decision on its rungs: the knee (None: accuracy still rises at the top) and why."""

    batch_size: int | None
    tests: tuple[RiseTest, ...]

    @property
    def found(self) -> bool:
        return self.batch_size is not None


def find_knee(rungs: Sequence[Rung], alpha: float = RISE_ALPHA) -> Knee:
    """The ladder's decisions replayed on rungs in increasing batch size.

    The rise between consecutive rungs is tested in order; the knee is the lower rung of the first rise
    that is not significant at `alpha` (the ladder stops there, so later rungs are not tested). With
    every rise significant, or fewer than two rungs, there is no knee.

        >>> flat = [Rung(b, (0.80, 0.82)) for b in (16, 32, 64)]
        >>> find_knee(flat).batch_size
        16
    """
    rungs = sorted(rungs, key=lambda r: r.batch_size)
    tests = []
    for lower, upper in zip(rungs, rungs[1:]):
        test = rise_test(lower, upper, alpha)
        tests.append(test)
        if not test.rising:
            return Knee(lower.batch_size, tuple(tests))
    return Knee(None, tuple(tests))


def plan_rungs(start: int, target_batch_size: int, seeds: int, max_fraction: float) -> list[int]:
    """The rungs the budget allows: start, 2·start, ... below the target, Σ seeds·B' ≤ max_fraction·B.

    Proxies run the target's S, so their compute relative to the target's B·S is Σ seeds·B'/B.

        >>> plan_rungs(16, 4096, 2, 1 / 16)  # 2 × (16 + 32 + 64) = 224 ≤ 256
        [16, 32, 64]
    """
    budget = max_fraction * target_batch_size
    rungs, spent, b = [], 0, start
    while b < target_batch_size and spent + seeds * b <= budget * (1 + 1e-9):
        rungs.append(b)
        spent += seeds * b
        b *= 2
    return rungs


def check_ladder(cfg: Config) -> list[int]:
    """The planned rungs of cfg's ladder; UsageError (before any compute) if fewer than two fit."""
    f, target = cfg.fit, cfg.train.batch_size
    rungs = plan_rungs(f.ladder_start, target, f.ladder_seeds, f.max_proxy_fraction)
    if len(rungs) < 2:
        two = f.ladder_start * 3 * f.ladder_seeds / target
        raise UsageError(f"fit.max_proxy_fraction = {f.max_proxy_fraction:g} is not allowed with train.batch_size = "
                         f"{target}, fit.ladder_start = {f.ladder_start}, fit.ladder_seeds = {f.ladder_seeds}: the "
                         f"ladder's first two rungs need ≥ {two:.3g} (or lower fit.ladder_start, or give "
                         f"fit.batch_sizes as a list)")
    return rungs


# ---------------------------------------------------------------------------------------------------
# The driver: train the rungs through the engine


def run_ladder(cfg: Config, out: Path | None, *, train_fn: Callable | None = None, log=print,
               alpha: float = RISE_ALPHA) -> dict:
    """Climb the ladder on cfg (its own hyper-parameters) until the knee or the budget; the result dict.

    out/ladder.json is written after every rung: a rerun into the same folder with the same config
    reuses the rungs already trained (and so reaches the same knee). With out, also ladder.png and
    ladder.md (tanplan.reports.ladder).
    """
    from tanplan.workflow.fit import train_points

    started = time.perf_counter()
    planned = check_ladder(cfg)
    f = cfg.fit
    basis = _basis(cfg)
    done = _reusable_rungs(out, basis)
    rows, rungs, knee = [], [], Knee(None, ())
    for b in planned:
        rung_rows = done.get(b)
        if rung_rows is None:
            rung_rows = train_points(cfg, [b], f.ladder_seeds, out, train_fn=train_fn, log=log, label="ladder")
        else:
            log(f"  ladder: B'={b} reused from {out / LADDER_FILE}")
        rows += rung_rows
        rungs.append(Rung(b, tuple(r["test_accuracy"] for r in rung_rows)))
        knee = find_knee(rungs, alpha)
        if len(rungs) >= 2:
            test = knee.tests[-1]
            decision = "still rising" if test.rising else f"not rising: knee at B'={test.lower}"
            log(f"  ladder: B'={test.lower}→{test.upper}: accuracy {test.rise:+.4f} (± {test.se:.4f}, one-sided "
                f"p = {test.p_value:.3f}): {decision}")
        result = _result(cfg, planned, rungs, rows, knee, alpha, basis, time.perf_counter() - started)
        if out is not None:
            write_json_atomic(out / LADDER_FILE, result)
        if knee.found:
            break
    if out is not None:
        from tanplan.reports.ladder import write_ladder_report

        write_ladder_report(result, out)
    return result


def ladder_fit(cfg: Config, out: Path | None, *, law: str | None = None, train_fn: Callable | None = None,
               log=print) -> dict:
    """`tanplan fit` with batch_sizes "auto": the ladder (out/ladder/), then the law on its rungs past the knee.

    The fit result (tanplan.workflow.fit.fit_rows; fit.json, fit.md) with a "ladder" key; with no knee
    within the budget there is no law and no prediction: only {"ladder": ...}.
    """
    from tanplan.reports.fit import write_fit_report
    from tanplan.workflow.fit import fit_rows

    check_ladder(cfg)
    found = run_ladder(cfg, out / "ladder" if out is not None else None, train_fn=train_fn, log=log)
    summary = {k: found[k] for k in ("knee", "found", "past_knee", "reason", "what_to_change", "spent_fraction")}
    if not found["found"]:
        return {"ladder": summary}
    rows = [p for p in found["points"] if p["batch_size"] in found["past_knee"]]
    result = fit_rows(rows, cfg.train.batch_size, out, level=cfg.fit.level, law=law or cfg.fit.law, past_knee=True)
    if out is not None:
        write_fit_report(result, out)
    return {**result, "ladder": summary}


def past_knee(result: dict) -> list[int]:
    """The batch sizes the law is fitted on: the knee and the rungs above it (with no knee, the top two)."""
    sizes = [r["batch_size"] for r in result["rungs"]]
    if result["knee"] is None:
        return sizes[-2:]
    return [b for b in sizes if b >= result["knee"]]


def _result(cfg: Config, planned, rungs, rows, knee: Knee, alpha, basis, wall) -> dict:
    f, target = cfg.fit, cfg.train.batch_size
    spent = sum(r["batch_size"] * r["steps"] for r in rows) / (target * cfg.train.steps)
    top = rungs[-1].batch_size
    nxt = top * 2
    next_fraction = spent + f.ladder_seeds * nxt / target
    result = {
        "knee": knee.batch_size, "found": knee.found, "alpha": alpha, "seeds": f.ladder_seeds,
        "start": f.ladder_start, "target_batch_size": target, "steps": cfg.train.steps,
        "max_proxy_fraction": f.max_proxy_fraction, "spent_fraction": spent, "planned": list(planned),
        "next_batch_size": nxt, "next_fraction": next_fraction,
        "rungs": [{"batch_size": r.batch_size, "accuracies": list(r.accuracies), "mean": r.mean, "std": r.std,
                   "sigma": next(x["sigma"] for x in rows if x["batch_size"] == r.batch_size)} for r in rungs],
        "tests": [t.to_dict() for t in knee.tests], "points": rows, "basis": basis, "wall_seconds": wall,
    }
    result["past_knee"] = past_knee(result) if len(rungs) >= 2 else []
    result["reason"], result["what_to_change"] = explain(result)
    return result


def explain(result: dict) -> tuple[str, str | None]:
    """(why the ladder stopped where it did, what to change when it found no knee)."""
    tests = result["tests"]
    if result["found"]:
        t = tests[-1]
        return (f"knee at B'={result['knee']}: from B'={t['lower']} to {t['upper']} accuracy moves by {t['rise']:+.4f} "
                f"(one-sided p = {t['p_value']:.2f} ≥ α = {result['alpha']:g}: not a significant rise); "
                f"the law is fitted on B' = {', '.join(map(str, result['past_knee']))}"), None
    if not tests:
        return "the ladder has fewer than two rungs", None
    t = tests[-1]
    why = "the next rung would reach the target batch" if result["next_batch_size"] >= result["target_batch_size"] \
        else (f"the next rung B'={result['next_batch_size']} would bring the ladder to {result['next_fraction']:.3g} "
              f"of the target's compute, above fit.max_proxy_fraction = {result['max_proxy_fraction']:.4g}")
    return (f"no knee within the proxy budget: accuracy still rises from B'={t['lower']} to {t['upper']} "
            f"({t['rise']:+.4f}, one-sided p = {t['p_value']:.3f} < α = {result['alpha']:g}) and {why}",
            f"set fit.max_proxy_fraction ≥ {result['next_fraction']:.3g} to climb one more rung, or give "
            f"fit.batch_sizes past the knee as a list")


def _basis(cfg: Config) -> dict:
    """What a ladder's runs depend on: every section a run reads, and the ladder's own settings."""
    basis = {k: v for k, v in cfg.to_dict().items() if k not in ("sweep", "fit", "experiment")}
    basis["experiment"] = {"seed": cfg.experiment.seed}
    basis["ladder"] = {"start": cfg.fit.ladder_start, "seeds": cfg.fit.ladder_seeds,
                       "max_proxy_fraction": cfg.fit.max_proxy_fraction}
    return basis


def _reusable_rungs(out: Path | None, basis: dict) -> dict[int, list[dict]]:
    """{batch size: rows} of an earlier ladder in out with the same basis (complete rungs only)."""
    import json

    path = out / LADDER_FILE if out is not None else None
    if path is None or not path.is_file():
        return {}
    try:
        old = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    if json.loads(json.dumps(basis)) != old.get("basis"):
        return {}
    by_size: dict[int, list[dict]] = {}
    for row in old.get("points", []):
        by_size.setdefault(int(row["batch_size"]), []).append(row)
    return {b: rows for b, rows in by_size.items() if len(rows) == basis["ladder"]["seeds"]}


__all__ = ["RISE_ALPHA", "Rung", "RiseTest", "rise_test", "Knee", "find_knee", "plan_rungs", "check_ladder",
           "run_ladder", "ladder_fit", "past_knee", "explain"]
