"""Pre-pruning and gradient dropping in a run: the mask of pruning.method and the masked step.

- `prune_mask`: random and SynFlow read no data (random draws from the public key); DP-SNIP releases
  one noisy sum of clipped saliencies over a Poisson batch at the run's q, noise σ_snip·C, its batch
  and noise drawn from the run's secret (tanplan.dp.secret, stream SNIP); the ledger records it.
- `masked_step`: the masked DP-SGD step of tanplan.dp.grad_drop (per-example gradients by the vmap
  route: per-layer norms cannot see a coordinate mask).
"""

from __future__ import annotations

import jax
import numpy as np

from tanplan.config import PruningConfig
from tanplan.data.source import read_rows
from tanplan.dp import grad_drop, pruning, sampling
from tanplan.dp.secret import SNIP
from tanplan.engine.routes import grad_sum_of
from tanplan.job import RunJob
from tanplan.outcomes.run_summary import Pruning


def enabled(p: PruningConfig) -> bool:
    """Whether the run prunes or drops anything (else the engine's plain step is used)."""
    return (p.method != "none" and p.rate > 0) or (p.drop_method != "none" and p.drop_rate > 0)


def prune_mask(job: RunJob, plan, logits_fn, params, dataset, public_key, secret):
    """The run's pre-pruning mask (a pytree of 0/1 numpy arrays), all ones when not pruning."""
    p = job.pruning
    if p.method == "none" or p.rate == 0:
        return jax.tree.map(np.asarray, pruning.ones_mask(params))
    if p.method == "random":
        return jax.tree.map(np.asarray, pruning.random_mask(public_key, params, p.rate))
    if p.method == "synflow":
        example = np.zeros((1, *dataset.input_shape), np.float32)  # SynFlow reads shapes only: no data
        return jax.tree.map(np.asarray, pruning.synflow_mask(logits_fn, params, example, p.rate))
    # dp_snip: one Poisson batch at the run's q, saliencies clipped to C, noise σ_snip·C once; all secret.
    indices = sampling.poisson_batch(plan.dataset_size, plan.q, secret.batch_rng(SNIP, 0))
    layout = sampling.batch_layout(plan.dataset_size, plan.q, job.perf.physical_batch_size)
    layout = layout.grown_to(len(indices)) if len(indices) > layout.capacity else layout
    index, mask = sampling.pad_indices(indices, layout)
    x, y = read_rows(dataset.train, indices)  # only the batch's rows, read by index from the source
    batch = sampling.gather_batch(x, y, sampling.pad_indices(np.arange(len(indices)), layout)[0], mask)
    batch["index"] = sampling.row_index(index, mask)  # the rows' dataset indices, not their places in x
    clip = plan.clip_norm if plan.private else None
    noise_std = plan.snip_sigma * plan.clip_norm if plan.private else 0.0
    fn = jax.jit(lambda w, b, k: pruning.dp_snip_mask(logits_fn, w, b, k, p.rate, clip, noise_std))
    return jax.tree.map(np.asarray, fn(params, batch, secret.key(SNIP)))


def masked_step(job: RunJob, plan, logits_fn, augment, params, optimizer, mask):
    """The masked step (tanplan.dp.grad_drop): step(state, batch, noise_key, aug_key, public_key); its clipped
    sum is the vmap route's (per-layer norms cannot see a coordinate mask), rebuilt under each step's mask."""
    build = lambda lf: grad_sum_of(job, lf, augment, "vmap" if job.privacy.private else "plain")  # noqa: E731
    return grad_drop.make_masked_train_step(
        build, logits_fn, optimizer, noise_std=plan.noise_std, expected_batch_size=float(plan.batch_size),
        prune_mask=mask, kept_counts=grad_drop.static_kept_counts(params, mask),
        drop_method=job.pruning.drop_method, drop_rate=job.pruning.drop_rate, ema_decay=job.train.ema_decay)


def summary_fields(p: PruningConfig, mask) -> Pruning:
    """What the summary reports of the run's pruning and dropping."""
    return Pruning(method=p.method, rate=p.rate, drop_method=p.drop_method, drop_rate=p.drop_rate,
                   kept_fraction=pruning.kept_fraction(mask))
