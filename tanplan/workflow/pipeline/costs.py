"""What each stage of `tanplan run` will compute, before anything runs: example-gradients (Σ B'·S over its
runs) and that as a fraction of the target's B·S. A proxy run at B' processes B'·S examples (Poisson
batches of expected size B'), the launch B·S.

- sweep: [sweep] trials plus top_k × seeds re-runs, all at the sweep's proxy B' (exactly, unless a trial
  is stopped early by ASHA);
- ladder ("auto"): at most its budget, max(fit.max_proxy_fraction·B, fit.min_proxy_budget)·S within what
  the pipeline's budget (fit.compute_budget: tanplan.workflow.ladder.pipeline_budget) leaves after the
  sweep (it stops earlier when fit.precision or the marginal rule says so: tanplan.workflow.ladder);
- fit (an explicit list): every size × fit.seeds (exactly);
- launch: B·S.

With a throughput (tanplan.workflow.pipeline.throughput: the runs of an earlier run in the same folder, or a
timed probe), each stage also gets its wall time: example-gradients × seconds per example, plus each run's
compilation and evaluation when the runs measured them (the ladder: as many runs as its budget could buy).
"""

from __future__ import annotations

import dataclasses
import math

from tanplan.config import Config
from tanplan.errors import UsageError
from tanplan.outcomes.pipeline import PlannedCompute, PlannedStage
from tanplan.workflow import tuning
from tanplan.workflow.ladder import REFERENCE_BATCH, budget_of
from tanplan.workflow.pipeline.checks import check_law_budget, sweep_batch_size, sweep_per_step
from tanplan.workflow.pipeline.throughput import Throughput, probe, recorded


def _stage(name: str, runs: int | None, per_step: float, cfg: Config, bound: str = "exactly") -> PlannedStage:
    examples = int(round(per_step * cfg.train.steps))
    return PlannedStage(stage=name, runs=runs, example_gradients=examples,
                        fraction=examples / (cfg.train.batch_size * cfg.train.steps), bound=bound)


def sweep_cost(cfg: Config, sweep_b: int, trials: int | None = None, top_k: int | None = None,
               seeds: int | None = None) -> PlannedStage:
    """trials + top_k × seeds runs at sweep_b (None: the [sweep] section's): runs × B'/B of the target's."""
    s = cfg.sweep
    runs = (trials or s.trials) + (s.top_k if top_k is None else top_k) * (seeds or s.seeds)
    return _stage("sweep", runs, runs * sweep_b, cfg, "at most" if s.scheduler == "asha" else "exactly")


def law_cost(cfg: Config, sizes=None, seeds: int | None = None, spent_before: float = 0.0) -> PlannedStage:
    """The ladder's budget after spent_before (the sweep's Σ B'; a bound), or the explicit fit's runs (sizes,
    seeds: None takes the [fit] section's)."""
    f = cfg.fit
    sizes, seeds = sizes or f.batch_sizes, seeds or f.seeds
    if sizes == "auto":
        return _stage("ladder", None, budget_of(cfg, spent_before).per_step, cfg, "at most")
    return _stage("fit", len(sizes) * seeds, seeds * sum(sizes), cfg)


def launch_cost(cfg: Config) -> PlannedStage:
    return _stage("launch", 1, cfg.train.batch_size, cfg)


def planned_compute(cfg: Config, stages) -> PlannedCompute:
    """These stages' planned compute (PlannedStage each, in order)."""
    stages = tuple(stages)
    return PlannedCompute(target_example_gradients=cfg.train.batch_size * cfg.train.steps, stages=stages,
                          proxy_fraction=sum(s.fraction for s in stages if s.stage != "launch"))


def run_compute(cfg: Config, sweep_b: int, trials: int | None = None) -> PlannedCompute:
    """`tanplan run`'s stages: sweep, ladder (or fit: the ladder gets what fit.compute_budget leaves), launch;
    with a warning and the cheaper path when the proxies would cost more than the launch (over_budget)."""
    sweep = sweep_cost(cfg, sweep_b, trials)
    planned = planned_compute(cfg, (sweep, law_cost(cfg, spent_before=sweep_per_step(cfg, sweep_b, trials)),
                                    launch_cost(cfg)))
    return dataclasses.replace(planned, over_budget=over_budget(cfg, planned, sweep_per_step(cfg, sweep_b, trials)))


def over_budget(cfg: Config, planned: PlannedCompute, sweep_spent: float) -> str | None:
    """None when the proxies (sweep + law stage, at most) cost no more than the launch's B·S; else one line:
    how much more, and the cheaper path. A prediction is worth buying only while it costs less than the
    launch it predicts: past that, launching directly (or twice) tells the user more. The cheaper paths: a
    fit.compute_budget that keeps sweep + ladder within the launch when the law's first rungs still fit
    after the sweep, else fewer seeds a rung or a cheaper sweep; and always launching directly."""
    if planned.proxy_fraction <= 1 + 1e-9:
        return None
    target = cfg.train.batch_size
    stages = ", ".join(f"{s.stage} {s.fraction:.3g}" for s in planned.stages if s.stage != "launch")
    head = (f"the proxies would cost up to {planned.proxy_fraction:.3g}× the launch's compute ({stages} of B·S = "
            f"{target}·S) before it trains")
    direct = "launch directly (`tanplan launch`: no prediction, 1× the launch)"
    if cfg.fit.batch_sizes != "auto":
        return f"{head}: {direct}, or fewer fit.batch_sizes or fit.seeds"
    need = budget_of(cfg).first_rungs_cost()  # the law's first rungs, the least a ladder can train
    if need + sweep_spent <= target:
        # the smallest fit.compute_budget whose pipeline budget (ladder.pipeline_budget) pays the sweep and those rungs
        share = (need + sweep_spent) / (target * min(1.0, (REFERENCE_BATCH / target) ** 0.5))
        least = need + sweep_spent
        return (f"{head}: set fit.compute_budget = {math.ceil(share * 100) / 100:g} (sweep and ladder within "
                f"{least:g}·S, {least / target:.2g} of the launch; a wider interval), or {direct}")
    return (f"{head}; the law's first rungs alone need {need}·S ({need / target:.2g} of the launch) after the "
            f"sweep's {sweep_spent:g}·S: {direct}, or lower fit.ladder_seeds and the sweep's cost ([sweep] trials, "
            "top_k, seeds)")


