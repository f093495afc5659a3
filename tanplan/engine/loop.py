"""THE training loop: every DP-SGD run of tanplan goes through `train_and_evaluate` — `tanplan train`, every
proxy of `sweep` and `fit`, and `launch` (locally, and in each Ray worker). A proxy is the same program
as its target, only smaller.

    summary = train_and_evaluate(job, Path("runs/x"))                 # a new run (job = RunJob.of(cfg): tanplan.job)
    summary = train_and_evaluate(job, Path("runs/x"), resume=True)    # continue it exactly

Step t (0-based): its Poisson batch is drawn from the run's secret (`secret.batch_rng(BATCH, t)`:
jax-privacy's CyclicPoissonSampling, one iteration, INDEPENDENT partition, so each example is in with
probability q = B/N: the run's mechanism, tanplan.dp.mechanism), its rows read by index from the training
source, step t+1's in the background (tanplan.engine.batches: nothing reads the whole set), padded to a
fixed layout; the jitted step (tanplan.engine.setup) clips each example's gradient to C, adds N(0, σ²C²)
ONCE to the global sum (across accumulation chunks and across every device of every process: the state and
the noise key are replicated) and divides by B. Its noise key is fold_in(secret key, t); example i's
augmentation views use fold_in(fold_in(secret augmentation key, t), i), i its index in the training set
(never its place in the batch). Every chunk of the layout is computed, so a step costs the same whatever its
draw held. Nothing depends on how many steps this process took before, so a resumed run continues with the
identical batches, views and noise and ends with the parameters of an uninterrupted run, bit for bit on the
same devices.

Every evaluation and checkpoint releases the steps taken so far: the ledger (tanplan.privacy.ledger)
counts them (ledger.json is written before the metrics line or the checkpoint it covers), and the ε
reported is the ledger's figure of record (`Ledger.record()`: the config's accountant and neighbouring
relation; RDP under add/remove-one for a proxy): metrics.jsonl's `epsilon_spent`, TensorBoard, the model
card and summary.json's `epsilon`. Whatever stops the run after steps ran (divergence, an error reading a
batch, any exception), the ledger counts every step taken before the error propagates: the step at which
it stopped is a function of those noisy steps. What the run publishes (metrics.jsonl, summary.json,
ledger.json, model/) is a function of the noisy parameters, the test set and public information only (the
config, N, the planned batch layout, the expected batch size B for the throughput): never of the sampled
batches' sizes or contents. The training loss and accuracy of the private batches, which carry no noise,
go to the private folder (and the progress bar). The records of metrics.jsonl (with their wall-clock time and throughput)
also go to TensorBoard event files and any plugged-in writer (tanplan.engine.tracking); the progress bar
shows the ε of record from step 1, between evaluations as "≤" its value at the next one
(tanplan.engine.epsilon_ticker). summary.json and ledger.json record the
platform, the devices and the library versions (tanplan.provenance). SIGTERM and SIGINT finish the step in
flight, save a checkpoint and stop with RunInterrupted (exit 128 + signal); `--resume` continues.
Non-finite released (noisy) parameters stop the run with TrainingDiverged (its steps accounted); the
last good checkpoint is kept. Files: tanplan.engine.run_folder. The periodic jobs (evaluation, checkpoint,
throughput, bar) are tanplan.engine.session's; the summary, AugTest and the model card tanplan.engine.closing's.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import sys
import time
from pathlib import Path
from typing import Callable, Iterable

import jax
from tqdm import tqdm

from tanplan.dp import sampling, sharding
from tanplan.dp import step as dp_step
from tanplan.engine import batches, setup, tracking
from tanplan.engine.closing import close_run
from tanplan.engine.epsilon_ticker import EpsilonTicker
from tanplan.engine.hooks import NONE, RunHooks
from tanplan.engine.route_notes import cpu_chunks_line, say_once
from tanplan.engine.run_folder import RunFolder
from tanplan.engine.run_identity import fingerprint, run_identity
from tanplan.engine.session import NonFinite, Session
from tanplan.errors import RunInterrupted, TrainingDiverged, UsageError
from tanplan.job import RunJob
from tanplan.outcomes.run_summary import RunSummary
from tanplan.privacy import accounting
from tanplan.privacy.ledger import Ledger
from tanplan.provenance import environment

# Testing aid: seconds to sleep after each step, so that a test can stop a tiny run mid-way.
STEP_DELAY_ENV = "TANPLAN_DEBUG_STEP_DELAY"


def train_and_evaluate(job: RunJob, workdir: str | Path | None = None, *, resume: bool = False,
                       progress: bool = True, on_eval: Callable[[int, dict], None] | None = None,
                       backend: str = "local", writers: Iterable[tracking.Writer] = (), hooks: RunHooks = NONE,
                       dataset=None) -> RunSummary:
    """Train job's plan (its proxy when train.proxy_batch_size > 0) and return its RunSummary.

    Evaluates every train.eval_every steps and at the end (on_eval(step, record) sees each record),
    checkpoints every train.checkpoint_every steps (0: only at the end) and on SIGTERM/SIGINT. resume:
    continue the newest intact checkpoint in workdir (a finished run takes no step and reports again).
    writers: more tracking writers for the published records, beside [tracking]'s (tanplan.engine.tracking).
    Raises UsageError on bad input (before any step; or a bad row met mid-run), TrainingDiverged,
    RunInterrupted; whatever stops it after steps ran, ledger.json counts every one of them first.

    hooks: what a stage adds around the run (tanplan.engine.hooks; the privacy audit's, tanplan.workflow.audit):
    a wrapper of the run's mechanism, whose step computes the wrapper's noisy sum (never resumed: what it
    drew lives in memory only), handed to hooks.on_finish once the run finished; hooks.release_marks go into
    summary.json; a run that is not a private release (hooks.private_release false) has its folder marked
    when opened (run_folder.AUDIT_MARKER: no resume, no other run into it) and says so in summary.json and
    the model card.
    dataset: a tanplan.data Dataset to train on in place of job.data's (tanplan.workflow.final_audit passes
    its training set with the examples it audits held in); N, q and σ are then this set's, and the run is not
    a private release (private_release false).
    """
    if hooks.wrap is not None and resume:
        raise ValueError("a run with a wrapped mechanism is never resumed: what its wrapper drew lives in memory only")
    if dataset is not None:  # trained on a set of a stage's own: not a release of job.data
        hooks = dataclasses.replace(hooks, private_release=False)
    factories = tracking.resolve_factories(job.tracking)  # a bad import path stops here, before anything is written
    started = time.perf_counter()
    primary, single = jax.process_index() == 0, jax.process_count() == 1
    say = (lambda msg: print(msg, file=sys.stderr)) if primary else (lambda msg: None)
    prepared = setup.prepare(job, dataset)  # data, plan, δ, model: everything that can refuse the run, before any file
    plan = prepared.plan
    marked = not hooks.private_release  # not a private release: its folder is marked before anything else
    with RunFolder(workdir, resume=resume, primary=primary, lock=single, audit=marked) as folder:
        # The secret is bound to this run: reused only by its own resume (a Ray launch's workers read the driver's).
        secret = folder.secret(job.privacy.noise_seed, run_identity(job, plan, prepared.dataset, prepared.params,
                                                                 setup.init_digest(prepared)),
                               create=single)
        if secret.reproducible and job.privacy.private:
            say(f"tanplan: warning: privacy.noise_seed = {job.privacy.noise_seed}: the noise and the batches are "
                "reproducible from the config; this run is NOT private (for tests only)")
        run = setup.build(job, secret, prepared, wrap=hooks.wrap)
        say_once(run.route_note, say)  # a plugged-in model's gradient route
        env = environment(run.mesh.devices.flat)
        s = _resume_or_start(job, run, folder, backend, env, say)  # (1)-(4): restore, refuse, rewrite, continue
        s.on_eval = on_eval
        if progress and primary and plan.private:
            s.ticker = EpsilonTicker(s.ledger, s.release, _marks(job, plan))
        slow = cpu_chunks_line(run.route, s.layout.chunks, s.layout.capacity)
        if slow and jax.default_backend() == "cpu":
            say(slow)
        s.state, s.roots = sharding.replicate_global(s.state, run.mesh), sharding.replicate_global(run.roots, run.mesh)
        s.bar = _progress_bar(job, run, s.start, show=progress and primary)
        s.tracker = tracking.open_tracker(job, folder.out, factories, writers, start=s.start, primary=primary)
        _train_steps(s)
        summary = close_run(s, started=started, backend=backend, env=env, hooks=hooks)
    _raise_if_stopped(s, job, workdir)
    if run.wrapped is not None and hooks.on_finish is not None:
        hooks.on_finish(run.wrapped)
    return summary


def _progress_bar(job: RunJob, run: setup.Run, start: int, *, show: bool) -> tqdm:
    """The bar on stderr: steps, the expected B and σ (public), and the devices when more than one."""
    plan, ndev = run.plan, run.mesh.devices.size
    desc = f"{job.experiment.name} B={plan.batch_size} σ={plan.sigma:.3g}" + (f" ×{ndev}" if ndev > 1 else "")
    return tqdm(total=plan.steps, initial=start, file=sys.stderr, disable=not show, unit="step", dynamic_ncols=True,
                desc=desc)


def _marks(job: RunJob, plan) -> Callable[[int], int]:
    """The evaluation step at or after a step (the ε ticker's next mark)."""
    every = job.train.eval_every
    return lambda step: min(-(-step // every) * every, plan.steps)


def _resume_or_start(job: RunJob, run: setup.Run, folder: RunFolder, backend: str, env, say) -> Session:
    """The session at its first step, with its ledger. Resume, in this order: (1) restore the newest intact
    checkpoint, moving damaged newer ones aside; (2) refuse if the config differs from the one it was saved
    with; (3) only then rewrite config.toml and drop later metrics; (4) go on at its step with the same
    secret: the same batches and noise."""
    plan, ndev = run.plan, run.mesh.devices.size
    state = dp_step.create_train_state(run.params, run.optimizer, job.train.ema_decay, run.partition)
    proxy = plan.target is not None
    # One PLD grid for every figure of the run (scaled to its planned ε): its ε of record grows with its steps.
    grid = accounting.pld_grid(plan.events(), plan.delta, plan.neighbouring) if plan.private and not proxy else None
    ledger = Ledger(budget_epsilon=job.privacy.epsilon if plan.private else None, delta=plan.delta,
                    accountant=plan.accountant, neighbouring=plan.neighbouring, proxy=proxy, pld_interval=grid,
                    **setup.ledger_inputs(run))  # [init]: public, or its inherited releases
    # The planned layout is public (N, q, the config); a layout grown for a batch that outgrew it is
    # private (it bounds a sampled batch size): it stays in the checkpoint, never in summary.json.
    planned = layout = sampling.batch_layout(run.dataset.num_train, plan.q, job.perf.physical_batch_size, ndev)
    start = 0
    restored = folder.restore(state, fingerprint(job, plan), log=say)  # (1), (2)
    if restored is not None:
        state, meta = restored
        start, ledger = int(meta["step"]), Ledger.from_dict(meta["ledger"])
        ledger.proxy = proxy  # (a checkpoint written before these fields existed: set them)
        ledger.pld_interval = grid if ledger.pld_interval is None else ledger.pld_interval
        saved = sampling.BatchLayout(**meta["layout"])
        layout = saved if saved.chunk_size % ndev == 0 else layout.grown_to(saved.capacity)
        say(f"tanplan: resuming from the checkpoint of step {start}")
    elif plan.snip_sigma:
        ledger.record_snip(plan.q, plan.snip_sigma, plan.delta)  # released by setup.build, before step 1
    folder.begin(job.record, start)  # (3)
    release = ledger.open_release(start, plan.q, plan.sigma, plan.delta, backend=backend, devices=ndev,
                                  platform=env.platform, device_kind=env.device_kind, versions=env.versions)
    return Session(job, run, folder, ledger, release, start, planned, layout, state, run.roots, ran=start)  # (4)


def _train_steps(s: Session) -> None:
    """Steps start..S, each batch read by index (the next one prefetched), until the end, a signal or a
    non-finite release; whatever stops them, every step that ran is in the ledger (and ledger.json)."""
    run, plan = s.run, s.run.plan
    delay = float(os.environ.get(STEP_DELAY_ENV, "0") or 0)
    try:
        with _Signals() as signals, batches.StepBatches(run.dataset.train, run.mechanism.batch, run.mesh,
                                                        stop=plan.steps, num_classes=run.label_classes,
                                                        input_shape=run.dataset.input_shape) as reader:
            for t in range(s.start, plan.steps):
                s.state, metrics = _step(s, reader, t)
                s.after_step(metrics, t + 1, lambda: signals.signum is not None)
                if signals.signum is not None:
                    s.interrupted = signal.Signals(signals.signum).name
                    break
                if delay:
                    time.sleep(delay)
            if s.pending is not None:
                s.last = s.settle_pending()
    except NonFinite as err:
        s.diverged_at = err.step
        s.ledger.advance(s.release, s.ran)  # diverged_at_step is published: the steps behind it count
    except BaseException as err:
        if s.ran > s.start:  # the steps that ran, in ledger.json before the error propagates
            s.ledger.advance(s.release, s.ran)
            s.folder.write_ledger(s.ledger)
        elif isinstance(err, UsageError):  # refused before its first step (a bad row read): nothing is left
            s.tracker.close()
            s.folder.discard_new()
        raise
    finally:
        s.bar.close()


def _step(s: Session, reader: batches.StepBatches, t: int):
    """Step t on its Poisson batch (read by index, padded to the layout); a wrapped mechanism's step also
    gets the wrapper's draws of step t and the rows it reads beside the batch, and hands the wrapper back
    the step's metrics (tanplan.engine.hooks.Wrapped)."""
    wrapped = s.run.wrapped
    indices = reader.indices(t, s.layout)  # read by index from the source, step t+1 prefetched
    drawn, rows = wrapped.draw_step(t) if wrapped is not None else ({}, {})
    rows = {name: index for name, index in rows.items() if len(index)}
    s.grow_layout(t, max([len(indices), *(len(index) for index in rows.values())]))
    _, batch = reader.take(t, s.layout)
    if wrapped is None:
        return s.run.step(s.state, batch, s.roots)
    extra = {"args": {name: sharding.replicate_global(a, s.run.mesh) for name, a in drawn.items()},
             "rows": {name: reader.place(index, s.layout) for name, index in rows.items()}}
    state, metrics = s.run.step(s.state, batch, s.roots, extra)
    return state, wrapped.keep(metrics)


def _raise_if_stopped(s: Session, job: RunJob, workdir) -> None:
    """TrainingDiverged or RunInterrupted once the run's files are written."""
    if s.diverged_at is not None:
        kept = f"; the last good checkpoint is kept at step {s.history[-1]['step']}" if s.history and workdir else ""
        raise TrainingDiverged(f"training diverged: the parameters are not finite after step {s.diverged_at} "
                               f"(learning rate {job.train.learning_rate:g} may be too high; its {s.ledger.steps} "
                               f"steps are accounted in the ledger){kept}")
    if s.interrupted:  # a run with no folder (api.train(out=None)) saved nothing: nothing to resume
        kept = (f"checkpoint saved in {str(Path(workdir) / 'checkpoint')!r}; continue with --resume" if workdir
                else "nothing was saved (the run had no output folder)")
        raise RunInterrupted(f"{s.interrupted}: stopped after step {s.ledger.steps} of {s.run.plan.steps}; {kept}",
                             getattr(signal, s.interrupted))


_THREAD_RUNS: set = set()  # the _Signals of loops running outside the main thread (proxies at once)


def interrupt_thread_runs(signum: int) -> None:
    """Stop the loops running in other threads as a signal would: each saves its checkpoint after its step
    and raises RunInterrupted (the main thread got the signal: tanplan.workflow.proxy_devices)."""
    for signals in list(_THREAD_RUNS):
        signals.signum = signum


class _Signals:
    """SIGTERM/SIGINT set a flag the loop reads after each step (main thread; in another thread
    `interrupt_thread_runs` sets it)."""

    def __init__(self):
        self.signum: int | None = None
        self._previous = {}

    def __enter__(self):
        for s in (signal.SIGTERM, signal.SIGINT):
            try:
                self._previous[s] = signal.signal(s, self._handle)
            except ValueError:  # not the main thread (a Ray worker, a proxy): the runtime or the caller handles them
                _THREAD_RUNS.add(self)
        return self

    def _handle(self, signum, frame):
        self.signum = signum

    def __exit__(self, *exc):
        _THREAD_RUNS.discard(self)
        for s, handler in self._previous.items():
            signal.signal(s, handler)
