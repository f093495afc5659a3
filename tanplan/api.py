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

This module is a facade: each function checks its arguments' types (tanplan.arguments), makes the Config
(as_config) and forwards to its stage's entry in tanplan.workflow, which does the checks, the work and the
writes (docs/design.md, "Where each stage lives").
"""

from __future__ import annotations

import os
from typing import Any, Callable, Iterable, Mapping

from tanplan.arguments import typed
from tanplan.config import Config, load_config, parse_override
from tanplan.errors import UsageError
from tanplan.outcomes.audit import AuditResult
from tanplan.outcomes.final_audit import FinalAuditResult
from tanplan.outcomes.fit import FitResult
from tanplan.outcomes.launch import LaunchResult
from tanplan.outcomes.optimize import OptimizeResult
from tanplan.outcomes.pipeline import RunResult
from tanplan.outcomes.planning import FrontierResult, PlanResult, Proxy
from tanplan.outcomes.sweep import SweepResult
from tanplan.privacy.init_provenance import released_folder
from tanplan.workflow.frontier_plan import frontier_entry
from tanplan.workflow.planning import PROXY_CAVEAT, plan_entry, proxy_entry

ConfigLike = Config | str | os.PathLike | None
Overrides = Mapping[str, Any] | Iterable[str] | None

__all__ = ["PROXY_CAVEAT", "as_config", "plan", "proxy", "frontier", "train", "pretrain", "launch", "sweep", "fit",
           "run", "optimize", "audit", "final_audit"]


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
    """σ (given, or calibrated to `epsilon` with the accountant of record: "pld" (default, the tightest),
    "rdp", or "both" = pld), η, Σ, ε_TAN and the exact ε of a DP-SGD plan under both accountants (and
    under replace-one with PLD), its regime and what to change. neighbouring: the relation σ is
    calibrated to ("add_remove", or "replace_one": PLD only). delta None: N^-1.1. steps, or epochs (exactly
    one): S = ceil(epochs·N/B), rounded up (tanplan.privacy.plan.steps_of); the result keeps the epochs asked.

    dataset_sizes: the same (B, σ, S) at other N, δ = N^-1.1 (TAN Table 5). out: write report.md, CSV tables
    and figures there. warn(line): a δ ≥ 1/N (default: warnings.warn), said after every check."""
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


@typed
def train(config: ConfigLike = None, out: str | os.PathLike | None = None, *, overrides: Overrides = None,
          resume: bool = False, progress: bool = False, writers: Iterable = ()):
    """One DP-SGD run of the config (its proxy when train.proxy_batch_size > 0) through THE loop; returns
    its RunSummary (summary.json; docs/summary.md). out None: nothing is written (no checkpoint, no resume).
    writers: tracking writers (write(step, scalars, wall_time), close()) besides [tracking]'s."""
    from tanplan.workflow.train import train_entry  # lazy: JAX; `import tanplan` and the planner stay JAX-free

    return train_entry(as_config(config, overrides), out, resume=resume, progress=progress, writers=writers)


@typed
def pretrain(config: ConfigLike = None, out: str | os.PathLike | None = None, *, overrides: Overrides = None,
             progress: bool = False):
    """The config's model trained without privacy on its PUBLIC data (its public tuning set, checked to share
    no example with the private set) into a run folder that [init] path reads; returns its RunSummary."""
    from tanplan.workflow.pretrain import pretrain_entry  # lazy: JAX; `import tanplan` stays JAX-free

    return pretrain_entry(as_config(config, overrides), out, progress=progress)


def load_run(folder: str | os.PathLike):
    """The LoadedRun (module, params, jitted predict, model card) of a run folder, its model/ folder, or a `tanplan
    run` folder (<folder>/launch/model); UsageError (one line) when the folder holds none."""
    from tanplan.engine.release import load_run as read  # lazy: JAX; `import tanplan` stays JAX-free

    if not isinstance(folder, (str, os.PathLike)):
        raise UsageError(f"folder {folder!r} is not allowed: give a run folder's path")
    return read(released_folder(folder, "folder"))


