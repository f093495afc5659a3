"""What a run publishes beyond metrics.jsonl, on one tiny run: TensorBoard event files that tensorboard's
own reader reads back equal to metrics.jsonl, writers plugged in by import path and from Python, the
timestamps and throughput of each record, the platform, devices and versions in summary.json and
ledger.json, and the ε on the progress bar from step 1."""

import contextlib
import importlib.metadata
import io
import json
import sys
import textwrap
import time

import pytest
from helpers import tiny_overrides

from tanplan.config import load_config
from tanplan.engine import tracking
from tanplan.engine.epsilon_ticker import round_up
from tanplan.engine.loop import train_and_evaluate
from tanplan.errors import UsageError
from tanplan.job import job_of
from tanplan.privacy import accounting
from tanplan.provenance import PACKAGES

PLUGIN = """
RECORDS = []


class ListWriter:
    def __init__(self, run_dir):
        self.run_dir = run_dir

    def write(self, step, scalars, wall_time):
        RECORDS.append((step, dict(scalars), wall_time))

    def close(self):
        RECORDS.append("closed")


def make_writer(run_dir, cfg):
    return ListWriter(run_dir)
"""


class PythonWriter:
    def __init__(self):
        self.records = []

    def write(self, step, scalars, wall_time):
        self.records.append((step, dict(scalars), wall_time))

    def close(self):
        pass


class BrokenWriter:
    def write(self, step, scalars, wall_time):
        raise ConnectionError("tracking server unreachable")

    def close(self):
        raise AssertionError("a dropped writer is not closed")


@pytest.fixture(scope="module")
def tracked_run(tiny_npz, tmp_path_factory):
    """One tiny private run (S = 6, evaluations at 3 and 6) with every kind of writer, its bar captured."""
    plugin_dir = tmp_path_factory.mktemp("plugin")
    (plugin_dir / "tanplan_test_tracking_plugin.py").write_text(textwrap.dedent(PLUGIN))
    sys.path.insert(0, str(plugin_dir))
    try:
        cfg = load_config(None, tiny_overrides(tiny_npz, 'tracking.writers=["tanplan_test_tracking_plugin:make_writer"]'))
        out = tmp_path_factory.mktemp("run") / "tracked"
        python_writer, stderr = PythonWriter(), io.StringIO()
        before = time.time()
        with contextlib.redirect_stderr(stderr):
            summary = train_and_evaluate(job_of(cfg), out, progress=True, writers=[python_writer, BrokenWriter()])
        after = time.time()
        plugin = sys.modules["tanplan_test_tracking_plugin"]
        yield {"cfg": cfg, "out": out, "summary": summary, "python": python_writer.records, "plugin": plugin.RECORDS,
               "stderr": stderr.getvalue(), "window": (before, after),
               "metrics": [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]}
    finally:
        sys.path.remove(str(plugin_dir))
        sys.modules.pop("tanplan_test_tracking_plugin", None)


def _published(record: dict) -> dict:
    return {k: v for k, v in record.items() if k not in ("step", "wall_time") and v is not None}


def test_tensorboard_event_files_read_back_as_metrics_jsonl(tracked_run):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    metrics = tracked_run["metrics"]
    assert [r["step"] for r in metrics] == [3, 6]
    accumulator = EventAccumulator(str(tracked_run["out"] / tracking.FOLDER))
    accumulator.Reload()
    tags = set(accumulator.Tags()["scalars"])
    assert tags == {k for r in metrics for k in _published(r)}  # exactly what metrics.jsonl publishes
    assert {"test_accuracy", "test_loss", "epsilon_spent", "steps_per_second"} <= tags
    for tag in tags:
        events = accumulator.Scalars(tag)
        expected = [(r["step"], r[tag], r["wall_time"]) for r in metrics if r.get(tag) is not None]
        assert [e.step for e in events] == [s for s, _, _ in expected]
        assert [e.value for e in events] == pytest.approx([v for _, v, _ in expected], rel=1e-6)  # float32 on file
        assert [e.wall_time for e in events] == pytest.approx([t for _, _, t in expected], abs=1e-3)


