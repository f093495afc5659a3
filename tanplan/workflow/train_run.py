"""The engine as the stages call it with a Config: its job built at the stage's entry (tanplan.job), then THE
loop. The stages' `train_fn(cfg, workdir, ...)` default to `train_config`."""

from __future__ import annotations

from tanplan.config import Config
from tanplan.engine import loop
from tanplan.job import job_of


def train_config(cfg: Config, workdir, **kwargs):
    """tanplan.engine.loop.train_and_evaluate on cfg's job (read when called: a test may put a fake engine
    there), with the same keywords; its RunSummary."""
    return loop.train_and_evaluate(job_of(cfg), workdir, **kwargs)
