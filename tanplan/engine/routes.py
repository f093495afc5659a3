"""How a run computes its per-chunk gradient sum: the gradient route, chosen with its reason.

Private runs clip each example's gradient to C by per-layer norms ("ghost", tanplan.dp.ghost) or by
jax-privacy's vmapped per-example gradients ("vmap", tanplan.dp.clipping); non-private runs sum plain
gradients by the same per-layer passes or by jax.grad ("plain"). Both private routes have sensitivity C
under add/remove-one (see their modules); the choice changes speed, never the guarantee. `choose` returns
the `Route` with why the per-layer route was not taken; what the user is told of it is
tanplan.engine.route_notes.
"""

from __future__ import annotations

from dataclasses import dataclass

import jax

from tanplan import task as tasks
from tanplan.config import Config
from tanplan.dp import clipping, ghost
from tanplan.errors import UsageError

# A memo of the numeric self-check, a pure function of (model config, parameter structure, input shape):
# it compiles per-example gradients (~5 s), which dominated short proxy runs, so once per process.
_GHOST_CHECKS: dict = {}


@dataclass(frozen=True)
class Route:
    """The gradient route of a run: ghost | vmap | plain, and why the per-layer route was not taken
    (None: it was, or the run is non-private and sums plainly)."""

    name: str
    reason: str | None = None


def choose(cfg: Config, logits_fn, params, example_x) -> Route:
    """The route of cfg's run (see `make_grad_sum`); UsageError when train.grad_method = "ghost" is impossible."""
    reason = check(cfg, logits_fn, params, example_x)
    if reason is None and cfg.train.grad_method in ("auto", "ghost"):
        return Route("ghost")
    return Route("vmap" if cfg.privacy.private else "plain", reason)


def make_grad_sum(cfg: Config, logits_fn, augment, params, example_x):
    """(the per-chunk gradient sum, its Route).

    Private: each example's gradient clipped to C, by per-layer norms ("ghost", when the model's
    structure allows it and a numerical check against per-example gradients passes: `check`) or by
    jax-privacy's vmapped per-example gradients ("vmap"). Non-private: the plain sum, by the same
    per-layer passes ("ghost") or jax.grad ("plain").
    """
    route = choose(cfg, logits_fn, params, example_x)
    return grad_sum_of(cfg, logits_fn, augment, route.name), route


def grad_sum_of(cfg: Config, logits_fn, augment, route: str):
    """The per-chunk gradient sum of the named route (clipped to privacy.clip_norm when the run is private)."""
    task = tasks.from_config(cfg)
    k = cfg.data.aug_mult
    clip = cfg.privacy.clip_norm if cfg.privacy.private else None
    if route == "ghost":
        return ghost.ghost_clipped_grad_sum(logits_fn, clip, augment, k, task=task)
    if clip is None:
        return clipping.nonprivate_grad_sum(logits_fn, augment, k, task)
    return clipping.clipped_grad_sum(logits_fn, clip, augment, k, task)


def check(cfg: Config, logits_fn, params, example_x) -> str | None:
    """Why the per-layer route does not apply to cfg's model (None: it does), and UsageError (one line)
    when train.grad_method = "ghost" asks for it regardless. Whenever per-layer norms would be used, the
    numeric self-check runs (ghost.unsupported_reason: norms and one example's clipped sum against jax.grad
    per example), under "ghost" as under "auto": a model that mixes rows can pass the structural check.
    Called by engine.setup.prepare, before anything is written (its verdict is memoised for build())."""
    method = cfg.train.grad_method
    if method not in ("auto", "ghost"):
        return "train.grad_method = vmap"
    # Keyed by the parameter tree itself, not only by cfg.model: callers that time several models under
    # one config (tanplan bench) must not inherit the first model's verdict.
    key = (repr(cfg.model), _structure(params), tuple(example_x.shape[1:]))
    if key not in _GHOST_CHECKS:  # a structural check: on the float32 model (engine.precision), not bfloat16's
        full = getattr(logits_fn, "full_precision", logits_fn)
        _GHOST_CHECKS[key] = ghost.unsupported_reason(full, params, example_x, numeric=True)
    reason = _GHOST_CHECKS[key]
    if reason is not None and method == "ghost":
        raise UsageError(f"train.grad_method = 'ghost' is not possible for model {cfg.model.name!r}: {reason}; "
                         "use auto or vmap")
    return reason


def _structure(params) -> tuple:
    """Every parameter's path (module names included), shape and dtype: the model's structure, hashable."""
    return tuple((jax.tree_util.keystr(path), tuple(leaf.shape), str(leaf.dtype))
                 for path, leaf in jax.tree_util.tree_leaves_with_path(params))
