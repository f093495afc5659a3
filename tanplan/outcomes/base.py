"""The base of every typed outcome: a frozen, keyword-only dataclass with a generic `to_dict()` (the JSON
a stage writes or a command prints) and `from_dict()` (a file read back: --best, --resume, load_run).

A field typed with another Result, a tuple of them, or a Plan is converted both ways; a field made with
`optional()` is left out of the dict when it is None (the JSON has no such key then). JAX-free.

    >>> from dataclasses import dataclass
    >>> @dataclass(frozen=True, kw_only=True)
    ... class Point(Result):
    ...     x: int
    ...     note: str | None = optional()
    >>> Point(x=1).to_dict(), Point.from_dict({"x": 2, "note": "n"})
    ({'x': 1}, Point(x=2, note='n'))
"""

from __future__ import annotations

import dataclasses
import types
import typing
from dataclasses import field
from typing import Any, Mapping

from tanplan.privacy.plan import Plan

_OPTIONAL = {"omit_none": True}


def optional(default=None, *, present_with: str | None = None):
    """A field absent from the JSON when None (a key the stage writes only sometimes); with present_with,
    one of a group of keys written together: absent exactly when that field is None (its own value may
    be None)."""
    return field(default=default, metadata={**_OPTIONAL, "present_with": present_with})


class Result:
    """Base of the typed results: generic to_dict / from_dict over the dataclass fields."""

    def to_dict(self) -> dict[str, Any]:
        out = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            anchor = f.metadata.get("present_with")
            if (getattr(self, anchor) is None) if anchor else (value is None and f.metadata.get("omit_none")):
                continue
            out[f.name] = plain(value)
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]):
        hints = typing.get_type_hints(cls)
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - names)
        if unknown:
            raise ValueError(f"{cls.__name__} has no field {unknown[0]!r}")
        return cls(**{k: typed(hints[k], v) for k, v in data.items()})


def plain(value):
    if isinstance(value, Plan):
        return value.to_dict(("rdp",))
    if hasattr(value, "to_dict"):  # a Result, or a typed result of a lower layer (RunSummary)
        return value.to_dict()
    if isinstance(value, tuple):
        return [plain(v) for v in value]
    if isinstance(value, Mapping):
        return {k: plain(v) for k, v in value.items()}
    return value


def typed(hint, value):
    """value (from JSON) converted to the field type `hint`: Results and tuples of them; others as they are."""
    if value is None:
        return None
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        inner = [a for a in args if a is not type(None)]
        return typed(inner[0], value) if len(inner) == 1 else value
    if origin is tuple:
        item = args[0] if args else Any
        return tuple(typed(item, v) for v in value)
    if isinstance(hint, type) and issubclass(hint, Result):
        return hint.from_dict(value)
    if hint is Plan:
        return plan_of(value)
    return value


def plan_of(data: Mapping) -> Plan:
    return Plan(int(data["dataset_size"]), int(data["batch_size"]), int(data["steps"]), float(data["sigma"]),
                float(data["delta"]), data.get("target_epsilon"), data.get("accountant", "pld"),
                data.get("neighbouring", "add_remove"))
