"""Gradient canaries of the privacy audit (tanplan.workflow.audit): M vectors of norm exactly C that a run's
step adds to its clipped sum, BEFORE the noise, each as an extra training example would be.

Canary j is c_j = C·u_j, u_j a random unit vector of the flattened parameter space: ±1/√b on b coordinates
of its own (the M supports are disjoint, drawn at random, the signs too), so the M directions are exactly
orthonormal and no canary's observation holds another's. Each canary is, by a fair coin, held in or held out.
At every step the run's own Poisson sampler (tanplan.dp.sampling, rate q) draws which canaries the step
holds, and the held-in ones among them join the clipped sum: a held-in canary is exactly an added example
whose clipped gradient is c_j at every step, the add/remove-one neighbour that the accountant's ε is about
(tanplan.privacy.accounting). The coins, the supports, the signs and the per-step draws come from the run's
secret (tanplan.dp.secret, streams CANARY, CANARY_BATCH, SHADOW), never from a seed a config shows, and
reach the compiled step as arguments, never as constants (a compilation cache on disk would keep them).

What the auditor reads (`observe`): the released noisy sum minus a shadow sum, the clipped sum of a second
Poisson batch of the training set drawn by the auditor, on each canary's coordinates. Projected on u_j and
divided by C, it is 1[j joined the step] + N(0, σ²) + the two batches' sampling difference: the data's own
gradient, which on a small model can be several times the noise on each canary, cancels in expectation.

Only the audit passes canaries to the engine; no config key or other command reaches this module, and a run
with canaries says so in its summary and model card: its outputs are not private releases.

    >>> design = CanaryDesign(count=4, block=2, clip_norm=1.0)
    >>> arrays = draw(design, num_params=10, rng=np.random.default_rng(0))
    >>> arrays.index.shape, len(set(arrays.index.ravel())), bool(np.allclose((arrays.weight ** 2).sum(1), 1))
    ((4, 2), 8, True)
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

OBSERVATION = "canary_observation"  # the step's metric that carries what the auditor reads of the canaries
MAX_COORDINATES = 1 << 15  # at most this many coordinates carry canaries (the step gathers them)


@dataclass(frozen=True)
class CanaryDesign:
    """What the compiled step needs to know: M canaries of b coordinates each, of norm C."""

    count: int
    block: int
    clip_norm: float


def design_for(count: int, num_params: int, clip_norm: float) -> CanaryDesign:
    """M canaries spread over at most MAX_COORDINATES of the num_params coordinates (b ≥ 1 each).

    ValueError when count > num_params: M disjoint supports need M coordinates.
    """
    if not 1 <= count <= num_params:
        raise ValueError(f"{count} canaries need as many coordinates; the model has {num_params}")
    block = max(1, min(num_params, MAX_COORDINATES) // count)
    return CanaryDesign(count, block, float(clip_norm))


@dataclass(frozen=True)
class CanaryArrays:
    """The secret draw of one audited run (host numpy arrays)."""

    index: np.ndarray  # (M, b) int32: the coordinates of each canary, all distinct
    weight: np.ndarray  # (M, b) float32: ±1/√b, so that each u_j has norm 1
    held_in: np.ndarray  # (M,) bool: the fair coins

    def step_inputs(self) -> dict:
        """What the compiled step receives as arguments every step (besides `step_draws`)."""
        return {"index": self.index, "weight": self.weight, "held_in": self.held_in}


@dataclass(frozen=True)
class CanaryRecord:
    """What an audited run hands its auditor: the design, the secret draw and the (S, M) observations x_tj."""

    design: CanaryDesign
    arrays: CanaryArrays
    observations: np.ndarray


def draw(design: CanaryDesign, num_params: int, rng: np.random.Generator) -> CanaryArrays:
    """Supports, signs and held-in coins from rng (the run's secret stream CANARY)."""
    m, b = design.count, design.block
    index = rng.permutation(num_params)[: m * b].reshape(m, b).astype(np.int32)
    weight = (rng.choice([-1.0, 1.0], size=(m, b)) / np.sqrt(b)).astype(np.float32)
    held_in = rng.random(m) < 0.5
    return CanaryArrays(index, weight, held_in)


def step_draws(secret, step: int, count: int, num_examples: int, q: float) -> tuple[np.ndarray, np.ndarray]:
    """(chosen, shadow) of one step, from the run's secret: chosen (M,) bool, the canaries that the run's own
    Poisson sampler (tanplan.dp.sampling, rate q) puts in this step (held-out ones are then left out by the
    step); shadow, the indices of a second Poisson batch of the training set, the auditor's (see `observe`)."""
    from tanplan.dp import sampling
    from tanplan.dp.secret import CANARY_BATCH, SHADOW

    chosen = np.zeros(count, dtype=bool)
    chosen[sampling.poisson_batch(count, q, secret.batch_rng(CANARY_BATCH, step))] = True
    return chosen, sampling.poisson_batch(num_examples, q, secret.batch_rng(SHADOW, step))


def insert(grad_sum, inputs: dict, design: CanaryDesign):
    """grad_sum + Σ_{j held in and chosen} C·u_j: the clipped sum of a batch that also holds the step's canaries."""
    import jax.numpy as jnp
    from jax.flatten_util import ravel_pytree

    flat, unravel = ravel_pytree(grad_sum)
    joined = inputs["chosen"] & inputs["held_in"]
    added = jnp.where(joined[:, None], inputs["weight"] * design.clip_norm, 0.0).astype(flat.dtype)
    return unravel(flat.at[inputs["index"].reshape(-1)].add(added.reshape(-1), unique_indices=True))


def observe(noisy_sum, shadow_sum, inputs: dict, design: CanaryDesign):
    """(M,) x_tj = ⟨released noisy sum − the auditor's shadow sum, u_j⟩ / C: 1 when canary j joined the step,
    plus N(0, σ²), plus the sampling difference of the two batches.

    The shadow sum is the clipped sum, at the same parameters, of a second Poisson batch of the training set
    drawn by the auditor: what the data put on the canaries' coordinates cancels in expectation, leaving the
    canaries, the noise and the batches' sampling fluctuation. It is a function of what the run released
    (the parameters) and of the training set, which the adversary of DP may know, drawn independently of
    the coins: a valid score (tanplan.workflow.audit).
    """
    from jax.flatten_util import ravel_pytree

    noisy, _ = ravel_pytree(noisy_sum)
    shadow, _ = ravel_pytree(shadow_sum)
    return ((noisy - shadow)[inputs["index"]] * inputs["weight"]).sum(axis=1) / design.clip_norm
