"""`tanplan launch`: the one full-scale DP-SGD run, exactly accounted and refused if over budget.

The ε reported is computed from the parameters the run actually uses (N of the loaded training set,
the target B, σ and S, and DP-SNIP's release if any), under the plan's own accountant (privacy.accountant),
with RDP and PLD both reported. A plan whose exact ε exceeds [privacy] epsilon is refused with
BudgetExceeded (exit 3) before any step is taken.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Callable

from tanplan.config import Config
from tanplan.errors import BudgetExceeded, UsageError
from tanplan.fileio import write_json_atomic
from tanplan.privacy.mechanism import RunPlan, resolve_plan


def check_budget(run: RunPlan, budget: float | None) -> dict:
    """The launch's exact ε; BudgetExceeded if, under the plan's own accountant, it exceeds the budget.

    ε is that of every release of the run (DP-SNIP's too) composed, from RunPlan.epsilon: the same
    function the ledger and the summaries use.
    """
    spent = run.epsilon(run.accountant)
    if budget and spent > budget:
        raise BudgetExceeded(f"the launch would spend ε = {spent:.4g} ({run.accountant.upper()}, δ = {run.delta:.3g}, "
                             f"σ = {run.sigma:.4g}, B = {run.batch_size}, S = {run.steps}) above the budget "
                             f"privacy.epsilon = {budget:g}; no step was taken")
    return {"epsilon_rdp": run.epsilon("rdp"), "epsilon_pld": run.epsilon("pld"), "accountant": run.accountant,
            "epsilon": spent, "delta": run.delta, "sigma": run.sigma, "snip_sigma": run.snip_sigma or None,
            "q": run.q, "steps": run.steps, "batch_size": run.batch_size, "dataset_size": run.dataset_size}


def launch(cfg: Config, out: Path, *, train_fn: Callable | None = None, progress: bool = True,
           backend: str = "local", resume: bool = False, num_workers: int = 1, gpus_per_worker: int = 0,
           address: str | None = None, allow_public_noise: bool = False) -> dict:
    """Check the budget, then train the target (no proxy) through THE loop and write DIR/launch.json.

    backend "local": every local device; "ray": num_workers processes through Ray Train's JaxTrainer
    (tanplan.engine.ray_worker), each running the same loop. Both checkpoint into DIR/checkpoint and keep
    the privacy ledger DIR/ledger.json; resume continues the newest intact checkpoint exactly. A config
    with privacy.noise_seed (noise reproducible from the config: not private) is refused unless
    allow_public_noise. train_fn (tests) replaces the engine.
    """
    from tanplan.engine.setup import load_data

    started = time.perf_counter()
    cfg = cfg.with_overrides({"train.proxy_batch_size": 0})
    out = Path(out)
    if cfg.privacy.private and cfg.privacy.noise_seed >= 0 and not allow_public_noise:
        raise UsageError(f"privacy.noise_seed = {cfg.privacy.noise_seed} is not allowed in a launch: its noise would be "
                         "reproducible from the config, so the launch would not be private; remove it, or pass "
                         "--allow-public-noise (tests only)")
    accounting = None
    if cfg.privacy.private:
        dataset = load_data(cfg)
        accounting = check_budget(resolve_plan(cfg, dataset.num_train), cfg.privacy.epsilon)
    if train_fn is not None:
        summary = train_fn(cfg, out, progress=progress)
    elif backend == "ray":
        from tanplan.engine.ray_worker import launch_on_ray

        summary = launch_on_ray(cfg, out, num_workers=num_workers, gpus_per_worker=gpus_per_worker,
                                address=address, resume=resume, progress=progress)
    else:
        from tanplan.engine.loop import train_and_evaluate

        summary = train_and_evaluate(cfg, out, resume=resume, progress=progress)
    result = {"summary": summary, "accounting": accounting, "wall_seconds": time.perf_counter() - started}
    write_json_atomic(out / "launch.json", result)
    return result
