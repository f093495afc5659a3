"""What each private gradient route costs at a run's chunk size, which chooses between them under
train.grad_method = "auto" (tanplan.engine.routes).

Both routes clip every example's gradient to C (sensitivity C under add/remove-one: tanplan.dp.ghost,
tanplan.dp.clipping), so the choice changes speed only, never the guarantee. It is made on public
information alone: the model, the config, the chunk's shape and inputs of zeros, never training rows.

The cost is one device's work: the chunk is split by rows over the devices (physical_batch_size rows on
each, tanplan.dp.sampling.batch_layout), the per-layer route forms a layer's per-example gradients when one
device's share of them fits in tanplan.dp.ghost.MAX_PER_EXAMPLE_BYTES and takes Gram-matrix norms
otherwise (more arithmetic: +50% for WRN-16-4 at 128 rows × 16 views), and the vmap route runs on each
device's rows (tanplan.dp.sharding.sum_per_device).
- "estimate" (the default): XLA's FLOP count (cost analysis of each route's grad sum, lowered, not compiled;
  the compiled executable's where the lowering has none) at one device's rows; where a route still has no
  count, both are timed as under "measure" (a cost of 0 is never reported). The per-layer route is kept unless it costs more than MARGIN × the vmap route's:
  where it forms per-example gradients its count is within a few percent of vmap's (the same products, plus
  norms), but it runs them as batched matrix products, while vmap's per-example convolution gradients run
  less efficiently (on CPU far slower); only the Gram fallback makes it much costlier.
- "measure": both routes compiled and timed (median of three calls after one) on public inputs; the faster
  is taken.
"""

from __future__ import annotations

import statistics
import time

import jax
import jax.numpy as jnp
import numpy as np

from tanplan.dp import augmult

MARGIN = 1.25  # the per-layer route is kept while its FLOPs are at most this many times the vmap route's

_COSTS: dict = {}  # memo: a pure function of (model structure, shapes, config, mode, platform) in one process


def costs(fns: dict, params, example_x, rows: int, mode: str, key) -> tuple[dict, str]:
    """({route: cost}, unit) of the routes' grad sums `fns` ({"ghost": ..., "vmap": ...}, for one device's
    rows) at `rows` rows, by `mode` (train.route_cost), memoised under `key`, which must name everything the
    cost depends on besides the rows, the mode and the platform."""
    memo = (key, rows, mode, jax.default_backend())
    if memo not in _COSTS:
        args = _public_args(params, example_x, rows)
        found = {name: _flops(fn, args) for name, fn in fns.items()} if mode != "measure" else {}
        if mode == "measure" or not all(v > 0 for v in found.values()):  # no count for a route: time them all
            _COSTS[memo] = ({name: _timed(fn, args) for name, fn in fns.items()}, "ms")
        else:
            _COSTS[memo] = (found, "GFLOP")
    return _COSTS[memo]


def verdict(found: dict, unit: str, rows: int, views: int) -> tuple[str, str]:
    """(the route, the sentence saying why) from the routes' costs at `rows` rows × `views` views a device."""
    g, v = found["ghost"], found["vmap"]
    scale = 1e3 if unit == "ms" else 1e-9
    at = f"{rows} rows × {views} view{'s' * (views != 1)} a device"
    figures = f"ghost {g * scale:.4g} {unit}, vmap {v * scale:.4g} {unit} at {at}"
    if unit == "ms":
        return ("ghost" if g <= v else "vmap"), f"measured: {figures}"
    ratio = g / v  # both counts are positive: `costs` times the routes when XLA gives none
    name = "ghost" if ratio <= MARGIN else "vmap"
    return name, f"estimated {figures}: ratio {ratio:.2f} {'≤' if name == 'ghost' else '>'} {MARGIN:g}"


def _public_args(params, example_x, rows: int):
    """Abstract inputs of one device's chunk: the example's row shape, integer labels, keys, a mask."""
    x = jax.ShapeDtypeStruct((rows,) + tuple(np.shape(example_x)[1:]), jnp.float32)
    keys = jax.eval_shape(lambda: augmult.example_keys(jax.random.key(0), jnp.arange(rows)))
    return (params, x, jax.ShapeDtypeStruct((rows,), jnp.int32), keys, jax.ShapeDtypeStruct((rows,), jnp.bool_))


def _flops(fn, args) -> float:
    """XLA's FLOP count of fn on abstract args: of its lowering (traced, not compiled), else of the compiled
    executable where the lowering gives none; 0 where neither does (the caller then times the routes)."""
    lowered = jax.jit(fn).lower(*args)
    count = _count(lowered.cost_analysis())
    return count if count > 0 else _count(lowered.compile().cost_analysis())


def _count(analysis) -> float:
    if isinstance(analysis, (list, tuple)):  # older jax: one dict per computation
        analysis = analysis[0] if analysis else {}
    return float((analysis or {}).get("flops", 0.0))


def _timed(fn, args) -> float:
    """Median seconds of three calls of fn, compiled, after one, on public inputs (zeros, all rows real)."""
    params, x, y, keys, mask = args
    concrete = (params, jnp.zeros(x.shape, x.dtype), jnp.zeros(y.shape, y.dtype),
                augmult.example_keys(jax.random.key(0), jnp.arange(x.shape[0])), jnp.ones(mask.shape, bool))
    compiled = jax.jit(fn)
    jax.block_until_ready(compiled(*concrete))
    times = []
    for _ in range(3):
        start = time.perf_counter()
        jax.block_until_ready(compiled(*concrete))
        times.append(time.perf_counter() - start)
    return statistics.median(times)
