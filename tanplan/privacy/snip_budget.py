"""Privacy accounting of DP-SNIP pre-pruning composed with DP-SGD training. No JAX.

DP-SNIP (Adamczewski et al. 2023, appendix A) releases ONE noisy sum of per-example clipped saliencies
s_i = θ ⊙ ∇_θ loss_i(θ) (clipped to L2 norm C) over a Poisson batch at the training's sampling rate q,
with Gaussian noise σ_snip·C: one Poisson-subsampled Gaussian mechanism, sensitivity C under
ADD_OR_REMOVE_ONE. The mask it yields is post-processing of that release. Training then runs S DP-SGD
steps (tanplan.privacy.accounting.dp_sgd_event). The run's ε is that of the COMPOSITION of both events,
`ComposedDpEvent([snip, training])`, interpreted by the same accountant; never ε_train + ε_snip nor a
subtraction of budgets.

Budget split (pruning.snip_budget_share = s, target ε):
- σ_snip is calibrated so that the SNIP release alone costs s·ε;
- σ_train is then calibrated so that the composition of both costs at most ε (within 1%).
With σ given in the config (privacy.sigma > 0), σ_snip is still calibrated to s·privacy.epsilon and
the reported ε is the composition (it may exceed privacy.epsilon, as any fixed-σ run may).
Random, SynFlow and magnitude/random gradient dropping read no data: they add no event.
"""

from __future__ import annotations

from dataclasses import dataclass

from tanplan.privacy import accounting
from tanplan.errors import UsageError

PRUNE_METHODS = ("none", "random", "synflow", "dp_snip")
GRAD_DROP_METHODS = ("none", "random", "magnitude")


def composed_epsilon(q: float, sigma: float, steps: int, delta: float, sigma_snip: float,
                     accountant: str = "pld", neighbouring: str = "add_remove") -> float:
    """ε of the composition (DP-SNIP release, then S DP-SGD steps) at δ under the accountant."""
    events = [accounting.dp_sgd_event(q, sigma_snip, 1)] if sigma_snip else []
    if steps > 0:
        events.append(accounting.dp_sgd_event(q, sigma, steps))
    return accounting.epsilon_of_events(events, delta, accountant, neighbouring)


@dataclass(frozen=True)
class SnipBudget:
    """The noise multipliers of a DP-SNIP run at the target scale (before any proxy scaling)."""

    sigma_snip: float
    sigma_train: float


def split_budget(q: float, steps: int, epsilon: float, delta: float, share: float,
                 accountant: str = "pld", sigma_train: float | None = None,
                 neighbouring: str = "add_remove") -> SnipBudget:
    """σ_snip for share·ε alone, then σ_train (unless given) so that the composition meets ε.

    Guarantee (σ_train calibrated): composed_epsilon(q, σ_train, S, δ, σ_snip) ≤ ε, within 1% of it.
    """
    if not 0 < share < 1:
        raise UsageError(f"pruning.snip_budget_share = {share!r} is not allowed: must be in (0, 1)")
    sigma_snip = accounting.calibrate_sigma(q, 1, share * epsilon, delta, accountant, neighbouring)
    if sigma_train is not None:
        return SnipBudget(sigma_snip, sigma_train)
    # The composition costs at most about ε_snip + ε_train, so σ for (1 − share)·ε is a safe start.
    try:  # a start only: RDP's σ is cheap, and the PLD search below walks down from it
        guess = accounting.calibrate_sigma(q, steps, (1 - share) * epsilon, delta, "rdp")
    except UsageError:
        guess = accounting.calibrate_sigma(q, steps, (1 - share) * epsilon, delta, accountant, neighbouring)
    if accountant == "pld":  # searched on a coarse grid, confirmed on the fine one
        snip = [accounting.dp_sgd_event(q, sigma_snip, 1)]
        found = accounting.solve_pld(lambda s: snip + [accounting.dp_sgd_event(q, s, steps)], guess, epsilon, delta,
                                     neighbouring)
        return SnipBudget(sigma_snip, found)
    eps_of = lambda s: composed_epsilon(q, s, steps, delta, sigma_snip, accountant, neighbouring)  # noqa: E731
    found = accounting._solve_decreasing(eps_of, guess, epsilon, close=accounting.CALIBRATION_SLACK / 2)
    return SnipBudget(sigma_snip, found)
