"""A result's fields as keyword arguments, for a wider result that carries them at its top level (the JSON
of a workflow holds the total's keys beside its own). JAX-free."""

from __future__ import annotations

import dataclasses
from typing import Any


def fields_of(result) -> dict[str, Any]:
    """{name: value} of a Result's fields, typed values kept (not to_dict()'s JSON); {} for None."""
    if result is None:
        return {}
    return {f.name: getattr(result, f.name) for f in dataclasses.fields(result)}
