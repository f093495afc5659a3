"""The privacy audit's outcome (audit.json): the ε the audited run claims and the empirical lower bound
against it (tanplan.workflow.audit). JAX-free."""

from __future__ import annotations

from dataclasses import dataclass

from tanplan.outcomes.base import Result


@dataclass(frozen=True, kw_only=True)
class Claim(Result):
    """The ε the audited run states (its ledger's, at its δ), as its summary gives them."""

    epsilon_rdp: float | None
    epsilon_pld: float | None  # None for a proxy (the engine reports a proxy's ε with RDP only)
    epsilon_replace_one: float | None  # None until the run states it
    accountant: str
    delta: float

    @property
    def add_remove(self) -> tuple[float, str]:
        """(ε, accountant): the smallest add/remove-one ε the run states, the one the canaries test."""
        stated = [(e, name) for e, name in ((self.epsilon_pld, "pld"), (self.epsilon_rdp, "rdp")) if e is not None]
        return min(stated)


@dataclass(frozen=True, kw_only=True)
class Assessment(Result):
    """One audit's scores against the run's claim: the bound, its guesses, the AUROC and the verdict."""

    verdict: str  # "consistent" (bound ≤ claim) or "violation" (bound > claim at the confidence)
    reason: str
    claimed_epsilon: float  # the smallest add/remove-one ε the run states
    claimed_accountant: str
    lower_bound: float  # ε ≥ lower_bound with the stated confidence: the one-sided interval [lower_bound, ∞)
    guesses: int
    correct_guesses: int
    ratio: float  # lower_bound / claimed_epsilon
    auroc: float  # of the scores, held in against held out (0.5: no separation)


@dataclass(frozen=True, kw_only=True)
class AuditResult(Result):
    """What `tanplan audit` reports (audit.json)."""

    verdict: str
    reason: str
    claim: Claim
    claimed_epsilon: float
    claimed_accountant: str
    lower_bound: float
    ratio: float
    confidence: float
    method: str
    guesses: int
    correct_guesses: int
    auroc: float
    canaries: int
    held_in: int
    held_out: int
    canary_coordinates: int  # b: the coordinates of each canary
    dataset_size: int
    batch_size: int
    steps: int
    sigma: float
    clip_norm: float
    proxy: bool
    wall_seconds: float
    run_folder: str | None
    note: str = ("The audited run trained canaries: its model and metrics are NOT a private release. The bound is a "
                 "lower bound: above the claim it refutes it at the stated confidence; below it, it proves nothing.")
