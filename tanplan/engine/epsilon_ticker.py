"""The ε spent after each step, cheaply, for the progress bar (from step 1, not only at evaluations).

RDP composes by addition: the RDP curve of a ledger whose current release has taken k steps is the curve of
the earlier releases plus k times that of one step (a Poisson-subsampled Gaussian at the release's q, σ).
Both curves are computed once, by dp-accounting's RDP accountant; ε at any step is then the accountant's
own RDP-to-(ε, δ) conversion of their sum: the ledger's RDP ε exactly, in microseconds instead of the
accountant's tens of milliseconds. It is shown, never released or checked against a budget: the ledger's
ε (tanplan.privacy.ledger) remains the one of record.
"""

from __future__ import annotations

from tanplan.privacy import accounting
from tanplan.privacy.ledger import Ledger, Release


class EpsilonTicker:
    """ε (RDP, at the ledger's δ) of `ledger` when `release` has reached a given step; None when the
    ledger is non-private or has no δ."""

    def __init__(self, ledger: Ledger, release: Release):
        self.first_step, self.delta = release.first_step, ledger.delta
        self.active = ledger.private and release.sigma > 0 and ledger.delta is not None
        if not self.active:
            return
        before = accounting.make_accountant("rdp")
        for event in (r.event() for r in ledger.releases if r is not release):
            if event is not None:
                before.compose(event)
        one_step = accounting.make_accountant("rdp")
        one_step.compose(accounting.dp_sgd_event(release.q, release.sigma, 1))
        self.orders, self.before, self.per_step = before.orders, before.rdp, one_step.rdp

    def at(self, step: int) -> float | None:
        """ε after `step` (the release's steps first_step+1 .. step), by the RDP accountant's conversion."""
        if not self.active:
            return None
        from dp_accounting.rdp.rdp_privacy_accountant import compute_epsilon

        rdp = self.before + max(0, step - self.first_step) * self.per_step
        if not rdp.any():
            return 0.0
        return float(compute_epsilon(self.orders, rdp, self.delta)[0])
