"""The gradient route's structure check is remembered per model structure: a second model under the same
config (as `tanplan bench` times several) gets its own verdict, and a refusal names the model refused."""

import functools

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tanplan.config import Config, PrivacyConfig, TrainConfig
from tanplan.dp import augmult, clipping, ghost
from tanplan.engine import routes
from tanplan.engine.bench import bench_model
from tanplan.errors import UsageError
from tanplan.job import job_of
from tanplan.models import create_model


def _model(name, **size):
    net = create_model(name, 10, **size)
    x = np.zeros((2, 32, 32, 3), np.float32)
    # Zeros of the right shapes: the structure check reads shapes, and abstract init compiles nothing.
    shapes = jax.eval_shape(net.init, jax.random.key(0), x[:1])["params"]
    params = jax.tree.map(lambda s: np.zeros(s.shape, s.dtype), shapes)
    return (lambda p, xb: net.apply({"params": p}, xb)), params, x


class RootPosition(nn.Module):
    """A learnt position embedding held by the model itself and feeding a sub-layer: the one layout the
    per-layer route refuses (every built-in model is covered)."""

    @nn.compact
    def __call__(self, x):
        h = nn.Dense(8)(x.reshape(x.shape[0], -1, 3))
        h = h + self.param("pos", nn.initializers.zeros, (1, h.shape[1], 8))  # one a pixel
        return nn.Dense(10)(nn.LayerNorm()(h).mean(axis=1))


def _refused():
    net = RootPosition()
    x = np.zeros((2, 8, 8, 3), np.float32)  # _small_cnn's input shape
    params = jax.tree.map(lambda s: np.zeros(s.shape, s.dtype), jax.eval_shape(net.init, jax.random.key(0), x[:1]))
    return (lambda p, xb: net.apply({"params": p}, xb)), params["params"], x


@pytest.fixture(scope="module")
def checks():
    """The route's self-check memo (routes._GHOST_CHECKS) shared by this module's tests of _small_cnn: its
    verdict, a pure function of the memo's key, is computed (a compile of per-example gradients and of the
    route, ~0.8 CPU-s) by the first of them, not by each."""
    return {}


def test_every_built_in_image_model_takes_the_per_layer_route(monkeypatch):
    monkeypatch.setattr(routes, "_GHOST_CHECKS", {})
    cfg = Config(train=TrainConfig(grad_method="ghost"))
    for name, size in (("vit_tiny", dict(width=64, depth=1)), ("nf_resnet", dict(width=8, depth=10)),
                       ("wrn16_4", dict(width=1, depth=10))):
        logits, params, x = _model(name, **size)
        assert routes.check(job_of(cfg), logits, params, x) is None, name


def test_a_second_model_under_one_config_is_checked_on_its_own(monkeypatch, checks):
    monkeypatch.setattr(routes, "_GHOST_CHECKS", checks)  # the cnn's verdict, computed here or by another test
    cfg = Config(train=TrainConfig(grad_method="ghost"))  # model.name stays the default for both
    logits, params, x = _small_cnn()
    assert routes.make_grad_sum(job_of(cfg), logits, None, params, x)[1].name == "ghost"
    assert any(key[1] == routes._structure(params) for key in checks)  # the memo now holds the cnn's verdict
    logits, params, x = _refused()  # same input shape; its root's parameter feeds a layer: no per-layer route
    with pytest.raises(UsageError, match="not possible"):
        routes.make_grad_sum(job_of(cfg), logits, None, params, x)


def test_bench_names_the_model_it_refuses(monkeypatch):
    monkeypatch.setattr(routes, "_GHOST_CHECKS", {})
    monkeypatch.setattr(ghost, "unsupported_reason", lambda *a, **k: "a layer it cannot see")
    # mlp, not the default model (cnn1d): its eager init compiles ~10 small programs, vit_tiny's 90 (2.5 CPU-s)
    with pytest.raises(UsageError, match="model 'mlp'"):
        bench_model("mlp", 2, repeats=1, grad_method="ghost", width=8, depth=1)


def test_the_route_carries_its_reason_and_the_note_reads_it_from_there(monkeypatch):
    """The route choice returns why the per-layer route was not taken; the user's line is built from that
    value alone (no state kept between the check and the note)."""
    from tanplan.config import ModelConfig
    from tanplan.engine.route_notes import route_line

    monkeypatch.setattr(routes, "_GHOST_CHECKS", {})
    logits, params, x = _refused()
    cfg = Config(model=ModelConfig(name="vit_tiny", width=64, depth=1), train=TrainConfig(grad_method="auto"))
    route = routes.choose(job_of(cfg), logits, params, x)
    assert route.name == "vmap" and route.reason
    assert route_line("vit_tiny", route).endswith(f"the per-layer route does not apply ({route.reason})")
    chosen = routes.choose(job_of(cfg.with_overrides({"train.grad_method": "vmap"})), logits, params, x)
    assert chosen == routes.Route("vmap", "train.grad_method = vmap")
    public = routes.choose(job_of(cfg.with_overrides({"privacy.private": False})), logits, params, x)
    assert public == routes.Route("plain", route.reason)
    assert "gradient route plain" in route_line("vit_tiny", public)


