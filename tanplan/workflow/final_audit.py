"""The final-model (black-box) audit: train one run with input canaries and bound its ε from below, reading the
released model only.

    result = run_final_audit(cfg, Path("audit"), canaries=1000)   # trains audit/run, writes audit/final_audit.*
    result.verdict, result.threat_model.sees

Threat model (tanplan.outcomes.final_audit.THREAT_MODEL, stated in every report). The adversary chooses M
canaries, inputs with labels of its choice, and sees the model the run releases (model/params.npz: the EMA when
the EMA is on), nothing of the steps that made it; like the adversary of DP, it may know the rest of the
training set. Two kinds of canary (`draw_canaries`): "mislabelled", M training examples given a wrong label (taken
out of the training set; a held-in one goes back with its wrong label), and "crafted", M out-of-distribution
inputs (Gaussian at the public test set's mean and spread) with random labels.

The run. Each canary is held in (added to the training set) or out by a fair coin drawn from a fresh secret of OS
entropy (tanplan.dp.secret.RunSecret.fresh), held in memory only: never from experiment.seed or
privacy.noise_seed, never written. The training set with the held-in canaries is trained by the engine's own loop
(tanplan.engine.loop.train_and_evaluate: the config's mechanism, batches, noise and accounting; its N is that
set's), into out/run. A held-in canary is an added example: the add/remove-one neighbour the claimed ε is about.

The score and the bound. The auditor reads the released model back (tanplan.engine.release.load_run) and scores
canary j by its logit margin z_y − max_{k≠y} z_k at its canary label y (`label_margins`): a model that learned
the canary gives its label a higher margin. It guesses "held in" for the h highest scores and "held out" for the
h lowest, for h = f·M/2 with f in GUESS_FRACTIONS, fixed in advance; the one-run analysis of Steinke, Nasr and
Jagielski (NeurIPS 2023, Theorem 3.1: the number of correct guesses among any guesses made from the output is
dominated by a binomial at e^ε/(1 + e^ε), plus δ's term) turns the number of correct guesses into a lower bound
on ε at the run's δ, through jax-privacy's CanaryScoreAuditor.epsilon_one_run, as `tanplan audit` does
(tanplan.workflow.audit); a union bound over the fractions keeps the stated confidence.

What it can and cannot show: THREAT_MODEL.can_show / cannot_show. A black-box bound from one run sits far below
the ε DP-SGD claims; it catches a gross break (the noise missing: tests/workflow/test_final_audit.py), not a
small one, and never proves the claim holds or is tight. The audited run's outputs are NOT private releases:
its folder is marked when opened (tanplan.engine.run_folder.AUDIT_MARKER), so that it is never resumed or
trained into, and --out must be a new or empty folder (tanplan.workflow.audit.check_audit_out).
"""

from __future__ import annotations

import contextlib
import math
import sys
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable

import numpy as np
from jax_privacy import auditing

from tanplan import task as tasks
from tanplan.config import Config
from tanplan.dp.secret import RunSecret
from tanplan.engine.loop import train_and_evaluate
from tanplan.engine.release import load_run
from tanplan.engine.setup import load_data
from tanplan.errors import TanplanError, UsageError
from tanplan.job import job_of
from tanplan.outcomes.audit import Claim
from tanplan.outcomes.final_audit import CANARY_KINDS, DEFAULT_KIND, THREAT_MODEL, FinalAuditResult
from tanplan.reports.final_audit import write_final_audit
from tanplan.workflow.audit import DEFAULT_CANARIES, DEFAULT_CONFIDENCE, MIN_CANARIES, RUN_FOLDER, check_audit_out
from tanplan.workflow.inputs import check_inputs, check_out_dir

GUESS_FRACTIONS = (1 / 64, 1 / 32, 1 / 16, 1 / 8, 1 / 4, 1 / 2)  # guesses k = f·M: k/2 top in, k/2 bottom out
SCORE = "logit margin of the canary's label on the released model, z_y − max_{k≠y} z_k"
PREDICT_ROWS = 1024  # canaries scored per call of the released model's predict


# ---------------------------------------------------------------- the canaries (the secret draw)

@dataclass(frozen=True)
class InputCanaries:
    """One audit's secret draw (host numpy, memory only): M inputs, their canary labels, the fair coins, and the
    training rows the mislabelled ones were taken from (none for crafted canaries)."""

    x: np.ndarray  # (M, *input_shape) float32
    labels: np.ndarray  # (M,) int32
    held_in: np.ndarray  # (M,) bool
    rows: np.ndarray  # (M,) or (0,) indices of the training set


