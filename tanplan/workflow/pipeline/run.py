"""The driver of `tanplan run` (tanplan.workflow.pipeline): every input checked, then the stages in order."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

from tanplan.config import Config, with_tuned
from tanplan.errors import UsageError
from tanplan.engine.setup import load_data
from tanplan.fileio import write_json_atomic
from tanplan.outcomes.fit import FitResult, LadderResult
from tanplan.outcomes.pipeline import ProxyCompute, RunResult
from tanplan.outcomes.privacy_spent import PlannedTotal
from tanplan.privacy.plan import Plan
from tanplan.reports.fit import figure_scaling, prediction_text
from tanplan.workflow import tuning
from tanplan.workflow.best import recording
from tanplan.workflow.members import Members
from tanplan.workflow.pipeline.baselines import baselines_at
from tanplan.workflow.pipeline.costs import compute_lines, run_compute, timed
from tanplan.workflow.pipeline.checks import (RUN_FILE, check_resume, largest_proxy_batch, planned_total, run_record,
                                              sweep_batch_size, sweep_per_step, validate_inputs)
from tanplan.workflow.pipeline.interrupts import interrupted_stage
from tanplan.workflow.pipeline.stages import (Progress, eval_sets, launch_plan, launch_stage, law_stage, plan_stage,
                                              prepare_sweep, sweep_stage, tuning_stage)
from tanplan.workflow.pipeline.summary import run_result, sweep_choice, write_run
from tanplan.workflow.privacy_spent import totals
from tanplan.workflow.tuning import Tuning


def _proxy_folders(out: Path) -> list[Path]:
    return [out / "sweep" / "trials", out / "ladder", out / "fit"]


@dataclass(frozen=True)
class Predicted:
    """What `tanplan run` knows before its launch: its stages up to the law, trained in `out`."""

    cfg: Config
    out: Path
    plan: Plan
    tune: Tuning
    planned: PlannedTotal | None
    ladder: LadderResult | None
    fit_result: FitResult
    best_overrides: dict
    best_cfg: Config  # what the launch trains: the config with the sweep's best configuration
    compute: ProxyCompute
    started: float


def run_pipeline(cfg: Config, out: Path, *, trials: int | None = None, log=print, address: str | None = None,
                 baselines: bool = False, baseline_features: str | None = None,
                 baseline_public: str | None = None, proxy_batch_size: int | None = None,
                 launch_anyway: bool = False, resume: bool = False, predict_only: bool = False) -> RunResult:
    """Run every stage into `out`; the summary (also out/summary.json). See tanplan.workflow.pipeline.

    resume: continue the `tanplan run` in `out` (run.json) of the same config and options: finished sweep
    trials, ladder or fit runs and a finished launch are reused, runs stopped mid-way continue from their
    checkpoints. Without it, a folder that holds a run is refused. SIGTERM/SIGINT stop with RunInterrupted
    (exit 128 + signal), Ray shut down (tanplan.ray_session). predict_only: stop after the law stage, the
    prediction written as a run not launched (`tanplan run --routes` predicts each route so); like
    launch_anyway it is not part of the run's record, so a --resume of the folder may launch it."""
    progress = Progress(baselines, log, launch=not predict_only)
    predicted = predict(cfg, Path(out), progress, trials=trials, address=address, baselines=baselines,
                        baseline_features=baseline_features, baseline_public=baseline_public,
                        proxy_batch_size=proxy_batch_size, resume=resume)
    if predict_only or (not predicted.fit_result.law_holds and not launch_anyway):
        return stop_before_launch(predicted, predict_only=predict_only)
    return launch_predicted(predicted, progress, launch_anyway=launch_anyway, baselines=baselines,
                            baseline_features=baseline_features, baseline_public=baseline_public)


