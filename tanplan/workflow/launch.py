"""`tanplan launch`: the one full-scale DP-SGD run, exactly accounted and refused if over budget.

The ε reported is computed from the parameters the run actually uses (N of the loaded training set,
the target B, σ and S, and DP-SNIP's release if any), under the plan's own accountant and relation
(privacy.accountant, privacy.neighbouring), with RDP and PLD (add/remove-one) and PLD under replace-one
all reported. A plan whose exact ε exceeds [privacy] epsilon is refused with BudgetExceeded (exit 3)
before any step is taken. `launch --best` of a sweep that tuned on the private set composes the sweep's
releases with the launch's (`with_tuning`, tanplan.workflow.privacy_spent.totals, as `tanplan run` does).
"""

from __future__ import annotations

import os
import json
import time
from dataclasses import replace
from pathlib import Path
from typing import Callable, Mapping

from tanplan.config import Config, load_config, with_tuned
from tanplan.engine import loop, ray_worker
from tanplan.engine.setup import load_data
from tanplan.errors import BudgetExceeded, UsageError
from tanplan.fileio import write_json_atomic
from tanplan.job import job_of
from tanplan.outcomes.fields import fields_of
from tanplan.outcomes.launch import LaunchAccounting, LaunchResult
from tanplan.outcomes.privacy_spent import PlannedTotal, TuningRecord
from tanplan.privacy import init_provenance
from tanplan.privacy.run_plan import RunPlan
from tanplan.ray_session import check_address
from tanplan.runtime import driver_on_cpu
from tanplan.workflow import total_budget
from tanplan.workflow.best import folders_of, load_best_overrides, recorded_releases
from tanplan.workflow.inputs import check_inputs, check_out_dir, check_resume
from tanplan.workflow.members import Members
from tanplan.workflow.privacy_spent import ledgers_under, totals
from tanplan.workflow.tuning import from_record


def check_launch_budget(run: RunPlan, budget: float | None) -> LaunchAccounting:
    """The launch's exact ε; BudgetExceeded if, under the plan's own accountant, it exceeds the budget.

    ε is that of every release of the run (DP-SNIP's too) composed, from RunPlan.epsilon: the same
    function the ledger and the summaries use.
    """
    spent = run.epsilon()  # the accountant and relation of record
    if budget and spent > budget:
        relation = "" if run.neighbouring == "add_remove" else ", replace-one"
        raise BudgetExceeded(f"the launch would spend ε = {spent:.4g} ({run.accountant.upper()}{relation}, "
                             f"δ = {run.delta:.3g}, σ = {run.sigma:.4g}, B = {run.batch_size}, S = {run.steps}) above "
                             f"the budget privacy.epsilon = {budget:g}; no step was taken")
    return LaunchAccounting(epsilon_rdp=run.epsilon("rdp", neighbouring="add_remove"),
                            epsilon_pld=run.epsilon("pld", neighbouring="add_remove"),
                            epsilon_replace_one=run.epsilon("pld", neighbouring="replace_one"),
                            accountant=run.accountant, neighbouring=run.neighbouring, epsilon=spent, delta=run.delta,
                            sigma=run.sigma, snip_sigma=run.snip_sigma or None, q=run.q, steps=run.steps,
                            batch_size=run.batch_size, dataset_size=run.dataset_size)