def draw_canaries(dataset, count: int, kind: str, rng: np.random.Generator) -> InputCanaries:
    """`count` canaries of `kind` (module docstring) and their coins, all from rng (the audit's fresh secret).

    >>> from tanplan.data.dataset import Dataset
    >>> d = Dataset("toy", np.zeros((10, 4, 1)), np.arange(10) % 3, np.ones((5, 4, 1)), np.arange(5) % 3, 3)
    >>> c = draw_canaries(d, 4, "mislabelled", np.random.default_rng(0))
    >>> bool((c.labels != d.y_train[c.rows]).all()), len(set(c.rows)), c.x.shape
    (True, 4, (4, 4, 1))
    """
    k = dataset.num_classes
    if kind == "mislabelled":
        rows = rng.choice(dataset.num_train, size=count, replace=False)
        x = np.asarray(dataset.x_train[rows], np.float32)
        labels = (np.asarray(dataset.y_train[rows]) + rng.integers(1, k, size=count)) % k  # never the true label
    else:  # crafted: the test set is public, so its mean and spread are too
        rows = np.empty(0, np.int64)
        mean, spread = float(np.mean(dataset.x_test)), float(np.std(dataset.x_test)) or 1.0
        x = (mean + spread * rng.standard_normal((count, *dataset.input_shape))).astype(np.float32)
        labels = rng.integers(0, k, size=count)
    held_in = rng.random(count) < 0.5
    return InputCanaries(x, labels.astype(np.int32), held_in, rows)


def with_canaries(dataset, canaries: InputCanaries):
    """dataset's training set less the canaries' rows, plus the held-in canaries (with their canary labels)."""
    keep = np.ones(dataset.num_train, bool)
    keep[canaries.rows] = False
    x = np.concatenate([dataset.x_train[keep], canaries.x[canaries.held_in]])
    y = np.concatenate([dataset.y_train[keep], canaries.labels[canaries.held_in]]).astype(np.int32)
    return replace(dataset, x_train=x, y_train=y)


# ---------------------------------------------------------------- the statistics (pure functions)