def test_plugged_in_writers_get_the_published_records_and_a_broken_one_is_dropped(tracked_run):
    expected = [(r["step"], _published(r), r["wall_time"]) for r in tracked_run["metrics"]]
    assert tracked_run["python"] == expected
    assert tracked_run["plugin"] == [*expected, "closed"]  # by import path: opened with the run folder, closed
    for _, scalars, _ in expected:  # never the private batches' noiseless loss or accuracy
        assert not {"loss", "accuracy", "train_accuracy"} & set(scalars)
    warnings = [line for line in tracked_run["stderr"].splitlines() if "tracking writer BrokenWriter failed" in line]
    assert len(warnings) == 1 and "dropped" in warnings[0]
    assert tracked_run["summary"].steps == 6 and tracked_run["summary"].model  # the run went on


def test_each_metrics_record_has_its_wall_clock_time_and_throughput(tracked_run):
    before, after = tracked_run["window"]
    metrics = tracked_run["metrics"]
    assert all(before <= r["wall_time"] <= after for r in metrics)
    assert metrics[0]["wall_time"] < metrics[1]["wall_time"]
    assert all(r["steps_per_second"] > 0 for r in metrics)


def test_summary_and_ledger_record_the_platform_devices_and_versions(tracked_run):
    import jax

    devices = jax.devices()  # the tiny run's mesh: every local device
    truth = {"platform": jax.default_backend(), "device_kind": devices[0].device_kind}
    versions = {name: importlib.metadata.version(name) for name in PACKAGES}
    assert versions["jax"] == jax.__version__ and versions["tanplan"] == __import__("tanplan").__version__
    summary = json.loads((tracked_run["out"] / "summary.json").read_text())
    assert {k: summary[k] for k in truth} == truth and summary["devices"] == len(devices)
    assert summary["versions"] == versions and all(summary["versions"].values())
    release = json.loads((tracked_run["out"] / "ledger.json").read_text())["releases"][-1]
    assert {k: release[k] for k in truth} == truth and release["devices"] == len(devices)
    assert release["versions"] == versions


def test_the_progress_bar_shows_epsilon_from_the_first_step(tracked_run):
    """From step 1, before the first evaluation (step 3): the ε of record (PLD, add/remove-one) at that
    evaluation, labelled as an upper bound ("≤"), rounded up; the figure metrics.jsonl then records."""
    cfg, summary = tracked_run["cfg"], tracked_run["summary"]
    q = summary.batch_size / summary.dataset_size
    grid = json.loads((tracked_run["out"] / "ledger.json").read_text())["pld_interval"]
    at_three = accounting.epsilon_of_events([accounting.dp_sgd_event(q, summary.sigma, 3)], summary.delta,
                                            "pld", "add_remove", grid)
    assert tracked_run["metrics"][0]["epsilon_spent"] == at_three
    frames = tracked_run["stderr"].replace("\r", "\n").splitlines()
    step_one = [f for f in frames if f" 1/{cfg.train.steps} " in f]
    assert step_one and all(f"ε_pld=≤{round_up(at_three)}" in f for f in step_one), step_one


def test_tensorboard_can_be_turned_off_and_bad_writers_are_refused_before_the_run(tiny_npz, tmp_path):
    off = load_config(None, tiny_overrides(tiny_npz, "tracking.tensorboard=false"))
    tracker = tracking.open_tracker(job_of(off), tmp_path, {}, [])
    assert tracker.writers == [] and not (tmp_path / tracking.FOLDER).exists()
    with pytest.raises(UsageError, match="tracking.writers entry 'no_such_module_xyz:make' is not allowed"):
        train_and_evaluate(job_of(load_config(None, tiny_overrides(tiny_npz, 'tracking.writers=["no_such_module_xyz:make"]'))),
                           tmp_path / "never", progress=False)
    assert not (tmp_path / "never").exists()  # refused before anything was written
    with pytest.raises(UsageError, match="use an import path"):
        load_config(None, ['tracking.writers=["not a path"]'])
