"""Packed proxies: K runs of ONE job that differ only by experiment.seed (the seeds of a ladder rung: the
same B', σ', S, model and data), trained as one jitted program on one device, so that a rung's device time
follows its examples (K·B' rows a step in one program) rather than its count of runs.

    summaries = train_packed([job_of(members.proxy(64, seed)) for seed in range(8)], workdirs)

Each of the K runs stays its own run, as tanplan.engine.loop would train it alone: its own folder, its own
secret (a RunSecret from OS entropy, drawn, saved and bound to its own identity by its own RunFolder), its
own Poisson batches, noise and augmentation views, its own ledger, evaluations, checkpoints and summary.json.
Only the step is shared: each run's step before jit (`Run.keyed`, the same function of (state, batch,
roots) for every run of one job) is compiled once for the pack, in one of two forms (`pack_form`): on an
accelerator jax.vmap'ed over a leading K axis of (state, batch, roots), one program a step that fills the
device; on the CPU one program called on each run's own (state, batch, roots) in turn (vmap turns the
convolutions into grouped ones, which XLA's CPU backend runs 1.9× slower than K calls: measured, docs/
performance.md). Either way slice k releases, at step t,

    Σ_{i ∈ P_t^k} clip_C(g_i(θ_k)) + N(0, σ²C² I),   the noise drawn from fold_in(run k's noise key, t)

Guarantee, per run k, unchanged from one run alone: P_t^k is Poisson with probability q, drawn by run k's
secret (its own StepBatches over its Mechanism.batch); the sum has sensitivity C under add/remove-one
neighbours, because slice k reads only batch k's rows and θ_k (form "each": run k's own call; "vmap" maps no
row of one slice into another: tests/dp/test_packed_sensitivity.py moves one example of slice k and sees
only slice k's clipped sum move, by ≤ C);
the noise is drawn once per step per run, from run k's key alone, and covers that run's whole sum. The
accountant composes S Poisson-subsampled Gaussians of multiplier σ for each run, as for a run alone. The K
batches are padded to one layout (the largest: padding chunks weigh zero, as in one run); a step's cost is
the pack's, whatever each draw held. What each run publishes is what it would publish alone,
except its wall time and steps per second, which are the pack's (public: the layout, K and the device).
A run whose released parameters stop being finite stops there (its steps accounted, TrainingDiverged once
the pack ends); the others go on. A signal checkpoints every run and stops the pack (RunInterrupted); a
packed or separate `--resume` continues each run from its checkpoint with its own secret.
"""

from __future__ import annotations

import contextlib
import signal
import sys
import time
from pathlib import Path
from typing import Callable, Sequence

import jax
import numpy as np
from tqdm import tqdm

from tanplan.dp import sharding
from tanplan.engine import batches, loop, setup, sparsity, tracking
from tanplan.engine.closing import close_run
from tanplan.engine.hooks import NONE
from tanplan.engine.run_folder import RunFolder
from tanplan.engine.run_identity import run_identity
from tanplan.engine.session import Session, due
from tanplan.errors import RunInterrupted, TrainingDiverged, UsageError
from tanplan.job import RunJob
from tanplan.outcomes.run_summary import RunSummary
from tanplan.provenance import environment

BATCH_KEYS = ("x", "y", "mask", "index")


def packable(jobs: Sequence[RunJob]) -> str | None:
    """Why these jobs cannot train as one packed program (None: they can): fewer than two, jobs that differ
    in more than experiment.seed, [pruning]'s masked step, or runs that would span several devices."""
    if len(jobs) < 2:
        return "fewer than two runs"

    def rest(job: RunJob) -> dict:
        record = job.to_dict()
        record["experiment"].pop("seed", None)
        return record

    first = rest(jobs[0])
    if any(rest(job) != first for job in jobs[1:]):
        return "the runs differ in more than experiment.seed"
    if sparsity.enabled(jobs[0].pruning):
        return "[pruning]'s masked step is not packed"
    if jax.process_count() != 1 or len(sharding.run_devices()) != 1:
        return "a packed program runs on one device (the runs would span several)"
    return None


