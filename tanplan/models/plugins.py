"""A user's model by import path (model.name = "my_pkg.nets:make_model"), and the DP checks it must pass.

The factory is called as `make_model(num_classes, **kwargs)`, kwargs being [model] options plus width,
depth and norm_order when they are set (non-zero, non-default), plus `input_shape` (one example's shape,
a tuple: (features,), (length, channels) or (height, width, channels)) when the factory takes that
argument, and returns a flax module:

- a linen module (flax.linen.Module): used as tanplan's own models are, `module.init(key, x)["params"]`
  and `module.apply({"params": p}, x)`;
- an nnx module (flax.nnx.Module): its nnx.Param variables are the parameters. A factory that takes
  `rngs` is always called with it (`make_model(num_classes, *, rngs, input_shape, **options)` is the
  documented nnx signature): first with nnx.Rngs(0) to see what it returns, then, at initialisation,
  with `rngs=nnx.Rngs(key)` so that the weights come from experiment.seed like every other model's.

`check_per_example(module, input_shape)` refuses, with one line each, what breaks the per-example
gradient that DP-SGD clips: a collection other than the parameters (linen's `batch_stats`, nnx's
BatchStat, any mutable state: batch statistics mix the examples of a batch), a model whose output for
one example changes when OTHER examples of the batch change (each row of a public synthetic batch is
changed in turn, and every other row's output must stay: random inputs from a fixed seed, never a training
row), and a model whose output is not one row of num_classes logits per example (too few logits make the
cross-entropy of the last classes NaN; too many train classes that do not exist).
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from tanplan.errors import UsageError
from tanplan.plugins import resolve

# The rows of the synthetic batch on which per-example independence is tried; each is changed in turn and
# every other row watched (a model that adds row i-1 into row i leaves row 0 alone).
PROBE_ROWS = 4

# Modules that passed check_per_example in this process, with the shape, seed and class count they passed at:
# a stage validates its model before loading data and again when it builds the run (a refusal is never kept).
_PASSED: set = set()


def create_plugin(path: str, num_classes: int, *, width: int = 0, depth: int = 0, norm_order: str = "conv_gn_relu",
                  options: dict | None = None, input_shape=None):
    """The module the factory at `path` returns (linen as is, nnx wrapped in NnxModel); UsageError otherwise.
    input_shape: one example's shape, passed to a factory that takes it."""
    import flax.linen as nn

    factory = resolve(path, "model.name")
    takes = _parameters(factory)
    kwargs = dict(options or {})
    kwargs.update({k: v for k, v in (("width", width), ("depth", depth)) if v})
    if norm_order != "conv_gn_relu":
        kwargs["norm_order"] = norm_order
    if input_shape is not None and "input_shape" in takes:
        kwargs["input_shape"] = tuple(int(d) for d in input_shape)
    nnx = _nnx()
    takes_rngs = nnx is not None and "rngs" in takes
    module = _call(factory, path, num_classes, kwargs, {"rngs": nnx.Rngs(0)} if takes_rngs else {})
    if isinstance(module, nn.Module):
        return module
    if nnx is not None and isinstance(module, nnx.Module):
        return NnxModel(factory, path, num_classes, kwargs, module, takes_rngs)
    raise UsageError(f"model.name = {path!r} returned a {type(module).__name__}; the factory must return a flax "
                     "module (flax.linen.Module or flax.nnx.Module)")


@dataclass(eq=False)
class NnxModel:
    """An nnx module behind linen's pure interface: init(key, x) -> {"params": dict}, apply({"params": p}, x)."""

    factory: Callable
    path: str
    num_classes: int
    kwargs: dict
    module: Any
    takes_rngs: bool
    _split: tuple = field(default=None, repr=False)

    def init(self, key, x) -> dict:
        nnx = _nnx()
        module = self.module
        if self.takes_rngs:
            module = _call(self.factory, self.path, self.num_classes, self.kwargs, {"rngs": nnx.Rngs(key)})
        graphdef, params, rest = nnx.split(module, nnx.Param, ...)
        self._split = (graphdef, params, rest)
        return {"params": nnx.to_pure_dict(params), **_other_state(rest)}

    def apply(self, variables, x):
        import jax

        nnx = _nnx()
        if self._split is None:
            self.init(None, x)
        graphdef, params, rest = self._split
        state = jax.tree.map(lambda v: v, params)  # a fresh State to fill: the template is never changed
        nnx.replace_by_pure_dict(state, variables["params"])
        return nnx.merge(graphdef, state, rest)(x)


def check_per_example(module, input_shape, name: str, seed: int = 0, num_classes: int = 0) -> None:
    """UsageError (one line) unless `module` keeps no state but its parameters, its output for each example
    ignores the other examples of its batch (on a public synthetic batch of PROBE_ROWS rows, each changed
    in turn) and, when num_classes > 0, it returns one row of num_classes finite logits per example.
    A linen module's pass is remembered for this process, keyed by the module itself (its class and fields)
    and the arguments; an nnx model (a new object each time, holding its arrays) or a linen module that
    cannot be hashed is checked every time."""
    import flax.linen as nn

    key = None
    if isinstance(module, nn.Module):
        try:
            key = (type(module), module, tuple(input_shape), name, seed, num_classes)
            if key in _PASSED:
                return
        except TypeError:  # a field that cannot be hashed (a list, a dict): no memo
            key = None
    _check_per_example(module, input_shape, name, seed, num_classes)
    if key is not None:
        _PASSED.add(key)


