"""The launch loop: one DP-SGD run over every device of every process, checkpointed and resumable.

    summary = run_launch(cfg, Path("runs/final"), resume=True)

Exact resume: nothing depends on how many steps came before in this process. Step t's batch is a
Poisson sample drawn from numpy's generator seeded with (seed, 1, t) (jax-privacy's
CyclicPoissonSampling, one iteration, INDEPENDENT partition: each example in with probability q), and
its noise/augmentation key is fold_in(train_key, t). A checkpoint (tanplan.engine.checkpoint) holds the state,
the step, the PRNG derivation, the sampler's next step, the padded layout and the privacy ledger; a
resumed run restores them and continues with the identical batches and noise, so its final parameters
equal those of an uninterrupted run bit for bit on the same devices.

Devices: the mesh has one 'data' axis over jax.devices(), i.e. all local devices (backend local) or all
devices of all processes after jax.distributed.initialize (backend ray). Each process builds only the
rows of the padded batch that live on its own devices (jax.make_array_from_callback); the state and the
step key are replicated, so the clipped sum is summed across devices by XLA and the noise N(0, σ²C²) is
drawn once from the replicated key on the replicated global sum (tanplan.dp.step): one Gaussian
mechanism per step, as the ledger (tanplan.privacy.ledger) accounts it.

SIGTERM and SIGINT finish the step in flight, save a checkpoint and stop with LaunchInterrupted
(exit 128 + signal number); `--resume` continues from there.
"""

from __future__ import annotations

import json
import math
import os
import signal
import sys
import time
from pathlib import Path

import numpy as np

from tanplan.engine.checkpoint import LaunchCheckpoints, host_array
from tanplan.config import Config, config_to_toml
from tanplan.errors import TanplanError, TrainingDiverged, UsageError
from tanplan.fileio import write_json_atomic, write_text_atomic
from tanplan.privacy.ledger import Ledger

# Testing aid: seconds to sleep after each step, so a test can kill a tiny run mid-way.
_STEP_DELAY_ENV = "TANPLAN_DEBUG_STEP_DELAY"


class LaunchInterrupted(TanplanError):
    """SIGTERM/SIGINT: the last step's checkpoint is saved; resume with --resume."""

    def __init__(self, message: str, signum: int):
        super().__init__(message)
        self.exit_code = 128 + signum


def poisson_indices(num_examples: int, q: float, seed: int, step: int) -> np.ndarray:
    """Step `step`'s Poisson batch: each example in independently with probability q (same args, same batch)."""
    from jax_privacy import batch_selection

    strategy = batch_selection.CyclicPoissonSampling(
        sampling_prob=q, iterations=1, partition_type=batch_selection.PartitionType.INDEPENDENT)
    return next(iter(strategy.batch_iterator(num_examples, rng=np.random.default_rng([seed, 1, step]))))


def global_batch(x: np.ndarray, y: np.ndarray, index: np.ndarray, mask: np.ndarray, mesh) -> dict:
    """The padded batch as global arrays sharded by rows; this process gathers only its own rows."""
    import jax

    from tanplan.dp import sharding

    sh = sharding.batch_sharding(mesh)

    def rows(source):
        def fetch(idx):
            i, m = index[idx[:2]], mask[idx[:2]]
            out = source[np.where(m, i, 0).reshape(-1)].reshape(i.shape + source.shape[1:])
            out[~m] = 0  # padding rows hold zeros, never a real example
            return out
        return fetch

    shape = index.shape
    return {"x": jax.make_array_from_callback(shape + x.shape[1:], sh, rows(x)),
            "y": jax.make_array_from_callback(shape + y.shape[1:], sh, rows(y)),
            "mask": jax.make_array_from_callback(shape, sh, lambda idx: mask[idx[:2]])}


def replicate_global(tree, mesh):
    """Every leaf replicated on every device of the (possibly multi-process) mesh."""
    import jax

    from tanplan.dp import sharding

    rep = sharding.replicated(mesh)

    def put(leaf):
        a = np.asarray(leaf)
        return jax.make_array_from_callback(a.shape, rep, lambda idx: a[idx])

    return jax.tree.map(put, tree)


