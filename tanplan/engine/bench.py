"""Benchmark of the DP-SGD step against the fastest non-private step of the same model and batch, in one
process.

Each is the full jitted training step (gradients, noise for DP, SGD update) on one chunk of B real rows.
The non-private step is timed on every route tanplan has for the model ("plain": jax.grad of the summed
loss; "ghost": the per-layer passes without clipping, where the model's structure allows them), and the
DP step is divided by the FASTEST: a ratio against a slow baseline would flatter. Repeats alternate the
steps, after warm-up, so that a machine whose load drifts (shared CPUs) affects all alike; the figures
are medians. Absolute times depend on the machine and its load: compare ratios measured in one run.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import asdict, dataclass

import jax
import jax.numpy as jnp
import numpy as np

from tanplan.config import Config, ModelConfig, PrivacyConfig, TrainConfig
from tanplan.dp import clipping, ghost, optim
from tanplan.dp import step as dp_step
from tanplan.engine.routes import make_grad_sum
from tanplan.job import RunJob
from tanplan.models import count_params, create_model

DEFAULT_MODELS = ("cnn1d", "wrn16_4")
# Sized for a CPU (a step of each in seconds; nf_resnet at 256 exhausts 24 GiB there): the ratio, not the batch, is
# what the bench compares, and an accelerator is timed at its own batch (--batch-size, experiments/gpu_check.py).
DEFAULT_BATCH = {"cnn1d": 256, "wrn16_4": 64, "vit_tiny": 64, "nf_resnet": 8}
ONE_D_MODELS = ("mlp", "cnn1d")  # models that read mnist1d signals; the others read 32x32x3 images


def batch_of(model: str, batch_size: int | None = None) -> int:
    """The rows a bench step of `model` takes: batch_size when given, else its CPU-sized default (256)."""
    return batch_size or DEFAULT_BATCH.get(model, 256)


@dataclass(frozen=True)
class BenchResult:
    model: str
    batch_size: int
    input_shape: tuple[int, ...]
    num_params: int
    route: str  # how the DP step clips: "ghost" (per-layer norms) or "vmap" (jax-privacy)
    dp_seconds: float
    nonprivate_seconds: float  # the fastest non-private route's
    nonprivate_route: str  # which route that was
    nonprivate_routes: dict  # {route: median seconds} for every non-private route timed
    ratio: float  # dp / fastest non-private
    dp_samples_per_second: float
    nonprivate_samples_per_second: float
    compile_seconds: float
    repeats: int

    def to_dict(self) -> dict:
        return asdict(self)


def input_shape(model: str) -> tuple[int, ...]:
    return (40, 1) if model in ONE_D_MODELS else (32, 32, 3)


def bench_model(model: str, batch_size: int | None = None, *, repeats: int = 5, warmup: int = 2,
                grad_method: str = "auto", width: int = 0, depth: int = 0) -> BenchResult:
    """Median step time of DP-SGD (σ = 1, C = 1) and of non-private SGD for `model` at batch_size."""
    batch_size = batch_of(model, batch_size)
    shape = input_shape(model)
    net = create_model(model, 10, width=width, depth=depth)
    rng = np.random.default_rng(0)
    x = rng.normal(size=(1, batch_size) + shape).astype(np.float32)
    batch = {"x": jnp.asarray(x), "y": jnp.asarray(rng.integers(0, 10, (1, batch_size)).astype(np.int32)),
             "mask": jnp.ones((1, batch_size), bool), "index": jnp.arange(batch_size, dtype=jnp.int32)[None]}
    params = net.init(jax.random.key(0), x[0, :1])["params"]
    logits_fn = lambda p, xb: net.apply({"params": p}, xb)  # noqa: E731

    train = TrainConfig(batch_size=batch_size, learning_rate=0.1, grad_method=grad_method)
    optimizer = optim.make_optimizer(train)
    dp_cfg = Config(model=ModelConfig(name=model, width=width, depth=depth), privacy=PrivacyConfig(sigma=1.0),
                    train=train)
    dp_sum, route = make_grad_sum(RunJob.of(dp_cfg), logits_fn, None, params, x[0], rows=batch_size)  # auto: by cost at B
    steps = {"dp": jax.jit(dp_step.make_train_step(dp_sum, optimizer, noise_std=1.0, expected_batch_size=batch_size))}
    for name, plain_sum in nonprivate_routes(logits_fn, params, x[0]).items():
        steps[name] = jax.jit(dp_step.make_train_step(plain_sum, optimizer, noise_std=0.0,
                                                      expected_batch_size=batch_size))
    state = dp_step.create_train_state(params, optimizer)

    def run(name: str, i: int) -> float:
        start = time.perf_counter()
        out = steps[name](state, batch, *jax.random.split(jax.random.key(i)))
        jax.block_until_ready(out)
        return time.perf_counter() - start

    start = time.perf_counter()
    for name in steps:
        for i in range(warmup):
            run(name, i)
    compile_seconds = time.perf_counter() - start
    times: dict[str, list[float]] = {name: [] for name in steps}
    for i in range(repeats):
        for name in steps:
            times[name].append(run(name, warmup + i))
    medians = {name: statistics.median(t) for name, t in times.items()}
    dp_s = medians.pop("dp")
    fastest = min(medians, key=medians.get)
    np_s = medians[fastest]
    return BenchResult(model, batch_size, shape, count_params(params), route.name, dp_s, np_s, fastest, medians,
                       dp_s / np_s, batch_size / dp_s, batch_size / np_s, compile_seconds, repeats)


def nonprivate_routes(logits_fn, params, example_x) -> dict:
    """Every non-private grad-sum tanplan has for this model: "plain" always, "ghost" when the per-layer
    passes apply to the model's structure (tanplan.dp.ghost.unsupported_reason)."""
    routes = {"plain": clipping.nonprivate_grad_sum(logits_fn)}
    if ghost.unsupported_reason(logits_fn, params, example_x, numeric=False) is None:
        routes["ghost"] = ghost.ghost_clipped_grad_sum(logits_fn, None)
    return routes
