"""`tanplan launch`: the one full-scale DP-SGD run, exactly accounted and refused if over budget.

The ε reported is computed from the parameters the run actually uses (N of the loaded training set,
the target B, σ and S of the Plan), under the RDP accountant, with PLD alongside. A config whose
[privacy] sigma is given explicitly and whose exact ε exceeds [privacy] epsilon is refused with
BudgetExceeded (exit 3) before any step is taken.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Callable

from tanplan.config import Config
from tanplan.errors import BudgetExceeded
from tanplan.fileio import write_json_atomic


def full_scale_plan(cfg: Config, dataset_size: int):
    from tanplan.privacy.plan import plan_from_config

    return plan_from_config(cfg, dataset_size)


def check_budget(plan, budget: float | None) -> dict:
    """Exact ε of the plan; BudgetExceeded if it is above the budget (RDP, the accountant of record)."""
    eps_rdp = plan.epsilon("rdp")
    if budget and eps_rdp > budget:
        raise BudgetExceeded(f"the launch would spend ε = {eps_rdp:.4g} (RDP, δ = {plan.delta:.3g}, σ = {plan.sigma:.4g}, "
                             f"B = {plan.batch_size}, S = {plan.steps}) above the budget privacy.epsilon = {budget:g}; "
                             f"no step was taken")
    return {"epsilon_rdp": eps_rdp, "epsilon_pld": plan.epsilon("pld"), "delta": plan.delta, "sigma": plan.sigma,
            "q": plan.q, "steps": plan.steps, "batch_size": plan.batch_size, "dataset_size": plan.dataset_size}


def launch(cfg: Config, out: Path, *, train_fn: Callable | None = None, progress: bool = True,
           backend: str = "local", resume: bool = False, num_workers: int = 1, gpus_per_worker: int = 0,
           address: str | None = None) -> dict:
    """Check the budget, then train the target (no proxy) and write DIR/launch.json.

    backend "local": every local device (tanplan.engine.launch_loop); "ray": num_workers processes through
    Ray Train's JaxTrainer (tanplan.engine.ray_worker). Both checkpoint into DIR/checkpoint and keep the
    privacy ledger DIR/ledger.json; resume continues the last checkpoint exactly. train_fn (tests, or
    the single-process trainer tanplan.engine.loop.train_and_evaluate) replaces the backend.
    """
    from tanplan.engine.loop import load_data

    started = time.perf_counter()
    cfg = cfg.with_overrides({"train.proxy_batch_size": 0})
    out = Path(out)
    accounting = None
    if cfg.privacy.private:
        dataset = load_data(cfg)
        accounting = check_budget(full_scale_plan(cfg, dataset.num_train), cfg.privacy.epsilon)
    if train_fn is not None:
        summary = train_fn(cfg, out, progress=progress)
    elif backend == "ray":
        from tanplan.engine.ray_worker import launch_on_ray

        summary = launch_on_ray(cfg, out, num_workers=num_workers, gpus_per_worker=gpus_per_worker,
                                address=address, resume=resume, progress=progress)
    else:
        from tanplan.engine.launch_loop import run_launch

        summary = run_launch(cfg, out, resume=resume, progress=progress)
    result = {"summary": summary, "accounting": accounting, "wall_seconds": time.perf_counter() - started}
    write_json_atomic(out / "launch.json", result)
    return result