def label_margins(logits: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """(M,) z_y − max_{k≠y} z_k of each row of logits at its label y.

    >>> label_margins(np.array([[2.0, 0.5, 1.0], [0.0, 3.0, 1.0]]), np.array([0, 2]))
    array([ 1., -2.])
    """
    z = np.asarray(logits, np.float64)
    rows = np.arange(len(z))
    others = z.copy()
    others[rows, labels] = -np.inf
    return z[rows, labels] - others.max(axis=1)


@dataclass(frozen=True)
class Bound:
    """ε ≥ epsilon with the stated confidence, from `guesses` guesses (half in, half out), `correct` right."""

    epsilon: float
    guesses: int
    correct: int


def one_run_epsilon(m: int, guesses: int, correct: int, significance: float, delta: float) -> float:
    """Steinke et al.'s one-run lower bound on ε for `correct` right guesses out of `guesses` among m canaries, by
    jax-privacy's CanaryScoreAuditor: the right guesses are its true positives, the wrong ones its false positives
    (scores 1, at the threshold), the abstentions below it (score 0). Its p-value reads only (m, guesses, correct),
    so guesses of "held out" count as those of "held in" do (the theorem covers any guesses).

    >>> one_run_epsilon(100, 50, 25, 0.05, 1e-5), one_run_epsilon(100, 50, 50, 0.05, 1e-5) > 2
    (0.0, True)
    """
    right, wrong, abstain = np.ones(correct), np.ones(guesses - correct), np.zeros(m - guesses)
    auditor = auditing.CanaryScoreAuditor(np.concatenate([right, abstain[: len(abstain) // 2]]),
                                          np.concatenate([wrong, abstain[len(abstain) // 2:]]))
    return float(auditor.epsilon_one_run(significance, delta, threshold_strategy=auditing.Explicit(1.0)))


def two_sided_bound(scores: np.ndarray, held_in: np.ndarray, delta: float, confidence: float,
                    fractions=GUESS_FRACTIONS) -> Bound:
    """The best one-run bound over the guesses "the h highest scores are in, the h lowest out", h = f·M/2 for f
    in fractions (fixed in advance), union-bounded: each at significance (1 − confidence)/len(fractions). Ties
    are broken by canary order, which the coins do not depend on. When no guesses give a bound (ε ≥ 0), the
    largest set of guesses is reported, to show how close it came."""
    m = len(scores)
    order = np.argsort(-np.asarray(scores, np.float64), kind="stable")
    halves = sorted({max(1, round(f * m / 2)) for f in fractions})
    significance = (1 - confidence) / len(halves)
    bounds = []
    for h in halves:
        correct = int(held_in[order[:h]].sum() + (~held_in[order[m - h:]]).sum())
        bounds.append(Bound(one_run_epsilon(m, 2 * h, correct, significance, delta), 2 * h, correct))
    return max(bounds, key=lambda b: (b.epsilon, b.guesses))


def verdict(bound: Bound, claim: Claim, confidence: float) -> tuple[str, str]:
    """("consistent" | "violation", the one-line reason) of a bound against the run's add/remove-one claim."""
    claimed, accountant = claim.add_remove
    stated = f"ε = {claimed:.4g} ({accountant.upper()}, add/remove-one, δ = {claim.delta:.3g})"
    if bound.epsilon > claimed:
        return "violation", (f"the final-model audit's {confidence:.0%} lower bound ε ≥ {bound.epsilon:.4g} exceeds "
                             f"the {stated} the run claims: the released model reveals more than accounted")
    return "consistent", (f"the final-model audit's {confidence:.0%} lower bound ε ≥ {bound.epsilon:.4g} does not "
                          f"exceed the claimed {stated}")


# ---------------------------------------------------------------- checks, then the driver

def check_final_audit(cfg: Config, canaries: int, kind: str, confidence: float) -> None:
    """UsageError for what this audit cannot audit, before any data is read or any file written."""
    if not cfg.privacy.private:
        raise UsageError("privacy.private = false is not allowed for an audit: a non-private run claims no ε")
    if kind not in CANARY_KINDS:
        raise UsageError(f"--canary-kind {kind!r} is not allowed: use one of {', '.join(CANARY_KINDS)}")
    if canaries < MIN_CANARIES:
        raise UsageError(f"--canaries {canaries} is not allowed: must be >= {MIN_CANARIES} (half of them, by a fair "
                         "coin, are held out)")
    if not 0.5 < confidence < 1:
        raise UsageError(f"--confidence {confidence:g} is not allowed: must be in (0.5, 1), e.g. 0.95")
    if tasks.from_config(cfg) is not tasks.DEFAULT:
        raise UsageError("[task] loss / metric are not allowed for --final-model: its canaries are labelled "
                         "examples scored by their logit margin (a classifier's default task)")


def check_canary_pool(dataset, canaries: int, kind: str) -> None:
    """UsageError unless the data can give the canaries: in memory, and for mislabelled canaries at most half
    of the training set (the rest stays the fixed training data). Data loaded, nothing written yet."""
    if not getattr(dataset, "in_memory", True):
        raise UsageError("data.dataset is read from a source (memmap, a plugged-in loader's sources): not allowed "
                         "for --final-model, which adds its canaries to an in-memory training set")
    if kind == "mislabelled" and canaries > dataset.num_train // 2:
        raise UsageError(f"--canaries {canaries} is not allowed with --canary-kind mislabelled: at most half of the "
                         f"{dataset.num_train} training examples ({dataset.num_train // 2})")


@contextlib.contextmanager
def _run_folder(out: Path | None):
    """out/run, or a temporary folder removed afterwards when out is None (the model is read back from it)."""
    if out is not None:
        yield Path(out) / RUN_FOLDER
        return
    with tempfile.TemporaryDirectory(prefix="tanplan-final-audit-") as tmp:
        yield Path(tmp) / RUN_FOLDER


def released_scores(run_folder: Path, canaries: InputCanaries) -> np.ndarray:
    """The canaries' label margins on the model the run released, read back from its folder as a user would."""
    predict = load_run(run_folder).predict
    logits = [np.asarray(predict(canaries.x[i:i + PREDICT_ROWS])) for i in range(0, len(canaries.x), PREDICT_ROWS)]
    return label_margins(np.concatenate(logits), canaries.labels)


def run_final_audit(cfg: Config, out: Path | None, *, canaries: int = DEFAULT_CANARIES, kind: str = DEFAULT_KIND,
                    confidence: float = DEFAULT_CONFIDENCE, progress: bool = True,
                    log=lambda line: print(line, file=sys.stderr),
                    on_canaries: Callable[[InputCanaries], None] | None = None) -> FinalAuditResult:
    """Train cfg's run with `canaries` input canaries into out/run (a temporary folder when out is None), score
    them on its released model, bound ε and write out/final_audit.{json,md}, final_scores.{npz,png}. Checks
    every input first. on_canaries (tests) receives the secret draw once the run is over."""
    check_final_audit(cfg, canaries, kind, confidence)
    check_audit_out(out)
    base = load_data(cfg.data)
    check_canary_pool(base, canaries, kind)
    started = time.perf_counter()
    drawn = draw_canaries(base, canaries, kind, RunSecret.fresh().batch_rng(0, 0))  # OS entropy, memory only
    if drawn.held_in.all() or not drawn.held_in.any():  # fair coins: with M ≥ 20, once in 500,000 audits
        raise TanplanError(f"all {canaries} canaries fell on the same side of their coins: run the audit again")
    with _run_folder(out) as workdir:
        summary = train_and_evaluate(job_of(cfg), workdir, progress=progress, dataset=with_canaries(base, drawn))
        scores = released_scores(workdir, drawn)
    if on_canaries is not None:
        on_canaries(drawn)
    claim = Claim.of_run(summary)  # its own steps: what the canaries test
    bound = two_sided_bound(scores, drawn.held_in, claim.delta, confidence)
    result = _result(summary, claim, bound, scores, drawn, kind, confidence, time.perf_counter() - started,
                     str(workdir) if out is not None else None)
    if out is not None:
        for path in write_final_audit(result, scores[drawn.held_in], scores[~drawn.held_in], out):
            log(f"tanplan: wrote {path}")
    return result


def _result(summary, claim: Claim, bound: Bound, scores, drawn: InputCanaries, kind: str, confidence: float,
            wall: float, run_folder: str | None) -> FinalAuditResult:
    held_in = drawn.held_in
    claimed, accountant = claim.add_remove
    status, reason = verdict(bound, claim, confidence)
    return FinalAuditResult(
        verdict=status, reason=reason, threat_model=THREAT_MODEL, claim=claim, claimed_epsilon=claimed,
        claimed_accountant=accountant, lower_bound=bound.epsilon,
        ratio=bound.epsilon / claimed if claimed > 0 else math.inf, confidence=confidence,
        method=("one-run (Steinke, Nasr, Jagielski 2023) with jax-privacy's CanaryScoreAuditor, black-box: input "
                f"canaries scored on the released model, the top and bottom k/2 guessed in and out for k in "
                f"{len(GUESS_FRACTIONS)} fractions of M, union-bounded"),
        score=SCORE, guesses=bound.guesses, correct_guesses=bound.correct,
        auroc=float(auditing.CanaryScoreAuditor(scores[held_in], scores[~held_in]).attack_auroc()),
        canaries=len(held_in), canary_kind=kind, held_in=int(held_in.sum()), held_out=int((~held_in).sum()),
        dataset_size=summary.dataset_size, batch_size=summary.batch_size, steps=summary.steps, sigma=summary.sigma,
        clip_norm=summary.clip_norm, proxy=summary.target is not None, test_accuracy=summary.test_accuracy,
        wall_seconds=wall, run_folder=run_folder)


def final_audit_entry(cfg: Config, out, *, canaries: int | None, kind: str | None, proxy_batch_size: int | None,
                      confidence: float | None, progress: bool, log: Callable[[str], None]) -> FinalAuditResult:
    """The stage of tanplan.api.final_audit: the defaults filled in, every input checked before any data is
    read, then run_final_audit (the proxy's run when proxy_batch_size is given)."""
    if proxy_batch_size is not None:
        cfg = cfg.with_overrides({"train.proxy_batch_size": proxy_batch_size})
    canaries = DEFAULT_CANARIES if canaries is None else canaries
    kind = DEFAULT_KIND if kind is None else kind
    confidence = DEFAULT_CONFIDENCE if confidence is None else confidence
    check_inputs(cfg)
    check_out_dir(out)
    check_final_audit(cfg, canaries, kind, confidence)
    check_audit_out(out)
    return run_final_audit(cfg, Path(out) if out is not None else None, canaries=canaries, kind=kind,
                           confidence=confidence, progress=progress, log=log)