class _Signals:
    """SIGTERM/SIGINT set a flag the loop reads after each step (main thread only)."""

    def __init__(self):
        self.signum: int | None = None
        self._previous = {}

    def __enter__(self):
        for s in (signal.SIGTERM, signal.SIGINT):
            try:
                self._previous[s] = signal.signal(s, self._handle)
            except ValueError:  # not the main thread (e.g. a Ray worker): the runtime handles signals
                pass
        return self

    def _handle(self, signum, frame):
        self.signum = signum

    def __exit__(self, *exc):
        for s, handler in self._previous.items():
            signal.signal(s, handler)


def fingerprint(cfg: Config, run, seed: int) -> dict:
    """What must not change between a checkpoint and its resumption for the resume to be exact."""
    relevant = {k: v for k, v in cfg.to_dict().items() if k in ("experiment", "data", "model", "privacy", "train")}
    for k in ("eval_every", "eval_batch_size", "checkpoint_every", "physical_batch_size"):
        relevant["train"].pop(k, None)  # bookkeeping only: may change on resume
    relevant["experiment"].pop("name", None)
    return {"config": relevant, "q": run.q, "sigma": run.sigma, "delta": run.delta, "dataset_size": run.dataset_size,
            "steps": run.steps, "seed": seed}


def run_launch(cfg: Config, out: str | Path, *, resume: bool = False, progress: bool = True,
               backend: str = "local") -> dict:
    """Train cfg's plan (no proxy) into out/, checkpointing every train.checkpoint_every steps; summary."""
    import jax
    from tqdm import tqdm

    from tanplan.engine import loop as T
    from tanplan.engine import routes, setup
    from tanplan.privacy.mechanism import resolve_plan
    from tanplan.dp import optim, sampling, sharding
    from tanplan.dp import step as dp_step

    started = time.perf_counter()
    out = Path(out)
    primary = jax.process_index() == 0
    out.mkdir(parents=True, exist_ok=True)
    checkpoints = LaunchCheckpoints(out / "checkpoint")
    latest = checkpoints.latest_step()
    if latest is not None and not resume:
        checkpoints.close()
        raise UsageError(f"--out {str(out)!r} already holds a checkpoint at step {latest}: pass --resume to "
                         f"continue it, or choose a new --out")
    dataset = setup.load_data(cfg)
    n = dataset.num_train
    run = resolve_plan(cfg, n)
    model = setup.build_model(cfg, dataset.num_classes)
    augment = setup.build_augmentation(cfg, dataset)
    seed = cfg.experiment.seed
    init_key, train_key, _ = jax.random.split(jax.random.key(seed), 3)
    params = model.init(init_key, dataset.x_train[:1])["params"]
    logits_fn = lambda p, x: model.apply({"params": p}, x)  # noqa: E731
    grad_sum, method = routes.make_grad_sum(cfg, logits_fn, augment, params, dataset.x_train[:2])
    optimizer = optim.make_optimizer(cfg.train)
    inner = dp_step.make_train_step(grad_sum, optimizer,
                                    noise_std=run.sigma * cfg.privacy.clip_norm if run.private else 0.0,
                                    expected_batch_size=float(run.batch_size), ema_decay=cfg.train.ema_decay)
    train_step = jax.jit(lambda state, batch, kd: inner(state, batch, jax.random.wrap_key_data(kd)),
                         donate_argnums=0)
    eval_batch = T.make_eval_fn(logits_fn)
    mesh = sharding.data_mesh(jax.devices())
    local_mesh = sharding.data_mesh(jax.local_devices())
    ndev = mesh.devices.size

    state = dp_step.create_train_state(params, optimizer, cfg.train.ema_decay)
    ledger = Ledger(budget_epsilon=cfg.privacy.epsilon if run.private else None, delta=run.delta)
    layout = sampling.batch_layout(n, run.q, cfg.train.physical_batch_size, ndev)
    start = 0
    print_ = (lambda msg: print(msg, file=sys.stderr)) if primary and progress else (lambda msg: None)
    want = fingerprint(cfg, run, seed)
    if resume and latest is not None:
        state, meta = checkpoints.restore_latest(state)
        changed = _differences(meta["fingerprint"], want)
        if changed:
            raise UsageError(f"--resume is not allowed: the config differs from the checkpoint's in {', '.join(changed)}; "
                             f"an exact resume needs the same plan, data, model and optimizer")
        start, ledger = int(meta["step"]), Ledger.from_dict(meta["ledger"])
        layout = sampling.BatchLayout(**meta["layout"])
        if layout.chunk_size % ndev:
            layout = sampling.batch_layout(n, run.q, cfg.train.physical_batch_size, ndev).grown_to(layout.capacity)
        print_(f"tanplan: resuming from the checkpoint of step {start} ({ledger.steps} steps in the ledger)")
    elif resume:
        print_(f"tanplan: no checkpoint in {str(out)!r}: starting from step 0")
    if primary:
        write_text_atomic(out / "config.toml", config_to_toml(cfg))
        _truncate_metrics(out / "metrics.jsonl", start)
    release = ledger.open_release(start, run.q, run.sigma, run.delta, backend=backend, devices=ndev)
    state = replicate_global(state, mesh)
    train_key_data = np.asarray(jax.random.key_data(train_key))
    every = cfg.train.checkpoint_every
    delay = float(os.environ.get(_STEP_DELAY_ENV, "0") or 0)

    def save(step_done: int, last_loss: float | None) -> None:
        if last_loss is not None and not math.isfinite(last_loss):
            raise TrainingDiverged(f"training diverged: loss is {last_loss} at step {step_done}; the last good "
                                   f"checkpoint (step {checkpoints.latest_step()}) is kept")
        ledger.advance(release, step_done)
        meta = {"step": step_done, "fingerprint": want, "ledger": ledger.to_dict(),
                "layout": {"chunks": layout.chunks, "chunk_size": layout.chunk_size},
                "prng": {"seed": seed, "train_key_data": train_key_data.tolist(),
                         "step_key": "fold_in(train_key, step)"},
                "sampler": {"kind": "poisson", "rng_seed": [seed, 1, "step"], "next_step": step_done}}
        if primary:  # ledger first: killed in between, it over-reports (safe); never under-reports
            write_json_atomic(out / "ledger.json", ledger.to_dict())
        checkpoints.save(step_done, state, meta)

    history: list[dict] = []
    last: dict = {}
    examples = 0
    clock = None
    interrupted = None
    bar = tqdm(total=run.steps, initial=start, file=sys.stderr, disable=not (progress and primary), unit="step",
               dynamic_ncols=True, desc=f"{cfg.experiment.name} B={run.batch_size} σ={run.sigma:.3g} ×{ndev}")
    try:
        with _Signals() as signals:
            for t in range(start, run.steps):
                indices = poisson_indices(n, run.q, seed, t)
                if len(indices) > layout.capacity:
                    layout = layout.grown_to(len(indices))
                index, mask = sampling.pad_indices(indices, layout)
                batch = global_batch(dataset.x_train, dataset.y_train, index, mask, mesh)
                key_data = replicate_global(np.asarray(jax.random.key_data(jax.random.fold_in(train_key, t))), mesh)
                state, metrics = train_step(state, batch, key_data)
                done = t + 1
                if clock is None:
                    jax.block_until_ready(metrics)
                    clock = time.perf_counter()  # throughput from here: compilation excluded
                else:
                    examples += len(indices)
                is_eval = done % cfg.train.eval_every == 0 or done == run.steps
                is_ckpt = (every and done % every == 0) or done == run.steps or signals.signum is not None
                if is_eval or is_ckpt:
                    last = {k: float(host_array(v)) for k, v in metrics.items()}
                if is_eval and math.isfinite(last["loss"]):
                    record = _evaluate(cfg, done, state, last, eval_batch, dataset, local_mesh, ledger, release)
                    history.append(record)
                    if primary:
                        with open(out / "metrics.jsonl", "a", encoding="utf-8") as f:
                            f.write(json.dumps(record) + "\n")
                    bar.set_postfix(loss=f"{last['loss']:.3f}", test=f"{record['test_accuracy']:.3f}", refresh=False)
                if is_ckpt:
                    save(done, last.get("loss"))
                bar.update(1)
                if signals.signum is not None:
                    interrupted = signal.Signals(signals.signum).name
                    break
                if delay:
                    time.sleep(delay)
    finally:
        bar.close()
        checkpoints.close()
    if not history and not interrupted:  # resumed at the last step: nothing trained, evaluate what was saved
        history.append(_evaluate(cfg, ledger.steps, state, {}, eval_batch, dataset, local_mesh, ledger, release))
    train_seconds = time.perf_counter() - clock if clock is not None else 0.0
    summary = _summary(cfg, run, method, history, state, ledger, start, examples, train_seconds, started,
                       layout, backend, interrupted)
    if primary:
        write_json_atomic(out / "ledger.json", ledger.to_dict(with_pld=True))
        write_json_atomic(out / "summary.json", summary)
    if interrupted:
        raise LaunchInterrupted(f"{interrupted}: stopped after step {ledger.steps} of {run.steps}; checkpoint saved in "
                                f"{str(out / 'checkpoint')!r}; continue with --resume", getattr(signal, interrupted))
    return summary


