"""What `tanplan fit` trains, checked before any run (and bounded by tanplan.workflow.total_budget before
any trains): the proxy batch sizes of the batch law, the members of the privacy-parameter family (B/k,
S·k², TAN §4.3) and of the dataset-size study (N' = k·N, §4.4). Pure: no data is read, nothing trains.
"""

from __future__ import annotations

import math

from tanplan.config import MAX_STEPS
from tanplan.errors import UsageError


def check_batch_sizes(batch_sizes, target_batch_size: int, seeds: int | None = None, seeds_name: str = "--seeds") -> None:
    """UsageError unless the proxies are two or more distinct sizes, none above the target (and two seeds or
    more each: their scatter is the launch's spread)."""
    for b in batch_sizes:
        if b > target_batch_size:
            raise UsageError(f"proxy batch size {b} is not allowed: must be ≤ the target batch size {target_batch_size}")
    if len(set(batch_sizes)) < 2:
        raise UsageError(f"--batch-sizes {','.join(map(str, batch_sizes))} is not allowed: need two or more distinct sizes")
    if seeds is not None and seeds < 2:
        raise UsageError(f"{seeds_name} {seeds} is not allowed for the batch law: need two or more seeds a size "
                         "(their scatter is the launch's own spread)")


def steps_members(target, factors, proxy_batch_size: int) -> list[tuple[float, int, int, int]]:
    """(k, B/k, S·k², its proxy B'/k) of each member of the privacy-parameter search that fits the data and
    the accountants' domain; UsageError when none does. Checked before the first member trains."""
    members = []
    for k in factors:
        b_float, s_float = target.batch_size / k, target.steps * k * k
        if not (math.isfinite(s_float) and s_float <= MAX_STEPS and b_float <= target.dataset_size):
            continue  # outside the data, or the accountants' domain
        b, s = max(1, round(b_float)), max(1, round(s_float))
        proxy_b = max(1, round(proxy_batch_size / k))
        if proxy_b <= b:
            members.append((k, b, s, proxy_b))
    if not members:
        raise UsageError(f"--factors {','.join(f'{k:g}' for k in factors)} is not allowed: no factor k gives a member "
                         f"with B/k ≤ N = {target.dataset_size} and S·k² ≤ {MAX_STEPS:.0e} steps")
    return members


def data_members(target, factors, available: int) -> list[tuple[float, int]]:
    """(k, N' = k·N) of each member of the dataset-size study with B ≤ N' ≤ the examples available."""
    sizes = {k: target.dataset_size * k for k in factors}  # no overflow: checked as floats
    return [(k, int(round(n))) for k, n in sizes.items() if math.isfinite(n) and target.batch_size <= round(n) <= available]


__all__ = ["check_batch_sizes", "steps_members", "data_members"]
