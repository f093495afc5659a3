"""The DP-SGD mechanism in JAX: Poisson batches, clipped per-example gradients, noise once per step, AugMult,
accumulation over chunks, EMA, optimizers, data parallelism, and the run's secret behind the randomness.
Built on jax-privacy's core API and optax.

Modules: mechanism (one run's mechanism as one value: clipped sum and its sensitivity, batch selection,
noise, DpEvents, relation), secret (the per-run secret: noise, batches, views), sampling (Poisson batches,
padded layout), augmult (views, losses), clipping (grad sums via jax-privacy), ghost (grad sums via
per-layer norms), noise (Gaussian), step (the jitted step), optim (optimizers, schedules, EMA), sharding
(Mesh with a 'data' axis), pruning (pre-pruning masks: random, SynFlow, DP-SNIP), grad_drop (the masked
step of gradient dropping), canaries (the privacy audit's gradient canaries, wrapped around the mechanism).
Import the modules you need: this package imports JAX.
"""
