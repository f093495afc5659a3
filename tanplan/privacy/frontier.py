"""The budget frontier: the full-scale DP-SGD plans that one privacy budget and one compute budget allow.

Given N training examples, a budget (ε, δ) and a compute budget C (examples processed, B·S), every
candidate is a Plan (B, S, σ) with B = ⌊C/S⌋ ≤ N, so B·S ≤ C, and σ calibrated to ε with the exact
accountant asked for (PLD, the accountant of record by default, or RDP;
tanplan.privacy.accounting.calibrate_sigma): its ε is at most the budget and within 1% of it; its RDP
ε is reported beside it. Spending less than C, or less than ε, can only lose accuracy, so these are the plans worth
comparing; they differ in how they split C between the batch and the steps. At a fixed ε the total
signal-to-noise η is nearly fixed (σ ≥ 2: ε ≈ ε_TAN(η)), so along the frontier σ ∝ B·√S/N falls as S
grows, and the smallest batches leave the TAN regime (Sander, Stock, Sablayrolles, "TAN Without a
Burn", 2023, §3.2).

The steps sit on a geometric grid S = anchor·factor^j (rounded), plus both ends of the frontier; the anchor
defaults to the fewest steps that fit (B ≤ N), and a config's own S is a natural anchor. A candidate whose ε cannot be met (σ above
the calibration bound) is dropped with its reason, never shown as a candidate. No JAX.

    >>> front = frontier(16000, 0.7, 4096 * 300, factor=4.0, accountant="rdp")
    >>> all(c.batch_size * c.steps <= 4096 * 300 and c.eps_rdp <= 0.7 for c in front.candidates)
    True
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from tanplan.errors import UsageError
from tanplan.privacy import accounting
from tanplan.privacy.plan import Plan, default_delta, validate


@dataclass(frozen=True, kw_only=True)
class Candidate:
    """One full-scale plan on the frontier: (B, S, σ) with σ calibrated to the budget, its exact ε under the
    accountant of record and under RDP, and its TAN figures. The fields are its JSON keys (`tanplan plan
    --compute`, optimize.json), so `tanplan optimize`'s rows (tanplan.outcomes.optimize.FrontierRow) extend it."""

    batch_size: int
    steps: int
    sigma: float
    epsilon: float  # under the accountant of record, the one σ was calibrated with
    accountant: str
    eps_rdp: float
    eta: float
    eta_step: float
    eps_tan: float
    q: float
    regime: str
    compute: int  # examples processed by the run: B·S (B the expected batch size)

    @classmethod
    def of(cls, plan: Plan) -> "Candidate":
        return cls(batch_size=plan.batch_size, steps=plan.steps, sigma=plan.sigma, epsilon=plan.epsilon(),
                   accountant=plan.accountant, eps_rdp=plan.epsilon("rdp"), eta=plan.eta, eta_step=plan.eta_step,
                   eps_tan=plan.eps_tan, q=plan.q, regime=plan.regime.value, compute=plan.batch_size * plan.steps)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data) -> "Candidate":
        return cls(**data)


@dataclass(frozen=True, kw_only=True)
class Dropped:
    """A grid point whose ε cannot be met, and why."""

    batch_size: int
    steps: int
    reason: str

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data) -> "Dropped":
        return cls(**data)


@dataclass(frozen=True, kw_only=True)
class Frontier:
    """Every candidate of one budget, and the grid points dropped (tanplan.outcomes.planning.FrontierResult
    adds what `tanplan plan --compute` reports beside them)."""

    dataset_size: int
    epsilon: float
    delta: float
    compute: int
    accountant: str
    candidates: tuple[Candidate, ...]
    dropped: tuple[Dropped, ...]

    def to_dict(self) -> dict:
        return {"dataset_size": self.dataset_size, "epsilon": self.epsilon, "delta": self.delta,
                "compute": self.compute, "accountant": self.accountant,
                "candidates": [c.to_dict() for c in self.candidates], "dropped": [d.to_dict() for d in self.dropped]}


