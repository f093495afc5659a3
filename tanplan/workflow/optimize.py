"""`tanplan optimize`: the best (B, S, σ) for a privacy budget and a compute budget, chosen from proxies.

1. The frontier (tanplan.privacy.frontier; alone, without training: tanplan.workflow.frontier_plan): every (B = ⌊C/S⌋, S) on a geometric grid of S around the
   config's own S (S_ref), σ calibrated to privacy.epsilon with the accountant of record (privacy.accountant).
2. A few candidates (those nearest S_ref, [optimize] candidates, spaced by steps_factor) are simulated
   by their constant-η_step proxies (B', σ·B'/B, S), with [optimize] seeds seeds each, through the engine
   (tanplan.workflow.proxy_runs.train_points), on the tuning data ([tuning]: public data of the same task by
   default, tanplan.workflow.tuning). B' = B/savings, one factor for all as in TAN's privacy-parameter
   search (Table 3), but never below min_proxy_batch_size: below the batch law's knee a proxy is held
   back, or helped, by sampling noise its target does not have, by an amount that changes along the
   frontier (mnist1d at ε = 0.7, S = 1200, B = 1024: proxies at B' = 32 reached 79% against 73% at full
   scale; at B' = 64-256, 74-76%). A candidate whose batch is under MIN_SAVINGS × that floor is left off:
   its proxy would cost nearly a launch.
3. Accuracy against ln S is fitted (tanplan.laws.frontier_law.widest_fit) over the widest run of simulated S
   on which the law passes its lack-of-fit and equal-variance tests, and predicted on the whole grid;
   when the best candidate sits at an end of the simulated range, the next frontier candidate beyond it
   is simulated too ([optimize] extend times at most). The recommendation is the best predicted
   candidate inside the law's range (no extrapolation), with its prediction interval, the runner-up,
   the worst-predicted candidate, and whether the data can tell them apart.
4. With launch=True the recommendation is launched through tanplan.workflow.launch.launch, exactly as
   `tanplan run` launches its target.

The result is a tanplan.outcomes.optimize.OptimizeResult; optimize.json, report.md, frontier.png and
candidates.csv in the output folder are written from it (tanplan.reports.optimize).

Each candidate trains with the config's hyper-parameters, rescaled to its S when [optimize] rescale is
on: learning rate × S_ref/S (TAN §4.3: at constant η, lr ∝ 1/S keeps both the summed signal and the
summed noise of the updates), EMA horizon 1/(1 − decay) and warm-up × S/S_ref.

proxy_compute_fraction = Σ B'·S over every proxy run ÷ the recommendation's B·S (one launch).
Privacy: the proxies learn on the [tuning] data. With public data (the default) they release nothing about the
private set and the launch's ε is the guarantee; with private data every proxy run is composed with the launch
into epsilon_total_rdp / epsilon_total_pld (tanplan.workflow.privacy_spent.totals).
"""

from __future__ import annotations

import math
import statistics
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable

from tanplan.config import Config
from tanplan.engine.setup import load_data
from tanplan.errors import TrainingDiverged, UsageError
from tanplan.fileio import write_json_atomic
from tanplan.outcomes.fields import fields_of
from tanplan.outcomes.optimize import Comparison, FrontierRow, LaunchOutcome, LawRange, OptimizeResult, Settings
from tanplan.outcomes.pipeline import PlannedCompute, PlannedStage
from tanplan.privacy.frontier import Candidate, Frontier, anchor_steps, frontier
from tanplan.privacy.run_plan import uses_snip
from tanplan.privacy.plan import check_delta_below_one_over_n, default_delta
from tanplan.reports.optimize import write_optimize_report
from tanplan.workflow import privacy_spent, total_budget, tuning
from tanplan.workflow.best import load_best_overrides
from tanplan.workflow.frontier_plan import SECONDS_PER_HOUR
from tanplan.workflow.members import Members
from tanplan.workflow.proxy_runs import train_points
from tanplan.laws.frontier_law import FrontierLaw, law_fit, widest_fit
from tanplan.workflow.launch import launch
from tanplan.workflow.pipeline.costs import compute_lines, timed

