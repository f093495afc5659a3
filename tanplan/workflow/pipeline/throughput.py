"""How long a stage will take: seconds per example-gradient, from the runs an earlier `tanplan run` left in the
same --out folder (their summary.json: training seconds over B'·steps, and each run's compilation and
evaluation on top), else from a short timed probe of the config's DP-SGD step (a few steps of one chunk of
train.physical_batch_size rows of synthetic input, after compilation), which a later probe of the same model
and step reuses from the cache. The estimate says which it is.

A step's time is taken as proportional to its expected rows B' (padding and per-step overheads make small
proxies slower per example than this says); the probe knows no compilation or evaluation time, so its
estimate is a lower one. Nothing here reads the private data: the probe trains on random inputs.
"""

from __future__ import annotations

import json
import statistics
import time
from dataclasses import dataclass
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from tanplan.config import Config
from tanplan.dp import optim
from tanplan.dp import step as dp_step
from tanplan.engine.bench import input_shape
from tanplan.engine.routes import make_grad_sum
from tanplan.fileio import write_json_atomic
from tanplan.job import job_of
from tanplan.models import create_model
from tanplan.outcomes.run_summary import RunSummary
from tanplan.runtime import cache_root

PROBE_STEPS = 3  # timed steps after compilation (the median is kept)


@dataclass(frozen=True, kw_only=True)
class Throughput:
    """Seconds per example-gradient of a training step, the seconds a run spends outside its steps
    (compilation, evaluation; 0 when unknown) and where the figures come from."""

    seconds_per_example: float
    run_overhead_seconds: float
    source: str
    lower_bound: bool = False  # a probe: the loop's sampling, padding, evaluation and checkpoints are not in it

    def seconds(self, example_gradients: float, runs: int) -> float:
        """A stage's wall time: its example-gradients at this rate, plus each run's overhead."""
        return example_gradients * self.seconds_per_example + runs * self.run_overhead_seconds


def recorded(out: Path | None) -> Throughput | None:
    """The throughput the runs under `out` measured (every summary.json with training time), or None."""
    if out is None or not Path(out).is_dir():
        return None
    examples = seconds = 0.0
    overheads = []
    for path in sorted(Path(out).rglob("summary.json")):
        try:
            s = RunSummary.from_dict(json.loads(path.read_text(encoding="utf-8")))
        except (OSError, ValueError, TypeError, KeyError, AttributeError):  # not a run's summary (the pipeline's)
            continue
        if s.train_seconds > 0 and s.steps_this_run > 0:
            examples += s.batch_size * s.steps_this_run
            seconds += s.train_seconds
            overheads.append(max(s.wall_seconds - s.train_seconds, 0.0))
    if not overheads:
        return None
    return Throughput(seconds_per_example=seconds / examples, run_overhead_seconds=statistics.median(overheads),
                      source=f"measured by the {len(overheads)} run(s) recorded in {out}")


def probe_key(cfg: Config) -> str:
    """What the probe's figure depends on: the model, its gradient route and chunk, JAX's backend."""
    m, t = cfg.model, cfg.train
    return (f"{m.name}-w{m.width}-d{m.depth}-{t.grad_method}-{t.compute_dtype}-p{t.physical_batch_size}-"
            f"{jax.default_backend()}")


def probe(cfg: Config, *, measure: bool = True) -> Throughput | None:
    """Seconds per example of cfg's DP-SGD step on one chunk of train.physical_batch_size random rows (the
    median of PROBE_STEPS steps after compilation); kept in the cache ($TANPLAN_CACHE/throughput/) and
    reused by a later probe of the same model and step. measure=False: the cached figure or None."""
    path = Path(cache_root()) / "throughput" / f"{probe_key(cfg)}.json"
    if path.is_file():
        try:
            old = json.loads(path.read_text(encoding="utf-8"))
            return Throughput(seconds_per_example=float(old["seconds_per_example"]), run_overhead_seconds=0.0,
                              source=f"a probe of the model's step recorded in {path} ({old['when']}); a lower "
                                     "bound", lower_bound=True)
        except (OSError, ValueError, TypeError, KeyError):
            pass  # an unreadable record: probe again
    if not measure:
        return None
    rows = cfg.train.physical_batch_size
    step_seconds = _time_steps(cfg, rows)
    write_json_atomic(path, {"seconds_per_example": step_seconds / rows, "rows": rows,
                             "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())})
    return Throughput(seconds_per_example=step_seconds / rows, run_overhead_seconds=0.0,
                      source=f"a probe of {PROBE_STEPS} steps of the model at {rows} rows, measured now; a lower "
                             "bound (the loop's batch sampling, padding, evaluation, checkpoints and compilation "
                             "are not in it)", lower_bound=True)


def _time_steps(cfg: Config, rows: int) -> float:
    """Median seconds of cfg's jitted DP-SGD step on one chunk of `rows` random rows, after compilation."""
    m = cfg.model
    net = create_model(m.name, 10, width=m.width, depth=m.depth)
    rng = np.random.default_rng(0)
    x = rng.normal(size=(1, rows) + input_shape(m.name)).astype(np.float32)
    batch = {"x": jnp.asarray(x), "y": jnp.asarray(rng.integers(0, 10, (1, rows)).astype(np.int32)),
             "mask": jnp.ones((1, rows), bool), "index": jnp.arange(rows, dtype=jnp.int32)[None]}
    params = net.init(jax.random.key(0), x[0, :1])["params"]
    grad_sum, _ = make_grad_sum(job_of(cfg), lambda p, xb: net.apply({"params": p}, xb), None, params, x[0])
    optimizer = optim.make_optimizer(cfg.train)
    step = jax.jit(dp_step.make_train_step(grad_sum, optimizer, noise_std=1.0, expected_batch_size=rows))
    state = dp_step.create_train_state(params, optimizer)
    times = []
    for i in range(PROBE_STEPS + 1):  # the first compiles
        start = time.perf_counter()
        jax.block_until_ready(step(state, batch, *jax.random.split(jax.random.key(i))))
        times.append(time.perf_counter() - start)
    return statistics.median(times[1:])


__all__ = ["Throughput", "recorded", "probe", "probe_key", "PROBE_STEPS"]
