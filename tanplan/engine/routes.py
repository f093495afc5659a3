"""How a run computes its per-chunk gradient sum: the gradient route, chosen with its reason.

Private runs clip each example's gradient to C by per-layer norms ("ghost", tanplan.dp.ghost) or by
jax-privacy's vmapped per-example gradients ("vmap", tanplan.dp.clipping); non-private runs sum plain
gradients by the same per-layer passes or by jax.grad ("plain"). Both private routes have sensitivity C
under add/remove-one (see their modules); the choice changes speed, never the guarantee. Under
train.grad_method = "auto" a private run whose model allows per-layer norms takes the cheaper of the two
at its own chunk size (tanplan.engine.route_cost: XLA's FLOP count, or timings). `choose` returns the
`Route` with why; what the user is told of it is tanplan.engine.route_notes.
"""

from __future__ import annotations

from dataclasses import dataclass

import jax

from tanplan import task as tasks
from tanplan.dp import clipping, ghost
from tanplan.engine import route_cost
from tanplan.errors import UsageError
from tanplan.job import RunJob

# A memo of the numeric self-check, a pure function of (model config, parameter structure, input shape):
# it compiles per-example gradients (~5 s), which dominated short proxy runs, so once per process.
_GHOST_CHECKS: dict = {}


@dataclass(frozen=True)
class Route:
    """The gradient route of a run: ghost | vmap | plain, and why the per-layer route was not taken
    (None: it was, or the run is non-private and sums plainly)."""

    name: str
    reason: str | None = None
    cost: str | None = None  # grad_method auto, private: the two routes' costs at the chunk size, and the rule


def choose(job: RunJob, logits_fn, params, example_x, *, rows: int | None = None, augment=None) -> Route:
    """The route of job's run (see `make_grad_sum`); UsageError when train.grad_method = "ghost" is impossible.
    rows: one device's rows in a chunk (physical_batch_size or fewer); with it, a private run under "auto"
    whose model allows per-layer norms takes the cheaper route at that size (tanplan.engine.route_cost)."""
    reason = check(job, logits_fn, params, example_x)
    method = job.perf.grad_method
    if reason is None and method == "auto" and job.privacy.private and rows is not None:
        key = (repr(job.model), _structure(params), tuple(example_x.shape[1:]), job.data.aug_mult,
               job.data.augmentation, job.perf.compute_dtype, repr(job.task), ghost.MAX_PER_EXAMPLE_BYTES)
        fns = {name: grad_sum_of(job, logits_fn, augment, name) for name in ("ghost", "vmap")}
        try:
            found, unit = route_cost.costs(fns, params, example_x, rows, job.perf.route_cost, key)
        except Exception as err:  # e.g. a plugged-in task whose labels are not one integer a row: as before
            return Route("ghost", None, f"no cost at {rows} rows a device ({type(err).__name__}): per-layer kept")
        name, why = route_cost.verdict(found, unit, rows, job.data.aug_mult)
        return Route(name, None, why)
    if reason is None and method in ("auto", "ghost"):
        return Route("ghost")
    return Route("vmap" if job.privacy.private else "plain", reason)


def make_grad_sum(job: RunJob, logits_fn, augment, params, example_x, *, rows: int | None = None):
    """(the per-chunk gradient sum, its Route).

    Private: each example's gradient clipped to C, by per-layer norms ("ghost", when the model's
    structure allows it and a numerical check against per-example gradients passes: `check`) or by
    jax-privacy's vmapped per-example gradients ("vmap"); under "auto", with rows (a chunk's rows on one
    device), the cheaper of the two at that size. Non-private: the plain sum, by the same per-layer passes
    ("ghost") or jax.grad ("plain").
    """
    route = choose(job, logits_fn, params, example_x, rows=rows, augment=augment)
    return grad_sum_of(job, logits_fn, augment, route.name), route


def grad_sum_of(job: RunJob, logits_fn, augment, route: str, devices: int = 1):
    """The per-chunk gradient sum of the named route (clipped to privacy.clip_norm when the run is private);
    devices: how many share the chunk's rows (the per-layer route's memory rule follows one device's rows)."""
    task = tasks.from_config(job)
    k = job.data.aug_mult
    clip = job.privacy.clip_norm if job.privacy.private else None
    if route == "ghost":
        return ghost.ghost_clipped_grad_sum(logits_fn, clip, augment, k, task=task, devices=devices)
    if clip is None:
        return clipping.nonprivate_grad_sum(logits_fn, augment, k, task)
    return clipping.clipped_grad_sum(logits_fn, clip, augment, k, task)


def check(job: RunJob, logits_fn, params, example_x) -> str | None:
    """Why the per-layer route does not apply to job's model (None: it does), and UsageError (one line)
    when train.grad_method = "ghost" asks for it regardless. Whenever per-layer norms would be used, the
    numeric self-check runs (ghost.unsupported_reason: norms and one example's clipped sum against jax.grad
    per example), under "ghost" as under "auto": a model that mixes rows can pass the structural check.
    Called by engine.setup.prepare, before anything is written (its verdict is memoised for build())."""
    method = job.perf.grad_method
    if method not in ("auto", "ghost"):
        return "train.grad_method = vmap"
    # Keyed by the parameter tree itself, not only by job.model: callers that time several models under
    # one config (tanplan bench) must not inherit the first model's verdict.
    key = (repr(job.model), _structure(params), tuple(example_x.shape[1:]))
    if key not in _GHOST_CHECKS:  # a structural check: on the float32 model (engine.precision), not bfloat16's
        full = getattr(logits_fn, "full_precision", logits_fn)
        _GHOST_CHECKS[key] = ghost.unsupported_reason(full, params, example_x, numeric=True)
    reason = _GHOST_CHECKS[key]
    if reason is not None and method == "ghost":
        raise UsageError(f"train.grad_method = 'ghost' is not possible for model {job.model.name!r}: {reason}; "
                         "use auto or vmap")
    return reason


def _structure(params) -> tuple:
    """Every parameter's path (module names included), shape and dtype: the model's structure, hashable."""
    return tuple((jax.tree_util.keystr(path), tuple(leaf.shape), str(leaf.dtype))
                 for path, leaf in jax.tree_util.tree_leaves_with_path(params))
