"""One run in flight: what the loop (tanplan.engine.loop) carries from step to step, and its periodic jobs
as short named steps: the evaluation (ledger first, then metrics.jsonl, TensorBoard and the private
diagnostics), the checkpoint, the throughput clock, the layout's growth and the progress bar.

What these jobs publish is a function of the noisy parameters, the test set and public information only;
the private batch's loss and accuracy (noiseless) go to the private folder and the bar.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import jax

from tanplan.dp import sampling, sharding
from tanplan.engine import evaluation
from tanplan.engine.checkpoint import host_array
from tanplan.engine.epsilon_ticker import EpsilonTicker
from tanplan.engine.run_folder import RunFolder
from tanplan.engine.run_identity import fingerprint
from tanplan.engine.setup import Run
from tanplan.engine.tracking import Tracker
from tanplan.job import RunJob
from tanplan.privacy.ledger import Ledger, Release


class NonFinite(Exception):
    """The released (noisy) parameters after `step` are not all finite."""

    def __init__(self, step: int):
        super().__init__(step)
        self.step = step


@dataclass
class Session:
    """The moving parts of one run between its steps (state and layout replicated/grown as it goes)."""

    job: RunJob
    run: Run
    folder: RunFolder
    ledger: Ledger
    release: Release
    start: int  # the step this session began at (0, or a checkpoint's)
    planned: sampling.BatchLayout  # public: from N, q and the config
    layout: sampling.BatchLayout  # planned, or grown for a batch that outgrew it (private: never published)
    state: Any
    roots: dict
    tracker: Tracker | None = None
    bar: Any = None
    ticker: EpsilonTicker | None = None
    on_eval: Callable[[int, dict], None] | None = None
    history: list[dict] = field(default_factory=list)  # the published evaluations
    last: dict = field(default_factory=dict)  # the private batch's loss and accuracy of the last settled step
    pending: tuple | None = None  # metrics of the step in flight, read one step late: the device stays busy
    clock: float | None = None  # when the first step of this session finished (compilation excluded)
    examples: int = 0  # B (expected) per timed step: the sampled sizes are private
    eval_seconds: float = 0.0
    ran: int = 0  # steps dispatched so far: every one is accounted, whatever stops the run
    diverged_at: int | None = None
    interrupted: str | None = None

    # ---------------------------------------------------------------- one step's bookkeeping

    def after_step(self, metrics: dict, done: int, signalled: Callable[[], bool]) -> None:
        """Settle the previous step's metrics (NonFinite if its parameters are not), start the throughput
        clock, evaluate and checkpoint when due (or when a signal came, even during the evaluation), move the bar."""
        self.ran = done
        if self.pending is not None:
            self.last = settle(*self.pending)
        self.pending = (metrics, done)
        is_eval, is_ckpt = due(self.job.train, done, self.run.plan.steps)
        if self.clock is None or is_eval or is_ckpt or signalled():
            self.last, self.pending = settle(*self.pending), None  # compile time, evaluations, checkpoints: wait
        if self.clock is None:
            self.clock = time.perf_counter()  # throughput counts from here: compilation excluded
        else:
            self.examples += self.run.plan.batch_size  # the expected batch B: the sampled size is private
        if is_eval:
            self.timed_evaluation(done)
        if is_ckpt or signalled():  # a signal (even during the evaluation): save, stop
            self.checkpoint(done)
        self.bar.set_postfix(postfix(self.last, self.history, self.ticker, done, self.run.plan.private), refresh=False)
        self.bar.update(1)

    def settle_pending(self) -> dict:
        """The metrics of the step still in flight, settled (NonFinite if its parameters are not finite)."""
        metrics, step = self.pending
        self.pending = None
        return settle(metrics, step)

    def grow_layout(self, t: int, largest: int) -> None:
        """Grow the padded layout when a batch exceeds it (rare; its size is private: not said, not published)."""
        if largest > self.layout.capacity:
            self.layout = self.layout.grown_to(largest)
            self.bar.write(f"tanplan: step {t + 1}: a Poisson batch exceeds the padded layout; growing it "
                           "(one more compilation)")

    # ---------------------------------------------------------------- periodic jobs

    def timed_evaluation(self, step: int) -> None:
        began = time.perf_counter()
        self.history.append(self.evaluate(step))
        self.eval_seconds += time.perf_counter() - began

    def evaluate(self, step: int) -> dict:
        """Evaluate the released parameters of `step` and publish the record (ledger.json first: a kill
        before the metrics line over-reports, never under)."""
        run, size = self.run, self.job.perf.eval_batch_size
        self.ledger.advance(self.release, step)  # the evaluated parameters are released: their steps count
        record = {"step": step, **evaluation.evaluate(run.eval_batch, self.released_params(), run.dataset.test,
                                                      size, run.local_mesh),
                  "epsilon_spent": self.ledger.epsilon_of_record()}
        if self.state.ema_params is not None:
            raw = evaluation.evaluate(run.eval_batch, self.local(self.state.params), run.dataset.test, size,
                                      run.local_mesh)
            record["test_accuracy_no_ema"] = raw["test_accuracy"]
        record["steps_per_second"] = steps_per_second(step - self.start - 1, self.clock, self.eval_seconds)
        record["wall_time"] = time.time()
        # A model whose finite parameters overflow its outputs has no finite test loss: null, valid JSON.
        record = {k: None if isinstance(v, float) and not math.isfinite(v) else v for k, v in record.items()}
        self.folder.write_ledger(self.ledger)
        self.folder.append_metrics(record)
        self.tracker.write(record)
        # The training loss and accuracy of the private batch carry no noise: private diagnostics only.
        self.folder.append_diagnostics({"step": step, "loss": self.last.get("loss"),
                                        "train_accuracy": self.last.get("accuracy")})
        if self.on_eval is not None:
            self.on_eval(step, record)
        return record

    def checkpoint(self, done: int) -> None:
        """The steps so far are released by the checkpoint: ledger.json, then the checkpoint (RunFolder.save)."""
        self.ledger.advance(self.release, done)
        self.folder.save(done, self.state, checkpoint_meta(done, self.job, self.run.plan, self.ledger, self.layout),
                         self.ledger)

    def train_seconds(self) -> float:
        """Seconds of training since the first step finished, evaluations excluded."""
        return time.perf_counter() - self.clock - self.eval_seconds if self.clock is not None else 0.0

    # ---------------------------------------------------------------- parameters on this process

    def released_params(self):
        """The parameters a run publishes: the EMA when it is on, else the last noisy ones."""
        s = self.state
        return self.local(s.ema_params if s.ema_params is not None else s.params)

    def local(self, tree):
        """This process's copy of replicated parameters, on its own devices."""
        return sharding.replicate(jax.tree.map(host_array, tree), self.run.local_mesh)


