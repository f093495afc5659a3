"""How a run computes its per-chunk gradient sum: the gradient route.

Private runs clip each example's gradient to C by per-layer norms ("ghost", tanplan.dp.ghost) or by
jax-privacy's vmapped per-example gradients ("vmap", tanplan.dp.clipping); non-private runs sum plain
gradients by the same per-layer passes or by jax.grad ("plain"). Both private routes have sensitivity C
under add/remove-one (see their modules); the choice changes speed, never the guarantee.
"""

from __future__ import annotations

from tanplan.config import Config
from tanplan.errors import UsageError

_GHOST_CHECKS: dict = {}
_LAST_REASON: dict = {}  # repr(cfg.model) -> why the per-layer route was not taken (None: it was), for `note`


def make_grad_sum(cfg: Config, logits_fn, augment, params, example_x):
    """The per-chunk gradient sum and the route's name.

    Private: each example's gradient clipped to C, by per-layer norms ("ghost", when the model's
    structure allows it and a numerical check against per-example gradients passes: `check`) or by jax-privacy's vmapped per-example gradients ("vmap"). Non-private: the
    plain sum, by the same per-layer passes ("ghost") or jax.grad ("plain").
    """
    from tanplan import task as tasks
    from tanplan.dp import clipping, ghost

    task = tasks.from_config(cfg)
    k = cfg.data.aug_mult
    clip = cfg.privacy.clip_norm if cfg.privacy.private else None
    if check(cfg, logits_fn, params, example_x) is None and cfg.train.grad_method in ("auto", "ghost"):
        return ghost.ghost_clipped_grad_sum(logits_fn, clip, augment, k, task=task), "ghost"
    if clip is None:
        return clipping.nonprivate_grad_sum(logits_fn, augment, k, task), "plain"
    return clipping.clipped_grad_sum(logits_fn, clip, augment, k, task), "vmap"


def check(cfg: Config, logits_fn, params, example_x) -> str | None:
    """Why the per-layer route does not apply to cfg's model (None: it does), and UsageError (one line)
    when train.grad_method = "ghost" asks for it regardless. Whenever per-layer norms would be used, the
    numeric self-check runs (ghost.unsupported_reason: norms and one example's clipped sum against jax.grad
    per example), under "ghost" as under "auto": a model that mixes rows can pass the structural check.
    Called by engine.setup.prepare, before anything is written; the verdict is cached for build()."""
    from tanplan.dp import ghost

    method = cfg.train.grad_method
    if method not in ("auto", "ghost"):
        return "train.grad_method = vmap"
    # The check depends on the model's structure and input shape only: once per process (it compiles
    # per-example gradients, ~5 s, which dominated short proxy runs). The structure is keyed by the
    # parameter tree itself, not only by cfg.model: callers that time several models under one
    # config (tanplan bench) must not inherit the first model's verdict.
    key = (repr(cfg.model), _structure(params), tuple(example_x.shape[1:]))
    if key not in _GHOST_CHECKS:
        _GHOST_CHECKS[key] = ghost.unsupported_reason(logits_fn, params, example_x, numeric=True)
    reason = _LAST_REASON[repr(cfg.model)] = _GHOST_CHECKS[key]
    if reason is not None and method == "ghost":
        raise UsageError(f"train.grad_method = 'ghost' is not possible for model {cfg.model.name!r}: {reason}; "
                         "use auto or vmap")
    return reason


def note(cfg: Config, route: str) -> str:
    """One line saying which gradient route a run of cfg's model takes, and why (said once per model by
    the loop: plugged-in models, whose route the user cannot know in advance)."""
    name = cfg.model.name
    if route == "ghost":
        return f"tanplan: model {name}: gradient route ghost (per-layer norms; its self-check against per-example gradients passed)"
    if route == "plain":
        return f"tanplan: model {name}: gradient route plain (a non-private run: no clipping)"
    why = _LAST_REASON.get(repr(cfg.model))
    because = f": the per-layer route does not apply ({why})" if why else " (train.grad_method = vmap)"
    return f"tanplan: model {name}: gradient route vmap (per-example gradients by jax-privacy){because}"


def _structure(params) -> tuple:
    """Every parameter's path (module names included), shape and dtype: the model's structure, hashable."""
    import jax

    return tuple((jax.tree_util.keystr(path), tuple(leaf.shape), str(leaf.dtype))
                 for path, leaf in jax.tree_util.tree_leaves_with_path(params))
