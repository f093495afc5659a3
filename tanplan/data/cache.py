"""Where generated datasets are cached: $TANPLAN_CACHE, else $XDG_CACHE_HOME/tanplan, else ~/.cache/tanplan."""

from __future__ import annotations

import contextlib
import io
import zipfile
from pathlib import Path

import numpy as np

from tanplan.fileio import write_bytes_atomic
from tanplan.runtime import cache_root


def cache_dir() -> Path:
    return Path(cache_root())


def save_arrays(path: Path, arrays: dict[str, np.ndarray]) -> Path:
    """Write arrays as an uncompressed .npz, atomically (a killed build leaves no half file)."""
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    return write_bytes_atomic(path, buf.getvalue())


def load_arrays(path: Path, keys: tuple[str, ...]) -> dict[str, np.ndarray] | None:
    """The arrays stored at path, or None when the file is absent, unreadable or lacks a key."""
    try:
        with np.load(path, allow_pickle=False) as f:
            return {k: f[k] for k in keys}
    except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile):
        return None


@contextlib.contextmanager
def build_lock(path: Path):
    """Hold an exclusive lock next to `path` while building it, so that parallel processes (Ray trials
    starting together) wait for one build instead of each spending a minute on the same data.
    Where file locks are unavailable (not POSIX) it does nothing: builds are atomic either way."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - Windows
        yield
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_name(path.name + ".lock"), "a") as handle:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)