def _differences(saved: dict, wanted: dict, prefix: str = "") -> list[str]:
    keys = sorted(set(saved) | set(wanted))
    diffs = []
    for k in keys:
        a, b = saved.get(k), wanted.get(k)
        if isinstance(a, dict) and isinstance(b, dict):
            diffs += _differences(a, b, f"{prefix}{k}.")
        elif a != b and not (isinstance(a, float) and isinstance(b, float) and math.isclose(a, b, rel_tol=1e-12)):
            diffs.append(f"{prefix}{k} ({a!r} -> {b!r})")
    return diffs


def _truncate_metrics(path: Path, start: int) -> None:
    """metrics.jsonl keeps the evaluations up to the resumed step; later ones are redone."""
    if not path.exists():
        return
    keep = [line for line in path.read_text(encoding="utf-8").splitlines()
            if line.strip() and json.loads(line)["step"] <= start]
    write_text_atomic(path, "".join(line + "\n" for line in keep))


def _evaluate(cfg, step, state, last, eval_batch, dataset, local_mesh, ledger, release) -> dict:
    import jax

    from tanplan.engine import loop as T
    from tanplan.dp import sharding

    use = state.ema_params if state.ema_params is not None else state.params
    params = sharding.replicate(jax.tree.map(host_array, use), local_mesh)
    metrics = T.evaluate(eval_batch, params, dataset.x_test, dataset.y_test, cfg.train.eval_batch_size, local_mesh)
    # ε of every step taken so far (checkpointed or not): what releasing these parameters would cost.
    probe = Ledger(ledger.releases[:-1] + [type(release)(**{**release.__dict__, "last_step": step})],
                   ledger.budget_epsilon, ledger.delta)
    return {"step": step, "loss": last.get("loss"), "train_accuracy": last.get("accuracy"), **metrics,
            "epsilon_spent": probe.epsilon("rdp")}