def train_packed(jobs: Sequence[RunJob], workdirs: Sequence[str | Path | None], *, resume: bool = True,
                 progress: bool = False, form: str | None = None) -> list[RunSummary]:
    """Train the K jobs (`packable`) as one program, each into its own workdir; their RunSummaries, in order.

    resume: a run whose folder holds a checkpoint continues it (every run of the pack must then be at the same
    step). form: "vmap" or "each" (default: `pack_form` of the device; the same releases either way).
    Raises ValueError when the jobs cannot be packed, UsageError on bad input (before any step), and, once
    every run's files are written, the first run's TrainingDiverged or RunInterrupted."""
    why = packable(jobs)
    if why is not None:
        raise ValueError(f"these runs cannot be packed: {why}")
    if len(workdirs) != len(jobs):
        raise ValueError("one workdir per packed job")
    started = time.perf_counter()
    say = lambda msg: print(msg, file=sys.stderr)  # noqa: E731
    factories = tracking.resolve_factories(jobs[0].tracking)
    dataset = setup.load_data(jobs[0].data)  # loaded once: the runs' [data] is the same
    prepared = [setup.prepare(job, dataset) for job in jobs]  # all checks before any file is written
    with contextlib.ExitStack() as stack:
        sessions = [_open(stack, job, p, workdir, resume, factories, say)
                    for job, p, workdir in zip(jobs, prepared, workdirs)]
        if len({s.start for s in sessions}) != 1:
            raise UsageError("packed runs must resume from the same step: their checkpoints differ; resume them "
                             "one by one (fit.packed = false)")
        for s in sessions[1:]:  # one compiled evaluation: the same model and task, other parameters
            s.run.eval_batch = sessions[0].run.eval_batch
        env = environment(sessions[0].run.mesh.devices.flat)
        _train(sessions, progress, form)
        summaries = [close_run(s, started=started, backend="local", env=env, hooks=NONE) for s in sessions]
    stopped = []
    for s, workdir in zip(sessions, workdirs):
        try:
            loop._raise_if_stopped(s, s.job, workdir)
        except (TrainingDiverged, RunInterrupted) as err:
            stopped.append(err)
    if stopped:
        raise stopped[0]
    return summaries


def _open(stack: contextlib.ExitStack, job: RunJob, p: setup.Prepared, workdir, resume: bool, factories,
          say) -> Session:
    """One run of the pack as the loop opens it: its folder, its own secret (bound to its own identity), its
    mechanism, its session at its first step, its tracker."""
    folder = stack.enter_context(RunFolder(workdir, resume=resume, primary=True, lock=True))
    secret = folder.secret(job.privacy.noise_seed, run_identity(job, p.plan, p.dataset, p.params, setup.init_digest(p)))
    if secret.reproducible and job.privacy.private:
        say(f"tanplan: warning: privacy.noise_seed = {job.privacy.noise_seed}: the noise and the batches are "
            "reproducible from the config; this run is NOT private (for tests only)")
    run = setup.build(job, secret, prepared=p)
    s = loop._resume_or_start(job, run, folder, "local", environment(run.mesh.devices.flat), say)
    s.state, s.roots = sharding.replicate_global(s.state, run.mesh), sharding.replicate_global(run.roots, run.mesh)
    s.bar = tqdm(disable=True)  # the pack has one bar (`_train`)
    s.tracker = tracking.open_tracker(job, folder.out, factories, (), start=s.start, primary=True)
    return s


def pack_form(device) -> str:
    """How a pack runs on `device`: "vmap" (one program over the K axis) on an accelerator, "each" (one
    program, called for each run) on the CPU, where vmap's grouped convolutions cost more than K calls."""
    return "each" if device.platform == "cpu" else "vmap"


def packed_step(runs: Sequence[setup.Run], form: str = "vmap") -> Callable:
    """step(states, batch, roots) -> (states, metrics) of the K runs, slice k run k's step on its own state,
    batch and secret key data. form "vmap": jit(vmap(run.keyed)) over a leading K axis of each argument;
    "each": one jit(run.keyed) called on each run's slice, the arguments and results lists of K (`Pack`).
    The runs must be one job's (one route, no mechanism wrapper, no mask)."""
    if len({r.route for r in runs}) != 1 or any(r.keyed is None or r.wrapped is not None or r.prune_mask is not None
                                                for r in runs):
        raise ValueError("packed runs need one job's plain DP-SGD step (one route, no wrapper, no pruning mask)")
    if form == "vmap":
        return jax.jit(jax.vmap(runs[0].keyed), donate_argnums=0)
    one = jax.jit(runs[0].keyed, donate_argnums=0)

    def each(states: list, batch: list, roots: list) -> tuple[list, list]:
        outs = [one(*args) for args in zip(states, batch, roots, strict=True)]  # dispatched without waiting
        return [state for state, _ in outs], [metrics for _, metrics in outs]

    return each


