"""Input-space canaries of the privacy audit (tanplan.workflow.audit, `--canary-kind input`): M crafted
training examples that go through the run's own per-example clipping, beside the gradient canaries of
tanplan.dp.canaries, which are added after it.

Canary j is an example (x_j, y_j): x_j an out-of-distribution input, N(0, INPUT_SCALE²) on every coordinate
of the data's input shape, y_j a class drawn at random, its dataset identity N + j (its augmentation views
come from it, as a real example's come from its index: tanplan.dp.augmult.example_keys). Each is held in or
out by a secret fair coin; at every step the run's own Poisson sampler (rate q, the stream CANARY_BATCH of
tanplan.dp.canaries.step_draws) draws which canaries the step holds, and the held-in ones among them are
rows of the step's batch: their gradients are computed, AugMult-averaged and clipped to C by the same
clipped sum (the run's route) as the real rows, and summed with them BEFORE the noise. A held-in canary is
therefore exactly an added example, the add/remove-one neighbour of the accountant's ε, and a break in the
clipping (a bound above C, a route whose norms are wrong) or in the views' keys moves the released sum by
more than the accountant assumes: the audit sees it, which gradient canaries cannot.

Guarantee and threat model. The coins, inputs, labels and per-step draws come from the AUDIT'S OWN secret
(streams CANARY and CANARY_BATCH of a RunSecret.fresh() of OS entropy drawn in `wrap`, kept in memory only),
never from a public seed and never from the run's secret, which checkpoint/run_secret.json keeps on disk (from
it the held-in canaries could be recomputed); they reach the compiled step as arguments. What the auditor reads
(`observe`), at each step: x_tj = ⟨released noisy sum − the clipped sum of the step's real rows, u_j⟩ / C,
u_j the unit direction of canary j's own clipped gradient at the step's parameters. Under the claimed
mechanism that is ‖clip_C(g_j)‖/C ≤ 1 when j joined the step, plus N(0, σ²), plus the other joined canaries'
projections on u_j. The auditor knows the parameters (white box), the canaries, the real examples of each
batch and their views: DP-SGD's add/remove guarantee for canary j holds for every fixed value of the other
examples' Poisson draws and of the views (tanplan.dp.mechanism), so it binds this auditor too; what it never
reads is the noise, the coins or the canaries' own draws. (The auditor then centres the readings per label
at each step, tanplan.workflow.audit_stats.centred_by_group: canaries of one label overlap most.)

Only the audit passes canaries to the engine; a run with canaries is not a private release (its summary and
model card say so).

    >>> arrays = draw(InputDesign(count=3, clip_norm=1.0, rate=0.1), (5,), num_classes=4, dataset_size=100,
    ...               rng=np.random.default_rng(0))
    >>> arrays.x.shape, arrays.index.tolist(), bool(((0 <= arrays.y) & (arrays.y < 4)).all())
    ((3, 5), [100, 101, 102], True)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree

from tanplan.dp import noise
from tanplan.dp import step as dp_step
from tanplan.dp.canaries import OBSERVATION, CanaryRecord, _host, step_draws
from tanplan.dp.mechanism import Mechanism
from tanplan.dp.secret import CANARY, RunSecret

INPUT_SCALE = 4.0  # the crafted inputs' spread: far outside any standardised data, so their gradients exceed C


@dataclass(frozen=True)
class InputDesign:
    """What the compiled step needs to know: M crafted examples, clipped to C like the real ones."""

    count: int
    clip_norm: float
    rate: float  # q: each canary's chance to be drawn at a step (the run's Poisson rate)

    def coordinates(self) -> None:
        """Input canaries own no coordinates of their own (gradient canaries own `block` each)."""
        return None


@dataclass(frozen=True)
class InputArrays:
    """The secret draw of one audited run (host numpy arrays)."""

    x: np.ndarray  # (M, *input_shape) float32: the crafted inputs
    y: np.ndarray  # (M,) int32: their labels
    index: np.ndarray  # (M,) int32: their identities N + j (augmentation keys)
    held_in: np.ndarray  # (M,) bool: the fair coins

    def step_inputs(self) -> dict:
        """What the compiled step receives as arguments every step (besides the step's draws)."""
        return {"canary_x": self.x, "canary_y": self.y, "canary_index": self.index, "held_in": self.held_in}


def draw(design: InputDesign, input_shape: tuple, num_classes: int, dataset_size: int,
         rng: np.random.Generator) -> InputArrays:
    """Inputs, labels and held-in coins from rng (the audit's own secret, stream CANARY)."""
    m = design.count
    x = (INPUT_SCALE * rng.standard_normal((m, *input_shape))).astype(np.float32)
    y = rng.integers(0, num_classes, size=m).astype(np.int32)
    held_in = rng.random(m) < 0.5
    return InputArrays(x, y, (dataset_size + np.arange(m)).astype(np.int32), held_in)


def canary_batch(inputs: dict, joined, rows: int) -> dict:
    """The canaries as chunks of `rows` rows of a padded batch (the step's own chunk size, so that they cost
    the memory its chunks do): every canary a row, the mask its joining this step, padding rows masked."""
    m = joined.shape[0]
    pad = -m % rows

    def chunked(a):
        a = jnp.concatenate([a, jnp.zeros((pad, *a.shape[1:]), a.dtype)]) if pad else a
        return a.reshape(((m + pad) // rows, rows, *a.shape[1:]))

    return {"x": chunked(inputs["canary_x"]), "y": chunked(inputs["canary_y"]),
            "index": chunked(inputs["canary_index"]), "mask": chunked(joined)}


def clipped_gradients(grad_sum: Callable, params, inputs: dict, aug_key) -> jax.Array:
    """(M, d): each canary's clipped gradient (flattened), by the run's clipped sum on a one-row chunk."""
    keys = augmult_keys(inputs, aug_key)

    def one(x, y, key):
        grads, _, _ = grad_sum(params, x[None], y[None], key[None], jnp.ones((1,), bool))
        return ravel_pytree(grads)[0]

    return jax.vmap(one)(inputs["canary_x"], inputs["canary_y"], keys)


def augmult_keys(inputs: dict, aug_key) -> jax.Array:
    """Each canary's views' key, from its identity N + j (as a real example's from its dataset index)."""
    return dp_step.example_keys({"index": inputs["canary_index"]}, aug_key)


def observe(noisy_sum, real_sum, gradients, clip_norm: float, rate: float):  # gradients: (M, d) a step
    """(M,) x_tj = ⟨noisy sum − the real rows' clipped sum, u_j⟩ / C, u_j = canary j's clipped gradient / its
    norm (0 when it has none): ‖clip_C(g_j)‖/C ≤ 1 when j joined, plus N(0, σ²), plus the other joined
    canaries' projections (module docstring), less what those are expected to be, (q/2)·Σ_{k≠j} ⟨c_k, u_j⟩/C
    (fair coins, rate q: a function of every canary alike, never of the coins), so that a canary whose
    gradient leans on the others' does not score high for it."""
    noisy, _ = ravel_pytree(noisy_sum)
    real, _ = ravel_pytree(real_sum)
    norms = jnp.linalg.norm(gradients, axis=1)
    directions = gradients / jnp.maximum(norms, 1e-12)[:, None]
    others = directions @ jnp.sum(gradients, axis=0) - norms  # Σ_{k≠j} ⟨c_k, u_j⟩
    return (directions @ (noisy - real).astype(directions.dtype) - rate / 2 * others) / clip_norm


def audited_noisy_sum(grad_sum: Callable, noise_std: float, design: InputDesign):
    """(params, batch, noise_key, aug_key, inputs) -> (noisy sum, stats): tanplan.dp.step.make_noisy_grad_sum
    over the step's batch AND its joined canaries (chosen by the step's Poisson draw and held in), clipped by
    the same grad_sum, summed, then N(0, noise_std²) once. stats[OBSERVATION]: what the auditor reads."""

    def noisy_sum(params, batch, noise_key, aug_key, inputs):
        real, loss_sum, acc_sum, count = dp_step.accumulate(grad_sum, params, batch,
                                                            dp_step.example_keys(batch, aug_key))
        chunks = canary_batch(inputs, inputs["chosen"] & inputs["held_in"], batch["mask"].shape[1])
        canaries, *_ = dp_step.accumulate(grad_sum, params, chunks, dp_step.example_keys(chunks, aug_key))
        real = jax.tree.map(lambda g: g.astype(jnp.promote_types(g.dtype, jnp.float32)), real)
        grads = jax.tree.map(lambda a, b: a + b.astype(a.dtype), real, canaries)  # one batch: real rows + canaries
        if noise_std > 0:
            grads = noise.add_gaussian_noise(grads, noise_key, noise_std)
        n = jnp.maximum(count, 1.0)
        gradients = clipped_gradients(grad_sum, params, inputs, aug_key)
        return grads, {"loss": loss_sum / n, "accuracy": acc_sum / n, "batch_size": count,
                       OBSERVATION: observe(grads, real, gradients, design.clip_norm, design.rate)}

    return noisy_sum


@dataclass(frozen=True)
class InputAudited:
    """A run's mechanism with M input-space canaries around it (the privacy audit only): the interface of
    tanplan.dp.canaries.Audited (`noisy_sum`, `draws`, `keep`, `record`), with examples for canaries."""

    mechanism: Mechanism
    design: InputDesign
    arrays: InputArrays
    secret: RunSecret = field(compare=False)  # the audit's own: OS entropy, never the run's stored secret
    observed: list = field(default_factory=list, compare=False)

    def noisy_sum(self) -> Callable:
        return audited_noisy_sum(self.mechanism.clipped_sum, self.mechanism.noise_std, self.design)

    def draws(self, t: int) -> tuple[np.ndarray, np.ndarray]:
        """(chosen, no shadow batch) of step t: the canaries' Poisson draw, from the audit's secret at rate q."""
        m = self.mechanism
        chosen, _ = step_draws(self.secret, t, self.design.count, m.plan.dataset_size, m.q)
        return chosen, np.zeros(0, np.int64)

    def step_inputs(self) -> dict:
        """The canaries' secret draw (examples, classes, identities, coins): step arguments, never constants."""
        return self.arrays.step_inputs()

    def draw_step(self, t: int) -> tuple[dict, dict]:
        """Step t's draws as the loop passes them (tanplan.engine.hooks.Wrapped): which canaries it holds;
        no rows beside the step's own (the auditor subtracts the step's real rows' clipped sum)."""
        chosen, _ = self.draws(t)
        return {"chosen": chosen}, {}

    def keep(self, metrics: dict) -> dict:
        """metrics without the step's observation, which is kept here (never published)."""
        self.observed.append(metrics.pop(OBSERVATION))
        return metrics

    def record(self) -> CanaryRecord:
        return CanaryRecord(self.design, self.arrays, np.stack([_host(o) for o in self.observed]))


def wrap(mechanism: Mechanism, count: int, input_shape: tuple, num_classes: int,
         secret: RunSecret | None = None) -> InputAudited:
    """`count` input canaries around the mechanism, drawn from `secret` (stream CANARY): by default a fresh one
    of OS entropy, held by the returned wrapper only, never the mechanism's (the run's, stored on disk).
    ValueError for a non-private or masked mechanism."""
    if mechanism.sensitivity is None or mechanism.clipped_sum is None:
        raise ValueError("input canaries need a private run's dense clipped sum (not the masked step of pruning)")
    secret = RunSecret.fresh() if secret is None else secret  # even with privacy.noise_seed: coins stay secret
    design = InputDesign(count, float(mechanism.sensitivity), float(mechanism.q))
    arrays = draw(design, tuple(input_shape), num_classes, mechanism.plan.dataset_size, secret.batch_rng(CANARY, 0))
    return InputAudited(mechanism, design, arrays, secret)
