"""The Python API: the functions the command line calls, each returning a typed result
(tanplan.outcomes).

    import tanplan

    plan = tanplan.plan(dataset_size=50_000, batch_size=4096, steps=2500, epsilon=8.0)
    summary = tanplan.train("experiments/mnist1d.toml", "runs/x", overrides={"train.steps": 100})
    result = tanplan.run("experiments/mnist1d.toml", "runs/all")   # plan → sweep → ladder → launch

A stage takes a Config, a TOML path or None (the defaults), with `overrides` ({"train.steps": 100} or
["train.steps=100"]), checks every input before it loads data, writes a file or trains (UsageError: one
line naming the value), and returns a frozen dataclass whose to_dict() is the JSON its command prints with
--json. Nothing here prints: progress goes to stderr only when `progress=True`, stage logs to `log`.
Importing this module imports no JAX: planning stays a base install.
"""

from __future__ import annotations

import collections.abc
import dataclasses
import functools
import inspect
import numbers
import os
import types
import typing
import warnings
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

from tanplan.config import Config, load_config, parse_override, with_tuned
from tanplan.errors import UsageError
from tanplan.fileio import write_json_atomic
from tanplan.outcomes.audit import AuditResult
from tanplan.outcomes.final_audit import FinalAuditResult
from tanplan.outcomes.fit import FitResult
from tanplan.outcomes.launch import LaunchResult
from tanplan.outcomes.optimize import OptimizeResult
from tanplan.outcomes.privacy_spent import Spent
from tanplan.outcomes.pipeline import RunResult
from tanplan.outcomes.planning import FrontierResult, PlanResult, Proxy
from tanplan.outcomes.sweep import SweepResult
from tanplan.privacy import tan
from tanplan.ray_session import check_address
from tanplan.privacy.plan import Plan, advice, default_delta, steps_of, with_dataset_size
from tanplan.reports import fit as fit_report
from tanplan.reports.plan import write_plan_report
from tanplan.runtime import driver_on_cpu
from tanplan.workflow import privacy_spent, total_budget, tuning
from tanplan.workflow.best import load_best_overrides, recorded_releases, recording
from tanplan.workflow.frontier_plan import SECONDS_PER_HOUR, frontier_plan
from tanplan.workflow.inputs import check_inputs, check_out_dir, check_resume, check_sweep_space
from tanplan.workflow.pretrain import check_public, pretrain_config
from tanplan.workflow.sweep.study import check_study_file

ConfigLike = Config | str | os.PathLike | None
Overrides = Mapping[str, Any] | Iterable[str] | None


def _typed(fn):
    """fn with its arguments checked against its annotations before it runs: a value of the wrong type is a
    UsageError naming the argument and what it takes (`train(123)`, `out=123`, `overrides=[b"..."]`,
    `plan(sigma=True)`), never a TypeError from deep inside. Numbers: int and float take any real number
    but a bool (the stage checks the range and whether it is whole); bool takes True or False only."""
    signature = inspect.signature(fn)
    hints: dict = {}

    @functools.wraps(fn)
    def checked(*args, **kwargs):
        if not hints:
            hints.update({k: v for k, v in typing.get_type_hints(fn).items() if k != "return"})
        try:
            bound = signature.bind(*args, **kwargs)
        except TypeError as err:
            raise UsageError(f"tanplan.{fn.__name__}(): {err}") from None
        for name, value in bound.arguments.items():
            hint = hints.get(name)
            if hint is not None and not _conforms(value, hint):
                shown = repr(value) if len(repr(value)) <= 60 else repr(value)[:57] + "..."
                raise UsageError(f"tanplan.{fn.__name__}({name}={shown}) is not allowed: {name} takes "
                                 f"{_describe(hint)}")
            if isinstance(value, numbers.Integral) and type(value) is not int and not isinstance(value, bool):
                bound.arguments[name] = int(value)  # numpy's integers: the stages check `isinstance(x, int)`
        return fn(*bound.args, **bound.kwargs)

    return checked