def launch(cfg: Config | Members, out: Path, *, train_fn: Callable | None = None, progress: bool = True,
           backend: str = "local", resume: bool = False, num_workers: int = 1, gpus_per_worker: int = 0,
           address: str | None = None, allow_public_noise: bool = False,
           before_training: Callable[[RunPlan], None] | None = None) -> LaunchResult:
    """Check the budget, then train the target (no proxy) through THE loop and write DIR/launch.json.

    backend "local": every local device; "ray": num_workers processes through Ray Train's JaxTrainer
    (tanplan.engine.ray_worker), each running the same loop. Both checkpoint into DIR/checkpoint and keep
    the privacy ledger DIR/ledger.json; resume continues the newest intact checkpoint exactly. A config
    with privacy.noise_seed (noise reproducible from the config: not private) is refused unless
    allow_public_noise. train_fn (tests) replaces the engine. cfg: the stage's runs (Members, built at its
    entry), or a Config they are built of; their target is what trains.
    """
    started = time.perf_counter()
    cfg = Members.of(cfg).target
    out = Path(out)
    if cfg.privacy.private and cfg.privacy.noise_seed >= 0 and not allow_public_noise:
        raise UsageError(f"privacy.noise_seed = {cfg.privacy.noise_seed} is not allowed in a launch: its noise would be "
                         "reproducible from the config, so the launch would not be private; remove it, or pass "
                         "--allow-public-noise (tests only)")
    accounting, job = None, job_of(cfg)
    if cfg.privacy.private:
        dataset = load_data(cfg.data)
        job = job_of(cfg, dataset.num_train)  # the RunPlan resolved once, here: the engine trains this job
        run = job.plan
        accounting = check_launch_budget(run, cfg.privacy.epsilon)
        # with the releases its [init] inherited: exit 3 before a Ray driver creates --out (a local run checks too)
        init_provenance.check_total(init_provenance.read(cfg), run, cfg)
        if before_training is not None:  # a last check of the caller's (nothing is written before it)
            before_training(run)
    if train_fn is not None:
        summary = train_fn(cfg, out, progress=progress)
    elif backend == "ray":
        summary = ray_worker.launch_on_ray(job, out, num_workers=num_workers, gpus_per_worker=gpus_per_worker,
                                           address=address, resume=resume, progress=progress)
    else:
        summary = loop.train_and_evaluate(job, out, resume=resume, progress=progress)
    result = LaunchResult(summary=summary, accounting=accounting, wall_seconds=time.perf_counter() - started,
                          epsilon=summary.epsilon if _composes_init(summary) else None)
    write_json_atomic(out / "launch.json", result.record())
    return result


def _composes_init(summary) -> bool:
    """Whether the launch's ε of record composes releases its [init] inherited (then `epsilon`, the guarantee,
    is that composition, and `accounting` the launch's own mechanism, checked against privacy.epsilon)."""
    provenance = summary.init.provenance if summary.init is not None else None
    return bool(provenance and provenance.get("composed_releases"))


def tuning_of_best(best: Mapping | None, best_path: Path,
                   cfg: Config) -> tuple[TuningRecord | None, Path | None, str]:
    """(the tuning record of a sweep's best.json, the folder of its runs when they trained on the private
    set, a sentence for the user), recomputed from the runs beside best.json, never taken on trust.

    Each run folder below the sweep's trials folder holds config.toml, the config it trained: a run whose
    [data] names the launch's data (dataset, path, options, num_samples, seed) trained on the private set.
    A record that says "public" while a run trained on the private set, or that says "public" with no run
    left to check, is refused (UsageError): the launch's ε alone would understate what the private set
    bears. A best.json without a record (an older sweep) gets the recomputed one."""
    trials = Path(best_path).parent / str((best or {}).get("trials_dir", "trials"))
    written = from_record((best or {}).get("tuning"))
    private, checked = runs_on_private_data(trials, cfg)
    where = f"{str(trials)!r}"
    if written is not None and written.tuning_data == "public":
        if private:
            raise UsageError(f"--best {best_path}: its tuning record says the proxies trained on public data, but "
                             f"{private} of the {checked} runs in {where} trained on the private set (their "
                             "config.toml): the record was edited or belongs to another sweep; restore it (the "
                             "launch's ε alone would understate what the private set bears)")
        if not checked:
            raise UsageError(f"--best {best_path}: its tuning record says the proxies trained on public data, but no "
                             f"run is left in {where} to check it against; keep the sweep folder next to its "
                             "best.json")
        return written, None, (f"the sweep's proxies trained on {written.source} (checked on its {checked} runs): "
                               "the launch's ε is the whole guarantee for the private examples")
    if written is None and not private:
        if checked:
            record = TuningRecord(tuning_data="public", source=f"data other than the private set ({checked} runs "
                                  "checked)", private_size=None, tuning_size=None, sizes_differ=None)
            return record, None, ("the sweep's proxies trained on data other than the private set (checked on its "
                                  f"{checked} runs): the launch's ε is the whole guarantee for the private examples")
        return None, None, ("best.json does not record where its proxies trained and no run is left beside it: the "
                            "launch's ε alone is printed; if they saw the private set, compose their ledgers")
    record = written or TuningRecord(tuning_data="private", source=f"the private training set ({private} of the "
                                     f"{checked} runs, from their config.toml)", private_size=None, tuning_size=None,
                                     sizes_differ=None)
    return record, trials, (f"the sweep's proxies trained on the private set: their releases ({trials}) are composed "
                            "with the launch's")


