"""The Python API's arguments checked against their annotations before a stage runs: a value of the wrong
type is a UsageError naming the argument and what it takes (`train(123)`, `out=123`, `overrides=[b"..."]`,
`plan(sigma=True)`), never a TypeError from deep inside. The ranges (a batch size ≥ 1, a whole number of
steps) are the stages' and the Config's checks; this only says which kind of value an argument takes."""

from __future__ import annotations

import collections.abc
import functools
import inspect
import numbers
import os
import types
import typing
from typing import Any, Mapping

from tanplan.config import Config
from tanplan.errors import UsageError
from tanplan.runtime import configure_process

NAMES = {type(None): "None", bool: "True or False", int: "a whole number", float: "a number", str: "a string",
         os.PathLike: "a path", Config: "a tanplan Config", collections.abc.Callable: "a function",
         collections.abc.Mapping: "a mapping"}


def typed(fn):
    """fn with its arguments checked against its annotations. Numbers: int and float take any real number but
    a bool (the stage checks the range and whether it is whole); bool takes True or False only."""
    signature = inspect.signature(fn)
    hints: dict = {}

    @functools.wraps(fn)
    def checked(*args, **kwargs):
        if not hints:  # resolved on the first call: the annotations are strings until then
            hints.update({k: v for k, v in typing.get_type_hints(fn).items() if k != "return"})
        try:
            bound = signature.bind(*args, **kwargs)
        except TypeError as err:
            raise UsageError(f"tanplan.{fn.__name__}(): {err}") from None
        for name, value in bound.arguments.items():
            hint = hints.get(name)
            if hint is not None and not conforms(value, hint):
                shown = repr(value) if len(repr(value)) <= 60 else repr(value)[:57] + "..."
                raise UsageError(f"tanplan.{fn.__name__}({name}={shown}) is not allowed: {name} takes "
                                 f"{describe(hint)}")
            if isinstance(value, numbers.Integral) and type(value) is not int and not isinstance(value, bool):
                bound.arguments[name] = int(value)  # numpy's integers: the stages check `isinstance(x, int)`
        return fn(*bound.args, **bound.kwargs)

    return checked


def stage(fn):
    """typed(fn) for a stage that runs JAX, which first makes the process settings `tanplan` makes at its entry
    (tanplan.runtime.configure_process: XLA's CPU flag, the compilation cache): `tanplan.train` in a notebook
    steps as fast as `tanplan train` (without the flag: about 2x slower DP steps on the demo's proxies). The
    flag takes effect where JAX has not started a backend yet, the cache where JAX was not imported yet (its
    config reads the environment at import): in a notebook, call the stage before any JAX of your own."""
    checked = typed(fn)

    @functools.wraps(fn)
    def configured(*args, **kwargs):
        configure_process()
        return checked(*args, **kwargs)

    return configured


def _is_bool(value) -> bool:
    return isinstance(value, bool) or type(value).__name__ == "bool_"  # numpy's too


def conforms(value, hint) -> bool:
    """Whether value is of the annotation's kind (items of a list or a mapping's keys too, never consuming
    an iterator to check it)."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        return any(conforms(value, a) for a in args)
    if hint is Any:
        return True
    if hint is type(None):
        return value is None
    if hint is bool:
        return _is_bool(value)
    if hint in (int, float):
        return isinstance(value, numbers.Real) and not _is_bool(value)
    base = origin or hint
    if base is collections.abc.Callable:
        return callable(value)
    if base is collections.abc.Mapping:
        return isinstance(value, Mapping) and (not args or all(conforms(k, args[0]) for k in value))
    if base is collections.abc.Iterable:
        if not isinstance(value, collections.abc.Iterable) or isinstance(value, (str, bytes)):
            return False
        sized = isinstance(value, (list, tuple, set, frozenset, Mapping))
        return not (args and sized) or all(conforms(v, args[0]) for v in value)
    return isinstance(value, base) if isinstance(base, type) else True


def describe(hint) -> str:
    """What an annotation takes, in words: "a whole number or None", "a list, each item a string"."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        return " or ".join(dict.fromkeys(describe(a) for a in args))
    base = hint if hint in NAMES else origin or hint
    if base is collections.abc.Iterable:
        return f"a list, each item {describe(args[0])}" if args else "a list"
    return NAMES.get(base) or getattr(hint, "__name__", str(hint))
