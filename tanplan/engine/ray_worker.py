"""`tanplan launch --backend ray`: THE loop on W worker processes through Ray Train's JaxTrainer.

Each worker runs tanplan.engine.loop.train_and_evaluate over the global mesh of every worker's devices. On GPU
and TPU workers JaxTrainer initialises jax.distributed itself; on CPU workers it does not, so the loop
initialises it here, with gloo collectives and a coordinator on 127.0.0.1 (CPU workers must then share
one machine; for many hosts use GPU workers). Each worker gathers only its rows of every Poisson batch;
the state and the noise key are replicated, and the noise is drawn once for the global sum (see
tanplan.engine.loop). Worker 0 writes summary.json, ledger.json and metrics.jsonl; all write the
orbax checkpoint together.

Fault handling: a lost worker makes Ray restart the group (up to `max_failures` times); the restarted
loop resumes from the last checkpoint, so neither the result nor the ledger changes. Past that, the
run stops with WorkerLost and `tanplan launch --resume` continues it.
"""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path

import jax

from tanplan.dp import secret
from tanplan.engine import setup
from tanplan.engine.checkpoint import Checkpoints
from tanplan.engine.loop import train_and_evaluate
from tanplan.engine.run_folder import check_audit_folder
from tanplan.engine.run_identity import run_identity
from tanplan.errors import UsageError, WorkerLost
from tanplan.fileio import exclusive
from tanplan.job import RunJob
from tanplan.outcomes.run_summary import RunSummary
from tanplan.plugins import worker_env
from tanplan.ray_session import start_ray, stop_ray
from tanplan.runtime import CPU_FLAG, driver_on_cpu, without_cpu_flag


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _train_loop_per_worker(config: dict) -> None:
    import ray.train  # third-party, imported where Ray runs it: in the worker

    ctx = ray.train.get_context()
    if config["gpus_per_worker"]:
        own_gpus(ray.get_gpu_ids())
    run_worker(config, ctx.get_world_rank(), ctx.get_world_size())


def run_worker(config: dict, rank: int, world: int) -> None:
    """Process `rank` of `world` of a launch whose driver ran `create_secret`: THE loop over the global mesh.
    CPU workers join jax.distributed here (gloo collectives, config["coordinator"] on this machine); on
    GPUs JaxTrainer has joined it already."""
    cpu = config["gpus_per_worker"] == 0
    if cpu:
        jax.config.update("jax_cpu_collectives_implementation", "gloo")
        jax.distributed.initialize(config["coordinator"], num_processes=world, process_id=rank)
    try:
        # Always resume: the driver checked that a fresh launch has no checkpoint, and a group that
        # Ray restarts after losing a worker must continue from the last checkpoint. Every worker reads
        # the secret the driver saved, so all draw the same (replicated) noise and batches.
        train_and_evaluate(RunJob.from_record(config["cfg"]), config["out"], resume=True,
                           progress=config["progress"] and rank == 0, backend="ray")
    finally:
        if cpu:
            jax.distributed.shutdown()


def own_gpus(gpu_ids) -> None:
    """Make this worker's JAX use the GPUs Ray assigned to it (`ray.get_gpu_ids()`: ids as the host
    numbers them). Ray sets CUDA_VISIBLE_DEVICES to them, but JaxTrainer's set-up
    (ray/train/v2/jax/config.py) then rewrites it to 0..G-1 in every worker, which would put every worker
    of a host on the same first G GPUs. Restored here, before JAX starts its GPU backend (the set-up only
    called jax.distributed.initialize, whose local_device_ids 0..G-1 then index these GPUs)."""
    if gpu_ids:
        os.environ["CUDA_VISIBLE_DEVICES"] = ",".join(sorted((str(i) for i in gpu_ids), key=lambda i: (len(i), i)))


