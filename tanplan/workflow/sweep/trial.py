"""One sweep trial, as it runs in a Ray worker: train the configuration, report its evaluations."""

from __future__ import annotations

import math
import os
import time
from pathlib import Path
from typing import Any, Callable, Mapping

from tanplan.config import config_from_dict
from tanplan.engine import loop
from tanplan.errors import TrainingDiverged
from tanplan.workflow.sweep.space import Dimension, overrides
from tanplan.workflow.train_run import train_config
from tanplan.workflow.sweep.study import DIVERGED, ERROR, FINISHED, METRIC, SweepSpec, TrialJob


def trial_entry(job: Mapping[str, Any] | TrialJob, *, base: Mapping, dims: tuple[Dimension, ...], trials_dir: str,
                train_fn: Callable | None = None, report: Callable[[dict], None] | None = None) -> dict:
    """A trial's own entry (what a Ray worker runs): its Config resolved here, once, from the sweep's base record
    and the trial's params and seed; train it and report its evaluations; returns the final result reported.

    job: a TrialJob, or its dict {"params": {searched name: value}, "trial", "seed", "kind": "search" | "rerun"}.
    Never raises for a failed training: the outcome is in result["status"] (finished, diverged, error),
    so that the sweep records it and goes on.
    """
    job = job if isinstance(job, TrialJob) else TrialJob.of(job)
    report = report or (lambda metrics: None)
    if train_fn is None:
        train_fn = train_config  # THE loop on the trial's job (loop.train_and_evaluate read when called: tests fake it)
        _share_compilations(Path(trials_dir).parent / "jax_cache")
    start = time.perf_counter()
    cfg = config_from_dict(base).with_overrides({**overrides(dims, job.params), "experiment.seed": int(job.seed)})
    steps = cfg.train.steps
    workdir = Path(trials_dir) / f"{job.kind}-{int(job.trial):04d}-seed{int(job.seed)}"
    last_step = 0

    def on_eval(step: int, metrics: Mapping) -> None:
        nonlocal last_step
        last_step = int(step)
        if step < steps:  # the final evaluation is reported with the summary, once
            report({**_numbers(metrics), "step": int(step)})

    status, error, summary = FINISHED, "", None
    try:
        # resume: a trial re-queued after a kill continues its own run, with its own secret
        summary = train_fn(cfg, workdir, progress=False, on_eval=on_eval, resume=True)
    except TrainingDiverged as err:
        status, error = DIVERGED, str(err)
    except Exception as err:  # one bad configuration must not stop the sweep; its error is recorded
        status, error = ERROR, f"{type(err).__name__}: {err}"
    result = _numbers(summary.to_dict() if summary is not None else {})  # the summary's figures, for Ray and Optuna
    if "wall_seconds" in result:  # the engine's own clock; wall_seconds below is the whole trial's
        result.update(run_seconds=result.pop("wall_seconds"))
    if status != FINISHED:
        result.pop(METRIC, None)
    done = summary.steps if summary is not None else steps
    result.update(step=int(done if status == FINISHED else last_step),
                  wall_seconds=time.perf_counter() - start, status=status, error=error[:400], final=True)
    report(result)
    return result


def _share_compilations(directory: Path) -> None:
    """Let the trials of a sweep share XLA programs through JAX's persistent compilation cache.

    Re-runs of one configuration differ only by seed (a run-time input), so they skip compilation;
    a user's own cache setting (JAX_COMPILATION_CACHE_DIR) wins.
    """
    if os.getenv("JAX_COMPILATION_CACHE_DIR"):
        return
    import jax

    try:
        directory.mkdir(parents=True, exist_ok=True)
        jax.config.update("jax_compilation_cache_dir", str(directory))
    except OSError:  # a worker that cannot write there (remote node): compile as usual
        pass


def _numbers(metrics: Mapping) -> dict:
    """The finite numeric entries of a metrics dict, as plain floats (what Ray and Optuna can store)."""
    out = {}
    for key, value in (metrics or {}).items():
        if isinstance(value, bool) or not isinstance(value, (int, float)) and not hasattr(value, "item"):
            continue
        try:
            value = float(value)
        except (TypeError, ValueError):
            continue
        if math.isfinite(value):
            out[key] = value
    return out


run_trial = trial_entry  # its earlier name (tests and plugins run a trial through it)


def make_trainable(spec: SweepSpec, trials_dir: Path, train_fn: Callable | None = None):
    """The Ray Tune function trainable: a thin wrapper that runs trial_entry and reports through Tune."""
    base, dims, where = spec.base, spec.dims, str(trials_dir)

    def sweep_trial(config):
        from ray import tune

        trial_entry(TrialJob.of(config), base=base, dims=dims, trials_dir=where, train_fn=train_fn,
                    report=tune.report)

    return sweep_trial


