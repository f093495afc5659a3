"""A sweep's best configuration read back from its best.json (`tanplan fit --best`, `launch --best`), and
the registry of the releases made on the private set for it.

best.json is what `tanplan sweep` writes (tanplan.outcomes.sweep.SweepResult: the best configuration's
overrides under "best"); a file holding only {"overrides": {...}} is accepted too.

The registry (private_releases.json beside best.json) records every stage that trained on the private set
for that best.json besides the sweep's own trials: a `tanplan fit --best` with tuning.data = "private", and
the batch law (ladder or fit) of a `tanplan run` with private tuning, recorded before they train (`recording`).
`launch --best` composes the ledgers of every recorded folder with the sweep's and the launch's, and refuses
(one line, exit 2, before any data is read) where a recorded release cannot be accounted: a registry that
cannot be read, a folder gone, a ledger unreadable or missing, a stage still training (`recorded_releases`).
What it cannot see is a release never recorded: a registry deleted with its best.json's folder kept.
"""

from __future__ import annotations

import contextlib
import json
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from tanplan.errors import UsageError
from tanplan.fileio import write_json_atomic
from tanplan.outcomes.privacy_spent import TuningRecord
from tanplan.workflow.privacy_spent import ledgers_under


def load_best_overrides(path: str | Path | None) -> dict:
    """The dotted overrides of the best sweep configuration (best.json from `tanplan sweep`)."""
    if not path:
        return {}
    path = Path(path)
    if not path.is_file():
        raise UsageError(f"--best {path} is not allowed: no such file (give the best.json a sweep wrote)")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError:
        raise UsageError(f"--best {path} is not a text file: give the best.json a sweep wrote") from None
    except json.JSONDecodeError as err:
        raise UsageError(f"--best {path} is not valid JSON: {err.msg} at line {err.lineno}") from None
    if not isinstance(data, dict):
        raise UsageError(f"--best {path} holds a JSON {type(data).__name__}, not an object: give the best.json a "
                         "sweep wrote")
    best = data.get("best")
    record = best if isinstance(best, dict) else data  # best.json of `tanplan sweep`: {"best": {"overrides": ...}}
    overrides = record.get("overrides")
    if not isinstance(overrides, dict):
        raise UsageError(f"--best {path} has no 'overrides' object: give the best.json a sweep wrote")
    bad = [key for key in overrides if not isinstance(key, str) or "." not in key]
    if bad:
        raise UsageError(f"--best {path}: override {bad[0]!r} is not allowed: keys are section.key, e.g. "
                         "train.learning_rate")
    read_registry(path)  # the releases recorded beside it must be readable: refused here, before any data
    return dict(overrides)


# ---------------------------------------------------------------------------------------------------
# The registry of private releases made for a best.json (`launch --best` composes them)

REGISTRY = "private_releases.json"
_WRITERS = ".private_releases.lock"  # held (exclusive) while the registry is read, changed and replaced
_TRAINING = ".private_releases.training"  # held (shared) by every stage while it trains on the private set


@dataclass(frozen=True)
class Release:
    """One stage recorded in the registry: `command` trained on the private set into the folder `out`
    (absolute); `ledgers` is the number of ledger.json files below it when it finished (None: it has not
    finished, or it stopped: its ledgers as they stand hold every release it made, each written before it)."""

    command: str
    out: str
    ledgers: int | None = None


def registry_of(best_path: str | Path) -> Path:
    """The registry beside a best.json."""
    return Path(best_path).parent / REGISTRY


def read_registry(best_path: str | Path) -> list[Release]:
    """The releases recorded beside best_path ([] when there is no registry); UsageError for a registry that
    cannot be read or is not one tanplan wrote: the releases it records cannot be accounted."""
    path = registry_of(best_path)
    if not path.exists():
        return []
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        releases = [Release(str(r["command"]), str(r["out"]), _count(r["ledgers"])) for r in data["releases"]]
        if not all(Path(r.out).is_absolute() for r in releases):
            raise ValueError("a folder that is not an absolute path")
    except (OSError, UnicodeDecodeError, ValueError, TypeError, KeyError, AttributeError) as err:
        why = err.strerror if isinstance(err, OSError) else "not the JSON tanplan writes"
        raise UsageError(f"--best {best_path}: the registry of its private releases {str(path)!r} cannot be read "
                         f"({why}): the releases it records on the private set cannot be accounted; restore it as "
                         "tanplan wrote it") from None
    return releases