@functools.lru_cache(maxsize=None)
def _small_cnn():
    """cnn2d, width 4, on 8×8×3 inputs: convolutions over 64 positions, whose Gram norms cost far more than
    their per-example gradients (T·(D+O) ≫ D·O). Made once; its parameters drawn on the host, of init's
    shapes (compiling init cost ~0.3 CPU-s): kernels of variance 1 / fan-in, GroupNorm's scale 1, biases 0."""
    net = create_model("cnn2d", 10, width=4, depth=1)
    x = np.zeros((2, 8, 8, 3), np.float32)
    rng = np.random.default_rng(0)

    def fill(path, s):
        if len(s.shape) >= 2:
            return (rng.standard_normal(s.shape) / np.sqrt(np.prod(s.shape[:-1]))).astype(s.dtype)
        return np.full(s.shape, 1.0 if "scale" in str(path[-1]) else 0.0, s.dtype)

    params = jax.tree_util.tree_map_with_path(fill, jax.eval_shape(net.init, jax.random.key(0), x[:1])["params"])
    return (lambda p, xb: net.apply({"params": p}, xb)), params, x


def _conv_kernel(params) -> int:
    """Its convolution's kernel size D·O (the dense layers, one position each, never form or take Gram norms)."""
    return max(leaf.size for leaf in jax.tree.leaves(params) if leaf.ndim == 4)


def test_auto_takes_the_cheaper_route_at_the_chunk_size_and_says_why(monkeypatch, checks):
    """At a chunk whose per-example gradients fit one device's budget the per-layer route forms them (about
    vmap's FLOPs) and is kept; at a larger chunk it falls back to Gram norms, costlier than vmap: vmap. The
    sentence carries both counts and the rule, and the counts are XLA's own (checked against a lowering)."""
    from tanplan.engine import route_cost
    from tanplan.engine.route_notes import route_line

    monkeypatch.setattr(routes, "_GHOST_CHECKS", checks)
    monkeypatch.setattr(route_cost, "_COSTS", {})
    counted = {}  # (route, rows) -> what XLA's lowering counted for the choice (kept, not lowered again below)
    flops = route_cost._flops

    def recorded(fn, args):
        counted["ghost" if "ghost" in fn.__qualname__ else "vmap", args[1].shape[0]] = count = flops(fn, args)
        return count

    monkeypatch.setattr(route_cost, "_flops", recorded)
    logits, params, x = _small_cnn()
    small, large = 2, 16
    monkeypatch.setattr(ghost, "MAX_PER_EXAMPLE_BYTES", small * _conv_kernel(params) * 4)  # fits 2 rows, not 16
    cfg = Config(privacy=PrivacyConfig(sigma=1.0), train=TrainConfig(grad_method="auto"))

    kept = routes.choose(job_of(cfg), logits, params, x, rows=small)
    moved = routes.choose(job_of(cfg), logits, params, x, rows=large)
    assert kept.name == "ghost" and moved.name == "vmap"
    for route, rows in ((kept, small), (moved, large)):
        assert f"at {rows} rows × 1 view a device" in route.cost and "GFLOP" in route.cost
    assert f"> {route_cost.MARGIN:g}" in moved.cost and f"≤ {route_cost.MARGIN:g}" in kept.cost
    assert moved.cost in route_line("cnn2d", moved) and "costs more at this chunk" in route_line("cnn2d", moved)
    assert kept.cost in route_line("cnn2d", kept)

    # The larger chunk's ghost count is that of Gram norms: above the same route with a budget that forms them.
    assert set(counted) == {("ghost", small), ("vmap", small), ("ghost", large), ("vmap", large)}
    gram, vmap = counted["ghost", large], counted["vmap", large]
    args = route_cost._public_args(params, x, large)
    formed = flops(ghost.ghost_clipped_grad_sum(logits, 1.0, devices=large), args)
    assert gram > route_cost.MARGIN * vmap and formed <= route_cost.MARGIN * vmap
    assert f"ghost {gram * 1e-9:.4g} GFLOP, vmap {vmap * 1e-9:.4g} GFLOP" in moved.cost

    # Forced routes and non-private runs are not weighed; without the chunk size neither.
    forced = cfg.with_overrides({"train.grad_method": "ghost"})
    assert routes.choose(job_of(forced), logits, params, x, rows=large).name == "ghost"
    assert routes.choose(job_of(cfg), logits, params, x) == routes.Route("ghost")
    assert routes.choose(job_of(cfg.with_overrides({"privacy.private": False})), logits, params, x, rows=large).cost is None

    # No count to be had (a lowering that fails: e.g. a plugged-in task's labels): the per-layer route, said so.
    monkeypatch.setattr(route_cost, "_COSTS", {})
    monkeypatch.setattr(route_cost, "_flops", lambda fn, args: (_ for _ in ()).throw(TypeError("labels")))
    fallback = routes.choose(job_of(cfg), logits, params, x, rows=large)
    assert fallback.name == "ghost" and fallback.cost.startswith(f"no cost at {large} rows a device (TypeError)")


