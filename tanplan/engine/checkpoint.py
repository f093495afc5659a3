"""Launch checkpoints with orbax: the train state as flat numpy leaves plus a JSON record.

    ckpt = LaunchCheckpoints(out / "checkpoint")
    ckpt.save(step, state_tree, meta)                 # meta: step, PRNG, sampler, layout, ledger, plan
    restored = ckpt.restore_latest(template_tree)     # (state_tree, meta) or None

The state (params, optimizer state, EMA, step) is saved leaf by leaf in tree-flatten order and rebuilt
from the treedef of a freshly created state, so any optax state survives the trip unchanged.
Atomicity: orbax writes each step into a temporary directory and renames it when complete; the last
two complete checkpoints are kept, and temporary directories left by a killed process are removed when
the manager is next opened. A kill at any moment therefore leaves the previous checkpoint usable.
A failed write (full disk, unwritable folder) raises CheckpointError and leaves earlier ones intact.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from tanplan.errors import TanplanError


class CheckpointError(TanplanError):
    """A checkpoint could not be written or read; earlier checkpoints are untouched."""

    exit_code = 1


def _leaf_dict(tree) -> dict[str, np.ndarray]:
    import jax

    return {f"leaf_{i:05d}": host_array(leaf) for i, leaf in enumerate(jax.tree.leaves(tree))}


def host_array(x) -> np.ndarray:
    """A numpy copy of x; for a replicated array spread over processes, this process's own copy."""
    if hasattr(x, "is_fully_addressable") and not x.is_fully_addressable:
        x = x.addressable_data(0)
    return np.asarray(x)


class LaunchCheckpoints:
    def __init__(self, directory: Path, max_to_keep: int = 2):
        import orbax.checkpoint as ocp

        self._ocp = ocp
        self.directory = Path(directory).absolute()
        try:
            self.manager = ocp.CheckpointManager(
                self.directory,
                options=ocp.CheckpointManagerOptions(max_to_keep=max_to_keep, create=True,
                                                     enable_async_checkpointing=False,
                                                     cleanup_tmp_directories=True),
            )
        except OSError as err:
            raise CheckpointError(f"cannot use the checkpoint folder {str(self.directory)!r}: {err}") from None

    def latest_step(self) -> int | None:
        return self.manager.latest_step()

    def save(self, step: int, tree, meta: dict) -> None:
        ocp = self._ocp
        try:
            self.manager.save(step, args=ocp.args.Composite(state=ocp.args.StandardSave(_leaf_dict(tree)),
                                                            meta=ocp.args.JsonSave(meta)), force=True)
            self.manager.wait_until_finished()
        except OSError as err:
            raise CheckpointError(f"could not write the checkpoint of step {step} under {str(self.directory)!r} "
                                  f"({err.strerror or err}); the previous checkpoint is kept") from None

    def restore_latest(self, template) -> tuple[Any, dict] | None:
        """(tree shaped like template with the saved leaves, meta) of the latest checkpoint, or None."""
        import jax

        step = self.manager.latest_step()
        if step is None:
            return None
        ocp = self._ocp
        leaves, treedef = jax.tree.flatten(template)
        target = {f"leaf_{i:05d}": np.zeros(np.shape(x), np.asarray(x).dtype) for i, x in enumerate(leaves)}
        got = self.manager.restore(step, args=ocp.args.Composite(state=ocp.args.StandardRestore(target),
                                                                 meta=ocp.args.JsonRestore()))
        state = got["state"]
        if sorted(state) != sorted(target):
            raise CheckpointError(f"checkpoint of step {step} in {str(self.directory)!r} does not match this "
                                  f"model ({len(state)} saved arrays, {len(target)} expected)")
        restored = [np.asarray(state[k]) for k in sorted(target)]
        for k, a, t in zip(sorted(target), restored, (target[k] for k in sorted(target))):
            if a.shape != t.shape:
                raise CheckpointError(f"checkpoint of step {step}: array {k} has shape {a.shape}, "
                                      f"this model expects {t.shape}")
        return jax.tree.unflatten(treedef, restored), dict(got["meta"])

    def close(self) -> None:
        self.manager.close()
