"""A step costs the same whatever its secret Poisson draw held, so no public per-step figure tells the
sampled batch size (issue 28, item 2).

Earlier versions skipped the accumulation chunks that held only padding (lax.cond on the mask): a step's
time grew with the number of examples drawn (layout 3×128: 41.8 ms with 256 real rows, 64.1 ms with 257),
and steps_per_second in metrics.jsonl and TensorBoard (eval_every = 1) told for 73% of steps whether the
batch exceeded 256 rows. Two tests:

- the compiled step of every route (ghost, vmap, plain, masked, audit with canaries) holds no branch
  (cond, while, switch) at all, so nothing it computes can be skipped by the data; the skipping
  accumulation of earlier versions fails this check;
- the attack: a run with eval_every = 1 on a layout of several chunks, its secret replayed to get each
  step's sampled size; for every public per-step figure of metrics.jsonl that is not a function of the
  released parameters (the training time of each step, from steps_per_second; the wall_time deltas; the ε
  spent), the AUC of its per-step value for the steps whose batch is above the median size against those
  below. Chance is 0.5; the batch sizes are drawn independently of everything else, so under a constant
  cost the AUC's null distribution is exact whatever the machine's load (standard deviation ≈ 0.065 for
  ~40 + 40 steps): the bound |AUC − 0.5| < 0.3 is 4.6 standard deviations, and cannot flake on a loaded
  machine. test_loss and test_accuracy are functions of the released noisy parameters: what they tell
  about the batches is what the run's (ε, δ) bounds, not a side channel.

On this tiny model a step takes ~2 ms and a skipped chunk saves too little to stand out of the machine's
timing noise, so the branch check is what catches the skipping step of earlier versions, deterministically.
The statistic catches it too where chunks cost more: experiments/step_timing_attack.py runs the same
attack for 200 steps on a 16→256→256→2 MLP (9 × 8 layout, ~70 ms a step) and measured AUC 0.815 (Spearman
0.55) for the skipping step against 0.454 (−0.09) for this version's.
"""

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tanplan.config import load_config
from tanplan.dp import sampling
from tanplan.dp import step as dp_step
from tanplan.dp.secret import BATCH, RunSecret
from tanplan.engine import setup
from tanplan.engine.loop import train_and_evaluate
from tanplan.job import job_of
from tanplan.workflow.audit import canary_hooks

N, B, S, ROWS = 2000, 32, 80, 8
BRANCHES = {"cond", "while", "switch"}


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    """N two-class 16-long signals (q = B/N = 0.016: the RDP accountant's 80 evaluations stay cheap; σ given,
    not calibrated from a budget, which costs more than the rest of a test)."""
    rng = np.random.default_rng(0)
    y = rng.integers(0, 2, N + 40).astype(np.int32)
    x = (rng.normal(size=(N + 40, 16, 1)) + (2 * y - 1)[:, None, None] * 0.8).astype(np.float32)
    path = tmp_path_factory.mktemp("data") / "signals.npz"
    np.savez(path, x_train=x[:N], y_train=y[:N], x_test=x[N:], y_test=y[N:])
    return path, x[:N], y[:N]


def _cfg(path, *extra):
    return load_config(None, ["data.dataset=npz", f'data.path="{path}"', "model.name=mlp", "model.width=16",
                              "model.depth=1", f"train.batch_size={B}", f"train.physical_batch_size={ROWS}",
                              "train.learning_rate=1.0", "privacy.sigma=1.0", "privacy.accountant=rdp", *extra])


def _primitives(jaxpr) -> set[str]:
    """Every primitive of a jaxpr, those of its sub-jaxprs (scan bodies, ...) included."""
    found = set()
    for eqn in jaxpr.eqns:
        found.add(eqn.primitive.name)
        for value in eqn.params.values():
            for sub in value if isinstance(value, (list, tuple)) else [value]:
                if isinstance(sub, jax.extend.core.ClosedJaxpr):
                    found |= _primitives(sub.jaxpr)
                elif isinstance(sub, jax.extend.core.Jaxpr):
                    found |= _primitives(sub)
    return found