MIN_SAVINGS = 4  # a simulated candidate's proxy costs at most a quarter of its launch
LAW_PARAMETERS = {"quadratic": 3, "linear": 2, "flat": 1, "auto": 1}


# ----------------------------------------------------------------------------------------------------
# Candidates as configs


@dataclass(frozen=True)
class Rescaled:
    """The train.* values of a candidate, moved from the config's S_ref to the candidate's S."""

    learning_rate: float
    ema_decay: float
    warmup_steps: int

    def overrides(self) -> dict:
        return {"train.learning_rate": self.learning_rate, "train.ema_decay": self.ema_decay,
                "train.warmup_steps": self.warmup_steps}


def rescaled(cfg: Config, steps: int, rescale: bool = True) -> Rescaled:
    """The train.* values of `cfg` moved from S_ref = cfg.train.steps to `steps` (see the module doc)."""
    t = cfg.train
    if not rescale:
        return Rescaled(t.learning_rate, t.ema_decay, t.warmup_steps)
    ratio = steps / t.steps
    ema = 0.0 if t.ema_decay == 0 else max(0.0, 1.0 - (1.0 - t.ema_decay) / ratio)
    return Rescaled(t.learning_rate / ratio, ema, min(steps, round(t.warmup_steps * ratio)))


def candidate_overrides(cfg: Config, candidate: Candidate) -> dict:
    """The dotted overrides that turn `cfg` into the full-scale run of `candidate` (σ from privacy.epsilon)."""
    return {"train.batch_size": candidate.batch_size, "train.steps": candidate.steps, "train.proxy_batch_size": 0,
            "privacy.sigma": 0.0, **rescaled(cfg, candidate.steps, cfg.optimize.rescale).overrides()}


def proxy_batch_size(candidate: Candidate, savings: float, floor: int) -> int:
    """B' = B/savings, rounded, but at least `floor` (and at most B)."""
    return min(candidate.batch_size, max(floor, round(candidate.batch_size / savings)))


def check_optimize_config(cfg: Config) -> None:
    """What optimize needs of a config: a private run whose σ is calibrated from privacy.epsilon."""
    if not cfg.privacy.private:
        raise UsageError("privacy.private = false is not allowed: optimize plans private runs at an ε budget")
    if cfg.privacy.sigma > 0:
        raise UsageError(f"privacy.sigma = {cfg.privacy.sigma:g} is not allowed: optimize calibrates σ for every "
                         f"candidate from privacy.epsilon; use --set privacy.sigma=0")
    if cfg.privacy.neighbouring != "add_remove":
        raise UsageError(f"privacy.neighbouring = {cfg.privacy.neighbouring!r} is not allowed: the frontier is "
                         "calibrated under add/remove-one (its replace-one ε is reported by the launch)")
    if uses_snip(cfg):
        raise UsageError("pruning.method = 'dp_snip' is not allowed: the frontier calibrates σ for DP-SGD alone")
    tuning.check(cfg)


def check_run_inputs(compute: int, out: Path | None, launch_best: bool, min_proxy_batch_size: int) -> None:
    """The compute budget, the output folder and --launch, before any data is loaded."""
    min_batch = MIN_SAVINGS * min_proxy_batch_size
    if compute < min_batch:
        raise UsageError(f"compute {compute} is not allowed: it is smaller than one step of the smallest batch "
                         f"{min_batch} ({MIN_SAVINGS} × optimize.min_proxy_batch_size)")
    if out is not None and Path(out).exists() and not Path(out).is_dir():
        raise UsageError(f"--out {out} is not allowed: it is a file, not a folder")
    if launch_best and out is None:
        raise UsageError("--launch needs --out: the launch writes its checkpoint and ledger there")


