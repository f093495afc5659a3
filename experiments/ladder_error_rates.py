"""Error rates of the proxy ladder's stopping rule (tanplan.workflow.ladder) on synthetic accuracy curves,
and on measured ones (from experiments/ladder_curve.py); the tables of docs/ladder.md.

    .venv/bin/python experiments/ladder_error_rates.py [--draws 4000] \
        [--measured curve.jsonl:B:KNEE[:LAUNCH] ...] [--compare-rules]

Each draw climbs the ladder as `tanplan run` does (plan_rungs, then the rule after every rung, 2 seeds a
rung from B' = 16, target B = 4096 for synthetic curves), with accuracies drawn from a curve plus Gaussian
seed noise (for a measured curve: 2 distinct seeds drawn from its measured ones, and its own target B).
Then, as the pipeline does, the law is fitted on the rungs past the knee (law "auto") and its prediction
compared with the curve's value at the target.

Columns: refused = no knee within the budget, or the law does not hold (the run would not launch);
early = a knee below the curve's true knee (a false knee); within 2 pts = launched runs whose prediction
lands within 2 points of the truth (synthetic: the noiseless value at B; measured: LAUNCH, the full-scale
run with the same hyper-parameters); mean err = mean of prediction − truth over launched runs.

--compare-rules adds the table of alternative stopping rules (docs/ladder.md, "Why this test").
"""

from __future__ import annotations

import argparse
import collections
import json
import math
from pathlib import Path

import numpy as np

from tanplan.workflow.ladder import RISE_ALPHA, Rung, find_knee, plan_rungs
from tanplan.workflow.scaling import fit_log_linear, verdict

TARGET = 4096
SEEDS = 2


def curves(noise: float) -> dict:
    """name: (accuracy(B'), seed noise, true knee or None for a curve that never flattens)."""
    k = lambda b: math.log2(b / 16)  # noqa: E731  doublings above 16
    return {
        "rising (4 pts a doubling, never flat)": (lambda b: 0.55 + 0.04 * k(b), noise, None),
        "flat": (lambda b: 0.82, noise, 16),
        "rising then flat (knee 32, 6 pts)": (lambda b: 0.82 - 0.06 * max(0.0, 1 - k(b)), noise, 32),
        "rising then flat (knee 64, 4 pts)": (lambda b: 0.85 - 0.04 * max(0.0, 2 - k(b)), noise, 64),
        "knee 64, then +0.5 pt a doubling": (lambda b: 0.85 - 0.04 * max(0.0, 2 - k(b)) + 0.005 * max(0.0, k(b) - 2),
                                             noise, 64),
        "noisy (knee 64, seed noise 4 pts)": (lambda b: 0.85 - 0.04 * max(0.0, 2 - k(b)), 2 * noise, 64),
    }


# ---------------------------------------------------------------- stopping rules: rungs -> knee or None

def t_test(alpha: float):
    """tanplan's rule (find_knee) at level alpha."""
    return lambda rungs: find_knee(rungs, alpha).batch_size


def below_tolerance(tol: float):
    """No test: stop when the mean rises by less than tol over the last doubling."""
    return lambda rungs: rungs[-2].batch_size if len(rungs) >= 2 and rungs[-1].mean - rungs[-2].mean < tol else None


def pooled_all(alpha: float):
    """The t-test with the variance pooled over every rung so far (not only the two compared)."""
    from scipy import stats

    def rule(rungs):
        if len(rungs) < 2:
            return None
        a, b = rungs[-2], rungs[-1]
        dof = sum(len(r.accuracies) - 1 for r in rungs)
        var = sum((len(r.accuracies) - 1) * r.std**2 for r in rungs) / dof
        se = math.sqrt(var * (1 / len(a.accuracies) + 1 / len(b.accuracies)))
        rising = (b.mean - a.mean) > stats.t.ppf(1 - alpha, dof) * se if se > 0 else b.mean > a.mean
        return None if rising else a.batch_size
    return rule


def with_bend(alpha: float):
    """The t-test, and after a significant rise also a significant slow-down (second difference) to stop."""
    from scipy import stats

    def rule(rungs):
        knee = find_knee(rungs, alpha)
        if not knee.found or len(rungs) < 3 or not knee.tests[-2].rising:
            return knee.batch_size
        c, a, b = rungs[-3], rungs[-2], rungs[-1]
        dof = sum(len(r.accuracies) - 1 for r in (c, a, b))
        var = sum((len(r.accuracies) - 1) * r.std**2 for r in (c, a, b)) / dof
        se = math.sqrt(var * (1 / len(c.accuracies) + 4 / len(a.accuracies) + 1 / len(b.accuracies)))
        bend = (a.mean - c.mean) - (b.mean - a.mean)
        return a.batch_size if se == 0 or bend > stats.t.ppf(1 - alpha, dof) * se else None
    return rule


RULES = {
    "t-test, α = 0.05": t_test(0.05),
    f"t-test, α = {RISE_ALPHA:g} (tanplan)": t_test(RISE_ALPHA),
    "t-test, α = 0.35": t_test(0.35),
    "rise < 1 point (no test)": below_tolerance(0.01),
    f"α = {RISE_ALPHA:g} and a significant bend": with_bend(RISE_ALPHA),
    f"α = {RISE_ALPHA:g}, variance pooled over all rungs": pooled_all(RISE_ALPHA),
}


