"""Plug-ins by import path: a package written here (tests/plugin_fixture.py) with a flax model that is none of
the built-ins and a data source class over numpy memmaps trains from a TOML through the CLI and the Python
API; models that break per-example independence are refused in one line before anything is written; an
nnx model with a plugged-in loss trains; bad import paths are one line; Ray workers get the package's
folder on their PYTHONPATH."""

import json
import sys

import numpy as np
import pytest
from fakes import fake_sweep_result, record_plan_reports
from helpers import run_cli
from plugin_fixture import plugin_toml, write_memmap_data, write_package

import tanplan
from tanplan.config import load_config
from tanplan.job import job_of


@pytest.fixture(scope="module")
def package(tmp_path_factory):
    root = tmp_path_factory.mktemp("plugins")
    write_package(root / "pkg")
    write_memmap_data(root / "data")
    return root


@pytest.fixture
def on_path(package, monkeypatch):
    monkeypatch.syspath_prepend(str(package / "pkg"))
    yield package
    for name in [m for m in sys.modules if m == "userpkg" or m.startswith("userpkg.")]:
        del sys.modules[name]  # each test imports the package afresh


def _toml(package, tmp_path, **kwargs):
    path = tmp_path / "run.toml"
    path.write_text(plugin_toml(package / "data", **kwargs))
    return str(path)


def test_a_plugged_in_model_and_memmap_source_train_from_the_cli_and_the_api(on_path, tmp_path, capsys):
    toml = _toml(on_path, tmp_path)
    code, out, err = run_cli(capsys, "train", "--config", toml, "--out", str(tmp_path / "cli"), "--json", "--quiet")
    assert code == 0, err
    summary = json.loads(out)
    assert summary["test_accuracy"] > 0.8 and summary["dataset_size"] == 240 and summary["grad_method"] == "ghost"
    assert err.count("gradient route ghost") == 1  # said once, for the plugged-in model
    card = json.loads((tmp_path / "cli" / "model" / "model.json").read_text())
    assert card["model"] == "userpkg.nets:make_model" and card["input_shape"] == [16, 1]
    from userpkg.data import OPENED  # the package's own source class: every training read is one Poisson batch

    train_reads = [n for s in OPENED if s.split == "train" for n in s.reads]
    assert len(train_reads) == 6 and max(train_reads) <= 64
    result = tanplan.train(toml, tmp_path / "api")  # the same through the Python API
    assert isinstance(result, tanplan.RunSummary) and result.test_accuracy > 0.8 and result.steps == 6
    assert result.to_dict().keys() == summary.keys()


@pytest.mark.parametrize("model, says", [("make_batchnorm", "keeps the collection 'batch_stats'"),
                                         ("make_batch_centred", "changes when the other examples"),
                                         ("make_row_mixing", "changes when the other examples"),
                                         ("make_far_mixing", "differ from those of each row applied alone"),
                                         ("make_narrow", "the data has 2 classes"),
                                         ("make_wide", "the data has 2 classes")])
@pytest.mark.parametrize("grad_method", ["auto", "ghost"])
def test_a_model_that_mixes_examples_is_refused_in_one_line_before_anything_is_written(on_path, tmp_path, capsys,
                                                                                        model, says, grad_method):
    out = tmp_path / "run"
    code, _, err = run_cli(capsys, "train", "--config", _toml(on_path, tmp_path, model=model), "--out", str(out),
                           "--set", f"train.grad_method={grad_method}")
    assert code == 2 and len(err.strip().splitlines()) == 1 and says in err, err
    assert not out.exists()


def test_the_row_mixing_model_fails_the_ghost_routes_numeric_self_check_too(on_path):
    """Under grad_method = "ghost" the per-layer norms are checked against per-example gradients (they were
    not before): the row-mixing model, which passes the structural check, fails the numbers."""
    import jax

    from userpkg.nets import make_row_mixing

    from tanplan.dp import ghost

    model = make_row_mixing(2)
    x = np.zeros((2, 16, 1), np.float32)
    params = model.init(jax.random.key(0), x)["params"]
    logits_fn = lambda p, x: model.apply({"params": p}, x)  # noqa: E731
    assert ghost.unsupported_reason(logits_fn, params, x, numeric=False) is None  # structure alone: passes
    assert "differ from per-example" in ghost.unsupported_reason(logits_fn, params, x, numeric=True)


def test_a_loss_that_is_nan_on_the_public_probe_is_refused_before_anything_is_written(on_path, tmp_path, capsys):
    out = tmp_path / "run"
    code, _, err = run_cli(capsys, "train", "--config", _toml(on_path, tmp_path), "--out", str(out),
                           "--set", "task.loss=userpkg.losses:nan_loss")
    assert code == 2 and len(err.strip().splitlines()) == 1 and "task.loss returns NaN" in err, err
    assert not out.exists()


