"""The progress bar's ε: equal to the ledger's RDP ε at every step, with the releases before the session
(a DP-SNIP release, an earlier session) composed in; nothing for a non-private run."""

import pytest

from tanplan.engine.epsilon_ticker import EpsilonTicker
from tanplan.privacy.ledger import Ledger

Q, SIGMA, DELTA = 256 / 16000, 1.1, 1e-5


def test_the_ticker_is_the_ledgers_rdp_epsilon_at_every_step():
    ledger = Ledger(delta=DELTA)
    ledger.record_snip(Q, 40.0, DELTA)
    ledger.advance(ledger.open_release(0, Q, SIGMA, DELTA), 7)  # an earlier session, then a resume at step 7
    release = ledger.open_release(7, Q, SIGMA, DELTA)
    ticker = EpsilonTicker(ledger, release)
    before = ledger.epsilon("rdp")
    assert ticker.at(7) == pytest.approx(before, rel=1e-12)
    previous = before
    for step in (8, 9, 15, 40):
        ledger.advance(release, step)
        assert ticker.at(step) == pytest.approx(ledger.epsilon("rdp"), rel=1e-12)
        assert ticker.at(step) > previous
        previous = ticker.at(step)


def test_the_ticker_shows_nothing_for_a_non_private_run():
    ledger = Ledger(delta=None)
    release = ledger.open_release(0, Q, 0.0, None)
    assert EpsilonTicker(ledger, release).at(5) is None