def predict(cfg: Config, out: Path, progress: Progress, *, trials: int | None = None, address: str | None = None,
            baselines: bool = False, baseline_features: str | None = None, baseline_public: str | None = None,
            proxy_batch_size: int | None = None, resume: bool = False) -> Predicted:
    """The stages before the launch: every input and the total ε checked, then plan, tuning data, sweep and
    law (ladder or fit), trained into `out` (run.json records what was asked, for --resume)."""
    started = time.perf_counter()
    record = run_record(cfg, trials=trials, proxy_batch_size=proxy_batch_size)  # --launch-anyway may be added
    validate_inputs(cfg, out, address=address, baselines=baselines, baseline_features=baseline_features,
                    baseline_public=baseline_public, proxy_batch_size=proxy_batch_size, trials=trials)
    check_resume(out, record, resume)
    sweep_b = sweep_batch_size(cfg, proxy_batch_size)
    dataset, plan, tune, planned, spec = checked_data(cfg, sweep_b, trials)
    proxies = tune.proxy_cfg  # every proxy (trial, rung, fit run) trains this config: the tuning data
    test_sizes = eval_sets(tune, dataset)
    # every input checked: the cost, before it is spent (wall times at a throughput already measured)
    for line in compute_lines(timed(run_compute(cfg, sweep_b, trials), cfg, out, measure=False)):
        progress.log(line)
    out.mkdir(parents=True, exist_ok=True)
    write_json_atomic(out / RUN_FILE, record.to_dict())
    plan_stage(cfg, plan, out, progress)
    tuning_stage(tune, planned, progress)
    with interrupted_stage(out):  # SIGTERM/SIGINT from here on: one line, how to go on, Ray shut down
        best_overrides, sweep_runs = sweep_stage(spec, sweep_b, out, progress, address)
        where = "the sweep's best configuration"
        best_proxies, best_cfg = with_tuned(proxies, best_overrides, where), with_tuned(cfg, best_overrides, where)
        law_dir = out / ("ladder" if cfg.fit.batch_sizes == "auto" else "fit")  # recorded for launch --best
        private = planned is not None and tune.data == "private"
        with recording(out / "sweep" / "best.json", law_dir, "run", private=private):
            data_sizes = (tune.tuning_size, tune.private_size) if tune.data == "public" else None
            ladder, fit_result, law_runs = law_stage(best_proxies, out, progress, test_sizes,
                                                     sweep_per_step(cfg, sweep_b, trials), data_sizes)
    if fit_result.law is not None:  # what the user reads, before the launch (the API's log too)
        progress.log(f"  {prediction_text(fit_result)}")
    compute = ProxyCompute.of(plan.batch_size * plan.steps, sweep_runs, law_runs, ladder=ladder is not None)
    return Predicted(cfg=cfg, out=out, plan=plan, tune=tune, planned=planned, ladder=ladder, fit_result=fit_result,
                     best_overrides=best_overrides, best_cfg=best_cfg, compute=compute, started=started)


PREDICTION_ONLY = "prediction only (`tanplan run --routes`: the routes are compared before any launches)"


def stop_before_launch(p: Predicted, *, predict_only: bool = False) -> RunResult:
    """The run stopped before its launch (the law does not hold, or predict_only): summary.json and report.md
    in p.out say why and what to change."""
    f = p.fit_result
    reason, change = f.verdict, f.what_to_change
    if predict_only and f.law_holds:
        reason, change = PREDICTION_ONLY, "nothing: `tanplan run --routes ... --launch-best-route` launches the best"
    result = run_result(p.plan, p.ladder, f, p.best_overrides, p.compute, planned=p.planned, started=p.started,
                        totals=totals(None, _proxy_folders(p.out), p.tune),
                        stage="ladder" if p.ladder is not None else "fit", reason=reason, what_to_change=change)
    return write_run(result, p.cfg.experiment.name, p.plan, f, p.out, p.ladder)