def due(train, done: int, steps: int) -> tuple[bool, bool]:
    """(evaluate, checkpoint) after `done` of `steps` steps: every train.eval_every and train.checkpoint_every
    (0: never) steps, and both at the last step."""
    every = train.checkpoint_every
    return done % train.eval_every == 0 or done == steps, bool(every and done % every == 0) or done == steps


def settle(metrics, step: int) -> dict:
    """The step's metrics on the host; NonFinite when the released (noisy) parameters are not all finite
    (nothing is saved then). Never the loss: it is a noiseless function of the private batch, and the
    step at which the run stops is published (diverged_at_step)."""
    values = {k: float(host_array(v)) for k, v in metrics.items()}
    if not values.pop("params_finite", 1.0):
        raise NonFinite(step)
    return values


def checkpoint_meta(step: int, job: RunJob, plan, ledger: Ledger, layout) -> dict:
    """The checkpoint's record. No key, no seed: the secret is stored beside it, in the same private folder."""
    return {"step": step, "fingerprint": fingerprint(job, plan), "ledger": ledger.to_dict(),
            "layout": {"chunks": layout.chunks, "chunk_size": layout.chunk_size},
            "sampler": {"kind": "poisson", "next_step": step}}


def postfix(last: dict, history: list[dict], ticker, step: int, private: bool) -> dict:
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


def steps_per_second(timed_steps: int, clock: float | None, eval_seconds: float) -> float | None:
    """Training steps per second since the first step of this session finished (compilation and
    evaluations excluded); None before two steps. A rate of steps, not of examples: the examples a
    Poisson batch held are not published."""
    if clock is None or timed_steps <= 0:
        return None
    seconds = time.perf_counter() - clock - eval_seconds
    return timed_steps / seconds if seconds > 0 else None
