"""`tanplan run` with a public set smaller than the private one (issue 48, item 5): the law's top rung trains again
on half of the public set, and the prediction carries what the data size does (tanplan.laws.data_size), in its
mean, its interval, summary.json, the terminal line and the proxies' compute. Fake engine: accuracy a known
law of the run's training-set size (flat in B'), so the launch on N lands where the term says."""

import json
import math

import numpy as np
import pytest
from fakes import SMALL, fake_sweep_result, fake_train, record_plan_reports, use_mnist1d_shaped

from tanplan.config import load_config
from tanplan.workflow import launch as launch_module
from tanplan.workflow import proxy_runs
from tanplan.workflow.pipeline import run_pipeline
from tanplan.workflow.sweep import search as sweep

PER_HALVING = 0.03  # the law: 0.8 at 400 training examples, 0.03 more each time they double


@pytest.fixture
def data_law_engine(monkeypatch):
    train_fn = fake_train(law=lambda run: 0.8 + PER_HALVING * math.log2(run.dataset_size / 400), noise=0.002,
                          of_run=True)
    use_mnist1d_shaped(monkeypatch)
    record_plan_reports(monkeypatch, [])
    real_launch = launch_module.launch
    monkeypatch.setattr(sweep, "run_sweep", lambda spec, out, **kw: out.mkdir(parents=True, exist_ok=True) or
                        fake_sweep_result(spec, {"learning_rate": 2.5}, overrides={"train.learning_rate": 2.5}))
    monkeypatch.setattr(proxy_runs, "_default_train_fn", lambda: train_fn)
    monkeypatch.setattr(launch_module, "launch",
                        lambda cfg, out, progress=True, resume=False: real_launch(cfg, out, train_fn=train_fn))
    return train_fn


def _public(path, n_train: int):
    rng = np.random.default_rng(7)
    np.savez(path, x_train=rng.normal(size=(n_train, 40)).astype(np.float32), y_train=np.arange(n_train) % 10,
             x_test=rng.normal(size=(400, 40)).astype(np.float32), y_test=np.arange(400) % 10)
    return path


def _run(tmp_path, n_public: int, lines: list, law=("fit.batch_sizes=[16, 32]", "fit.seeds=3")):
    cfg = load_config("experiments/mnist1d.toml", SMALL + [*law, f'tuning.path="{_public(tmp_path / "p.npz", n_public)}"'])
    return run_pipeline(cfg, tmp_path / "run", log=lines.append)


def test_a_public_set_a_quarter_of_the_private_one_carries_the_measured_data_size_term(tmp_path, data_law_engine):
    lines = []
    # N = 1,600 private training examples, N_pub = 400: two doublings. Test sets of 400 rows each differ by 2.5
    # points (std), a part of the interval: at fit.max_half_width = 10 the run would stop before its launch
    summary = _run(tmp_path, 400, lines, law=("fit.batch_sizes=[16, 32]", "fit.seeds=3", "fit.max_half_width=20"))
    term = summary.data_size
    assert (term.public_size, term.private_size, term.half_size, term.batch_size) == (400, 1600, 200, 32)
    assert term.doublings == pytest.approx(2) and term.per_halving == pytest.approx(PER_HALVING, abs=0.006)
    assert term.shift == pytest.approx(2 * term.per_halving)
    # the runs: B' = 32 again on the first 200 public examples, 3 seeds, and no other run on a subset
    halves = [c for c in data_law_engine.calls if c.data.train_examples]
    assert len(halves) == 3 and {(c.data.train_examples, c.train.proxy_batch_size) for c in halves} == {(200, 32)}
    # the law's own mean (flat at 0.8) moved by the term, which the launch on N confirms
    fit = json.loads((tmp_path / "run" / "fit" / "fit.json").read_text())
    assert summary.predicted_accuracy == pytest.approx(fit["law_at_target"] + term.shift)
    assert fit["data_size"]["shift"] == pytest.approx(term.shift)
    low, high = summary.prediction_interval
    assert low <= summary.actual_accuracy <= high and abs(summary.actual_accuracy - 0.86) < 0.01
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["data_size"]["std"] == pytest.approx(term.std)
    assert any("data size N_pub = 400 → N = 1600" in line for line in lines), lines
    report = (tmp_path / "run" / "report.md").read_text()
    assert "Data size: the proxies learned on 400 public examples" in report and "data-size term" in report
    # its runs are the proxies' compute too: 3·(16 + 32) + 3·32 examples a step against the launch's 512
    assert summary.proxy_compute_fraction == pytest.approx((3 * (16 + 32) + 3 * 32) / 512)


def test_no_term_and_no_extra_run_where_the_public_set_is_as_large(tmp_path, data_law_engine):
    summary = _run(tmp_path, 1600, [])
    assert summary.data_size is None and "data_size" not in json.loads((tmp_path / "run" / "summary.json").read_text())
    assert not any(c.data.train_examples for c in data_law_engine.calls)
    assert summary.proxy_compute_fraction == pytest.approx(3 * (16 + 32) / 512)


def test_the_ladders_prediction_carries_it_too(tmp_path, data_law_engine):
    summary = _run(tmp_path, 400, [], law=("fit.batch_sizes=\"auto\"", "fit.compute_budget=1", "fit.ladder_seeds=2",
                                                   "fit.max_half_width=20"))
    ladder = json.loads((tmp_path / "run" / "ladder" / "ladder.json").read_text())
    term = summary.data_size
    assert term.batch_size == max(r["batch_size"] for r in ladder["rungs"] if len(r["accuracies"]) >= 2
                                  and r["batch_size"] <= 200)
    assert summary.predicted_accuracy == pytest.approx(
        json.loads((tmp_path / "run" / "fit" / "fit.json").read_text())["law_at_target"] + term.shift)
    assert summary.launched, summary.reason
    low, high = summary.prediction_interval
    assert low <= summary.actual_accuracy <= high


def test_tanplan_fit_on_a_smaller_public_set_carries_it(tmp_path, data_law_engine):
    import tanplan

    cfg = load_config("experiments/mnist1d.toml", SMALL + [f'tuning.path="{_public(tmp_path / "p.npz", 400)}"'])
    result = tanplan.fit(cfg, tmp_path / "fit", batch_sizes=[16, 32], seeds=3)
    assert result.data_size is not None and result.data_size.batch_size == 32
    assert result.predicted_accuracy == pytest.approx(result.law_at_target + result.data_size.shift)
    assert "Data size: the proxies learned on 400 public examples" in (tmp_path / "fit" / "fit.md").read_text()
