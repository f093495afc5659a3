"""The [sweep] section of an experiment config: search space and sweep settings. No JAX, no Ray.

    [sweep]
    trials = 20            # trials of the search (--trials overrides)
    top_k = 3              # best configurations re-run ...
    seeds = 3              # ... over this many fresh seeds, ranked by mean
    scheduler = "none"     # none | asha (stop weak trials at intermediate evaluations)
    max_concurrent = 0     # 0 = one trial per GPU, or one at a time on a CPU-only machine
    proxy_batch_size = 0   # default for --proxy-batch-size (0 = the flag is required)

    [sweep.space]          # one entry per searched key: a list of choices or a range
    learning_rate = { low = 0.5, high = 16.0, log = true }
    momentum = [0.0, 0.5, 0.9]
    aug_mult = [1, 2, 4]

Searchable keys are the short names of KEYS (the paper's axes: architecture, learning rate, momentum,
dampening, EMA decay, AugMult K, augmentation family, optimizer) or any dotted `section.key` of the
config. Every value a trial could take is checked against the config's own rules before Ray starts, so
a bad space stops with one line (UsageError, exit 2) instead of failing trial after trial.
Without [sweep.space], image datasets get the paper's grid (TAN, Sander et al. 2023 §4.2) and 1D data a small
space of the same axes.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any, Mapping

from tanplan.config import Config, check_tunable, check_value
from tanplan.errors import UsageError

# Short names of the searched keys -> the config key each one sets.
KEYS = {
    "model": "model.name",
    "learning_rate": "train.learning_rate",
    "momentum": "train.momentum",
    "dampening": "train.dampening",
    "ema_decay": "train.ema_decay",
    "aug_mult": "data.aug_mult",
    "augmentation": "data.augmentation",
    "optimizer": "train.optimizer",
    # Adamczewski et al. 2023: pre-pruning and gradient dropping (tanplan.dp.pruning, tanplan.dp.grad_drop)
    "prune_method": "pruning.method",
    "prune_rate": "pruning.rate",
    "grad_drop_method": "pruning.drop_method",
    "grad_drop_rate": "pruning.drop_rate",
}
ALIASES = {"architecture": "model", "lr": "learning_rate", "k": "aug_mult"}

# TAN, Sander et al. 2023 §4.2 and Table 2: the grid the paper searched on CIFAR-10 and ImageNet.
PAPER_GRID = {
    "learning_rate": [1.0, 2.0, 4.0, 8.0, 12.0, 16.0],
    "momentum": [0.0, 0.1, 0.5, 0.9, 1.0],
    "dampening": [0.0, 0.1, 0.5, 0.9, 1.0],
    "ema_decay": [0.9, 0.99, 0.999, 0.9999, 0.99999],
    "aug_mult": [1, 2, 4, 8, 16],
    "augmentation": ["crop_flip", "rrc", "simclr"],
}
# 1D signals (mnist1d): the same axes, sized for a laptop: AugMult multiplies the cost of a step by K.
SIGNAL_SPACE = {
    "learning_rate": {"low": 0.5, "high": 16.0, "log": True},
    "momentum": [0.0, 0.5, 0.9],
    "ema_decay": [0.0, 0.9, 0.99, 0.999],
    "aug_mult": [1, 2, 4],
    "augmentation": ["shift", "shift_scale_noise"],
}
_RANGE_KEYS = ("low", "high", "log", "step")


@dataclass(frozen=True)
class _Range:
    """A range of [sweep.space] as written (checked by _dimension): { low = ..., high = ..., log?, step? }."""

    low: Any
    high: Any
    log: Any = False
    step: Any = None


@dataclass(frozen=True)
class Dimension:
    """One searched key: `choices` (categorical), or a range [low, high], integer or float, maybe log."""

    name: str  # as written in [sweep.space] (short name or dotted key)
    path: str  # the config key it sets, e.g. "train.learning_rate"
    choices: tuple | None = None
    low: float | None = None
    high: float | None = None
    log: bool = False
    step: float | None = None
    integer: bool = False

    @property
    def is_choice(self) -> bool:
        return self.choices is not None

    def describe(self) -> str:
        if self.is_choice:
            return "{" + ", ".join(str(c) for c in self.choices) + "}"
        return f"[{self.low:g}, {self.high:g}]" + (" log" if self.log else "") + (" int" if self.integer else "")

    def to_dict(self) -> dict:
        return {k: v for k, v in dataclasses.asdict(self).items() if v is not None}


def default_space(data_kind: str) -> dict:
    """The space searched when [sweep.space] is absent: the paper's grid for images."""
    return dict(PAPER_GRID if data_kind == "image" else SIGNAL_SPACE)


def parse_space(raw: Mapping[str, Any], cfg: Config, *, augmentations=None, models=None) -> tuple[Dimension, ...]:
    """[sweep.space] -> Dimensions, each value checked against the config's rules.

    `augmentations` and `models` (names allowed for this dataset, when known) catch a family or an
    architecture that the trainer would reject only once a trial runs.
    """
    if not isinstance(raw, Mapping) or not raw:
        raise UsageError("[sweep.space] is empty: give at least one key to search, e.g. "
                         "learning_rate = { low = 0.5, high = 16.0, log = true }")
    dims, seen = [], {}
    for name, spec in _flatten(raw, cfg).items():
        path = _config_key(name, cfg)
        check_tunable([path], f"[sweep.space] {name}")
        if path in seen:
            raise UsageError(f"[sweep.space] sets {path} twice ({seen[path]!r} and {name!r}): keep one")
        seen[path] = name
        dim = _dimension(name, path, spec, cfg)
        _check_values(dim, cfg, augmentations=augmentations, models=models)
        dims.append(dim)
    return tuple(dims)


