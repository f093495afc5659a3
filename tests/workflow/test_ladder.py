"""The proxy ladder: its rule on synthetic rungs (pure, no training), its driver and the pipeline's
never-launch-blind path with the fake engine (tests/fakes.py)."""

import dataclasses
import json
import math

import numpy as np
import pytest
from fakes import SMALL, fake_sweep_result, fake_train, record_plan_reports, use_mnist1d_shaped
from helpers import CONFIG  # absolute: the tests do not depend on the working directory

from tanplan.cli import main
from tanplan.config import load_config
from tanplan.errors import NotLaunched, UsageError
from tanplan.workflow import proxy_runs
from tanplan.workflow.fit import ladder_fit
from tanplan.workflow import launch as launch_module
from tanplan.laws.batch_law import Rung, predict
from tanplan.workflow.ladder import (REFERENCE_BATCH, Budget, best_seed, budget_of, check_ladder, climb,
                                     expected_half_width, law_is_narrow, marginal, next_step,
                                     pipeline_budget, plateau_tested, precise_enough, run_ladder, spent)
from tanplan.workflow.pipeline import run_pipeline
from tanplan.workflow.sweep import search as sweep

quiet = lambda *a: None  # noqa: E731


@pytest.fixture(autouse=True)
def mnist1d_shaped_data(monkeypatch):
    """Nothing here trains on mnist1d's signals (the fake engine's accuracies follow a law of B'): random rows of
    its shapes stand in for generating the private and public draws (and importing the generator)."""

    use_mnist1d_shaped(monkeypatch)


@pytest.fixture
def no_figures(monkeypatch):
    """The ladder's and the run's law figures, for tests that read neither (a second or more each):
    test_ladder_trains_within_budget_... and test_tanplan_fit_auto_... check the ladder's, tests/workflow/
    test_pipeline.py the run's."""
    from tanplan.reports import ladder as ladder_report
    from tanplan.workflow.pipeline import run as pipeline_run

    monkeypatch.setattr(ladder_report, "figure_ladder", lambda result, path: path)
    monkeypatch.setattr(pipeline_run, "figure_scaling", lambda result, path, *a, **k: path)


CURVE = lambda b: 0.85 - 1.0 / b  # noqa: E731  the noise form: rising, then level


def _rungs(curve, rng, counts, noise=0.01):
    return [Rung(b, tuple(curve(b) + rng.normal(0, noise, n))) for b, n in counts.items()]


def _prediction(rungs, target):
    return predict([(r.batch_size, a) for r in rungs for a in r.accuracies], target)


# ---------------------------------------------------------------- the rule, pure

def test_budget_is_a_fraction_of_the_target_or_its_floor_whichever_is_larger():
    assert Budget(16, 300, 4, 1024, 0.5).sizes == [16, 32, 64, 128, 256]
    for batch, per_step in ((256, 1024), (1024, 1024), (4096, 1024), (16384, 4096)):
        cfg = load_config(None, [f"train.batch_size={batch}", "fit.compute_budget=0"])
        assert budget_of(cfg).per_step == per_step  # max(0.25·B, 1024): the ladder's own budget alone


ON = "fit.compute_budget=0.25"  # the pipeline's budget is opt-in (its default, 0, is off: docs/ladder.md)


def test_the_pipelines_budget_is_off_by_default_and_the_ladder_has_its_own():
    for batch in (256, 4096, 16384):
        cfg = load_config(None, [f"train.batch_size={batch}"])
        assert pipeline_budget(cfg) is None
        assert budget_of(cfg, 320).per_step == pytest.approx(max(0.25 * batch, 1024))  # the sweep's cost aside


def test_the_pipelines_budget_falls_as_the_target_grows_and_never_exceeds_the_launch():
    for batch in (256, 1024, 2048, 4096, 16384, 65536):
        cfg = load_config(None, [f"train.batch_size={batch}", ON])
        shared = min(batch, max(0.25 * min(1.0, (REFERENCE_BATCH / batch) ** 0.5) * batch, 1024))
        assert pipeline_budget(cfg) == pytest.approx(shared) and shared <= batch
        assert budget_of(cfg).per_step == pytest.approx(min(max(0.25 * batch, 1024), shared))
        assert budget_of(cfg, 320).per_step == pytest.approx(min(max(0.25 * batch, 1024), shared - 320))
    fractions = [pipeline_budget(load_config(None, [f"train.batch_size={b}", ON])) / b for b in (4096, 16384, 65536)]
    assert fractions == pytest.approx([1 / 4, 1 / 8, 1 / 16])  # the 1/4 at the demo, 1/8 at B = 16384


