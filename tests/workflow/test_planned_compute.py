"""The cost before it is spent: `tanplan run --dry-run` and the first lines of run and fit (planned compute
of each stage, example-gradients and their fraction of the target's)."""

import dataclasses
import json

import pytest
from fakes import SMALL, fake_train, use_mnist1d_shaped
from helpers import CONFIG

from tanplan.cli import main
from tanplan.fileio import write_json_atomic
from tanplan.config import load_config
from tanplan.engine import loop
from tanplan.outcomes.pipeline import PlannedCompute
from tanplan.workflow.ladder import budget_of
from tanplan.workflow.pipeline import throughput
from tanplan.workflow.pipeline.costs import dry_run, ladder_runs_bound, with_wall_time


@pytest.fixture(autouse=True)
def mnist1d_shaped_data(monkeypatch):
    """mnist1d, for every test here: the dry run draws and checks the private and public sets, and generating
    the demo's two 20,000-row draws costs about 28 CPU-s in a cold cache, while what is tested here is the planned
    compute printed after the checks. Random sets of the same shapes pass every check the same way; the checks on
    real data are tested on small sets (tests/workflow/test_new_user_cuts.py). Nothing is written to the data
    cache."""
    use_mnist1d_shaped(monkeypatch)


def test_dry_run_prints_each_stages_planned_compute_and_trains_nothing(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(loop, "train_and_evaluate", lambda *a, **k: (_ for _ in ()).throw(AssertionError("trained")))
    out = tmp_path / "run"
    # --no-probe: the wall times' probe has its own test below (it compiles the model's step)
    assert main(["run", "--dry-run", "--no-probe", "--config", CONFIG, "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert not out.exists()  # no run folder, no checkpoint
    cfg = load_config(CONFIG)
    target = cfg.train.batch_size * cfg.train.steps
    sweep_runs = cfg.sweep.trials + cfg.sweep.top_k * cfg.sweep.seeds
    # the sweep at the ladder's second rung, 32; the ladder gets what the pipeline's budget leaves after it
    for stage, examples in (("sweep", sweep_runs * 32 * cfg.train.steps),
                            ("ladder", budget_of(cfg, sweep_runs * 32).per_step * cfg.train.steps), ("launch", target)):
        line = next(l for l in text.splitlines() if l.startswith(f"planned compute: {stage}:"))
        assert f"{int(examples):,} example-gradients" in line and f"{examples / target:.3g} of the target" in line
    assert main(["run", "--dry-run", "--no-probe", "--json", "--config", CONFIG, "--out", str(out)]) == 0
    planned = PlannedCompute.from_dict(json.loads(capsys.readouterr().out))
    assert [s.stage for s in planned.stages] == ["sweep", "ladder", "launch"] and not out.exists()
    assert planned.proxy_fraction == sum(s.fraction for s in planned.stages[:2])


LARGE = ["data.num_samples=80000", "train.batch_size=16384"]  # issue 30's large setting, the demo's other settings


ON = "fit.compute_budget=0.25"  # the pipeline's budget is opt-in (its default, 0, is off: docs/ladder.md)


@pytest.mark.parametrize("sets, most", [((ON,), 1 / 4), ((*LARGE, ON), 1 / 8)])
def test_the_pipelines_compute_is_at_most_a_quarter_of_the_demos_and_an_eighth_at_b_16384(sets, most, capsys):
    assert main(["run", "--dry-run", "--no-probe", "--json", "--config", CONFIG, "--out", "unused",
                 *sum([["--set", s] for s in sets], [])]) == 0
    planned = PlannedCompute.from_dict(json.loads(capsys.readouterr().out))
    sweep, ladder, launch = planned.stages
    assert planned.proxy_fraction == pytest.approx(sweep.fraction + ladder.fraction)
    assert planned.proxy_fraction <= most + 1e-12 and sweep.example_gradients + ladder.example_gradients <= \
        launch.example_gradients
    cfg = load_config(CONFIG, list(sets))
    assert sweep.fraction == pytest.approx((cfg.sweep.trials + cfg.sweep.top_k * cfg.sweep.seeds) * 32
                                           / cfg.train.batch_size)  # runs × B'/B: falls as B/B' grows


def test_a_pipeline_budget_that_cannot_pay_the_ladder_after_the_sweep_is_not_launched_before_anything(tmp_path,
                                                                                                     capsys):
    out = tmp_path / "run"
    args = ["run", "--config", CONFIG, "--set", "sweep.trials=20", "--set", ON, "--out", str(out)]
    sweep = load_config(CONFIG, ["sweep.trials=20"]).sweep
    runs = sweep.trials + sweep.top_k * sweep.seeds  # at B' = 32: 24 × 32 = 768·S of the 1024·S, 448·S short
    for extra in (["--dry-run"], []):
        assert main(args + extra) == 4
        captured = capsys.readouterr()
        assert captured.out == "" and not out.exists()
        err = captured.err.strip().splitlines()
        assert len(err) == 1 and "raise fit.compute_budget" in err[0] and f"after the sweep's {runs * 32}·S" in err[0]


def test_an_explicit_list_is_planned_exactly_and_bad_input_exits_2_before_anything(tmp_path, capsys):
    cfg = load_config(CONFIG, ["fit.batch_sizes=[64, 128]", "fit.seeds=3"])
    fit = dry_run(cfg).stages[1]
    assert (fit.stage, fit.runs, fit.bound) == ("fit", 6, "exactly")
    assert fit.example_gradients == 3 * (64 + 128) * cfg.train.steps
    assert main(["run", "--dry-run", "--config", CONFIG, "--set", "fit.batch_sizes=[64]", "--out",
                 str(tmp_path / "r")]) == 2
    assert "two or more distinct" in capsys.readouterr().err and not (tmp_path / "r").exists()


def test_fit_prints_its_planned_compute_first(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(loop, "train_and_evaluate", fake_train(law=lambda b: 0.85 - 1.0 / b, noise=0.002))
    assert main(["fit", "--config", CONFIG, *sum([["--set", s] for s in SMALL], []), "--batch-sizes", "64,128,256",
                 "--seeds", "2", "--out", str(tmp_path / "f")]) == 0
    first = capsys.readouterr().out.splitlines()[0]
    assert first.startswith("planned compute: fit: 6 runs, exactly") and f"{2 * 448 * 20:,}" in first


def _wall_line(text: str) -> float:
    """The seconds per example-gradient a dry run's wall-time line states."""
    line = next(l for l in text.splitlines() if l.startswith("planned wall time: at "))
    return float(line.split(" at ")[1].split(" s an example-gradient")[0])


def test_dry_run_times_the_stages_by_a_probe_then_reuses_it_from_the_cache(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("TANPLAN_CACHE", str(tmp_path / "cache"))  # no probe recorded yet
    timed_rows = []
    monkeypatch.setattr(throughput, "_time_steps", lambda cfg, rows: timed_rows.append(rows) or 0.25)
    args = ["run", "--dry-run", "--config", CONFIG, "--set", "train.physical_batch_size=16", "--out", str(tmp_path / "r")]
    assert main(args + ["--no-probe"]) == 0  # nothing measured yet, no probe asked: no wall time
    assert "wall time" not in capsys.readouterr().out and timed_rows == []
    assert main(args) == 0  # the probe: 0.25 s a step of one chunk of 16 rows
    text = capsys.readouterr().out
    assert "measured now" in text and not (tmp_path / "r").exists() and timed_rows == [16]
    launch_line = next(l for l in text.splitlines() if l.startswith("planned compute: launch:"))
    assert ", ≥ " in launch_line and "lower bound" in text  # a probe leaves the loop's overheads out
    assert _wall_line(text) == pytest.approx(0.25 / 16, rel=1e-2)  # printed to 3 digits
    assert main(args + ["--json"]) == 0  # the cached probe, not a second one
    planned = PlannedCompute.from_dict(json.loads(capsys.readouterr().out))
    assert "recorded in" in planned.wall_source and timed_rows == [16] and planned.wall_lower_bound
    assert planned.seconds_per_example == pytest.approx(0.25 / 16)
    for stage in planned.stages:  # a probe knows no per-run overhead: examples × seconds per example
        assert stage.wall_seconds == pytest.approx(stage.example_gradients * 0.25 / 16)


@pytest.mark.slow
def test_the_probe_times_the_models_dp_step(tmp_path, monkeypatch):
    monkeypatch.setenv("TANPLAN_CACHE", str(tmp_path / "cache"))
    cfg = load_config(CONFIG, ["train.physical_batch_size=16", "train.grad_method=vmap"])
    found = throughput.probe(cfg)
    assert 0 < found.seconds_per_example < 10 and "measured now" in found.source
    assert throughput.probe(cfg, measure=False).seconds_per_example == found.seconds_per_example


def test_the_runs_in_the_out_folder_give_the_throughput_with_their_overheads(tmp_path, capsys):
    sets = SMALL + ["fit.compute_budget=0"]  # B = 512: a target too small for the pipeline's budget
    cfg = load_config(CONFIG, sets)
    runs = [(2.0, 5.0), (4.0, 6.0)]  # (training seconds, wall seconds) of two recorded runs
    for k, (train_s, wall_s) in enumerate(runs):
        summary = dataclasses.replace(fake_train()(cfg, None), train_seconds=train_s, wall_seconds=wall_s)
        write_json_atomic(tmp_path / "out" / f"run{k}" / "summary.json", summary.to_dict())
    found = throughput.recorded(tmp_path / "out")
    examples = 2 * cfg.train.batch_size * cfg.train.steps
    assert found.seconds_per_example == pytest.approx(6.0 / examples)
    assert found.run_overhead_seconds == pytest.approx(2.5)  # the median of 3 and 2 s outside the steps
    planned = with_wall_time(dry_run(cfg), found, cfg)
    sweep, ladder = planned.stages[:2]
    assert sweep.wall_seconds == pytest.approx(sweep.example_gradients * 6.0 / examples + sweep.runs * 2.5)
    assert ladder.wall_seconds == pytest.approx(ladder.example_gradients * 6.0 / examples
                                                + ladder_runs_bound(cfg) * 2.5)
    assert main(["run", "--dry-run", "--no-probe", "--config", CONFIG, *sum([["--set", s] for s in sets], []),
                 "--out", str(tmp_path / "out")]) == 0
    text = capsys.readouterr().out
    assert ", ≈ " in next(l for l in text.splitlines() if l.startswith("planned compute: sweep:"))
    assert not planned.wall_lower_bound and "measured by the 2 run(s) recorded in" in text and _wall_line(text) == pytest.approx(6.0 / examples,
                                                                                               rel=1e-2)


def test_the_ladders_run_bound_counts_the_rungs_its_budget_buys_then_single_seeds():
    cfg = load_config(CONFIG, ["fit.ladder_seeds=4"])  # 1024 a step: 16, 32, 64, 128 × 4 = 960, then 64 // 16
    budget = budget_of(cfg)
    assert budget.per_step == 1024 and budget.seeds == 4
    assert ladder_runs_bound(cfg) == 16 + 4
    three = load_config(CONFIG)  # the default, 3 seeds: 16 … 128 × 3 = 720 (256 × 3 does not fit), then 304 // 16
    assert budget_of(three).seeds == 3 and ladder_runs_bound(three) == 12 + 19
