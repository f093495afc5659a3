"""engine/memory.check_batches_fit counts the host batch in the rows' own type: uint8 pixels of a memmap travel
as they are (1 byte a value), so a run whose float32 batch would not fit but whose uint8 batch does is not
refused; one that does not fit either way is."""

from types import SimpleNamespace

import numpy as np
import pytest

import tanplan.data.dataset
from tanplan.dp import sampling
from tanplan.engine.memory import check_batches_fit
from tanplan.errors import UsageError

SHAPE = (224, 224, 3)
N, B, PHYSICAL = 100_000, 4096, 64


def _run(row_dtype):
    rows = SimpleNamespace(row_dtype=np.dtype(row_dtype)) if row_dtype else np.zeros((1, 1), np.float32)
    dataset = SimpleNamespace(input_shape=SHAPE, train=rows, num_train=N, num_test=1000)
    job = SimpleNamespace(perf=SimpleNamespace(physical_batch_size=PHYSICAL, eval_batch_size=256),
                          data=SimpleNamespace(aug_mult=1))  # what check_batches_fit reads of a RunJob
    return job, SimpleNamespace(q=B / N, batch_size=B), dataset


def _need(itemsize):  # the same sum, written out: two padded batches in their type, views and eval in float32
    layout = sampling.batch_layout(N, B / N, PHYSICAL)
    values = int(np.prod(SHAPE))
    return 2 * layout.capacity * values * itemsize + 4 * values * (layout.chunk_size + 256)


def test_uint8_rows_count_one_byte_a_value(monkeypatch):
    between = (_need(1) + _need(4)) // 2
    monkeypatch.setattr(tanplan.data.dataset, "available_memory", lambda: between)
    check_batches_fit(*_run(np.uint8))  # fits as uint8
    with pytest.raises(UsageError, match="do not fit"):
        check_batches_fit(*_run(np.float32))  # a float32 memmap of the same shape does not
    with pytest.raises(UsageError, match="do not fit"):
        check_batches_fit(*_run(None))  # nor in-memory float32 rows


def test_uint8_rows_that_do_not_fit_are_still_refused(monkeypatch):
    monkeypatch.setattr(tanplan.data.dataset, "available_memory", lambda: _need(1) - 1)
    with pytest.raises(UsageError, match="224×224×3 do not fit"):
        check_batches_fit(*_run(np.uint8))