def simulated_window(candidates: list[Candidate], anchor: int, factor: float, count: int) -> list[Candidate]:
    """The `count` candidates nearest the anchor among those whose S is anchor·factor^k (k whole)."""
    on_grid = []
    for c in candidates:
        k = math.log(c.steps / anchor) / math.log(factor)
        if abs(k - round(k)) < 0.25:
            on_grid.append((abs(round(k)), round(k), c))
    on_grid.sort(key=lambda t: (t[0], t[1]))
    return sorted((c for _, _, c in on_grid[:count]), key=lambda c: c.steps)


def frontier_window(cfg: Config, n: int, compute: int, delta: float) -> tuple[Frontier, list[Candidate]]:
    """The frontier around the config's S and the candidates simulated first; UsageError when they are too
    few for the law."""
    opt = cfg.optimize
    min_batch = min(MIN_SAVINGS * opt.min_proxy_batch_size, n)
    anchor = anchor_steps(n, compute, cfg.train.steps, min_batch)
    front = frontier(n, cfg.privacy.epsilon, compute, delta, min_batch_size=min_batch, factor=opt.steps_factor ** 0.5,
                     anchor=anchor, accountant=cfg.privacy.accountant)
    window = simulated_window(list(front.candidates), anchor, opt.steps_factor, opt.candidates)
    if len(window) < 3:
        raise UsageError(f"only {len(window)} frontier candidates have a batch of at least {min_batch} "
                         f"({MIN_SAVINGS} × optimize.min_proxy_batch_size) at compute {compute} and N = {n}: raise "
                         f"the compute, or lower optimize.min_proxy_batch_size or optimize.steps_factor")
    law_needs = LAW_PARAMETERS[opt.law]
    if len(window) * opt.seeds < law_needs + 2:
        raise UsageError(f"optimize.seeds = {opt.seeds} is not allowed with {len(window)} candidates: the "
                         f"{opt.law} law needs {law_needs + 2} runs or more")
    return front, window


def planned_compute(cfg: Config, front: Frontier, window: list[Candidate], compute: int) -> PlannedCompute:
    """optimize's compute before it is spent, as fractions of one launch (C): the window's candidates, each by
    [optimize] seeds proxies at B' (exactly); up to [optimize] extend candidates beyond it (at most: the
    dearest ones outside the window); the recommendation's launch, C (whether or not --launch)."""
    opt = cfg.optimize

    def cost(c: Candidate) -> int:
        return opt.seeds * proxy_batch_size(c, opt.savings, opt.min_proxy_batch_size) * c.steps

    simulated = {c.steps for c in window}
    beyond = sorted((cost(c) for c in front.candidates if c.steps not in simulated), reverse=True)[:opt.extend]
    stages = [PlannedStage(stage="candidates", runs=len(window) * opt.seeds, example_gradients=sum(map(cost, window)),
                           fraction=sum(map(cost, window)) / compute, bound="exactly")]
    if beyond:
        stages.append(PlannedStage(stage="extension", runs=len(beyond) * opt.seeds, example_gradients=sum(beyond),
                                   fraction=sum(beyond) / compute, bound="at most"))
    stages.append(PlannedStage(stage="launch", runs=1, example_gradients=compute, fraction=1.0, bound="at most"))
    return PlannedCompute(target_example_gradients=compute, stages=tuple(stages),
                          proxy_fraction=sum(st.fraction for st in stages[:-1]))


# ----------------------------------------------------------------------------------------------------
# The stage