@typed
def launch(config: ConfigLike, out: str | os.PathLike, *, overrides: Overrides = None,
           best: str | os.PathLike | None = None, resume: bool = False, backend: str = "local",
           num_workers: int = 1, gpus_per_worker: int = 0, address: str | None = None,
           allow_public_noise: bool = False, progress: bool = False) -> LaunchResult:
    """The full-scale run, exactly accounted: BudgetExceeded (exit 3) before any step when its ε is over
    privacy.epsilon. best: a sweep's best.json whose configuration is launched. backend "local" (every
    local device) or "ray" (num_workers processes through Ray Train)."""
    from tanplan.workflow.launch import launch_entry  # lazy: JAX; importing the API imports none

    return launch_entry(as_config(config, overrides), out, best=best, resume=resume, backend=backend,
                        num_workers=num_workers, gpus_per_worker=gpus_per_worker, address=address,
                        allow_public_noise=allow_public_noise, progress=progress)


@typed
def sweep(config: ConfigLike, out: str | os.PathLike, *, overrides: Overrides = None,
          proxy_batch_size: int | None = None, trials: int | None = None, top_k: int | None = None,
          seeds: int | None = None, scheduler: str | None = None, max_concurrent: int | None = None,
          address: str | None = None, resume: bool = False, log: Callable[[str], None] = lambda line: None
          ) -> SweepResult:
    """The hyper-parameter search on the constant-η_step proxy (B', σ·B'/B, S) with Ray Tune and Optuna;
    writes out/best.json (the SweepResult's to_dict()), sweep.csv, sweep.md and privacy_spent.json. The
    trials train on the [tuning] data (public by default). Arguments left None take the [sweep] section's
    values. Raises KeyboardInterrupt when interrupted (finished trials are kept: resume=True continues)."""
    from tanplan.workflow.sweep.stage import sweep_entry  # lazy: JAX, Ray

    return sweep_entry(as_config(config, overrides), out, proxy_batch_size=proxy_batch_size, trials=trials,
                       top_k=top_k, seeds=seeds, scheduler=scheduler, max_concurrent=max_concurrent,
                       address=address, resume=resume, log=log)


@typed
def fit(config: ConfigLike, out: str | os.PathLike, *, overrides: Overrides = None,
        best: str | os.PathLike | None = None, batch_sizes: Iterable[int] | str | None = None,
        seeds: int | None = None, vary: str = "batch", factors: Iterable[float] | None = None,
        proxy_batch_size: int | None = None, law: str | None = None, log: Callable = lambda *a, **k: None
        ) -> FitResult:
    """vary="batch": train the proxies at batch_sizes, two seeds or more each (or "auto": the proxy ladder
    chooses rungs and seeds within its budget), fit the batch law (law: knee, noise, flat, log-linear or
    auto) and predict one launch at the target with its interval; vary="steps": the privacy-parameter
    search at constant η (S·k², B/k for k in factors); vary="data": the dataset-size study at fixed (B, σ,
    S). Every proxy trains on the [tuning] data; writes the fit's files and privacy_spent.json into out.
    best: a sweep's best.json whose configuration is trained. None takes the [fit] section's value."""
    from tanplan.workflow.fit import fit_entry  # lazy: JAX (the engine); this module is the planner's API

    return fit_entry(as_config(config, overrides), out, best=best, batch_sizes=batch_sizes, seeds=seeds, vary=vary,
                     factors=factors, proxy_batch_size=proxy_batch_size, law=law, log=log)


