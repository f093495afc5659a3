"""The ε the progress bar shows at each step: the ledger's figure of record, never a smaller one.

The figure of record (tanplan.privacy.ledger, `Ledger.record()`) is the accountant and neighbouring
relation of the config, PLD under add/remove-one by default; a proxy's is RDP under add/remove-one. At an
evaluation step the bar shows it exactly (the figure metrics.jsonl records). Between evaluations it shows
the figure of record at the NEXT evaluation, labelled "≤": the ε of record grows with the steps (one more
step composes one more mechanism, and every PLD figure of a ledger is computed on its one grid), so
this bounds the ε of every step before it, including a stop by a signal or an error in between. It
costs one accountant call per evaluation (memoised: the evaluation then reuses it); RDP is composed
additively (the curve of the earlier releases plus k times one step's), in microseconds.
"""

from __future__ import annotations

import math
from typing import Callable

from tanplan.privacy import accounting
from tanplan.privacy.ledger import Ledger, Release


class EpsilonTicker:
    """ε of record of `ledger` when `release` has reached a given step (`at`) and what the bar shows
    (`shown`); None when the ledger is non-private or has no δ. next_mark(step): the first evaluation
    step at or after `step`."""

    def __init__(self, ledger: Ledger, release: Release, next_mark: Callable[[int], int] = lambda step: step):
        self.ledger, self.release, self.next_mark = ledger, release, next_mark
        self.first_step, self.delta = release.first_step, ledger.delta
        self.accountant, self.neighbouring = ledger.record()
        self.label = f"ε_{self.accountant}" + ("" if self.neighbouring == "add_remove" else "(replace-one)")
        self.active = ledger.private and release.sigma > 0 and ledger.delta is not None
        if not self.active:
            return
        self.before = [e for e in (r.event() for r in ledger.releases if r is not release) if e is not None]
        self.before += ledger.inherited_events()  # [init]'s composed releases: part of the figure of record
        if self.accountant == "rdp":
            before = accounting.make_accountant("rdp")
            for event in self.before:
                before.compose(event)
            one_step = accounting.make_accountant("rdp")
            one_step.compose(accounting.dp_sgd_event(release.q, release.sigma, 1))
            self.orders, self.rdp_before, self.per_step = before.orders, before.rdp, one_step.rdp

    def at(self, step: int) -> float | None:
        """ε of record after `step` (the release's steps first_step+1 .. step); the ledger's own figure."""
        if not self.active:
            return None
        taken = max(0, step - self.first_step)
        if self.accountant == "rdp":
            from dp_accounting.rdp.rdp_privacy_accountant import compute_epsilon

            rdp = self.rdp_before + taken * self.per_step
            if not rdp.any():
                return 0.0
            return float(compute_epsilon(self.orders, rdp, self.delta)[0])
        events = self.before + ([accounting.dp_sgd_event(self.release.q, self.release.sigma, taken)] if taken else [])
        return accounting.epsilon_of_events(events, self.delta, self.accountant, self.neighbouring,
                                            self.ledger.pld_interval)

    def shown(self, step: int) -> str | None:
        """The bar's text after `step`: the ε of record there at an evaluation, else "≤" that at the next."""
        mark = self.next_mark(step)
        value = self.at(mark)
        if value is None:
            return None
        return ("" if mark == step else "≤") + round_up(value)


def round_up(value: float, digits: int = 3) -> str:
    """value to `digits` significant digits, rounded up: a figure shown for an ε never reads below it."""
    if value <= 0 or not math.isfinite(value):
        return f"{value:.{digits}g}"
    unit = 10.0 ** (math.floor(math.log10(value)) - digits + 1)
    shown = math.ceil(value / unit) * unit
    while float(f"{shown:.{digits}g}") < value:  # the decimal text of a binary float may read below it
        shown += unit
    return f"{shown:.{digits}g}"
