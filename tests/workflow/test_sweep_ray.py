"""Sweeps through Ray Tune and Optuna, on one local Ray started once for the module (a Ray start costs
10-20 s on two cores): a real 2-trial mnist1d sweep; slow: the machinery (re-runs ranked by mean) on a fake
objective with an extension by --resume, and a sweep killed with SIGKILL after its first finished
trial, then resumed with --resume."""

import contextlib
import dataclasses
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time

import pytest

from helpers import skip_module_without

skip_module_without("ray", "pandas")  # imported where used: collection stays light

import fakes  # noqa: E402
from tanplan import cli  # noqa: E402
from tanplan.workflow.sweep import search as sweep  # noqa: E402
from tanplan.workflow.sweep import study  # noqa: E402
from tanplan.config import load_config  # noqa: E402

TINY_TOML = """
[experiment]
name = "tiny"
[data]
num_samples = 4000
[model]
name = "mlp"
[privacy]
sigma = 4.0
[train]
batch_size = 256
steps = 4
eval_every = 2
physical_batch_size = 64
eval_batch_size = 1000
grad_method = "vmap"
[sweep]
top_k = 0
[sweep.space]
learning_rate = { low = 0.5, high = 8.0, log = true }
momentum = [0.0, 0.5]
"""
TINY_ARGS = ["--proxy-batch-size", "64", "--top-k", "0"]


@pytest.fixture(scope="module")
def local_ray():
    import ray

    started = sweep.connect_ray(None)  # the sweeps below find it running and reuse it
    ray.cloudpickle.register_pickle_by_value(fakes)  # Ray workers cannot import tests/fakes.py: send it by value
    yield
    sweep.stop_ray(started)  # and its session folder


@pytest.fixture
def tiny_toml(tmp_path):
    path = tmp_path / "tiny.toml"
    path.write_text(TINY_TOML)
    return path


class _Data:
    num_train, data_kind = 4000, "1d"


def _search_rows(out):
    import pandas as pd

    return pd.read_csv(out / "sweep.csv")


@pytest.mark.slow
def test_fake_objective_search_reruns_results_and_extension(tmp_path, local_ray):
    calls = tmp_path / "calls.txt"

    fake_train = fakes.fake_sweep_train(momentum_cost=0.2, seed_effect=0.001, calls=str(calls))  # seeds matter a little

    cfg = load_config(None, ["train.batch_size=512", "train.steps=6", "train.eval_every=2", "privacy.sigma=2.0",
                             "sweep.space={learning_rate={low=0.5,high=16.0,log=true}, momentum=[0.0,0.9]}"])
    spec = sweep.prepare(cfg, proxy_batch_size=64, trials=3, top_k=2, seeds=2, dataset=_Data())
    out = tmp_path / "sweep"
    lines = []
    summary = sweep.run_sweep(spec, out, train_fn=fake_train, log=lines.append)

    rows = _search_rows(out)
    assert len(rows) == 3 and (rows.status == "finished").all()
    for column in ("learning_rate", "momentum", "proxy_batch_size", "proxy_sigma", "steps", "test_accuracy",
                   "wall_seconds", "status", "seed"):
        assert column in rows.columns
    assert (rows.proxy_batch_size == 64).all() and rows.proxy_sigma.iloc[0] == pytest.approx(2.0 * 64 / 512)
    assert rows.seed.tolist() == [0, 1, 2]  # every trial seeded, reproducibly
    assert rows.learning_rate.between(0.5, 16.0).all()

    import pandas as pd

    reruns = pd.read_csv(out / "reruns.csv")
    assert len(reruns) == 4 and (reruns.status == "finished").all()  # top 2 x 2 fresh seeds
    assert set(reruns.seed).isdisjoint(rows.seed)
    means = reruns.groupby("source_trial").test_accuracy.mean()
    best = json.loads((out / "best.json").read_text())
    assert best["best"]["trial"] == means.idxmax()  # ranked by the mean over seeds ...
    assert best["best"]["mean_accuracy"] == pytest.approx(means.max())
    assert best["best"]["std_accuracy"] is not None  # ... with the spread shown
    assert best == json.loads(json.dumps(summary.to_dict()))
    assert best["best"]["overrides"]["train.learning_rate"] == best["best"]["params"]["learning_rate"]
    for name in ("sweep_accuracy.png", "sweep_importance.png", "sweep.md", "study.sqlite3"):
        assert (out / name).stat().st_size > 0, name
    assert "| rank | trial |" in (out / "sweep.md").read_text()
    assert sum(1 for line in lines if line.startswith("search ")) == 3

    # Asking for one more trial runs exactly one more (and re-runs it if it enters the top 2).
    first_seeds = calls.read_text().split()
    assert len(first_seeds) == 7
    sweep.run_sweep(dataclasses.replace(spec, trials=4), out, resume=True, train_fn=fake_train)
    rows = _search_rows(out)
    assert len(rows) == 4 and rows.seed.tolist() == [0, 1, 2, 3]
    new_calls = calls.read_text().split()[7:]
    assert new_calls[0] == "3" and len(new_calls) in (1, 3)
    # Nothing left to do: a second --resume runs nothing.
    sweep.run_sweep(dataclasses.replace(spec, trials=4), out, resume=True, train_fn=fake_train)
    assert calls.read_text().split()[7:] == new_calls