@pytest.mark.parametrize("setting, says", [
    ("model.name=userpkg.nets:missing", "has no attribute 'missing'"),
    ("data.dataset=nopkg.data:load", "no module named 'nopkg'"),
    ("task.loss=userpkg.losses:nothing", "has no attribute 'nothing'"),
    ("model.name=userpkg.nets", "unknown model"),
])
def test_a_bad_import_path_is_one_line(on_path, tmp_path, capsys, setting, says):
    out = tmp_path / "run"
    code, _, err = run_cli(capsys, "train", "--config", _toml(on_path, tmp_path), "--set", setting, "--out", str(out))
    assert code == 2 and len(err.strip().splitlines()) == 1 and says in err, err
    assert not out.exists()


def test_an_nnx_model_with_a_plugged_in_loss_trains_by_the_vmap_route(on_path, tmp_path, capsys):
    result = tanplan.train(_toml(on_path, tmp_path, model="make_nnx"), overrides={"task.loss": "userpkg.losses:smoothed"})
    assert result.grad_method == "vmap" and result.test_accuracy > 0.8
    assert "gradient route vmap" in capsys.readouterr().err


def test_ray_workers_get_the_plugins_folder_on_their_path(on_path):
    from tanplan.plugins import worker_env

    cfg = load_config(None, ["model.name=userpkg.nets:make_model", "data.dataset=userpkg.data:load"])
    folders = worker_env(cfg)["PYTHONPATH"].split(":")
    assert folders[0] == str((on_path / "pkg").resolve())
    assert worker_env(load_config(None, [])) == {}  # built-ins only: nothing to add


# fit at B' = 8 (the sweep's proxy B') and 32 (the launch's B): two step shapes for six runs, not three
RUN_EXTRA = """
[sweep]
trials = 1
top_k = 0
[sweep.space]
learning_rate = [1.0]
[fit]
batch_sizes = [8, 32]
seeds = 2
"""