@pytest.mark.parametrize("batch", [256, 1024, 2048])
def test_default_fit_section_admits_targets_from_256_up(batch):
    # B = 256: the pipeline's budget (never more than the launch) cannot pay the law's first rungs, 448·S:
    # not launched (exit 4) saying what to change; with fit.compute_budget = 0 (the default) the ladder's own
    cfg = load_config(None, [f"train.batch_size={batch}"] + ([] if batch == 256 else [ON]))
    budget = check_ladder(cfg)  # the B = 1024 target used to exit 2 here
    assert budget.first_rungs_cost() <= budget.per_step
    if batch == 256:
        with pytest.raises(NotLaunched, match="raise fit.compute_budget") as err:
            check_ladder(load_config(None, [f"train.batch_size={batch}", ON]))
        assert "\n" not in str(err.value)


def test_what_the_sweep_spends_comes_out_of_the_ladders_budget_and_a_ladder_it_starves_is_not_launched():
    # the pipeline's budget: 1024·S; 4 seeds a rung (the first rungs then need 448·S)
    cfg = load_config(None, ["train.batch_size=4096", ON, "fit.ladder_seeds=4"])
    assert check_ladder(cfg, 320, "the sweep's").per_step == 704  # a sweep of 10 runs at B' = 32
    with pytest.raises(NotLaunched, match="after the sweep's 640·S") as err:  # the old sweep at B' = 64
        check_ladder(cfg, 640, "the sweep's")
    assert "[16, 32, 64] × 4 seeds need 448·S" in str(err.value)


def test_the_first_rungs_come_first_then_the_rule_stops_when_the_law_is_narrow():
    budget = Budget(16, 4096, 4, 1024, 0.5)
    assert next_step([], None, budget).batch_size == 16
    rng = np.random.default_rng(0)
    two = _rungs(CURVE, rng, {16: 4, 32: 4})
    assert next_step(two, None, budget) .batch_size == 64
    many = _rungs(CURVE, rng, {16: 8, 32: 8, 64: 8, 128: 8}, noise=0.02)
    prediction = _prediction(many, 4096)
    wide = Budget(16, 4096, 4, 4096, 1e-6)  # nothing is narrow enough: it climbs while the budget lasts
    assert next_step(many, prediction, wide).batch_size == 256
    loose = Budget(16, 4096, 4, 4096, 1e3)  # anything is narrow enough: done
    assert law_is_narrow(prediction, loose.law_share) and next_step(many, prediction, loose) is None


def test_when_the_next_rung_does_not_fit_one_seed_goes_where_it_narrows_the_mean_most_per_example():
    rng = np.random.default_rng(1)
    rungs = _rungs(CURVE, rng, {16: 4, 32: 4, 64: 4, 128: 4}, noise=0.02)
    prediction = _prediction(rungs, 4096)
    left = 1000 - spent(rungs)  # 1000 − 960: room for a seed of 16 or 32, not for the rung 256
    step = next_step(rungs, prediction, Budget(16, 4096, 4, 1000, 1e-6))
    assert step.seeds == 1 and step.batch_size in prediction.law.window and step.batch_size <= left
    assert next_step(rungs, prediction, Budget(16, 4096, 4, spent(rungs) + 8, 1e-6)) is None  # nothing fits


def test_climb_never_spends_more_than_its_budget_and_ends():
    rng = np.random.default_rng(2)
    for per_step, share in ((448, 0.5), (1024, 0.5), (1024, 1e-6), (3000, 0.2)):
        budget = Budget(16, 4096, 4, per_step, share)
        train = lambda b, n: list(CURVE(b) + rng.normal(0, 0.015, n))  # noqa: E731
        outcome = climb(train, budget)
        assert spent(outcome.rungs) <= per_step and len(outcome.rungs) >= 3 and outcome.prediction is not None
        if share > 1e-3 and outcome.steps[-1].seeds == 1:  # stopped on the budget, not because narrow
            assert not law_is_narrow(outcome.prediction, share)


