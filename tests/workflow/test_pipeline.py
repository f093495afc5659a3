"""`tanplan run` end to end with a fake engine (fast): stages chained, summary keys, compute fraction,
the flat-regime prediction, and the baseline stage at the launch's exact ε."""

import json
import math

import numpy as np
import pytest
from fakes import SMALL, fake_sweep_result, fake_train, record_plan_reports, use_mnist1d_shaped

from tanplan.workflow import proxy_runs
from tanplan.workflow import launch as launch_module
from tanplan.workflow.sweep import search as sweep
from tanplan.config import load_config
from tanplan.workflow.pipeline import run_pipeline

REQUIRED = {"predicted_accuracy", "prediction_interval", "actual_accuracy", "epsilon_rdp", "proxy_compute_fraction",
            "wall_seconds"}


@pytest.fixture
def fake_engine(monkeypatch):
    """Sweep, proxy runs and the launch replaced by a flat law with small noise: no Ray, no JAX training."""

    law = lambda b: 0.8  # noqa: E731  the flat regime
    train_fn = fake_train(law=law, noise=0.004)
    # nothing trains on mnist1d's signals here: random rows of its shapes stand in for generating both draws
    use_mnist1d_shaped(monkeypatch)
    # the plan stage's report (RDP curves and figures, several CPU-s a run) is not what is checked here;
    # tests/commands/test_plan_command.py checks it
    train_fn.plan_reports = []
    record_plan_reports(monkeypatch, train_fn.plan_reports)

    def fake_sweep(spec, out, **kwargs):
        out.mkdir(parents=True, exist_ok=True)
        return fake_sweep_result(spec, {"learning_rate": 2.5}, overrides={"train.learning_rate": 2.5})

    real_launch = launch_module.launch
    monkeypatch.setattr(sweep, "run_sweep", fake_sweep)
    monkeypatch.setattr(proxy_runs, "_default_train_fn", lambda: train_fn)
    monkeypatch.setattr(launch_module, "launch", lambda cfg, out, progress=True, resume=False: real_launch(cfg, out, train_fn=train_fn))
    return train_fn


def _features(tmp_path, rng):
    centres = rng.normal(0, 3, (3, 8))
    y = rng.integers(0, 3, 400)
    x = centres[y] + rng.normal(0, 1, (400, 8))
    path = tmp_path / "features.npz"
    np.savez(path, x_train=x[:300], y_train=y[:300], x_test=x[300:], y_test=y[300:])
    return path


def test_run_chains_the_stages_and_reports_the_prediction(tmp_path, fake_engine):
    cfg = load_config("experiments/mnist1d.toml", SMALL + ["fit.batch_sizes=[16, 32]", "fit.seeds=3"])
    features = _features(tmp_path, np.random.default_rng(0))
    summary = run_pipeline(cfg, tmp_path / "run", log=lambda *a: None, baselines=True, baseline_features=str(features))
    assert REQUIRED <= set(summary.to_dict())
    assert fake_engine.plan_reports == [tmp_path / "run" / "plan"]  # the plan stage ran, once
    # Only fit runs here (the fake sweep ran no trial): 3 × (16 + 32) examples per step against one target's 512.
    assert summary.proxy_compute_fraction == pytest.approx(3 * (16 + 32) / 512)
    assert summary.proxy_compute.fit == summary.proxy_compute_fraction and summary.launched
    fit = json.loads((tmp_path / "run" / "fit" / "fit.json").read_text())
    assert summary.model == "knee" and summary.law_holds
    means = [np.mean([p["test_accuracy"] for p in fit["points"] if p["batch_size"] == b]) for b in (16, 32)]
    if fit["law"]["knee"] == 16:  # the flat law: the rung means, each weighted by its seeds over their variance
        assert min(means) <= summary.predicted_accuracy <= max(means)
    else:  # a rise from 16 to 32 by chance: the plateau is rung 32's mean
        assert summary.predicted_accuracy == pytest.approx(np.mean([p["test_accuracy"] for p in fit["points"]
                                                                       if p["batch_size"] == 32]))
    low, high = summary.prediction_interval
    assert summary.actual_inside_interval == (low <= summary.actual_accuracy <= high)
    assert summary.abs_error == pytest.approx(abs(summary.actual_accuracy - summary.predicted_accuracy))
    assert summary.epsilon == summary.epsilon_pld <= cfg.privacy.epsilon and summary.accountant == "pld"
    assert summary.epsilon_replace_one > summary.epsilon_pld
    trained = [c.train.learning_rate for c in fake_engine.calls]
    assert set(trained) == {2.5}  # the sweep's best configuration is what the fit and the launch train
    assert summary.baselines and all(r["target_epsilon"] == pytest.approx(summary.epsilon)
                                        for r in summary.baselines)
    report = (tmp_path / "run" / "report.md").read_text()
    assert "Cheaper private methods at the same ε" in report and "scaling_law.png" in report
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["actual_accuracy"] == summary.actual_accuracy
    assert (tmp_path / "run" / "baselines" / "baseline.json").is_file()
    assert math.isfinite(summary.wall_seconds)


