"""fit.spread_ratio reaches every prediction the pipeline makes (issue 48, item 6): the ladder's climb, the
fit of explicit rungs, and the run's final fit of the ladder's rows. Fixed numbers, nothing trains."""

from types import SimpleNamespace

import pytest

from tanplan.laws.batch_law import predict
from tanplan.outcomes.fit import ProxyRun
from tanplan.workflow.fit import fit_rows
from tanplan.workflow.ladder import Budget, climb
from tanplan.workflow.pipeline import stages

PLATEAU = {16: 0.75, 32: 0.80, 64: 0.85, 128: 0.852, 256: 0.851}
OFFSETS = (-0.012, 0.003, 0.009, -0.004)


def _train(b, seeds):
    """The same accuracies every time a rung is asked for: a draw that does not depend on the ratio."""
    return [PLATEAU[b] + OFFSETS[i % len(OFFSETS)] for i in range(seeds)]


def _budget():
    return Budget(16, 4096, 3, 1024, 0.3)  # no precision target: the climb goes where the law's share says


def test_the_ladders_climb_applies_the_ratio_and_is_unchanged_without_it():
    default, off = climb(_train, _budget()), climb(_train, _budget(), spread_ratio=0.0)
    assert default.prediction.interval == off.prediction.interval and default.steps == off.steps
    on = climb(_train, _budget(), spread_ratio=0.8)
    rows = [(r.batch_size, a) for r in on.rungs for a in r.accuracies]
    assert on.prediction.spread_ratio == 0.8
    assert on.prediction.var_launch == pytest.approx(0.64 * predict(rows, 4096).var_launch, rel=1e-12)


def test_fit_rows_applies_the_ratio_it_is_given():
    runs = [ProxyRun(batch_size=b, seed=s, test_accuracy=acc + OFFSETS[s], sigma=1.0, steps=100, wall_seconds=0.0)
            for b, acc in PLATEAU.items() for s in range(3)]
    off, on = (fit_rows(runs, 4096, None, law="auto", spread_ratio=r) for r in (0.0, 0.5))
    assert on.predicted_accuracy == off.predicted_accuracy
    assert on.parts.launch == pytest.approx(0.25 * off.parts.launch, rel=1e-12)
    assert on.half_width < off.half_width


def test_the_runs_final_fit_of_the_ladders_rows_uses_the_ratio_the_ladder_used(monkeypatch, tmp_path):
    seen = {}
    monkeypatch.setattr(stages.fit_module, "fit_rows", lambda *a, **k: seen.update(k))
    ladder = SimpleNamespace(prediction=SimpleNamespace(level=0.95), points=(), target_batch_size=4096,
                             law_setting="auto", test_sizes=(None, None))
    stages.ladder_fit_result(ladder, tmp_path, 0.08, 0.7)
    assert seen["spread_ratio"] == 0.7 and seen["max_half_width"] == 0.08
