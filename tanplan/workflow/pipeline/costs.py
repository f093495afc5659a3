"""What each stage of `tanplan run` will compute, before anything runs: example-gradients (Σ B'·S over its
runs) and that as a fraction of the target's B·S. A proxy run at B' processes B'·S examples (Poisson
batches of expected size B'), the launch B·S.

- sweep: [sweep] trials plus top_k × seeds re-runs, all at the sweep's proxy B' (exactly, unless a trial
  is stopped early by ASHA);
- ladder ("auto"): at most its budget, max(fit.max_proxy_fraction·B, fit.min_proxy_budget)·S (it stops
  earlier when fit.precision or the marginal rule says so: tanplan.workflow.ladder);
- fit (an explicit list): every size × fit.seeds (exactly);
- launch: B·S.
"""

from __future__ import annotations

from tanplan.config import Config
from tanplan.errors import UsageError
from tanplan.outcomes.pipeline import PlannedCompute, PlannedStage
from tanplan.workflow.fit import check_batch_sizes
from tanplan.workflow.ladder import budget_of, check_ladder
from tanplan.workflow.pipeline.checks import sweep_batch_size


def _stage(name: str, runs: int | None, per_step: float, cfg: Config, bound: str = "exactly") -> PlannedStage:
    examples = int(round(per_step * cfg.train.steps))
    return PlannedStage(stage=name, runs=runs, example_gradients=examples,
                        fraction=examples / (cfg.train.batch_size * cfg.train.steps), bound=bound)


def sweep_cost(cfg: Config, sweep_b: int, trials: int | None = None, top_k: int | None = None,
               seeds: int | None = None) -> PlannedStage:
    """trials + top_k × seeds runs at sweep_b (None: the [sweep] section's)."""
    s = cfg.sweep
    runs = (trials or s.trials) + (s.top_k if top_k is None else top_k) * (seeds or s.seeds)
    return _stage("sweep", runs, runs * sweep_b, cfg, "at most" if s.scheduler == "asha" else "exactly")


def law_cost(cfg: Config, sizes=None, seeds: int | None = None) -> PlannedStage:
    """The ladder's budget (a bound), or the explicit fit's runs (sizes, seeds: None takes the [fit] section's)."""
    f = cfg.fit
    sizes, seeds = sizes or f.batch_sizes, seeds or f.seeds
    if sizes == "auto":
        return _stage("ladder", None, budget_of(cfg).per_step, cfg, "at most")
    return _stage("fit", len(sizes) * seeds, seeds * sum(sizes), cfg)


def launch_cost(cfg: Config) -> PlannedStage:
    return _stage("launch", 1, cfg.train.batch_size, cfg)


def planned_compute(cfg: Config, stages) -> PlannedCompute:
    """These stages' planned compute (PlannedStage each, in order)."""
    stages = tuple(stages)
    return PlannedCompute(target_example_gradients=cfg.train.batch_size * cfg.train.steps, stages=stages,
                          proxy_fraction=sum(s.fraction for s in stages if s.stage != "launch"))


def run_compute(cfg: Config, sweep_b: int, trials: int | None = None) -> PlannedCompute:
    """`tanplan run`'s stages: sweep, ladder (or fit), launch."""
    return planned_compute(cfg, (sweep_cost(cfg, sweep_b, trials), law_cost(cfg), launch_cost(cfg)))


def dry_run(cfg: Config, proxy_batch_size: int | None = None, trials: int | None = None) -> PlannedCompute:
    """`tanplan run --dry-run`: the stages' planned compute after the checks that need no data (the ladder's
    budget or the explicit sizes, the sweep's proxy): UsageError (exit 2) where `run` would refuse them."""
    if cfg.fit.batch_sizes == "auto":
        check_ladder(cfg)
    else:
        check_batch_sizes(list(cfg.fit.batch_sizes), cfg.train.batch_size, cfg.fit.seeds, "fit.seeds =")
    sweep_b = sweep_batch_size(cfg, proxy_batch_size)
    if sweep_b > cfg.train.batch_size:
        raise UsageError(f"--proxy-batch-size {sweep_b} is not allowed: must be ≤ train.batch_size "
                         f"{cfg.train.batch_size}")
    return run_compute(cfg, sweep_b, trials)


def compute_lines(planned: PlannedCompute) -> list[str]:
    """One line a stage, for a terminal.

        >>> from tanplan.config import load_config
        >>> compute_lines(planned_compute(load_config(None, ["train.batch_size=4096"]), [launch_cost(
        ...     load_config(None, ["train.batch_size=4096"]))]))[0]
        'planned compute: launch: 1 run, exactly 819,200 example-gradients, 1 of the target's B·S'
    """
    lines = []
    for s in planned.stages:
        runs = f"{s.runs} run{'s' if s.runs != 1 else ''}" if s.runs is not None else "runs chosen as it climbs"
        lines.append(f"planned compute: {s.stage}: {runs}, {s.bound} {s.example_gradients:,} example-gradients, "
                     f"{s.fraction:.3g} of the target's B·S")
    return lines


__all__ = ["sweep_cost", "law_cost", "launch_cost", "planned_compute", "run_compute", "dry_run", "compute_lines"]