def _count(value) -> int | None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
        raise ValueError("a ledger count that is not a whole number")
    return value


def _write(best_path: str | Path, releases: list[Release]) -> None:
    write_json_atomic(registry_of(best_path), {
        "what": "releases on the private set made for best.json beside this file; `tanplan launch --best` "
                "composes every ledger below these folders with the launch's",
        "releases": [asdict(r) for r in releases]})


@contextlib.contextmanager
def _locked(best_path: str | Path, name: str, mode: int):
    """flock(mode) on a lock file beside best.json, released when the block ends (or the process dies)."""
    import fcntl  # lazy: POSIX only, as fileio.exclusive

    with open(Path(best_path).parent / name, "a") as handle:
        fcntl.flock(handle, mode)
        yield


@contextlib.contextmanager
def recording(best_path: str | Path | None, out: str | Path, command: str, private: bool = True):
    """Record in the registry beside best_path, BEFORE the block trains, that `command` trains on the private
    set into `out`, and mark it finished (with its ledger count) when the block ends without an error.

    Guarantee: while the block runs, `launch --best` of this best.json refuses (it cannot account a stage
    still releasing); after it, every ledger below `out` is composed with the launch's, and a finished
    stage whose ledgers are fewer than recorded is refused. A registry that cannot be written is UsageError
    before anything trains. Nothing is recorded without best_path, or when `private` is False (public tuning
    data: nothing on the private set)."""
    if not best_path or not private:
        yield
        return
    import fcntl  # lazy: POSIX only, as fileio.exclusive

    out = str(Path(out).absolute())
    try:
        with contextlib.ExitStack() as held:
            held.enter_context(_locked(best_path, _TRAINING, fcntl.LOCK_SH))
            with _locked(best_path, _WRITERS, fcntl.LOCK_EX):
                _write(best_path, [r for r in read_registry(best_path) if r.out != out] + [Release(command, out)])
            entered = held.pop_all()
    except OSError as err:
        raise UsageError(f"--best {best_path}: `tanplan {command}` on the private set records its releases in "
                         f"{str(registry_of(best_path))!r} for `launch --best`, which cannot be written "
                         f"({err.strerror}); nothing was trained: make its folder writable") from None
    with entered:
        yield
        done = Release(command, out, sum(1 for _ in Path(out).rglob("ledger.json")))
        with _locked(best_path, _WRITERS, fcntl.LOCK_EX):
            _write(best_path, [done if r.out == out else r for r in read_registry(best_path)])


@dataclass(frozen=True)
class Recorded:
    """The registry beside a best.json, checked for `launch --best` (recorded_releases): its stages' folders,
    the δ of their ledgers, and how many ledgers they hold."""

    registry: Path
    releases: tuple[Release, ...] = ()
    folders: tuple[Path, ...] = ()
    deltas: frozenset = frozenset()
    runs: int = 0

    def check(self, run) -> None:
        """UsageError unless the recorded ledgers can be composed with the launch `run` (a RunPlan): at its δ."""
        if self.deltas and self.deltas != {run.delta}:
            raise UsageError(f"--best: the runs recorded in {str(self.registry)!r} were accounted at δ = "
                             f"{sorted(self.deltas)}, this launch at δ = {run.delta:g}: they cannot be composed; "
                             "launch with the config they trained")

    def tuning(self, record: TuningRecord | None, trials: Path | None,
               note: str) -> tuple[TuningRecord | None, list[Path], str]:
        """(the tuning record, the folders whose ledgers compose with the launch's, the note) once the recorded
        releases join the sweep's: any recorded release makes the tuning private (it touched the private set)."""
        folders = folders_of([trials, *self.folders])
        if not self.releases:
            return record, folders, note
        commands = " and ".join(sorted({f"`tanplan {r.command}`" for r in self.releases}))
        what = f"{self.runs} runs of {commands} recorded in {str(self.registry)!r}"
        if record is not None and record.tuning_data == "private":
            return (replace(record, source=f"{record.source}; and {what}"), folders,
                    f"{note}; and the {what} trained on the private set: composed too")
        swept = f"the sweep's proxies trained on {record.source}" if record is not None else "the sweep's proxies"
        private = TuningRecord(tuning_data="private", source=f"{what} (on the private set)")
        return private, folders, (f"{swept}, but the {what} trained on the private set: their releases are "
                                  "composed with the launch's")


