"""The record of a sweep: its spec, its Optuna studies in DIR/study.sqlite3, and each trial's outcome.

Everything the driver, the trials and the results need to agree on lives here, so that none of them
imports another: the metric, the trial states, the spec, how the study is opened and read, and the three
records that cross a boundary as plain dicts, typed here on arrival: a trial's job (Ray's config), its
report (what a trial tells Ray Tune) and its row in the study (Optuna's user attributes).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import sqlite3
from pathlib import Path
from typing import Any, Mapping
from urllib.parse import quote

from tanplan.errors import UsageError
from tanplan.outcomes.sweep import SweepScale
from tanplan.workflow.sweep.space import Dimension

METRIC = "test_accuracy"
STUDY_FILE = "study.sqlite3"
SEARCH_STUDY = "search"
RERUN_STUDY = "reruns"
RERUN_SEED_STRIDE = 1000  # re-run seed j of a trial = its search seed + j * stride: fresh, reproducible

# Trial states as the study records them (the `status` user attribute).
FINISHED, PRUNED, DIVERGED, ERROR, INTERRUPTED = "finished", "pruned", "diverged", "error", "interrupted"


@dataclasses.dataclass(frozen=True)
class SweepSpec:
    """Everything a sweep needs, resolved and validated before Ray starts."""

    base: dict  # the trial config as a dict: proxy batch set, σ and δ of the target pinned
    dims: tuple[Dimension, ...]
    trials: int
    top_k: int
    seeds: int
    scheduler: str
    max_concurrent: int
    startup_trials: int
    seed: int
    steps: int
    eval_every: int
    target: SweepScale  # the target's Plan (or B and S, non-private)
    proxy: SweepScale  # the proxy's

    def meta(self) -> dict:
        """What must not change between a sweep and its --resume."""
        return json.loads(json.dumps({"base": self.base, "dims": [d.to_dict() for d in self.dims],
                                      "seed": self.seed}))


# ---------------------------------------------------------------- the records that cross Ray and Optuna as dicts

def _known(cls, data: Mapping | None) -> dict:
    """The entries of `data` that are fields of the dataclass cls (Ray and Optuna add their own)."""
    names = {f.name for f in dataclasses.fields(cls)}
    return {k: v for k, v in (data or {}).items() if k in names}


@dataclasses.dataclass(frozen=True, kw_only=True)
class TrialJob:
    """One training of a sweep: a configuration (searched name -> value), its search trial and seed."""

    params: Mapping[str, Any]
    trial: int
    seed: int
    kind: str  # "search" | "rerun"

    def to_dict(self) -> dict:
        """The job in Ray Tune's config {"job": ...} (plain, so that Tune can record it)."""
        return {"params": dict(self.params), "trial": self.trial, "seed": self.seed, "kind": self.kind}

    @classmethod
    def of(cls, config: Mapping) -> "TrialJob":
        """The job of Ray Tune's config {"job": {...}} (or of the job's own dict)."""
        return cls(**config.get("job", config))


@dataclasses.dataclass(frozen=True, kw_only=True)
class TrialReport:
    """What a trial reports to Ray Tune (trial_entry's results), as the driver reads it back."""

    final: bool = False  # the last report: the trial's outcome
    status: str = FINISHED
    test_accuracy: float | None = None
    wall_seconds: float | None = None
    time_total_s: float | None = None  # Ray's own clock
    step: float | None = None
    training_iteration: int | None = None
    error: str = ""

    @classmethod
    def of(cls, result: Mapping | None) -> "TrialReport":
        return cls(**_known(cls, result))


@dataclasses.dataclass(frozen=True, kw_only=True)
class TrialRecord:
    """A trial's row in the study (its Optuna user attributes, `outcome`'s row and the searcher's)."""

    status: str = ERROR
    seed: int | None = None
    test_accuracy: float | None = None
    last_test_accuracy: float | None = None  # a pruned trial's last evaluation
    step: float | None = None
    wall_seconds: float | None = None
    epsilon_rdp: float | None = None
    requeued_from: int | None = None
    source_trial: int | None = None  # a re-run's search trial
    error: str = ""

    @classmethod
    def of(cls, attrs: Mapping | None) -> "TrialRecord":
        return cls(**_known(cls, attrs))


# ---------------------------------------------------------------- the study (SQLite, in the driver)

def storage_url(out: Path) -> str:
    return f"sqlite:///{(Path(out) / STUDY_FILE).resolve()}"


def open_storage(out: Path):
    """The Optuna storage of the sweep in DIR: one SQLite file, DIR/study.sqlite3, for both studies."""
    import optuna

    return optuna.storages.RDBStorage(storage_url(out))