def _conforms(value, hint) -> bool:
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint is Any:
        return True
    if origin in (typing.Union, types.UnionType):
        return any(_conforms(value, a) for a in args)
    if hint is type(None):
        return value is None
    if hint is bool:
        return isinstance(value, bool) or type(value).__name__ == "bool_"
    if hint in (int, float):
        return isinstance(value, numbers.Real) and not isinstance(value, bool) and type(value).__name__ != "bool_"
    if hint is str:
        return isinstance(value, str)
    base = origin or hint
    if base is collections.abc.Callable:
        return callable(value)
    if base is collections.abc.Mapping:
        return isinstance(value, Mapping) and all(_conforms(k, args[0]) for k in value) if args else isinstance(
            value, Mapping)
    if base is collections.abc.Iterable:
        if not isinstance(value, collections.abc.Iterable) or isinstance(value, (str, bytes)):
            return False
        sized = isinstance(value, (list, tuple, set, frozenset, Mapping))  # never consume an iterator to check it
        return not (args and sized) or all(_conforms(v, args[0]) for v in value)
    if isinstance(base, type):
        return isinstance(value, base)
    return True


def _describe(hint) -> str:
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        return " or ".join(dict.fromkeys(_describe(a) for a in args))
    names = {type(None): "None", bool: "True or False", int: "a whole number", float: "a number", str: "a string",
             os.PathLike: "a path", Config: "a tanplan Config"}
    if hint in names:
        return names[hint]
    base = origin or hint
    if base is collections.abc.Callable:
        return "a function"
    if base is collections.abc.Mapping:
        return "a mapping"
    if base is collections.abc.Iterable:
        return f"a list, each item {_describe(args[0])}" if args else "a list"
    return getattr(hint, "__name__", str(hint))


@_typed
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


PROXY_CAVEAT = ("The proxy is a simulation for choosing hyper-parameters: it trains at the target's η_step and S, "
                "so it should behave like the target. Its own ε is no guarantee for anything you release, and it is "
                "not accounted in the target's ε: it is what the proxy costs the data it trains on (large: σ' is "
                "small). Train proxies on public data of the same task (`tanplan run` does by default, [tuning] "
                "data = \"public\"), or count them: with [tuning] data = \"private\" `tanplan run` reports the total "
                "ε, and `tanplan sweep` and `tanplan fit` write privacy_spent.json.")


# ----------------------------------------------------------------------------------------------------
# Planning (no JAX)


@_typed
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
    target = _target(dataset_size, batch_size, steps_of(dataset_size, batch_size, steps, epochs), sigma, epsilon,
                     delta, accountant, neighbouring, warn)
    accountants = _reported(target)
    sizes = tuple(with_dataset_size(target, int(n)) for n in dataset_sizes) or None
    figures = write_plan_report(target, out, accountants, epochs_asked=epochs) if out is not None else None
    return PlanResult(plan=target, accountants=accountants, regime_text=tan.REGIME_TEXT[target.regime],
                      advice=tuple(advice(target)), dataset_sizes=sizes, figures=figures,
                      epochs_asked=None if epochs is None else float(epochs))


@_typed
def proxy(dataset_size: int, batch_size: int, steps: int | None = None, *, epochs: float | None = None,
          proxy_batch_sizes: Iterable[int] = (), savings: float | None = None, sigma: float | None = None,
          epsilon: float | None = None, delta: float | None = None, accountant: str = "pld",
          neighbouring: str = "add_remove", warn: Callable[[str], None] | None = None) -> tuple[Proxy, ...]:
    """The constant-η_step proxies (B', σ·B'/B, S) of the target: one per proxy batch size, or B' = B/savings.
    The target's S: steps, or ceil(epochs·N/B) (as plan())."""
    sizes = list(proxy_batch_sizes)
    if (savings is None) == (not sizes):
        raise UsageError("give proxy batch sizes or a savings factor, not both and not neither")
    target = _target(dataset_size, batch_size, steps_of(dataset_size, batch_size, steps, epochs), sigma, epsilon,
                     delta, accountant, neighbouring, warn)
    if savings is not None:
        if savings < 1:
            raise UsageError(f"--savings {savings:g} is not allowed: must be ≥ 1")
        sizes = [max(1, round(target.batch_size / savings))]
    for b in sizes:
        if b > target.batch_size:
            raise UsageError(f"--proxy-batch-size {b} is not allowed: must be ≤ the target batch size {target.batch_size}")
    rows = []
    for b in sizes:
        p = target.proxy(b)
        rows.append(Proxy(proxy_batch_size=p.batch_size, proxy_sigma=p.sigma, steps=p.steps, eta_step=p.eta_step,
                          savings=target.savings(p), proxy_regime=p.regime.value, dataset_size=target.dataset_size,
                          batch_size=target.batch_size, sigma=target.sigma, delta=target.delta,
                          target_epsilon=target.epsilon(), target_accountant=target.accountant,
                          target_eps_rdp=target.epsilon("rdp"), note=PROXY_CAVEAT))
    return tuple(rows)