def dry_run(cfg: Config, proxy_batch_size: int | None = None, trials: int | None = None) -> PlannedCompute:
    """`tanplan run --dry-run`: the stages' planned compute after the checks that need no data (the ladder's
    budget or the explicit sizes, the sweep's proxy): UsageError (exit 2) where `run` would refuse them,
    NotLaunched (exit 4) where fit.compute_budget cannot pay the ladder's first rungs after the sweep."""
    tuning.check_steps(cfg)  # the stages' costs are read from train.steps: train.epochs is refused as `run` does
    sweep_b = sweep_batch_size(cfg, proxy_batch_size)
    if sweep_b > cfg.train.batch_size:
        raise UsageError(f"--proxy-batch-size {sweep_b} is not allowed: must be ≤ train.batch_size "
                         f"{cfg.train.batch_size}")
    check_law_budget(cfg, sweep_b, trials)
    return run_compute(cfg, sweep_b, trials)


def ladder_runs_bound(cfg: Config, per_step: float | None = None) -> int:
    """The most runs the ladder's budget (per_step, else its own) can buy: its rungs climbed with
    fit.ladder_seeds seeds while they fit, then single seeds at its cheapest rung."""
    budget = budget_of(cfg)
    budget = dataclasses.replace(budget, per_step=budget.per_step if per_step is None else per_step)
    left, runs = budget.per_step, 0
    for b in budget.sizes:
        if budget.seeds * b > left:
            break
        left -= budget.seeds * b
        runs += budget.seeds
    return runs + int(left // budget.sizes[0]) if budget.sizes else runs


def with_wall_time(planned: PlannedCompute, throughput: Throughput, cfg: Config) -> PlannedCompute:
    """planned with each stage's wall time at this throughput, and where the throughput was measured."""
    def runs(s: PlannedStage) -> int:
        return s.runs if s.runs is not None else ladder_runs_bound(cfg, s.example_gradients / cfg.train.steps)

    stages = tuple(dataclasses.replace(s, wall_seconds=throughput.seconds(s.example_gradients, runs(s)))
                   for s in planned.stages)
    return dataclasses.replace(planned, stages=stages, seconds_per_example=throughput.seconds_per_example,
                               wall_source=throughput.source, wall_lower_bound=throughput.lower_bound)


def duration(seconds: float) -> str:
    """A wall time for a terminal.

        >>> duration(42), duration(5400), duration(200000)
        ('42 s', '1.5 h', '2.3 days')
    """
    if seconds < 120:
        return f"{math.ceil(seconds):.0f} s"
    if seconds < 3600:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h" if seconds < 48 * 3600 else f"{seconds / 86400:.1f} days"


def timed(planned: PlannedCompute, cfg: Config, out, *, measure: bool) -> PlannedCompute:
    """planned with wall times: at the throughput of the runs already in `out`, else of a probe (a cached one;
    a new one only when measure); unchanged when there is none."""
    found = recorded(out) or probe(cfg, measure=measure)
    return with_wall_time(planned, found, cfg) if found is not None else planned


def _about(stage: PlannedStage, planned: PlannedCompute) -> str:
    """≥ for an exact stage at a probe's (lower-bound) throughput, ≤ for a bounded one at a measured one, ~ for a
    bounded stage at a lower bound, ≈ otherwise."""
    if planned.wall_lower_bound:
        return "≥" if stage.bound == "exactly" else "~"
    return "≤" if stage.bound == "at most" else "≈"


def compute_lines(planned: PlannedCompute) -> list[str]:
    """One line a stage, for a terminal.

        >>> from tanplan.config import load_config
        >>> compute_lines(planned_compute(load_config(None, ["train.batch_size=4096"]), [launch_cost(
        ...     load_config(None, ["train.batch_size=4096"]))]))[0]
        "planned compute: launch: 1 run, exactly 819,200 example-gradients, 1 of the target's B·S"
    """
    lines = []
    for s in planned.stages:
        runs = f"{s.runs} run{'s' if s.runs != 1 else ''}" if s.runs is not None else "runs chosen as it climbs"
        wall = f", {_about(s, planned)} {duration(s.wall_seconds)}" if s.wall_seconds is not None else ""
        lines.append(f"planned compute: {s.stage}: {runs}, {s.bound} {s.example_gradients:,} example-gradients, "
                     f"{s.fraction:.3g} of the target's B·S{wall}")
    if planned.wall_source is not None:
        lines.append(f"planned wall time: at {planned.seconds_per_example:.3g} s an example-gradient on one device, "
                     f"{planned.wall_source}")
    if planned.over_budget:
        lines.append(f"warning: {planned.over_budget}")
    return lines


__all__ = ["sweep_cost", "law_cost", "launch_cost", "planned_compute", "run_compute", "over_budget", "dry_run",
           "compute_lines",
           "ladder_runs_bound", "with_wall_time", "duration", "timed"]
