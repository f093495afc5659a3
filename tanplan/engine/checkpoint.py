"""Run checkpoints with orbax: the train state as flat numpy leaves, plus a JSON record. One format for
every run (train, each proxy, the launch).

    ckpt = Checkpoints(out / "checkpoint")
    ckpt.save(step, state_tree, meta)              # meta: step, fingerprint, ledger, layout, sampler
    state, meta, skipped = ckpt.restore_intact(template_tree)

The state (params, optimizer state, EMA, step) is saved leaf by leaf in tree-flatten order and rebuilt
from the treedef of a freshly created state, so any optax state survives the trip unchanged; meta holds
a checksum of those leaves. The folder is private (owner-only): it also holds the run's secret
(tanplan.dp.secret), which is never written anywhere else.

Atomicity and damage: orbax writes each step into a temporary directory and renames it when complete;
temporary directories left by a killed process (never a complete checkpoint) are removed whenever the
folder is opened or closed, in this process's thread (never by orbax's background cleanup, which would
outlive a process that exits right after opening the folder). Opening and closing leave no thread
behind. A checkpoint is deleted only by the rotation of the process that wrote it:
of the checkpoints this process saved, those older than the newest MAX_TO_KEEP in the folder go; a
checkpoint written by an earlier session (the one a resume started from) is never deleted.
`restore_intact` takes the newest checkpoint that reads back whole and matches its checksum; unreadable
newer ones are moved aside, inside the private folder, to `<step>.damaged-<UTC time>` (the run redoes those
steps with the same secret, so it releases nothing new), and it says which. When no checkpoint reads back,
nothing is moved: UsageError (exit 2: the folder given to resume cannot be resumed) names them. Only bytes
that cannot be read back or fail their checksum are damage: a checkpoint of another structure (another
model, the EMA switched on or off) is a user's mistake, refused with UsageError before any state is read.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import time
from pathlib import Path
from typing import Any

import numpy as np

from tanplan.errors import CheckpointError, UsageError

MAX_TO_KEEP = 2


class _Damaged(Exception):
    """A checkpoint that cannot be read back whole (internal: restore_intact skips it)."""


def host_array(x) -> np.ndarray:
    """A numpy copy of x; for a replicated array spread over processes, this process's own copy."""
    if hasattr(x, "is_fully_addressable") and not x.is_fully_addressable:
        x = x.addressable_data(0)
    return np.asarray(x)


def leaves_checksum(leaves) -> str:
    """sha256 over the dtype, shape and bytes of each leaf, in order: equal checksums, equal arrays."""
    digest = hashlib.sha256()
    for leaf in leaves:
        arr = np.ascontiguousarray(host_array(leaf))
        digest.update(f"{arr.dtype}{arr.shape}".encode())
        digest.update(arr.tobytes())
    return digest.hexdigest()[:32]


