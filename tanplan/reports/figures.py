"""The one way tanplan draws a figure: matplotlib's headless Agg backend, saved atomically, then closed.

    with figure(out / "scaling_law.png", figsize=(6, 4)) as (fig, ax):
        ax.plot(...)
"""

from __future__ import annotations

import contextlib
from pathlib import Path

from tanplan.fileio import save_figure_atomic

DPI = 110


def pyplot():
    """matplotlib.pyplot on the Agg backend (no display needed)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


@contextlib.contextmanager
def figure(path: str | Path, nrows: int = 1, ncols: int = 1, *, dpi: int = DPI, tight: bool = True, **subplots):
    """Yield (fig, axes) of plt.subplots(nrows, ncols, **subplots); on a clean exit save it to path.

    The figure is closed in any case; a failed block writes nothing (the old file, if any, stays).
    """
    plt = pyplot()
    fig, axes = plt.subplots(nrows, ncols, **subplots)
    try:
        yield fig, axes
        if tight:
            fig.tight_layout()
        save_figure_atomic(fig, path, dpi=dpi)
    finally:
        plt.close(fig)
