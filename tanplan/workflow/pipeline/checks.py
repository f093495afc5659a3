"""Before any stage of `tanplan run`: every input checked, the run's record (run.json, for --resume), the
sweep's proxy batch size and the bound on the total ε on the private set (exit 3 before anything is written)."""

from __future__ import annotations

import json
from pathlib import Path

from tanplan.baselines.data import load_features, load_public
from tanplan.config import Config
from tanplan.errors import UsageError
from tanplan.outcomes.pipeline import RunRecord
from tanplan.outcomes.privacy_spent import PlannedTotal
from tanplan.ray_session import check_address
from tanplan.workflow import total_budget, tuning
from tanplan.workflow.fit_members import check_batch_sizes
from tanplan.workflow.inputs import check_inputs, check_out_dir, check_sweep_space
from tanplan.workflow.ladder import budget_of, check_ladder
from tanplan.workflow.sweep.study import _first_difference, check_study_file

RUN_FILE = "run.json"  # what a `tanplan run` in this folder was asked: its --resume must ask the same


def validate_inputs(cfg: Config, out: Path, *, address: str | None = None, baselines: bool = False,
                    baseline_features: str | None = None, baseline_public: str | None = None,
                    proxy_batch_size: int | None = None, trials: int | None = None) -> None:
    """Every stage's input, checked before the data is loaded and before any stage runs (UsageError):
    a mistake in the last stage's input must not cost the sweep, the fit and the launch's ε first. A ladder
    that fit.compute_budget cannot pay after the sweep is NotLaunched (exit 4), before anything runs too.

    The config's names and paths, the --out folder, the tuning data, S given as train.steps (train.epochs is
    refused, as sweep and fit refuse it); the ladder's budget or the fit's proxy batch sizes and seeds; the
    sweep's space, Ray address and study (a rerun resumes it); the baselines' feature files.
    """
    check_inputs(cfg)
    check_out_dir(out)
    if Path(out).is_dir():  # an audit's run or outputs hold canary-trained models: never a workflow's folder
        from tanplan.engine.run_folder import check_audit_folder  # lazy: the engine (orbax); dry runs import this

        check_audit_folder(out, resume=False, audit=False)
    tuning.check(cfg)
    tuning.check_steps(cfg)  # the ladder, the sweep and the cost and budget bounds read train.steps
    target = cfg.train.batch_size
    if proxy_batch_size is not None and not 0 < proxy_batch_size <= target:
        raise UsageError(f"--proxy-batch-size {proxy_batch_size} is not allowed: must be between 1 and the target "
                         f"batch train.batch_size = {target}")
    check_law_budget(cfg, sweep_batch_size(cfg, proxy_batch_size), trials)
    check_sweep_space(cfg)
    check_address(address)
    check_study_file(Path(out) / "sweep", resume=True)
    if (baseline_features or baseline_public) and not baselines:
        raise UsageError("--baseline-features and --baseline-public are not allowed without --baselines")
    if baseline_public and not baseline_features:
        raise UsageError("--baseline-public is not allowed without --baseline-features (the demo features bring "
                         "their own public set)")
    if baselines and not cfg.privacy.private:
        raise UsageError("--baselines is not allowed with privacy.private = false: they are compared at the "
                         "launch's ε")
    if baseline_features:
        features = load_features(baseline_features)
        if baseline_public:
            load_public(baseline_public, features.width)


def sweep_batch_size(cfg: Config, proxy_batch_size: int | None) -> int:
    """The sweep's proxy B': --proxy-batch-size, else [sweep] proxy_batch_size, else (ladder) the ladder's second
    rung below the target (2·fit.ladder_start: the smallest proxy that is not mostly sampling noise, the first
    rung being the one the law needs below the knee), else (explicit list) the smallest size. The sweep's
    share of the target's compute is its runs × B'/B: it falls as the target grows."""
    if proxy_batch_size or cfg.sweep.proxy_batch_size:
        return proxy_batch_size or cfg.sweep.proxy_batch_size
    if cfg.fit.batch_sizes != "auto":
        return min(cfg.fit.batch_sizes)
    sizes = budget_of(cfg).sizes
    return sizes[min(1, len(sizes) - 1)]