def _flatten(raw: Mapping[str, Any], cfg: Config) -> dict:
    """TOML reads `train.weight_decay = [...]` as {"train": {"weight_decay": [...]}}: undo that nesting."""
    sections = cfg.to_dict()
    flat = {}
    for name, spec in raw.items():
        nested = (name in sections and isinstance(spec, Mapping)
                  and not any(k in _RANGE_KEYS for k in spec))
        flat.update({f"{name}.{key}": value for key, value in spec.items()} if nested else {name: spec})
    return flat


def _config_key(name: str, cfg: Config) -> str:
    short = ALIASES.get(name, name)
    if short in KEYS:
        return KEYS[short]
    section, dot, key = name.partition(".")
    if dot and section in cfg.to_dict() and section != "sweep" and key in cfg.to_dict()[section]:
        return name
    raise UsageError(f"[sweep.space] key {name!r} is unknown: use {', '.join(KEYS)} or a config key "
                     "such as train.weight_decay")


def _dimension(name: str, path: str, spec: Any, cfg: Config) -> Dimension:
    where = f"[sweep.space] {name}"
    current = cfg.get(path)
    if isinstance(spec, list):
        if not spec:
            raise UsageError(f"{where} = [] is empty: list at least one choice")
        if any(isinstance(v, (list, dict)) for v in spec):
            raise UsageError(f"{where}: choices must be numbers, strings or booleans, got {spec!r}")
        choices = tuple(dict.fromkeys(spec))  # duplicates would only bias the sampler
        if isinstance(current, float):
            choices = tuple(dict.fromkeys(float(v) if _is_number(v) else v for v in choices))
        return Dimension(name, path, choices=choices)
    if isinstance(spec, Mapping):
        unknown = [k for k in spec if k not in _RANGE_KEYS]
        if unknown:
            raise UsageError(f"{where}: unknown range key {unknown[0]!r}; a range has low, high, log, step")
        if "low" not in spec or "high" not in spec:
            raise UsageError(f"{where}: a range needs both low and high, e.g. {{ low = 0.5, high = 16.0 }}")
        low, high, log, step = dataclasses.astuple(_Range(**spec))
        if not (_is_number(low) and _is_number(high)) or not (math.isfinite(low) and math.isfinite(high)):
            raise UsageError(f"{where}: low and high must be finite numbers, got {low!r} and {high!r}")
        if low > high:
            raise UsageError(f"{where}: low = {low} > high = {high}: the range is empty")
        if not isinstance(log, bool):
            raise UsageError(f"{where}: log = {log!r} must be true or false")
        if log and low <= 0:
            raise UsageError(f"{where}: a log range needs low > 0, got low = {low}")
        if step is not None and (not _is_number(step) or step <= 0):
            raise UsageError(f"{where}: step = {step!r} must be a number > 0")
        if step is not None and log:
            raise UsageError(f"{where}: step and log cannot be combined")
        if isinstance(current, bool) or isinstance(current, str):
            raise UsageError(f"{where}: {path} is not numeric; list the choices instead")
        integer = isinstance(current, int)
        if integer and not all(float(v).is_integer() for v in (low, high, step or 1)):
            raise UsageError(f"{where}: {path} is a whole number, so low, high and step must be too")
        cast = int if integer else float
        return Dimension(name, path, low=cast(low), high=cast(high), log=log,
                         step=None if step is None else cast(step), integer=integer)
    raise UsageError(f"{where} = {spec!r}: give a list of choices or a range {{ low = ..., high = ... }} "
                     "(a single value belongs in the config itself)")


def _check_values(dim: Dimension, cfg: Config, *, augmentations=None, models=None) -> None:
    """Every choice, or both ends of a range, must be a value the config accepts."""
    values = dim.choices if dim.is_choice else (dim.low, dim.high)
    for value in values:
        try:
            check_value(cfg, dim.path, value)
        except UsageError as err:
            raise UsageError(f"[sweep.space] {dim.name}: {err}") from None
        if dim.path == "data.augmentation" and augmentations is not None and value not in augmentations:
            raise UsageError(f"[sweep.space] {dim.name}: augmentation {value!r} is not available for "
                             f"{cfg.data.dataset}; use one of {', '.join(augmentations)}")
        if dim.path == "model.name" and models is not None and value not in models:
            raise UsageError(f"[sweep.space] {dim.name}: model {value!r} is unknown; use one of {', '.join(models)}")


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def to_optuna(dims: tuple[Dimension, ...]) -> dict:
    """Optuna distributions keyed by the names written in [sweep.space]."""
    from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

    out = {}
    for d in dims:
        if d.is_choice:
            out[d.name] = CategoricalDistribution(d.choices)
        elif d.integer:
            out[d.name] = IntDistribution(int(d.low), int(d.high), log=d.log, step=int(d.step or 1))
        else:
            out[d.name] = FloatDistribution(d.low, d.high, log=d.log, step=d.step)
    return out


def overrides(dims: tuple[Dimension, ...], params: Mapping[str, Any]) -> dict[str, Any]:
    """A trial's sampled params -> {config key: value} for Config.with_overrides."""
    return {d.path: params[d.name] for d in dims}