class Pack:
    """The K runs' arrays in the pack's form: stacked on a leading K axis ("vmap") or lists of K ("each")."""

    def __init__(self, form: str, device):
        self.form, self.device = form, device

    def put(self, trees: Sequence):
        """The K trees in the pack's form on its device, copied through the host either way: the step donates
        the pack's states, and each run's own (Session.state) must outlive them."""
        if self.form == "vmap":
            return stack(trees, self.device)
        return [jax.device_put(jax.device_get(tree), self.device) for tree in trees]

    def batch(self, drawn: Sequence[batches.Drawn]):
        return packed_batch(drawn, self.device, stacked=self.form == "vmap")

    def host_metrics(self, metrics) -> dict:
        """{name: array of K} on the host, one transfer."""
        host = jax.device_get(metrics)
        return host if self.form == "vmap" else {name: np.stack([m[name] for m in host]) for name in host[0]}

    def slice(self, tree, k: int, device):
        """Run k's tree (of the pack's states, on the host or the device) on `device`."""
        if self.form == "vmap":
            return unstack(tree, k, device)
        return jax.device_put(jax.device_get(tree[k]), device)  # a copy: the pack's state k is donated next step


def stack(trees: Sequence, device=None):
    """The trees stacked leaf by leaf on a new leading axis (K), on `device` (default: JAX's). On the host:
    an eager jnp.stack would compile a program per leaf shape."""
    host = jax.device_get(list(trees))
    return jax.device_put(jax.tree.map(lambda *leaves: np.stack(leaves), *host), device)


def unstack(tree, k: int, device=None):
    """Slice k of a stacked tree, on `device` (sliced on the host: no program compiled per leaf shape)."""
    return jax.device_put(jax.tree.map(lambda leaf: np.asarray(leaf)[k], jax.device_get(tree)), device)


def packed_batch(drawn: Sequence[batches.Drawn], device, stacked: bool = True):
    """The K runs' padded batches (this process's one block each) as one (K, chunks, rows, ...) batch on
    `device`, or (stacked False) a list of K (chunks, rows, ...) batches; a run whose layout has fewer chunks
    gets padding chunks (mask False, weight zero): every run of the pack steps at one layout."""
    chunks = max(d.mask.shape[1] for d in drawn)
    parts = {name: [_pad_chunks(getattr(d, name)[0], chunks) for d in drawn] for name in BATCH_KEYS}
    if stacked:
        return {name: jax.device_put(np.stack(arrays), device) for name, arrays in parts.items()}
    return [jax.device_put({name: parts[name][k] for name in BATCH_KEYS}, device) for k in range(len(drawn))]


def _pad_chunks(a: np.ndarray, chunks: int) -> np.ndarray:
    if a.shape[0] == chunks:
        return a
    return np.concatenate([a, np.zeros((chunks - a.shape[0], *a.shape[1:]), a.dtype)])


def _train(sessions: list[Session], progress: bool, form: str | None) -> None:
    """Steps start..S of every run, one packed program a step; whatever stops them, every step that ran is in
    each run's ledger (and ledger.json) before the error propagates."""
    first = sessions[0]
    plan = first.run.plan
    device = first.run.mesh.devices.flat[0]
    pack = Pack(form or pack_form(device), device)
    step = packed_step([s.run for s in sessions], pack.form)
    states, roots = pack.put([s.state for s in sessions]), pack.put([s.roots for s in sessions])
    bar = tqdm(total=plan.steps, initial=first.start, file=sys.stderr, disable=not progress, unit="step",
               dynamic_ncols=True, desc=f"{first.job.experiment.name} B={plan.batch_size} ×{len(sessions)} packed")
    pending = None
    try:
        with loop._Signals() as signals, contextlib.ExitStack() as readers:
            rs = [readers.enter_context(_reader(s)) for s in sessions]
            for t in range(first.start, plan.steps):
                states, metrics = step(states, _batch(sessions, rs, t, pack), roots)
                pending = _after_step(sessions, pack, states, metrics, pending, t + 1, signals.signum)
                bar.update(1)
                if signals.signum is not None or all(s.diverged_at is not None for s in sessions):
                    break
            if pending is not None:
                _settle(sessions, pack, *pending, states)
    except BaseException as err:
        for s in sessions:
            if s.ran > s.start:  # the steps that ran, in ledger.json before the error propagates
                s.ledger.advance(s.release, s.ran)
                s.folder.write_ledger(s.ledger)
            elif isinstance(err, UsageError):  # refused before its first step: nothing is left
                s.tracker.close()
                s.folder.discard_new()
        raise
    finally:
        bar.close()


