"""What a stage adds around one run of THE loop without the loop knowing what it is: a wrapper of the run's
mechanism (the step computes the wrapper's noisy sum in place of the mechanism's), what the stage is handed
once the run finished, and what the run's outputs say of it. The privacy audit's canaries come this way
(tanplan.workflow.audit builds the hooks from tanplan.dp.canaries and tanplan.dp.input_canaries).

A wrapper must leave the mechanism's guarantee as it is or say so: a run whose hooks have
`private_release` false is marked when its folder opens (tanplan.engine.run_folder), never resumed, and its
summary.json and model card say it is not a private release.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Protocol

import numpy as np


class Wrapped(Protocol):
    """A mechanism with something around it, as the loop and the step use it."""

    def noisy_sum(self) -> Callable: ...  # the step's noisy sum, in place of the mechanism's

    def step_inputs(self) -> dict: ...  # arrays of the whole run, passed to every step as arguments

    def draws(self, t: int) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
        """Step t's (arrays replicated to every device, training-set indices of rows the step also reads)."""
        ...

    def keep(self, metrics: dict) -> dict: ...  # the step's metrics less what the wrapper keeps to itself


@dataclass(frozen=True, kw_only=True)
class RunHooks:
    """wrap(mechanism, trainable params, dataset) -> Wrapped: around the run's mechanism (the dense step
    only, never resumed); on_finish(wrapped): once the run finished, what it kept (in memory only);
    release_marks: fields of summary.json (and the model card) that say what the run is; private_release
    false: the run is not a private release (its folder marked, its summary and card say so)."""

    wrap: Callable[[Any, Any, Any], Wrapped] | None = None
    on_finish: Callable[[Wrapped], None] | None = None
    release_marks: dict = field(default_factory=dict)
    private_release: bool = True


NONE = RunHooks()
