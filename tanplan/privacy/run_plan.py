"""What one run's guarantee rests on, and the one function that turns its releases into ε. No JAX.

A private run releases, on its training set of N examples:
1. with pruning.method = "dp_snip", ONE noisy sum of per-example saliencies clipped to C, over a Poisson
   batch at rate q, noise σ_snip·C (tanplan.dp.pruning): a Poisson-subsampled Gaussian mechanism;
2. S DP-SGD steps, each a Poisson-subsampled Gaussian mechanism: every example in the batch with
   probability q = B/N, per-example gradients clipped to L2 norm C, N(0, σ²C²) added once to their sum.
Neighbouring datasets differ by adding or removing one example (ADD_OR_REMOVE_ONE, the relation of
record by default), for which each sum has sensitivity C; or by replacing one (REPLACE_ONE, up to 2C when
both are sampled), which privacy.neighbouring = "replace_one" makes the relation σ is calibrated to. Both
are reported. `RunPlan.events` describes these releases as dp-accounting DpEvents and
`RunPlan.epsilon` composes them with tanplan.privacy.accounting.epsilon_of_events, the same function
the ledger, the launch's budget check, the sweep and the pipeline's total use.

    >>> run = RunPlan(dataset_size=1000, batch_size=100, steps=10, sigma=2.0, delta=1e-5, clip_norm=1.0)
    >>> round(run.epsilon(), 3) == round(run.epsilon(steps=10), 3)
    True
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from tanplan.config import train_steps
from tanplan.errors import UsageError
from tanplan.privacy import accounting, snip_budget
from tanplan.privacy.plan import Plan, check_delta_below_one_over_n, default_delta, plan_from_config


@dataclass(frozen=True)
class RunPlan:
    """The (B, σ, S) a run trains with and what its guarantee rests on; σ = 0 when non-private."""

    dataset_size: int
    batch_size: int
    steps: int
    sigma: float
    delta: float | None
    private: bool = True
    clip_norm: float = 1.0
    accountant: str = "pld"
    snip_sigma: float = 0.0  # σ of the DP-SNIP release at this run's scale (0 = no release)
    plan: Plan | None = None  # the Plan trained (a proxy's when one is trained)
    target: Plan | None = None  # the target Plan when a proxy is trained
    neighbouring: str = "add_remove"  # the relation of record

    @property
    def q(self) -> float:
        return self.batch_size / self.dataset_size

    @property
    def noise_std(self) -> float:
        """σ·C: the standard deviation of the noise added to each step's clipped sum."""
        return self.sigma * self.clip_norm if self.private else 0.0

    def events(self, steps: int | None = None) -> list[Any]:
        """The DpEvents of the run's releases once `steps` steps (default: all) are taken."""
        steps = self.steps if steps is None else steps
        if not self.private:
            return []
        out = [snip_event(self.q, self.snip_sigma)] if self.snip_sigma else []
        if steps > 0:
            out.append(accounting.dp_sgd_event(self.q, self.sigma, steps))
        return out

    def epsilon(self, accountant: str | None = None, steps: int | None = None,
                neighbouring: str | None = None) -> float | None:
        """ε at δ of the releases after `steps` steps under the accountant and relation (the run's own by
        default); None when non-private; 0 before any release."""
        if not self.private:
            return None
        return accounting.epsilon_of_events(self.events(steps), self.delta, accountant or self.accountant,
                                            neighbouring or self.neighbouring)

    def at(self, batch_size: int) -> "RunPlan":
        """The proxy (B', σ·B'/B, S, σ_snip·B'/B) of this run's target on the same N: what resolve_plan gives
        its config with train.proxy_batch_size = B', derived from the plan a stage's entry resolved; this run
        for B' = 0 when it is the target. Refuses (UsageError) as resolve_plan does: B' outside [1, B]."""
        if not self.private:
            batch = int(batch_size or self.batch_size)
            if batch > self.dataset_size:
                raise UsageError(f"train.batch_size = {batch} is not allowed: must be <= the dataset size "
                                 f"{self.dataset_size}")
            return dataclasses.replace(self, batch_size=batch)
        target = self.target or self.plan
        if not batch_size and self.target is None:
            return self
        if not batch_size:
            raise UsageError("RunPlan.at(0) is the target: resolve it at the stage's entry (resolve_plan)")
        snip = self.snip_sigma if self.target is None else self.snip_sigma * target.batch_size / self.batch_size
        if target.dataset_size != self.dataset_size:  # the twin of a set smaller than B (twin_beyond)
            sigma = target.sigma * batch_size / self.dataset_size  # σ·B'/B, the twin's σ being σ·N'/B
            proxy = Plan(self.dataset_size, int(batch_size), target.steps, sigma, target.delta, None,
                         target.accountant, target.neighbouring)
        else:
            proxy = target.proxy(batch_size)
        return RunPlan(self.dataset_size, proxy.batch_size, proxy.steps, proxy.sigma, proxy.delta, True,
                       self.clip_norm, self.accountant, snip * proxy.batch_size / target.batch_size, proxy, target,
                       self.neighbouring)


