"""`tanplan pretrain`: the config's model trained, without privacy, on the config's PUBLIC data (the
public tuning set of tanplan.workflow.tuning: [tuning] path or dataset, or for mnist1d an independent draw), into a
run folder whose released model [init] path reads (docs/finetune.md).

Nothing private is read for training: the public set is checked against the private one first (same input
shape, and no private example under the near-copy rule of tanplan.data.near_copy: equal or near-equal rows,
rows equal after per-row standardisation such as private × 255, rows reversed, in any order; docs/privacy.md,
"Pretraining data: the near-copy rule"), so the weights it writes are public and a fine-tuning run's
guarantee covers its private set alone. A copy the rule does not describe (a crop, a shift) is not found.
[init] and the privacy settings of the config are left out of the pretraining run (it starts from
experiment.seed's draw and trains every parameter, with no noise)."""

from __future__ import annotations

from pathlib import Path

from tanplan.config import Config
from tanplan.engine.setup import load_data
from tanplan.errors import UsageError
from tanplan.outcomes.run_summary import RunSummary
from tanplan.workflow import tuning
from tanplan.workflow.inputs import check_inputs, check_out_dir
from tanplan.workflow.members import Members
from tanplan.workflow.train_run import train_config


def pretrain_entry(cfg: Config, out, *, progress: bool) -> RunSummary:
    """The stage of tanplan.api.pretrain: no public data is refused before anything is read, the public set
    checked against the private one (check_public), then the non-private run into out."""
    public_cfg = pretrain_config(cfg)  # no public data: refused before anything is read
    check_inputs(public_cfg)
    check_out_dir(out)
    check_public(cfg, lambda c: load_data(c.data), public_cfg)
    return train_config(public_cfg, Path(out) if out is not None else None, progress=progress)


def pretrain_config(cfg: Config) -> Config:
    """The non-private config of cfg's model on cfg's public data; UsageError when there is none."""
    if cfg.tuning.data == "private":
        raise UsageError("tanplan pretrain trains on public data: tuning.data = 'private' names none; set "
                         "tuning.data = 'public' (with tuning.path or tuning.dataset, or the mnist1d public draw)")
    t = cfg.tuning
    if tuning.reads_private_file(cfg):
        raise UsageError(f"tuning.path = {t.path!r} is not allowed: it is the private data file (or folder) data.path; "
                         "tanplan pretrain trains on public data, which must hold no private example")
    runs = Members.of(cfg)
    tuning.check(runs.group({"privacy.private": True}).base)  # a public set must exist
    return runs.group({**tuning.public_data(cfg), "privacy.private": False, "privacy.noise_seed": -1,
                       "init.path": "", "init.loader": "", "init.head": (), "init.trainable": (),
                       "init.frozen": (), "init.frozen_blocks": 0, "init.adapters": (),
                       "train.proxy_batch_size": 0}).base


def check_public(cfg: Config, load, public_cfg: Config | None = None) -> None:
    """UsageError unless the public set is fit to pretrain on (tuning.check_public_set): the same input shape
    as the private set, and no private example under the near-copy rule (the module's docstring). Its class
    count may differ (Kurakin et al.: Places365's 365 classes, then ImageNet's 1000): the fine-tuning run
    re-initialises the head ([init] head) when its shape differs. public_cfg: pretrain_config(cfg), as the
    entry derived it."""
    public_cfg = public_cfg if public_cfg is not None else pretrain_config(cfg)
    tuning.check_public_set(cfg, load(public_cfg), load(cfg), same_classes=False,
                            what="pretraining data", remedy="")
