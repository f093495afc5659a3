"""`tanplan train`, the stage: one DP-SGD run of a config (its proxy when train.proxy_batch_size > 0) through
THE loop, every input that needs no data checked first (tanplan.workflow.inputs)."""

from __future__ import annotations

from pathlib import Path
from typing import Iterable

from tanplan.config import Config
from tanplan.outcomes.run_summary import RunSummary
from tanplan.workflow.inputs import check_inputs, check_out_dir, check_resume
from tanplan.workflow.train_run import train_config


def train_entry(cfg: Config, out, *, resume: bool, progress: bool, writers: Iterable) -> RunSummary:
    """The stage of tanplan.api.train: names, paths, plug-ins, the folder and --resume checked before the data
    is loaded or generated; then the run (nothing written when out is None)."""
    check_inputs(cfg)
    check_out_dir(out)
    check_resume(out, resume)
    return train_config(cfg, Path(out) if out is not None else None, resume=resume, progress=progress,
                        writers=writers)