# ---------------------------------------------------------------- config

def test_fit_batch_sizes_default_to_auto_and_take_lists_with_one_line_errors():
    assert load_config(None).fit.batch_sizes == "auto"
    assert load_config(None, ["fit.batch_sizes=[16, 32]"]).fit.batch_sizes == (16, 32)
    assert load_config(None, ["fit.batch_sizes=auto"]).fit.batch_sizes == "auto"
    for bad in ("fit.batch_sizes=automatic", "fit.batch_sizes=[]", "fit.max_proxy_fraction=0",
                "fit.max_proxy_fraction=1.5", "fit.ladder_seeds=1", "fit.ladder_start=0", "fit.law_share=0",
                "fit.min_proxy_budget=0", "fit.law=line"):
        with pytest.raises(UsageError, match=bad.split("=")[0]) as err:
            load_config(None, [bad])
        assert "\n" not in str(err.value)


def test_a_budget_too_small_for_the_first_rungs_is_bad_input_before_any_training(tmp_path):
    train_fn = fake_train()
    cfg = load_config(CONFIG, SMALL + ["fit.max_proxy_fraction=0.05", "fit.min_proxy_budget=64"])
    with pytest.raises(UsageError, match="fit.min_proxy_budget") as err:
        run_ladder(cfg, tmp_path, train_fn=train_fn, log=quiet)
    assert "\n" not in str(err.value) and train_fn.calls == []


# ---------------------------------------------------------------- the driver, with the fake engine

STEEP = lambda b: 0.3 + 0.2 * math.log2(b / 16)  # noqa: E731  the line leaves [0, 1] before B = 512


def test_ladder_trains_within_budget_writes_its_report_and_a_rerun_reuses_its_runs(tmp_path):
    cfg = load_config(CONFIG, SMALL)  # B = 512: budget 1024 (the floor), rungs 16 ... 256
    train_fn = fake_train(law=CURVE, noise=0.01)
    result = run_ladder(cfg, tmp_path, train_fn=train_fn, log=quiet)
    assert result.found and result.prediction.predicted_accuracy == pytest.approx(CURVE(512), abs=0.03)
    seeds = {r.batch_size: r.seeds for r in result.rungs}
    assert list(seeds)[:3] == [16, 32, 64] and min(seeds.values()) >= cfg.fit.ladder_seeds
    assert sum(b * n for b, n in seeds.items()) <= budget_of(cfg).per_step and len(train_fn.calls) == sum(seeds.values())
    sigmas = {r.batch_size: r.sigma for r in result.rungs}
    assert sigmas[64] == pytest.approx(4 * sigmas[16])  # constant η_step: σ' ∝ B'
    for name in ("ladder.json", "ladder.png", "ladder.md"):
        assert (tmp_path / name).stat().st_size > 0
    assert f"Steps: B'=16 × {cfg.fit.ladder_seeds}" in (tmp_path / "ladder.md").read_text()
    again = fake_train(law=CURVE, noise=0.01)
    rerun = run_ladder(cfg, tmp_path, train_fn=again, log=quiet)
    assert again.calls == [] and rerun.rungs == result.rungs


def test_a_target_of_1024_runs_the_ladder_with_the_default_fit_section(tmp_path, no_figures):
    # σ given (above the 11.5 that ε = 0.7 calibrates to): the ladder's rungs do not depend on it
    cfg = load_config(CONFIG, ["data.num_samples=2000", "train.batch_size=1024", "train.steps=20", "privacy.sigma=12"])
    # the demo config's [fit] is the defaults' but for the pipeline's budget (1/4 of B·S, here 1024·S) and the
    # widest interval it launches on
    assert cfg.fit == dataclasses.replace(type(cfg.fit)(), compute_budget=0.25, max_half_width=10.0)
    result = run_ladder(cfg, tmp_path, train_fn=fake_train(law=CURVE, noise=0.01), log=quiet)
    assert result.found and 3 <= len(result.rungs) and result.spent_fraction <= 1.0


