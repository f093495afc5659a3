"""Whether a run's host-side batches fit in memory, checked before anything is written.

A step's padded batch (the planned layout: public, from N, q and train.physical_batch_size) is held as
rows of the source's own type (uint8 pixels of a memmap travel as they are, tanplan.data.pixels; every other
row is float32), this process's share only (tanplan.data.reader: each host builds its own devices' rows),
with the next step's read beside it (tanplan.engine.batches prefetches one step); a chunk's AugMult views
and an evaluation batch of at most train.eval_batch_size test rows are float32. Rows of a memmap folder or a plugged-in
source can be large (a 100,000 × 100,000 image is 120 GB as float32): such a run would be killed part-way
by the operating system, after its folder, its secret and its first metrics were written.
"""

from __future__ import annotations

import jax
import numpy as np

from tanplan.data import dataset as datasets
from tanplan.dp import sampling
from tanplan.errors import UsageError


def check_batches_fit(job, plan, dataset) -> None:
    """UsageError (one line, public figures only) unless two padded training batches, one chunk's AugMult
    views and one evaluation batch of dataset's rows fit in the memory available now."""
    values = int(np.prod(dataset.input_shape, dtype=np.int64))
    stored = np.dtype(getattr(dataset.train, "row_dtype", np.float32)).itemsize  # uint8 pixels: 1 byte
    layout = sampling.batch_layout(dataset.num_train, plan.q, job.perf.physical_batch_size)
    share = -(-layout.capacity // jax.process_count())  # this host's rows of the padded batch
    # the padded batch and the next one's read, one chunk's AugMult views (K per row) and an evaluation batch
    views = layout.chunk_size * job.data.aug_mult + min(job.perf.eval_batch_size, dataset.num_test)
    needed = 2 * share * values * stored + 4 * values * views
    memory = datasets.available_memory()  # (through the module: tests stand in for the machine's memory)
    if memory is not None and needed > memory:
        shape = "×".join(map(str, dataset.input_shape))
        raise UsageError(f"examples of shape {shape} do not fit: a step holds {layout.capacity:,} rows (the planned "
                         f"layout of B = {plan.batch_size:,}), twice with the next step's, a chunk's "
                         f"{job.data.aug_mult} views a row and an evaluation batch, "
                         f"{needed / 2**30:,.1f} GiB, while {memory / 2**30:,.1f} GiB of memory are "
                         "available; use smaller inputs (tanplan convert --image-size), a smaller train.batch_size "
                         "or train.eval_batch_size")
