"""Proxies one device each: the small runs of `tanplan run` / `fit` (B' = 16-512) train on one device
apiece, as many at once as this process has devices; the launch, started outside, uses them all.

Why: a proxy's few hundred rows spread over eight GPUs leave each nearly idle, and the eight wait on one
another every step; one device per proxy, proxies side by side, keeps them busy. Each proxy stays its own
run (its own secret, Poisson batches, noise and ledger: tanplan.engine.loop), so where it runs changes
neither its guarantee nor its accounting; its numbers change only by floating-point rounding (its chunk
holds physical_batch_size rows of one device). Several devices in one process: a thread per device (XLA
runs each device's computation outside the GIL), results in the jobs' order. SIGTERM/SIGINT stop the runs
in flight after their step, each saving its checkpoint (RunInterrupted, as one run in the main thread
would); runs not yet started do not start. Several processes (jax.distributed): every run over all devices,
as before.
"""

from __future__ import annotations

import contextlib
import queue
import signal
from concurrent.futures import ALL_COMPLETED, FIRST_EXCEPTION, ThreadPoolExecutor, wait
from typing import Callable, Sequence

import jax

from tanplan.dp import sharding
from tanplan.engine import loop
from tanplan.errors import RunInterrupted


def proxy_devices() -> list:
    """The devices proxies take one each: this process's, when it is the only one (else none: all runs
    span every device)."""
    return list(jax.local_devices()) if jax.process_count() == 1 else []


def each_on_one_device(jobs: Sequence, run_one: Callable, devices: Sequence | None = None) -> list:
    """[run_one(job) for job in jobs], each inside sharding.on_devices([one device]): one at a time in
    this thread with one device (or one job), else one per device at once. The first failure (in the jobs'
    order) is raised after the runs in flight end; the jobs not started are dropped."""
    devices = proxy_devices() if devices is None else list(devices)
    if not devices:
        return [run_one(job) for job in jobs]
    if len(devices) == 1 or len(jobs) <= 1:
        results = []
        for job in jobs:
            with sharding.on_devices(devices[:1]):
                results.append(run_one(job))
        return results
    free: queue.SimpleQueue = queue.SimpleQueue()
    for device in devices:
        free.put(device)
    futures: list = []
    caught: list[int] = []  # the signal received, if any

    def on_a_free_device(job):
        device = free.get()
        try:
            if caught:  # a signal came while the jobs were handed out: this one does not start
                raise RunInterrupted(f"{signal.Signals(caught[-1]).name}: not started", caught[-1])
            with sharding.on_devices([device]):
                return run_one(job)
        finally:
            free.put(device)

    with _signals_stop(futures, caught), ThreadPoolExecutor(max_workers=min(len(devices), len(jobs)),
                                                            thread_name_prefix="tanplan-proxy") as pool:
        futures.extend(pool.submit(on_a_free_device, job) for job in jobs)  # the handler is in place already
        _wait(futures, first_failure=True)
        for f in futures:  # a failure: the rest are not started; those in flight finish
            f.cancel()
        _wait(futures, first_failure=False)
    failed = next((f for f in futures if not f.cancelled() and f.exception() is not None), None)
    if failed is not None:
        raise failed.exception()
    if caught:  # stopped between runs: none was in flight to say so
        raise RunInterrupted(f"{signal.Signals(caught[-1]).name}: stopped before every proxy ran; the runs that "
                             "finished are kept", caught[-1])
    return [f.result() for f in futures]


def _wait(futures: list, *, first_failure: bool) -> None:
    """Until every run ended (or one failed): in short waits, since Python runs a signal's handler in the
    main thread only when it wakes, and the OS may deliver the signal to any thread."""
    while True:
        done, pending = wait(futures, timeout=0.25, return_when=FIRST_EXCEPTION if first_failure else ALL_COMPLETED)
        if not pending or (first_failure and any(not f.cancelled() and f.exception() is not None for f in done)):
            return


@contextlib.contextmanager
def _signals_stop(futures: list, caught: list):
    """While the pool runs: SIGTERM/SIGINT (main thread) are noted in `caught`, cancel the jobs not started
    and stop the runs in flight after their step (tanplan.engine.loop.interrupt_thread_runs)."""

    def stop(signum, frame):
        caught.append(signum)
        for f in futures:
            f.cancel()
        loop.interrupt_thread_runs(signum)

    previous = {}
    try:
        for s in (signal.SIGTERM, signal.SIGINT):
            previous[s] = signal.signal(s, stop)
    except ValueError:  # not the main thread: whoever runs us handles signals
        pass
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
