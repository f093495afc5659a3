"""The cost before it is spent: `tanplan run --dry-run` and the first lines of run and fit (planned compute
of each stage, example-gradients and their fraction of the target's)."""

import json

from fakes import SMALL, fake_train
from helpers import CONFIG

from tanplan.cli import main
from tanplan.config import load_config
from tanplan.engine import loop
from tanplan.outcomes.pipeline import PlannedCompute
from tanplan.workflow.ladder import budget_of
from tanplan.workflow.pipeline.costs import dry_run


def test_dry_run_prints_each_stages_planned_compute_and_trains_nothing(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(loop, "train_and_evaluate", lambda *a, **k: (_ for _ in ()).throw(AssertionError("trained")))
    out = tmp_path / "run"
    assert main(["run", "--dry-run", "--config", CONFIG, "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert not out.exists()  # no run folder, no checkpoint
    cfg = load_config(CONFIG)
    target = cfg.train.batch_size * cfg.train.steps
    sweep_runs = cfg.sweep.trials + cfg.sweep.top_k * cfg.sweep.seeds
    for stage, examples in (("sweep", sweep_runs * 64 * cfg.train.steps),
                            ("ladder", budget_of(cfg).per_step * cfg.train.steps), ("launch", target)):
        line = next(l for l in text.splitlines() if l.startswith(f"planned compute: {stage}:"))
        assert f"{int(examples):,} example-gradients" in line and f"{examples / target:.3g} of the target" in line
    assert main(["run", "--dry-run", "--json", "--config", CONFIG, "--out", str(out)]) == 0
    planned = PlannedCompute.from_dict(json.loads(capsys.readouterr().out))
    assert [s.stage for s in planned.stages] == ["sweep", "ladder", "launch"] and not out.exists()
    assert planned.proxy_fraction == sum(s.fraction for s in planned.stages[:2])


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