def test_tanplan_fit_auto_writes_the_law_of_the_ladders_runs(tmp_path):
    cfg = load_config(CONFIG, SMALL)
    result = ladder_fit(cfg, tmp_path, train_fn=fake_train(law=CURVE, noise=0.01), log=quiet)
    assert result.ladder.found and result.batch_sizes[0] == 16
    assert result.predicted_accuracy == pytest.approx(CURVE(512), abs=0.03)
    assert (tmp_path / "fit.md").is_file() and (tmp_path / "ladder" / "ladder.png").is_file()
    assert "one launch's own spread" in (tmp_path / "fit.md").read_text()


# ---------------------------------------------------------------- the pipeline: never launch blind

@pytest.fixture
def engine(monkeypatch, no_figures):
    """Install a fake engine with a given law for proxies, sweep trials (none run) and the launch."""

    state = {"plan_reports": []}
    # the plan stage's report (RDP curves and figures, several CPU-s a run) is not what is checked here;
    # tests/commands/test_plan_command.py checks it
    record_plan_reports(monkeypatch, state["plan_reports"])

    def install(law, noise=0.0):
        train_fn = fake_train(law=law, noise=noise)
        real_launch = launch_module.launch

        def fake_sweep(spec, out, **kwargs):
            out.mkdir(parents=True, exist_ok=True)
            state["sweep_proxy"] = spec.proxy.batch_size
            return fake_sweep_result(spec, {"learning_rate": 2.5}, overrides={"train.learning_rate": 2.5})

        def fake_launch(cfg, out, progress=True, resume=False):
            state["launched"] = True
            return real_launch(cfg, out, train_fn=train_fn)

        monkeypatch.setattr(sweep, "run_sweep", fake_sweep)
        monkeypatch.setattr(proxy_runs, "_default_train_fn", lambda: train_fn)
        monkeypatch.setattr(launch_module, "launch", fake_launch)
        state["train_fn"] = train_fn
        return state

    return install


# B = 512 is too small a target for the pipeline's budget (never more than the launch: 512·S, less the sweep's
# 320·S, cannot pay the first rungs' 448·S): these runs test the stages, on the ladder's own budget
PIPELINE = SMALL + ["fit.compute_budget=0"]


def _run_cli(tmp_path, *extra, sets=()):
    return main(["run", "--config", CONFIG, "--out", str(tmp_path / "run"), *extra,
                 *sum([["--set", s] for s in PIPELINE + list(sets)], [])])


def test_auto_run_sweeps_then_the_ladder_trains_the_chosen_configuration_and_launches(tmp_path, engine):
    state = engine(CURVE, noise=0.01)
    summary = run_pipeline(load_config(CONFIG, PIPELINE), tmp_path, log=quiet)
    assert summary.launched and state["sweep_proxy"] == 32  # the ladder's second rung
    assert state["plan_reports"] == [tmp_path / "plan"]  # the plan stage ran, once
    ladder_runs = [c for c in state["train_fn"].calls if c.train.proxy_batch_size]
    assert ladder_runs and {c.train.learning_rate for c in ladder_runs} == {2.5}  # the sweep's choice, everywhere
    c = summary.proxy_compute
    assert c.ladder == pytest.approx(summary.ladder.spent_fraction) and c.fit == 0
    assert summary.proxy_compute_fraction == pytest.approx(c.ladder + c.sweep)
    parts = summary.interval_parts
    # the proxies tune on the public draw and are evaluated on its test set: the two test sets' offset is a part too
    assert set(parts.to_dict()) == {"mean", "launch", "misspecification", "test_sets"} and parts.launch > 0
    assert parts.test_sets > 0 and "the test sets' offset" in (tmp_path / "report.md").read_text()
    low, high = summary.prediction_interval
    assert low < summary.predicted_accuracy < high
    report = (tmp_path / "report.md").read_text()
    assert "ladder/ladder.png" in report and "one launch's own spread" in report and "Not launched" not in report


def test_a_law_that_leaves_0_1_stops_before_the_launch(tmp_path, engine):
    state = engine(STEEP, noise=0.01)
    summary = run_pipeline(load_config(CONFIG, PIPELINE + ["fit.law=log-linear"]), tmp_path, log=quiet)
    assert not summary.launched and summary.stopped_at == "ladder" and "launched" not in state
    assert summary.predicted_accuracy is None
    written = json.loads((tmp_path / "summary.json").read_text())
    assert written["launched"] is False and "does not hold" in written["reason"] and written["what_to_change"]
    assert "## Not launched" in (tmp_path / "report.md").read_text()
    assert not (tmp_path / "launch").exists()


