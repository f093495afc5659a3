"""The privacy audit's outcome (audit.json): the ε the audited run claims and the empirical lower bound
against it (tanplan.workflow.audit). JAX-free."""

from __future__ import annotations

from dataclasses import dataclass

from tanplan.outcomes.base import Result
from tanplan.privacy import accounting


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

    @classmethod
    def of_run(cls, summary) -> "Claim":
        """The claim an audit tests: the run's own mechanism, its S steps at (q = B/N, σ). Where its figures of
        record compose releases its [init] inherited (tanplan.privacy.init_provenance), those are left out:
        the canaries see only this run's steps, and the composed figure is a larger, looser claim."""
        provenance = summary.init.provenance if summary.init is not None else None
        if not (provenance and provenance.get("composed_releases")):
            return cls(epsilon_rdp=summary.epsilon_rdp, epsilon_pld=summary.epsilon_pld,
                       epsilon_replace_one=summary.epsilon_replace_one, accountant=summary.accountant,
                       delta=summary.delta)
        own = [accounting.dp_sgd_event(summary.batch_size / summary.dataset_size, summary.sigma, summary.steps)]

        def figure(stated, accountant, neighbouring="add_remove"):  # only those the run states itself
            return None if stated is None else accounting.epsilon_of_events(own, summary.delta, accountant,
                                                                              neighbouring)

        return cls(epsilon_rdp=figure(summary.epsilon_rdp, "rdp"), epsilon_pld=figure(summary.epsilon_pld, "pld"),
                   epsilon_replace_one=figure(summary.epsilon_replace_one, "pld", "replace_one"),
                   accountant=summary.accountant, delta=summary.delta)


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
    guessed_in: int  # the guesses behind lower_bound: the guessed_in highest scores held in,
    guessed_out: int  # the guessed_out lowest held out, abstaining on the rest
    fdp_estimate: float  # the f-DP (μ-GDP) one-run estimate of ε at δ (tanplan.workflow.audit_stats)
    fdp_ratio: float  # fdp_estimate / claimed_epsilon
    fdp_guesses: int
    fdp_correct_guesses: int
    ceiling: float  # the largest lower_bound these canaries allow: every one guessed, every guess right
    fdp_ceiling: float  # the same for the f-DP estimate


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
    guessed_in: int
    guessed_out: int
    fdp_estimate: float
    fdp_ratio: float
    fdp_guesses: int
    fdp_correct_guesses: int
    ceiling: float
    fdp_ceiling: float
    canaries: int
    held_in: int
    held_out: int
    canary_coordinates: int | None  # b: the coordinates of each gradient canary (None: input canaries)
    dataset_size: int
    batch_size: int
    steps: int
    sigma: float
    clip_norm: float
    proxy: bool
    wall_seconds: float
    run_folder: str | None
    canary_kind: str = "gradient"  # gradient (added after clipping) | input (crafted examples, clipped with the batch)
    note: str = ("The audited run trained canaries: its model and metrics are NOT a private release. The bound is a "
                 "lower bound: above the claim it refutes it at the stated confidence; below it, it proves nothing.")