class Checkpoints:
    def __init__(self, directory: Path, max_to_keep: int = MAX_TO_KEEP):
        import orbax.checkpoint as ocp

        self._ocp = ocp
        self.directory = Path(directory).absolute()
        self.max_to_keep = max_to_keep
        self.written: list[int] = []  # steps this process saved: the only ones its rotation may delete
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            os.chmod(self.directory, 0o700)  # private: the run's secret lives here too
            self.remove_temporaries()
            # No max_to_keep: orbax would delete earlier sessions' too. No cleanup_tmp_directories: orbax runs
            # it in a thread that close() never joins; a process that exits right after opening the folder
            # (a resume refused at its secret) had that thread print an asyncio traceback ("cannot schedule
            # new futures after interpreter shutdown") after its one-line error. remove_temporaries does the
            # same, synchronously, on opening and on closing.
            self.manager = ocp.CheckpointManager(
                self.directory,
                options=ocp.CheckpointManagerOptions(create=True,
                                                     enable_async_checkpointing=False,
                                                     cleanup_tmp_directories=False),
            )
        except OSError as err:
            raise CheckpointError(f"cannot use the checkpoint folder {str(self.directory)!r}: {err}") from None

    def steps(self) -> list[int]:
        return sorted(self.manager.all_steps())

    def latest_step(self) -> int | None:
        steps = self.steps()
        return steps[-1] if steps else None

    def save(self, step: int, tree, meta: dict) -> None:
        ocp = self._ocp
        leaves = _leaves(tree)
        meta = {**meta, "state_checksum": leaves_checksum(leaves.values()), "structure": _signature(leaves.values())}
        try:
            self.manager.save(step, args=ocp.args.Composite(state=ocp.args.StandardSave(leaves),
                                                            meta=ocp.args.JsonSave(meta)), force=True)
            self.manager.wait_until_finished()
        except OSError as err:
            raise CheckpointError(f"could not write the checkpoint of step {step} under {str(self.directory)!r} "
                                  f"({err.strerror or err}); the previous checkpoint is kept") from None
        self.written.append(step)
        newest = set(self.steps()[-self.max_to_keep:])
        for old in [s for s in self.written if s not in newest]:  # rotation: only what this process wrote
            self.manager.delete(old)
            self.written.remove(old)

    def restore(self, step: int, template) -> tuple[Any, dict]:
        """(tree shaped like template with the saved leaves, meta) of one checkpoint; UsageError if it
        holds a state of another structure (nothing is touched), _Damaged if it cannot be read whole or
        does not match its checksum."""
        import jax

        ocp = self._ocp
        leaves, treedef = jax.tree.flatten(template)
        target = {f"leaf_{i:05d}": np.zeros(np.shape(x), np.asarray(x).dtype) for i, x in enumerate(leaves)}
        try:  # the record first: a checkpoint of another structure must not be mistaken for damage
            saved = dict(self.manager.restore(step, args=ocp.args.Composite(meta=ocp.args.JsonRestore()))["meta"])
        except Exception as err:
            raise _Damaged(f"checkpoint of step {step} is unreadable ({type(err).__name__})") from None
        wanted = _signature(target.values())
        if "structure" in saved and saved["structure"] != wanted:
            raise UsageError(f"the checkpoint of step {step} in {str(self.directory)!r} holds another training state "
                             f"({_describe_difference(saved['structure'], wanted)}): another model, or the EMA "
                             "switched on or off; nothing was deleted: resume with the config it was saved with, "
                             "or choose a new --out")
        try:
            got = self.manager.restore(step, args=ocp.args.Composite(state=ocp.args.StandardRestore(target),
                                                                     meta=ocp.args.JsonRestore()))
            state, meta = got["state"], dict(got["meta"])
        except Exception as err:  # orbax, tensorstore and json raise many kinds for damaged files
            raise _Damaged(f"checkpoint of step {step} is unreadable ({type(err).__name__})") from None
        if sorted(state) != sorted(target):
            raise CheckpointError(f"checkpoint of step {step} in {str(self.directory)!r} does not match this "
                                  f"model ({len(state)} saved arrays, {len(target)} expected)")
        restored = [np.asarray(state[k]) for k in sorted(target)]
        for k, a in zip(sorted(target), restored):
            if a.shape != target[k].shape:
                raise CheckpointError(f"checkpoint of step {step}: array {k} has shape {a.shape}, "
                                      f"this model expects {target[k].shape}")
        if meta.get("state_checksum") != leaves_checksum(restored):
            raise _Damaged(f"checkpoint of step {step} does not match its checksum (damaged files)")
        return jax.tree.unflatten(treedef, restored), meta

    def restore_intact(self, template) -> tuple[Any, dict, list[str]] | None:
        """(state, meta, moved) of the newest checkpoint that reads back whole, or None when there is none.
        Unreadable newer ones are moved aside to `<step>.damaged-<UTC time>` in the same private folder
        (never deleted) and described in `moved`. When none reads back, nothing is moved and UsageError
        names them. A checkpoint that reads back but belongs to another model is not damage: its error
        propagates."""
        damaged: list[tuple[int, str]] = []
        for step in reversed(self.steps()):
            try:
                state, meta = self.restore(step, template)
            except _Damaged as err:
                damaged.append((step, str(err)))
                continue
            moved = [f"{why}: moved aside to {self._move_aside(bad)!r}" for bad, why in damaged]
            if damaged:
                self.manager.reload()
            return state, meta, moved
        if damaged:
            raise UsageError(f"--resume is not possible: no checkpoint in {str(self.directory)!r} reads back whole "
                             f"({'; '.join(why for _, why in damaged)}); nothing was moved or deleted: resume "
                             "into a new --out, or move those step folders away to start this one over")
        return None

    def _move_aside(self, step: int) -> str:
        """Rename the folder of a damaged checkpoint so that the resumed run can write that step again."""
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
        target = self.directory / f"{step}.damaged-{stamp}"
        n = 1
        while target.exists():
            target, n = self.directory / f"{step}.damaged-{stamp}-{n}", n + 1
        (self.directory / str(step)).rename(target)
        return target.name

    def remove_temporaries(self) -> None:
        """Delete orbax's temporary step folders (a process killed while saving leaves them)."""
        if self.directory.is_dir():
            for path in self.directory.glob("*.orbax-checkpoint-tmp*"):
                shutil.rmtree(path, ignore_errors=True)

    def close(self) -> None:
        self.manager.close()
        self.remove_temporaries()


def _signature(leaves) -> list[list]:
    """[shape, dtype] of each leaf, in order: the structure a checkpoint must share with its resume."""
    return [[list(np.shape(x)), str(np.asarray(x).dtype)] for x in leaves]


def _describe_difference(saved: list, wanted: list) -> str:
    if len(saved) != len(wanted):
        return f"{len(saved)} saved arrays, {len(wanted)} expected"
    i = next(i for i, (a, b) in enumerate(zip(saved, wanted)) if a != b)
    return f"array {i} is {saved[i][1]}{tuple(saved[i][0])}, this run expects {wanted[i][1]}{tuple(wanted[i][0])}"


def _leaves(tree) -> dict[str, np.ndarray]:
    import jax

    return {f"leaf_{i:05d}": host_array(leaf) for i, leaf in enumerate(jax.tree.leaves(tree))}