def _fake_sweep_with_trials(train_fn, trials=2):
    """A sweep that trains `trials` proxies through the fake engine (each writes its ledger), best lr 2.5."""

    def run_sweep(spec, out, **kwargs):
        from tanplan.config import config_from_dict

        for t in range(trials):
            train_fn(config_from_dict(spec.base).with_overrides({"experiment.seed": t}), out / "trials" / f"t{t}")
        return fake_sweep_result(spec, {"learning_rate": 2.5}, overrides={"train.learning_rate": 2.5})

    return run_sweep


@pytest.mark.parametrize("tuning_data", ["public", "private"])
def test_the_total_epsilon_composes_every_release_on_the_private_set(tmp_path, fake_engine, monkeypatch,
                                                                     tuning_data):
    from tanplan.engine.setup import load_data
    from tanplan.privacy import accounting
    from tanplan.privacy.run_plan import resolve_plan

    monkeypatch.setattr(sweep, "run_sweep", _fake_sweep_with_trials(fake_engine))
    cfg = load_config("experiments/mnist1d.toml", SMALL + ["fit.batch_sizes=[16, 32]", "fit.seeds=2",
                                                           "fit.max_half_width=50",  # two rungs: not the point here
                                                           f"tuning.data={tuning_data}", "privacy.total_epsilon=1e6"])
    summary = run_pipeline(cfg, tmp_path / "run", log=lambda *a: None)
    launch_cfg, proxy_cfgs = fake_engine.calls[-1], fake_engine.calls[:-1]
    assert summary.tuning_data == tuning_data and len(proxy_cfgs) == 2 + 4  # two trials, four fit runs
    assert launch_cfg.data.seed == cfg.data.seed and launch_cfg.train.proxy_batch_size == 0
    if tuning_data == "public":  # proxies on an independent draw: the launch is the whole cost
        assert {c.data.seed for c in proxy_cfgs} == {cfg.data.seed + 1}
        assert summary.epsilon_total_rdp == summary.epsilon_rdp
        assert "launch's ε is the guarantee" in summary.guarantee
        return
    assert {c.data.seed for c in proxy_cfgs} == {cfg.data.seed}
    runs = [resolve_plan(c, load_data(c.data).num_train) for c in fake_engine.calls]  # every run's (q, σ, S)
    independent = accounting.make_accountant("rdp")
    for run in runs:
        independent.compose(accounting.dp_sgd_event(run.q, run.sigma, run.steps))
    assert summary.epsilon_total_rdp == pytest.approx(independent.get_epsilon(runs[0].delta), rel=1e-9)
    assert summary.epsilon_total_rdp > max(run.epsilon("rdp") for run in runs)
    assert summary.epsilon_total_pld < summary.epsilon_total_rdp and summary.epsilon_total_runs == 7
    assert "## Privacy" in (tmp_path / "run" / "report.md").read_text()
