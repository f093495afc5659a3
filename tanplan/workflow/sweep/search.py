"""Proxy sweeps: Optuna's TPE picks the trials, Ray Tune runs them, an SQLite study remembers them.

The target (B, σ, S) comes from the config's plan; every trial trains the proxy (B', σ·B'/B, S) at the
same η_step and S (TAN, Sander et al. 2023 §3.4, Table 2) through the engine's `train_and_evaluate`, with the
searched keys overridden and its own seed. Then the top-k configurations are re-run over n fresh
seeds and ranked by their mean accuracy (a search winner is biased upwards: it won partly by luck).

Resume: the Optuna study in DIR/study.sqlite3 is the one record of the sweep; Ray Tune's own
experiment restore is not used. The searcher (tanplan.workflow.sweep.searcher) asks the study for each
trial (RUNNING), and when Ray reports the trial's end it first stores the trial's row (accuracy, wall
seconds, status, seed) as user attributes, then tells its state (COMPLETE, PRUNED, FAIL): a trial counts as
finished only once its state is written, so a kill in between just runs it again. A sweep killed by
SIGKILL or SIGINT leaves its unfinished trials RUNNING; `--resume` marks them interrupted, queues the
same parameters and seed again, counts the finished ones and asks Ray Tune for the rest only, in a
fresh Tune experiment whose searcher loads the same study (so TPE keeps its history). Re-runs live in
a second study of the same file, one record per (configuration, seed).
With `--address ray://...` (Ray Client), Ray Tune runs its driver, the searcher included, on the head
node: DIR must then be on storage that the head node shares. `--address auto` or HOST:PORT, run on
a node of the cluster, has no such constraint. Ray (2.5x+) never turns on token authentication for an
explicit address: attaching to a cluster that uses it needs RAY_AUTH_MODE=token in the environment.
Privacy: a trial spends the proxy's budget on the data it trains on. `tanplan sweep` (and `tanplan run`)
hand it the proxies' config of [tuning] (tanplan.workflow.tuning): public data of the same task by
default, so no trial touches the private set; with private tuning the trials' releases are composed
(privacy_spent.json, and best.json records them for `launch --best`).
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any, Callable

from tanplan.config import config_from_dict
from tanplan.data import dataset_kind
from tanplan.engine.setup import load_data
from tanplan.errors import UsageError
from tanplan.fileio import exclusive
from tanplan.outcomes.sweep import SweepResult, SweepScale
from tanplan.plugins import worker_env
from tanplan.ray_session import check_address, last_signal, start_ray, stop_ray  # noqa: F401  (check_address: for commands)
from tanplan.workflow.members import Members
from tanplan.workflow.sweep import results
from tanplan.workflow.sweep.space import default_space, parse_space, to_optuna
from tanplan.workflow.sweep.study import (ERROR, FINISHED, METRIC, PRUNED, SweepSpec, TrialJob, TrialReport, finished_count, finite,
                                          open_storage, open_studies, outcome, requeue_interrupted, rerun_jobs,
                                          running_numbers)
from tanplan.workflow.sweep.trial import make_trainable

# ---------------------------------------------------------------- the spec (driver, before Ray)

def prepare(cfg, *, proxy_batch_size: int | None = None, trials: int | None = None, top_k: int | None = None,
            seeds: int | None = None, scheduler: str | None = None, max_concurrent: int | None = None,
            dataset=None) -> SweepSpec:
    """Check the [sweep] section and the command's choices against the config and its data; plan.

    The proxy B' comes from --proxy-batch-size, else [sweep] proxy_batch_size, else
    train.proxy_batch_size. σ and δ of the target are pinned in every trial's config, so that no
    trial recalibrates σ: the driver's Plan is the one source of the numbers.
    """
    section = cfg.sweep
    batch = cfg.train.batch_size
    proxy = check_proxy(cfg, proxy_batch_size)
    # The space is checked before any data is read (or generated): bad input fails fast, with one line.
    kind = dataset.data_kind if dataset is not None else dataset_kind(cfg.data.dataset, cfg.data.path or None,
                                                                        cfg.data.options)
    dims = parse_space(section.space or default_space(kind), cfg, augmentations=_augmentations(kind),
                       models=_models())
    dataset = dataset if dataset is not None else load_data(cfg.data)
    runs = Members.of(cfg)  # every trial's config derives from these runs' (its params: trial.trial_entry)
    run = runs.proxy_plan(proxy, dataset.num_train)
    pinned = {"train.proxy_batch_size": proxy}
    if run.private:
        # the twin a set smaller than B states at q = 1 has another σ (run_plan.twin_beyond): pin the config's
        sigma = cfg.privacy.sigma if run.target.dataset_size != run.dataset_size else run.target.sigma
        pinned.update({"privacy.sigma": sigma, "privacy.delta": run.target.delta})
        target, trained = SweepScale(**run.target.to_dict()), SweepScale(**run.plan.to_dict())
    else:
        target = SweepScale(batch_size=batch, steps=cfg.train.steps, private=False)
        trained = SweepScale(batch_size=proxy, steps=cfg.train.steps, private=False)
    base = runs.group(pinned).base.to_dict()
    base.pop("sweep", None)  # trials do not sweep
    return SweepSpec(
        base=base, dims=dims,
        trials=trials or section.trials,
        top_k=section.top_k if top_k is None else top_k,
        seeds=seeds or section.seeds,
        scheduler=scheduler or section.scheduler,
        max_concurrent=section.max_concurrent if max_concurrent is None else max_concurrent,
        startup_trials=section.startup_trials,
        seed=cfg.experiment.seed, steps=cfg.train.steps, eval_every=cfg.train.eval_every,
        target=target, proxy=trained)


def check_proxy(cfg, proxy_batch_size: int | None) -> int:
    """The proxy B' of a sweep: --proxy-batch-size, else [sweep] proxy_batch_size, else
    train.proxy_batch_size; UsageError when none is set or it exceeds train.batch_size (reads no data)."""
    batch = cfg.train.batch_size
    proxy = proxy_batch_size or cfg.sweep.proxy_batch_size or cfg.train.proxy_batch_size
    if not proxy:
        raise UsageError("--proxy-batch-size is required (or set [sweep] proxy_batch_size): the proxy batch B' "
                         f"that every trial trains, <= train.batch_size = {batch}")
    if proxy > batch:
        raise UsageError(f"--proxy-batch-size {proxy} is not allowed: a proxy must not be larger than the target "
                         f"batch train.batch_size = {batch}")
    return proxy


def _augmentations(data_kind: str):
    try:
        from tanplan.data import available_augmentations  # lazy: an install without it still checks the space
    except ImportError:
        return None
    return available_augmentations(data_kind)


def _models():
    try:
        from tanplan.models import available_models  # lazy: flax, of the train extra; the space is checked without it
    except ImportError:
        return None
    return available_models()


# ---------------------------------------------------------------- Ray

def connect_ray(address: str | None, env: dict | None = None):
    """Start a small local Ray (127.0.0.1 only, no dashboard, private session folder: tanplan.ray_session),
    or attach to the cluster at `address`; the session to pass to stop_ray, None when Ray was already
    initialised in this process (it is then reused as it is). env: the workers' environment variables
    (PYTHONPATH for plug-ins: tanplan.plugins.worker_env)."""
    return start_ray(address, num_cpus=min(2, os.cpu_count() or 1), runtime_env={"env_vars": env} if env else None)


def trial_resources(max_concurrent: int) -> tuple[dict, int]:
    """({"cpu": share, "gpu": 1 or absent}, concurrency): one GPU per trial where the cluster has GPUs."""
    import ray

    total = ray.cluster_resources()
    cpus, gpus = float(total.get("CPU", 1)), int(total.get("GPU", 0))
    if gpus:
        concurrency = min(max_concurrent or gpus, gpus)
        return {"cpu": cpus / concurrency, "gpu": 1}, concurrency
    concurrency = max_concurrent or 1
    return {"cpu": cpus / concurrency}, concurrency


# ---------------------------------------------------------------- the sweep

def run_sweep(spec: SweepSpec, out: Path, *, address: str | None = None, resume: bool = False,
              train_fn: Callable | None = None, log: Callable[[str], None] | None = None) -> SweepResult:
    """Search, re-run the best, write the results; returns what DIR/best.json holds.

    Raises KeyboardInterrupt when the sweep was interrupted (the study keeps what finished).
    """

    log = log or (lambda line: None)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    with exclusive(out, "sweep"):  # one sweep per DIR; the lock dies with its process
        storage = open_storage(out)
        search, reruns = open_studies(out, spec, resume=resume, storage=storage)
        requeued = requeue_interrupted(search, storage)
        if requeued:
            log(f"resume: trials {', '.join(map(str, requeued))} were interrupted; they run again")
        done = finished_count(search)
        if done:
            log(f"resume: {done} of {spec.trials} trials already finished")
        interrupted: list[int] = []
        # Ray starts only when something is left to train (a resumed sweep that finished needs none).
        if spec.trials > done or rerun_jobs(search, reruns, spec):
            started_ray = connect_ray(address, worker_env(config_from_dict(spec.base)))  # workers import plug-ins
            if address and address.startswith("ray://"):
                log(f"note: through Ray Client the sweep's searcher runs on the head node; {out} must be on "
                    "storage it shares")
            try:
                if spec.trials > done:
                    _search(spec, out, search, storage, spec.trials - done, train_fn, log)
                interrupted = running_numbers(search)
                if not interrupted and last_signal() is None:
                    jobs = rerun_jobs(search, reruns, spec)
                    if jobs:
                        _rerun(spec, out, reruns, jobs, train_fn, log)
            finally:
                stop_ray(started_ray)  # and remove the local Ray's session folder
            if last_signal() is not None:  # Ray Tune stopped gracefully: trials or re-runs are left
                interrupted = interrupted or [-1]
        summary = results.write_results(out, spec, search, reruns)
    if interrupted:
        raise KeyboardInterrupt(f"sweep interrupted with trials {[n for n in interrupted if n >= 0]} unfinished")
    return summary


def _tune_env() -> None:
    # Results without the metric (a failed trial) are expected; the per-trial CSV/JSON/TensorBoard
    # loggers duplicate what the study records.
    os.environ.update(TUNE_DISABLE_STRICT_METRIC_CHECKING="1")
    os.environ.setdefault("TUNE_DISABLE_AUTO_CALLBACK_LOGGERS", "1")
    os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "0")


def _run_config(out: Path, kind: str, callbacks: list):
    from ray import tune

    return tune.RunConfig(name=f"{kind}-{time.strftime('%Y%m%d-%H%M%S')}", storage_path=str((out / "ray").resolve()),
                          verbose=0, callbacks=callbacks, failure_config=tune.FailureConfig(max_failures=0))


def _search(spec: SweepSpec, out: Path, study, storage, count: int, train_fn, log) -> None:
    import optuna
    from ray import tune

    from tanplan.workflow.sweep.searcher import StudySearcher  # lazy: Ray; the sweep's checks run without it

    _tune_env()
    resources, concurrency = trial_resources(spec.max_concurrent)
    sampler = optuna.samplers.TPESampler(seed=spec.seed + len(study.trials), n_startup_trials=spec.startup_trials)
    searcher = StudySearcher(to_optuna(spec.dims), storage=storage, study_name=study.study_name, sampler=sampler,
                             seed=spec.seed)
    scheduler = None
    if spec.scheduler == "asha":
        from ray.tune.schedulers import ASHAScheduler

        scheduler = ASHAScheduler(time_attr="step", metric=METRIC, mode="max", max_t=spec.steps,
                                  grace_period=min(spec.eval_every, spec.steps), reduction_factor=3,
                                  stop_last_trials=False)
    log(f"search: {count} trials on {concurrency} slot(s) of {_describe(resources)}")
    tuner = tune.Tuner(
        tune.with_resources(make_trainable(spec, (out / "trials").resolve(), train_fn), resources),
        tune_config=tune.TuneConfig(search_alg=searcher, scheduler=scheduler, num_samples=count,
                                    max_concurrent_trials=concurrency, reuse_actors=True,
                                    trial_dirname_creator=lambda t: f"search-{t.trial_id}"),
        run_config=_run_config(out, "search", [_progress("search", count, log)]),
    )
    tuner.fit()


def _rerun(spec: SweepSpec, out: Path, reruns, jobs: list[TrialJob], train_fn, log) -> None:
    from ray import tune

    _tune_env()
    resources, concurrency = trial_resources(spec.max_concurrent)
    log(f"re-runs: {len(jobs)} runs ({spec.top_k} best configurations x {spec.seeds} seeds)")
    tuner = tune.Tuner(
        tune.with_resources(make_trainable(spec, (out / "trials").resolve(), train_fn), resources),
        param_space={"job": tune.grid_search([job.to_dict() for job in jobs])},
        tune_config=tune.TuneConfig(max_concurrent_trials=concurrency, reuse_actors=True,
                                    trial_dirname_creator=lambda t: f"rerun-{t.trial_id}"),
        run_config=_run_config(out, "rerun", [_record_reruns(reruns, spec.dims), _progress("re-run", len(jobs), log)]),
    )
    tuner.fit()


def _describe(resources: dict) -> str:
    return ", ".join(f"{v:g} {k.upper()}" for k, v in resources.items())


def _progress(phase: str, total: int, log):
    """A Tune callback printing one line per finished trial: number, parameters, accuracy, time, status."""
    from ray.tune import Callback

    class Progress(Callback):
        count = 0

        def on_trial_complete(self, iteration, trials, trial, **info):
            self._line(trial, trial.last_result or {})

        def on_trial_error(self, iteration, trials, trial, **info):
            self._line(trial, {"status": ERROR, "final": True})

        def _line(self, trial, result):
            self.count += 1
            job, report = TrialJob.of(trial.config), TrialReport.of(result)
            params = " ".join(f"{k}={_short(v)}" for k, v in job.params.items())
            status = report.status if report.final else PRUNED
            acc = report.test_accuracy
            acc_text = f"acc {acc:.4f}" if finite(acc) else "acc -"
            seconds = next((s for s in (report.wall_seconds, report.time_total_s) if s is not None), 0)
            log(f"{phase} {self.count}/{total}  trial {job.trial} seed {job.seed}  {params}  "
                f"{acc_text}  {seconds:.0f} s  {status}")

    return Progress()


def _record_reruns(study, dims):
    """A Tune callback storing each finished re-run in the re-run study, keyed by (source trial, seed)."""
    import optuna
    from optuna.trial import TrialState
    from ray.tune import Callback

    class RecordReruns(Callback):
        seen: set = set()

        def on_trial_complete(self, iteration, trials, trial, **info):
            self._record(trial, trial.last_result, error=False)

        def on_trial_error(self, iteration, trials, trial, **info):
            self._record(trial, trial.last_result, error=True)

        def _record(self, trial, result, error):
            if trial.trial_id in self.seen:
                return
            self.seen.add(trial.trial_id)
            job = TrialJob.of(trial.config)
            status, row = outcome(result, error)
            ok = status == FINISHED
            study.add_trial(optuna.trial.create_trial(
                state=TrialState.COMPLETE if ok else TrialState.FAIL,
                value=TrialReport.of(row).test_accuracy if ok else None,
                params=dict(job.params), distributions=to_optuna(dims),
                user_attrs={**row, "source_trial": job.trial, "seed": job.seed}))

    return RecordReruns()


def _short(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)
