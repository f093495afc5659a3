"""The timing attack of tests/engine/test_step_cost.py on a heavier model, against the step of this version
and against the skipping step of earlier versions (chunks holding only padding skipped by lax.cond).

A run with eval_every = 1; its secret replayed (the attacker's best case) to get each step's sampled batch
size; for each public per-step figure of metrics.jsonl (the step's training time from steps_per_second, the
wall_time delta), the AUC of telling the steps whose batch is above the median size from those below
(0.5 = chance) and Spearman's rank correlation with the size.

    PYTHONPATH=. python experiments/step_timing_attack.py [--steps 200] [--width 256] [--rows 8]

Measured on the 2-core development machine (shared with other jobs), the defaults (200 steps, MLP
16→256→256→2, vmap route, N = 2000, B = 32, layout 9 × 8):

| step | median step | AUC (step time) | Spearman | AUC (wall_time delta) | Spearman |
| --- | --- | --- | --- | --- | --- |
| this version's (every chunk) | 71.7 ms | 0.454 | −0.087 | 0.502 | 0.027 |
| earlier versions' (padding chunks skipped) | 33.6 ms | 0.815 | 0.546 | 0.808 | 0.533 |

With `--width 16 --steps 80` (the test's tiny model: ~2 ms a step) the skipping step's AUC was 0.43: the
saved chunks are lost in the timing noise there, which is why the test also checks the compiled step for
branches.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "engine"))


def skipping_accumulate(grad_sum, params, batch, keys):
    """The accumulation of earlier versions: chunks holding only padding skipped by lax.cond."""
    import jax
    import jax.numpy as jnp

    chunks = (batch["x"], batch["y"], keys, batch["mask"])

    def one(chunk):
        x, y, k, mask = chunk
        grads, losses, acc = grad_sum(params, x, y, k, mask)
        m = mask.astype(jnp.float32)
        return grads, jnp.sum(losses * m), jnp.sum(acc * m), jnp.sum(m)

    zeros = jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), jax.eval_shape(one, jax.tree.map(lambda a: a[0], chunks)))

    def body(total, chunk):
        return jax.tree.map(jnp.add, total, jax.lax.cond(jnp.any(chunk[3]), one, lambda _: zeros, chunk)), None

    return jax.lax.scan(body, zeros, chunks)[0]


def attack(path: Path, out: Path, args, skipping: bool) -> dict:
    from scipy.stats import spearmanr
    from test_step_cost import B, N, auc, per_step_figures

    from tanplan.config import load_config
    from tanplan.dp import sampling
    from tanplan.dp import step as dp_step
    from tanplan.dp.secret import BATCH, RunSecret
    from tanplan.engine.loop import train_and_evaluate
    from tanplan.job import RunJob

    current = dp_step.accumulate
    dp_step.accumulate = skipping_accumulate if skipping else current
    try:
        cfg = load_config(None, ["data.dataset=npz", f'data.path="{path}"', "model.name=mlp",
                                 f"model.width={args.width}", "model.depth=2", f"train.batch_size={B}",
                                 f"train.physical_batch_size={args.rows}", "train.learning_rate=1.0",
                                 "privacy.epsilon=4", "privacy.accountant=rdp", f"train.steps={args.steps}",
                                 "train.eval_every=1", "train.checkpoint_every=0", "train.grad_method=vmap"])
        summary = train_and_evaluate(RunJob.of(cfg), out, progress=False)
    finally:
        dp_step.accumulate = current
    secret = RunSecret.load(out / "checkpoint")
    sizes = np.array([len(sampling.poisson_batch(N, B / N, secret.batch_rng(BATCH, t))) for t in range(args.steps)])
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    result = {"layout": summary["layout"], "median step ms": None}
    for name, values in per_step_figures(records).items():
        if name.startswith("epsilon"):
            continue
        steps = np.array(sorted(values))
        v, s = np.array([values[k] for k in steps]), sizes[steps - 1]
        result[name] = {"auc": round(auc(v, s), 3), "spearman": round(float(spearmanr(v, s)[0]), 3)}
        if name.startswith("step training"):
            result["median step ms"] = round(1000 * float(np.median(v)), 1)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--width", type=int, default=256)
    parser.add_argument("--rows", type=int, default=8, help="train.physical_batch_size (rows per chunk)")
    args = parser.parse_args()
    from test_step_cost import N

    rng = np.random.default_rng(0)
    y = rng.integers(0, 2, N + 40).astype(np.int32)
    x = (rng.normal(size=(N + 40, 16, 1)) + (2 * y - 1)[:, None, None] * 0.8).astype(np.float32)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "signals.npz"
        np.savez(path, x_train=x[:N], y_train=y[:N], x_test=x[N:], y_test=y[N:])
        for skipping in (False, True):
            label = "skipping step (earlier versions)" if skipping else "this version's step"
            print(label, json.dumps(attack(path, Path(tmp) / f"run{int(skipping)}", args, skipping)), flush=True)


if __name__ == "__main__":
    main()