def open_studies(out: Path, spec: SweepSpec, *, resume: bool, storage=None):
    """(search study, re-run study) in DIR/study.sqlite3; refuse to mix two different sweeps."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    out = Path(out)
    exists = (out / STUDY_FILE).exists()
    storage = storage or open_storage(out)
    names = {s.study_name for s in optuna.get_all_study_summaries(storage)} if exists else set()
    if SEARCH_STUDY in names:
        search = optuna.load_study(study_name=SEARCH_STUDY, storage=storage)
        if not resume:
            raise UsageError(f"{out} already holds a sweep ({len(search.trials)} trials): pass --resume to "
                             "continue it, or choose another --out")
        stored = search.user_attrs.get("meta")
        if stored != spec.meta():
            raise UsageError(f"--resume: {out} holds a sweep of a different config, space or proxy batch "
                             f"({_first_difference(stored, spec.meta())}); choose another --out")
    else:
        search = optuna.create_study(study_name=SEARCH_STUDY, storage=storage, direction="maximize")
        search.set_user_attr("meta", spec.meta())
    reruns = optuna.create_study(study_name=RERUN_STUDY, storage=storage, direction="maximize",
                                 load_if_exists=True)
    return search, reruns


def _first_difference(a: Any, b: Any, path: str = "") -> str:
    if isinstance(a, dict) and isinstance(b, dict):
        for key in sorted(set(a) | set(b), key=str):
            if a.get(key) != b.get(key):
                return _first_difference(a.get(key), b.get(key), f"{path}.{key}" if path else str(key))
    return f"{path or 'value'}: stored {a!r}, now {b!r}"


def requeue_interrupted(study, storage) -> list[int]:
    """Trials left RUNNING by a killed sweep: mark them interrupted and queue them again, same seed.

    `storage` is the one the study was opened on (open_storage). A RUNNING trial of an earlier process
    has no live `optuna.trial.Trial` here, so its attribute and state are written through the storage's
    own trial-level methods (public methods of `optuna.storages.RDBStorage`); the state comes last.
    """
    from optuna.trial import TrialState

    study_id = storage.get_study_id_from_name(study.study_name)
    numbers = []
    for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        trial_id = storage.get_trial_id_from_study_id_trial_number(study_id, t.number)
        storage.set_trial_user_attr(trial_id, "status", INTERRUPTED)
        storage.set_trial_state_values(trial_id, TrialState.FAIL)
        seed = TrialRecord.of(t.user_attrs).seed
        attrs = {"requeued_from": t.number, **({} if seed is None else {"seed": seed})}
        study.enqueue_trial(dict(t.params), user_attrs=attrs, skip_if_exists=False)
        numbers.append(t.number)
    return numbers


def finished_count(study) -> int:
    """Trials that reached an outcome (finished, pruned, diverged, error); interrupted ones do not count."""
    from optuna.trial import TrialState

    done = (TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL)
    return sum(1 for t in study.get_trials(deepcopy=False, states=done)
               if TrialRecord.of(t.user_attrs).status != INTERRUPTED)


def running_numbers(study) -> list[int]:
    from optuna.trial import TrialState

    return [t.number for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))]


_ROW = (METRIC, "wall_seconds", "train_seconds", "test_loss", "epsilon_rdp", "epsilon_pld", "sigma", "batch_size",
        "steps", "step")  # the numbers of a trial's last report kept in its row


def outcome(result: Mapping | None, error: bool) -> tuple[str, dict]:
    """(status, row of user attributes) of a trial from its last Ray result."""
    report = TrialReport.of(result)
    if error:
        status = ERROR
    elif report.final:
        status = report.status
        if status == FINISHED and not finite(report.test_accuracy):
            status = ERROR
    else:
        status = PRUNED  # stopped by the scheduler at an intermediate evaluation
    numbers = dict(result or {})
    if not finite(report.wall_seconds) and finite(report.time_total_s):
        numbers.update(wall_seconds=report.time_total_s)  # Ray's clock, for a trial stopped early
    row = {k: float(numbers[k]) for k in _ROW if finite(numbers.get(k))}
    if status == PRUNED and finite(report.test_accuracy):
        row["last_" + METRIC] = row.pop(METRIC)
    message = report.error
    if status == ERROR and error and not message:
        message = "the Ray worker failed (see DIR/ray for its log)"
    row.update(status=status, error=str(message)[:400])
    return status, row


def finite(value: Any) -> bool:
    """A real, finite number (not a bool, not NaN or infinite)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def rerun_jobs(search, reruns, spec: SweepSpec) -> list[TrialJob]:
    """(configuration, seed) pairs still to run: the top-k distinct configurations × n fresh seeds."""
    records = [TrialRecord.of(t.user_attrs) for t in reruns.trials]
    done = {(r.source_trial, r.seed) for r in records}
    jobs = []
    for trial in top_trials(search, spec.top_k):
        for j in range(1, spec.seeds + 1):
            seed = int(TrialRecord.of(trial.user_attrs).seed) + j * RERUN_SEED_STRIDE
            if (trial.number, seed) not in done:
                jobs.append(TrialJob(params=dict(trial.params), trial=trial.number, seed=seed, kind="rerun"))
    return jobs


def top_trials(study, k: int) -> list:
    """The k best finished trials with distinct parameters, best first (ties: earlier trial first)."""
    from optuna.trial import TrialState

    best, seen = [], set()
    for t in sorted(study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)),
                    key=lambda t: (-t.value, t.number)):
        key = json.dumps(t.params, sort_keys=True)
        if key not in seen:
            seen.add(key)
            best.append(t)
    return best[:k]


def check_study_file(out: Path, *, resume: bool) -> None:
    """Before any data is read: DIR/study.sqlite3, if there, must be a readable SQLite file holding
    Optuna's tables, and a sweep already in it is continued only with --resume (UsageError otherwise)."""
    path = Path(out) / STUDY_FILE
    if not path.exists() or path.stat().st_size == 0:  # 0 bytes: SQLite's empty database
        return
    try:
        with contextlib.closing(sqlite3.connect(f"file:{quote(str(path.resolve()))}?mode=ro", uri=True)) as db:
            health = db.execute("PRAGMA quick_check").fetchone()[0]
            names = {row[0] for row in db.execute("SELECT study_name FROM studies")}
    except sqlite3.Error as err:
        raise UsageError(f"{path} is not a sweep study that tanplan can read ({err}); move it away or choose "
                         "another --out") from None
    if health != "ok":
        raise UsageError(f"{path} is damaged (SQLite: {health.splitlines()[0]}); move it away or choose another --out")
    if SEARCH_STUDY in names and not resume:
        raise UsageError(f"{out} already holds a sweep: pass --resume to continue it, or choose another --out")
