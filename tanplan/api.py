"""The Python API: the functions the command line calls, each returning a typed result (tanplan.outcomes).

    import tanplan

    plan = tanplan.plan(dataset_size=50_000, batch_size=4096, steps=2500, epsilon=8.0)
    summary = tanplan.train("experiments/mnist1d.toml", "runs/x", overrides={"train.steps": 100})
    result = tanplan.run("experiments/mnist1d.toml", "runs/all")   # plan → sweep → ladder → launch

A stage takes a Config, a TOML path or None (the defaults), with `overrides` ({"train.steps": 100} or
["train.steps=100"]), checks every input before it loads data, writes a file or trains (UsageError: one
line naming the value), and returns a frozen dataclass whose to_dict() is the JSON its command prints with
--json. Nothing here prints: progress goes to stderr only when `progress=True`, stage logs to `log`.
Importing this module imports no JAX: planning stays a base install.

A facade: each function checks its arguments' types (tanplan.arguments; a stage that runs JAX also makes the
command line's process settings), makes the Config (as_config) and calls its stage's entry in tanplan.workflow.
"""

from __future__ import annotations

import os
from typing import Any, Callable, Iterable, Mapping

from tanplan.arguments import stage, typed
from tanplan.config import Config, load_config, parse_override
from tanplan.errors import UsageError
from tanplan.outcomes.audit import AuditResult
from tanplan.outcomes.final_audit import FinalAuditResult
from tanplan.outcomes.fit import FitResult
from tanplan.outcomes.launch import LaunchResult
from tanplan.outcomes.optimize import OptimizeResult
from tanplan.outcomes.pipeline import RunResult
from tanplan.outcomes.routes import RoutesResult
from tanplan.outcomes.planning import FrontierResult, PlanResult, Proxy
from tanplan.outcomes.sweep import SweepResult
from tanplan.privacy.init_provenance import released_folder
from tanplan.workflow.frontier_plan import frontier_entry
from tanplan.workflow.planning import PROXY_CAVEAT, plan_entry, proxy_entry

ConfigLike = Config | str | os.PathLike | None
Overrides = Mapping[str, Any] | Iterable[str] | None

__all__ = ["PROXY_CAVEAT", "as_config", "plan", "proxy", "frontier", "train", "pretrain", "launch", "sweep", "fit",
           "run", "compare_routes", "optimize", "audit", "final_audit"]


@typed
def as_config(config: ConfigLike = None, overrides: Overrides = None) -> Config:
    """A validated Config from a Config, a TOML path or None (the defaults), with dotted overrides applied:
    {"train.steps": 100} or ["train.steps=100"] (values then read as TOML, as --set reads them)."""
    cfg = config if isinstance(config, Config) else load_config(config)
    if isinstance(overrides, Mapping):
        pairs = dict(overrides)
    elif isinstance(overrides, str):
        raise UsageError(f"overrides {overrides!r} is not allowed: give a mapping or a list of \"section.key=value\"")
    else:
        pairs = dict(parse_override(text) for text in overrides or ())
    return cfg.with_overrides(pairs) if pairs else cfg


# Planning (no JAX): tanplan.workflow.planning and .frontier_plan


@typed
def plan(dataset_size: int, batch_size: int, steps: int | None = None, *, epochs: float | None = None,
         sigma: float | None = None, epsilon: float | None = None, delta: float | None = None,
         accountant: str = "pld", neighbouring: str = "add_remove", dataset_sizes: Iterable[int] = (),
         out: str | os.PathLike | None = None, warn: Callable[[str], None] | None = None) -> PlanResult:
    """σ (given, or calibrated to `epsilon` with the accountant of record: "pld" (default), "rdp", or "both" =
    pld), η, Σ, ε_TAN and the exact ε of a DP-SGD plan (both accountants; replace-one with PLD), its regime and
    what to change. neighbouring: "add_remove" or "replace_one" (PLD only). delta None: N^-1.1. steps, or
    epochs: S = ceil(epochs·N/B). dataset_sizes: the same (B, σ, S) at other N (TAN Table 5). out: report.md,
    CSV tables and figures. warn(line): a δ ≥ 1/N (default: warnings.warn), said after every check."""
    return plan_entry(dataset_size, batch_size, steps, epochs=epochs, sigma=sigma, epsilon=epsilon, delta=delta,
                      accountant=accountant, neighbouring=neighbouring, dataset_sizes=dataset_sizes, out=out,
                      warn=warn)


