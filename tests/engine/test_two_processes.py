"""Two local processes joined by jax.distributed on the CPU (gloo), as `launch --backend ray` runs its CPU
workers but without Ray: the driver saves the run's secret, each process runs THE loop over the global
mesh. Checked: the global batch (two processes, two devices, a chunk of physical_batch_size rows on each),
the noise drawn once per step for the global sum, and the same parameters as one process."""

import json
import subprocess
import sys

import numpy as np
import pytest
from helpers import CONFIG, ROOT, env, launch_cmd, run_cli, saved_params

from tanplan.config import load_config
from tanplan.engine import ray_worker
from tanplan.job import job_of

SETS = ["data.num_samples=1000", "train.batch_size=128", "train.steps=3", "model.width=4", "train.eval_every=3",
        "train.checkpoint_every=0", "privacy.sigma=2.0", "privacy.epsilon=100", "train.physical_batch_size=48",
        "privacy.noise_seed=7",  # a seeded secret (tests only): both runs draw alike
        "train.grad_method=vmap"]  # the route `auto` takes here, named: no route costing in each of the 3 runs

WORKER = """
import json, sys
from tanplan.engine.ray_worker import run_worker
run_worker(json.loads(sys.argv[1]), int(sys.argv[2]), 2)
"""


def test_two_processes_train_the_global_batch_with_one_noise_draw(tmp_path, capsys):
    cfg = load_config(CONFIG, SETS)
    two = tmp_path / "two"
    ray_worker.create_secret(job_of(cfg), two, resume=False)  # the driver's part: the secret before any worker
    config = json.dumps({"cfg": cfg.to_dict(), "out": str(two), "gpus_per_worker": 0, "progress": False,
                         "coordinator": f"127.0.0.1:{ray_worker._free_port()}"})
    workers = [subprocess.Popen([sys.executable, "-c", WORKER, config, str(rank)], env=env(1), cwd=ROOT,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for rank in (0, 1)]
    # The one-process reference is `tanplan launch` in this process, while the two workers run (a third fresh
    # process would cost its imports and compilations again: the processes are what the workers test).
    code, out, err = run_cli(capsys, *launch_cmd(tmp_path / "one", sets=SETS)[3:])  # argv after `python -m tanplan`
    for w in workers:
        _, worker_err = w.communicate(timeout=300)
        assert w.returncode == 0, worker_err[-3000:]
    assert code == 0, err[-3000:]

    summary, single = json.loads((two / "summary.json").read_text()), json.loads(out)["summary"]
    assert (summary["processes"], summary["devices"]) == (2, 2)  # one global mesh over both processes
    assert summary["layout"]["chunk_size"] == 2 * 48  # physical_batch_size rows on each device
    assert single["layout"]["chunk_size"] == 48
    assert summary["steps"] == single["steps"] == 3
    assert summary["epsilon_pld"] == pytest.approx(single["epsilon_pld"], rel=1e-12)
    # Same secret, same batches: the same parameters only if the noise is drawn once per step for the global
    # sum (a draw per process would add √2 times the noise, or another noise, to each update).
    two_params, one_params = saved_params(two), saved_params(tmp_path / "one")
    for x, y in zip(one_params, two_params, strict=True):
        np.testing.assert_allclose(x, y, rtol=1e-4, atol=1e-5)  # only the summation order differs
    assert max(float(np.max(np.abs(x - y))) for x, y in zip(one_params, two_params)) < 1e-4