@_typed
def frontier(dataset_size: int, epsilon: float, *, compute: int | None = None, device_hours: float | None = None,
             samples_per_second: float | None = None, delta: float | None = None, model: str = "cnn1d",
             min_batch_size: int = 1, steps_factor: float = 2.0, accountant: str = "pld") -> FrontierResult:
    """The budget frontier: every (B, S, σ) with B·S ≤ C at ε (σ calibrated with the accountant of record,
    add/remove-one; RDP's ε beside it). C = compute, or device_hours × 3600 × samples_per_second (measured
    by the DP-step benchmark of `model` when not given: that one path needs the train extra)."""
    if accountant not in ("rdp", "pld"):
        raise UsageError(f"accountant {accountant!r} is not allowed: use pld or rdp")
    if steps_factor <= 1:
        raise UsageError(f"--steps-factor {steps_factor:g} is not allowed: must be > 1")
    if samples_per_second is not None and device_hours is None:
        raise UsageError("--samples-per-second is not allowed without --device-hours")
    return frontier_plan(dataset_size, epsilon, delta, compute=compute, device_hours=device_hours,
                         samples_per_second=samples_per_second, model=model, min_batch_size=min_batch_size,
                         factor=steps_factor, accountant=accountant)


def _reported(target) -> tuple[str, ...]:
    """Every accountant reported, the one of record first."""
    return ("rdp", "pld") if target.accountant == "rdp" else ("pld", "rdp")


def _target(n, b, s, sigma, epsilon, delta, accountant, neighbouring, warn):
    """The Plan the arguments describe (σ calibrated when epsilon is given); warns when δ ≥ 1/N, after
    every check (an informational line never precedes an error)."""
    if (sigma is None) == (epsilon is None):
        raise UsageError("give sigma or epsilon (σ is then calibrated to it), not both and not neither")
    if accountant not in ("rdp", "pld", "both"):
        raise UsageError(f"accountant {accountant!r} is not allowed: use pld, rdp or both")
    if neighbouring not in ("add_remove", "replace_one"):
        raise UsageError(f"neighbouring {neighbouring!r} is not allowed: use add_remove or replace_one")
    record = "rdp" if accountant == "rdp" else "pld"
    if isinstance(b, int) and isinstance(n, int) and b > n:
        raise UsageError(f"--batch-size {b} is not allowed: must be ≤ --dataset-size {n}")
    if neighbouring == "replace_one" and record == "rdp":
        raise UsageError("--neighbouring replace_one is not allowed with --accountant rdp: only PLD computes "
                         "replace-one for Poisson sampling")
    chosen = default_delta(n) if delta is None else delta
    if epsilon is not None:
        target = Plan.from_budget(n, b, s, epsilon, chosen, record, neighbouring)
    else:
        target = Plan(n, b, s, sigma, chosen, None, record, neighbouring)
    if target.delta_above_one_over_n:
        (warn or _warn)(f"delta={chosen:g} is ≥ 1/N={1.0 / n:.3g}: such a δ allows releasing an example outright; "
                        "training commands refuse it unless privacy.allow_large_delta = true")
    return target


def _warn(line: str) -> None:
    warnings.warn(line, stacklevel=3)


# ----------------------------------------------------------------------------------------------------
# One run


