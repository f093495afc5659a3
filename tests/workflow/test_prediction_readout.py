"""What the user reads (issue 48, item 4): the prediction, its interval, a one-sided lower bound from the same
predictive distribution and the interval's parts in points, printed and in summary.json; and, before anything
trains, a warning with the cheaper path when the proxies would cost more than the launch."""

import json
import math

import numpy as np
import pytest
from fakes import SMALL, fake_sweep_result, fake_train, record_plan_reports, use_mnist1d_shaped
from helpers import CONFIG
from scipy import stats

from tanplan.cli import main
from tanplan.config import load_config
from tanplan.laws.batch_law import LOWER_BOUND_LEVEL, predict
from tanplan.outcomes.pipeline import PlannedCompute
from tanplan.workflow import launch as launch_module
from tanplan.workflow import proxy_runs
from tanplan.workflow.pipeline import costs
from tanplan.workflow.sweep import search as sweep

CURVE = lambda b: 0.85 - 1.0 / b  # noqa: E731  the noise form: rising, then level
PIPELINE = SMALL + ["fit.compute_budget=0"]  # B = 512: the ladder's own budget, 2× the launch


@pytest.fixture(autouse=True)
def mnist1d_shaped_data(monkeypatch):
    """Nothing here trains on mnist1d's signals (the runs' accuracies follow CURVE, the dry run trains nothing):
    random rows of its shapes stand in for generating the private and public draws."""

    use_mnist1d_shaped(monkeypatch)


def _rows(seed=0):
    rng = np.random.default_rng(seed)
    return [(b, CURVE(b) + rng.normal(0, 0.01)) for b in (16, 32, 64, 128, 256) for _ in range(3)]


def test_the_lower_bound_is_the_intervals_predictive_distribution_read_one_sided():
    p = predict(_rows(), 4096)
    # the interval and the bound share mean, variance and degrees of freedom: t two-sided, then one-sided
    assert p.quantile == pytest.approx(stats.t.ppf(0.5 + p.level / 2, p.dof))
    expected = p.mean - stats.t.ppf(LOWER_BOUND_LEVEL, p.dof) * math.sqrt(p.variance)
    assert p.lower_bound() == pytest.approx(expected, abs=1e-12)
    assert p.interval[0] < p.lower_bound() < p.mean  # one-sided 95% sits inside the two-sided 95%
    record = p.record()
    assert record.lower_bound == pytest.approx(expected) and record.lower_bound_level == LOWER_BOUND_LEVEL
    assert record.dof == pytest.approx(p.dof)


@pytest.fixture
def engine(monkeypatch):
    """A fake engine: proxies and the launch at CURVE with seed noise, the sweep's choice fixed."""

    train_fn = fake_train(law=CURVE, noise=0.01)
    # the plan stage's report (RDP curves and figures, several CPU-s a run) is not what is read here;
    # tests/commands/test_plan_command.py checks it
    train_fn.plan_reports = []
    record_plan_reports(monkeypatch, train_fn.plan_reports)
    real_launch = launch_module.launch

    def fake_sweep(spec, out, **kwargs):
        out.mkdir(parents=True, exist_ok=True)
        return fake_sweep_result(spec, {"learning_rate": 2.5}, overrides={"train.learning_rate": 2.5})

    monkeypatch.setattr(sweep, "run_sweep", fake_sweep)
    monkeypatch.setattr(proxy_runs, "_default_train_fn", lambda: train_fn)
    monkeypatch.setattr(launch_module, "launch", lambda cfg, out, progress=True, resume=False:
                        real_launch(cfg, out, train_fn=train_fn))
    return train_fn


def test_run_prints_the_lower_bound_and_parts_in_points_and_summary_json_holds_them(tmp_path, engine, capsys):
    out = tmp_path / "run"
    assert main(["run", "--config", CONFIG, "--out", str(out), *sum([["--set", s] for s in PIPELINE], [])]) == 0
    assert engine.plan_reports == [out / "plan"]  # the plan stage ran, once
    text = capsys.readouterr().out
    summary, fit = (json.loads((out / f).read_text()) for f in ("summary.json", "fit/fit.json"))
    bound = summary["lower_bound"]
    # the bound of the prediction the launch was judged against, from the same predictive distribution
    std = fit["std_parts"]
    variance = sum(v**2 for v in std.values())
    expected = fit["predicted_accuracy"] - stats.t.ppf(0.95, fit["dof"]) * math.sqrt(variance)
    assert bound == pytest.approx(expected, abs=1e-9) and summary["lower_bound_level"] == 0.95
    assert summary["prediction_interval"][0] < bound < summary["predicted_accuracy"]
    assert summary["interval_parts_points"] == pytest.approx({k: 100 * v for k, v in std.items()})
    assert summary["half_width_points"] == pytest.approx(100 * fit["half_width"])
    printed = f"at least {bound:.4f} with 95% probability"
    lines = [line for line in text.splitlines() if printed in line]
    assert len(lines) == 2  # once before the launch (the API's log too), once with the launch's accuracy
    assert all("points: std of the law's mean" in line for line in lines)
    assert printed in (out / "report.md").read_text()


def test_run_and_dry_run_warn_before_training_when_the_proxies_cost_more_than_the_launch(tmp_path, capsys):
    args = ["run", "--dry-run", "--no-probe", "--config", CONFIG, "--out", str(tmp_path / "r"),
            *sum([["--set", s] for s in PIPELINE], [])]
    assert main(args) == 0
    warning = [line for line in capsys.readouterr().out.splitlines() if line.startswith("warning:")]
    assert len(warning) == 1 and "× the launch's compute" in warning[0] and "launch directly" in warning[0]
    assert main(args + ["--json"]) == 0
    planned = PlannedCompute.from_dict(json.loads(capsys.readouterr().out))
    assert planned.proxy_fraction > 1 and planned.over_budget == warning[0].removeprefix("warning: ")
    # the same line from `run` itself, before anything trains (checked here on the planned stages it prints)
    cfg = load_config(CONFIG, PIPELINE)
    lines = costs.compute_lines(costs.run_compute(cfg, 32))
    assert lines[-1] == warning[0]


def test_the_cheaper_path_names_a_compute_budget_when_the_first_rungs_fit_within_the_launch():
    cfg = load_config(CONFIG, ["data.num_samples=4000", "train.batch_size=1024", "train.steps=20",
                               "fit.compute_budget=0", "fit.max_proxy_fraction=1.0"])
    planned = costs.run_compute(cfg, 32)
    assert planned.proxy_fraction > 1 and "fit.compute_budget = " in planned.over_budget
    share = float(planned.over_budget.split("fit.compute_budget = ")[1].split(" ")[0])
    cheaper = costs.run_compute(cfg.with_overrides({"fit.compute_budget": share}), 32)
    assert cheaper.proxy_fraction <= 1 + 1e-9 and cheaper.over_budget is None


def test_a_target_whose_proxies_cost_less_than_it_gets_no_warning():
    planned = costs.dry_run(load_config(CONFIG))  # the demo: a quarter of the launch
    assert planned.proxy_fraction <= 0.25 + 1e-12 and planned.over_budget is None
