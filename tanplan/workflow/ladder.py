"""The proxy ladder: which proxy runs to train, within a compute budget, so that the batch law predicts one
launch as narrowly as the proxies allow.

At constant η_step and S (TAN, Sander et al. 2023) a proxy (B', σ·B'/B, S) differs from its target only
by the sampling noise of B' gradients, so accuracy rises with B' and levels off; the law and the
interval for one launch are tanplan.laws.batch_law's. `[fit] batch_sizes = "auto"` (the default)
chooses the runs:

1. rungs B' = start, 2·start, 4·start, ... below the target B, each with `fit.ladder_seeds` seeds, until
   the law has MIN_WINDOW rungs;
2. then, while the law's own part of the interval, √(Var(mean at B) + Var(misspecification)), is wider
   than `fit.law_share` × one launch's spread (the part more proxies cannot remove) or its
   misspecification is not measured yet, and the budget lasts: climb one rung (the next one nearer the
   target pins the law where it matters; with fewer seeds, two at least, when the budget left cannot pay
   fit.ladder_seeds of them), or when the next rung no longer fits the budget, add one seed
   where it narrows Var(mean at B) the most per example (`best_seed`: a cheap rung of the plateau, as a
   rule).

The budget is Σ B'·S over the ladder's runs ≤ max(`fit.max_proxy_fraction`·B, `fit.min_proxy_budget`)·S:
a fraction of the target's compute for large targets, and at least the compute of one run at B =
`min_proxy_budget` for small ones (at B = 256 the ladder needs more examples than the launch: its runs
learn on the tuning data, the launch is the one private run).

`next_step` is pure (rungs and prediction in, the next runs out): the pipeline's driver `run_ladder` and
the replay of experiments/calibration.py call it alike.
"""

from __future__ import annotations

import dataclasses
import json
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

import numpy as np
from scipy import stats

from tanplan.config import Config
from tanplan.errors import NotLaunched, UsageError
from tanplan.fileio import write_json_atomic
from tanplan.outcomes.fit import LadderProgress, LadderResult, LadderRung, LadderStep, ProxyRun
from tanplan.reports.ladder import write_ladder_report
from tanplan.laws.batch_law import (MIN_WINDOW, Prediction, Rung, forms_of, predict, rungs_of,
                                        shrunk_variances, verdict)
from tanplan.workflow.proxy_runs import train_runs

LADDER_FILE = "ladder.json"


# ---------------------------------------------------------------------------------------------------
# The rule: pure functions of the rungs trained so far


@dataclass(frozen=True)
class Budget:
    """What the ladder may train: rungs start·2^k below the target, Σ seeds·B' ≤ per_step (examples a step)."""

    start: int
    target_batch_size: int
    seeds: int  # seeds of a new rung
    per_step: float  # Σ B' over the ladder's runs, at the target's S
    law_share: float  # stop once the law's part is ≤ law_share × one launch's spread
    precision: float = 0.0  # the half-width wanted (accuracy); 0: no precision target and no marginal rule
    max_half_width: float = 0.0  # a wider interval is a refusal (accuracy); 0: no such refusal

    @property
    def sizes(self) -> list[int]:
        """The rungs below the target: start, 2·start, ...

            >>> Budget(16, 300, 4, 1024, 0.5).sizes
            [16, 32, 64, 128, 256]
        """
        sizes, b = [], self.start
        while b < self.target_batch_size:
            sizes.append(b)
            b *= 2
        return sizes

    def largest_rung(self) -> int:
        """The largest rung the budget can pay as the ladder climbs (its first MIN_WINDOW rungs at `seeds`
        seeds, later ones at two at least): no proxy of the ladder is larger (0: none).

            >>> Budget(16, 4096, 4, 1024, 0.5).largest_rung()
            128
        """
        left, top = self.per_step, 0
        for i, b in enumerate(self.sizes):
            need = (self.seeds if i < MIN_WINDOW else min(self.seeds, 2)) * b
            if need > left * (1 + 1e-9):
                break
            left, top = left - need, b
        return top

    def first_rungs_cost(self) -> int:
        """Σ seeds·B' of the first MIN_WINDOW rungs (or all rungs, when fewer exist)."""
        return self.seeds * sum(self.sizes[:MIN_WINDOW])