def snip_event(q: float, sigma_snip: float):
    """The DpEvent of the DP-SNIP release: one Poisson-subsampled Gaussian with multiplier σ_snip."""
    return accounting.dp_sgd_event(q, sigma_snip, 1)


def uses_snip(cfg) -> bool:
    """Whether the run releases a DP-SNIP saliency sum (private runs pruning with dp_snip)."""
    return cfg.pruning.method == "dp_snip" and cfg.pruning.rate > 0 and cfg.privacy.private


def target_plan(cfg, dataset_size: int) -> tuple[Plan, float]:
    """(the target Plan, σ_snip at the target's scale; 0.0 without DP-SNIP).

    With DP-SNIP the budget is split (tanplan.privacy.snip_budget): σ_snip spends
    pruning.snip_budget_share·ε alone, σ_train is calibrated so that the composition meets ε.
    """
    if not uses_snip(cfg):
        return plan_from_config(cfg, dataset_size), 0.0
    privacy, train = cfg.privacy, cfg.train
    delta = privacy.delta or default_delta(dataset_size)
    given = float(privacy.sigma) if privacy.sigma > 0 else None
    budget = snip_budget.split_budget(train.batch_size / dataset_size, train_steps(train, dataset_size),
                                      float(privacy.epsilon),
                                      delta, cfg.pruning.snip_budget_share, privacy.accountant, sigma_train=given,
                                      neighbouring=privacy.neighbouring)
    plan = Plan(dataset_size, int(train.batch_size), train_steps(train, dataset_size), budget.sigma_train, delta,
                float(privacy.epsilon), privacy.accountant, privacy.neighbouring)
    return plan, budget.sigma_snip


def twin_beyond(cfg, dataset_size: int) -> tuple[Plan, Plan]:
    """(the twin, the proxy) of a proxy on a set smaller than the target's batch B (a public set of N' < B
    examples): the target's twin (B, σ, S) on it would sample with q = B/N' > 1, which is no run; its proxy
    (B', σ·B'/B, S) is one, at the twin's η_step = B/(√2·σ·N'). The twin stated is the same η_step and S at
    q = 1: (N = B, B, σ·N'/B, S), B kept (the proxy's savings and the law's target read it)."""
    t, p = cfg.train, cfg.privacy
    steps, delta = train_steps(t, dataset_size), p.delta or default_delta(dataset_size)
    proxy = Plan(dataset_size, int(t.proxy_batch_size), steps, float(p.sigma) * t.proxy_batch_size / t.batch_size,
                 delta, None, p.accountant, p.neighbouring)  # B' > N' is refused here
    twin = Plan(int(t.batch_size), int(t.batch_size), steps, float(p.sigma) * dataset_size / t.batch_size, delta,
                None, p.accountant, p.neighbouring)
    return twin, proxy


def resolve_plan(cfg, dataset_size: int) -> RunPlan:
    """The RunPlan of a config on N examples: the target, or its proxy (B', σ·B'/B, S) when
    train.proxy_batch_size > 0 (σ_snip scales with B' too, keeping the release's η_step).

    Refuses (UsageError) before anything is computed: δ ≥ 1/N unless privacy.allow_large_delta (the
    proxies of a public tuning set carry the target's δ, checked on the private N, and set it), and a
    full-scale σ below PLD's domain (its ε is reported by PLD too)."""
    t = cfg.train
    if not cfg.privacy.private:
        batch = t.proxy_batch_size or t.batch_size
        if batch > dataset_size:
            raise UsageError(f"train.batch_size = {batch} is not allowed: must be <= the dataset size {dataset_size}")
        return RunPlan(dataset_size, batch, train_steps(t, dataset_size), 0.0, None, private=False,
                       clip_norm=cfg.privacy.clip_norm)
    if cfg.privacy.delta:
        check_delta_below_one_over_n(cfg.privacy.delta, dataset_size, cfg.privacy.allow_large_delta)
    if t.proxy_batch_size and t.batch_size > dataset_size and cfg.privacy.sigma > 0 and not uses_snip(cfg):
        target, plan, snip_sigma = *twin_beyond(cfg, dataset_size), 0.0
    else:
        target, snip_sigma = target_plan(cfg, dataset_size)
        plan = target.proxy(t.proxy_batch_size) if t.proxy_batch_size else target
    if not t.proxy_batch_size and plan.sigma < accounting.PLD_SIGMA_MIN:
        # A full-scale run reports its ε under both accountants at the end: refuse now what PLD cannot do.
        raise UsageError(f"sigma = {plan.sigma:.4g} is not allowed for a full-scale run: its ε is reported under the "
                         f"PLD accountant too, which needs sigma >= {accounting.PLD_SIGMA_MIN:g}; add noise, or train "
                         "it as a proxy (train.proxy_batch_size)")
    return RunPlan(dataset_size, plan.batch_size, plan.steps, plan.sigma, plan.delta, True, cfg.privacy.clip_norm,
                   cfg.privacy.accountant, snip_sigma * plan.batch_size / target.batch_size, plan,
                   target if t.proxy_batch_size else None, cfg.privacy.neighbouring)
