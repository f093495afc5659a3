"""Proxies one device each (#32 item 5): on 2 forced host CPU devices, `train_points` trains the proxies
side by side, each one's state and batches on ONE device (what XLA placed, seen where the engine puts
them), with the accuracy, loss, σ' and ε of the same proxy trained over all devices in the main thread (as
before; the same noise_seed, so only the summation order differs), while a run started outside (the launch)
still spans every device. One subprocess: two tiny proxies (an MLP, 3 steps) and one reference."""

import json
import subprocess
import sys

from helpers import CONFIG, ROOT, SEEDED, env

CHILD = r"""
import json, sys, threading
from pathlib import Path
from tanplan.config import load_config
from tanplan.dp import sharding
from tanplan.engine import batches, loop
from tanplan.job import job_of
from tanplan.workflow.proxy_runs import train_points

cfg = load_config(sys.argv[1], overrides=json.loads(sys.argv[2]))
out = Path(sys.argv[3])
placed = {}  # thread -> device ids of every array the engine placed for the run in that thread

def watch(fn):
    def wrapped(*args, **kwargs):
        got = fn(*args, **kwargs)
        import jax
        ids = {d.id for leaf in jax.tree.leaves(got) for d in leaf.devices()}
        placed.setdefault(threading.get_ident(), set()).update(ids)
        return got
    return wrapped

sharding.replicate_global = watch(sharding.replicate_global)  # the state and the keys (engine.loop)
batches.to_global = watch(batches.to_global)  # every step's batch (engine.batches)
seen = []

def train_fn(run_cfg, workdir, **kw):
    summary = loop.train_and_evaluate(job_of(run_cfg), workdir, **kw)
    seen.append({"b": run_cfg.train.proxy_batch_size, "seed": run_cfg.experiment.seed, "thread": threading.get_ident(),
                 "devices": sorted(placed.pop(threading.get_ident())), "summary": summary.to_dict()})
    return summary

rows = train_points(cfg, [32, 64], 1, out / "proxies", train_fn=train_fn, log=lambda line: None)
references = []
for row in rows[:1]:  # the same proxies over every device, in the main thread: how they ran before, and the launch's way
    run_cfg = cfg.with_overrides({"train.proxy_batch_size": row.batch_size,
                                  "experiment.seed": cfg.experiment.seed + row.seed})
    summary = loop.train_and_evaluate(job_of(run_cfg), out / f"ref_{row.batch_size}_{row.seed}", progress=False)
    references.append({"devices": sorted(placed.pop(threading.get_ident())), "summary": summary.to_dict()})
print(json.dumps({"proxies": seen, "references": references, "rows": [vars(r) for r in rows]}))
"""


def test_proxies_train_one_device_each_and_side_by_side(tmp_path):
    sets = [s for s in SEEDED if not s.startswith(("train.steps", "train.checkpoint_every", "train.eval_every"))]
    sets += ["train.steps=3", "train.eval_every=3", "train.checkpoint_every=3", "model.name=mlp", "model.depth=1"]
    proc = subprocess.run([sys.executable, "-c", CHILD, CONFIG, json.dumps(sets), str(tmp_path)],
                          env=env(devices=2), cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    proxies, references = got["proxies"], got["references"]
    assert len(proxies) == 2 and len(references) == 1
    for proxy in proxies:  # every array of a proxy on one device, and the summary says one
        assert len(proxy["devices"]) == 1 and proxy["summary"]["devices"] == 1
    assert len({p["thread"] for p in proxies}) > 1 and len({p["devices"][0] for p in proxies}) == 2  # side by side
    by_run = {(p["b"], p["seed"]): p["summary"] for p in proxies}
    base_seed = min(p["seed"] for p in proxies)
    for row, ref in zip(got["rows"], references):
        assert ref["devices"] == [0, 1] and ref["summary"]["devices"] == 2  # outside: every device
        mine, theirs = by_run[(row["batch_size"], base_seed + row["seed"])], ref["summary"]
        assert row["test_accuracy"] == mine["test_accuracy"]
        for key in ("steps", "sigma", "epsilon_rdp", "epsilon_pld", "delta"):
            assert mine[key] == theirs[key], key  # the accounting: identical
        assert abs(mine["test_accuracy"] - theirs["test_accuracy"]) <= 2 / 400  # summation order only
        assert abs(mine["test_loss"] - theirs["test_loss"]) <= 1e-4 * max(1.0, abs(theirs["test_loss"]))


def _two_slots():
    """This process's one CPU device, twice: two threads side by side (the pool's path, without forcing devices)."""
    import jax

    return [jax.devices()[0]] * 2


def test_a_signal_stops_the_proxies_in_flight_and_drops_the_rest():
    """SIGINT while proxies train in threads: each run in flight sees it as the engine's own handler would
    (its loop's flag: it checkpoints and raises RunInterrupted), the job not started never starts, and the
    caller gets RunInterrupted (exit 128 + SIGINT), as from one run in the main thread."""
    import os
    import signal
    import threading

    import pytest

    from tanplan.engine import loop
    from tanplan.errors import RunInterrupted
    from tanplan.workflow.proxy_devices import each_on_one_device

    entered, started = threading.Semaphore(0), []

    def run_one(job):
        started.append(job)
        with loop._Signals() as signals:  # what the engine's loop holds while it steps
            entered.release()
            for _ in range(600):  # at most a minute: the signal sets the flag
                if signals.signum is not None:
                    raise RunInterrupted(f"job {job} stopped", signals.signum)
                threading.Event().wait(0.1)
        return job

    def interrupt_when_both_run():
        entered.acquire(timeout=60)
        entered.acquire(timeout=60)
        os.kill(os.getpid(), signal.SIGINT)

    threading.Thread(target=interrupt_when_both_run, daemon=True).start()
    previous = signal.getsignal(signal.SIGINT)
    with pytest.raises(RunInterrupted) as caught:
        each_on_one_device([0, 1, 2], run_one, devices=_two_slots())
    assert caught.value.exit_code == 128 + signal.SIGINT
    assert sorted(started) == [0, 1]  # the third never started
    assert signal.getsignal(signal.SIGINT) is previous and not loop._THREAD_RUNS


def test_results_in_order_and_the_first_failure_raised():
    """Results come back in the jobs' order whatever finishes first; a failing run's error is raised."""
    import threading

    import pytest

    from tanplan.workflow.proxy_devices import each_on_one_device

    second_done = threading.Event()

    def slow_first(job):
        if job == 0:
            second_done.wait(60)  # the second finishes first
        else:
            second_done.set()
        return job * 10

    assert each_on_one_device([0, 1], slow_first, devices=_two_slots()) == [0, 10]

    def fails(job):
        if job == 1:
            raise ValueError("proxy 1 failed")
        return job

    with pytest.raises(ValueError, match="proxy 1 failed"):
        each_on_one_device([0, 1], fails, devices=_two_slots())
