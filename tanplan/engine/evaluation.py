"""Evaluation on the held-out test set: loss and accuracy in padded batches, and AugTest.

Test metrics read the test set only, not the training data, so they cost no privacy beyond releasing the
parameters they evaluate (accounted in the ledger). The training loss and accuracy the loop shows are
NOT private: diagnostics for the data owner.
"""

from __future__ import annotations

import numpy as np


def make_eval_fn(logits_fn):
    """(params, x, y, mask) -> (loss sum, correct count) over the real rows of one test batch."""
    import jax
    import jax.numpy as jnp

    from tanplan.dp.augmult import cross_entropy

    @jax.jit
    def eval_batch(params, x, y, mask):
        logits = logits_fn(params, x)
        m = mask.astype(jnp.float32)
        return jnp.sum(cross_entropy(logits, y) * m), jnp.sum((jnp.argmax(logits, -1) == y) * m)

    return eval_batch


def evaluate(eval_batch, params, x, y, batch_size: int, mesh) -> dict[str, float]:
    """Test loss and accuracy over the whole test set, in padded batches sharded over the mesh."""
    from tanplan.dp import sampling, sharding

    ndev = mesh.devices.size
    batch_size = -(-min(batch_size, len(x)) // ndev) * ndev  # no padding beyond the test set
    loss, correct = 0.0, 0.0
    for start in range(0, len(x), batch_size):
        idx = np.arange(start, min(start + batch_size, len(x)))
        index, mask = sampling.pad_indices(idx, sampling.BatchLayout(1, batch_size))
        b = sharding.shard_batch(sampling.gather_batch(x, y, index, mask), mesh)
        ls, c = eval_batch(params, b["x"][0], b["y"][0], b["mask"][0])
        loss, correct = loss + float(ls), correct + float(c)
    return {"test_loss": loss / len(x), "test_accuracy": correct / len(x)}


def evaluate_augtest(cfg, logits_fn, params, dataset, augment, key) -> float | None:
    """Test accuracy by majority vote over K augmentations (AugTest), when the config asks for it."""
    if not cfg.data.aug_test or augment is None:
        return None
    import functools

    import jax

    from tanplan.data import augtest_predict

    predict = jax.jit(functools.partial(augtest_predict, logits_fn, k=cfg.data.aug_mult, augment=augment))
    size = cfg.train.eval_batch_size
    correct = 0
    for i, start in enumerate(range(0, dataset.num_test, size)):
        x = dataset.x_test[start:start + size]
        preds = np.asarray(predict(params, x, jax.random.fold_in(key, i)))
        correct += int(np.sum(preds == dataset.y_test[start:start + size]))
    return correct / dataset.num_test


def params_checksum(params) -> str:
    """sha256 over every parameter's path, dtype, shape and bytes: equal checksums, equal weights."""
    import hashlib

    import jax

    from tanplan.engine.checkpoint import host_array

    digest = hashlib.sha256()
    for path, leaf in jax.tree_util.tree_flatten_with_path(params)[0]:
        arr = host_array(leaf)
        digest.update(jax.tree_util.keystr(path).encode())
        digest.update(f"{arr.dtype}{arr.shape}".encode())
        digest.update(np.ascontiguousarray(arr).tobytes())
    return digest.hexdigest()[:16]
