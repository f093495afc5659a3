"""Whether a run's host-side batches fit in memory, checked before anything is written.

A step's padded batch (the planned layout: public, from N, q and train.physical_batch_size) is held as
float32 rows, with the next step's read beside it (tanplan.engine.batches prefetches one step), and an
evaluation batch of at most train.eval_batch_size test rows. Rows of a memmap folder or a plugged-in
source can be large (a 100,000 × 100,000 image is 120 GB as float32): such a run would be killed part-way
by the operating system, after its folder, its secret and its first metrics were written.
"""

from __future__ import annotations

import numpy as np

from tanplan.data import dataset as datasets
from tanplan.dp import sampling
from tanplan.errors import UsageError


def check_batches_fit(cfg, plan, dataset) -> None:
    """UsageError (one line, public figures only) unless two padded training batches, one chunk's AugMult
    views and one evaluation batch of dataset's rows fit in the memory available now."""
    row = int(np.prod(dataset.input_shape, dtype=np.int64)) * 4  # float32
    layout = sampling.batch_layout(dataset.num_train, plan.q, cfg.train.physical_batch_size)
    # the padded batch and the next one's read, one chunk's AugMult views (K per row) and an evaluation batch
    rows = (2 * layout.capacity + layout.chunk_size * cfg.data.aug_mult
            + min(cfg.train.eval_batch_size, dataset.num_test))
    memory = datasets.available_memory()  # (through the module: tests stand in for the machine's memory)
    if memory is not None and rows * row > memory:
        shape = "×".join(map(str, dataset.input_shape))
        raise UsageError(f"examples of shape {shape} do not fit: a step holds {layout.capacity:,} rows (the planned "
                         f"layout of B = {plan.batch_size:,}), twice with the next step's, a chunk's "
                         f"{cfg.data.aug_mult} views a row and an evaluation batch, "
                         f"{rows * row / 2**30:,.1f} GiB as float32, while {memory / 2**30:,.1f} GiB of memory are "
                         "available; use smaller inputs (tanplan convert --image-size), a smaller train.batch_size "
                         "or train.eval_batch_size")
