"""What produced a run's numbers: the accelerator it ran on and the versions of the libraries that trained
it and computed its ε. summary.json and ledger.json record it (docs/summary.md).

One helper, `environment(devices)`, gathers it from the devices the run's mesh holds (anything with JAX's
`platform` and `device_kind` attributes) and the installed distributions' metadata: this module imports
no JAX, so the planner and privacy/ may use `versions()` too.

    >>> class Cpu:
    ...     platform, device_kind = "cpu", "cpu"
    >>> env = environment([Cpu(), Cpu()])
    >>> env.platform, env.device_kind, env.devices, sorted(env.versions) == sorted(PACKAGES)
    ('cpu', 'cpu', 2, True)
"""

from __future__ import annotations

import importlib.metadata
from dataclasses import asdict, dataclass, field
from functools import lru_cache
from typing import Iterable

# The distributions whose versions a result depends on: JAX and its compiler, the DP-SGD step's libraries,
# the accountant, and tanplan itself.
PACKAGES = ("jax", "jaxlib", "jax-privacy", "dp-accounting", "flax", "optax", "tanplan")


@dataclass(frozen=True, kw_only=True)
class Environment:
    platform: str | None  # cpu, gpu (CUDA or ROCm), tpu: JAX's name of the backend
    device_kind: str | None  # e.g. "NVIDIA H100 80GB HBM3", "TPU v5 lite", "cpu"; several joined by ", "
    devices: int  # devices of the run's mesh, over every process
    versions: dict[str, str | None] = field(default_factory=dict)  # distribution -> version (None: not installed)

    def to_dict(self) -> dict:
        return asdict(self)


@lru_cache(maxsize=1)
def _versions() -> tuple[tuple[str, str | None], ...]:
    found = []
    for name in PACKAGES:
        try:
            found.append((name, importlib.metadata.version(name)))
        except importlib.metadata.PackageNotFoundError:
            found.append((name, None))
    return tuple(found)


def versions() -> dict[str, str | None]:
    """The installed version of each of PACKAGES (None where it is not installed), from its metadata."""
    return dict(_versions())


def environment(devices: Iterable) -> Environment:
    """The platform, device kind and count of `devices` (a run's mesh devices), and versions()."""
    devices = list(devices)
    platforms = sorted({str(d.platform) for d in devices})
    kinds = sorted({str(d.device_kind) for d in devices})
    return Environment(platform=", ".join(platforms) or None, device_kind=", ".join(kinds) or None,
                       devices=len(devices), versions=versions())
