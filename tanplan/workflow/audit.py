"""The privacy audit: train a run with gradient canaries and bound its ε from below, empirically.

    result = run_audit(cfg, Path("audit"), canaries=1000)   # trains audit/run, writes audit/audit.{json,md}
    result.verdict                                          # "consistent" or "violation"

Why: every ε tanplan prints is computed from the mechanism it believes it runs; this checks the code
against that belief. The run the config describes (or its proxy) is trained by the engine's own loop with
M canaries (tanplan.dp.canaries, or tanplan.dp.input_canaries), each held in or out by a secret fair
coin; the auditor scores each canary from the released noisy sums alone (`likelihood_ratio_scores`: the
log-likelihood ratio of the claimed Poisson-subsampled Gaussian, after a shadow batch's clipped sum is
subtracted), and the one-run audit of Steinke, Nasr and Jagielski (NeurIPS 2023) turns how well the
scores separate held-in from held-out into a lower bound on ε at the run's δ (`assess`,
tanplan.workflow.audit_stats), beside the f-DP estimate of Mahloujifar et al. and the ceiling M canaries
allow. The bound is a LOWER bound: above the claim it is evidence of a violation (exit 5), below it it
proves nothing. The audited run trained canaries and is NOT a private release. The score, the guesses,
what the audit can and cannot show, and measured bounds: docs/privacy.md, "Checking the mechanism".

Guarantees (docs/privacy.md, "Audit outputs"): the canaries' coins and draws come from a secret of the
audit's own, OS entropy held in memory only (tanplan.dp.canaries.wrap, tanplan.dp.input_canaries.wrap),
never from a public seed or the run's stored secret (checkpoint/run_secret.json, from which the held-in set
could otherwise be recomputed). The audited run's folder is marked when opened, before its secret or any
step (tanplan.engine.run_folder.AUDIT_MARKER): it is never resumed or trained into. --out is a new or empty
folder (`check_audit_out`), never one that holds a release or another stage's outputs.
"""

from __future__ import annotations

import math
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Callable

import numpy as np

from tanplan.config import Config
from tanplan.errors import TanplanError, UsageError
from tanplan.job import job_of
from tanplan.outcomes.audit import Assessment, AuditResult, Claim
from tanplan.outcomes.fields import fields_of
from tanplan.reports.audit import write_audit
from tanplan.workflow.inputs import check_inputs, check_out_dir
from tanplan.workflow.audit_stats import (EXACT, FDP, PLAN_SHARE, Bound, Guesses, bound_from_guesses, ceiling,
                                          centred_by_group, likelihood_ratio_scores, planned_guesses)

DEFAULT_CANARIES = 1000
DEFAULT_CONFIDENCE = 0.95
MIN_CANARIES = 20  # below, a fair coin too often leaves one side (held in or out) nearly empty
RUN_FOLDER = "run"  # the audited run, inside the audit's --out
_BOUNDS = ("likelihood-ratio scores; jax-privacy's CanaryScoreAuditor: the ε-based bound (Steinke, Nasr, "
           "Jagielski 2023; the verdict's) and the f-DP estimate (Mahloujifar et al. 2025), guessing the highest "
           "scores in and the lowest out, abstaining on the middle, as planned from the claimed mechanism before "
           "the scores are seen, or on every canary (a weighted union bound over the two)")
METHOD = {"gradient": f"one-run, white-box, gradient canaries added after clipping; {_BOUNDS}",
          "input": ("one-run, white-box, input-space canaries (crafted examples) clipped with the batch, readings "
                    f"centred per label at each step; {_BOUNDS}")}
CANARY_KINDS = tuple(METHOD)


# ---------------------------------------------------------------- the statistics (tanplan.workflow.audit_stats)