# ---------------------------------------------------------------- the simulation

def climb(draw, rng, fraction: float, target: int, rule=t_test(RISE_ALPHA)):
    """One ladder: (knee, rungs) as the driver would reach them."""
    rungs = []
    for b in plan_rungs(16, target, SEEDS, fraction):
        rungs.append(Rung(b, tuple(draw(b, SEEDS, rng))))
        knee = rule(rungs)
        if knee is not None:
            return knee, rungs
    return None, rungs


def predict(rungs, knee: int, target: int):
    """The pipeline's prediction from the rungs past the knee (law "auto"), or None if the law fails."""
    points = [(r.batch_size, a) for r in rungs if r.batch_size >= knee for a in r.accuracies]
    fit = fit_log_linear([b for b, _ in points], [a for _, a in points])
    _, (pred, low, high) = fit.choose(target, 0.95, "auto")
    return None if verdict(pred, low, high) else pred


def rates(draw, truth, true_knee, *, fraction, draws, rng, target=TARGET, rule=t_test(RISE_ALPHA)) -> dict:
    refused = early = close = launched = 0
    errors = []
    for _ in range(draws):
        knee, rungs = climb(draw, rng, fraction, target, rule)
        if knee is None:
            refused += 1
            continue
        early += true_knee is None or knee < true_knee
        pred = predict(rungs, knee, target)
        if pred is None:
            refused += 1
            continue
        launched += 1
        if truth is not None:
            errors.append(pred - truth)
            close += abs(pred - truth) <= 0.02
    return {"refused": refused / draws, "early": early / draws,
            "close": close / launched if launched and truth is not None else float("nan"),
            "mean_err": float(np.mean(errors)) if errors else float("nan")}


def measured(spec: str):
    """PATH:B:KNEE[:LAUNCH] -> (name, draw, target B, knee, launch accuracy or None)."""
    path, target, knee, *launch = spec.split(":")
    by = collections.defaultdict(list)
    with open(path, encoding="utf-8") as f:
        for line in f:
            row = json.loads(line)
            by[int(row["b"])].append(float(row["acc"]))
    data = {b: np.array(v) for b, v in by.items()}
    draw = lambda b, n, rng: rng.choice(data[b], n, replace=False)  # noqa: E731  distinct seeds
    return f"measured {Path(path).stem} (B = {target})", draw, int(target), int(knee), float(launch[0]) if launch else None


def _fmt(x: float, spec: str) -> str:
    return "–" if math.isnan(x) else format(x, spec)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--draws", type=int, default=4000)
    parser.add_argument("--noise", type=float, default=0.02, help="seed noise (std) of the synthetic curves")
    parser.add_argument("--measured", action="append", default=[], metavar="PATH:B:KNEE[:LAUNCH]",
                        help="a ladder_curve.py file, its target B, the knee read off its means, and optionally "
                             "the launch's accuracy with the same hyper-parameters")
    parser.add_argument("--compare-rules", action="store_true")
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    real = [measured(spec) for spec in args.measured]
    print("| curve | budget | refused | early knee | launched within 2 pts | mean error |")
    print("|---|---|---|---|---|---|")
    for fraction in (1 / 16, 1 / 4):
        rows = [(name, lambda b, n, rng, c=c, s=s: c(b) + rng.normal(0, s, n), TARGET, knee,
                 c(TARGET) if knee is not None else None) for name, (c, s, knee) in curves(args.noise).items()]
        for name, draw, target, knee, truth in rows + real:
            r = rates(draw, truth, knee, fraction=fraction, draws=args.draws, rng=rng, target=target)
            print(f"| {name} | 1/{round(1 / fraction)} | {r['refused']:.2f} | {r['early']:.2f} | "
                  f"{_fmt(r['close'], '.2f')} | {_fmt(r['mean_err'], '+.3f')} |")
    if not args.compare_rules:
        return
    curve, noise, knee = curves(args.noise)["rising then flat (knee 64, 4 pts)"]
    cases = [("knee-64 curve, 1/4", lambda b, n, rng: curve(b) + rng.normal(0, noise, n), TARGET, knee, 1 / 4)]
    cases += [(f"{name}, 1/16", draw, target, k, 1 / 16) for name, draw, target, k, _ in real[:1]]
    cases += [(f"{name}, 1/4", draw, target, k, 1 / 4) for name, draw, target, k, _ in real[1:2]]
    print("\n| rule | " + " | ".join(f"{c[0]}: early, refused" for c in cases) + " |")
    print("|---|" + "---|" * len(cases))
    for rule_name, rule in RULES.items():
        cells = []
        for _, draw, target, k, fraction in cases:
            r = rates(draw, None, k, fraction=fraction, draws=args.draws, rng=rng, target=target, rule=rule)
            cells.append(f"{r['early']:.2f}, {r['refused']:.2f}")
        print(f"| {rule_name} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
