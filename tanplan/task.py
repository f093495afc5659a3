"""What a run minimises and what it reports ([task]): a per-example loss and a per-example metric.

By default the loss is softmax cross-entropy with integer labels and the metric accuracy (argmax ==
label). A plug-in names its own by import path, as functions of ONE example:

    [task]
    loss = "my_pkg.losses:focal"      # focal(logits, label) -> scalar, logits of shape (num_classes,)
    metric = "my_pkg.losses:top5"     # top5(logits, label) -> scalar in [0, 1], higher is better

tanplan applies them with jax.vmap, so example i's loss is a function of example i's logits and label
alone (the per-example gradient that DP-SGD clips needs exactly that). The metric is what the run
reports as test_accuracy (and what sweeps, the batch law and the launch compare), so it must lie in
[0, 1] with higher better.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from tanplan import plugins
from tanplan.errors import UsageError


@dataclass(frozen=True)
class Task:
    """loss(logits, labels) -> (n,) per-example losses; metric(logits, labels) -> (n,) per-example values."""

    loss: Callable
    metric: Callable
    name: str = "cross-entropy, accuracy"


def cross_entropy(logits, labels):
    import optax

    return optax.softmax_cross_entropy_with_integer_labels(logits, labels)


def accuracy(logits, labels):
    import jax.numpy as jnp

    return (jnp.argmax(logits, -1) == labels).astype(jnp.float32)


DEFAULT = Task(cross_entropy, accuracy)


def from_config(cfg) -> Task:
    """The Task of cfg's [task] section (DEFAULT when both keys are empty); UsageError for a bad path."""
    t = cfg.task
    if not t.loss and not t.metric:
        return DEFAULT
    loss = _batched(plugins.resolve(t.loss, "task.loss")) if t.loss else cross_entropy
    metric = _batched(plugins.resolve(t.metric, "task.metric")) if t.metric else accuracy
    return Task(loss, metric, f"{t.loss or 'cross-entropy'}, {t.metric or 'accuracy'}")


def check(task: Task, num_classes: int, label_dtype="int32") -> None:
    """UsageError unless the task's functions give one scalar per example (abstractly: no data is read) on
    logits of shape (2, num_classes), and a finite one on a public probe batch (logits from a fixed seed,
    every class as a label once): a loss or metric that is NaN there would train to a NaN loss or report
    a NaN accuracy (not valid JSON)."""
    if task is DEFAULT:
        return
    import jax
    import jax.numpy as jnp
    import numpy as np

    logits = jax.ShapeDtypeStruct((2, num_classes), jnp.float32)
    labels = jax.ShapeDtypeStruct((2,), jnp.dtype(label_dtype))
    for name, fn in (("task.loss", task.loss), ("task.metric", task.metric)):
        try:
            out = jax.eval_shape(fn, logits, labels)
        except Exception as err:  # the user's function fails on one example's logits and label
            raise UsageError(f"{name} fails on one example's logits ({num_classes},) and label: "
                             f"{type(err).__name__}: {_first_line(err)}") from None
        if getattr(out, "shape", None) != (2,):
            raise UsageError(f"{name} must return one scalar per example; on logits ({num_classes},) it returned "
                             f"shape {tuple(getattr(out, 'shape', ())[1:])}")
    probe_labels = np.arange(num_classes).astype(label_dtype)
    probe_logits = np.random.default_rng(0).normal(size=(num_classes, num_classes)).astype(np.float32)
    for name, fn in (("task.loss", task.loss), ("task.metric", task.metric)):
        try:
            values = np.asarray(fn(jnp.asarray(probe_logits), jnp.asarray(probe_labels)), np.float64)
        except Exception as err:
            raise UsageError(f"{name} fails on a public probe batch of logits ({num_classes},): "
                             f"{type(err).__name__}: {_first_line(err)}") from None
        if not np.isfinite(values).all():
            raise UsageError(f"{name} returns NaN or infinite values on a public probe batch (random logits of shape "
                             f"({num_classes},), each class as a label once); it must be finite for every class")


def check_label_dtype(cfg, dtype: str) -> None:
    """UsageError unless the labels' dtype suits cfg's task: the default task (cross-entropy, accuracy)
    reads integer class indices; a plugged-in task takes what its functions take (tanplan.task.check)."""
    import numpy as np

    if dtype and from_config(cfg) is DEFAULT and not np.issubdtype(np.dtype(dtype), np.integer):
        raise UsageError(f"the dataset's labels have dtype {dtype}; the default task (cross-entropy, accuracy) reads "
                         "integer class labels 0..num_classes-1: cast them, or name a task.loss and task.metric "
                         "that read these labels")


def _first_line(err: Exception) -> str:
    text = str(err).strip()
    return text.splitlines()[0] if text else "no message"


def _batched(per_example: Callable) -> Callable:
    import jax

    return jax.vmap(per_example)
