"""`tanplan run --resume`: a run stopped by SIGTERM during its ladder continues where it stopped, without
retraining a finished run, and leaves no Ray process and no temporary folder behind; --resume without a
run, or with another config, is one line and exit 2."""

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from helpers import CONFIG, ROOT, run_cli

from tanplan.workflow.pipeline import RUN_FILE, run_record

# A tiny run: one sweep trial on Ray, a ladder of exactly three rungs × two seeds (its budget is their
# cost), a launch of 4 steps; the proxies train on the private set, so the total is checked too.
TINY_TOML = """
[data]
num_samples = 2000
[model]
name = "mlp"
width = 8
[privacy]
sigma = 4.0
epsilon = 1000
total_epsilon = 1e6
[train]
batch_size = 256
steps = 4
eval_every = 4
checkpoint_every = 1
physical_batch_size = 256
grad_method = "vmap"
[tuning]
data = "private"
[sweep]
trials = 1
top_k = 0
[sweep.space]
"train.learning_rate" = [1.0]
[fit]
ladder_start = 32
ladder_seeds = 2
max_proxy_fraction = 0.01
min_proxy_budget = 448
law_share = 10.0
compute_budget = 0  # B = 256 is too small for the pipeline's budget (never more than the launch): the ladder's own
"""


def _ray_processes(temp: Path) -> list[str]:
    """Command lines of live processes that belong to a Ray session under `temp`."""
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            text = cmdline.read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if str(temp) in text:
            found.append(text[:200])
    return found


def _summaries(out: Path) -> dict[str, int]:
    """{run folder: mtime of its summary.json} of the runs that finished (a stopped run writes one too)."""
    return {str(p.relative_to(out)): p.stat().st_mtime_ns for p in out.rglob("summary.json")
            if not json.loads(p.read_text()).get("interrupted")}


@pytest.mark.slow  # a real Ray sweep, seven proxy runs and a launch: 1-2 min on 2 shared cores
@pytest.mark.skipif(not Path("/proc").is_dir(), reason="reads /proc (Linux)")
def test_a_run_stopped_in_its_ladder_resumes_without_retraining(tmp_path):
    pytest.importorskip("ray")
    config = tmp_path / "tiny.toml"
    config.write_text(TINY_TOML)
    out = tmp_path / "run"
    temp = Path(tempfile.mkdtemp(prefix="tr", dir="/tmp"))  # short: Ray's socket paths live under it
    env = {**os.environ, "TMPDIR": str(temp), "JAX_PLATFORMS": "cpu", "TANPLAN_DEBUG_STEP_DELAY": "0.25"}
    cmd = [sys.executable, "-m", "tanplan", "run", "--config", str(config), "--out", str(out), "--launch-anyway"]
    try:
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and proc.poll() is None:  # stop once a ladder run has finished
            if list((out / "ladder" / "runs").glob("*/summary.json")):
                break
            time.sleep(0.1)
        assert proc.poll() is None, proc.communicate()[1][-3000:]
        time.sleep(0.5)  # into the next ladder run
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 128 + signal.SIGTERM, err[-3000:]
        last = err.strip().splitlines()[-1]
        assert last.startswith("tanplan: error: SIGTERM") and "tanplan run --resume" in last
        assert "SIGTERM received" not in err and "logging.cc" not in err  # no Ray C++ stack dump
        before = _summaries(out)
        finished_ladder = [k for k in before if k.startswith("ladder")]
        assert finished_ladder and any(k.startswith("sweep") for k in before), before
        assert not (out / "launch").exists()

        resumed = subprocess.run(cmd + ["--resume", "--json"], cwd=ROOT, env=env, capture_output=True, text=True,
                                 timeout=300)
        assert resumed.returncode == 0, resumed.stderr[-3000:]
        summary = json.loads(resumed.stdout)
        after = _summaries(out)
        assert {k: after[k] for k in before} == before, "a finished run was trained again"
        ladder = json.loads((out / "ladder" / "ladder.json").read_text())
        assert len([p for p in ladder["points"] if p["source"] == "ladder"]) == 6  # three rungs × two seeds
        assert summary["launched"] and summary["epsilon"] == summary["epsilon_total"] > summary["launch_epsilon"]
        assert "resume: 1 of 1 trials already finished" not in resumed.stdout  # --json: no stage lines
        assert _ray_processes(temp) == []
        assert list(temp.iterdir()) == []  # Ray's session folder is gone
    finally:
        if proc.poll() is None:
            proc.kill()
        shutil.rmtree(temp, ignore_errors=True)


def test_resume_needs_the_same_run(tmp_path, capsys):
    from tanplan.config import load_config

    out = tmp_path / "run"
    code, stdout, err = run_cli(capsys, "run", "--config", CONFIG, "--out", str(out), "--resume")
    assert code == 2 and stdout == "" and len(err.strip().splitlines()) == 1
    assert "holds no `tanplan run` to continue" in err and not out.exists()

    out.mkdir()  # a run of the config with train.steps = 300 (the demo's) ...
    record = run_record(load_config(CONFIG), trials=None, proxy_batch_size=None)
    (out / RUN_FILE).write_text(json.dumps(record.to_dict()))
    code, stdout, err = run_cli(capsys, "run", "--config", CONFIG, "--set", "train.steps=30", "--out", str(out),
                                "--resume")  # ... resumed with another
    assert code == 2 and stdout == "" and len(err.strip().splitlines()) == 1
    assert "another config or options (config.train.steps: stored 300, now 30)" in err
    code, _, err = run_cli(capsys, "run", "--config", CONFIG, "--out", str(out))  # without --resume
    assert code == 2 and "already holds a `tanplan run`" in err and "--resume" in err
    assert sorted(p.name for p in out.iterdir()) == [RUN_FILE]  # nothing else written