REFERENCE_BATCH = 4096  # fit.compute_budget holds up to this target batch, and falls as √(REFERENCE_BATCH/B) above


def pipeline_budget(cfg: Config) -> float | None:
    """What the sweep and the ladder may spend together, Σ B'·S ÷ S (examples a step), or None without
    fit.compute_budget: compute_budget·min(1, √(REFERENCE_BATCH/B))·B, at least fit.min_proxy_budget, at
    most B (never more than the launch).

    The proxies' cost is nearly the same whatever the target (the sweep at a small fixed B', the rungs up to
    the plateau), so a budget that is a fixed fraction of B·S buys more proxies than the law needs at a large
    target: the fraction falls as the target grows (1/4 at B = 4096, 1/8 at 16384, 1/16 at 65536).

        >>> from tanplan.config import load_config
        >>> [pipeline_budget(load_config(None, [f"train.batch_size={b}", "fit.compute_budget=0.25"])) for b in (1024, 4096, 16384)]
        [1024, 1024.0, 2048.0]
    """
    f, target = cfg.fit, cfg.train.batch_size
    if f.compute_budget <= 0:
        return None
    share = f.compute_budget * min(1.0, (REFERENCE_BATCH / target) ** 0.5)
    return min(target, max(share * target, f.min_proxy_budget))


def budget_of(cfg: Config, spent_before: float = 0.0) -> Budget:
    """cfg's ladder budget: its own, max(fit.max_proxy_fraction·B, fit.min_proxy_budget), within what the
    pipeline's budget leaves after spent_before (the sweep's Σ B' a step)."""
    f, target = cfg.fit, cfg.train.batch_size
    own, shared = max(f.max_proxy_fraction * target, f.min_proxy_budget), pipeline_budget(cfg)
    per_step = own if shared is None else min(own, shared - spent_before)
    return Budget(f.ladder_start, target, f.ladder_seeds, per_step, f.law_share, f.precision / 100,
                  f.max_half_width / 100)


def spent(rungs: Sequence[Rung]) -> int:
    """Σ seeds·B' of these rungs (examples a step)."""
    return sum(r.n * r.batch_size for r in rungs)


def law_is_narrow(prediction: Prediction, law_share: float) -> bool:
    """The law's part of the interval is no wider than law_share × one launch's own spread, and its
    misspecification was measured (the law has held-out errors: for the knee law, a rung past a plateau
    already seen)."""
    measured = bool(prediction.chosen.held.errors)
    return measured and prediction.var_mean + prediction.var_misspecification <= law_share**2 * prediction.var_launch


def next_step(rungs: Sequence[Rung], prediction: Prediction | None, budget: Budget) -> LadderStep | None:
    """The ladder's next runs, or None when it is done (narrow enough, or the budget is spent).

        >>> b = Budget(16, 4096, 4, 1024, 0.5)
        >>> next_step([], None, b)
        LadderStep(batch_size=16, seeds=4, why='a first rung')
        >>> next_step([Rung(16, (0.7,) * 4), Rung(32, (0.8,) * 4)], None, b).batch_size
        64
    """
    rungs = sorted(rungs, key=lambda r: r.batch_size)
    left = budget.per_step - spent(rungs)
    done = {r.batch_size for r in rungs}
    climb = next((b for b in budget.sizes if b not in done), None)
    if len(rungs) < MIN_WINDOW or prediction is None:
        if climb is not None and budget.seeds * climb <= left:
            return LadderStep(batch_size=climb, seeds=budget.seeds,
                              why="a first rung" if not rungs else f"the law needs {MIN_WINDOW} rungs")
        return None
    if law_is_narrow(prediction, budget.law_share) or precise_enough(prediction, budget):
        return None
    seeds = climb_seeds(budget, climb, left)
    if marginal(prediction, budget):  # until then: climb, to see the plateau or narrow a refused interval
        return paying_step(rungs, prediction, budget, climb if seeds else None, left, seeds)
    if seeds:
        return LadderStep(batch_size=climb, seeds=seeds,
                          why="the law's part of the interval is wide: a rung nearer the target")
    seed = best_seed(rungs, prediction, left)
    if seed is None:
        return None
    return LadderStep(batch_size=seed, seeds=1, why="the law's part of the interval is wide and the next rung would "
                      "leave the budget: a seed where it narrows the law's mean the most per example")