@typed
def proxy(dataset_size: int, batch_size: int, steps: int | None = None, *, epochs: float | None = None,
          proxy_batch_sizes: Iterable[int] = (), savings: float | None = None, sigma: float | None = None,
          epsilon: float | None = None, delta: float | None = None, accountant: str = "pld",
          neighbouring: str = "add_remove", warn: Callable[[str], None] | None = None) -> tuple[Proxy, ...]:
    """The constant-η_step proxies (B', σ·B'/B, S) of the target: one per proxy batch size, or B' = B/savings.
    The target's S: steps, or ceil(epochs·N/B) (as plan())."""
    return proxy_entry(dataset_size, batch_size, steps, epochs=epochs, proxy_batch_sizes=proxy_batch_sizes,
                       savings=savings, sigma=sigma, epsilon=epsilon, delta=delta, accountant=accountant,
                       neighbouring=neighbouring, warn=warn)


@typed
def frontier(dataset_size: int, epsilon: float, *, compute: int | None = None, device_hours: float | None = None,
             samples_per_second: float | None = None, delta: float | None = None, model: str = "cnn1d",
             min_batch_size: int = 1, steps_factor: float = 2.0, accountant: str = "pld") -> FrontierResult:
    """The budget frontier: every (B, S, σ) with B·S ≤ C at ε (σ calibrated with the accountant of record,
    add/remove-one; RDP's ε beside it). C = compute, or device_hours × 3600 × samples_per_second (measured
    by the DP-step benchmark of `model` when not given: that one path needs the train extra)."""
    return frontier_entry(dataset_size, epsilon, compute=compute, device_hours=device_hours,
                          samples_per_second=samples_per_second, delta=delta, model=model,
                          min_batch_size=min_batch_size, steps_factor=steps_factor, accountant=accountant)


# Training stages: each entry imports JAX, so each is imported when called (`import tanplan` stays JAX-free)


@stage
def train(config: ConfigLike = None, out: str | os.PathLike | None = None, *, overrides: Overrides = None,
          resume: bool = False, progress: bool = False, writers: Iterable = ()):
    """One DP-SGD run of the config (its proxy when train.proxy_batch_size > 0); its RunSummary (summary.json).
    out None: nothing written. writers: tracking writers (write(step, scalars, wall_time), close())."""
    from tanplan.workflow.train import train_entry  # lazy: JAX; `import tanplan` and the planner stay JAX-free

    return train_entry(as_config(config, overrides), out, resume=resume, progress=progress, writers=writers)


@stage
def pretrain(config: ConfigLike = None, out: str | os.PathLike | None = None, *, overrides: Overrides = None,
             progress: bool = False):
    """The model trained without privacy on the PUBLIC tuning set (checked to share no example with the private
    set) into a run folder that [init] path reads; its RunSummary."""
    from tanplan.workflow.pretrain import pretrain_entry  # lazy: JAX; `import tanplan` stays JAX-free

    return pretrain_entry(as_config(config, overrides), out, progress=progress)


def load_run(folder: str | os.PathLike):
    """The LoadedRun (module, params, jitted predict, model card) of a run folder, its model/ folder, or a `tanplan
    run` folder (<folder>/launch/model); UsageError (one line) when the folder holds none."""
    from tanplan.engine.release import load_run as read  # lazy: JAX; `import tanplan` stays JAX-free

    if not isinstance(folder, (str, os.PathLike)):
        raise UsageError(f"folder {folder!r} is not allowed: give a run folder's path")
    return read(released_folder(folder, "folder"))