def test_two_trial_sweep_on_tiny_mnist1d(tmp_path, local_ray, tiny_toml, capsys):
    out = tmp_path / "sweep"
    start = time.perf_counter()
    code = cli.main(["sweep", "--config", str(tiny_toml), *TINY_ARGS, "--trials", "2", "--out", str(out), "--json"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    summary = json.loads(captured.out)
    rows = _search_rows(out)
    assert len(rows) == 2 and (rows.status == "finished").all(), rows.error.tolist()
    assert rows.test_accuracy.between(0.0, 1.0).all()
    assert (rows.proxy_batch_size == 64).all() and (rows.steps == 4).all()
    assert rows.proxy_sigma.iloc[0] == pytest.approx(4.0 * 64 / 256)  # σ' = σ·B'/B
    assert (rows.wall_seconds > 0).all() and rows.seed.tolist() == [0, 1]
    assert summary["trials"]["finished"] == 2 and summary["best"]["trial"] == int(rows.test_accuracy.idxmax())
    for trial, seed in zip(rows.trial, rows.seed):  # the engine trained the proxy, with the trial's seed
        run = json.loads((out / "trials" / f"search-{trial:04d}-seed{seed}" / "summary.json").read_text())
        assert run["batch_size"] == 64 and run["sigma"] == pytest.approx(1.0) and run["target"]["batch_size"] == 256
    # the sweep reports what its two trials cost the data they trained on: their releases composed
    from tanplan.privacy import accounting

    trial_eps = [json.loads(p.read_text())["epsilon_rdp"] for p in (out / "trials").glob("*/ledger.json")]
    composed = accounting.epsilon_of_events([accounting.dp_sgd_event(64 / 3200, 1.0, 4)] * 2, 3200 ** -1.1, "rdp")
    assert summary["privacy_spent"]["epsilon_rdp"] == pytest.approx(composed, rel=1e-9)
    assert composed > max(trial_eps) and len(trial_eps) == 2
    print(f"2-trial tiny mnist1d sweep: {time.perf_counter() - start:.0f} s (Ray already running)", file=sys.stderr)


def _finished_trials(db) -> int:
    if not db.exists():
        return 0
    try:
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=1) as con:
            return con.execute("SELECT count(*) FROM trials t JOIN studies s ON t.study_id = s.study_id "
                               "WHERE s.study_name = 'search' AND t.state = 'COMPLETE'").fetchone()[0]
    except sqlite3.Error:
        return 0  # tables not created yet, or busy


@pytest.mark.slow
def test_sigkill_after_first_trial_then_resume(tmp_path, local_ray, tiny_toml, capsys):
    out = tmp_path / "sweep"
    command = ["sweep", "--config", str(tiny_toml), *TINY_ARGS, "--trials", "3", "--out", str(out)]
    proc = subprocess.Popen([sys.executable, "-m", "tanplan", *command], start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 400
        while _finished_trials(out / study.STUDY_FILE) < 1:
            assert proc.poll() is None, f"the sweep ended before it could be killed: {proc.stderr.read()}"
            assert time.monotonic() < deadline, "no trial finished in time"
            time.sleep(0.5)
        os.kill(proc.pid, signal.SIGKILL)  # the driver only, as `kill -9` would
        proc.wait(timeout=30)
    finally:
        time.sleep(2)  # Ray's own processes die with their driver; end any straggler of the killed sweep
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.stderr.close()

    import optuna

    killed = optuna.load_study(study_name=study.SEARCH_STUDY, storage=study.storage_url(out))
    first = [t for t in killed.trials if t.state.name == "COMPLETE"]
    assert len(first) >= 1 and len(first) < 3
    kept = {t.number: (t.user_attrs["started_at"], t.params) for t in first}
    unfinished = {t.number: (t.params, t.user_attrs["seed"]) for t in killed.trials if t.state.name == "RUNNING"}
    summaries = {n: (out / "trials" / f"search-{n:04d}-seed{killed.trials[n].user_attrs['seed']}" / "summary.json")
                 for n in kept}
    mtimes = {n: path.stat().st_mtime_ns for n, path in summaries.items()}

    assert cli.main([*command, "--resume"]) == 0, capsys.readouterr().err
    rows = _search_rows(out)
    assert (rows.status == "finished").sum() == 3
    resumed = optuna.load_study(study_name=study.SEARCH_STUDY, storage=study.storage_url(out))
    for number, (started_at, params) in kept.items():  # finished trials were not run again
        assert resumed.trials[number].user_attrs["started_at"] == started_at
        assert summaries[number].stat().st_mtime_ns == mtimes[number]
    finished = [t for t in resumed.trials if t.state.name == "COMPLETE"]
    assert len({json.dumps(t.params, sort_keys=True) for t in finished}) == 3
    assert len({t.user_attrs["seed"] for t in finished}) == 3
    for number, (params, seed) in unfinished.items():  # an interrupted trial runs again, same params and seed
        assert resumed.trials[number].user_attrs["status"] == "interrupted"
        again = [t for t in finished if t.user_attrs.get("requeued_from") == number]
        assert len(again) == 1 and again[0].params == params and again[0].user_attrs["seed"] == seed
