"""Where a run's public scalars go besides metrics.jsonl: TensorBoard event files in the run folder (on by
default), and any writer a user plugs in (MLflow, Weights & Biases, a database) without tanplan
depending on it: by import path in the config, or as objects from Python.

    [tracking]
    tensorboard = true                                 # <run>/tensorboard/events.out.tfevents.*
    writers = ["my_pkg.tracking:make_writer"]          # make_writer(run_dir, cfg) -> writer or None

    train_and_evaluate(job, out, writers=[MyWriter()])  # the same from Python (job: tanplan.job.RunJob)

A writer is any object with write(step, scalars, wall_time) and close(). It receives exactly the records of
metrics.jsonl, one per evaluation (test metrics, `epsilon_spent`, `steps_per_second`, with the record's
`wall_time` as the time): what the run publishes, from its primary process only; never the training
diagnostics of the private batches, which carry no noise (tanplan.engine.run_folder). A writer that
raises is reported once on stderr and dropped: tracking never stops a training run.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from typing import Callable, Iterable, Protocol

from tanplan.config import TrackingConfig
from tanplan.errors import UsageError
from tanplan.job import RunJob

FOLDER = "tensorboard"
NOT_SCALARS = ("step", "wall_time")


class Writer(Protocol):
    def write(self, step: int, scalars: dict[str, float], wall_time: float) -> None: ...

    def close(self) -> None: ...


def resolve_factories(tracking: TrackingConfig) -> dict[str, Callable]:
    """The factories named by [tracking] writers, imported now: UsageError (one line) for a path that does
    not import or name a callable, before the run writes anything."""
    factories = {}
    for path in tracking.writers:
        module_name, _, attribute = path.partition(":")
        try:
            factory = getattr(importlib.import_module(module_name), attribute)
        except (ImportError, AttributeError) as err:
            raise UsageError(f"tracking.writers entry {path!r} is not allowed: it does not import ({err})") from None
        if not callable(factory):
            raise UsageError(f"tracking.writers entry {path!r} is not allowed: {attribute} is not callable")
        factories[path] = factory
    return factories


class TensorBoardWriter:
    """Scalars as TensorBoard event files, through tensorboardX (no TensorFlow needed)."""

    def __init__(self, logdir: str | Path, purge_step: int | None = None):
        from tensorboardX import SummaryWriter

        # purge_step: on a resume at step k, TensorBoard hides the earlier session's events after k, as
        # metrics.jsonl drops its lines past the checkpoint.
        self._writer = SummaryWriter(logdir=str(logdir), purge_step=purge_step)

    def write(self, step: int, scalars: dict[str, float], wall_time: float) -> None:
        for tag, value in scalars.items():
            self._writer.add_scalar(tag, value, global_step=step, walltime=wall_time)
        self._writer.flush()

    def close(self) -> None:
        self._writer.close()


class Tracker:
    """Fans each published record out to the writers."""

    def __init__(self, writers: Iterable[Writer]):
        self.writers = [w for w in writers if w is not None]

    def write(self, record: dict) -> None:
        scalars = {k: float(v) for k, v in record.items()
                   if k not in NOT_SCALARS and isinstance(v, (int, float)) and not isinstance(v, bool)}
        for writer in list(self.writers):
            self._call(writer, "write", int(record["step"]), scalars, float(record["wall_time"]))

    def close(self) -> None:
        for writer in list(self.writers):
            self._call(writer, "close")
        self.writers = []

    def _call(self, writer, method: str, *args) -> None:
        try:
            getattr(writer, method)(*args)
        except Exception as err:  # a tracking service down must not cost the run
            print(f"tanplan: warning: tracking writer {type(writer).__name__} failed ({type(err).__name__}: "
                  f"{err}); it is dropped for the rest of the run", file=sys.stderr)
            self.writers.remove(writer)


def open_tracker(job: RunJob, run_dir: Path | None, factories: dict[str, Callable], writers: Iterable[Writer] = (),
                 *, start: int = 0, primary: bool = True) -> Tracker:
    """The run's writers: TensorBoard in run_dir/tensorboard (when [tracking] tensorboard and the run has a
    folder), one from each factory (factory(run_dir, cfg), cfg the job's Config: its documented argument; it may
    return None), and the given writers; none off the primary process. A factory that raises is a UsageError
    naming it."""
    if not primary:
        return Tracker([])
    found: list = []
    cfg = job.config() if factories else None
    for path, factory in factories.items():
        try:
            found.append(factory(run_dir, cfg))
        except Exception as err:
            Tracker(found).close()
            raise UsageError(f"tracking.writers entry {path!r} failed to open a writer "
                             f"({type(err).__name__}: {err})") from None
    if job.tracking.tensorboard and run_dir is not None:
        found.insert(0, TensorBoardWriter(Path(run_dir) / FOLDER, purge_step=start + 1 if start else None))
    return Tracker([*found, *writers])