@stage
def launch(config: ConfigLike, out: str | os.PathLike, *, overrides: Overrides = None,
           best: str | os.PathLike | None = None, resume: bool = False, backend: str = "local",
           num_workers: int = 1, gpus_per_worker: int = 0, address: str | None = None,
           allow_public_noise: bool = False, progress: bool = False) -> LaunchResult:
    """The full-scale run, exactly accounted (BudgetExceeded before any step over privacy.epsilon). best: a
    sweep's best.json to launch. backend "local" (every local device) or "ray" (num_workers, Ray Train)."""
    from tanplan.workflow.launch import launch_entry  # lazy: JAX; importing the API imports none

    return launch_entry(as_config(config, overrides), out, best=best, resume=resume, backend=backend,
                        num_workers=num_workers, gpus_per_worker=gpus_per_worker, address=address,
                        allow_public_noise=allow_public_noise, progress=progress)


@stage
def sweep(config: ConfigLike, out: str | os.PathLike, *, overrides: Overrides = None,
          proxy_batch_size: int | None = None, trials: int | None = None, top_k: int | None = None,
          seeds: int | None = None, scheduler: str | None = None, max_concurrent: int | None = None,
          address: str | None = None, resume: bool = False, log: Callable[[str], None] = lambda line: None
          ) -> SweepResult:
    """The hyper-parameter search on the constant-η_step proxy (B', σ·B'/B, S) with Ray Tune and Optuna, on the
    [tuning] data; writes out/best.json (the SweepResult), sweep.csv, sweep.md, privacy_spent.json. None: the
    [sweep] section's. KeyboardInterrupt when interrupted (finished trials kept: resume=True continues)."""
    from tanplan.workflow.sweep.stage import sweep_entry  # lazy: JAX, Ray

    return sweep_entry(as_config(config, overrides), out, proxy_batch_size=proxy_batch_size, trials=trials,
                       top_k=top_k, seeds=seeds, scheduler=scheduler, max_concurrent=max_concurrent,
                       address=address, resume=resume, log=log)


@stage
def fit(config: ConfigLike, out: str | os.PathLike, *, overrides: Overrides = None,
        best: str | os.PathLike | None = None, batch_sizes: Iterable[int] | str | None = None,
        seeds: int | None = None, vary: str = "batch", factors: Iterable[float] | None = None,
        proxy_batch_size: int | None = None, law: str | None = None, log: Callable = lambda *a, **k: None
        ) -> FitResult:
    """vary="batch": proxies at batch_sizes, two seeds or more each ("auto": the ladder chooses), the batch law
    (knee, noise, flat, log-linear or auto) and one launch predicted with its interval; "steps": the privacy-
    parameter search at constant η (S·k², B/k); "data": the dataset-size study. Proxies train on the [tuning]
    data. best: a sweep's best.json to train. None takes the [fit] section's value."""
    from tanplan.workflow.fit import fit_entry  # lazy: JAX (the engine); this module is the planner's API

    return fit_entry(as_config(config, overrides), out, best=best, batch_sizes=batch_sizes, seeds=seeds, vary=vary,
                     factors=factors, proxy_batch_size=proxy_batch_size, law=law, log=log)


@stage
def run(config: ConfigLike, out: str | os.PathLike, *, overrides: Overrides = None, trials: int | None = None,
        proxy_batch_size: int | None = None, launch_anyway: bool = False, tune_data: str | None = None,
        address: str | None = None, baselines: bool = False, baseline_features: str | None = None,
        baseline_public: str | None = None, log: Callable = lambda *a, **k: None, resume: bool = False) -> RunResult:
    """plan → sweep → proxy ladder (the batch law) → launch, one report (out/report.md) comparing prediction and
    launch; not launched (.launched False, .reason, .what_to_change; exit 4) when the law cannot be fitted or
    does not hold, unless launch_anyway. tune_data: "public" | "private". Inputs are checked before any data
    is read, the total ε before any training (BudgetExceeded). resume: continue the run in out."""
    from tanplan.workflow.pipeline.run import run_entry  # lazy: JAX; importing the API imports none

    return run_entry(as_config(config, overrides), out, tune_data=tune_data, trials=trials, address=address,
                     log=log, baselines=baselines, baseline_features=baseline_features,
                     baseline_public=baseline_public, proxy_batch_size=proxy_batch_size,
                     launch_anyway=launch_anyway, resume=resume)