def check_budget(dataset_size: int, epsilon: float, compute: int, delta: float, min_batch_size: int = 1,
                 factor: float = 2.0, accountant: str = "pld") -> None:
    """Raise UsageError naming the first value that leaves no frontier (before any accounting)."""
    validate(dataset_size, 1, 1, None, delta, epsilon)
    if not (isinstance(min_batch_size, int) and 1 <= min_batch_size <= dataset_size):
        raise UsageError(f"minimum batch size {min_batch_size} is not allowed: must be in [1, {dataset_size}] "
                         f"(the dataset size)")
    if not (isinstance(compute, int) and compute >= min_batch_size):
        raise UsageError(f"compute {compute} is not allowed: must be a whole number of examples ≥ {min_batch_size}, "
                         f"one step of the smallest batch")
    if not (math.isfinite(factor) and factor > 1):
        raise UsageError(f"steps factor {factor:g} is not allowed: must be > 1")
    floor = accounting.rdp_floor(delta)
    if accountant == "rdp" and epsilon <= floor * 1.001:
        raise UsageError(f"epsilon={epsilon:g} cannot be reached by any sigma under the RDP accountant at "
                         f"delta={delta:g}: its floor is {floor:.4g}; use a larger epsilon or delta")


def anchor_steps(dataset_size: int, compute: int, anchor: int | None, min_batch_size: int = 1) -> int:
    """The grid's anchor: `anchor` moved into the feasible steps [⌈C/N⌉, ⌊C/min_batch_size⌋]; by default
    ⌈C/N⌉, the fewest steps whose batch fits in the dataset."""
    s_min = max(1, math.ceil(compute / dataset_size))
    s_max = max(s_min, compute // min_batch_size)
    return s_min if anchor is None else min(max(int(anchor), s_min), s_max)


def steps_grid(dataset_size: int, compute: int, *, min_batch_size: int = 1, factor: float = 2.0,
               anchor: int | None = None) -> list[int]:
    """The steps S = anchor·factor^j (rounded, increasing) whose batch ⌊C/S⌋ lies in [min_batch_size, N],
    and the two ends of that range, ⌈C/N⌉ (the largest batch, B ≤ N) and ⌊C/min_batch_size⌋, unless a grid
    point lies within a factor^(1/4) of them.

    The default anchor is ⌈C/N⌉, the fewest steps whose batch fits in the dataset.
    """
    s_min = max(1, math.ceil(compute / dataset_size))
    s_max = compute // min_batch_size
    if s_min > s_max:
        return []
    anchor = anchor_steps(dataset_size, compute, anchor, min_batch_size)
    low = math.floor(math.log(s_min / anchor, factor)) - 1
    high = math.ceil(math.log(s_max / anchor, factor)) + 1
    grid = {s for s in (round(anchor * factor**j) for j in range(low, high + 1))
            if s >= 1 and min_batch_size <= compute // s <= dataset_size}
    for end in (s_min, s_max):  # both ends of the frontier, unless a grid point is already next to them
        if all(max(end / s, s / end) > factor**0.25 for s in grid):
            grid.add(end)
    return sorted(grid)


def frontier(dataset_size: int, epsilon: float, compute: int, delta: float | None = None, *,
             min_batch_size: int = 1, factor: float = 2.0, anchor: int | None = None,
             accountant: str = "pld") -> Frontier:
    """Every grid candidate (B = ⌊C/S⌋, S, σ) at the budget: σ calibrated so that the exact ε under
    `accountant` is at most `epsilon` (within 1%), eps_rdp that plan's RDP ε.

    Guarantee: for every candidate, B·S ≤ compute, 1 ≤ B ≤ N and its ε under the accountant ≤ epsilon
    (the accountant's ε of S steps of the Poisson-subsampled Gaussian at q = B/N, add/remove-one
    neighbours). Raises UsageError when the budget leaves no candidate at all.
    """
    delta = default_delta(dataset_size) if delta is None else delta
    check_budget(dataset_size, epsilon, compute, delta, min_batch_size, factor, accountant)
    candidates, dropped = [], []
    for steps in steps_grid(dataset_size, compute, min_batch_size=min_batch_size, factor=factor, anchor=anchor):
        batch = compute // steps
        try:
            plan = Plan.from_budget(dataset_size, batch, steps, epsilon, delta, accountant)
        except UsageError as err:  # the σ bound: this split of C cannot meet ε
            dropped.append(Dropped(batch_size=batch, steps=steps, reason=str(err)))
            continue
        candidates.append(Candidate.of(plan))
    if not candidates:
        reasons = "; ".join(sorted({d.reason for d in dropped})) or "no batch size in range"
        raise UsageError(f"compute {compute} leaves no candidate for N={dataset_size}, epsilon={epsilon:g} with "
                         f"batch sizes in [{min_batch_size}, {dataset_size}]: {reasons}")
    return Frontier(dataset_size=dataset_size, epsilon=float(epsilon), delta=float(delta), compute=int(compute),
                    accountant=accountant, candidates=tuple(candidates), dropped=tuple(dropped))


__all__ = ["Candidate", "Dropped", "Frontier", "anchor_steps", "check_budget", "frontier", "steps_grid"]