@_typed
def train(config: ConfigLike = None, out: str | os.PathLike | None = None, *, overrides: Overrides = None,
          resume: bool = False, progress: bool = False, writers: Iterable = ()):
    """One DP-SGD run of the config (its proxy when train.proxy_batch_size > 0) through THE loop; returns
    its RunSummary (summary.json; docs/summary.md). out None: nothing is written (no checkpoint, no resume).
    writers: tracking writers (write(step, scalars, wall_time), close()) besides [tracking]'s."""
    cfg = as_config(config, overrides)
    check_inputs(cfg)
    check_out_dir(out)
    check_resume(out, resume)
    from tanplan.engine.loop import train_and_evaluate  # lazy: JAX; `import tanplan` and the planner stay JAX-free

    return train_and_evaluate(cfg, Path(out) if out is not None else None, resume=resume, progress=progress,
                              writers=writers)


@_typed
def pretrain(config: ConfigLike = None, out: str | os.PathLike | None = None, *, overrides: Overrides = None,
             progress: bool = False):
    """The config's model trained without privacy on its PUBLIC data (its public tuning set, checked to share
    no example with the private set) into a run folder that [init] path reads; returns its RunSummary."""
    cfg = as_config(config, overrides)
    public_cfg = pretrain_config(cfg)  # no public data: refused before anything is read
    check_inputs(public_cfg)
    check_out_dir(out)
    from tanplan.engine.loop import train_and_evaluate  # lazy: JAX; `import tanplan` and the planner stay JAX-free
    from tanplan.engine.setup import load_data  # lazy: JAX; `import tanplan` and the planner stay JAX-free

    check_public(cfg, load_data)
    return train_and_evaluate(public_cfg, Path(out) if out is not None else None, progress=progress)


@_typed
def launch(config: ConfigLike, out: str | os.PathLike, *, overrides: Overrides = None,
           best: str | os.PathLike | None = None, resume: bool = False, backend: str = "local",
           num_workers: int = 1, gpus_per_worker: int = 0, address: str | None = None,
           allow_public_noise: bool = False, progress: bool = False) -> LaunchResult:
    """The full-scale run, exactly accounted: BudgetExceeded (exit 3) before any step when its ε is over
    privacy.epsilon. best: a sweep's best.json whose configuration is launched. backend "local" (every
    local device) or "ray" (num_workers processes through Ray Train)."""
    import json

    from tanplan.workflow.launch import check_total, check_tuning_runs, tuning_of_best, with_tuning  # lazy: JAX; the planner's API imports this module
    from tanplan.workflow.launch import launch as launch_stage  # lazy: JAX; importing the API imports none

    cfg = as_config(config, overrides)
    cfg = with_tuned(cfg, load_best_overrides(best), f"--best {best}")
    if backend not in ("local", "ray"):
        raise UsageError(f"backend {backend!r} is not allowed: use local or ray")
    if backend == "local" and (num_workers != 1 or gpus_per_worker or address):
        raise UsageError("--num-workers, --gpus-per-worker and --address are not allowed with --backend local: "
                         "use --backend ray")
    check_address(address)  # malformed or unreachable: before any data is read
    if backend == "ray":
        driver_on_cpu()  # the workers own the accelerators: the driver's model check stays on the CPU
    check_inputs(cfg)
    check_out_dir(out)
    check_resume(out, resume)
    record = trials = note = None
    folders, recorded = [], recorded_releases(best) if best else None  # the registry beside best.json, checked
    if best:  # where the sweep's proxies trained (recomputed from its runs): composed with the launch if private
        record, trials, note = tuning_of_best(json.loads(Path(best).read_text(encoding="utf-8")), best, cfg)
        record, folders, note = recorded.tuning(record, trials, note)  # and every release recorded for best.json

    def check(run):  # before any step: the ledgers usable, the total within privacy.total_epsilon
        if trials is not None:
            check_tuning_runs(trials, run)
        recorded.check(run)
        check_total(cfg, run, folders)

    check = check if best else None
    result = launch_stage(cfg, out, progress=progress, backend=backend, resume=resume, num_workers=num_workers,
                          gpus_per_worker=gpus_per_worker, address=address, allow_public_noise=allow_public_noise,
                          before_training=check)
    if record is not None and result.accounting:
        result = with_tuning(result, Path(out), record, folders)
    return dataclasses.replace(result, tuning_note=note)


# ----------------------------------------------------------------------------------------------------
# Stages


