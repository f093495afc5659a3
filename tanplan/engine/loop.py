"""One DP-SGD training run from a Config: plan, data, model, the jitted step, evaluation, files.

    summary = train_and_evaluate(cfg, Path("runs/x"))

The privacy plan comes from tanplan.privacy.plan (σ given, or calibrated from the target ε; the proxy
B' with σ·B'/B when train.proxy_batch_size > 0). Batches are Poisson samples at q = B/N, padded to a
fixed layout (tanplan.dp.sampling); the step (tanplan.dp.step) clips each example's gradient to C,
adds N(0, σ²C²) once to the global sum and divides by B; all local devices share the batch
(tanplan.dp.sharding). The ε reported is that of the steps actually taken, from the exact accountant.
Training loss and accuracy shown while training are NOT private (diagnostics for the data owner);
test metrics are computed on the held-out test set.

Files in workdir: config.toml, metrics.jsonl (one line per evaluation), summary.json, checkpoint/
(orbax, the state at the last evaluation; on a non-finite loss the last good one is kept).
"""

from __future__ import annotations

import hashlib
import json
import math
import shutil
import sys
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np

from tanplan.config import Config, config_to_toml
from tanplan.errors import TrainingDiverged, UsageError
from tanplan.engine import routes, setup
from tanplan.privacy.mechanism import resolve_plan
from tanplan.fileio import write_json_atomic, write_text_atomic


# ----------------------------------------------------------------------------------------------------
# Pieces a reader (or a test) can use on their own


def params_checksum(params) -> str:
    """sha256 over every parameter's path, dtype, shape and bytes: equal checksums, equal weights."""
    import jax

    digest = hashlib.sha256()
    for path, leaf in jax.tree_util.tree_flatten_with_path(params)[0]:
        arr = np.asarray(leaf)
        digest.update(jax.tree_util.keystr(path).encode())
        digest.update(f"{arr.dtype}{arr.shape}".encode())
        digest.update(np.ascontiguousarray(arr).tobytes())
    return digest.hexdigest()[:16]


def make_eval_fn(logits_fn):
    """(params, x, y, mask) -> (loss sum, correct count) over the real rows of one test batch."""
    import jax
    import jax.numpy as jnp

    from tanplan.dp.augmult import cross_entropy

    @jax.jit
    def eval_batch(params, x, y, mask):
        logits = logits_fn(params, x)
        m = mask.astype(jnp.float32)
        return jnp.sum(cross_entropy(logits, y) * m), jnp.sum((jnp.argmax(logits, -1) == y) * m)

    return eval_batch