def test_the_per_layer_memory_rule_follows_one_devices_rows(monkeypatch):
    """A chunk split over d devices holds 1/d of each layer's per-example gradients on each: the same 16 rows
    take Gram norms on one device and form the gradients on eight (fewer FLOPs), with the same sum."""
    from tanplan.engine import route_cost

    logits, params, x = _small_cnn()
    args = route_cost._public_args(params, x, 16)
    budget = 2 * _conv_kernel(params) * 4
    monkeypatch.setattr(ghost, "MAX_PER_EXAMPLE_BYTES", budget)
    one = route_cost._flops(ghost.ghost_clipped_grad_sum(logits, 1.0), args)
    eight = route_cost._flops(ghost.ghost_clipped_grad_sum(logits, 1.0, devices=8), args)
    rng = np.random.default_rng(0)
    xs = jnp.asarray(rng.normal(size=(16, 8, 8, 3)).astype(np.float32))
    ys, mask = jnp.arange(16, dtype=jnp.int32) % 10, jnp.ones((16,), bool)
    keys = augmult.example_keys(jax.random.key(0), jnp.arange(16))
    sums = [jax.jit(ghost.ghost_clipped_grad_sum(logits, 1.0, devices=d))(params, xs, ys, keys, mask)[0]
            for d in (1, 8)]
    assert eight < one
    for a, b in zip(jax.tree.leaves(sums[0]), jax.tree.leaves(sums[1])):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-4, atol=1e-6)


def test_measured_mode_takes_the_faster_route(monkeypatch, checks):
    """train.route_cost = measure: each route compiled and timed on public inputs, the faster taken (the
    timing stubbed here so that either order is seen; one real timing checks the figures are positive)."""
    from tanplan.engine import route_cost

    logits, params, x = _small_cnn()
    cfg = Config(privacy=PrivacyConfig(sigma=1.0), train=TrainConfig(grad_method="auto", route_cost="measure"))
    monkeypatch.setattr(routes, "_GHOST_CHECKS", checks)
    for ghost_s, vmap_s, expected in ((0.002, 0.001, "vmap"), (0.001, 0.002, "ghost")):
        monkeypatch.setattr(route_cost, "_COSTS", {})
        fake = lambda fn, args, g=ghost_s, v=vmap_s: g if "ghost" in fn.__qualname__ else v  # noqa: E731
        monkeypatch.setattr(route_cost, "_timed", fake)
        route = routes.choose(job_of(cfg), logits, params, x, rows=4)
        assert route.name == expected
        assert route.cost.startswith("measured: ")
        assert f"ghost {ghost_s * 1e3:.4g} ms, vmap {vmap_s * 1e3:.4g} ms" in route.cost
    monkeypatch.undo()
    monkeypatch.setattr(route_cost, "_COSTS", {})
    found, unit = route_cost.costs({"ghost": ghost.ghost_clipped_grad_sum(logits, 1.0),
                                    "vmap": clipping.clipped_grad_sum(logits, 1.0)}, params, x, 2, "measure", "k")
    assert unit == "ms" and all(seconds > 0 for seconds in found.values())


def test_a_route_without_a_flop_count_is_never_costed_at_zero(monkeypatch, checks):
    """Where the lowering gives no FLOP count the compiled executable's is read; where neither gives one
    the routes are timed: no route is ever reported at 0 FLOPs (nor chosen for it)."""
    from tanplan.engine import route_cost

    logits, params, x = _small_cnn()
    args = route_cost._public_args(params, x, 2)
    real = route_cost._count
    calls = []

    def lowering_has_none(analysis):
        calls.append(analysis)
        return 0.0 if len(calls) == 1 else real(analysis)

    monkeypatch.setattr(route_cost, "_count", lowering_has_none)
    assert route_cost._flops(ghost.ghost_clipped_grad_sum(logits, 1.0), args) > 0 and len(calls) == 2

    monkeypatch.setattr(route_cost, "_count", lambda analysis: 0.0)
    monkeypatch.setattr(route_cost, "_COSTS", {})
    monkeypatch.setattr(routes, "_GHOST_CHECKS", checks)
    cfg = Config(privacy=PrivacyConfig(sigma=1.0), train=TrainConfig(grad_method="auto"))
    route = routes.choose(job_of(cfg), logits, params, x, rows=2)
    assert route.cost.startswith("measured: ") and " 0 GFLOP" not in route.cost
    found, unit = route_cost._COSTS[next(iter(route_cost._COSTS))]
    assert unit == "ms" and all(seconds > 0 for seconds in found.values())
