"""DP-SGD's mechanism as one value: what a run releases at each step, and what its guarantee rests on.

`Mechanism` is the code half of tanplan.privacy.run_plan.RunPlan (its data half: B, σ, C, S, δ, the
accountant, the relation), in the shape of jax-privacy's DPExecutionPlan: the clipped-gradient sum with
its certified sensitivity, the batch selection, the noise, the accounted DpEvents and the neighbouring
relation, built in one place (`build`, called by tanplan.engine.setup) from the RunPlan, the gradient
route and the run's secret.

Guarantee. Step t releases  Σ_{i ∈ P_t} clip_C(g_i) + N(0, σ²C² I), where
- P_t is a Poisson batch: each of the N examples in with probability q = B/N, independently, drawn from
  the run's secret (`batch(t)`: tanplan.dp.secret stream BATCH, jax-privacy's CyclicPoissonSampling with
  one iteration and INDEPENDENT partition, i.e. plain Poisson sampling), never from a public seed;
- clip_C(g_i) is example i's gradient (over its AugMult views, keyed by its dataset index) clipped to L2
  norm C: the sum has sensitivity C under add/remove-one neighbours (2C under replace-one, when both
  examples are sampled), whichever route computes it (ghost or vmap: tanplan.engine.routes);
- the noise N(0, σ²C² I) is drawn once per step from fold_in(secret noise key, t), on the global sum
  (after every accumulation chunk and device), and covers every coordinate of every trainable parameter.
With frozen parameters ([init] trainable / frozen / frozen_blocks: tanplan.dp.partition) g_i is the
gradient with respect to the trainable parameters alone, clipped to C over them; the noise has their shape
and the optimizer updates them alone, so the sensitivity stays C and the frozen parameters are released
as they came in (public: the init, or experiment.seed's draw). Low-rank adapters ([init] adapters:
tanplan.models.adapters) are this case: the adapters are ordinary Dense and Conv sub-layers, the trainable
parameters, and the base is frozen; g_i is over the adapters alone, clipped to C (tests/dp/test_adapter_route.py).
Dividing by the EXPECTED batch size B, the optimizer, the EMA and everything published after are
post-processing. The accountant (tanplan.privacy.accounting) composes S Poisson-subsampled Gaussian
mechanisms of multiplier σ (`events`, plus DP-SNIP's one release when pruning uses it) under the run's
relation (`neighbouring`): the DpEvents are those of exactly this sampling and this noise.

The loop, as pseudo-code (tanplan.engine.loop runs it, with checkpoints and evaluations beside it):

    mech = build(run_plan, route, clipped_sum, secret)
    keys = mech.key_data()                                 # secret; the public key is not in it
    noisy_sum = mech.noisy_sum()                           # jitted inside the step
    for t in range(start, S):
        batch = read_rows(mech.batch(t))                   # Poisson(q) from the secret; padded layout
        g = noisy_sum(params, batch, fold_in(keys["noise"], t), fold_in(keys["augment"], t)) / B
        params = optimizer(params, g)                      # post-processing
    ε = accounting.epsilon_of_events(mech.events(S), δ, accountant, mech.neighbouring)

Non-private runs (RunPlan.private False) have σ = 0: no noise, no clipping (`sensitivity` None), no
event. The masked step of pruning and gradient dropping (tanplan.dp.grad_drop) rebuilds its clipped sum
under each step's mask from the vmap route: `clipped_sum` is None then, and the batch, noise, events and
relation are this value's all the same.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from tanplan.dp import sampling
from tanplan.dp import step as dp_step
from tanplan.dp.secret import AUGMENT, BATCH, NOISE, RunSecret
from tanplan.privacy.run_plan import RunPlan


@dataclass(frozen=True)
class Mechanism:
    """One run's DP-SGD mechanism (see the module docstring for its guarantee)."""

    plan: RunPlan  # B, σ, C, S, δ, accountant and relation of record
    route: str  # the gradient route that computes clipped_sum: ghost | vmap | plain
    clipped_sum: Callable | None  # (params, x, y, keys, mask) -> (Σ clip_C(g_i), losses, accuracies) of a chunk
    secret: RunSecret

    @property
    def sensitivity(self) -> float | None:
        """L2 sensitivity of the clipped sum under add/remove-one neighbours: C (None: non-private, unclipped)."""
        return self.plan.clip_norm if self.plan.private else None

    @property
    def noise_std(self) -> float:
        """σ·C: the standard deviation of the noise on every coordinate of a step's sum (0 when non-private)."""
        return self.plan.noise_std

    @property
    def q(self) -> float:
        """The Poisson rate B/N the accountant assumes."""
        return self.plan.q

    @property
    def neighbouring(self) -> str:
        """The relation of record (add_remove | replace_one): the one σ was calibrated to."""
        return self.plan.neighbouring

    def events(self, steps: int | None = None) -> list[Any]:
        """The dp-accounting DpEvents of the releases once `steps` steps (default: all) are taken."""
        return self.plan.events(steps)

    def batch(self, t: int) -> np.ndarray:
        """Step t's Poisson batch (sorted dataset indices), from the run's secret: each example in with
        probability q, independently; a function of (secret, t) only, so a resumed run draws the same."""
        return sampling.poisson_batch(self.plan.dataset_size, self.plan.q, self.secret.batch_rng(BATCH, t))

    def key_data(self) -> dict[str, np.ndarray]:
        """The secret roots of the step's keys (host numpy): "noise" and "augment"; the step folds in t."""
        return {"noise": self.secret.key_data(NOISE), "augment": self.secret.key_data(AUGMENT)}

    def noisy_sum(self) -> Callable:
        """(params, batch, noise_key, aug_key) -> (Σ clip_C(g_i) + N(0, σ²C²), stats): the privatised sum of a
        padded batch (tanplan.dp.step.make_noisy_grad_sum); the bare sum when non-private."""
        if self.clipped_sum is None:
            raise ValueError("the masked step rebuilds its clipped sum under each step's mask (tanplan.dp.grad_drop)")
        return dp_step.make_noisy_grad_sum(self.clipped_sum, self.noise_std)


def build(plan: RunPlan, route: str, clipped_sum: Callable | None, secret: RunSecret) -> Mechanism:
    """The mechanism of a run: its plan, the route's clipped sum (C = plan.clip_norm when private) and its
    secret. ValueError when a private plan comes with the non-private route ("plain" sums unclipped)."""
    if plan.private and route == "plain":
        raise ValueError("a private run needs a clipped gradient sum (route ghost or vmap), not the plain one")
    return Mechanism(plan, route, clipped_sum, secret)