def evaluate(eval_batch, params, x, y, batch_size: int, mesh) -> dict[str, float]:
    """Test loss and accuracy over the whole test set, in padded batches sharded over the mesh."""
    from tanplan.dp import sampling, sharding

    ndev = mesh.devices.size
    batch_size = -(-batch_size // ndev) * ndev
    loss, correct = 0.0, 0.0
    for start in range(0, len(x), batch_size):
        idx = np.arange(start, min(start + batch_size, len(x)))
        index, mask = sampling.pad_indices(idx, sampling.BatchLayout(1, batch_size))
        b = sharding.shard_batch(sampling.gather_batch(x, y, index, mask), mesh)
        ls, c = eval_batch(params, b["x"][0], b["y"][0], b["mask"][0])
        loss, correct = loss + float(ls), correct + float(c)
    return {"test_loss": loss / len(x), "test_accuracy": correct / len(x)}


def evaluate_augtest(cfg, logits_fn, params, dataset, augment, key) -> float | None:
    """Test accuracy by majority vote over K augmentations (AugTest), when the config asks for it."""
    if not cfg.data.aug_test or augment is None:
        return None
    import functools

    import jax

    from tanplan.data import augtest_predict

    predict = jax.jit(functools.partial(augtest_predict, logits_fn, k=cfg.data.aug_mult, augment=augment))
    size = cfg.train.eval_batch_size
    correct = 0
    for i, start in enumerate(range(0, dataset.num_test, size)):
        x = dataset.x_test[start:start + size]
        preds = np.asarray(predict(params, x, jax.random.fold_in(key, i)))
        correct += int(np.sum(preds == dataset.y_test[start:start + size]))
    return correct / dataset.num_test


class _Checkpoints:
    """Orbax checkpoint of the train state under workdir/checkpoint, the latest one kept."""

    def __init__(self, directory: Path):
        import orbax.checkpoint as ocp

        self._ocp = ocp
        self.manager = ocp.CheckpointManager(
            directory.absolute(), options=ocp.CheckpointManagerOptions(max_to_keep=1, create=True,
                                                                        enable_async_checkpointing=False))

    def save(self, step: int, state) -> None:
        import jax

        tree = {"step": state.step, "params": state.params, "opt_state": state.opt_state}
        if state.ema_params is not None:
            tree["ema_params"] = state.ema_params
        tree = jax.tree.map(np.asarray, tree)
        self.manager.save(step, args=self._ocp.args.StandardSave(tree), force=True)
        self.manager.wait_until_finished()

    def close(self) -> None:
        self.manager.close()


def restore_checkpoint(directory: str | Path) -> dict:
    """The latest checkpoint under workdir/checkpoint as a dict of numpy trees (step, params, ...)."""
    import orbax.checkpoint as ocp

    with ocp.CheckpointManager(Path(directory).absolute()) as manager:
        step = manager.latest_step()
        if step is None:
            raise UsageError(f"no checkpoint in {str(directory)!r}")
        return manager.restore(step, args=ocp.args.StandardRestore())


# ----------------------------------------------------------------------------------------------------
# The run


def train_and_evaluate(cfg: Config, workdir: Path | None = None, *, progress: bool = True,
                       on_eval: Callable[[int, dict], None] | None = None) -> dict:
    """Train cfg, evaluate every train.eval_every steps and at the end; return the summary dict.

    Raises UsageError on bad input (before any compute) and TrainingDiverged on a non-finite loss
    (after writing the summary; the last good checkpoint is kept).
    """
    import jax
    from tqdm import tqdm

    from tanplan.dp import optim, sampling, sharding
    from tanplan.dp import step as dp_step

    started = time.perf_counter()
    workdir = Path(workdir) if workdir is not None else None
    dataset = setup.load_data(cfg)
    x_train, y_train = dataset.x_train, dataset.y_train
    n = dataset.num_train
    run = resolve_plan(cfg, n)
    model = setup.build_model(cfg, dataset.num_classes)
    augment = setup.build_augmentation(cfg, dataset)
    if workdir is not None:
        workdir.mkdir(parents=True, exist_ok=True)
        write_text_atomic(workdir / "config.toml", config_to_toml(cfg))
        (workdir / "metrics.jsonl").unlink(missing_ok=True)
        shutil.rmtree(workdir / "checkpoint", ignore_errors=True)  # a run into the same folder replaces it

    seed = cfg.experiment.seed
    init_key, train_key, test_key = jax.random.split(jax.random.key(seed), 3)
    params = model.init(init_key, x_train[:1])["params"]
    logits_fn = lambda p, x: model.apply({"params": p}, x)  # noqa: E731
    grad_sum, method = routes.make_grad_sum(cfg, logits_fn, augment, params, x_train[:2])
    optimizer = optim.make_optimizer(cfg.train)
    noise_std = run.sigma * cfg.privacy.clip_norm if run.private else 0.0
    train_step = jax.jit(dp_step.make_train_step(grad_sum, optimizer, noise_std=noise_std,
                                                 expected_batch_size=float(run.batch_size),
                                                 ema_decay=cfg.train.ema_decay), donate_argnums=0)
    sparse = {}
    from tanplan.engine import sparsity as sparse_train

    if sparse_train.enabled(cfg):  # pre-pruning / gradient dropping: the masked step of tanplan.dp.grad_drop
        params, train_step, method, sparse = sparse_train.setup(cfg, run, logits_fn, augment, params, x_train,
                                                                y_train, optimizer, jax.random.fold_in(init_key, 1))
    eval_batch = make_eval_fn(logits_fn)

    mesh = sharding.data_mesh()
    layout = sampling.batch_layout(n, run.q, cfg.train.physical_batch_size, mesh.devices.size)
    state = sharding.replicate(dp_step.create_train_state(params, optimizer, cfg.train.ema_decay), mesh)
    checkpoints = _Checkpoints(workdir / "checkpoint") if workdir is not None else None

    if method in ("vmap", "plain") and layout.chunks > 1 and jax.default_backend() == "cpu":
        print(f"tanplan: note: the {method} gradient route accumulates {layout.chunks} chunks; on CPU, XLA runs "
              "convolution weight-gradients inside loops very slowly: raise train.physical_batch_size to "
              f"{layout.capacity} for one chunk per step", file=sys.stderr)
    history: list[dict] = []
    examples_timed = 0
    train_seconds = eval_seconds = 0.0
    clock = time.perf_counter()
    last: dict[str, Any] = {}
    bar = tqdm(total=run.steps, file=sys.stderr, disable=not progress, unit="step", dynamic_ncols=True,
               desc=f"{cfg.experiment.name} B={run.batch_size} σ={run.sigma:.3g}")
    eps_now, eps_clock = None, time.perf_counter()
    pending = None  # metrics of the step in flight: read one step late so the host keeps the device busy

    def settle(pending_metrics, step_number):
        values = {k: float(v) for k, v in jax.device_get(pending_metrics).items()}
        if not math.isfinite(values["loss"]):
            raise _NonFinite(step_number, values["loss"])
        return values

    try:
        try:
            batches = sampling.poisson_batches(n, run.q, run.steps, seed=[seed, 1])
            for t, indices in enumerate(batches):
                if len(indices) > layout.capacity:
                    layout = layout.grown_to(len(indices))
                    bar.write(f"tanplan: step {t + 1}: Poisson batch of {len(indices)} exceeds the padded layout; "
                              f"growing it to {layout.chunks} chunks (one more compilation)")
                index, mask = sampling.pad_indices(indices, layout)
                batch = sharding.shard_batch(sampling.gather_batch(x_train, y_train, index, mask), mesh)
                state, metrics = train_step(state, batch, jax.random.fold_in(train_key, t))
                if pending is not None:
                    last = settle(*pending)
                pending = (metrics, t + 1)
                is_eval = (t + 1) % cfg.train.eval_every == 0 or t + 1 == run.steps
                if t == 0 or is_eval:
                    last = settle(*pending)  # compile time and eval points: wait for the step
                    pending = None
                if t == 0:
                    clock = time.perf_counter()  # throughput counts from here: compilation excluded
                else:
                    examples_timed += len(indices)
                if is_eval:
                    eval_start = time.perf_counter()
                    record = _evaluate_point(cfg, run, t + 1, state, last, eval_batch, dataset, mesh)
                    history.append(record)
                    if workdir is not None:
                        with open(workdir / "metrics.jsonl", "a", encoding="utf-8") as f:
                            f.write(json.dumps(record) + "\n")
                        checkpoints.save(t + 1, state)
                    if on_eval is not None:
                        on_eval(t + 1, record)
                    eval_seconds += time.perf_counter() - eval_start if t > 0 else 0.0
                if is_eval:
                    eps_now, eps_clock = history[-1]["epsilon_spent"], time.perf_counter()
                elif progress and time.perf_counter() - eps_clock > 2.0:  # ε of the steps so far, every 2 s
                    eps_now, eps_clock = run.epsilon("rdp", t + 1), time.perf_counter()
                if last:
                    bar.set_postfix(_postfix(last, history, eps_now, run.private), refresh=False)
                bar.update(1)
            if pending is not None:
                last = settle(*pending)
            train_seconds = time.perf_counter() - clock - eval_seconds
        except _NonFinite as err:
            train_seconds = time.perf_counter() - clock - eval_seconds
            summary = _summary(cfg, run, method, history, state, examples_timed, train_seconds, started,
                               layout, diverged_at=err.step)
            if workdir is not None:
                write_json_atomic(workdir / "summary.json", summary)
            kept = f"; last good checkpoint kept at step {history[-1]['step']}" if history and workdir else ""
            raise TrainingDiverged(f"training diverged: loss is {err.loss} at step {err.step} (learning rate "
                                   f"{cfg.train.learning_rate:g} may be too high){kept}") from None
    finally:
        bar.close()
        if checkpoints is not None:
            checkpoints.close()

    summary = _summary(cfg, run, method, history, state, examples_timed, train_seconds, started, layout)
    summary.update(sparse)
    augtest = evaluate_augtest(cfg, logits_fn, _eval_params(state), dataset, augment, test_key)
    if augtest is not None:
        summary["test_accuracy_augtest"] = augtest
    if workdir is not None:
        write_json_atomic(workdir / "summary.json", summary)
    return summary


class _NonFinite(Exception):
    def __init__(self, step: int, loss: float):
        super().__init__(step, loss)
        self.step, self.loss = step, loss


def _eval_params(state):
    return state.ema_params if state.ema_params is not None else state.params


def _evaluate_point(cfg, run, step, state, last, eval_batch, dataset, mesh) -> dict:
    metrics = evaluate(eval_batch, _eval_params(state), dataset.x_test, dataset.y_test,
                       cfg.train.eval_batch_size, mesh)
    record = {"step": step, "loss": last.get("loss"), "train_accuracy": last.get("accuracy"), **metrics,
              "epsilon_spent": run.epsilon("rdp", step)}
    if state.ema_params is not None:
        raw = evaluate(eval_batch, state.params, dataset.x_test, dataset.y_test, cfg.train.eval_batch_size, mesh)
        record["test_accuracy_no_ema"] = raw["test_accuracy"]
    return record


def _postfix(last: dict, history: list[dict], eps_now: float | None, private: bool) -> dict:
    out = {"loss": f"{last['loss']:.3f}", "acc": f"{last['accuracy']:.3f}"}
    if history:
        out["test"] = f"{history[-1]['test_accuracy']:.3f}"
    out["ε"] = "∞" if not private else ("-" if eps_now is None else f"{eps_now:.2f}")
    return out


def _summary(cfg, run, method, history, state, examples_timed, train_seconds, started, layout,
             diverged_at: int | None = None) -> dict:
    steps_done = history[-1]["step"] if history else 0
    final = history[-1] if history else {}
    steps = diverged_at - 1 if diverged_at else run.steps
    summary = {
        "test_accuracy": final.get("test_accuracy"),
        "test_loss": final.get("test_loss"),
        "epsilon_rdp": run.epsilon("rdp", steps),
        # A proxy's own ε is no guarantee for the target, and PLD at its tiny σ takes minutes: RDP only.
        "epsilon_pld": run.epsilon("pld", steps) if run.target is None else None,
        "delta": run.delta,
        "steps": steps,
        "batch_size": run.batch_size,
        "sigma": run.sigma,
        "clip_norm": cfg.privacy.clip_norm,
        "private": run.private,
        "dataset_size": run.dataset_size,
        "target": run.target.to_dict() if run.target is not None else None,
        "grad_method": method,
        "layout": {"chunks": layout.chunks, "chunk_size": layout.chunk_size},
        "wall_seconds": time.perf_counter() - started,
        "train_seconds": train_seconds,
        "samples_per_second": examples_timed / train_seconds if train_seconds > 0 else None,
        "params_checksum": params_checksum(state.params),
        "evaluated_at_step": steps_done,
        "diverged_at_step": diverged_at,
    }
    if final.get("test_accuracy_no_ema") is not None:
        summary["test_accuracy_no_ema"] = final["test_accuracy_no_ema"]
    return summary