def optimize_entry(cfg: Config, out, *, best, compute: int | None, device_hours: float | None,
                   samples_per_second: float | None, launch: bool, log, progress: bool, source: str) -> OptimizeResult:
    """The stage of tanplan.api.optimize: best.json's configuration, the compute budget (C, or device hours
    × 3600 × samples per second) checked, then optimize()."""
    cfg = cfg.with_overrides(load_best_overrides(best))
    if device_hours is not None:
        if compute is not None:
            raise UsageError("give one compute budget: --compute or --device-hours")
        if samples_per_second is None:
            raise UsageError("--device-hours needs --samples-per-second (the DP samples/s of `tanplan bench`)")
        compute = int(device_hours * SECONDS_PER_HOUR * samples_per_second)
    elif samples_per_second is not None:
        raise UsageError("--samples-per-second is not allowed without --device-hours")
    return optimize(Members.of(cfg), Path(out) if out is not None else None, compute=compute, launch_best=launch,
                    log=log, progress=progress, source=source)


def optimize(cfg: Config | Members, out: Path | None, *, compute: int | None = None, launch_best: bool = False,
             train_fn: Callable | None = None, log=print, progress: bool = True, source: str = "") -> OptimizeResult:
    """Simulate frontier candidates by proxies, fit accuracy against ln S, recommend one (B, S, σ).

    cfg: the stage's runs (Members, built at its entry: each candidate is a group of them), or their Config.
    compute: C in examples (default [optimize] compute, else train.batch_size × train.steps). source:
    the --config/--set text of the command, to write each candidate's launch command in the report.
    Every input is checked before the data is loaded, and the frontier before any proxy trains.
    """
    started = time.perf_counter()
    runs = Members.of(cfg)
    cfg = runs.base
    opt = cfg.optimize
    check_optimize_config(cfg)
    compute = compute or opt.compute or cfg.train.batch_size * cfg.train.steps
    check_run_inputs(compute, out, launch_best, opt.min_proxy_batch_size)
    private = load_data(cfg.data)
    n = private.num_train
    if cfg.privacy.delta:
        check_delta_below_one_over_n(cfg.privacy.delta, n, cfg.privacy.allow_large_delta)
    delta = cfg.privacy.delta or default_delta(n)
    front, window = frontier_window(cfg, n, compute, delta)
    planned = None
    if cfg.tuning.data == "private":  # every proxy trains on the private set: bound the total before any trains
        planned = total_budget.check(total_budget.optimize_plan(
            cfg, n, list(front.candidates), window, opt.seeds,
            opt.extend, lambda c: proxy_batch_size(c, opt.savings, opt.min_proxy_batch_size), launch_best),
            cfg)
    for line in compute_lines(timed(planned_compute(cfg, front, window, compute), cfg, out, measure=False)):
        log(line)  # every input checked: the cost, before it is spent
    log(f"frontier: N = {n}, ε = {cfg.privacy.epsilon:g}, δ = {delta:.3g}, C = {compute:,} examples: "
        f"{len(front.candidates)} candidates; simulating {len(window)} × {opt.seeds} seeds at B' = "
        f"max(B/{opt.savings:g}, {opt.min_proxy_batch_size})")
    sim = Simulation(runs, private, out, train_fn, log)
    for c in window:
        sim.simulate(c)
    for _ in range(opt.extend):  # the best at an end of the simulated range: look one step beyond it
        beyond = sim.beyond(front.candidates, *sim.law())
        if beyond is None:
            break
        log(f"  the best candidate is at an end of the simulated range: simulating S = {beyond.steps} too")
        sim.simulate(beyond)
    law, span = sim.law()
    rows = sim.rows(front.candidates, law, span)
    best, choice = choose(rows, law, opt.level, span, (front.candidates[0].steps, front.candidates[-1].steps))
    proxy_examples = sum(p["batch_size"] * p["steps"] for p in sim.points)
    elapsed = time.perf_counter() - started
    result = OptimizeResult(
        experiment=cfg.experiment.name, dataset_size=n, epsilon=cfg.privacy.epsilon, delta=delta, compute=compute,
        accountant=cfg.privacy.accountant, reference_steps=cfg.train.steps, settings=settings_of(cfg),
        frontier=rows, dropped=front.dropped, points=tuple(sim.points), source=source, **choice,
        law=law_fit(law, opt.level, span), proxy_examples=proxy_examples, proxy_runs=len(sim.points),
        proxy_compute_fraction=proxy_examples / best.compute,
        tuning=sim.tunings[0].record() if sim.tunings else None, **fields_of(planned),
        launch=None, wall_seconds=elapsed, simulation_seconds=elapsed)
    if out is not None:
        # What the proxies cost the data they trained on, and the total ε on the private set: the launch's
        # alone with public tuning data, composed with every proxy's with private tuning data.
        result = replace(result, privacy_spent=privacy_spent.report(Path(out) / "runs", out,
                                                                    "proxy runs of the frontier simulation"),
                         **fields_of(privacy_spent.totals(None, [Path(out) / "runs"], sim.tunings[0])))
        _write(result, Path(out))
    if launch_best:
        launched = launch_recommendation(runs, result, Path(out), train_fn=train_fn, progress=progress)
        result = replace(result, launch=launched, wall_seconds=time.perf_counter() - started,
                         **fields_of(privacy_spent.totals(Path(out) / "launch", [Path(out) / "runs"], sim.tunings[0])))
        _write(result, Path(out))
    return result


