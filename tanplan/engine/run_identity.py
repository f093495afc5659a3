"""What identifies a run: what a resume must match (`fingerprint`, checked against the checkpoint's) and
what the run's secret is bound to (`run_identity`: the config keys its batches, noise and updates depend
on, the plan, the training set, the plug-ins' code and the parameters' structure; tanplan.dp.secret)."""

from __future__ import annotations

import hashlib
import importlib
import math
from pathlib import Path

import jax
import numpy as np

from tanplan.job import RunJob
from tanplan.plugins import is_import_path


def fingerprint(job: RunJob, plan) -> dict:
    """What must not change between a checkpoint and its resumption for the resume to be exact."""
    record = job.to_dict()
    relevant = {k: v for k, v in record.items() if k in ("experiment", "data", "model", "privacy", "train", "pruning")}
    if job.init != type(job.init)():  # initial weights or frozen parameters (absent by default: older checkpoints resume)
        relevant["init"] = record["init"]
    if job.task != type(job.task)():  # a plugged-in loss or metric (absent by default: older checkpoints resume)
        relevant["task"] = record["task"]
    for section in ("data", "model"):
        if not relevant[section].get("options"):
            relevant[section].pop("options", None)
    if not relevant["train"].get("epochs"):  # S given as train.steps (absent by default: older checkpoints resume)
        relevant["train"].pop("epochs", None)
    for k in ("eval_every", "eval_batch_size", "checkpoint_every", "physical_batch_size"):
        relevant["train"].pop(k, None)  # bookkeeping only: may change on resume
    relevant["experiment"].pop("name", None)
    return {"config": relevant, "q": plan.q, "sigma": plan.sigma, "delta": plan.delta,
            "dataset_size": plan.dataset_size, "steps": plan.steps, "snip_sigma": plan.snip_sigma}


def run_identity(job: RunJob, plan, dataset, params, init_digest: str | None = None) -> dict:
    """What a run's noise protects, as flat {key: value}: every config key its batches, noise and updates
    depend on (`fingerprint`, which holds the plug-ins' import paths and options), the plan's numbers, the
    identity of its training data (`training_set`), the code of each plug-in it computes with (`plugins`)
    and its parameters' structure, and the digest of [init]'s weights when it starts from them (init_digest:
    tanplan.models.init). The run's secret is bound to it (tanplan.dp.secret)."""
    fp = fingerprint(job, plan)
    flat = {f"{section}.{key}": value for section, values in fp["config"].items() for key, value in values.items()}
    flat.update({f"plan.{key}": value for key, value in fp.items() if key != "config"})
    flat["data.training_set"] = training_set(dataset)
    flat.update(plugins(job))
    if init_digest is not None:
        flat["init.digest"] = init_digest
    flat["model.parameter_structure"] = hashlib.blake2b(repr(structure(params)).encode(), digest_size=16).hexdigest()
    return flat


def training_set(dataset) -> str:
    """A digest identifying the training rows: of every row of an in-memory dataset; of what a source
    declares about itself without being read (its type, N, input shape, classes and `fingerprint`: a
    memmap's meta.json, file sizes and sampled content, the same on every copy) for sources larger than
    memory, which are never read whole."""
    digest = hashlib.blake2b(digest_size=16)
    if getattr(dataset, "in_memory", True):
        for array in (dataset.x_train, dataset.y_train):
            array = np.ascontiguousarray(array)
            digest.update(f"{array.dtype}{array.shape}".encode())
            digest.update(array.reshape(-1).view(np.uint8))  # the same bytes as tobytes(), without a copy
    else:
        train = dataset.train
        kind = f"{type(train).__module__}.{type(train).__qualname__}"
        digest.update(repr((kind, len(train), tuple(dataset.input_shape), dataset.num_classes,
                            getattr(dataset, "fingerprint", ""))).encode())
    return digest.hexdigest()


PLUGIN_SETTINGS = ("data.dataset", "model.name", "task.loss", "task.metric")


def plugins(job: RunJob) -> dict:
    """{"plugin.<setting>": digest} of the source file of each plug-in module the run computes with (its
    loader, model and [task] functions; tracking writers compute nothing): a plug-in edited under the same
    import path is another run. A module with no file is identified by its import path alone."""
    found = {}
    for setting in PLUGIN_SETTINGS:
        section, key = setting.split(".")
        path = getattr(getattr(job, section), key)
        if not is_import_path(path):
            continue
        module = importlib.import_module(path.partition(":")[0])  # imported already, by prepare()
        origin = getattr(module, "__file__", None)
        try:
            code = Path(origin).read_bytes() if origin else b""
        except OSError:
            code = b""
        found[f"plugin.{setting}"] = f"{path}@{hashlib.blake2b(code, digest_size=16).hexdigest() if code else '?'}"
    return found


def structure(params) -> tuple:
    """Every parameter's path, shape and dtype."""
    return tuple((jax.tree_util.keystr(path), tuple(leaf.shape), str(leaf.dtype))
                 for path, leaf in jax.tree_util.tree_leaves_with_path(params))


def differences(saved: dict, wanted: dict, prefix: str = "") -> list[str]:
    """The dotted keys whose values differ between two fingerprints, each with (saved -> wanted)."""
    keys = sorted(set(saved) | set(wanted))
    diffs = []
    for k in keys:
        a, b = saved.get(k), wanted.get(k)
        if isinstance(a, dict) and isinstance(b, dict):
            diffs += differences(a, b, f"{prefix}{k}.")
        elif a != b and not (isinstance(a, float) and isinstance(b, float) and math.isclose(a, b, rel_tol=1e-12)):
            diffs.append(f"{prefix}{k} ({a!r} -> {b!r})")
    return diffs
