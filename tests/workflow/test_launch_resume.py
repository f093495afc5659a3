"""A launch killed (SIGKILL) and stopped (SIGTERM) mid-way, its newest checkpoint then damaged, and resumed,
ends exactly where an uninterrupted launch with the same privacy.noise_seed ends: same params_checksum, same
ledger ε, no step counted twice."""

import json
import signal
import subprocess
import time

import pytest
from helpers import ROOT, SEEDED, checkpoint_steps, env, launch_cmd, run_launch

from tanplan.config import load_config
from tanplan.workflow.launch import launch


def _start(out, *extra):
    return subprocess.Popen(launch_cmd(out, *extra, sets=SEEDED), env=env(step_delay=1.0), cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _wait_for_checkpoint_beyond(out, step, proc, timeout=240):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if any(s > step for s in checkpoint_steps(out)):
            return
        assert proc.poll() is None, proc.stderr.read()[-2000:]
        time.sleep(0.05)
    raise AssertionError(f"no checkpoint beyond step {step} in {timeout} s")


@pytest.mark.slow
def test_killed_stopped_and_resumed_launch_equals_the_uninterrupted_one(tmp_path):
    reference = launch(load_config(ROOT / "experiments/mnist1d.toml", SEEDED), tmp_path / "ref", progress=False,
                       allow_public_noise=True).summary
    out = tmp_path / "run"

    proc = _start(out)  # SIGKILL: no handler runs; the last complete checkpoint must be usable
    _wait_for_checkpoint_beyond(out, 0, proc)
    proc.kill()
    proc.wait()
    killed_at = max(checkpoint_steps(out))
    assert 0 < killed_at < 8
    ledger = json.loads((out / "ledger.json").read_text())
    assert ledger["steps"] >= killed_at  # written before each checkpoint: never behind it

    proc = _start(out, "--resume")  # SIGTERM: finishes the step, saves, exits 128 + 15
    _wait_for_checkpoint_beyond(out, killed_at, proc)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=240)
    assert proc.returncode == 128 + signal.SIGTERM, err[-2000:]
    stopped_at = max(checkpoint_steps(out))
    assert killed_at < stopped_at <= 8
    assert json.loads((out / "ledger.json").read_text())["steps"] == stopped_at

    for path in (out / "checkpoint" / str(stopped_at)).rglob("*"):  # damage the newest checkpoint
        if path.is_file():
            path.write_bytes(b"garbage")
    resumed = run_launch(out, "--resume", sets=SEEDED)["summary"]
    assert resumed["params_checksum"] == reference.params_checksum
    fallback = resumed["resumed_from_step"]
    assert fallback < stopped_at  # the damaged checkpoint was skipped for an older intact one
    assert resumed["steps"] == 8 and resumed["steps_this_run"] == 8 - fallback
    ledger = json.loads((out / "ledger.json").read_text())
    assert ledger["steps"] == 8 and [r["first_step"] for r in ledger["releases"]][-1] == fallback
    assert ledger["epsilon_rdp"] == pytest.approx(reference.epsilon_rdp, rel=1e-9)
    assert resumed["epsilon_pld"] == pytest.approx(reference.epsilon_pld, rel=1e-9)