@_typed
def sweep(config: ConfigLike, out: str | os.PathLike, *, overrides: Overrides = None,
          proxy_batch_size: int | None = None, trials: int | None = None, top_k: int | None = None,
          seeds: int | None = None, scheduler: str | None = None, max_concurrent: int | None = None,
          address: str | None = None, resume: bool = False, log: Callable[[str], None] = lambda line: None
          ) -> SweepResult:
    """The hyper-parameter search on the constant-η_step proxy (B', σ·B'/B, S) with Ray Tune and Optuna;
    writes out/best.json (the SweepResult's to_dict()), sweep.csv, sweep.md and privacy_spent.json. The
    trials train on the [tuning] data (public by default). Arguments left None take the [sweep] section's
    values. Raises KeyboardInterrupt when interrupted (finished trials are kept: resume=True continues)."""
    from tanplan.workflow.sweep.search import check_address, check_proxy, prepare, run_sweep  # lazy: JAX, Ray
    from tanplan.workflow.pipeline import costs  # lazy: JAX (the ladder's module), as search

    if top_k is not None and top_k < 0:
        raise UsageError(f"--top-k {top_k} is not allowed: must be >= 0")
    cfg = as_config(config, overrides)
    driver_on_cpu()  # the trials own the accelerators: the driver's model check stays on the CPU
    check_inputs(cfg)  # names, paths, the folder, the address, the study, the space: before any data is read
    check_out_dir(out)
    check_address(address)
    check_study_file(Path(out), resume=resume)
    check_proxy(cfg, proxy_batch_size)
    check_sweep_space(cfg)
    tuning.check(cfg)
    tune = tuning.for_config(cfg)  # the trials train the proxies' config: [tuning] data, public by default
    spec = prepare(tune.proxy_cfg, proxy_batch_size=proxy_batch_size, trials=trials, top_k=top_k, seeds=seeds,
                   scheduler=scheduler, max_concurrent=max_concurrent)
    if cfg.privacy.private and tune.data == "private":  # exit 3 before any trial when over privacy.total_epsilon
        parts = total_budget.sweep_parts(tune.proxy_cfg, tune.private_size, spec.proxy.batch_size, spec.trials,
                                         spec.top_k, spec.seeds)
        total_budget.check(total_budget.of_config(cfg, tune.private_size, parts), cfg)
    t, p = spec.target, spec.proxy
    planned_cost = costs.planned_compute(cfg, [costs.sweep_cost(cfg, p.batch_size, spec.trials, spec.top_k, spec.seeds)])
    for line in costs.compute_lines(costs.timed(planned_cost, cfg, out, measure=False)):
        log(line)
    log(f"tanplan sweep: target B={t.batch_size} σ={_g(t.sigma)} S={t.steps}  ->  proxy "
        f"B'={p.batch_size} σ'={_g(p.sigma)}  ({t.batch_size / p.batch_size:.3g}x cheaper), "
        f"{spec.trials} trials over {', '.join(d.name for d in spec.dims)}; proxies learn on {tune.source}")
    summary = run_sweep(spec, Path(out), address=address, resume=resume, log=log)
    summary = dataclasses.replace(
        summary, privacy_spent=privacy_spent.report(Path(out) / "trials", out, "sweep trials and re-runs", tune),
        tuning=tune.record(),
        trials_dir="trials")  # `launch --best` composes these ledgers with the launch's (private tuning)
    write_json_atomic(Path(out) / "best.json", summary.to_dict())
    return summary