def test_run_exits_4_with_a_one_line_reason_and_launch_anyway_overrides(tmp_path, engine, capsys):
    state = engine(STEEP, noise=0.01)
    assert _run_cli(tmp_path, sets=["fit.law=log-linear"]) == NotLaunched.exit_code == 4
    captured = capsys.readouterr()
    err = captured.err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("tanplan: error: not launched: the batch law does not hold")
    assert "launched" not in state and "Traceback" not in captured.out + captured.err
    code = _run_cli(tmp_path, "--resume", "--launch-anyway", sets=["fit.law=log-linear"])  # its runs reused
    assert code == 0 and state["launched"]
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["launched"] and summary["launched_anyway"] and summary["predicted_accuracy"] is None


def test_explicit_proxies_below_the_knee_are_not_launched_and_show_no_prediction(tmp_path, engine, capsys):
    # Proxies on the steep part with the line forced: it reaches above 1 at the target, which is no accuracy.
    state = engine(STEEP, noise=0.003)
    assert _run_cli(tmp_path, "--json", sets=["fit.batch_sizes=[16, 32, 64]", "fit.law=log-linear"]) == 4
    captured = capsys.readouterr()
    summary = json.loads(captured.out)
    assert summary["stopped_at"] == "fit" and summary["predicted_accuracy"] is None and "launched" not in state
    assert captured.err.strip().splitlines()[-1].startswith("tanplan: error: not launched: the batch law does not hold")
    for path in (tmp_path / "run" / "report.md", tmp_path / "run" / "fit" / "fit.json"):
        assert path.is_file()
    report = (tmp_path / "run" / "report.md").read_text()
    assert "No prediction" in report and "Predicted for one launch" not in report
    assert _run_cli(tmp_path, "--resume", "--launch-anyway", sets=["fit.batch_sizes=[16, 32, 64]",
                                                                   "fit.law=log-linear"]) == 0
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert state["launched"] and last.startswith("no prediction") and "actual" in last  # never a value above 1


def test_bad_proxy_batch_size_is_refused_before_any_training(tmp_path, engine, capsys):
    state = engine(CURVE)
    assert _run_cli(tmp_path, "--proxy-batch-size", "1024") == 2
    assert "--proxy-batch-size 1024" in capsys.readouterr().err and state["train_fn"].calls == []


# ---------------------------------------------------------------- the precision target and the marginal rule

PLATEAU = lambda b: 0.95 - 0.04 * max(0.0, math.log(64 / b))  # noqa: E731  a knee at 64, flat past it


