"""The privacy ledger: a resumed run adds only the steps it takes; ε composes like one uninterrupted run."""

import pytest

from tanplan.privacy import accounting
from tanplan.privacy.ledger import Ledger


def test_split_releases_cost_what_one_run_costs():
    q, sigma, delta = 0.05, 1.1, 1e-5
    split = Ledger(budget_epsilon=8.0, delta=delta)
    first = split.open_release(0, q, sigma, delta)
    split.advance(first, 40)
    second = split.open_release(40, q, sigma, delta)  # a resume at the checkpoint of step 40
    split.advance(second, 100)
    assert split.steps == 100
    assert split.epsilon("rdp") == pytest.approx(accounting.epsilon(q, sigma, 100, delta, "rdp"), rel=1e-9)


def test_resume_must_start_where_the_ledger_ends_and_roundtrips():
    ledger = Ledger(delta=1e-5)
    release = ledger.open_release(0, 0.1, 2.0, 1e-5)
    ledger.advance(release, 6)
    with pytest.raises(ValueError):
        ledger.open_release(8, 0.1, 2.0, 1e-5)  # steps 7-8 were never checkpointed: not a valid resume point
    again = Ledger.from_dict(ledger.to_dict())
    assert again.steps == 6 and again.epsilon() == pytest.approx(ledger.epsilon())
    assert again.open_release(6, 0.1, 2.0, 1e-5).session == 2


def test_non_private_ledger_claims_no_guarantee():
    ledger = Ledger()
    ledger.advance(ledger.open_release(0, 0.1, 0.0, None), 5)
    assert ledger.epsilon() is None and ledger.steps == 5


def test_ledgers_of_several_runs_compose_into_one_epsilon():
    from tanplan.privacy.ledger import epsilon_of_ledgers

    delta = 1e-5
    runs = [(0.01, 0.4, 30), (0.02, 0.8, 30), (0.3, 6.0, 30)]  # two proxies and a target
    ledgers = []
    for q, sigma, steps in runs:
        ledger = Ledger(delta=delta)
        ledger.advance(ledger.open_release(0, q, sigma, delta), steps)
        ledgers.append(ledger)
    total = epsilon_of_ledgers(ledgers, delta)
    independent = accounting.make_accountant("rdp")
    for q, sigma, steps in runs:  # recomputed here from the (q, σ, S) list alone
        independent.compose(accounting.dp_sgd_event(q, sigma, steps))
    assert total == pytest.approx(independent.get_epsilon(delta), rel=1e-12)
    assert total > max(ledger.epsilon() for ledger in ledgers)