def _step_primitives(cfg, x, y, canaries: int = 0) -> set[str]:
    wrap = canary_hooks(canaries, "gradient", lambda record: None).wrap if canaries else None  # the audit's
    run = setup.build(job_of(cfg), RunSecret.fresh(), wrap=wrap)
    layout = sampling.batch_layout(N, run.plan.q, ROWS)
    assert layout.chunks > 1  # several accumulation chunks: there is something to skip
    index, mask = sampling.pad_indices(np.arange(B), layout)
    batch = sampling.gather_batch(x, y, index, mask)
    state = dp_step.create_train_state(run.params, run.optimizer)
    args = (state, batch, run.roots)
    if canaries:
        args += ({"args": {"chosen": np.ones(canaries, bool)}, "rows": {"shadow": batch}},)
    return _primitives(jax.make_jaxpr(run.step)(*args).jaxpr)


ROUTES = {"ghost": ["train.grad_method=ghost"], "vmap": ["train.grad_method=vmap"],
          "plain": ["privacy.private=false", "train.grad_method=vmap"],
          "masked": ["pruning.method=random", "pruning.rate=0.5", "pruning.drop_method=random", "pruning.drop_rate=0.3"]}


def _skipping_accumulate(grad_sum, params, batch, keys):
    """The accumulation of earlier versions: chunks holding only padding skipped by lax.cond."""
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


def test_no_route_branches_on_the_batch(data, monkeypatch):
    path, x, y = data
    augmented = ["data.augmentation=noise", "data.aug_mult=2"]
    for name, extra in ROUTES.items():
        found = _step_primitives(_cfg(path, *augmented, *extra), x, y)
        assert "scan" in found and not found & BRANCHES, (name, found & BRANCHES)
    audited = _step_primitives(_cfg(path, *augmented, "train.grad_method=vmap"), x, y, canaries=3)
    assert not audited & BRANCHES, audited & BRANCHES  # the audit's step, shadow batch included
    # The check catches the skipping accumulation of earlier versions.
    monkeypatch.setattr(dp_step, "accumulate", _skipping_accumulate)
    assert "cond" in _step_primitives(_cfg(path, "train.grad_method=vmap"), x, y)


def auc(values: np.ndarray, sizes: np.ndarray) -> float:
    """P(a step above the median size shows a larger value than one below it) (ties count 1/2): the
    Mann-Whitney AUC of telling the larger batches from the smaller ones by `values`."""
    median = np.median(sizes)
    high, low = values[sizes > median], values[sizes < median]
    wins = (high[:, None] > low[None]).sum() + 0.5 * (high[:, None] == low[None]).sum()
    return float(wins / (len(high) * len(low)))


def per_step_figures(records: list[dict]) -> dict[str, dict[int, float]]:
    """{figure: {step: value}} of each step's share of every published per-step figure that is not a function
    of the released parameters: the step's training time (steps_per_second is (step − 1) steps over the
    training seconds since step 1, evaluations excluded), the wall_time and ε spent deltas."""
    by_step = {r["step"]: r for r in records}
    train = {k: (k - 1) / r["steps_per_second"] for k, r in by_step.items() if r.get("steps_per_second")}
    figures = {"step training time (steps_per_second)": {k: train[k] - train[k - 1] for k in train if k - 1 in train}}
    for name in ("wall_time", "epsilon_spent"):
        figures[f"{name} delta"] = {k: r[name] - by_step[k - 1][name] for k, r in by_step.items() if k - 1 in by_step}
    return figures


def test_no_public_per_step_figure_tells_the_sampled_batch_size(data, tmp_path):
    path, _, _ = data
    cfg = _cfg(path, f"train.steps={S}", "train.eval_every=1", "train.checkpoint_every=0")
    out = tmp_path / "run"
    summary = train_and_evaluate(job_of(cfg), out, progress=False)
    assert summary.layout.chunks > 1  # the chunks an earlier version could skip
    secret = RunSecret.load(out / "checkpoint")  # the attacker holds the secret: replays every draw
    sizes = np.array([len(sampling.poisson_batch(N, B / N, secret.batch_rng(BATCH, t))) for t in range(S)])
    rows = summary.layout.chunk_size
    assert len(set(np.ceil(sizes / rows))) > 2  # the draws fill different numbers of chunks
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == list(range(1, S + 1))
    measured = {}
    for name, values in per_step_figures(records).items():
        steps = np.array(sorted(values))
        measured[name] = auc(np.array([values[k] for k in steps]), sizes[steps - 1])  # record k: step index k-1
    print("AUC, batch above the median size against below:", {k: round(v, 3) for k, v in measured.items()})
    assert len(measured) == 3 and all(abs(v - 0.5) < 0.3 for v in measured.values()), measured