def launch_predicted(p: Predicted, progress: Progress, *, into: Path | None = None, launch_anyway: bool = False,
                     baselines: bool = False, baseline_features: str | None = None,
                     baseline_public: str | None = None) -> RunResult:
    """The launch of a predicted run, into `into` (default p.out: the run's own folder; `run --routes
    --launch-best-route`: the comparison's folder, the proxies' files staying in p.out), its summary.json and
    report.md beside it."""
    into = p.out if into is None else Path(into)
    plan, fit_result = p.plan, p.fit_result
    proxies = "" if into.resolve() == p.out.resolve() else os.path.relpath(p.out, into) + "/"
    with interrupted_stage(into):  # SIGTERM/SIGINT: one line, how to go on (the launch keeps its checkpoint)
        launched = launch_stage(p.best_cfg, plan, into, progress)
        actual = float(launched.summary.test_accuracy)
        if fit_result.model is not None:
            figure_scaling(fit_result, into / "scaling_law.png", actual=actual)
        rows, section = None, ""
        if baselines and launched.accounting is not None:
            epsilon = launched.accounting.epsilon
            progress.next(f"baselines: private heads and DP prototypes on frozen features at the launch's ε = "
                          f"{epsilon:.4g}")
            rows, section = baselines_at(epsilon, plan.delta, baseline_features, baseline_public,
                                         into / "baselines", p.cfg)
        result = run_result(plan, p.ladder, fit_result, p.best_overrides, p.compute, planned=p.planned,
                            started=p.started, totals=totals(into / "launch", _proxy_folders(p.out), p.tune),
                            launched=launched, actual=actual, anyway=launch_anyway and not fit_result.law_holds,
                            choice=sweep_choice(p.out), baselines=rows)
        return write_run(result, p.cfg.experiment.name, plan, fit_result, into, p.ladder, section, proxies=proxies)


def checked_data(cfg: Config, sweep_b: int, trials: int | None):
    """What `run` checks on the data before it writes anything: (the private set, the launch's Plan, the Tuning,
    the planned total, the sweep's spec). `run --dry-run` checks the same (dry_check)."""
    dataset = load_data(cfg.data)  # the private set, loaded once
    target = launch_plan(Members.of(cfg), dataset)  # δ, σ and the budget checked: nothing written yet
    plan = target.plan
    # the public set loaded once, checked against the private one, and against the largest proxy planned
    tune = tuning.resolve(cfg, plan, private=dataset, proxy_batch=largest_proxy_batch(cfg, sweep_b, trials))
    planned = planned_total(cfg, tune, target, sweep_b, trials)  # exit 3 before anything is written
    spec = prepare_sweep(tune.proxy_cfg, sweep_b, trials)  # checked (space, proxy, Ray address form)
    return dataset, plan, tune, planned, spec


def dry_check(cfg: Config, out, *, proxy_batch_size: int | None = None, trials: int | None = None,
              address: str | None = None) -> None:
    """`run --dry-run`: every check the run makes before it writes or trains (its inputs, then its data: a
    public set the run would refuse is refused here too); nothing is written."""
    validate_inputs(cfg, Path(out), address=address, proxy_batch_size=proxy_batch_size, trials=trials)
    checked_data(cfg, sweep_batch_size(cfg, proxy_batch_size), trials)


def run_entry(cfg: Config, out, *, tune_data: str | None, **options) -> RunResult:
    """The stage of tanplan.api.run: [tuning] data set from tune_data ("public" or "private"), then
    run_pipeline with the options (every stage's input, and the total ε, checked there before any stage)."""
    return run_pipeline(with_tune_data(cfg, tune_data), out, **options)


def with_tune_data(cfg: Config, tune_data: str | None) -> Config:
    """cfg with [tuning] data set from tune_data ("public" or "private"; None: as it is)."""
    if tune_data not in (None, "public", "private"):
        raise UsageError(f"tune_data {tune_data!r} is not allowed: use public or private")
    return cfg.with_overrides({"tuning.data": tune_data}) if tune_data else cfg
