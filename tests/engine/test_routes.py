"""The gradient route's structure check is remembered per model structure: a second model under the same
config (as `tanplan bench` times several) gets its own verdict, and a refusal names the model refused."""

import jax
import numpy as np
import pytest

from tanplan.config import Config, TrainConfig
from tanplan.engine import routes
from tanplan.engine.bench import bench_model
from tanplan.errors import UsageError
from tanplan.models import create_model


def _model(name, **size):
    net = create_model(name, 10, **size)
    x = np.zeros((2, 32, 32, 3), np.float32)
    # Zeros of the right shapes: the structure check reads shapes, and abstract init compiles nothing.
    shapes = jax.eval_shape(net.init, jax.random.key(0), x[:1])["params"]
    params = jax.tree.map(lambda s: np.zeros(s.shape, s.dtype), shapes)
    return (lambda p, xb: net.apply({"params": p}, xb)), params, x


def test_a_second_model_under_one_config_is_checked_on_its_own(monkeypatch):
    monkeypatch.setattr(routes, "_GHOST_CHECKS", {})
    cfg = Config(train=TrainConfig(grad_method="ghost"))  # model.name stays the default for both
    logits, params, x = _model("cnn2d", width=4, depth=1)
    assert routes.make_grad_sum(cfg, logits, None, params, x)[1].name == "ghost"
    logits, params, x = _model("vit_tiny", width=64, depth=1)  # same input shape; its root owns parameters: no per-layer route
    with pytest.raises(UsageError, match="not possible"):
        routes.make_grad_sum(cfg, logits, None, params, x)


def test_bench_names_the_model_it_refuses(monkeypatch):
    monkeypatch.setattr(routes, "_GHOST_CHECKS", {})
    with pytest.raises(UsageError, match="model 'vit_tiny'"):
        bench_model("vit_tiny", 2, repeats=1, grad_method="ghost", width=64, depth=1)


def test_the_route_carries_its_reason_and_the_note_reads_it_from_there(monkeypatch):
    """The route choice returns why the per-layer route was not taken; the user's line is built from that
    value alone (no state kept between the check and the note)."""
    from tanplan.config import ModelConfig
    from tanplan.engine.route_notes import route_line

    monkeypatch.setattr(routes, "_GHOST_CHECKS", {})
    logits, params, x = _model("vit_tiny", width=64, depth=1)
    cfg = Config(model=ModelConfig(name="vit_tiny", width=64, depth=1), train=TrainConfig(grad_method="auto"))
    route = routes.choose(cfg, logits, params, x)
    assert route.name == "vmap" and route.reason
    assert route_line("vit_tiny", route).endswith(f"the per-layer route does not apply ({route.reason})")
    chosen = routes.choose(cfg.with_overrides({"train.grad_method": "vmap"}), logits, params, x)
    assert chosen == routes.Route("vmap", "train.grad_method = vmap")
    public = routes.choose(cfg.with_overrides({"privacy.private": False}), logits, params, x)
    assert public == routes.Route("plain", route.reason)
    assert "gradient route plain" in route_line("vit_tiny", public)