def _spent_at(tmp_path, batch, n):
    # σ given (at or above the 10.8 and 12.0 that ε = 0.7 calibrates to): the spend does not depend on it
    cfg = load_config(CONFIG, [f"data.num_samples={n}", f"train.batch_size={batch}", "train.steps=20",
                               "privacy.sigma=12"])
    # mnist1d trains on 80% of its samples; the fake needs only that count, not the 34 s of generating them
    train_fn = fake_train(law=PLATEAU, noise=0.003, num_train=n * 4 // 5)
    result = run_ladder(cfg, tmp_path / str(batch), train_fn=train_fn, log=quiet)
    assert result.found
    return result


def test_the_ladders_spend_falls_as_the_target_grows(tmp_path, no_figures):
    small, large = _spent_at(tmp_path, 4096, 10000), _spent_at(tmp_path, 16384, 40000)
    # the same synthetic law and seed noise: a 4× larger target costs a smaller fraction of its compute
    assert large.spent_fraction < small.spent_fraction <= 0.25 + 1e-9
    assert large.spent_fraction <= 0.125 and "budget is spent" not in large.reason
    for result in (small, large):  # and the prediction stays within its interval of the plateau
        low, high = result.prediction.prediction_interval
        assert low <= PLATEAU(result.target_batch_size) <= high


def test_the_marginal_rule_stops_when_the_next_run_costs_more_than_it_narrows():
    rng = np.random.default_rng(3)
    rungs = _rungs(PLATEAU, rng, {16: 4, 32: 4, 64: 4, 128: 4, 256: 4}, noise=0.01)
    prediction = _prediction(rungs, 4096)
    assert prediction.chosen.held.errors  # its misspecification is measured: the marginal rule applies
    cheap = Budget(16, 1 << 20, 4, 1 << 20, 1e-6, precision=1e-4)  # a huge target: every run is nearly free
    expensive = Budget(16, 600, 4, 1 << 20, 1e-6, precision=1e-4)  # the rung 512 costs 3.4 launches
    assert next_step(rungs, prediction, cheap) is not None
    step = next_step(rungs, prediction, expensive)
    assert step is None or step.seeds * step.batch_size / 600 <= (
        prediction.half_width - expected_half_width(rungs, prediction, step.batch_size, step.seeds)) / prediction.half_width
    reached = Budget(16, 4096, 4, 1 << 20, 1e-6, precision=1.0)  # any half-width is precise enough
    assert precise_enough(prediction, reached) and next_step(rungs, prediction, reached) is None


def test_one_more_seed_is_expected_to_narrow_the_interval():
    rng = np.random.default_rng(4)
    rungs = _rungs(PLATEAU, rng, {16: 3, 32: 3, 64: 3, 128: 3}, noise=0.01)
    prediction = _prediction(rungs, 4096)
    assert expected_half_width(rungs, prediction, 128, 4) < prediction.half_width



def _misfit_prediction():
    """Rungs 16 … 128 whose plateau is seen (the knee law's knee at 64, the rung 128 held out past it) but
    missed by more than the tight seeds explain: a measured misspecification, and the marginal rule in play."""
    rungs = [Rung(16, (0.77, 0.80, 0.79, 0.78)), Rung(32, (0.848, 0.85, 0.852, 0.85)),
             Rung(64, (0.862, 0.86, 0.858, 0.86)), Rung(128, (0.857, 0.855, 0.853, 0.855))]
    prediction = _prediction(rungs, 4096)
    assert prediction.var_misspecification > 0 and plateau_tested(prediction)
    return rungs, prediction


def test_a_rung_above_the_window_is_expected_to_remove_the_misfit_a_seed_cannot():
    rungs, p = _misfit_prediction()
    above = expected_half_width(rungs, p, 2 * max(p.law.window), 4)
    # any interval that keeps the misfit is at least 1.96 of its std wide (every t quantile is ≥ 1.96)
    assert above < 1.96 * math.sqrt(p.var_misspecification)
    for b in p.law.window:  # a seed inside the window keeps it
        assert expected_half_width(rungs, p, b, 1) >= 1.96 * math.sqrt(p.var_misspecification)


def test_the_knees_uncertainty_is_removed_by_a_rung_above_the_window_not_by_a_seed_inside():
    means = {16: 0.75, 32: 0.84, 64: 0.85, 128: 0.86}  # B' = 32: on the plateau or still rising
    rungs = [Rung(b, (m - 0.02, m + 0.02)) for b, m in means.items()]
    p = predict([(r.batch_size, a) for r in rungs for a in r.accuracies], 4096)
    assert p.chosen.var_knee > 1e-5
    sure = dataclasses.replace(p, chosen=dataclasses.replace(p.chosen, var_knee=0.0))  # the knee's place known
    assert expected_half_width(rungs, p, 256, 4) == pytest.approx(expected_half_width(rungs, sure, 256, 4))
    for b in p.law.window:  # a seed inside keeps it
        assert expected_half_width(rungs, p, b, 1) > expected_half_width(rungs, sure, b, 1) * (1 + 1e-6)


def test_the_marginal_rule_climbs_before_it_adds_seeds_when_both_pay():
    rungs, p = _misfit_prediction()
    budget = Budget(16, 1 << 16, 4, 1 << 20, 1e-6, precision=1e-4, max_half_width=1.0)  # every run nearly free
    assert marginal(p, budget)
    seed = best_seed(rungs, p, 1 << 20)
    seed_gain = (p.half_width - expected_half_width(rungs, p, seed, 1)) / p.half_width
    assert seed_gain >= seed / budget.target_batch_size  # a seed would pay too, and more per example
    step = next_step(rungs, p, budget)
    assert step is not None and (step.batch_size, step.seeds) == (256, 4)
