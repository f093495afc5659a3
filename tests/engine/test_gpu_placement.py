"""Blockers on GPU hosts, checked on the CPU by faking what Ray and JAX would see (issue #32):
each Ray worker on its own GPU, the Ray driver's JAX on the CPU, the XLA CPU flag only where JAX runs
on the CPU alone."""

import os
import subprocess
import sys
import textwrap
import types

import pytest
from helpers import CONFIG, ROOT

from tanplan import runtime
from tanplan.engine import ray_worker


def test_each_ray_worker_uses_the_gpu_ray_assigned_to_it(monkeypatch):
    """Ray gives worker 1 of a host GPU 3 (CUDA_VISIBLE_DEVICES=3); JaxTrainer's own set-up then rewrites it
    to 0 (ray/train/v2/jax/config.py). The worker's training must see GPU 3 again."""
    jax_config = pytest.importorskip("ray.train.v2.jax.config")
    import jax
    import ray
    import ray.train

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3")  # what Ray sets for a worker holding GPU 3
    monkeypatch.setenv("JAX_PLATFORMS", "cuda")
    initialised = []
    monkeypatch.setattr(jax.distributed, "initialize", lambda *a, **k: initialised.append(a))
    jax_config._setup_jax_distributed_environment("127.0.0.1:1", 2, 1, use_tpu=False, use_gpu=True,
                                                  resources_per_worker={"GPU": 1})
    assert initialised and initialised[0][3] == [0]  # the set-up ran: JAX indexes the visible GPUs from 0
    assert os.environ["CUDA_VISIBLE_DEVICES"] == "0"  # ... and Ray's rewrite happened (every worker: GPU 0)

    seen = []
    monkeypatch.setattr(ray.train, "get_context", lambda: types.SimpleNamespace(
        get_world_rank=lambda: 1, get_world_size=lambda: 2))
    monkeypatch.setattr(ray, "get_gpu_ids", lambda: ["3"])
    monkeypatch.setattr(ray_worker.RunJob, "from_record", lambda d: d)
    monkeypatch.setattr(ray_worker, "train_and_evaluate",
                        lambda *a, **k: seen.append(os.environ["CUDA_VISIBLE_DEVICES"]))
    ray_worker._train_loop_per_worker({"gpus_per_worker": 1, "cfg": {}, "out": "x", "progress": False})
    assert seen == ["3"]


def test_a_worker_with_several_gpus_sees_them_in_order(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    ray_worker.own_gpus(["10", "9"])
    assert os.environ["CUDA_VISIBLE_DEVICES"] == "9,10"


_DRIVER = textwrap.dedent("""
    import jax, json, sys
    from tanplan import api
    from tanplan.config import load_config
    from tanplan.engine import ray_worker, setup
    from tanplan.job import job_of
    from tanplan.workflow import inputs

    class Seen(Exception):
        pass

    def spy(*args, **kwargs):  # what JAX would start in the driver when the model is first built
        raise Seen(jax.config.jax_platforms)

    cfg = load_config(sys.argv[1], ["model.width=8"])
    seen = {}
    setup.prepare = spy
    try:
        ray_worker.launch_on_ray(job_of(cfg), sys.argv[2] + "/a", num_workers=2, gpus_per_worker=1)
    except Seen as s:
        seen["launch_on_ray"] = s.args[0]
    inputs.check_inputs = api.check_inputs = spy
    for name, call in (("launch", lambda: api.launch(cfg, sys.argv[2] + "/b", backend="ray", num_workers=2,
                                                     gpus_per_worker=1)),
                       ("sweep", lambda: api.sweep(cfg, sys.argv[2] + "/c"))):
        try:
            call()
        except Seen as s:
            seen[name] = s.args[0]
    print(json.dumps(seen))
""")


def test_the_ray_driver_keeps_its_jax_on_the_cpu(tmp_path):
    """launch --backend ray and sweep: by the time the driver first builds a model (its run identity, a
    plug-in's per-example check), JAX is restricted to the CPU, so no GPU memory is taken in the driver."""
    env = {k: v for k, v in os.environ.items() if k != "JAX_PLATFORMS"}  # as on a GPU host: JAX picks freely
    proc = subprocess.run([sys.executable, "-c", _DRIVER, CONFIG, str(tmp_path)], env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip().splitlines()[-1] == '{"launch_on_ray": "cpu", "launch": "cpu", "sweep": "cpu"}'


@pytest.mark.parametrize("platforms, plugins, flagged", [
    ("cpu", ["xla_cuda12"], True), ("cuda", [], False), ("cuda,cpu", [], False), ("", [], True),
    ("", ["xla_cuda12"], False)])
def test_the_xla_cpu_flag_only_where_jax_runs_on_the_cpu_alone(monkeypatch, platforms, plugins, flagged):
    """XLA aborts on a flag it does not know: an accelerator's XLA gets no CPU-only flag."""
    monkeypatch.setenv("JAX_PLATFORMS", platforms)
    monkeypatch.setenv("XLA_FLAGS", "--xla_dump_to=/tmp/x")
    monkeypatch.setattr(runtime, "accelerator_plugins", lambda: plugins)
    runtime.configure_process()
    assert (runtime.CPU_FLAG in os.environ["XLA_FLAGS"]) is flagged
    assert "--xla_dump_to=/tmp/x" in os.environ["XLA_FLAGS"]  # the user's own flags kept


def test_gpu_workers_get_no_cpu_flag():
    assert runtime.without_cpu_flag(f"--a=1 {runtime.CPU_FLAG} --b") == "--a=1 --b"
