"""Glue between a Config's pruning/dropping keys and a training run (tanplan.engine.loop calls these).

- `prune_mask(...)`: the pre-pruning mask of the run (random, SynFlow, or DP-SNIP on one Poisson batch
  at the run's q with noise σ_snip·C);
- `make_step(...)`: the masked DP-SGD step of tanplan.dp.grad_drop.
"""

from __future__ import annotations

from tanplan.config import Config


def enabled(cfg: Config) -> bool:
    """Whether the run prunes or drops anything (else the engine's plain step is used)."""
    p = cfg.pruning
    return (p.method != "none" and p.rate > 0) or (p.drop_method != "none" and p.drop_rate > 0)


def prune_mask(cfg: Config, run, logits_fn, params, x_train, y_train, key):
    """The run's pre-pruning mask (numpy-convertible pytree of 0/1), all ones when not pruning."""
    import jax
    import numpy as np

    from tanplan.dp import pruning, sampling

    t, p = cfg.train, cfg.pruning
    if p.method == "none" or p.rate == 0:
        return pruning.ones_mask(params)
    if p.method == "random":
        return pruning.random_mask(key, params, p.rate)
    if p.method == "synflow":
        return pruning.synflow_mask(logits_fn, params, x_train[:1], p.rate)
    # dp_snip: one Poisson batch at the run's q, saliencies clipped to C, noise σ_snip·C once.
    batch_key, noise_key = jax.random.split(key)
    seed = int(jax.random.randint(batch_key, (), 0, 2**31 - 1))
    indices = next(iter(sampling.poisson_batches(run.dataset_size, run.q, 1, seed=[seed, 2])))
    layout = sampling.batch_layout(run.dataset_size, run.q, t.physical_batch_size)
    layout = layout.grown_to(len(indices)) if len(indices) > layout.capacity else layout
    index, mask = sampling.pad_indices(indices, layout)
    batch = sampling.gather_batch(x_train, y_train, index, mask)
    clip = cfg.privacy.clip_norm if run.private else None
    noise_std = run.snip_sigma * cfg.privacy.clip_norm if run.private else 0.0
    fn = jax.jit(lambda q, b, k: pruning.dp_snip_mask(logits_fn, q, b, k, p.rate, clip, noise_std))
    return jax.tree.map(np.asarray, fn(params, batch, noise_key))


def make_step(cfg: Config, run, logits_fn, augment, params, example_x, optimizer, mask):
    """The masked step (tanplan.dp.grad_drop) for this config; per-example grads by the vmap route."""
    from tanplan.dp import grad_drop
    from tanplan.engine.routes import make_grad_sum

    vmap_cfg = cfg.with_overrides({"train.grad_method": "vmap"})
    build = lambda lf: make_grad_sum(vmap_cfg, lf, augment, params, example_x)[0]  # noqa: E731
    return grad_drop.make_masked_train_step(
        build, logits_fn, optimizer,
        noise_std=run.sigma * cfg.privacy.clip_norm if run.private else 0.0,
        expected_batch_size=float(run.batch_size), prune_mask=mask,
        kept_counts=grad_drop.static_kept_counts(params, mask),
        drop_method=cfg.pruning.drop_method, drop_rate=cfg.pruning.drop_rate,
        ema_decay=cfg.train.ema_decay)


def setup(cfg: Config, run, logits_fn, augment, params, x_train, y_train, optimizer, key):
    """(pruned params, jitted masked step, grad route name, summary fields) for a run that prunes or drops."""
    import jax

    from tanplan.dp import pruning

    mask = prune_mask(cfg, run, logits_fn, params, x_train, y_train, key)
    params = pruning.apply_mask(params, mask)
    step = make_step(cfg, run, logits_fn, augment, params, x_train[:2], optimizer, mask)
    p = cfg.pruning
    info = {"prune_method": p.method, "prune_rate": p.rate, "grad_drop_method": p.drop_method,
            "grad_drop_rate": p.drop_rate, "kept_fraction": pruning.kept_fraction(mask),
            "snip_sigma": run.snip_sigma or None}
    return params, jax.jit(step, donate_argnums=0), "vmap" if run.private else "plain", info
