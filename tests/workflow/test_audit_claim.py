"""An audit tests the run's own mechanism: where the run's ε of record composes what its [init] inherited, the
claim is its own S steps alone (the canaries see only those), computed by dp-accounting directly here."""

from types import SimpleNamespace

import dp_accounting
import pytest

from tanplan.outcomes.audit import Claim


def _summary(provenance, **figures):
    init = SimpleNamespace(provenance=provenance) if provenance is not None else None
    base = dict(epsilon_rdp=9.0, epsilon_pld=8.0, epsilon_replace_one=None, accountant="pld", delta=1e-5,
                batch_size=100, dataset_size=2000, sigma=1.5, steps=40, init=init)
    return SimpleNamespace(**(base | figures))


def _rdp(q, sigma, steps, delta):
    accountant = dp_accounting.rdp.RdpAccountant()
    event = dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(sigma))
    accountant.compose(dp_accounting.SelfComposedDpEvent(event, steps))
    return accountant.get_epsilon(delta)


@pytest.mark.parametrize("provenance", [None, {"kind": "assumed_public", "composed_releases": 0}])
def test_a_run_that_composes_nothing_is_claimed_as_its_summary_states(provenance):
    claim = Claim.of_run(_summary(provenance))
    assert (claim.epsilon_rdp, claim.epsilon_pld, claim.epsilon_replace_one) == (9.0, 8.0, None)


def test_a_run_whose_init_composes_is_claimed_at_its_own_steps_alone():
    summary = _summary({"kind": "composed", "composed_releases": 2}, epsilon_pld=None)  # a proxy: RDP only
    claim = Claim.of_run(summary)
    own = _rdp(100 / 2000, 1.5, 40, 1e-5)
    assert claim.epsilon_rdp == pytest.approx(own, rel=1e-9)
    assert claim.epsilon_rdp < 9.0 and claim.epsilon_pld is None and claim.epsilon_replace_one is None
    assert claim.add_remove == (claim.epsilon_rdp, "rdp")