@_typed
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
    from tanplan.workflow import fit as fit_stage  # lazy: JAX (the engine); this module is the planner's API
    from tanplan.workflow import ladder  # lazy: JAX, as fit
    from tanplan.workflow.pipeline import costs  # lazy: JAX, as fit

    if vary not in ("batch", "steps", "data"):
        raise UsageError(f"vary {vary!r} is not allowed: use batch, steps or data")
    cfg = as_config(config, overrides)
    cfg = with_tuned(cfg, load_best_overrides(best), f"--best {best}")
    section = cfg.fit
    sizes = batch_sizes or section.batch_sizes
    sizes = sizes if sizes == "auto" else list(sizes)
    seeds = seeds or section.seeds
    out = Path(out)
    check_inputs(cfg)  # before any data is read
    check_out_dir(out)
    tuning.check(cfg)
    if vary == "batch" and sizes == "auto":
        ladder.check_ladder(cfg)
    elif vary == "batch":
        fit_stage.check_batch_sizes(sizes, cfg.train.batch_size, seeds)
    if vary in ("data", "steps"):
        if proxy_batch_size is None and sizes == "auto":
            raise UsageError(f"--vary {vary} needs --proxy-batch-size (or explicit --batch-sizes): the proxy B' "
                             "that every member trains")
        proxy_b = proxy_batch_size or min(sizes)
    tune = tuning.for_config(cfg)  # every proxy of every mode trains on the [tuning] data (public by default)
    proxies = tune.proxy_cfg
    if cfg.privacy.private and tune.data == "private":  # exit 3 before any run when over the total budget
        n = tune.private_size
        if vary == "batch":
            parts = ([total_budget.ladder_part(proxies, n)] if sizes == "auto" else
                     total_budget.fit_parts(proxies, n, sizes, seeds))
        else:
            from tanplan.engine.setup import load_data  # lazy: the engine; this module is the planner's API

            available = load_data(proxies.with_overrides({"data.train_examples": 0})).num_train if vary == "data" else n
            parts = total_budget.vary_parts(proxies, n, vary, list(factors or ([0.25, 0.5, 1.0] if vary == "data" else
                                                                               section.factors)), proxy_b, seeds,
                                            available)
        planned = total_budget.check(total_budget.of_config(cfg, n, parts), cfg).to_dict()
    else:
        planned = {}
    if vary == "batch":  # every input checked: the cost, before any of it is spent
        planned_cost = costs.planned_compute(cfg, [costs.law_cost(cfg, sizes, seeds)])
        for line in costs.compute_lines(costs.timed(planned_cost, cfg, out, measure=False)):
            log(line)
    with recording(best, out, "fit --best", private=bool(planned)):  # on the private set: launch --best composes it
        if vary == "data":
            result = fit_stage.dataset_size_study(proxies, list(factors or [0.25, 0.5, 1.0]), proxy_b, seeds, out,
                                                  log=log)
        elif vary == "steps":
            result = fit_stage.privacy_parameter_search(proxies, list(factors or section.factors), proxy_b, seeds,
                                                        out, log=log)
        elif sizes == "auto":
            result = ladder.ladder_fit(proxies.with_overrides({"fit.law": law or section.law}), out, log=log)
        else:
            result = fit_stage.fit_batch_law(proxies, sizes, seeds, out, level=section.level, law=law or section.law,
                                             log=log, max_half_width=section.max_half_width / 100)
            fit_report.write_fit_report(result, out)
    spent = _report_spent(out, tune, log)
    # and the bound on the total checked before any run (private tuning data)
    return dataclasses.replace(result, privacy_spent=spent, tuning=tune.record(), **planned)


def _report_spent(out: Path, tune, log) -> Spent:
    """privacy_spent.json of the fit's runs, and one line saying what it is the cost to."""
    spent = privacy_spent.report(out, out, "proxy runs of this fit", tune)
    whose = (f"the public tuning data ({tune.source}; no private example)" if tune.data == "public"
             else "the private training set")
    log(f"ε of its {spent.runs} runs composed: {privacy_spent.describe(spent)}: the cost to {whose} "
        f"({out / privacy_spent.FILE})")
    return spent


@_typed
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
    from tanplan.workflow.pipeline import run_pipeline  # lazy: JAX; importing the API imports none

    if tune_data not in (None, "public", "private"):
        raise UsageError(f"tune_data {tune_data!r} is not allowed: use public or private")
    cfg = as_config(config, overrides)
    if tune_data:
        cfg = cfg.with_overrides({"tuning.data": tune_data})
    return run_pipeline(cfg, out, trials=trials, address=address, log=log, baselines=baselines,
                        baseline_features=baseline_features, baseline_public=baseline_public,
                        proxy_batch_size=proxy_batch_size, launch_anyway=launch_anyway, resume=resume)


def _g(v) -> str:
    return "-" if v is None else f"{v:.4g}" if isinstance(v, float) else str(v)