# Slow (about 40 CPU-s and a Ray start: a fresh process, the whole pipeline, a Ray worker): its parts stay in
# `make test`, the pipeline on the plug-ins in this process (test_tanplan_run_with_the_plugins_through_the_python_api),
# their folder on a Ray worker's path (test_ray_workers_get_the_plugins_folder_on_their_path), a sweep's trials
# trained by Ray workers (tests/workflow/test_sweep_ray.py::test_two_trial_sweep_on_tiny_mnist1d).
@pytest.mark.slow
def test_tanplan_run_with_the_plugins_end_to_end_in_a_fresh_process(package, tmp_path):
    """`tanplan run` on a TOML naming the package's model and loader: plan, sweep (a Ray worker imports the
    package), fit and launch, shrunk to a 1-trial sweep and 6-step runs."""
    import os
    import subprocess

    from helpers import ROOT, env

    toml = tmp_path / "run.toml"
    toml.write_text(plugin_toml(package / "data", extra=RUN_EXTRA))
    variables = env()
    variables["PYTHONPATH"] = os.pathsep.join([str(package / "pkg"), str(ROOT)])
    proc = subprocess.run([sys.executable, "-m", "tanplan", "run", "--config", str(toml), "--out", str(tmp_path / "run"),
                           "--json", "--launch-anyway"], cwd=tmp_path, env=variables, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads(proc.stdout)
    assert summary["launched"] and summary["actual_accuracy"] > 0.8
    trial = next((tmp_path / "run" / "sweep" / "trials").glob("*/summary.json"))  # trained in a Ray worker
    assert json.loads(trial.read_text())["test_accuracy"] is not None
    card = json.loads((tmp_path / "run" / "launch" / "model" / "model.json").read_text())
    assert card["model"] == "userpkg.nets:make_model" and card["steps"] == 6


def _sweep_in_process(spec, out, *, address=None, resume=False, log=None):
    """search.run_sweep without Ray: each trial through run_trial (what a Ray worker runs) with the real
    engine, best = the first (the test above runs the same stage through Ray workers)."""
    from pathlib import Path

    from tanplan.workflow.sweep.trial import run_trial

    params = {d.name: d.choices[0] if d.is_choice else d.low for d in spec.dims}
    for i in range(spec.trials):
        run_trial({"params": params, "trial": i, "seed": spec.seed + i, "kind": "search"}, base=spec.base,
                  dims=spec.dims, trials_dir=str(Path(out) / "trials"))
    return fake_sweep_result(spec, params, search_accuracy=None)  # the typed SweepResult run_sweep returns


def test_tanplan_run_with_the_plugins_through_the_python_api(on_path, tmp_path, monkeypatch):
    """tanplan.run on the same TOML in this process: plan, sweep, fit and launch of the plugged-in model on the
    plugged-in source, the sweep's trial trained in this process (no Ray: the test above covers the workers);
    the typed result is the summary.json the command prints."""
    from tanplan.workflow.sweep import search

    monkeypatch.setattr(search, "run_sweep", _sweep_in_process)
    # the batch law's figure (drawn by the fit and again after the launch) is tests/workflow/test_fit_launch.py's
    from tanplan.workflow import fit as fit_module
    from tanplan.workflow.pipeline import run as pipeline_run

    for module in (fit_module, pipeline_run):
        monkeypatch.setattr(module, "figure_scaling", lambda result, path, *a, **k: path)
    # the plan's report (RDP curves, figures: 8 CPU-s here) is tests/commands/test_plan_command.py's: only asked for
    reports = []
    record_plan_reports(monkeypatch, reports)
    toml = tmp_path / "run.toml"
    toml.write_text(plugin_toml(on_path / "data", extra=RUN_EXTRA))
    # the per-layer route asked for: auto's costing of both routes at each proxy's rows (about 3 CPU-s) is the
    # test above's, which has auto take it for this model
    result = tanplan.run(toml, tmp_path / "run", overrides={"train.grad_method": "ghost"}, launch_anyway=True)
    assert reports == [tmp_path / "run" / "plan"]
    assert isinstance(result, tanplan.RunResult) and result.launched and result.actual_accuracy > 0.8
    assert result.to_dict() == json.loads((tmp_path / "run" / "summary.json").read_text())
    launch_epsilon = result.to_dict()["launch_epsilon"]  # the launch's own; `epsilon` is the total (private tuning)
    assert result.accountant == "pld" and launch_epsilon <= 4.0 and result.tuning_data == "private"
    assert result.epsilon == result.epsilon_total > launch_epsilon  # the proxies' releases composed with the launch's
    assert result.predicted_accuracy is None or len(result.prediction_interval) == 2
    launched = tanplan.RunSummary.from_dict(json.loads((tmp_path / "run" / "launch" / "summary.json").read_text()))
    assert launched.steps == 6 and launched.grad_method == "ghost" and launched.dataset_size == 240


def test_the_secrets_binding_covers_the_plugins_code_and_reads_no_training_row(tmp_path, monkeypatch):
    """run_identity() (what a run's secret is bound to, tanplan.engine.run_identity) names each plug-in's import
    path and a digest of its module's file: an edited plug-in under the same path is another run. A source
    larger than memory is identified by what it declares, without a read."""
    from tanplan.engine.run_identity import run_identity
    from tanplan.engine.setup import load_data
    from tanplan.plugins import resolve
    from tanplan.privacy.run_plan import resolve_plan

    write_package(tmp_path / "pkg", name="idpkg")
    write_memmap_data(tmp_path / "data")
    monkeypatch.syspath_prepend(str(tmp_path / "pkg"))
    cfg = load_config(None, ["data.dataset=idpkg.data:load", f"data.path={tmp_path / 'data'}",
                             "model.name=idpkg.nets:make_model", "task.loss=idpkg.losses:smoothed",
                             "privacy.epsilon=4", "train.batch_size=32", "train.steps=6"])
    data = load_data(cfg.data)
    plan, params = resolve_plan(cfg, data.num_train), {"w": np.zeros((2, 3), np.float32)}
    resolve(cfg.model.name, "model.name"), resolve(cfg.task.loss, "task.loss")  # imported, as prepare() does
    from idpkg.data import OPENED

    reads = [len(s.reads) for s in OPENED if s.split == "train"]
    before = run_identity(job_of(cfg), plan, data, params)
    assert [len(s.reads) for s in OPENED if s.split == "train"] == reads == [0]  # no training row read
    assert before["plugin.model.name"].startswith("idpkg.nets:make_model@")
    assert {"plugin.data.dataset", "plugin.task.loss"} <= set(before) and "plugin.task.metric" not in before
    nets = tmp_path / "pkg" / "idpkg" / "nets.py"
    nets.write_text(nets.read_text() + "\n# edited\n")
    after = run_identity(job_of(cfg), plan, data, params)
    assert {k for k in before if before[k] != after[k]} == {"plugin.model.name"}
    for name in [m for m in sys.modules if m == "idpkg" or m.startswith("idpkg.")]:
        del sys.modules[name]