def recorded_releases(best_path: str | Path) -> Recorded:
    """The registry beside best_path, checked before any data is read (UsageError where a recorded release
    cannot be accounted): no stage still training for it, every recorded folder there, every ledger below it
    readable, and no fewer ledgers than a finished stage recorded. An empty Recorded without a registry."""
    releases = read_registry(best_path)
    registry = registry_of(best_path)
    if not releases:
        return Recorded(registry)
    _not_training(best_path, registry)
    ledgers = []
    for r in releases:
        where = f"--best {best_path}: {str(registry)!r} records `tanplan {r.command}` into {r.out!r}"
        if not Path(r.out).is_dir():
            raise UsageError(f"{where}, which is gone: the releases it made on the private set cannot be accounted; "
                             "restore that folder")
        try:
            found = ledgers_under(r.out)
        except (OSError, UnicodeDecodeError, ValueError, TypeError, KeyError, AttributeError):
            raise UsageError(f"{where}, and a ledger.json below it cannot be read: the releases it made on the "
                             "private set cannot be accounted; restore it") from None
        if r.ledgers is not None and len(found) < r.ledgers:
            raise UsageError(f"{where}, which finished with {r.ledgers} run ledgers; {len(found)} are left: the "
                             "releases of the others cannot be accounted; restore them")
        ledgers += found
    deltas = frozenset(ledger.delta for ledger in ledgers if ledger.events())
    return Recorded(registry, tuple(releases), tuple(Path(r.out) for r in releases), deltas, len(ledgers))


def _not_training(best_path: str | Path, registry: Path) -> None:
    """UsageError while a recorded stage still trains on the private set (it holds the training lock)."""
    import fcntl  # lazy: POSIX only, as fileio.exclusive

    lock = Path(best_path).parent / _TRAINING
    if not lock.exists():
        return  # every recording stage creates it first: none has run since it was removed
    try:
        with open(lock) as handle:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        raise UsageError(f"--best {best_path}: a stage recorded in {str(registry)!r} is still training on the "
                         "private set: its releases cannot be accounted yet; launch when it has finished") from None
    except OSError as err:  # not a file we can lock: whether a stage still trains cannot be told
        raise UsageError(f"--best {best_path}: {str(lock)!r} cannot be locked ({err.strerror}): whether a stage "
                         f"recorded in {str(registry)!r} still trains on the private set cannot be told; restore "
                         "it as tanplan wrote it (an empty file)") from None


def folders_of(folders) -> list[Path]:
    """The folders whose ledgers compose (a folder, a list of them, or None), each once: folders that do not
    exist are left out, and a folder below another of them too (its ledgers are the other's already)."""
    if folders is None or isinstance(folders, (str, Path)):
        folders = [folders]
    found = []
    for folder in sorted({Path(f).resolve() for f in folders if f is not None and Path(f).is_dir()},
                         key=lambda p: len(p.parts)):
        if not any(folder == kept or kept in folder.parents for kept in found):
            found.append(folder)
    return found


__all__ = ["REGISTRY", "Recorded", "Release", "folders_of", "load_best_overrides", "read_registry",
           "recorded_releases", "recording", "registry_of"]
