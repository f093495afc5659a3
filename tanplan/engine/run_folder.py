"""The files of one run, which of them are private, and how a run resumes from them.

    out/config.toml      the config (public)
    out/metrics.jsonl    one line per evaluation: test metrics and the ε spent (public)
    out/ledger.json      every release and the ε spent (public; written before each checkpoint, so a
                         kill in between leaves it ahead of the checkpoint: an over-report, never under)
    out/summary.json     the RunSummary (public)
    out/model/           the released model (public; tanplan.engine.release)
    out/checkpoint/      PRIVATE, owner-only: orbax checkpoints, the run's secret (run_secret.json) and
                         the training diagnostics (train_diagnostics.jsonl: loss and accuracy of the
                         private batches, without noise); damaged checkpoints a resume moved aside
                         (<step>.damaged-<time>: tanplan deletes no checkpoint it did not write in this
                         process). Whoever reads it can replay the noise: never publish it.
    out/.tanplan.lock    held while a process trains into out
    out/audit_run.json   only in an audit's run (tanplan.workflow.audit, final_audit): written when the folder
                         is opened, before the secret or any step, so that a kill at any point leaves the
                         folder marked as trained with canaries, NOT a private release

An audit's run is never resumed and never reused: its canaries' secret lived in the audit's memory only, so
a resume could not continue it, and a run trained on into it would release parameters that saw canaries
under a summary without `audit_canaries` / `private_release: false`. RunFolder refuses both (`audit_evidence`:
the marker, or an audit's summary.json or model card when the marker is gone).

workdir None: a run that writes nothing (tests, benchmarks); its secret lives in memory only. What a
resume must match, and what the secret is bound to: tanplan.engine.run_identity.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

from tanplan.config import record_to_toml
from tanplan.dp import secret as run_secret
from tanplan.engine.checkpoint import Checkpoints
from tanplan.engine.release import FOLDER as MODEL_FOLDER
from tanplan.engine.release import write_model
from tanplan.engine.run_identity import differences
from tanplan.errors import UsageError
from tanplan.fileio import exclusive, write_json_atomic, write_text_atomic

METRICS = "metrics.jsonl"
CHECKPOINT = "checkpoint"
DIAGNOSTICS = "train_diagnostics.jsonl"
AUDIT_MARKER = "audit_run.json"
AUDIT_REPORTS = ("audit.json", "final_audit.json")  # what an audit writes beside its run folder
AUDIT_NOTE = {"private_release": False,
              "note": "this run was trained by a privacy audit, with canaries: it is NOT a private release, and it "
                      "is never resumed (its canaries' secret lived in the audit's memory only)"}


def audit_evidence(folder: str | Path) -> str | None:
    """The file that shows `folder` is an audit's run (trained with canaries: not a private release), or None.
    The marker first; for a folder written before it existed, or with it deleted, an audit's summary.json or
    model/model.json (`audit_canaries`, `private_release: false`)."""
    folder = Path(folder)
    if (folder / AUDIT_MARKER).exists():
        return AUDIT_MARKER
    for name in ("summary.json", f"{MODEL_FOLDER}/model.json"):
        try:
            record = json.loads((folder / name).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue  # absent or unreadable: no evidence either way
        if isinstance(record, dict) and (record.get("audit_canaries") or record.get("private_release") is False):
            return name
    return None


def check_audit_folder(out: str | Path, *, resume: bool, audit: bool) -> None:
    """UsageError when a run may not go into `out` because of an audit (module docstring): a resume of an
    audit's run, any other run into an audit's run or into the folder of an audit's report, an audit's run
    into a folder that already holds one. Reads only: called before anything is created."""
    out = Path(out)
    found = audit_evidence(out) if out.is_dir() else None
    if found and resume:
        raise UsageError(f"--resume is not allowed: {str(out)!r} holds an audit's run ({found}: trained with canaries, "
                         "not a private release); an audited run is never resumed, its canaries lived in memory "
                         "only: run the audit again into a new --out")
    if found:
        raise UsageError(f"--out {str(out)!r} is not allowed: it already holds an audited run ({found}: trained "
                         "with canaries, not a private release): choose a new --out")
    report = next((n for n in AUDIT_REPORTS if (out / n).exists()), None) if not audit else None
    if report:
        raise UsageError(f"--out {str(out)!r} is not allowed: it holds an audit's outputs ({report}), whose run was "
                         "trained with canaries: choose a new --out")


class RunFolder:
    """Context manager over a run's folder: the lock, the checkpoints and the secret."""

    def __init__(self, out: str | Path | None, *, resume: bool, primary: bool = True, lock: bool = True,
                 audit: bool = False):
        """audit: the folder of an audit's run (trained with canaries): marked as such when opened."""
        if out is not None and str(out).strip() == "":
            raise UsageError("--out '' is not allowed: name a folder (an empty path would write into the current one)")
        self.out = Path(out) if out is not None else None
        self.resume, self.primary, self.lock, self.audit = resume, primary, lock, audit
        self.checkpoints = None
        self._lock = None
        self._before: set[str] | None = None  # the folder's entries before this run (None: it did not exist)
        self._discard = False

    def __enter__(self) -> "RunFolder":
        if self.out is None:
            return self
        if self.out.exists() and not self.out.is_dir():
            raise UsageError(f"--out {str(self.out)!r} is not allowed: it is a file, not a folder")
        check_audit_folder(self.out, resume=self.resume, audit=self.audit)
        self._before = {p.name for p in self.out.iterdir()} if self.out.exists() else None
        if self.lock:
            self._lock = exclusive(self.out, "run")
            self._lock.__enter__()
        try:
            if self.audit and self.primary:  # before the secret and any step: a kill leaves the folder marked
                self.out.mkdir(parents=True, exist_ok=True)
                write_json_atomic(self.out / AUDIT_MARKER, AUDIT_NOTE)
            self.checkpoints = Checkpoints(self.out / CHECKPOINT)
            latest = self.checkpoints.latest_step()
            if latest is not None and not self.resume:
                raise UsageError(f"--out {str(self.out)!r} already holds a checkpoint at step {latest}: pass --resume "
                                 "to continue it, or choose a new --out")
        except BaseException:
            self.__exit__(*sys.exc_info())
            raise
        return self

    def __exit__(self, *exc) -> None:
        if self.checkpoints is not None:
            self.checkpoints.close()
            self.checkpoints = None
        if self._lock is not None:
            self._lock.__exit__(*exc)
            self._lock = None
        if self._discard:
            self._remove_new_entries()

    def discard_new(self) -> None:
        """On leaving, remove what this run created in its folder (a run refused before its first step: a bad
        row in the first batch read). Only entries absent when the run began go, the folder itself only if this
        run created it; never a checkpoint it did not write (a resumed run keeps everything)."""
        self._discard = self.out is not None and self.primary and not self.resume

    def _remove_new_entries(self) -> None:
        before = self._before or set()
        for path in self.out.iterdir():
            if path.name not in before:
                shutil.rmtree(path) if path.is_dir() and not path.is_symlink() else path.unlink()
        if self._before is None and not any(self.out.iterdir()):
            self.out.rmdir()

    @property
    def private_dir(self) -> Path | None:
        return self.out / CHECKPOINT if self.out is not None else None

    def secret(self, noise_seed: int, identity: dict | None = None, *, create: bool = True):
        """The run's secret, bound to its identity: reused only by a resume of the same run
        (tanplan.dp.secret.for_run; identity: tanplan.engine.run_identity.run_identity)."""
        return run_secret.for_run(self.private_dir, noise_seed, identity=identity, resume=self.resume, create=create)

    def restore(self, template, fingerprint: dict, log=print):
        """(state, meta) of the newest intact checkpoint, or None; UsageError if its config differs."""
        if self.checkpoints is None or not self.resume:
            return None
        found = self.checkpoints.restore_intact(template)
        if found is None:  # nothing to continue: a fresh run (stages resume their runs whenever they can)
            return None
        state, meta, skipped = found
        for reason in skipped:  # each damaged newer checkpoint, moved aside (never deleted)
            log(f"tanplan: {reason}; resuming from the newest intact checkpoint")
        changed = differences(meta["fingerprint"], fingerprint)
        if changed:
            raise UsageError(f"--resume is not allowed: the config differs from the checkpoint's in "
                             f"{', '.join(changed)}; an exact resume needs the same plan, data, model and optimizer")
        return state, meta

    def begin(self, record: dict, start: int) -> None:
        """Write config.toml and keep metrics.jsonl's evaluations up to `start` (later ones are redone).
        Called only once the resume is accepted, so a refused resume truncates nothing. record: the
        Config's (tanplan.job.RunJob.record)."""
        if self.out is None or not self.primary:
            return
        write_text_atomic(self.out / "config.toml", record_to_toml(record))
        for path in (self.out / METRICS, self.out / CHECKPOINT / DIAGNOSTICS):
            if start == 0:
                path.unlink(missing_ok=True)
            elif path.exists():
                kept = [json.dumps(r) for r in read_metrics(path) if r["step"] <= start]
                write_text_atomic(path, "".join(line + "\n" for line in kept))

    def append_metrics(self, record: dict) -> None:
        if self.out is not None and self.primary:
            with open(self.out / METRICS, "a", encoding="utf-8") as f:
                f.write(json.dumps(record) + "\n")

    def append_diagnostics(self, record: dict) -> None:
        """Training loss and accuracy of the private batches (no noise): into the private folder only."""
        if self.out is not None and self.primary:
            with open(self.out / CHECKPOINT / DIAGNOSTICS, "a", encoding="utf-8") as f:
                f.write(json.dumps(record) + "\n")

    def save(self, step: int, state, meta: dict, ledger) -> None:
        """ledger.json first (a kill in between over-reports), then the checkpoint."""
        if self.out is None:
            return
        if self.primary:
            write_json_atomic(self.out / "ledger.json", ledger.to_dict())
        self.checkpoints.save(step, state, meta)

    def write_ledger(self, ledger, *, with_pld: bool = False) -> None:
        if self.out is not None and self.primary:
            write_json_atomic(self.out / "ledger.json", ledger.to_dict(with_pld=with_pld))

    def write_summary(self, summary) -> None:
        """summary.json: the RunSummary's JSON (tanplan.outcomes.run_summary)."""
        if self.out is not None and self.primary:
            write_json_atomic(self.out / "summary.json", summary.to_dict())

    def write_model(self, params, card: dict) -> str | None:
        if self.out is None or not self.primary:
            return None
        write_model(self.out, params, card)
        return MODEL_FOLDER


def read_metrics(path: Path) -> list[dict]:
    """The evaluations in metrics.jsonl; a partial or unreadable line (a process killed mid-write) is dropped."""
    records = []
    for line in Path(path).read_text(encoding="utf-8", errors="replace").splitlines():
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(record, dict) and isinstance(record.get("step"), int):
            records.append(record)
    return records
