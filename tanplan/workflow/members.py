"""The runs of a multi-run stage (ladder rungs and seeds, fit members, optimize candidates, sweep trials, the
launch of a stage's target), each derived from the stage's Config in this one place.

A stage's entry builds `Members.of(cfg)` once and hands it down; the helpers below ask it for a member's Config
(what a `train_fn(cfg, workdir, ...)` trains, and what the run's config.toml holds) or its RunJob, and never
re-derive a Config or re-resolve a plan themselves. A helper that a test calls with a Config wraps it with
`Members.of`, which returns a Members value as it is.

    >>> from tanplan.config import load_config
    >>> runs = Members.of(load_config(None, ["train.batch_size=256", "train.proxy_batch_size=64"]))
    >>> runs.proxy(16, seed=2).train.proxy_batch_size, runs.target.train.proxy_batch_size
    (16, 0)
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Any, Mapping

from tanplan.config import Config
from tanplan.job import RunJob, job_of
from tanplan.privacy.run_plan import RunPlan


@dataclass(frozen=True)
class Members:
    """A stage's runs: `base`, the Config every member derives from."""

    base: Config

    @classmethod
    def of(cls, cfg: "Config | Members") -> "Members":
        """The members of cfg (a Members value as it is)."""
        return cfg if isinstance(cfg, Members) else cls(base=cfg)

    @cached_property
    def target(self) -> Config:
        """The full-scale run (train.proxy_batch_size = 0): what a launch trains, derived once."""
        return self.base.with_overrides({"train.proxy_batch_size": 0})

    def group(self, overrides: Mapping[str, Any]) -> "Members":
        """The members of one group of runs: base with the dotted overrides (a fit member's (B, S, σ), a dataset
        size's N' and δ, a candidate's full-scale run, a sweep's pinned σ and δ, the law's setting)."""
        return Members(self.base.with_overrides(dict(overrides))) if overrides else self

    def proxy(self, batch_size: int, seed: int = 0) -> Config:
        """The proxy run at B' = batch_size, its experiment seed `seed` above the base's."""
        return self.base.with_overrides({"train.proxy_batch_size": int(batch_size),
                                         "experiment.seed": self.base.experiment.seed + int(seed)})

    def job(self, dataset_size: int | None = None) -> RunJob:
        """The base's RunJob, its RunPlan resolved on dataset_size examples when given."""
        return job_of(self.base, dataset_size)

    def target_plan(self, dataset_size: int) -> RunPlan:
        """The target's RunPlan on N examples (UsageError for what resolve_plan refuses: δ, σ, B > N)."""
        return job_of(self.target, dataset_size).plan

    def proxy_plan(self, batch_size: int, dataset_size: int) -> RunPlan:
        """The RunPlan of the proxy at B' on N examples (a public set smaller than B too: run_plan.twin_beyond)."""
        return job_of(self.base.with_overrides({"train.proxy_batch_size": int(batch_size)}), dataset_size).plan


__all__ = ["Members"]