def _summary(cfg, run, method, history, state, ledger, start, examples, train_seconds, started, layout,
             backend, interrupted) -> dict:
    import jax

    from tanplan.engine.loop import params_checksum

    final = history[-1] if history else {}
    return {
        "test_accuracy": final.get("test_accuracy"),
        "test_loss": final.get("test_loss"),
        "epsilon_rdp": ledger.epsilon("rdp"),
        "epsilon_pld": ledger.epsilon("pld"),
        "delta": run.delta,
        "steps": ledger.steps,
        "planned_steps": run.steps,
        "resumed_from_step": start,
        "steps_this_run": ledger.steps - start,
        "batch_size": run.batch_size,
        "sigma": run.sigma,
        "clip_norm": cfg.privacy.clip_norm,
        "private": run.private,
        "dataset_size": run.dataset_size,
        "grad_method": method,
        "layout": {"chunks": layout.chunks, "chunk_size": layout.chunk_size},
        "backend": backend,
        "devices": jax.device_count(),
        "processes": jax.process_count(),
        "wall_seconds": time.perf_counter() - started,
        "train_seconds": train_seconds,
        "samples_per_second": examples / train_seconds if train_seconds > 0 and examples else None,
        "params_checksum": params_checksum(jax.tree.map(host_array, state.params)),
        "evaluated_at_step": final.get("step"),
        "interrupted": interrupted,
    }