def _check_per_example(module, input_shape, name: str, seed: int, num_classes: int) -> None:
    import jax
    import jax.numpy as jnp

    rng = np.random.default_rng(seed)
    x = rng.normal(size=(PROBE_ROWS, *input_shape)).astype(np.float32)
    try:
        variables = module.init(jax.random.key(seed), jnp.asarray(x[:2]))
    except Exception as err:  # the user's model cannot even initialise on inputs of the data's shape
        raise UsageError(f"model.name = {name!r} fails on inputs of shape {tuple(input_shape)}: "
                         f"{type(err).__name__}: {_first_line(err)}") from None
    other = sorted(k for k in variables if k != "params")
    if other:
        what = ("batch statistics (BatchNorm) mix the examples of a batch" if any("batch" in k.lower() for k in other)
                else "tanplan applies a model as a pure function of its parameters")
        raise UsageError(f"model.name = {name!r} is not allowed: it keeps the collection {other[0]!r} besides its "
                         f"parameters; {what}, but DP-SGD clips each example's own gradient: use GroupNorm or "
                         "LayerNorm")
    params = variables["params"]
    apply = lambda batch: np.asarray(module.apply({"params": params}, jnp.asarray(batch)))  # noqa: E731
    try:
        out = apply(x)
        if out.shape[:1] == (PROBE_ROWS,):
            moved = []
            for row in range(PROBE_ROWS):  # row `row` changed, every other row kept
                changed = x.copy()
                changed[row] = rng.normal(size=changed[row].shape).astype(np.float32) * 3.0
                moved.append(apply(changed))
    except Exception as err:
        raise UsageError(f"model.name = {name!r} fails on inputs of shape {tuple(input_shape)}: "
                         f"{type(err).__name__}: {_first_line(err)}") from None
    if out.shape[:1] != (PROBE_ROWS,):
        raise UsageError(f"model.name = {name!r} returned shape {out.shape} for {PROBE_ROWS} examples; a model "
                         "returns one row of logits per example")
    for row, got in enumerate(moved):
        kept = np.arange(PROBE_ROWS) != row
        if not np.allclose(out[kept], got[kept], rtol=1e-4, atol=1e-5):
            raise UsageError(f"model.name = {name!r} is not allowed: the output of one example changes when the "
                             "other examples of its batch change (a statistic over the batch, or rows mixed?); "
                             "DP-SGD clips each example's own gradient, so each example's output must depend on "
                             "that example alone")
    if num_classes and out.shape[1:] != (num_classes,):
        raise UsageError(f"model.name = {name!r} returns outputs of shape {out.shape[1:]} per example; the data has "
                         f"{num_classes} classes, so a model must return ({num_classes},) logits per example "
                         "(the factory is called with num_classes)")
    if not np.isfinite(out).all():
        raise UsageError(f"model.name = {name!r} returns NaN or infinite logits on a public synthetic batch of "
                         f"shape {tuple(input_shape)}")


def check_rows_alone(module, params, input_shape, rows: int, name: str, seed: int = 0) -> None:
    """UsageError (one line) unless the module's output for a public synthetic batch of `rows` rows (the run's
    chunk size: the shape its gradient passes apply it to) equals its output for each row applied alone.

    The probe of `check_per_example` changes a few rows of a small batch; a model that mixes rows only at a
    distance, or only in larger batches, passes it, and on the per-layer (ghost) route its clipped sum then
    moves by more than C when one example is added (measured: 1.74 C for x + 3·roll(x, 4)). Comparing the
    batch with every row alone, at the run's own shape, catches any mixing that shape can do."""
    import jax
    import jax.numpy as jnp

    x = jnp.asarray(np.random.default_rng(seed + 1).normal(size=(rows, *input_shape)).astype(np.float32))
    apply = lambda batch: module.apply({"params": params}, batch)  # noqa: E731
    together = np.asarray(apply(x))
    alone = np.asarray(jax.vmap(lambda row: apply(row[None])[0])(x))
    if together.shape != alone.shape or not np.allclose(together, alone, rtol=1e-3, atol=1e-4):
        raise UsageError(f"model.name = {name!r} is not allowed: on a batch of {rows} rows (train.physical_batch_size's "
                         "chunk) its outputs differ from those of each row applied alone (a statistic over the "
                         "batch, or rows mixed?); DP-SGD clips each example's own gradient, so each example's "
                         "output must depend on that example alone")


def _call(factory, path: str, num_classes: int, kwargs: dict, extra: dict):
    try:
        return factory(num_classes, **kwargs, **extra)
    except UsageError:
        raise
    except Exception as err:  # the user's factory: one line naming it and how it was called
        given = ", ".join(["num_classes", *kwargs, *extra])
        raise UsageError(f"model.name = {path!r}: calling it with ({given}) failed: {type(err).__name__}: "
                         f"{_first_line(err)}") from None


def _other_state(rest) -> dict:
    """The nnx variables besides the parameters, as {collection name: values} (BatchStat -> batch_stats)."""
    import jax

    nnx = _nnx()
    kinds = {type(v).__name__ for v in jax.tree.leaves(rest, is_leaf=lambda v: isinstance(v, nnx.Variable))}
    return {("batch_stats" if kind == "BatchStat" else kind): True for kind in sorted(kinds)}


def _parameters(fn) -> set[str]:
    try:
        return set(inspect.signature(fn).parameters)
    except (TypeError, ValueError):
        return set()


def _nnx():
    try:
        from flax import nnx
    except ImportError:  # an older flax without nnx: linen only
        return None
    return nnx


def _first_line(err: Exception) -> str:
    text = str(err).strip()
    return text.splitlines()[0] if text else "no message"
