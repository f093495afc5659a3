"""THE training loop: every DP-SGD run of tanplan goes through `train_and_evaluate` — `tanplan train`, every
proxy of `sweep` and `fit`, and `launch` (locally, and in each Ray worker). A proxy is the same program
as its target, only smaller.

    summary = train_and_evaluate(cfg, Path("runs/x"))                 # a new run
    summary = train_and_evaluate(cfg, Path("runs/x"), resume=True)    # continue it exactly

Step t (0-based): its Poisson batch is drawn from the run's secret (`secret.batch_rng(BATCH, t)`:
jax-privacy's CyclicPoissonSampling, one iteration, INDEPENDENT partition, so each example is in with
probability q = B/N), its rows read by index from the training source, step t+1's in the background
(tanplan.engine.batches: nothing reads the whole set), padded to a fixed layout; the jitted step (tanplan.engine.setup) clips each
example's gradient to C, adds N(0, σ²C²) ONCE to the global sum (across accumulation chunks and across
every device of every process: the state and the noise key are replicated) and divides by B. Its noise
key is fold_in(secret key, t); example i's augmentation views use fold_in(fold_in(secret augmentation key,
t), i), i its index in the training set (never its place in the batch). Every chunk of the layout is
computed, so a step costs the same whatever its draw held. Nothing depends on how many steps this
process took before, so a resumed run continues with the identical batches, views and noise and ends
with the parameters of an uninterrupted run, bit for bit on the same devices.

Every evaluation and checkpoint releases the steps taken so far: the ledger (tanplan.privacy.ledger)
counts them (ledger.json is written before the metrics line or the checkpoint it covers), and the ε
reported is the ledger's figure of record (`Ledger.record()`: the config's accountant and neighbouring
relation; RDP under add/remove-one for a proxy): metrics.jsonl's `epsilon_spent`, TensorBoard, the model
card and summary.json's `epsilon`. Whatever stops the run after steps ran (divergence, an error reading a
batch, any exception), the ledger counts every step taken before the error propagates: the step at which
it stopped is a function of those noisy steps. What the run publishes (metrics.jsonl, summary.json,
ledger.json, model/) is a function of the noisy parameters, the test set and public information only (the config, N, the planned
batch layout, the expected batch size B for the throughput): never of the sampled batches' sizes or
contents. The training loss and accuracy of the private batches, which carry no noise, go to the private
folder (and the progress bar). The records of metrics.jsonl (with their wall-clock time and throughput)
also go to TensorBoard event files and any plugged-in writer (tanplan.engine.tracking); the progress bar
shows the ε of record from step 1, between evaluations as "≤" its value at the next one
(tanplan.engine.epsilon_ticker). summary.json and ledger.json record the
platform, the devices and the library versions (tanplan.provenance). SIGTERM and SIGINT finish the step in
flight, save a checkpoint and stop with RunInterrupted (exit 128 + signal); `--resume` continues.
Non-finite released (noisy) parameters stop the run with TrainingDiverged (its steps accounted); the
last good checkpoint is kept. Files: tanplan.engine.run_folder.
"""

from __future__ import annotations

import dataclasses
import math
import os
import signal
import sys
import time
from pathlib import Path
from typing import Callable, Iterable

import numpy as np

from tanplan.config import Config
from tanplan.engine import batches, evaluation, setup, tracking
from tanplan.engine.checkpoint import host_array
from tanplan.engine.run_folder import RunFolder, fingerprint
from tanplan.engine.summary import RunSummary
from tanplan.errors import RunInterrupted, TrainingDiverged, UsageError
from tanplan.privacy import accounting
from tanplan.privacy.ledger import Ledger
from tanplan.provenance import environment

# Testing aid: seconds to sleep after each step, so that a test can stop a tiny run mid-way.
STEP_DELAY_ENV = "TANPLAN_DEBUG_STEP_DELAY"
_SAID: set[str] = set()  # lines this process said once (a plugged-in model's gradient route)


