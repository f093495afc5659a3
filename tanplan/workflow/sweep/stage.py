"""`tanplan sweep`, the stage: every input checked before any data is read (the config, the folder, the
address, the study, the proxy, the space, the tuning data), the total ε bounded before any trial (private
tuning data), the planned compute said; then the search (tanplan.workflow.sweep.search) and best.json."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Callable

from tanplan.config import Config
from tanplan.errors import UsageError
from tanplan.fileio import write_json_atomic
from tanplan.outcomes.sweep import SweepResult
from tanplan.ray_session import check_address
from tanplan.runtime import driver_on_cpu
from tanplan.workflow import privacy_spent, total_budget, tuning
from tanplan.workflow.inputs import check_inputs, check_out_dir, check_sweep_space
from tanplan.workflow.pipeline import costs
from tanplan.workflow.sweep import search
from tanplan.workflow.sweep.study import check_study_file


def sweep_entry(cfg: Config, out, *, proxy_batch_size: int | None, trials: int | None, top_k: int | None,
                seeds: int | None, scheduler: str | None, max_concurrent: int | None, address: str | None,
                resume: bool, log: Callable[[str], None]) -> SweepResult:
    """The stage of tanplan.api.sweep (its docstring); writes out/best.json, the SweepResult's to_dict()."""
    if top_k is not None and top_k < 0:
        raise UsageError(f"--top-k {top_k} is not allowed: must be >= 0")
    driver_on_cpu()  # the trials own the accelerators: the driver's model check stays on the CPU
    check_inputs(cfg)  # names, paths, the folder, the address, the study, the space: before any data is read
    check_out_dir(out)
    check_address(address)
    check_study_file(Path(out), resume=resume)
    search.check_proxy(cfg, proxy_batch_size)
    check_sweep_space(cfg)
    tuning.check(cfg)
    # the trials train the proxies' config: [tuning] data, public by default, holding the trials' B'
    tune = tuning.for_config(cfg, proxy_batch=search.check_proxy(cfg, proxy_batch_size))
    spec = search.prepare(tune.proxy_cfg, proxy_batch_size=proxy_batch_size, trials=trials, top_k=top_k,
                          seeds=seeds, scheduler=scheduler, max_concurrent=max_concurrent)
    if cfg.privacy.private and tune.data == "private":  # exit 3 before any trial when over privacy.total_epsilon
        parts = total_budget.sweep_parts(tune.target, spec.proxy.batch_size, spec.trials, spec.top_k, spec.seeds)
        total_budget.check(total_budget.of_target(tune.target, parts), cfg)  # the launch's RunPlan, from for_config
    t, p = spec.target, spec.proxy
    planned = costs.planned_compute(cfg, [costs.sweep_cost(cfg, p.batch_size, spec.trials, spec.top_k, spec.seeds)])
    for line in costs.compute_lines(costs.timed(planned, cfg, out, measure=False)):
        log(line)
    log(f"tanplan sweep: target B={t.batch_size} σ={_g(t.sigma)} S={t.steps}  ->  proxy "
        f"B'={p.batch_size} σ'={_g(p.sigma)}  ({t.batch_size / p.batch_size:.3g}x cheaper), "
        f"{spec.trials} trials over {', '.join(d.name for d in spec.dims)}; proxies learn on {tune.source}")
    summary = search.run_sweep(spec, Path(out), address=address, resume=resume, log=log)
    summary = dataclasses.replace(
        summary, privacy_spent=privacy_spent.report(Path(out) / "trials", out, "sweep trials and re-runs", tune),
        tuning=tune.record(),
        trials_dir="trials")  # `launch --best` composes these ledgers with the launch's (private tuning)
    write_json_atomic(Path(out) / "best.json", summary.to_dict())
    return summary


def _g(v) -> str:
    return "-" if v is None else f"{v:.4g}" if isinstance(v, float) else str(v)