def climb_seeds(budget: Budget, climb: int | None, left: float) -> int:
    """Seeds of the next rung: fit.ladder_seeds, or as many as the budget left holds, two at least (a rung's
    scatter needs two); 0 when not even two fit (or there is no rung left below the target).

        >>> b = Budget(16, 4096, 4, 1024, 0.5)
        >>> climb_seeds(b, 128, 600), climb_seeds(b, 128, 300), climb_seeds(b, 128, 200), climb_seeds(b, None, 900)
        (4, 2, 0, 0)
    """
    if climb is None:
        return 0
    seeds = min(budget.seeds, int(left // climb))
    return seeds if seeds >= 2 else 0


def plateau_tested(prediction: Prediction) -> bool:
    """The law's claim about the target was held out: for the knee law, a rung past its knee predicted from
    the rungs below it (a plateau seen); for the other forms, any held-out rung."""
    held, law = prediction.chosen.held, prediction.law
    return any(b > law.knee for b in held.batch_sizes) if law.knee is not None else bool(held.errors)


def marginal(prediction: Prediction, budget: Budget) -> bool:
    """The marginal rule applies: a precision is set, the plateau was held out, and the interval is no wider
    than fit.max_half_width (a wider one would be refused: the budget left is better spent narrowing it)."""
    acceptable = budget.max_half_width <= 0 or prediction.half_width <= budget.max_half_width
    return budget.precision > 0 and plateau_tested(prediction) and acceptable


def precise_enough(prediction: Prediction, budget: Budget) -> bool:
    """The interval for one launch is within the precision wanted, and the law's claim was held out."""
    return budget.precision > 0 and plateau_tested(prediction) and prediction.half_width <= budget.precision


def paying_step(rungs: Sequence[Rung], prediction: Prediction, budget: Budget, climb: int | None,
                left: float, climb_with: int | None = None) -> LadderStep | None:
    """The marginal rule: the next rung (climb, when it fits) if it narrows the interval by a larger fraction
    than its cost's fraction of the target's compute (Δhalf-width/half-width ≥ seeds·B'/B), else the best
    seed if it pays so; None when neither pays.

    A rung that pays comes before a seed that pays more per example: seeds on the cheap rungs narrow the
    law's mean where the law already is, while only a rung nearer the target can show that its plateau was
    placed too early (a knee one rung low biases the plateau by the rise it still has: on the demo's pool
    that was the ladder's worst error, 2 points, with the seeds piled on B' = 32).

    The fractions are both of "the launch": the target's compute pays for one launch whose interval is
    what the ladder buys, so a run worth 1% of the launch must narrow the interval by 1%. The same rung
    is a smaller fraction of a larger target, and the rule stops at the rungs where the interval stops
    narrowing (the launch's own spread and the plateau's seeds), so the ladder's spend, a fraction of
    B·S, falls as B grows."""
    now = prediction.half_width
    options = [(climb, climb_with or budget.seeds)] if climb is not None else []
    seed = best_seed(rungs, prediction, left)
    options += [(seed, 1)] if seed is not None else []
    best = None
    for b, n in options:  # the climb first
        gain = (now - expected_half_width(rungs, prediction, b, n)) / now if now > 0 else 0.0
        cost = n * b / budget.target_batch_size
        if gain >= cost:
            best = (b, n)
            break
    if best is None:
        return None
    b, n = best
    why = ("a rung nearer the target narrows the interval by more than its cost" if n > 1 else
           "a seed narrows the interval by more than its cost, the most per example")
    return LadderStep(batch_size=b, seeds=n, why=why)


def expected_half_width(rungs: Sequence[Rung], prediction: Prediction, batch_size: int, seeds: int) -> float:
    """The interval's half-width expected after `seeds` more runs at batch_size, the law (its form and knee)
    and the spread as they are: Var(law's mean at B) from the design with the new runs (at the spread's
    variance there), and the Student quantile with the new seeds' degrees of freedom when they land where
    the launch's spread is measured and it is pooled. A seed inside the law's window keeps the
    misspecification and the knee's uncertainty as they are; a rung above the window is credited with
    removing both, since it measures the law where the misfit was extrapolated (it may show more misfit instead: the rule cannot know before it
    trains it, and the next prediction holds out the new rung)."""
    law, spread = prediction.law, prediction.spread
    window = [r for r in rungs if r.batch_size in law.window]
    counts = {r.batch_size: float(r.n) for r in window}
    v = dict(zip(counts, shrunk_variances(window)))
    counts[batch_size] = counts.get(batch_size, 0.0) + seeds
    v.setdefault(batch_size, max(spread.at(batch_size), 1e-12))
    xs = np.stack([law.x(b) for b in counts])
    w = np.array([counts[b] / v[b] for b in counts])
    x0 = law.x(prediction.target_batch_size)
    var_mean = float(x0 @ np.linalg.pinv(xs.T @ (w[:, None] * xs)) @ x0)
    quantile = prediction.quantile
    in_regime = law.knee is None or batch_size >= law.knee
    if spread.v1 == 0 and in_regime:
        added = seeds if batch_size in {r.batch_size for r in window} else seeds - 1
        quantile = float(stats.t.ppf(0.5 + prediction.level / 2, max(spread.dof, 1) + added))
    # A rung above the window measures the law where its misfit was extrapolated: the held-out error it
    # would replace is counted as what it can remove, and it shows where the plateau is (the knee's place,
    # var_knee). A seed inside the window is credited with neither.
    above = batch_size > max(law.window)
    # The forms' disagreement (law "auto") is decided where they part, above the window, as the knee's place is.
    misfit = 0.0 if above else prediction.var_misspecification + prediction.chosen.var_knee + prediction.var_choice
    return quantile * math.sqrt(var_mean + prediction.var_launch + misfit)


def best_seed(rungs: Sequence[Rung], prediction: Prediction, left: float) -> int | None:
    """The window's rung where one more seed lowers Var(law's mean at B) the most per example (None when no
    rung fits the budget left). Var(mean at B) = x₀ᵀ(XᵀWX)⁻¹x₀ with W the seed counts over their variances."""
    law = prediction.law
    window = [r for r in rungs if r.batch_size in law.window]
    x0 = law.x(prediction.target_batch_size)
    xs = np.stack([law.x(r.batch_size) for r in window])
    v = shrunk_variances(window)
    counts = np.array([r.n for r in window], dtype=float)

    def var_at_target(n):
        return float(x0 @ np.linalg.pinv(xs.T @ ((n / v)[:, None] * xs)) @ x0)

    now = var_at_target(counts)
    best, best_gain = None, 0.0
    for k, r in enumerate(window):
        if r.batch_size > left:
            continue
        more = counts.copy()
        more[k] += 1
        gain = (now - var_at_target(more)) / r.batch_size
        if best is None or gain > best_gain * (1 + 1e-12):
            best, best_gain = r.batch_size, gain
    return best


@dataclass(frozen=True, kw_only=True)
class LadderOutcome:
    """Where the rule stopped: the rungs, the law's prediction (None with fewer than two rungs), the steps."""

    rungs: tuple[Rung, ...]
    prediction: Prediction | None
    steps: tuple[LadderStep, ...]
    budget: Budget

    @property
    def refusal(self) -> tuple[str, str] | None:
        """(why the launch should not go on, what to change), or None."""
        if self.prediction is None:
            return (f"the ladder trained {len(self.rungs)} rung(s) within its budget; the law needs {MIN_WINDOW}",
                    "raise fit.max_proxy_fraction or fit.min_proxy_budget, or lower fit.ladder_start")
        return verdict(self.prediction, self.budget.max_half_width)


def climb(train: Callable[[int, int], Sequence[float]], budget: Budget, *, test_sizes=(None, None),
          level: float = 0.95, forms: Sequence[str] = ("knee",),
          on_step: Callable[[LadderStep, list[Rung], Prediction | None], None] | None = None,
          spread_ratio: float = 0.0) -> LadderOutcome:
    """Run the rule to its end: train(batch size, seeds) → their accuracies, until next_step says done.

    The pipeline passes the engine; experiments/calibration.py passes draws from a pool of measured runs.
    spread_ratio: fit.spread_ratio (batch_law.predict; 0, the default, off).
    """
    rows: list[tuple[int, float]] = []
    steps: list[LadderStep] = []
    prediction = _predict(rows, budget, test_sizes, level, forms, spread_ratio)
    while (step := next_step(rungs_of(rows), prediction, budget)) is not None:
        steps.append(step)
        rows += [(step.batch_size, float(a)) for a in train(step.batch_size, step.seeds)]
        prediction = _predict(rows, budget, test_sizes, level, forms, spread_ratio)
        if on_step is not None:
            on_step(step, rungs_of(rows), prediction)
    return LadderOutcome(rungs=tuple(rungs_of(rows)), prediction=prediction, steps=tuple(steps), budget=budget)


def _predict(rows, budget: Budget, test_sizes, level, forms, spread_ratio: float = 0.0) -> Prediction | None:
    rungs = [r for r in rungs_of(rows) if r.n >= 2]
    if len(rungs) < min(MIN_WINDOW, len(budget.sizes)) or len(rungs) < 2:
        return None
    return predict([(r.batch_size, a) for r in rungs for a in r.accuracies], budget.target_batch_size, level=level,
                   test_sizes=test_sizes, forms=forms, spread_ratio=spread_ratio)


def check_ladder(cfg: Config, spent_before: float = 0.0, before: str = "") -> Budget:
    """cfg's ladder budget after spent_before (the sweep's Σ B' a step; `before` names it); before any compute:
    UsageError when the ladder's own settings cannot hold the law's first rungs, NotLaunched (exit 4: no
    trustworthy interval can be bought) when what fit.compute_budget leaves cannot."""
    budget = budget_of(cfg, spent_before)
    f, target = cfg.fit, cfg.train.batch_size
    need = budget.first_rungs_cost()
    shared = pipeline_budget(cfg)
    if shared is not None and len(budget.sizes) >= 2 and need > (shared - spent_before) * (1 + 1e-9) and \
            need <= max(f.max_proxy_fraction * target, f.min_proxy_budget) * (1 + 1e-9):
        spent = f" after {before} {spent_before:g}·S" if spent_before else ""
        raise NotLaunched(f"not launched: fit.compute_budget = {f.compute_budget:g} gives the proxies {shared:g}·S "
                          f"examples ({shared / target:.3g} of the target's B·S){spent}; the law's first rungs "
                          f"{budget.sizes[:MIN_WINDOW]} × {f.ladder_seeds} seeds need {need}·S: raise "
                          "fit.compute_budget, or lower the sweep's cost ([sweep] trials, top_k, seeds, or "
                          "--proxy-batch-size), fit.ladder_seeds or fit.ladder_start")
    if len(budget.sizes) < 2:
        raise UsageError(f"fit.ladder_start = {f.ladder_start} is not allowed with train.batch_size = {target}: the "
                         "ladder needs two rungs or more below the target (lower fit.ladder_start, or give "
                         "fit.batch_sizes as a list)")
    if need > budget.per_step * (1 + 1e-9):
        raise UsageError(f"fit.min_proxy_budget = {f.min_proxy_budget:g} is not allowed with train.batch_size = "
                         f"{target}, fit.max_proxy_fraction = {f.max_proxy_fraction:g}, fit.ladder_seeds = "
                         f"{f.ladder_seeds}: the law's first rungs {budget.sizes[:MIN_WINDOW]} need Σ seeds·B' = "
                         f"{need} (raise fit.min_proxy_budget or fit.max_proxy_fraction, or lower fit.ladder_seeds)")
    return budget


# ---------------------------------------------------------------------------------------------------
# The driver: train the rungs through the engine


def run_ladder(cfg: Config, out: Path | None, *, train_fn: Callable | None = None, log=print,
               test_sizes=(None, None), spent_before: float = 0.0) -> LadderResult:
    """Climb cfg's ladder (its own hyper-parameters) until the rule stops; the result (ladder.json).
    spent_before: the sweep's Σ B' a step, already paid out of fit.compute_budget (pipeline_budget).

    out/ladder.json is written after every run: a rerun into the same folder with the same config reuses
    the runs already trained. With out, also ladder.png and ladder.md.
    """
    started = time.perf_counter()
    budget = check_ladder(cfg, spent_before, "the sweep's")
    basis = _basis(cfg)
    reusable = _reusable_rows(out, basis)
    rows: list[ProxyRun] = []
    next_seed: dict[int, int] = {}

    def train(b: int, seeds: int) -> list[float]:
        new = []
        chosen = [next_seed.get(b, 0) + i for i in range(seeds)]
        next_seed[b] = next_seed.get(b, 0) + seeds
        kept = {seed: reusable.pop((b, seed), None) for seed in chosen}
        for seed in (s for s in chosen if kept[s] is not None):
            log(f"  ladder: B'={b} seed={seed} reused from {out / LADDER_FILE}")
        # the rung's seeds not trained yet: at once, one device each (tanplan.workflow.proxy_devices)
        trained = iter(train_runs(cfg, [(b, s) for s in chosen if kept[s] is None], out, train_fn=train_fn,
                                  log=log, label="ladder"))
        for seed in chosen:
            row = kept[seed] or next(trained)
            row = dataclasses.replace(row, source="ladder")
            rows.append(row)
            new.append(row.test_accuracy)
            if out is not None:
                write_json_atomic(out / LADDER_FILE, LadderProgress(basis=basis, points=tuple(rows)).to_dict())
        return new

    def on_step(step: LadderStep, rungs, prediction):
        if prediction is not None:
            log(f"  ladder: {_prediction_line(prediction)}")

    forms = forms_of(cfg.fit.law)
    outcome = climb(train, budget, test_sizes=test_sizes, level=cfg.fit.level, forms=forms, on_step=on_step,
                    spread_ratio=cfg.fit.spread_ratio)
    result = ladder_result(outcome, cfg, rows, basis, time.perf_counter() - started, test_sizes)
    if out is not None:
        write_json_atomic(out / LADDER_FILE, result.to_dict())
        write_ladder_report(result, out)
    return result


def _prediction_line(p: Prediction) -> str:
    low, high = p.interval
    return (f"{p.law.form} law on B' = {', '.join(map(str, p.law.window))}: {p.mean:.4f} [{low:.4f}, {high:.4f}] "
            f"(std of the law's mean {math.sqrt(p.var_mean):.4f}, of one launch {math.sqrt(p.var_launch):.4f}, "
            f"misspecification {math.sqrt(p.var_misspecification):.4f}"
            + (f", the test sets' offset {math.sqrt(p.var_test_sets):.4f}" if p.var_test_sets else "") + ")")


def ladder_result(outcome: LadderOutcome, cfg: Config, rows: Sequence[ProxyRun], basis: dict, wall: float,
                  test_sizes=(None, None)) -> LadderResult:
    """The ladder's record: rungs, steps, the prediction and its parts, the budget, whether to launch."""
    target, steps = cfg.train.batch_size, cfg.train.steps
    refusal = outcome.refusal
    sigma = {r.batch_size: r.sigma for r in rows}
    prediction = outcome.prediction
    return LadderResult(
        found=refusal is None, reason=_reason(outcome), what_to_change=refusal and refusal[1],
        rungs=tuple(LadderRung(batch_size=r.batch_size, accuracies=tuple(r.accuracies), mean=r.mean, std=r.std,
                               seeds=r.n, sigma=sigma.get(r.batch_size)) for r in outcome.rungs),
        steps=outcome.steps,
        prediction=prediction.record() if prediction is not None else None,
        window=tuple(prediction.law.window) if prediction is not None else (),
        target_batch_size=target, steps_per_run=steps, start=cfg.fit.ladder_start,
        seeds=cfg.fit.ladder_seeds, law_share=cfg.fit.law_share, law_setting=cfg.fit.law,
        budget_per_step=outcome.budget.per_step, budget_fraction=outcome.budget.per_step / target,
        max_proxy_fraction=cfg.fit.max_proxy_fraction, min_proxy_budget=cfg.fit.min_proxy_budget,
        spent_fraction=sum(r.batch_size * r.steps for r in rows) / (target * steps),
        test_sizes=tuple(test_sizes), points=tuple(rows), basis=basis, wall_seconds=wall,
    )


def _reason(outcome: LadderOutcome) -> str:
    refusal = outcome.refusal
    if refusal is not None:
        return refusal[0]
    p = outcome.prediction
    why = why_stopped(outcome)
    return (f"{len(outcome.rungs)} rungs, {sum(r.n for r in outcome.rungs)} runs: {why}; the {p.law.form} law is "
            f"fitted on B' = {', '.join(map(str, p.law.window))}")


def why_stopped(outcome: LadderOutcome) -> str:
    """Why the rule stopped (given a prediction): the precision, the law's share, the marginal rule or the budget."""
    p, budget = outcome.prediction, outcome.budget
    if precise_enough(p, budget):
        return f"the interval's half-width is within fit.precision ({100 * budget.precision:g} points)"
    if law_is_narrow(p, budget.law_share):
        return "the law's part of the interval is within fit.law_share of one launch's spread"
    left = budget.per_step - spent(outcome.rungs)
    climb = next((b for b in budget.sizes if b not in {r.batch_size for r in outcome.rungs}), None)
    fits = climb_seeds(budget, climb, left) > 0
    if marginal(p, budget) and (fits or best_seed(outcome.rungs, p, left) is not None):
        return "the next run would narrow the interval by less than its cost (a fraction of the target's compute)"
    return "the budget is spent"


def _basis(cfg: Config) -> dict:
    """What a ladder's runs depend on: every section a run reads, and the ladder's own settings."""
    runs_read = {k: v for k, v in cfg.to_dict().items() if k not in ("sweep", "fit", "experiment")}
    return {**runs_read, "experiment": {"seed": cfg.experiment.seed}}


def _reusable_rows(out: Path | None, basis: dict) -> dict[tuple[int, int], ProxyRun]:
    """{(batch size, seed): run} of the ladder's own runs in an earlier ladder.json with the same basis."""
    path = out / LADDER_FILE if out is not None else None
    if path is None or not path.is_file():
        return {}
    try:
        old = LadderProgress.within(json.loads(path.read_text()))
    except (OSError, ValueError, TypeError, KeyError, AttributeError):  # not a ladder.json this version wrote
        return {}
    if json.loads(json.dumps(basis)) != old.basis:
        return {}
    return {(int(r.batch_size), int(r.seed)): r for r in old.points if r.source == "ladder"}


__all__ = ["LADDER_FILE", "REFERENCE_BATCH", "Budget", "pipeline_budget", "budget_of", "climb_seeds", "spent", "law_is_narrow", "next_step", "best_seed",
           "plateau_tested", "marginal", "precise_enough", "paying_step", "expected_half_width", "why_stopped",
           "LadderOutcome", "climb", "check_ladder", "run_ladder", "ladder_result"]