def train_and_evaluate(cfg: Config, workdir: str | Path | None = None, *, resume: bool = False,
                       progress: bool = True, on_eval: Callable[[int, dict], None] | None = None,
                       backend: str = "local", writers: Iterable[tracking.Writer] = (), canaries: int = 0) -> dict:
    """Train cfg's plan (its proxy when train.proxy_batch_size > 0) and return its summary (RunSummary).

    Evaluates every train.eval_every steps and at the end (on_eval(step, record) sees each record),
    checkpoints every train.checkpoint_every steps (0: only at the end) and on SIGTERM/SIGINT. resume:
    continue the newest intact checkpoint in workdir (a finished run takes no step and reports again).
    writers: more tracking writers for the published records, beside [tracking]'s (tanplan.engine.tracking).
    Raises UsageError on bad input (before any step; or a bad row met mid-run), TrainingDiverged,
    RunInterrupted; whatever stops it after steps ran, ledger.json counts every one of them first.

    canaries > 0: the privacy audit's run (tanplan.workflow.audit is the only caller that passes it): the
    step adds that many gradient canaries before the noise (tanplan.dp.canaries); summary.json and the model
    card say so (not a private release), and the summary returned holds "canary_record" (the secret draw and
    what each step released on the canaries), which is never written.
    """
    import jax
    from tqdm import tqdm

    from tanplan.dp import canaries as canary_lib
    from tanplan.dp import sampling, sharding
    from tanplan.dp import step as dp_step
    from tanplan.dp.secret import BATCH
    from tanplan.engine.epsilon_ticker import EpsilonTicker
    from tanplan.engine.run_folder import identity

    if canaries and resume:
        raise ValueError("an audited run is never resumed: the canaries' observations live in memory only")
    factories = tracking.resolve_factories(cfg)  # a bad import path stops here, before anything is written
    started = time.perf_counter()
    primary, single = jax.process_index() == 0, jax.process_count() == 1
    say = (lambda msg: print(msg, file=sys.stderr)) if primary else (lambda msg: None)
    # Everything that can refuse the run (data, plan, δ, model) is checked before any file is written.
    prepared = setup.prepare(cfg)
    plan = prepared.plan
    with RunFolder(workdir, resume=resume, primary=primary, lock=single) as folder:
        # The secret is bound to this run: reused only by its own resume (the workers of a Ray launch
        # read the driver's).
        secret = folder.secret(cfg.privacy.noise_seed, identity(cfg, plan, prepared.dataset, prepared.params),
                               create=single)
        if secret.reproducible and cfg.privacy.private:
            say(f"tanplan: warning: privacy.noise_seed = {cfg.privacy.noise_seed}: the noise and the batches are "
                "reproducible from the config; this run is NOT private (for tests only)")
        run = setup.build(cfg, secret, prepared, canaries=canaries)
        if run.route_note and run.route_note not in _SAID:  # a plugged-in model's gradient route, said once
            _SAID.add(run.route_note)
            say(run.route_note)
        observed = []  # an audited run's canary observations, one device array per step
        t_cfg = cfg.train
        n = run.dataset.num_train
        ndev = run.mesh.devices.size
        env = environment(run.mesh.devices.flat)

        # Resume, in this order: (1) restore the newest intact checkpoint, moving damaged newer ones aside;
        # (2) refuse if the config differs from the one it was saved with; (3) only then rewrite config.toml
        # and drop later metrics; (4) go on at its step with the same secret: the same batches and noise.
        state = dp_step.create_train_state(run.params, run.optimizer, t_cfg.ema_decay)
        proxy = plan.target is not None
        # One PLD grid for every figure of the run (scaled to its planned ε): its ε of record grows with its steps.
        grid = accounting.pld_grid(plan.events(), plan.delta, plan.neighbouring) if plan.private and not proxy else None
        ledger = Ledger(budget_epsilon=cfg.privacy.epsilon if plan.private else None, delta=plan.delta,
                        accountant=plan.accountant, neighbouring=plan.neighbouring, proxy=proxy, pld_interval=grid)
        # The planned layout is public (N, q, the config); a layout grown for a batch that outgrew it is
        # private (it bounds a sampled batch size): it stays in the checkpoint, never in summary.json.
        planned = layout = sampling.batch_layout(n, plan.q, t_cfg.physical_batch_size, ndev)
        start = 0
        restored = folder.restore(state, fingerprint(cfg, plan), log=say)
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
        folder.begin(cfg, start)
        release = ledger.open_release(start, plan.q, plan.sigma, plan.delta, backend=backend, devices=ndev,
                                      platform=env.platform, device_kind=env.device_kind, versions=env.versions)
        marks = lambda step: min(-(-step // t_cfg.eval_every) * t_cfg.eval_every, plan.steps)  # noqa: E731
        ticker = EpsilonTicker(ledger, release, marks) if progress and primary and plan.private else None
        if run.route in ("vmap", "plain") and layout.chunks > 1 and jax.default_backend() == "cpu":
            say(f"tanplan: note: the {run.route} gradient route accumulates {layout.chunks} chunks; on CPU, XLA runs "
                "convolution weight-gradients inside loops very slowly: raise train.physical_batch_size to "
                f"{layout.capacity} for one chunk per step")

        state = sharding.replicate_global(state, run.mesh)
        roots = sharding.replicate_global(run.roots, run.mesh)
        history: list[dict] = []
        last: dict = {}
        pending = None  # metrics of the step in flight, read one step late so the host keeps the device busy
        clock, examples, eval_seconds, diverged_at, interrupted = None, 0, 0.0, None, None
        delay = float(os.environ.get(STEP_DELAY_ENV, "0") or 0)
        bar = tqdm(total=plan.steps, initial=start, file=sys.stderr, disable=not (progress and primary), unit="step",
                   dynamic_ncols=True, desc=f"{cfg.experiment.name} B={plan.batch_size} σ={plan.sigma:.3g}"
                                             + (f" ×{ndev}" if ndev > 1 else ""))

        def evaluate_now(step: int) -> dict:
            ledger.advance(release, step)  # the evaluated parameters are released: their steps count
            params = run_params(state)
            record = {"step": step, **evaluation.evaluate(run.eval_batch, params, run.dataset.test,
                                                          t_cfg.eval_batch_size, run.local_mesh),
                      "epsilon_spent": ledger.epsilon_of_record()}
            if state.ema_params is not None:
                raw = evaluation.evaluate(run.eval_batch, local(state.params), run.dataset.test,
                                          t_cfg.eval_batch_size, run.local_mesh)
                record["test_accuracy_no_ema"] = raw["test_accuracy"]
            record["steps_per_second"] = _steps_per_second(step - start - 1, clock, eval_seconds)
            record["wall_time"] = time.time()
            # A model whose finite parameters overflow its outputs has no finite test loss: null, valid JSON.
            record = {k: None if isinstance(v, float) and not math.isfinite(v) else v for k, v in record.items()}
            folder.write_ledger(ledger)  # first: a kill before the metrics line over-reports, never under
            folder.append_metrics(record)
            tracker.write(record)
            # The training loss and accuracy of the private batch carry no noise: private diagnostics only.
            folder.append_diagnostics({"step": step, "loss": last.get("loss"), "train_accuracy": last.get("accuracy")})
            if on_eval is not None:
                on_eval(step, record)
            return record

        def run_params(s):
            return local(s.ema_params if s.ema_params is not None else s.params)

        def local(tree):  # this process's copy of replicated parameters, on its own devices
            return sharding.replicate(jax.tree.map(host_array, tree), run.local_mesh)

        tracker = tracking.open_tracker(cfg, folder.out, factories, writers, start=start, primary=primary)
        ran = start  # steps this session took (dispatched): every one is accounted, whatever stops the run
        try:
            draw = lambda t: sampling.poisson_batch(n, plan.q, secret.batch_rng(BATCH, t))  # noqa: E731
            with _Signals() as signals, batches.StepBatches(run.dataset.train, draw, run.mesh, stop=plan.steps,
                                                            num_classes=run.label_classes,
                                                            input_shape=run.dataset.input_shape) as reader:
                for t in range(start, plan.steps):
                    indices = reader.indices(t, layout)  # read by index from the source, step t+1 prefetched
                    if canaries:  # the audit's run: the step's canaries and the auditor's shadow batch
                        chosen, shadow = canary_lib.step_draws(secret, t, canaries, n, plan.q)
                    largest = max(len(indices), len(shadow) if canaries else 0)
                    if largest > layout.capacity:  # rare; its size is private: not said, not published
                        layout = layout.grown_to(largest)
                        bar.write(f"tanplan: step {t + 1}: a Poisson batch exceeds the padded layout; growing it "
                                  "(one more compilation)")
                    indices, batch = reader.take(t, layout)
                    if canaries:
                        audit = {"chosen": sharding.replicate_global(chosen, run.mesh),
                                 "shadow": reader.place(shadow, layout)}
                        state, metrics = run.step(state, batch, roots, audit)
                        observed.append(metrics.pop(canary_lib.OBSERVATION))
                    else:
                        state, metrics = run.step(state, batch, roots)
                    ran = done = t + 1
                    if pending is not None:
                        last = _settle(*pending)
                    pending = (metrics, done)
                    is_eval = done % t_cfg.eval_every == 0 or done == plan.steps
                    every = t_cfg.checkpoint_every
                    is_ckpt = (every and done % every == 0) or done == plan.steps
                    if clock is None or is_eval or is_ckpt or signals.signum is not None:
                        last, pending = _settle(*pending), None  # compile time, evaluations, checkpoints: wait
                    if clock is None:
                        clock = time.perf_counter()  # throughput counts from here: compilation excluded
                    else:
                        examples += plan.batch_size  # the expected batch B: the sampled size is private
                    if is_eval:
                        eval_start = time.perf_counter()
                        history.append(evaluate_now(done))
                        eval_seconds += time.perf_counter() - eval_start
                    if is_ckpt or signals.signum is not None:  # a signal (even during the evaluation): save, stop
                        ledger.advance(release, done)
                        folder.save(done, state, _meta(done, cfg, plan, ledger, layout), ledger)
                    bar.set_postfix(_postfix(last, history, ticker, done, plan.private), refresh=False)
                    bar.update(1)
                    if signals.signum is not None:
                        interrupted = signal.Signals(signals.signum).name
                        break
                    if delay:
                        time.sleep(delay)
                if pending is not None:
                    last = _settle(*pending)
        except _NonFinite as err:
            diverged_at = err.step
            ledger.advance(release, ran)  # diverged_at_step is published: the steps behind it count
        except BaseException as err:
            if ran > start:  # the steps that ran, in ledger.json before the error propagates
                ledger.advance(release, ran)
                folder.write_ledger(ledger)
            elif isinstance(err, UsageError):  # refused before its first step (a bad row read): nothing is left
                tracker.close()
                folder.discard_new()
            raise
        finally:
            bar.close()

        if not history and not interrupted and diverged_at is None:  # resumed at the end: evaluate what was saved
            history.append(evaluate_now(ledger.steps))
        tracker.close()  # (left open by an error: its writes are flushed, TensorBoard's thread is a daemon)
        train_seconds = time.perf_counter() - clock - eval_seconds if clock is not None else 0.0
        final = history[-1] if history else {}
        # PLD at a proxy's small σ takes minutes (or cannot run), and a proxy's own ε guarantees nothing: RDP.
        pld = ledger.pld_figures() if plan.target is None else {"epsilon_pld": None, "epsilon_replace_one": None}
        accountant_of_record, neighbouring_of_record = ledger.record()
        summary = RunSummary(
            test_accuracy=final.get("test_accuracy"), test_loss=final.get("test_loss"),
            epsilon=ledger.epsilon_of_record(), epsilon_accountant=accountant_of_record,
            epsilon_neighbouring=neighbouring_of_record,
            epsilon_rdp=ledger.epsilon("rdp"), epsilon_pld=pld["epsilon_pld"],
            epsilon_replace_one=pld["epsilon_replace_one"], neighbouring=plan.neighbouring,
            delta=plan.delta, accountant=plan.accountant, private=plan.private, noise_secret=not secret.reproducible,
            dataset_size=plan.dataset_size, batch_size=plan.batch_size, steps=ledger.steps, planned_steps=plan.steps,
            sigma=plan.sigma, snip_sigma=plan.snip_sigma or None, clip_norm=plan.clip_norm,
            target=plan.target.to_dict() if plan.target is not None else None, grad_method=run.route,
            layout={"chunks": planned.chunks, "chunk_size": planned.chunk_size}, backend=backend, devices=ndev,
            processes=jax.process_count(), resumed_from_step=start, steps_this_run=ledger.steps - start,
            wall_seconds=time.perf_counter() - started, train_seconds=train_seconds,
            samples_per_second=examples / train_seconds if train_seconds > 0 and examples else None,
            params_checksum=evaluation.params_checksum(state.params), evaluated_at_step=final.get("step"),
            diverged_at_step=diverged_at, interrupted=interrupted,
            test_accuracy_no_ema=final.get("test_accuracy_no_ema"), pruning=run.pruning,
            platform=env.platform, device_kind=env.device_kind, versions=env.versions)
        if diverged_at is None and not interrupted:
            augtest = evaluation.evaluate_augtest(cfg, run.logits_fn, run_params(state), run.dataset, run.augment,
                                                  run.test_key)
            summary = dataclasses.replace(summary, test_accuracy_augtest=augtest)
            summary = dataclasses.replace(summary, model=folder.write_model(run_params(state),
                                                                            _model_card(cfg, run, summary, canaries)))
        folder.write_ledger(ledger, with_pld=plan.target is None)
        written = summary.to_dict() | ({"audit_canaries": canaries, "private_release": False} if canaries else {})
        folder.write_summary(written)
    if diverged_at is not None:
        kept = f"; the last good checkpoint is kept at step {history[-1]['step']}" if history and workdir else ""
        raise TrainingDiverged(f"training diverged: the parameters are not finite after step {diverged_at} (learning "
                               f"rate {cfg.train.learning_rate:g} may be too high; its {ledger.steps} steps are "
                               f"accounted in the ledger){kept}")
    if interrupted:
        raise RunInterrupted(f"{interrupted}: stopped after step {ledger.steps} of {plan.steps}; checkpoint saved in "
                             f"{str(Path(workdir) / 'checkpoint')!r}; continue with --resume", getattr(signal, interrupted))
    if canaries:
        design, drawn = run.canaries
        record = canary_lib.CanaryRecord(design, drawn, np.stack([host_array(o) for o in observed]))
        return written | {"canary_record": record}
    return summary.to_dict()


class _NonFinite(Exception):
    def __init__(self, step: int):
        super().__init__(step)
        self.step = step


def _settle(metrics, step: int) -> dict:
    """The step's metrics on the host; _NonFinite when the released (noisy) parameters are not all finite
    (nothing is saved then). Never the loss: it is a noiseless function of the private batch, and the
    step at which the run stops is published (diverged_at_step)."""
    values = {k: float(host_array(v)) for k, v in metrics.items()}
    if not values.pop("params_finite", 1.0):
        raise _NonFinite(step)
    return values


def _meta(step: int, cfg: Config, plan, ledger: Ledger, layout) -> dict:
    """The checkpoint's record. No key, no seed: the secret is stored beside it, in the same private folder."""
    return {"step": step, "fingerprint": fingerprint(cfg, plan), "ledger": ledger.to_dict(),
            "layout": {"chunks": layout.chunks, "chunk_size": layout.chunk_size},
            "sampler": {"kind": "poisson", "next_step": step}}


def _model_card(cfg: Config, run, summary: RunSummary, canaries: int = 0) -> dict:
    m = cfg.model
    card = {"model": m.name, "width": m.width, "depth": m.depth, "norm_order": m.norm_order,
            "num_classes": run.dataset.num_classes, "input_shape": list(run.dataset.input_shape),
            "weights": "ema" if cfg.train.ema_decay > 0 else "final", "steps": summary.steps,
            "epsilon": summary.epsilon, "epsilon_accountant": summary.epsilon_accountant,
            "epsilon_neighbouring": summary.epsilon_neighbouring, "delta": summary.delta,
            "noise_secret": summary.noise_secret,
            "test_accuracy": summary.test_accuracy}
    if canaries:  # the audit's run: trained with canaries, for the audit only
        card |= {"audit_canaries": canaries, "private_release": False}
    return card


def _postfix(last: dict, history: list[dict], ticker, step: int, private: bool) -> dict:
    """The bar's figures: the private batch's loss and accuracy (shown, never published), the last test
    accuracy, and the ε of record from step 1, labelled with its accountant (and relation when it is
    replace-one); "≤" between evaluations (tanplan.engine.epsilon_ticker); ∞ for a non-private run."""
    out = {"loss": f"{last['loss']:.3f}", "acc": f"{last['accuracy']:.3f}"} if last else {}
    if history and history[-1].get("test_accuracy") is not None:
        out["test"] = f"{history[-1]['test_accuracy']:.3f}"
    if not private:
        out["ε"] = "∞"
    elif ticker is not None:
        out[ticker.label] = ticker.shown(step) or "…"
    return out


def _steps_per_second(timed_steps: int, clock: float | None, eval_seconds: float) -> float | None:
    """Training steps per second since the first step of this session finished (compilation and
    evaluations excluded); None before two steps. A rate of steps, not of examples: the examples a
    Poisson batch held are not published."""
    if clock is None or timed_steps <= 0:
        return None
    seconds = time.perf_counter() - clock - eval_seconds
    return timed_steps / seconds if seconds > 0 else None


class _Signals:
    """SIGTERM/SIGINT set a flag the loop reads after each step (main thread only)."""

    def __init__(self):
        self.signum: int | None = None
        self._previous = {}

    def __enter__(self):
        for s in (signal.SIGTERM, signal.SIGINT):
            try:
                self._previous[s] = signal.signal(s, self._handle)
            except ValueError:  # not the main thread (a Ray worker): the runtime handles signals
                pass
        return self

    def _handle(self, signum, frame):
        self.signum = signum

    def __exit__(self, *exc):
        for s, handler in self._previous.items():
            signal.signal(s, handler)
