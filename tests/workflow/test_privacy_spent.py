"""The composed ε of a stage's runs, read back from the ledgers they wrote."""

import pytest

from tanplan.fileio import write_json_atomic
from tanplan.privacy import accounting
from tanplan.privacy.ledger import Ledger, read_ledger
from tanplan.workflow.privacy_spent import report, spent


def _run(folder, q, sigma, steps, delta=1e-4):
    ledger = Ledger(delta=delta)
    ledger.advance(ledger.open_release(0, q, sigma, delta), steps)
    write_json_atomic(folder / "ledger.json", ledger.to_dict())


def test_the_runs_of_a_stage_compose_into_one_epsilon(tmp_path):
    runs = [(0.004, 0.35, 300), (0.004, 0.35, 300), (0.008, 0.7, 300)]
    for i, (q, sigma, steps) in enumerate(runs):
        _run(tmp_path / "runs" / f"r{i}", q, sigma, steps)
    info = report(tmp_path / "runs", tmp_path, "fit runs")
    assert info.runs == 3 and (tmp_path / "privacy_spent.json").is_file()
    independent = accounting.make_accountant("rdp")
    for q, sigma, steps in runs:
        independent.compose(accounting.dp_sgd_event(q, sigma, steps))
    assert info.epsilon_rdp == pytest.approx(independent.get_epsilon(1e-4), rel=1e-12)
    assert info.epsilon_pld < info.epsilon_rdp


def test_no_run_spends_nothing_and_mixed_deltas_compose_at_the_smallest(tmp_path):
    from tanplan.workflow.privacy_spent import ledgers_under

    assert spent([]).epsilon_rdp == 0.0
    _run(tmp_path / "a", 0.01, 1.0, 10, delta=1e-5)
    _run(tmp_path / "b", 0.01, 1.0, 10, delta=1e-6)
    info = spent(ledgers_under(tmp_path))
    assert info.delta == 1e-6 and "composed at the smallest" in info.note
    events = [accounting.dp_sgd_event(0.01, 1.0, 10)] * 2
    assert info.epsilon_pld == pytest.approx(accounting.epsilon_of_events(events, 1e-6, "pld"), rel=1e-12)


def test_a_composition_pld_cannot_run_falls_back_to_rdp_with_a_note(tmp_path):
    """The issue's sweep: two proxies at σ' = 0.065 (below PLD's domain) trained; their report must not fail."""
    for i in range(2):
        _run(tmp_path / "runs" / f"r{i}", 32 / 16_000, 0.065, 40, delta=16_000 ** -1.1)
    info = report(tmp_path / "runs", tmp_path, "sweep trials")
    assert info.epsilon_pld is None and info.epsilon_replace_one is None and "sigma ≥ 0.1" in info.note
    assert info.accountant == "rdp" and info.epsilon == info.epsilon_rdp > 0
    independent = accounting.make_accountant("rdp")
    independent.compose(accounting.dp_sgd_event(32 / 16_000, 0.065, 40), 2)
    assert info.epsilon_rdp == pytest.approx(independent.get_epsilon(16_000 ** -1.1), rel=1e-12)


def test_replace_one_is_composed_beside_add_remove(tmp_path):
    _run(tmp_path / "a", 0.05, 2.0, 100)
    info = spent([read_ledger(tmp_path / "a" / "ledger.json")], replace_one=True)
    assert info.epsilon_replace_one == pytest.approx(
        accounting.epsilon(0.05, 2.0, 100, 1e-4, "pld", "replace_one"), rel=1e-12)
    assert info.epsilon_replace_one > info.epsilon_pld