def runs_on_private_data(trials: Path, cfg: Config) -> tuple[int, int]:
    """(runs that trained on cfg's data, runs checked) among the run folders below `trials` (a ledger.json
    and the config.toml beside it)."""
    private = checked = 0
    for ledger in sorted(Path(trials).rglob("ledger.json")) if Path(trials).is_dir() else []:
        path = ledger.parent / "config.toml"
        try:
            run = load_config(path)
        except (OSError, UsageError):
            continue
        checked += 1
        private += int(same_data(run, cfg))
    return private, checked


def same_data(a: Config, b: Config) -> bool:
    """Whether two configs train on the same training set (the [data] keys that choose its examples)."""
    da, db = a.data, b.data
    if (da.dataset, da.options, da.num_samples, da.seed) != (db.dataset, db.options, db.num_samples, db.seed):
        return False
    if da.path == db.path:
        return True
    pa, pb = Path(da.path).expanduser(), Path(db.path).expanduser()
    return pa.exists() and pb.exists() and os.path.samefile(pa, pb)


def check_total(cfg: Config, run: RunPlan, trials: Path | None) -> PlannedTotal:
    """The total on the private set, checked before any step (tanplan.workflow.total_budget): this launch's
    releases and, when the sweep's proxies trained on the private set, every release in their ledgers."""
    spent = [ledger for folder in folders_of(trials) for ledger in ledgers_under(folder)]  # sweep and registry
    total = total_budget.TotalPlan(parts=(total_budget.Planned(what="the launch", runs=1, events=tuple(run.events())),),
                                   delta=run.delta, accountant=run.accountant, neighbouring=run.neighbouring,
                                   spent=tuple(spent))
    return total_budget.check(total, cfg)


def check_tuning_runs(trials: Path, run: RunPlan) -> None:
    """UsageError unless the private-tuning runs of a best.json can be composed with this launch: their
    ledgers are there, at the launch's δ (checked before any step)."""
    ledgers = ledgers_under(trials) if trials.is_dir() else []
    if not ledgers:
        raise UsageError(f"--best names a sweep that tuned on the private set, but its runs' ledgers are not in "
                         f"{str(trials)!r}: their releases cannot be composed with the launch's; keep the sweep "
                         "folder next to its best.json")
    deltas = {ledger.delta for ledger in ledgers if ledger.events()}
    if deltas and deltas != {run.delta}:
        raise UsageError(f"--best: the sweep's runs were accounted at δ = {sorted(deltas)}, this launch at δ = "
                         f"{run.delta:g}: they cannot be composed; launch with the sweep's config")


def with_tuning(result: LaunchResult, out: Path, record: TuningRecord, trials: Path | None) -> LaunchResult:
    """result with the total ε on the private set (privacy_spent.totals: the launch, and the sweep's runs
    when they trained on it), written back to out/launch.json."""
    total = totals(Path(out), folders_of(trials), record)  # trials: the sweep's folder, or every folder composed
    # the guarantee for the private examples: the total when the proxies trained on them, else the launch's
    epsilon = total.epsilon_total if record.tuning_data == "private" else (result.epsilon or result.accounting.epsilon)
    result = replace(result, **fields_of(total), epsilon=epsilon)
    write_json_atomic(Path(out) / "launch.json", result.record())
    return result


def launch_entry(cfg: Config, out, *, best, resume: bool, backend: str, num_workers: int, gpus_per_worker: int,
                 address: str | None, allow_public_noise: bool, progress: bool) -> LaunchResult:
    """The stage of tanplan.api.launch: every input (best.json and its tuning runs, the backend, the address,
    the folder) checked before any data is read; before any step, the ledgers of best.json's runs usable and
    the total ε within privacy.total_epsilon; then launch(), composed with the tuning runs (private tuning)."""
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

    result = launch(Members.of(cfg), out, progress=progress, backend=backend, resume=resume,
                    num_workers=num_workers, gpus_per_worker=gpus_per_worker, address=address,
                    allow_public_noise=allow_public_noise, before_training=check if best else None)
    if record is not None and result.accounting:
        result = with_tuning(result, Path(out), record, folders)
    return replace(result, tuning_note=note)