def settings_of(cfg: Config) -> Settings:
    opt = cfg.optimize
    return Settings(candidates=opt.candidates, seeds=opt.seeds, extend=opt.extend, savings=opt.savings,
                    min_proxy_batch_size=opt.min_proxy_batch_size, steps_factor=opt.steps_factor,
                    rescale=opt.rescale, law=opt.law, level=opt.level)


class Simulation:
    """The frontier candidates simulated so far by their proxies: each trained candidate's accuracies (in the
    order they trained), the candidates whose proxies diverged, one point per proxy run, and the [tuning]
    data every candidate's proxies learned on."""

    def __init__(self, runs: Members, private, out: Path | None, train_fn: Callable | None, log):
        self.runs_of, self.cfg = runs, runs.base  # each candidate's full-scale run is a group of these runs
        self.private, self.out, self.train_fn, self.log = private, out, train_fn, log
        self.simulated: set[int] = set()
        self.runs: dict[int, list[float]] = {}  # S → its proxies' test accuracies
        self.diverged: dict[int, str] = {}  # S → why
        self.points: list[dict] = []
        self.tunings: list = []
        self.loaded: dict = {}  # the tuning data, loaded (and checked against the private set) once

    def simulate(self, c: Candidate) -> None:
        """Train the candidate's constant-η_step proxies, [optimize] seeds of them."""
        cfg, opt, n = self.cfg, self.cfg.optimize, self.private.num_train
        self.simulated.add(c.steps)
        member = self.runs_of.group({**candidate_overrides(cfg, c), "train.eval_every": c.steps})
        run_cfg, planned = member.base, member.job(n).plan  # the engine calibrates σ itself: it must be the frontier's
        if not math.isclose(planned.sigma, c.sigma, rel_tol=1e-9):
            raise RuntimeError(f"the engine's σ {planned.sigma} differs from the frontier's {c.sigma} at S={c.steps}")
        # The candidate's proxies learn on the tuning data ([tuning]: public by default) at its η_step.
        b = proxy_batch_size(c, opt.savings, opt.min_proxy_batch_size)
        tune = tuning.resolve(run_cfg, planned.plan, private=None if self.loaded else self.private,
                              load=lambda c_: self.loaded.setdefault(repr(c_.data), load_data(c_.data)), proxy_batch=b)
        self.tunings.append(tune)
        try:
            runs = train_points(tune.proxy_cfg, [b],
                                opt.seeds, self.out, train_fn=self.train_fn, log=self.log, label=f"S{c.steps}")
        except TrainingDiverged as err:  # a candidate whose (rescaled) learning rate diverges is no option
            self.diverged[c.steps] = str(err)
            self.log(f"  S{c.steps}: diverged, left out of the law: {err}")
            return
        self.points += [{**r.to_dict(), "candidate_steps": c.steps, "candidate_batch_size": c.batch_size} for r in runs]
        self.runs[c.steps] = [r.test_accuracy for r in runs]

    def law(self) -> tuple[FrontierLaw, LawRange]:
        """The law over the widest run of simulated S that passes its tests (frontier_law.widest_fit)."""
        if len(self.runs) < 3:
            raise TrainingDiverged(f"only {len(self.runs)} candidates trained without diverging "
                                   f"(S = {', '.join(str(s) for s in sorted(self.diverged))} diverged): "
                                   f"lower train.learning_rate or turn optimize.rescale off")
        return widest_fit(self.runs, self.cfg.optimize.law, self.cfg.optimize.level)

    def beyond(self, candidates, law: FrontierLaw, span: LawRange) -> Candidate | None:
        """The next frontier candidate beyond the simulated end where the law's best candidate sits, or None
        (the best is inside, that end was cut by the lack-of-fit test, or nothing lies beyond)."""
        simulated = sorted(self.simulated)
        inside = [c.steps for c in candidates if span.low <= c.steps <= span.high and c.steps not in self.diverged]
        best = max(inside, key=lambda s: (round(law.mean(s), 12), -s))
        if best == span.low == simulated[0]:
            options = [c for c in candidates if c.steps < best]
            return max(options, key=lambda c: c.steps) if options else None
        if best == span.high == simulated[-1]:
            options = [c for c in candidates if c.steps > best]
            return min(options, key=lambda c: c.steps) if options else None
        return None

    def rows(self, candidates, law: FrontierLaw, span: LawRange) -> tuple[FrontierRow, ...]:
        """Every candidate with its rescaled hyper-parameters, its proxies' runs and the law's prediction;
        eligible for the recommendation inside the law's range only."""
        opt = self.cfg.optimize
        rows = []
        for c in sorted(candidates, key=lambda c: c.steps):
            hyper = rescaled(self.cfg, c.steps, opt.rescale)
            b_proxy = proxy_batch_size(c, opt.savings, opt.min_proxy_batch_size)
            runs, diverged = tuple(self.runs.get(c.steps, ())), self.diverged.get(c.steps)
            simulated = c.steps in self.simulated
            mean, low, high = law.predict(c.steps, opt.level)
            inside = span.low <= c.steps <= span.high
            rows.append(FrontierRow(
                **c.to_dict(), learning_rate=hyper.learning_rate, ema_decay=hyper.ema_decay,
                warmup_steps=hyper.warmup_steps, proxy_batch_size=b_proxy, proxy_sigma=c.sigma * b_proxy / c.batch_size,
                simulated=simulated, diverged=diverged, overrides=candidate_overrides(self.cfg, c), runs=runs,
                mean_accuracy=statistics.fmean(runs) if runs else None,
                std_accuracy=(statistics.stdev(runs) if len(runs) > 1 else 0.0) if runs else None,
                predicted_accuracy=mean, prediction_interval=(low, high), eligible=inside and not diverged,
                outside_law=simulated and not diverged and not inside))
        return tuple(rows)