def sweep_per_step(cfg: Config, sweep_b: int, trials: int | None = None) -> int:
    """Σ B' over the sweep's runs: its trials and top_k × seeds re-runs at sweep_b (a bound under ASHA)."""
    s = cfg.sweep
    return ((trials or s.trials) + s.top_k * s.seeds) * sweep_b


def largest_proxy_batch(cfg: Config, sweep_b: int, trials: int | None = None) -> int:
    """The largest proxy batch B' the run plans, which the public set must hold: the sweep's, or the law's
    largest rung (an explicit fit.batch_sizes, else the largest the ladder's budget can pay after the sweep)."""
    if cfg.fit.batch_sizes != "auto":
        return max(sweep_b, *cfg.fit.batch_sizes)
    return max(sweep_b, budget_of(cfg, sweep_per_step(cfg, sweep_b, trials)).largest_rung())


def check_law_budget(cfg: Config, sweep_b: int, trials: int | None = None) -> None:
    """The ladder's budget after the sweep's runs (UsageError, or NotLaunched when fit.compute_budget leaves
    too little: tanplan.workflow.ladder.check_ladder), or the explicit fit's sizes and seeds."""
    if cfg.fit.batch_sizes == "auto":
        check_ladder(cfg, sweep_per_step(cfg, sweep_b, trials), "the sweep's")
    else:
        check_batch_sizes(list(cfg.fit.batch_sizes), cfg.train.batch_size, cfg.fit.seeds, "fit.seeds =")


def planned_total(cfg: Config, tune: tuning.Tuning, target, sweep_b: int, trials: int | None) -> PlannedTotal | None:
    """The bound on the total ε the run will release on the private set (tanplan.workflow.total_budget; target:
    the launch's RunPlan on it); BudgetExceeded (exit 3) above privacy.total_epsilon. None for a non-private
    config."""
    if not cfg.privacy.private:
        return None
    s, f = cfg.sweep, cfg.fit
    trials = trials or s.trials
    # the ladder's budget after the sweep's Σ B' (trials and top_k × seeds re-runs), as the pipeline gives it
    laddered = f.batch_sizes == "auto" and tune.data == "private"
    ladder = budget_of(tune.proxy_cfg, (trials + s.top_k * s.seeds) * sweep_b) if laddered else None
    total = total_budget.pipeline_plan(target, tune.data, sweep_batch_size=sweep_b, trials=trials, top_k=s.top_k,
                                       seeds=s.seeds, fit_batch_sizes=f.batch_sizes, fit_seeds=f.seeds,
                                       ladder_budget=ladder)
    return total_budget.check(total, cfg)


def run_record(cfg: Config, **options) -> RunRecord:
    """What a run in a folder was asked (run.json): its config and the options that shape its stages, as
    its JSON reads back."""
    return RunRecord.from_dict(json.loads(json.dumps({"config": cfg.to_dict(), "options": options})))


def check_resume(out: Path, record: RunRecord, resume: bool) -> None:
    """UsageError unless `out` holds a run exactly when resume is asked, and the same run (config, options)."""
    path = Path(out) / RUN_FILE
    if not resume:
        if path.is_file():
            raise UsageError(f"--out {str(out)!r} already holds a `tanplan run` ({RUN_FILE}): pass --resume to "
                             "continue it, or choose another --out")
        return
    if not path.is_file():
        raise UsageError(f"--resume is not allowed: {str(out)!r} holds no `tanplan run` to continue (no {RUN_FILE}); "
                         "leave --resume out to start one")
    try:
        old = RunRecord.from_dict(json.loads(path.read_text(encoding="utf-8")))
    except (OSError, UnicodeDecodeError, ValueError, TypeError, AttributeError):
        raise UsageError(f"--resume is not allowed: {str(path)!r} is not the JSON a `tanplan run` writes; move it "
                         "away or choose another --out") from None
    if old != record:
        raise UsageError(f"--resume is not allowed: {str(out)!r} holds a run of another config or options "
                         f"({_first_difference(old.to_dict(), record.to_dict())}); resume with the same --config, "
                         "--set and options, or choose another --out")