def tried_guesses(m: int, q: float, sigma: float, steps: int, delta: float, confidence: float,
                  method: str = EXACT) -> list[Guesses]:
    """The guesses fixed before the scores are seen (audit_stats): the plan for the claimed mechanism, at
    PLAN_SHARE of the significance, and every canary guessed (what a badly broken mechanism shows best)."""
    significance = (1 - confidence) * PLAN_SHARE
    plan = planned_guesses(m, q, sigma, steps, delta, significance, method)
    return [replace(plan, share=PLAN_SHARE), Guesses(m // 2, m - m // 2, share=1 - PLAN_SHARE)]


def one_run_bound(held_in: np.ndarray, held_out: np.ndarray, delta: float, confidence: float,
                  tried: list[Guesses] | None = None, method: str = EXACT) -> Bound:
    """The one-run lower bound on ε at δ (audit_stats): the best over the guesses `tried` (default: a sixteenth
    of the canaries guessed on each side, and every canary), union-bounded.

    >>> rng = np.random.default_rng(0)
    >>> one_run_bound(rng.normal(size=500), rng.normal(size=500), 1e-5, 0.95).epsilon
    0.0
    >>> one_run_bound(rng.normal(8, 1, size=500), rng.normal(size=500), 1e-5, 0.95).epsilon > 2
    True
    """
    return bound_from_guesses(held_in, held_out, tried or default_guesses(len(held_in) + len(held_out)), delta,
                              confidence, method)


def default_guesses(m: int) -> list[Guesses]:
    """Guesses fixed without a claimed mechanism to plan for: a sixteenth of the canaries on each side, and all."""
    return [Guesses(m // 16, m // 16, PLAN_SHARE), Guesses(m // 2, m - m // 2, 1 - PLAN_SHARE)]


def assess(scores_in: np.ndarray, scores_out: np.ndarray, claim: Claim, confidence: float,
           tried: dict[str, list[Guesses]] | None = None) -> Assessment:
    """Both bounds (each with its own guesses `tried`, fixed in advance), their ceilings, the AUROC and the
    verdict of one audit's scores against the run's claim. The verdict rests on the ε-based bound (valid for
    any mechanism); the f-DP estimate is shown beside it."""
    from jax_privacy import auditing  # lazy: JAX; the CLI's parser imports this module for its defaults

    m = len(scores_in) + len(scores_out)
    tried = tried or {EXACT: default_guesses(m), FDP: default_guesses(m)}
    bound = one_run_bound(scores_in, scores_out, claim.delta, confidence, tried[EXACT])
    fdp = one_run_bound(scores_in, scores_out, claim.delta, confidence, tried[FDP], FDP)
    claimed, accountant = claim.add_remove
    violated = bound.epsilon > claimed
    level = f"{confidence:.0%}"
    reason = (f"the audit's {level} lower bound ε ≥ {bound.epsilon:.4g} exceeds the ε = {claimed:.4g} the run claims "
              f"({accountant.upper()}, add/remove-one, δ = {claim.delta:.3g}): the mechanism that ran is less private "
              "than accounted" if violated else
              f"the audit's {level} lower bound ε ≥ {bound.epsilon:.4g} does not exceed the claimed ε = {claimed:.4g} "
              f"({accountant.upper()}, add/remove-one, δ = {claim.delta:.3g})")
    if not violated and fdp.epsilon > claimed:
        reason += f"; the f-DP estimate {fdp.epsilon:.4g} does (it assumes a Gaussian trade-off curve: look closer)"
    return Assessment(verdict="violation" if violated else "consistent", reason=reason, claimed_epsilon=claimed,
                      claimed_accountant=accountant, lower_bound=bound.epsilon, guesses=bound.guesses,
                      correct_guesses=bound.correct, ratio=bound.epsilon / claimed if claimed > 0 else math.inf,
                      fdp_estimate=fdp.epsilon, fdp_ratio=fdp.epsilon / claimed if claimed > 0 else math.inf,
                      fdp_guesses=fdp.guesses, fdp_correct_guesses=fdp.correct,
                      guessed_in=bound.k_in, guessed_out=bound.k_out,
                      ceiling=ceiling(m, tried[EXACT], claim.delta, confidence),
                      fdp_ceiling=ceiling(m, tried[FDP], claim.delta, confidence, FDP),
                      auroc=float(auditing.CanaryScoreAuditor(scores_in, scores_out).attack_auroc()))


# ---------------------------------------------------------------- checks, then the driver

def check_audit(cfg: Config, canaries: int, confidence: float, kind: str = "gradient") -> None:
    """UsageError for what the audit cannot audit, before any data is read or any file written."""
    from tanplan.engine.sparsity import enabled  # lazy: JAX; the CLI's parser imports this module for its defaults

    if not cfg.privacy.private:
        raise UsageError("privacy.private = false is not allowed for an audit: a non-private run claims no ε")
    if enabled(cfg.pruning):
        raise UsageError("pruning and gradient dropping are not allowed for an audit: the canaries enter the dense "
                         "DP-SGD step only; set pruning.method = \"none\" and pruning.drop_method = \"none\"")
    if canaries < MIN_CANARIES:
        raise UsageError(f"--canaries {canaries} is not allowed: must be >= {MIN_CANARIES} (half of them, by a fair "
                         "coin, are held out)")
    if not 0.5 < confidence < 1:
        raise UsageError(f"--confidence {confidence:g} is not allowed: must be in (0.5, 1), e.g. 0.95")
    if kind not in CANARY_KINDS:
        raise UsageError(f"--canary-kind {kind!r} is not allowed: must be one of {', '.join(CANARY_KINDS)}")


def check_audit_out(out: Path | str | None) -> None:
    """UsageError unless out is a new or empty folder (before anything is written). An audit writes a run trained
    with canaries (NOT a private release) and its report: never into a folder that already holds an audited run
    (every audit trains a new one: it never resumes), a release (summary.json, ledger.json, model/), a sweep's,
    fit's, launch's or any other output, which its canary-trained files could then pass for."""
    if out is None:
        return
    if str(out).strip() == "":
        raise UsageError("--out '' is not allowed: name a new folder (an empty path would write into the current one)")
    out = Path(out)
    if (out / RUN_FOLDER).exists():
        raise UsageError(f"--out {str(out)!r} is not allowed: it already holds an audited run "
                         f"({str(out / RUN_FOLDER)!r}); every audit trains a new run: choose a new --out")
    held = sorted((p.name for p in out.iterdir()), key=lambda n: (n.startswith("."), n)) if out.is_dir() else []
    if held:  # the visible names first: summary.json, ledger.json, model/ say "a release"
        shown = ", ".join(held[:4]) + (f" and {len(held) - 4} more" if len(held) > 4 else "")
        raise UsageError(f"--out {str(out)!r} is not allowed: it already holds {shown}; an audit writes a run "
                         "trained with canaries (not a private release) and its report into a new or empty folder "
                         "only, so that they never mix with a release: choose a new --out")


def check_canary_room(cfg: Config, canaries: int) -> None:
    """UsageError unless the model has at least M parameters (each canary needs coordinates of its own).
    Loads the data (its input shape) and initialises the model abstractly: before any file is written."""
    import jax

    from tanplan.engine.setup import build_model, load_data, public_example  # lazy: JAX; the API (the planner's) imports this module

    dataset = load_data(cfg.data)  # its metadata only: the input shape, from sources too
    model = build_model(job_of(cfg), dataset.num_classes, dataset.input_shape)  # as training builds it (a plug-in: checked)
    shapes = jax.eval_shape(model.init, jax.random.key(0), public_example(dataset.input_shape, 1))
    num_params = sum(math.prod(leaf.shape) for leaf in jax.tree.leaves(shapes))
    if canaries > num_params:
        raise UsageError(f"--canaries {canaries} is not allowed for model {cfg.model.name!r}: at most its {num_params} "
                         "parameters (each canary has coordinates of its own)")


def canary_hooks(count: int, kind: str, on_record: Callable):
    """The audit's hooks around its run (tanplan.engine.hooks): `count` canaries of `kind` wrap the run's
    mechanism (tanplan.dp.canaries; "input": crafted examples clipped with the batch, tanplan.dp.input_canaries),
    drawn from the audit's own secret; on_record receives their CanaryRecord (the secret draw and what each step
    released on them) once the run finished: never written, never in the summary. summary.json and the model
    card say audit_canaries and private_release false; the run's folder is marked, never resumed."""
    from tanplan.dp import canaries as canary_lib  # lazy: JAX; the API (the planner's) imports this module
    from tanplan.dp import input_canaries  # lazy: JAX; the API (the planner's) imports this module
    from tanplan.engine.hooks import RunHooks  # lazy: the engine; the API (the planner's) imports this module

    def wrap(mechanism, trainable, dataset):
        if kind == "input":
            return input_canaries.wrap(mechanism, count, dataset.input_shape, dataset.num_classes)
        return canary_lib.wrap(mechanism, count, trainable)

    return RunHooks(wrap=wrap, on_finish=lambda wrapped: on_record(wrapped.record()),
                    release_marks={"audit_canaries": count}, private_release=False)


def run_audit(cfg: Config, out: Path | None, *, canaries: int = DEFAULT_CANARIES,
              confidence: float = DEFAULT_CONFIDENCE, progress: bool = True,
              log=lambda line: print(line, file=sys.stderr), kind: str = "gradient") -> AuditResult:
    """Train cfg's run with `canaries` canaries of `kind` (CANARY_KINDS) into out/run (nothing written when out
    is None), score them, bound ε and write out/audit.json, audit.md and canary_scores.png. Checks every input
    first."""
    from tanplan.engine.loop import train_and_evaluate  # lazy: JAX; the API (the planner's) imports this module

    check_audit(cfg, canaries, confidence, kind)
    check_audit_out(out)
    if kind == "gradient":
        check_canary_room(cfg, canaries)
    started = time.perf_counter()
    workdir = out / RUN_FOLDER if out is not None else None
    records = []  # the canaries' record (their secret draw and what each step released on them): never written
    summary = train_and_evaluate(job_of(cfg), workdir, progress=progress,
                                 hooks=canary_hooks(canaries, kind, records.append))
    record = records[0]
    q = summary.batch_size / summary.dataset_size
    readings = record.observations if kind == "gradient" else centred_by_group(record.observations, record.arrays.y)
    scores = likelihood_ratio_scores(readings, q, summary.sigma)
    held_in = record.arrays.held_in
    if held_in.all() or not held_in.any():  # fair coins: with M ≥ 20, once in 500,000 audits
        raise TanplanError(f"all {canaries} canaries fell on the same side of their coins: run the audit again")
    claim = Claim.of_run(summary)  # its own steps: what the canaries test
    tried = {method: tried_guesses(canaries, q, summary.sigma, summary.steps, claim.delta, confidence, method)
             for method in (EXACT, FDP)}
    figures = assess(scores[held_in], scores[~held_in], claim, confidence, tried)
    result = AuditResult(**fields_of(figures), claim=claim, confidence=confidence, method=METHOD[kind],
                         canary_kind=kind,
                         canaries=canaries, held_in=int(held_in.sum()), held_out=int((~held_in).sum()),
                         canary_coordinates=record.design.coordinates(), dataset_size=summary.dataset_size,
                         batch_size=summary.batch_size, steps=summary.steps, sigma=summary.sigma,
                         clip_norm=summary.clip_norm, proxy=summary.target is not None,
                         wall_seconds=time.perf_counter() - started,
                         run_folder=str(workdir) if workdir is not None else None)
    if out is not None:
        sums = readings.sum(axis=0)
        for path in write_audit(result, scores[held_in], scores[~held_in], sums[held_in], sums[~held_in], out):
            log(f"tanplan: wrote {path}")
    return result


def audit_entry(cfg: Config, out, *, canaries: int | None, proxy_batch_size: int | None, confidence: float | None,
                progress: bool, log: Callable[[str], None], canary_kind: str) -> AuditResult:
    """The stage of tanplan.api.audit: the defaults filled in, every input checked before any data is read,
    then run_audit (the proxy's run when proxy_batch_size is given)."""
    if proxy_batch_size is not None:
        cfg = cfg.with_overrides({"train.proxy_batch_size": proxy_batch_size})
    canaries = DEFAULT_CANARIES if canaries is None else canaries
    confidence = DEFAULT_CONFIDENCE if confidence is None else confidence
    check_inputs(cfg)
    check_out_dir(out)
    check_audit(cfg, canaries, confidence, canary_kind)
    check_audit_out(out)
    return run_audit(cfg, Path(out) if out is not None else None, canaries=canaries, confidence=confidence,
                     progress=progress, log=log, kind=canary_kind)
