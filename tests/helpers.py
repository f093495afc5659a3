"""Shared pieces of the launch tests: a tiny config and a `tanplan launch` subprocess."""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
CONFIG = str(ROOT / "experiments" / "mnist1d.toml")
TINY = ["data.num_samples=2000", "train.batch_size=256", "train.steps=8", "model.width=8",
        "train.checkpoint_every=2", "train.eval_every=4", "privacy.sigma=1.0", "privacy.epsilon=100",
        "train.physical_batch_size=256"]


# Runs that must be compared bit for bit share their noise: privacy.noise_seed (tests only, NOT private).
SEEDED = TINY + ["privacy.noise_seed=7"]


def launch_cmd(out, *extra, sets=TINY):
    public = ["--allow-public-noise"] if any(s.startswith("privacy.noise_seed") for s in sets) else []
    return [sys.executable, "-m", "tanplan", "launch", "--config", CONFIG, "--out", str(out), "--json",
            *sum([["--set", s] for s in sets], []), *public, *extra]


def env(devices: int = 1, step_delay: float = 0.0) -> dict:
    e = dict(os.environ)
    flags = [f for f in e.get("XLA_FLAGS", "").split() if "force_host_platform_device_count" not in f]
    if devices > 1:
        flags.append(f"--xla_force_host_platform_device_count={devices}")
    e["XLA_FLAGS"] = " ".join(flags)
    e["JAX_PLATFORMS"] = "cpu"
    if step_delay:
        e["TANPLAN_DEBUG_STEP_DELAY"] = str(step_delay)
    return e


def run_launch(out, *extra, devices=1, sets=TINY, timeout=300):
    proc = subprocess.run(launch_cmd(out, *extra, sets=sets), env=env(devices), cwd=ROOT, capture_output=True,
                          text=True, timeout=timeout)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout)


def saved_params(out) -> list[np.ndarray]:
    """The leaves of the latest checkpoint's state, in order."""
    import orbax.checkpoint as ocp

    with ocp.CheckpointManager(Path(out, "checkpoint").absolute()) as manager:
        step = manager.latest_step()
        got = manager.restore(step, args=ocp.args.Composite(state=ocp.args.StandardRestore()))
    state = got["state"]
    return [np.asarray(state[k]) for k in sorted(state)]


def checkpoint_steps(out) -> list[int]:
    folder = Path(out, "checkpoint")
    return sorted(int(p.name) for p in folder.iterdir() if p.name.isdigit()) if folder.is_dir() else []
