"""Gradient canaries of the privacy audit (tanplan.workflow.audit): M vectors of norm exactly C that a run's
step adds to its clipped sum, BEFORE the noise, each as an extra training example would be.

Canary j is c_j = C·u_j, u_j a random unit vector of the flattened parameter space: ±1/√b on b coordinates
of its own (the M supports are disjoint, drawn at random, the signs too), so the M directions are exactly
orthonormal and no canary's observation holds another's. Each canary is, by a fair coin, held in or held out.
At every step the run's own Poisson sampler (tanplan.dp.sampling, rate q) draws which canaries the step
holds, and the held-in ones among them join the clipped sum: a held-in canary is exactly an added example
whose clipped gradient is c_j at every step, the add/remove-one neighbour that the accountant's ε is about
(tanplan.privacy.accounting).

Guarantee: the coins, the supports, the signs and the per-step draws (and the auditor's shadow batches) come
from the AUDIT'S OWN secret (tanplan.dp.secret.RunSecret.fresh: 256 bits of OS entropy, streams CANARY,
CANARY_BATCH, SHADOW), drawn in `wrap` and kept in memory only: never from a seed a config shows, and never
from the run's secret, which checkpoint/run_secret.json keeps on disk (whoever read that file could otherwise
recompute which canaries were held in). An audited run is never resumed, so nothing needs to keep it. The
draws reach the compiled step as arguments, never as constants (a compilation cache on disk would keep them).

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

from dataclasses import dataclass, field
from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree

from tanplan.dp import noise, sampling
from tanplan.dp.mechanism import Mechanism
from tanplan.dp.secret import CANARY, CANARY_BATCH, SHADOW, RunSecret
from tanplan.dp import step as dp_step

OBSERVATION = "canary_observation"  # the step's metric that carries what the auditor reads of the canaries
MAX_COORDINATES = 1 << 15  # at most this many coordinates carry canaries (the step gathers them)


@dataclass(frozen=True)
class CanaryDesign:
    """What the compiled step needs to know: M canaries of b coordinates each, of norm C."""

    count: int
    block: int
    clip_norm: float

    def coordinates(self) -> int:
        """The coordinates each canary owns (b)."""
        return self.block


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
    """Supports, signs and held-in coins from rng (the audit's own secret, stream CANARY)."""
    m, b = design.count, design.block
    index = rng.permutation(num_params)[: m * b].reshape(m, b).astype(np.int32)
    weight = (rng.choice([-1.0, 1.0], size=(m, b)) / np.sqrt(b)).astype(np.float32)
    held_in = rng.random(m) < 0.5
    return CanaryArrays(index, weight, held_in)


def step_draws(secret, step: int, count: int, num_examples: int, q: float) -> tuple[np.ndarray, np.ndarray]:
    """(chosen, shadow) of one step, from `secret` (the audit's own): chosen (M,) bool, the canaries that the run's own
    Poisson sampler (tanplan.dp.sampling, rate q) puts in this step (held-out ones are then left out by the
    step); shadow, the indices of a second Poisson batch of the training set, the auditor's (see `observe`)."""
    chosen = np.zeros(count, dtype=bool)
    chosen[sampling.poisson_batch(count, q, secret.batch_rng(CANARY_BATCH, step))] = True
    return chosen, sampling.poisson_batch(num_examples, q, secret.batch_rng(SHADOW, step))


def insert(grad_sum, inputs: dict, design: CanaryDesign):
    """grad_sum + Σ_{j held in and chosen} C·u_j: the clipped sum of a batch that also holds the step's canaries."""
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
    noisy, _ = ravel_pytree(noisy_sum)
    shadow, _ = ravel_pytree(shadow_sum)
    return ((noisy - shadow)[inputs["index"]] * inputs["weight"]).sum(axis=1) / design.clip_norm


def audited_noisy_sum(grad_sum: Callable, noise_std: float, design: CanaryDesign):
    """(params, batch, noise_key, aug_key, inputs) -> (noisy sum, stats): tanplan.dp.step.make_noisy_grad_sum
    with the step's canaries joining the clipped sum BEFORE the noise (`insert`: each held-in canary is an
    added example of clipped gradient C·u_j, so the sum keeps sensitivity C per example and the noise
    N(0, noise_std²) covers canaries and data alike). stats[OBSERVATION] is what the auditor reads (`observe`):
    the noisy sum minus the clipped sum of its shadow batch (inputs["shadow"], keyed by its own indices)."""

    def noisy_sum(params, batch, noise_key, aug_key, inputs):
        keys = dp_step.example_keys(batch, aug_key)
        grads, loss_sum, acc_sum, count = dp_step.accumulate(grad_sum, params, batch, keys)
        grads = insert(grads, inputs, design)
        if noise_std > 0:
            grads = noise.add_gaussian_noise(grads, noise_key, noise_std)
        n = jnp.maximum(count, 1.0)
        shadow_batch = inputs["shadow"]  # the auditor's: the same clipped sum on a second Poisson batch
        shadow, *_ = dp_step.accumulate(grad_sum, params, shadow_batch, dp_step.example_keys(shadow_batch, aug_key))
        return grads, {"loss": loss_sum / n, "accuracy": acc_sum / n, "batch_size": count,
                       OBSERVATION: observe(grads, shadow, inputs, design)}

    return noisy_sum


@dataclass(frozen=True)
class Audited:
    """A run's mechanism with M gradient canaries wrapped around it (the privacy audit only): the same
    batches, noise, events and relation (`mechanism`), the canaries' secret draw (`arrays`) and the step's
    extra draws, all from `secret`, the audit's own (memory only; module docstring). Its `noisy_sum` replaces
    the mechanism's in the step; the loop asks it for each step's inputs (`step_inputs`) and hands it each
    step's observation (`keep`), and the auditor reads `record()`."""

    mechanism: Mechanism
    design: CanaryDesign
    arrays: CanaryArrays
    secret: RunSecret = field(compare=False)  # the audit's own: OS entropy, never the run's stored secret
    observed: list = field(default_factory=list, compare=False)  # one device array per step, read at the end

    def noisy_sum(self) -> Callable:
        return audited_noisy_sum(self.mechanism.clipped_sum, self.mechanism.noise_std, self.design)

    def draws(self, t: int) -> tuple[np.ndarray, np.ndarray]:
        """(chosen, shadow) of step t (`step_draws`), from the audit's secret at the run's rate q."""
        m = self.mechanism
        return step_draws(self.secret, t, self.design.count, m.plan.dataset_size, m.q)

    def step_inputs(self) -> dict:
        """The canaries' secret draw, which every step takes as arguments (never as constants)."""
        return self.arrays.step_inputs()

    def draw_step(self, t: int) -> tuple[dict, dict]:
        """Step t's draws as the loop passes them (tanplan.engine.hooks.Wrapped): which canaries it holds,
        replicated; the auditor's shadow batch, read by index beside the step's rows."""
        chosen, shadow = self.draws(t)
        return {"chosen": chosen}, {"shadow": shadow}

    def keep(self, metrics: dict) -> dict:
        """metrics without the step's observation, which is kept here (never published)."""
        self.observed.append(metrics.pop(OBSERVATION))
        return metrics

    def record(self) -> CanaryRecord:
        """What the auditor reads once the run is over: the design, the secret draw and the (S, M) observations."""
        return CanaryRecord(self.design, self.arrays, np.stack([_host(o) for o in self.observed]))


def wrap(mechanism: Mechanism, count: int, params, secret: RunSecret | None = None) -> Audited:
    """`count` canaries of norm C (the mechanism's sensitivity) around the mechanism, over the coordinates of
    params, drawn from `secret` (stream CANARY): by default a fresh one of OS entropy, held by the returned
    wrapper only, never the mechanism's (the run's, stored on disk). ValueError for a non-private or masked
    mechanism."""
    if mechanism.sensitivity is None or mechanism.clipped_sum is None:
        raise ValueError("gradient canaries need a private run's dense clipped sum (not the masked step of pruning)")
    secret = RunSecret.fresh() if secret is None else secret  # even with privacy.noise_seed: coins stay secret
    num_params = sum(int(np.size(leaf)) for leaf in jax.tree.leaves(params))
    design = design_for(count, num_params, mechanism.sensitivity)
    return Audited(mechanism, design, draw(design, num_params, secret.batch_rng(CANARY, 0)), secret)


def _host(x) -> np.ndarray:
    """This process's copy of a replicated observation (one spread over processes holds it locally too)."""
    return np.asarray(x if getattr(x, "is_fully_addressable", True) else x.addressable_data(0))
