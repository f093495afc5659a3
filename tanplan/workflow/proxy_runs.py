"""Proxy runs: the small runs every stage that simulates a target trains (`tanplan fit`, the ladder,
`tanplan optimize`), each one call of the engine (tanplan.engine.loop.train_and_evaluate) on a member of the
stage's runs (tanplan.workflow.members.Members.proxy, built at the stage's entry): a proxy is `train.proxy_batch_size = B'`,
so σ' = σ·B'/B comes from the one Plan. One
device each, as many at once as there are devices (tanplan.workflow.proxy_devices); a run that finished in
its folder with the same config is read back, not trained again.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Callable, Sequence

from tanplan.config import Config, config_to_toml
from tanplan.engine import packed
from tanplan.job import job_of
from tanplan.outcomes.fit import ProxyRun
from tanplan.outcomes.run_summary import RunSummary
from tanplan.workflow.members import Members
from tanplan.workflow.proxy_devices import each_on_one_device
from tanplan.workflow.train_run import train_config


def _default_train_fn():
    return train_config  # THE loop on the run's job (loop.train_and_evaluate read when called: a test may fake it)


def train_points(cfg: Config | Members, batch_sizes, seeds: int, out: Path | None, *, train_fn: Callable | None = None,
                 log=print, label: str = "fit", seed_offset: int = 0) -> list[ProxyRun]:
    """Train the proxy at each batch size with `seeds` seeds (experiment seeds seed_offset, ... above the
    config's; cfg: the members, or a Config they are built of); one row per run."""
    jobs = [(int(b), seed) for b in batch_sizes for seed in range(seed_offset, seed_offset + seeds)]
    return train_runs(cfg, jobs, out, train_fn=train_fn, log=log, label=label)


def train_runs(cfg: Config | Members, jobs: Sequence[tuple[int, int]], out: Path | None, *,
               train_fn: Callable | None = None, log=print, label: str = "fit") -> list[ProxyRun]:
    """Train the proxy runs (batch size, seed offset) given, one device each and as many at once as there
    are devices (tanplan.workflow.proxy_devices); one row per run, in the jobs' order."""
    train_fn = train_fn or _default_train_fn()
    members = Members.of(cfg)

    def one(job) -> ProxyRun:
        b, seed = job
        run_cfg = members.proxy(b, seed)
        workdir = _proxy_folder(out, label, b, seed)
        # resume: a rerun into the same folder reuses a finished run as it is, and continues a stopped one
        # from its checkpoint: no new release, no step trained twice
        summary = finished_run(workdir, run_cfg) or train_fn(run_cfg, workdir, progress=False, resume=True)
        log(f"  {label}: B'={b} seed={seed} σ'={summary.sigma:.4g} "
            f"accuracy={summary.test_accuracy:.4f} ({summary.wall_seconds:.1f} s)")
        return _row(b, seed, summary)

    if members.base.fit.packed and train_fn is train_config:
        return packed_runs(members, jobs, out, one, log=log, label=label)
    return each_on_one_device(jobs, one)


def _proxy_folder(out: Path | None, label: str, b: int, seed: int) -> Path | None:
    """Where the proxy run (B', seed) of a stage trains and, on a rerun, is found finished (None: no folder)."""
    return out / "runs" / f"{label}_b{b}_s{seed}" if out is not None else None


def _row(b: int, seed: int, summary: RunSummary) -> ProxyRun:
    return ProxyRun(batch_size=b, seed=seed, test_accuracy=float(summary.test_accuracy), sigma=float(summary.sigma),
                    steps=int(summary.steps), wall_seconds=float(summary.wall_seconds))


def packed_runs(members: Members, jobs: Sequence[tuple[int, int]], out: Path | None, one: Callable, *, log=print,
                label: str = "fit") -> list[ProxyRun]:
    """fit.packed: the runs of each batch size not finished yet, two or more, as one program on one device
    (tanplan.engine.packed: each its own secret, batches, ledger and folder); the rest as `one` trains them.
    One row per run, in the jobs' order."""
    rows: dict[tuple[int, int], ProxyRun] = {}
    for b in dict.fromkeys(b for b, _ in jobs):
        seeds = [seed for size, seed in jobs if size == b]
        cfgs = {seed: members.proxy(b, seed) for seed in seeds}
        dirs = {seed: _proxy_folder(out, label, b, seed) for seed in seeds}
        new = [seed for seed in seeds if finished_run(dirs[seed], cfgs[seed]) is None]
        why = packed.packable([job_of(cfgs[seed]) for seed in new]) if len(new) > 1 else "one run"
        if why is None:
            summaries = packed.train_packed([job_of(cfgs[seed]) for seed in new], [dirs[seed] for seed in new])
            for seed, summary in zip(new, summaries):
                log(f"  {label}: B'={b} seed={seed} σ'={summary.sigma:.4g} accuracy={summary.test_accuracy:.4f} "
                    f"(packed ×{len(new)}: {summary.wall_seconds:.1f} s)")
                rows[b, seed] = _row(b, seed, summary)
        elif len(new) > 1:
            log(f"  {label}: B'={b}: not packed ({why})")
        rows.update({(b, seed): one((b, seed)) for seed in seeds if (b, seed) not in rows})
    return [rows[job] for job in jobs]


def finished_run(workdir: Path | None, cfg: Config) -> RunSummary | None:
    """The RunSummary (summary.json, read back) of a run that finished in workdir with exactly this config (its
    config.toml, as the engine wrote it), all its planned steps taken; None otherwise (then the engine resumes
    or starts it; a summary.json outside the schema counts as none)."""
    if workdir is None or not (workdir / "summary.json").is_file() or not (workdir / "config.toml").is_file():
        return None
    try:
        if (workdir / "config.toml").read_text(encoding="utf-8") != config_to_toml(cfg):
            return None
        summary = RunSummary.from_dict(json.loads((workdir / "summary.json").read_text(encoding="utf-8")))
    except (OSError, UnicodeDecodeError, ValueError, TypeError, AttributeError):  # unreadable, or not a summary
        return None
    done = (not summary.interrupted and summary.diverged_at_step is None and summary.steps == summary.planned_steps
            and summary.test_accuracy is not None)
    return summary if done else None


__all__ = ["train_points", "train_runs", "finished_run"]
