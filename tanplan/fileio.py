"""Atomic file writes (a killed process leaves either the old file or the new one, never half of one),
and one exclusive lock per output folder."""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any

from tanplan.errors import UsageError


def write_bytes_atomic(path: str | os.PathLike, data: bytes) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, 0o666 & ~_umask())  # mkstemp makes 0600; give the file the usual permissions
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def write_text_atomic(path: str | os.PathLike, text: str) -> Path:
    return write_bytes_atomic(path, text.encode("utf-8"))


def write_json_atomic(path: str | os.PathLike, obj: Any) -> Path:
    return write_text_atomic(path, json.dumps(obj, indent=2, sort_keys=False, default=_jsonable) + "\n")


def save_figure_atomic(fig, path: str | os.PathLike, **kwargs) -> Path:
    """Save a matplotlib figure through a temporary file in the same folder."""
    import io

    buf = io.BytesIO()
    fmt = Path(path).suffix.lstrip(".") or "png"
    fig.savefig(buf, format=fmt, **kwargs)
    return write_bytes_atomic(path, buf.getvalue())


def _jsonable(obj: Any) -> Any:
    """numpy scalars and arrays, paths and dataclasses into plain JSON values."""
    import dataclasses

    if hasattr(obj, "tolist"):
        return obj.tolist()
    if isinstance(obj, os.PathLike):
        return os.fspath(obj)
    if dataclasses.is_dataclass(obj):
        return dataclasses.asdict(obj)
    raise TypeError(f"not JSON serialisable: {type(obj).__name__}")


LOCK_FILE = ".tanplan.lock"


@contextlib.contextmanager
def exclusive(directory: str | os.PathLike, what: str):
    """Hold DIR/.tanplan.lock while the block runs: a second tanplan `what` into DIR fails at once with
    UsageError. The lock dies with its process, so a SIGKILL never leaves it held."""
    import fcntl

    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    with open(directory / LOCK_FILE, "w") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            raise UsageError(f"another tanplan {what} is running in {str(directory)!r}: wait for it, or choose "
                             "another --out") from None
        yield