@stage
def compare_routes(config: ConfigLike, out: str | os.PathLike, routes: Iterable[str] | str, *,
                   overrides: Overrides = None, launch_best: bool = False, trials: int | None = None,
                   proxy_batch_size: int | None = None, tune_data: str | None = None, address: str | None = None,
                   log: Callable = lambda *a, **k: None, resume: bool = False) -> RoutesResult:
    """`run --routes`: the routes (scratch, finetune, adapters, heads) predicted on public data and compared
    (out/routes.md, .json, .png); launch_best: the recommended one launched into out/launch, and only it."""
    from tanplan.workflow.pipeline.routes import routes_entry  # lazy: JAX

    return routes_entry(as_config(config, overrides), out, routes, launch_best=launch_best, tune_data=tune_data,
                        trials=trials, proxy_batch_size=proxy_batch_size, address=address, log=log, resume=resume)


@stage
def optimize(config: ConfigLike, out: str | os.PathLike | None, *, overrides: Overrides = None,
             best: str | os.PathLike | None = None, compute: int | None = None, device_hours: float | None = None,
             samples_per_second: float | None = None, launch: bool = False, log: Callable = lambda *a, **k: None,
             progress: bool = False, source: str = "") -> OptimizeResult:
    """The best (B, S, σ) for the config's ε and a compute budget (default: its B·S), simulated by proxies;
    launch=True trains it. source: the command line that made the config (the report's launch commands)."""
    from tanplan.workflow.optimize import optimize_entry  # lazy: the training stage (engine, launch)

    return optimize_entry(as_config(config, overrides), out, best=best, compute=compute, device_hours=device_hours,
                          samples_per_second=samples_per_second, launch=launch, log=log, progress=progress,
                          source=source)


@stage
def audit(config: ConfigLike = None, out: str | os.PathLike | None = None, *, overrides: Overrides = None,
          canaries: int | None = None, proxy_batch_size: int | None = None, confidence: float | None = None,
          progress: bool = False, log: Callable[[str], None] = lambda line: None,
          canary_kind: str = "gradient") -> AuditResult:
    """The privacy audit of the config's run (its proxy at proxy_batch_size): trained with gradient canaries (or
    input-space ones, canary_kind "input"), its ε bounded from below. The caller judges a violation (exit 5)."""
    from tanplan.workflow.audit import audit_entry  # lazy: JAX; the planner's API imports this module

    return audit_entry(as_config(config, overrides), out, canaries=canaries, proxy_batch_size=proxy_batch_size,
                       confidence=confidence, progress=progress, log=log, canary_kind=canary_kind)


@stage
def final_audit(config: ConfigLike = None, out: str | os.PathLike | None = None, *, overrides: Overrides = None,
                canaries: int | None = None, kind: str | None = None, proxy_batch_size: int | None = None,
                confidence: float | None = None, progress: bool = False,
                log: Callable[[str], None] = lambda line: None) -> FinalAuditResult:
    """The final-model (black-box) audit: input canaries trained in, scored on the released model only, its ε
    bounded from below, with its threat model. The caller judges a violation (exit 5)."""
    from tanplan.workflow.final_audit import final_audit_entry  # lazy: JAX; the planner's API imports this module

    return final_audit_entry(as_config(config, overrides), out, canaries=canaries, kind=kind,
                             proxy_batch_size=proxy_batch_size, confidence=confidence, progress=progress, log=log)
