"""What the user is told of a run's gradient route (tanplan.engine.routes chooses it): one line for a
plugged-in model, whose route the user cannot know in advance, or for a route chosen by its cost at the
chunk size (with both costs), and the CPU note on accumulated chunks."""

from __future__ import annotations

from typing import Callable

from tanplan.engine.routes import Route

_SAID: set[str] = set()  # lines this process said once (a plugged-in model's gradient route)


def say_once(line: str | None, say: Callable[[str], None]) -> None:
    """Say the line, unless this process said it already (or it is None)."""
    if line and line not in _SAID:
        _SAID.add(line)
        say(line)


def route_line(model_name: str, route: Route) -> str:
    """One line saying which gradient route a run of the model takes, and why (said once per model by the loop)."""
    if route.name == "ghost":
        cost = f"; kept by its cost at this chunk: {route.cost}" if route.cost else ""
        return (f"tanplan: model {model_name}: gradient route ghost (per-layer norms; its self-check against "
                f"per-example gradients passed{cost})")
    if route.name == "plain":
        return f"tanplan: model {model_name}: gradient route plain (a non-private run: no clipping)"
    if route.cost:
        return (f"tanplan: model {model_name}: gradient route vmap (per-example gradients by jax-privacy): the "
                f"per-layer route costs more at this chunk ({route.cost})")
    because = (f": the per-layer route does not apply ({route.reason})" if route.reason
               else " (train.grad_method = vmap)")
    return f"tanplan: model {model_name}: gradient route vmap (per-example gradients by jax-privacy){because}"


def cpu_chunks_line(route: str, chunks: int, capacity: int) -> str | None:
    """The note for the vmap/plain routes accumulating several chunks on CPU, where XLA runs convolution
    weight-gradients inside loops very slowly; None when it does not apply."""
    if route not in ("vmap", "plain") or chunks <= 1:
        return None
    return (f"tanplan: note: the {route} gradient route accumulates {chunks} chunks; on CPU, XLA runs convolution "
            f"weight-gradients inside loops very slowly: raise train.physical_batch_size to {capacity} for one "
            "chunk per step")