def _edge_note(steps: int, span: LawRange, ends: tuple[int, int]) -> str:
    """What lies beyond a recommendation at an end of the law's range ("" inside it)."""
    for end, side, beyond in ((span.low, "largest batch (B ≤ N)", [s for s in span.excluded if s < steps]),
                              (span.high, "smallest batch (4 × optimize.min_proxy_batch_size)",
                               [s for s in span.excluded if s > steps])):
        if steps != end:
            continue
        if steps in ends:
            return f"; it is the frontier's end with the {side}, so the frontier holds nothing beyond it"
        if beyond:
            return (f"; it sits at an end of the law's range: beyond it, S = {', '.join(map(str, beyond))} was "
                    f"simulated and left out of the law (see the law's range)")
        return "; it sits at an end of the simulated range, so the optimum may lie beyond it (raise optimize.extend)"
    return ""


def choose(rows: tuple[FrontierRow, ...], law: FrontierLaw, level: float, span: LawRange,
           ends: tuple[int, int]) -> tuple[FrontierRow, dict]:
    """The recommendation (best predicted, fewest steps on a tie), runner-up and worst among the eligible
    rows, and whether the data tells the recommendation from each of the others: (the recommendation,
    OptimizeResult's fields recommendation ... verdict). span: the law's range; ends: the frontier's first
    and last S."""
    eligible = [r for r in rows if r.eligible]
    ranked = sorted(eligible, key=lambda r: (-round(r.predicted_accuracy, 12), r.steps))
    best, runner_up, worst = ranked[0], ranked[1], ranked[-1]

    def compare(other: FrontierRow) -> Comparison:
        diff, low, high = law.difference(best.steps, other.steps, level)
        return Comparison(steps=other.steps, difference=diff, interval=(low, high),
                          distinguishable=bool(low > 0.0 or high < 0.0))

    comparisons = {r.steps: compare(r) for r in eligible if r is not best}
    tied = tuple(sorted(s for s, c in comparisons.items() if not c.distinguishable))
    if law.degree == 0:
        verdict = (f"the data cannot tell the candidates apart: the {law.model} law fits best, so every candidate "
                   f"has the same predicted accuracy; the one with the fewest steps is recommended")
    elif not comparisons[runner_up.steps].distinguishable:
        verdict = (f"the data cannot tell the recommendation (S = {best.steps}) from {len(tied)} other "
                   f"candidate(s) (S = {', '.join(map(str, tied))}): their difference's {level:.0%} interval "
                   f"contains 0")
    else:
        verdict = f"the recommendation (S = {best.steps}) beats every other candidate in the law's range"
    if comparisons[worst.steps].distinguishable:
        verdict += f"; it beats the worst-predicted (S = {worst.steps})"
    else:
        verdict += f"; even the worst-predicted (S = {worst.steps}) cannot be told from it"
    if law.degree:
        verdict += _edge_note(best.steps, span, ends)
    return best, dict(recommendation=best, runner_up=runner_up, worst=worst,
                comparisons=tuple(comparisons[s] for s in sorted(comparisons)), tied_with_recommendation=tied,
                distinguishable_from_runner_up=comparisons[runner_up.steps].distinguishable,
                distinguishable_from_worst=comparisons[worst.steps].distinguishable, verdict=verdict)


