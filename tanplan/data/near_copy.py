"""The near-copy rule: when a public set holds a private example (docs/privacy.md, "Pretraining data: the
near-copy rule"). `tanplan pretrain` and every public tuning set of the proxies are checked by it
(tanplan.workflow.tuning.check_public_set) before anything trains on them.

Guarantee (what `shares_an_example` finds). A public row, of the training or the test split, in any order
and any number of times, is the copy of a private row (training or test) when

1. every coordinate is near-equal: rounded to multiples of `grid` (the caller's: 10⁻³ of the private test
   set's RMS value), as the private row is; or
2. it is equal after per-row standardisation, z = (row − its mean) / its standard deviation, every z rounded
   to multiples of STANDARD_GRID: any positive affine copy a·row + b (a > 0: private × 255, other units,
   another brightness and contrast), with float noise far below the grid; or
3. (2) holds for the public row reversed along its spatial axes: a signal played backwards (the axis of a
   (length, channels) row, a vector's only axis), an image mirrored, turned upside down or by 180°.

Rounding puts two rows that differ by much less than the cell in the same cell unless a coordinate falls
at a cell's edge, so every digest is taken on two grids offset by half a cell: a row and its copy then
share a digest on at least one grid but for a small chance (a few % for 40 coordinates and noise 1% of the
cell); a copy of many rows is found with near certainty. A constant row (standard deviation 0) has no
standardised form: it is only its level, which (1) compares.

Not covered: other transformations (a crop, a shift, a rotation by 90°, a negated row, noise comparable to
the grid); those are not found and must not be put in a public set.

Memory: the private digests are held (four 128-bit digests a row); the public rows are read in slices
(sources larger than memory too) and the scan stops at the first shared digest.
"""

from __future__ import annotations

import itertools
from functools import lru_cache
from typing import Iterator

import numpy as np

from tanplan.data.source import read_rows

# Standardised rows (unit RMS by construction) whose every z agrees to within this count as the same row.
STANDARD_GRID = 1e-3
SLICE = 65_536  # rows read at a time from a source that is not in memory
CHUNK = 4096  # rows digested at a time (float64 copies of a few of them, whatever the slice)
_NEAR, _STANDARD = 0, 1  # the tags of rules (1) and (2)-(3)


def spatial_flips(input_shape: tuple) -> list[tuple[int, ...]]:
    """The axes of one row that (3) reverses, each non-empty set of them: every axis of a vector, else every
    axis but the last (the channels), so (length, channels) → [(0,)], (H, W, C) → [(0,), (1,), (0, 1)]."""
    axes = range(len(input_shape)) if len(input_shape) == 1 else range(len(input_shape) - 1)
    return [combo for size in range(1, len(axes) + 1) for combo in itertools.combinations(axes, size)]


def _cells(values: np.ndarray, grid: float, tag: int) -> set[tuple[int, int]]:
    """A 128-bit digest of each row of `values` rounded to multiples of grid, on two grids offset by half a
    cell (tagged, so that a rule's digests meet only the same rule's).

    The digest is two sums of the row's cells times fixed odd 64-bit multipliers (mod 2⁶⁴), taken for the whole
    chunk at once: a copy has the same cells and so the same digest under any function, and two different rows
    share one by chance with probability about 2⁻¹²⁸ a pair, which refuses a set, never lets a copy through."""
    found: set[tuple[int, int]] = set()
    for offset in (0, 1):
        cells = np.floor(values / grid + 0.5 * offset).astype(np.int64).view(np.uint64)
        first, second = _multipliers(cells.shape[1], 2 * tag + offset)
        found |= set(zip((cells * first).sum(axis=1).tolist(), (cells * second).sum(axis=1).tolist()))
    return found


@lru_cache(maxsize=64)
def _multipliers(width: int, tag: int) -> np.ndarray:
    """Two rows of `width` odd 64-bit multipliers, fixed for (width, tag): public constants, not a secret."""
    draws = np.random.default_rng([width, tag]).integers(0, 2**63, size=(2, width), dtype=np.uint64)
    return draws * np.uint64(2) + np.uint64(1)


def _standardised(rows: np.ndarray) -> np.ndarray:
    """(row − mean) / std of every row whose std is not 0 (float64)."""
    mean = rows.mean(axis=1, keepdims=True)
    std = rows.std(axis=1, keepdims=True)
    keep = std[:, 0] > 0
    return (rows[keep] - mean[keep]) / std[keep]


def digests(x: np.ndarray, grid: float, *, reversed_too: bool = False) -> set[tuple[int, int]]:
    """The rule's digests of rows x (n, *input_shape): (1) near-equal at `grid`, (2) standardised, and with
    reversed_too (3) the standardised digests of each row reversed along spatial_flips (under (2)'s tag: a
    reversed public row meets its private original)."""
    found: set[tuple[int, int]] = set()
    flips = spatial_flips(np.shape(x)[1:]) if reversed_too else []
    for start in range(0, len(x), CHUNK):
        rows = np.asarray(x[start:start + CHUNK], np.float64)
        flat = rows.reshape(len(rows), -1)
        found |= _cells(flat, grid, _NEAR) | _cells(_standardised(flat), STANDARD_GRID, _STANDARD)
        for axes in flips:
            turned = np.flip(rows, axis=tuple(a + 1 for a in axes)).reshape(len(rows), -1)
            found |= _cells(_standardised(turned), STANDARD_GRID, _STANDARD)
    return found


def _slices(data) -> Iterator[np.ndarray]:
    """The inputs of a dataset's training and test splits: in-memory arrays, or a source's rows read in
    consecutive slices (scanned once, never held)."""
    if getattr(data, "in_memory", True):
        yield from (data.x_train, data.x_test)
        return
    for source in (data.train, data.test):
        for start in range(0, len(source), SLICE):
            yield read_rows(source, np.arange(start, min(start + SLICE, len(source))))[0]


def shares_an_example(public, private, grid: float) -> bool:
    """Whether the public dataset holds a copy of a private row under the rule (1)-(3) above (the
    module's guarantee). No count is returned: how many private rows a public set holds is private."""
    held: set[tuple[int, int]] = set()
    for x in _slices(private):
        held |= digests(x, grid)
    return any(digests(x, grid, reversed_too=True) & held for x in _slices(public))
