"""Evaluation on the held-out test set: loss and accuracy in padded batches, and AugTest.

Test metrics read the test set only, not the training data, so they cost no privacy beyond releasing the
parameters they evaluate (accounted in the ledger). The training loss and accuracy the loop shows are
NOT private: diagnostics for the data owner.
"""

from __future__ import annotations

import functools
import hashlib

import jax
import jax.numpy as jnp
import numpy as np

from tanplan.data import augtest_predict
from tanplan.data.source import read_rows
from tanplan.dp import sampling, sharding
from tanplan.engine.checkpoint import host_array
from tanplan.task import DEFAULT


def make_eval_fn(logits_fn, task=None):
    """(params, x, y, mask) -> (loss sum, metric sum) over the real rows of one test batch; the task's
    per-example loss and metric (tanplan.task; None = cross-entropy and accuracy)."""
    task = task or DEFAULT

    @jax.jit
    def eval_batch(params, x, y, mask):
        logits = logits_fn(params, x)  # padding rows: where, not a product (a plugged-in loss may give NaN there)
        return (jnp.sum(jnp.where(mask, task.loss(logits, y), 0.0)),
                jnp.sum(jnp.where(mask, task.metric(logits, y), 0.0)))

    return eval_batch


def evaluate(eval_batch, params, test, batch_size: int, mesh) -> dict[str, float]:
    """Test loss and metric (test_accuracy) over the whole test source, read in consecutive batches of
    at most batch_size rows (tanplan.data.source: never more at once), padded and sharded over the mesh."""
    ndev = mesh.devices.size
    n = len(test)
    batch_size = -(-min(batch_size, n) // ndev) * ndev  # no padding beyond the test set
    loss, correct = 0.0, 0.0
    for start in range(0, n, batch_size):
        x, y = read_rows(test, np.arange(start, min(start + batch_size, n)))
        index, mask = sampling.pad_indices(np.arange(len(x)), sampling.BatchLayout(1, batch_size))
        b = sharding.shard_batch(sampling.gather_batch(x, y, index, mask), mesh)
        ls, c = eval_batch(params, b["x"][0], b["y"][0], b["mask"][0])
        loss, correct = loss + float(ls), correct + float(c)
    return {"test_loss": loss / n, "test_accuracy": correct / n}


def evaluate_augtest(job, logits_fn, params, dataset, augment, key) -> float | None:
    """Test accuracy by majority vote over K augmentations (AugTest), when the job (tanplan.job) asks for it. Each test
    example's views come from the public key and its test index alone (tanplan.data.augtest)."""
    if not job.data.aug_test or augment is None:
        return None
    predict = jax.jit(functools.partial(augtest_predict, logits_fn, k=job.data.aug_mult, augment=augment))
    size = job.perf.eval_batch_size
    correct = 0
    for start in range(0, dataset.num_test, size):
        index = np.arange(start, min(start + size, dataset.num_test))
        x, y = read_rows(dataset.test, index)
        preds = np.asarray(predict(params, x, key, index=index))  # views keyed by test index, not by batch
        correct += int(np.sum(preds == y))
    return correct / dataset.num_test


def params_checksum(params) -> str:
    """sha256 over every parameter's path, dtype, shape and bytes: equal checksums, equal weights."""
    digest = hashlib.sha256()
    for path, leaf in jax.tree_util.tree_flatten_with_path(params)[0]:
        arr = host_array(leaf)
        digest.update(jax.tree_util.keystr(path).encode())
        digest.update(f"{arr.dtype}{arr.shape}".encode())
        digest.update(np.ascontiguousarray(arr).tobytes())
    return digest.hexdigest()[:16]