def launch_recommendation(cfg: Config | Members, result: OptimizeResult, out: Path, *,
                          train_fn: Callable | None = None, progress: bool = True) -> LaunchOutcome:
    """Launch the recommended candidate (a group of the stage's runs) as `tanplan run` launches its target;
    compare with the prediction."""
    best = result.recommendation
    folder = out / "launch"
    launched = launch(Members.of(cfg).group(best.overrides), folder, train_fn=train_fn, progress=progress,
                      resume=(folder / "checkpoint").is_dir())
    actual = float(launched.summary.test_accuracy)
    low, high = best.prediction_interval
    accounting = launched.accounting
    return LaunchOutcome(steps=best.steps, batch_size=best.batch_size, actual_accuracy=actual,
                         predicted_accuracy=best.predicted_accuracy, prediction_interval=(low, high),
                         inside_interval=bool(low <= actual <= high),
                         epsilon_rdp=accounting.epsilon_rdp if accounting else None,
                         epsilon_pld=accounting.epsilon_pld if accounting else None,
                         sigma=accounting.sigma if accounting else None,
                         wall_seconds=launched.wall_seconds, folder=str(folder))


def _write(result: OptimizeResult, out: Path) -> None:
    write_json_atomic(out / "optimize.json", result.to_dict())
    write_optimize_report(result, out)


__all__ = ["optimize_entry", "optimize", "launch_recommendation", "candidate_overrides", "check_optimize_config", "rescaled"]
