"""One run's job: its Config resolved once, at the entry of the stage that trains it, into one frozen value.

    job = RunJob.of(cfg)                      # N not known yet: the engine resolves the plan once, on its data
    job = RunJob.of(cfg, dataset_size=N)      # the stage knows N: the RunPlan is resolved here
    summary = train_and_evaluate(job, out)    # tanplan.engine.loop; nothing below the stage sees the Config

What the guarantee rests on is kept apart from how fast it runs, as jax-privacy keeps its DPExecutionPlan
apart from its flags: `privacy` (ε, δ, σ, C, the accountant and the relation) with `train`'s B, S and
`pruning` resolve into `plan` (tanplan.privacy.run_plan.RunPlan: the (B, σ, S) trained, its DpEvents);
`data`, `model`, `init`, `task` and `experiment` say what is trained on what; `perf` holds the settings that
change speed and memory, never the releases (the chunk's rows, the compute dtype, the gradient route and how
it is chosen, the evaluation batch), which the engine reads there only. `record` is the Config as written to
config.toml and bound by the run's identity (tanplan.engine.run_identity). No JAX here.

    >>> from tanplan.config import load_config
    >>> job = RunJob.of(load_config(None, ["train.batch_size=100", "train.steps=10", "privacy.sigma=2"]), dataset_size=1000)
    >>> job.plan.steps, job.plan.sigma, job.perf.physical_batch_size
    (10, 2.0, 256)
"""

from __future__ import annotations

import copy
import dataclasses
from dataclasses import dataclass
from typing import Any

from tanplan.config import (Config, DataConfig, ExperimentConfig, InitConfig, ModelConfig, PruningConfig,
                            PrivacyConfig, TaskConfig, TrackingConfig, TrainConfig, config_from_dict)
from tanplan.privacy.run_plan import RunPlan, resolve_plan


@dataclass(frozen=True, kw_only=True)
class Performance:
    """How a run computes, not what it releases: a resume may change the chunk's rows and the evaluation
    batch (tanplan.engine.run_identity leaves them out); the dtype and the route change speed only (both
    routes clip to C: tanplan.engine.routes)."""

    physical_batch_size: int
    compute_dtype: str
    grad_method: str
    route_cost: str
    eval_batch_size: int

    @classmethod
    def of(cls, train: TrainConfig) -> "Performance":
        return cls(physical_batch_size=train.physical_batch_size, compute_dtype=train.compute_dtype,
                   grad_method=train.grad_method, route_cost=train.route_cost,
                   eval_batch_size=train.eval_batch_size)


@dataclass(frozen=True, kw_only=True)
class RunJob:
    """One run, resolved: the sections the engine reads (frozen already), the RunPlan once N is known, the
    performance settings, and the Config's record (config.toml, the run's identity)."""

    experiment: ExperimentConfig
    data: DataConfig
    model: ModelConfig
    init: InitConfig
    task: TaskConfig
    privacy: PrivacyConfig  # what `plan` is resolved from
    train: TrainConfig  # B, S and the optimiser's hyper-parameters (its performance keys: read from `perf`)
    pruning: PruningConfig
    tracking: TrackingConfig
    perf: Performance
    record: dict  # cfg.to_dict(): what config.toml holds and the run's identity binds
    plan: RunPlan | None = None  # None until N is known (`with_plan`)

    @classmethod
    def of(cls, cfg: Config, dataset_size: int | None = None) -> "RunJob":
        """The job of cfg; its RunPlan resolved on dataset_size examples when given (UsageError for a plan
        the accountants or δ refuse, as tanplan.privacy.run_plan.resolve_plan)."""
        job = cls(experiment=cfg.experiment, data=cfg.data, model=cfg.model, init=cfg.init, task=cfg.task,
                  privacy=cfg.privacy, train=cfg.train, pruning=cfg.pruning, tracking=cfg.tracking,
                  perf=Performance.of(cfg.train), record=cfg.to_dict())
        return job if dataset_size is None else job.with_plan(dataset_size)

    @classmethod
    def from_record(cls, record: dict, dataset_size: int | None = None) -> "RunJob":
        """The job of a Config's record (a Ray worker's: the driver sends `record`), validated again."""
        return cls.of(config_from_dict(record), dataset_size)

    def with_plan(self, dataset_size: int) -> "RunJob":
        """This job with its RunPlan on dataset_size examples; itself when it holds that plan already."""
        if self.plan is not None and self.plan.dataset_size == dataset_size:
            return self
        return dataclasses.replace(self, plan=resolve_plan(self, dataset_size))

    def to_dict(self) -> dict[str, dict[str, Any]]:
        """The Config's record, {section: {key: value}}, a fresh copy (as Config.to_dict)."""
        return copy.deepcopy(self.record)

    def config(self) -> Config:
        """The Config again, for a plugged-in tracking writer's factory(run_dir, cfg) (its documented
        argument): the engine itself reads the job only."""
        return config_from_dict(self.record)


def job_of(cfg: Config, dataset_size: int | None = None) -> RunJob:
    """RunJob.of(cfg, dataset_size): what a stage calls at its entry."""
    return RunJob.of(cfg, dataset_size)