def _reader(s: Session) -> batches.StepBatches:
    """Run s's own batches: Poisson from its own secret (Mechanism.batch), read by index, one step ahead."""
    return batches.StepBatches(s.run.dataset.train, s.run.mechanism.batch, s.run.mesh, stop=s.run.plan.steps,
                               num_classes=s.run.label_classes, input_shape=s.run.dataset.input_shape, threads=1)


def _batch(sessions: list[Session], readers: list[batches.StepBatches], t: int, pack: Pack):
    """Step t's packed batch: each run's own Poisson batch, its layout grown if its draw outgrew it."""
    drawn = []
    for s, reader in zip(sessions, readers):
        s.grow_layout(t, len(reader.indices(t, s.layout)))
        drawn.append(reader.take_host(t, s.layout))
    return pack.batch(drawn)


def _after_step(sessions: list[Session], pack: Pack, states, metrics, pending, done: int, signum: int | None):
    """Session.after_step for the pack: the previous step's metrics settled (one transfer for all K), the
    clocks, and when due the evaluations and checkpoints of every live run on its own slice. Returns the
    metrics left pending."""
    job, steps = sessions[0].job, sessions[0].run.plan.steps
    for s in sessions:
        if s.diverged_at is None:
            s.ran = done
    is_eval, is_ckpt = due(job.train, done, steps)
    if pending is not None:
        _settle(sessions, pack, *pending, states)
    pending = (metrics, done)
    if sessions[0].clock is None or is_eval or is_ckpt or signum is not None:
        _settle(sessions, pack, metrics, done, states)  # compile time, evaluations, checkpoints: wait
        pending = None
    live = [(k, s) for k, s in enumerate(sessions) if s.diverged_at is None]
    for _, s in live:
        if s.clock is None:
            s.clock = time.perf_counter()  # throughput counts from here: compilation excluded
        else:
            s.examples += s.run.plan.batch_size  # the expected B: the sampled size is private
    if is_eval or is_ckpt or signum is not None:
        host = jax.device_get(states)  # one transfer for every run's slice
        for k, s in live:
            s.state = pack.slice(host, k, s.run.mesh.devices.flat[0])
    if is_eval:
        _evaluate_all([s for _, s in live], done)
    for _, s in live:
        if is_ckpt or signum is not None:
            s.checkpoint(done)
        if signum is not None:
            s.interrupted = signal.Signals(signum).name
    return pending


def _evaluate_all(sessions: list[Session], done: int) -> None:
    """Each run's evaluation; the time of all of them is out of each run's training time (they wait in turn)."""
    began, before = time.perf_counter(), [s.eval_seconds for s in sessions]
    for s in sessions:
        s.timed_evaluation(done)
    spent = time.perf_counter() - began
    for s, seconds in zip(sessions, before):
        s.eval_seconds = seconds + spent


def _settle(sessions: list[Session], pack: Pack, metrics, step: int, states) -> None:
    """Step `step`'s metrics on the host for every live run: its private batch's loss and accuracy (s.last),
    or, when its released parameters are not all finite, its stop there (its steps accounted, as the loop's)."""
    host = pack.host_metrics(metrics)
    for k, s in enumerate(sessions):
        if s.diverged_at is not None:
            continue
        if not bool(host["params_finite"][k]):
            s.diverged_at = step
            s.ledger.advance(s.release, s.ran)  # diverged_at_step is published: the steps behind it count
            s.state = pack.slice(states, k, s.run.mesh.devices.flat[0])
        else:
            s.last = {name: float(v[k]) for name, v in host.items() if name != "params_finite"}