def launch_on_ray(job: RunJob, out, *, num_workers: int, gpus_per_worker: int = 0, address: str | None = None,
                  resume: bool = False, progress: bool = True, max_failures: int = 1) -> RunSummary:
    """Run THE loop on num_workers Ray workers; the RunSummary worker 0 wrote (summary.json, read back).

    The driver holds out/.tanplan.lock for the whole run and creates the run's secret (in the private
    checkpoint folder) before any worker starts: every worker reads that one secret, so the replicated
    noise and the Poisson batches are the same in every process.
    """
    out = Path(out).absolute()
    driver_on_cpu()  # the model initialised for the run's identity: on the CPU, the GPUs are the workers'
    check_audit_folder(out, resume=resume, audit=False)  # an audit's run: never resumed, never trained into
    with exclusive(out, "launch"):
        create_secret(job, out, resume=resume)
        return _fit(job, out, num_workers=num_workers, gpus_per_worker=gpus_per_worker, address=address,
                    progress=progress, max_failures=max_failures)


def create_secret(job: RunJob, out: Path, *, resume: bool) -> None:
    """The driver's part before any worker starts: refuse a fresh launch into a checkpointed --out, then
    save the run's secret, bound to the run's identity as in a local run, where every worker reads it."""
    ckpt = Checkpoints(out / "checkpoint")
    latest = ckpt.latest_step()
    ckpt.close()
    if latest is not None and not resume:
        raise UsageError(f"--out {str(out)!r} already holds a checkpoint at step {latest}: pass --resume to "
                         f"continue it, or choose a new --out")
    prepared = setup.prepare(job)  # the run's identity (its init's digest too): the secret is bound to it
    secret.for_run(out / "checkpoint", job.privacy.noise_seed, resume=resume,
                   identity=run_identity(job, prepared.plan, prepared.dataset, prepared.params,
                                         setup.init_digest(prepared)))


def _fit(job: RunJob, out: Path, *, num_workers: int, gpus_per_worker: int, address: str | None, progress: bool,
         max_failures: int) -> RunSummary:
    """JaxTrainer over num_workers workers, each running _train_loop_per_worker."""
    os.environ.setdefault("RAY_TRAIN_V2_ENABLED", "1")  # read when ray.train is imported: third-party, after it
    from ray.train import FailureConfig, RunConfig, ScalingConfig
    from ray.train.v2.jax import JaxTrainer

    cpu = gpus_per_worker == 0
    env = {"RAY_TRAIN_V2_ENABLED": "1", "XLA_FLAGS": CPU_FLAG if cpu else without_cpu_flag(os.environ.get("XLA_FLAGS", "")),
           **worker_env(job.config())}  # the workers import the config's plug-ins (model, data, task) themselves
    if cpu:
        env["JAX_PLATFORMS"] = "cpu"
    # Local: loopback only, no dashboard, a private session folder removed at the end; an --address is
    # checked (malformed or unreachable: one line, exit 2) before Ray tries it. None: a Ray already running.
    started_here = start_ray(address, num_cpus=max(num_workers, 2), log_to_driver=progress,
                             runtime_env={"env_vars": env})
    try:
        trainer = JaxTrainer(
            _train_loop_per_worker,
            train_loop_config={"cfg": job.to_dict(), "out": str(out), "gpus_per_worker": gpus_per_worker,
                               "coordinator": f"127.0.0.1:{_free_port()}", "progress": progress},
            scaling_config=ScalingConfig(num_workers=num_workers, use_gpu=not cpu,
                                         resources_per_worker={"GPU": gpus_per_worker} if not cpu else {"CPU": 1}),
            run_config=RunConfig(name="tanplan-launch", storage_path=str(out / "ray"),
                                 failure_config=FailureConfig(max_failures=max_failures)),
        )
        try:
            trainer.fit()
        except Exception as err:  # TrainingFailedError and friends: name the cause in one line
            cause = str(err).strip().splitlines()
            raise WorkerLost(f"the Ray launch failed ({type(err).__name__}: {cause[-1] if cause else 'no detail'}); "
                             f"the last checkpoint in {str(out / 'checkpoint')!r} is kept: continue with --resume"
                             ) from None
    finally:
        stop_ray(started_here)
    return RunSummary.from_dict(json.loads((out / "summary.json").read_text(encoding="utf-8")))
