"""A sweep's best configuration read back from its best.json (`tanplan fit --best`, `launch --best`).

best.json is what `tanplan sweep` writes (tanplan.outcomes.sweep.SweepResult: the best configuration's
overrides under "best"); a file holding only {"overrides": {...}} is accepted too.
"""

from __future__ import annotations

import json
from pathlib import Path

from tanplan.errors import UsageError


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
    return dict(overrides)


__all__ = ["load_best_overrides"]
