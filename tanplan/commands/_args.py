"""argparse value types whose errors name the value and what is allowed, and shared output helpers."""

from __future__ import annotations

import argparse
import json
import math
import sys

from tanplan.errors import UsageError
from tanplan.fileio import _jsonable

PATH_OPTIONS = {"out": "--out", "make_features": "--make-features"}  # folders a command writes: never empty


def check_paths(args: argparse.Namespace) -> None:
    """UsageError for an empty (or blank) --out, on every command that takes one, before anything runs: Path("")
    is the current folder, so `--out ""` wrote a whole run, its private checkpoint/ and secret included, there."""
    for name, flag in PATH_OPTIONS.items():
        value = getattr(args, name, None)
        if isinstance(value, str) and not value.strip():
            raise UsageError(f"{flag} {value!r} is not allowed: name a folder (an empty path would write into the "
                             "current folder)")


def _number(text: str, kind):
    try:
        value = kind(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a {'whole ' if kind is int else ''}number") from None
    if isinstance(value, float) and not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"{text!r} is not a finite number")
    if isinstance(value, float) and value == 0.0 and any(c in "123456789" for c in text.lower().split("e")[0]):
        raise argparse.ArgumentTypeError(f"{text!r} is not representable as a double (it underflows to 0)")
    return value


def positive_int(text: str) -> int:
    value = _number(text, int)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} is not allowed: must be an integer >= 1")
    return value


def positive_float(text: str) -> float:
    value = _number(text, float)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{value} is not allowed: must be > 0")
    return value


def probability(text: str) -> float:
    """A δ: strictly between 0 and 1, and a normal double."""
    value = _number(text, float)
    if not 0 < value < 1:
        raise argparse.ArgumentTypeError(f"{value} is not allowed: must be in (0, 1)")
    if value < sys.float_info.min:
        raise argparse.ArgumentTypeError(f"{text} is not allowed: it is below {sys.float_info.min:.3g}, the smallest "
                                         "normal double")
    return value


def int_list(text: str) -> list[int]:
    """Comma-separated positive integers, e.g. 32,64,128."""
    return [positive_int(t.strip()) for t in text.split(",") if t.strip()]


def float_list(text: str) -> list[float]:
    return [positive_float(t.strip()) for t in text.split(",") if t.strip()]


def print_json(obj) -> None:
    json.dump(obj, sys.stdout, indent=2, default=_jsonable, ensure_ascii=False)
    sys.stdout.write("\n")


def print_table(rows: list[tuple[str, str]], title: str | None = None) -> None:
    """A compact two-column table for humans."""
    if title:
        print(title)
    width = max(len(k) for k, _ in rows)
    for key, value in rows:
        print(f"  {key:<{width}}  {value}")