@typed
def run(config: ConfigLike, out: str | os.PathLike, *, overrides: Overrides = None, trials: int | None = None,
        proxy_batch_size: int | None = None, launch_anyway: bool = False, tune_data: str | None = None,
        address: str | None = None, baselines: bool = False, baseline_features: str | None = None,
        baseline_public: str | None = None, log: Callable = lambda *a, **k: None, resume: bool = False) -> RunResult:
    """The whole workflow: plan → sweep → proxy ladder (the batch law) → launch, with one report
    (out/report.md) comparing the prediction with the launch. Not launched (RunResult.launched False,
    .reason, .what_to_change; the command exits 4) when the ladder cannot fit the law within its budget or the
    law does not hold, unless launch_anyway. tune_data: "public" | "private" ([tuning] data). Every stage's
    input is checked before any data is read, and the total ε the run will release on the private set before
    any training (BudgetExceeded above privacy.total_epsilon). resume: continue the run in out (same config
    and options); finished runs are kept."""
    from tanplan.workflow.pipeline.run import run_entry  # lazy: JAX; importing the API imports none

    return run_entry(as_config(config, overrides), out, tune_data=tune_data, trials=trials, address=address,
                     log=log, baselines=baselines, baseline_features=baseline_features,
                     baseline_public=baseline_public, proxy_batch_size=proxy_batch_size,
                     launch_anyway=launch_anyway, resume=resume)


@typed
def optimize(config: ConfigLike, out: str | os.PathLike | None, *, overrides: Overrides = None,
             best: str | os.PathLike | None = None, compute: int | None = None, device_hours: float | None = None,
             samples_per_second: float | None = None, launch: bool = False, log: Callable = lambda *a, **k: None,
             progress: bool = False, source: str = "") -> OptimizeResult:
    """The best (B, S, σ) for the config's ε and a compute budget (default: its B·S), simulated by
    constant-η_step proxies; launch=True then trains the recommendation. source: the command line that
    made the config, for the launch commands the report writes."""
    from tanplan.workflow.optimize import optimize_entry  # lazy: the training stage (engine, launch)

    return optimize_entry(as_config(config, overrides), out, best=best, compute=compute, device_hours=device_hours,
                          samples_per_second=samples_per_second, launch=launch, log=log, progress=progress,
                          source=source)


@typed
def audit(config: ConfigLike = None, out: str | os.PathLike | None = None, *, overrides: Overrides = None,
          canaries: int | None = None, proxy_batch_size: int | None = None, confidence: float | None = None,
          progress: bool = False, log: Callable[[str], None] = lambda line: None,
          canary_kind: str = "gradient") -> AuditResult:
    """The privacy audit of the config's run (its proxy at proxy_batch_size): trained with canaries (gradient
    ones, or input-space ones with canary_kind "input"), its ε bounded from below; an AuditResult
    (tanplan.outcomes.audit). The caller decides what a violation means (the command exits 5)."""
    from tanplan.workflow.audit import audit_entry  # lazy: JAX; the planner's API imports this module

    return audit_entry(as_config(config, overrides), out, canaries=canaries, proxy_batch_size=proxy_batch_size,
                       confidence=confidence, progress=progress, log=log, canary_kind=canary_kind)


@typed
def final_audit(config: ConfigLike = None, out: str | os.PathLike | None = None, *, overrides: Overrides = None,
                canaries: int | None = None, kind: str | None = None, proxy_batch_size: int | None = None,
                confidence: float | None = None, progress: bool = False,
                log: Callable[[str], None] = lambda line: None) -> FinalAuditResult:
    """The final-model (black-box) audit of the config's run (its proxy at proxy_batch_size): trained with input
    canaries, scored on its released model only, its ε bounded from below; a FinalAuditResult with its threat
    model (tanplan.outcomes.final_audit). The caller decides what a violation means (the command exits 5)."""
    from tanplan.workflow.final_audit import final_audit_entry  # lazy: JAX; the planner's API imports this module

    return final_audit_entry(as_config(config, overrides), out, canaries=canaries, kind=kind,
                             proxy_batch_size=proxy_batch_size, confidence=confidence, progress=progress, log=log)
