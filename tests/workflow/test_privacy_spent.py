"""The composed ε of a stage's runs, read back from the ledgers they wrote."""

import pytest

from tanplan.fileio import write_json_atomic
from tanplan.privacy import accounting
from tanplan.privacy.ledger import Ledger
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
    assert info["runs"] == 3 and (tmp_path / "privacy_spent.json").is_file()
    independent = accounting.make_accountant("rdp")
    for q, sigma, steps in runs:
        independent.compose(accounting.dp_sgd_event(q, sigma, steps))
    assert info["epsilon_rdp"] == pytest.approx(independent.get_epsilon(1e-4), rel=1e-12)
    assert info["epsilon_pld"] < info["epsilon_rdp"]


def test_no_run_spends_nothing_and_mixed_deltas_are_refused(tmp_path):
    assert spent([])["epsilon_rdp"] == 0.0
    _run(tmp_path / "a", 0.01, 1.0, 10, delta=1e-5)
    _run(tmp_path / "b", 0.01, 1.0, 10, delta=1e-6)
    from tanplan.workflow.privacy_spent import ledgers_under

    with pytest.raises(ValueError, match="different δ"):
        spent(ledgers_under(tmp_path))