@_typed
def optimize(config: ConfigLike, out: str | os.PathLike | None, *, overrides: Overrides = None,
             best: str | os.PathLike | None = None, compute: int | None = None, device_hours: float | None = None,
             samples_per_second: float | None = None, launch: bool = False, log: Callable = lambda *a, **k: None,
             progress: bool = False, source: str = "") -> OptimizeResult:
    """The best (B, S, σ) for the config's ε and a compute budget (default: its B·S), simulated by
    constant-η_step proxies; launch=True then trains the recommendation. source: the command line that
    made the config, for the launch commands the report writes."""
    from tanplan.workflow.optimize import optimize as optimize_stage  # lazy: the training stage (engine, launch)

    cfg = as_config(config, overrides)
    cfg = cfg.with_overrides(load_best_overrides(best))
    if device_hours is not None:
        if compute is not None:
            raise UsageError("give one compute budget: --compute or --device-hours")
        if samples_per_second is None:
            raise UsageError("--device-hours needs --samples-per-second (the DP samples/s of `tanplan bench`)")
        compute = int(device_hours * SECONDS_PER_HOUR * samples_per_second)
    elif samples_per_second is not None:
        raise UsageError("--samples-per-second is not allowed without --device-hours")
    return optimize_stage(cfg, Path(out) if out is not None else None, compute=compute, launch_best=launch, log=log,
                          progress=progress, source=source)


@_typed
def audit(config: ConfigLike = None, out: str | os.PathLike | None = None, *, overrides: Overrides = None,
          canaries: int | None = None, proxy_batch_size: int | None = None, confidence: float | None = None,
          progress: bool = False, log: Callable[[str], None] = lambda line: None,
          canary_kind: str = "gradient") -> AuditResult:
    """The privacy audit of the config's run (its proxy at proxy_batch_size): trained with canaries (gradient
    ones, or input-space ones with canary_kind "input"), its ε bounded from below; an AuditResult
    (tanplan.outcomes.audit). The caller decides what a violation means (the command exits 5)."""
    from tanplan.workflow.audit import (DEFAULT_CANARIES, DEFAULT_CONFIDENCE, check_audit,  # lazy: JAX; the planner's API imports this module
                                        check_audit_out, run_audit)

    cfg = as_config(config, overrides)
    if proxy_batch_size is not None:
        cfg = cfg.with_overrides({"train.proxy_batch_size": proxy_batch_size})
    canaries = DEFAULT_CANARIES if canaries is None else canaries
    confidence = DEFAULT_CONFIDENCE if confidence is None else confidence
    check_inputs(cfg)
    check_out_dir(out)
    check_audit(cfg, canaries, confidence, canary_kind)
    check_audit_out(out)
    return run_audit(cfg, Path(out) if out is not None else None, canaries=canaries, confidence=confidence,
                     progress=progress, log=log, kind=canary_kind)


@_typed
def final_audit(config: ConfigLike = None, out: str | os.PathLike | None = None, *, overrides: Overrides = None,
                canaries: int | None = None, kind: str | None = None, proxy_batch_size: int | None = None,
                confidence: float | None = None, progress: bool = False,
                log: Callable[[str], None] = lambda line: None) -> FinalAuditResult:
    """The final-model (black-box) audit of the config's run (its proxy at proxy_batch_size): trained with input
    canaries, scored on its released model only, its ε bounded from below; a FinalAuditResult with its threat
    model (tanplan.outcomes.final_audit). The caller decides what a violation means (the command exits 5)."""
    from tanplan.workflow import final_audit as black_box  # lazy: JAX; the planner's API imports this module

    cfg = as_config(config, overrides)
    if proxy_batch_size is not None:
        cfg = cfg.with_overrides({"train.proxy_batch_size": proxy_batch_size})
    canaries = black_box.DEFAULT_CANARIES if canaries is None else canaries
    kind = black_box.DEFAULT_KIND if kind is None else kind
    confidence = black_box.DEFAULT_CONFIDENCE if confidence is None else confidence
    check_inputs(cfg)
    check_out_dir(out)
    black_box.check_final_audit(cfg, canaries, kind, confidence)
    black_box.check_audit_out(out)
    return black_box.run_final_audit(cfg, Path(out) if out is not None else None, canaries=canaries, kind=kind,
                                     confidence=confidence, progress=progress, log=log)
