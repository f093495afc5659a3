"""The DP-SGD engine: Poisson batches, clipped per-example gradients, noise once per step, AugMult,
accumulation over chunks, EMA, optimizers, data parallelism. Built on jax-privacy's core API and optax.

Modules: sampling (Poisson batches, padded layout), augmult (views, losses), clipping (grad sums via
jax-privacy), ghost (grad sums via per-layer norms), noise (Gaussian), optim (optimizers, schedules,
EMA), step (the jitted step), sharding (Mesh with a 'data' axis). Import the modules you need: this
package imports JAX.
"""
