"""The privacy audit: train a run with gradient canaries and bound its ε from below, empirically.

    result = run_audit(cfg, Path("audit"), canaries=1000)   # trains audit/run, writes audit/audit.{json,md}
    result.verdict                                          # "consistent" or "violation"

What it shows. The run that the config describes (its target, or its proxy) is trained by the engine's own loop
(tanplan.engine.loop.train_and_evaluate) with M gradient canaries (tanplan.dp.canaries): each an add/remove-one
neighbour whose clipped gradient is a fixed vector of norm C, held in or out by a secret fair coin, and, when held
in, joining each step's clipped sum, before the noise, with the run's probability q. Whoever sees the noisy sums
and could tell the held-in canaries from the held-out ones better than (ε, δ)-DP allows would refute the ε the
run claims. The one-run audit of Steinke, Nasr and Jagielski (*Privacy Auditing with One (1) Training Run*,
NeurIPS 2023) turns how well the scores separate them into a lower bound on ε at the run's δ that holds with
the stated confidence, for any mechanism: this needs only one training run because the canaries' coins are
independent. (Clopper-Pearson intervals need independent trials, one training run per canary, and are not used.)

The score of canary j (`likelihood_ratio_scores`). The white-box adversary of DP-SGD sees every step's noisy
sum, which the accountant composes release by release; like the adversary of DP, it may know the rest of the
training set. The auditor subtracts from each released sum a shadow sum, the clipped sum at the same parameters
of a second Poisson batch that it draws itself (tanplan.dp.canaries.observe), and projects on u_j = c_j/C:
x_tj = 1[j joined step t] + N(0, σ²) + the two batches' sampling difference. (Without the shadow, the data's
gradient on u_j is several times the noise on mnist1d's CNN at B = 4096, and the bound collapses.) For the
claimed mechanism, the most powerful test of "held in" against "held out" (Neyman-Pearson) scores
    s_j = Σ_t log(1 − q + q·exp((x_tj − ½)/σ²)),
the log-likelihood ratio of the Poisson mixture at the claimed q and σ. In the TAN regime (large σ) it is
q/σ²·Σ_t x_tj plus a constant: the inner product of c_j with the sum of the released noisy sums (the parameter
update of plain SGD), shadow removed. At small σ (proxies, small batches) it is much stronger than that sum,
because the privacy loss of a subsampled Gaussian comes from the few steps that hold the example. Any score
is valid: it reads the released sums, the training set and public values, never the coins.

The bound (`one_run_bound`): jax-privacy's CanaryScoreAuditor.epsilon_one_run (Steinke et al.'s p-value, at
the run's δ) for the guesses "the k highest scores are held in", for a few numbers of guesses k fixed in
advance (GUESS_FRACTIONS of M); a union bound over them (significance (1 − confidence)/their number) keeps the
stated confidence. jax-privacy's default, a Bonferroni correction over every threshold, pays for M thresholds
instead, and its bounds are looser from M ≈ 1000 on.

What it cannot show: the bound is a LOWER bound, evidence of a violation when above the claim, never a proof of
privacy when below; a one-run audit is loose (with 1000 canaries it stays well below the ε of an exact DP-SGD
run, docs/privacy.md gives measured figures); the canaries are gradients, so it checks the noise and the
sampling the step applies to the clipped sum, not the clipping of real examples. The audited run's outputs
are NOT private releases: it trained canaries, and its report shows how they were drawn.
"""

from __future__ import annotations

import math
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from tanplan.config import Config
from tanplan.errors import TanplanError, UsageError
from tanplan.outcomes.audit import Assessment, AuditResult, Claim
from tanplan.outcomes.fields import fields_of
from tanplan.reports.audit import write_audit

DEFAULT_CANARIES = 1000
DEFAULT_CONFIDENCE = 0.95
GUESS_FRACTIONS = (1 / 64, 1 / 32, 1 / 16, 1 / 8, 1 / 4, 1 / 2)  # top-k guesses, k = fraction · M
MIN_CANARIES = 20  # below, a fair coin too often leaves one side (held in or out) nearly empty
RUN_FOLDER = "run"  # the audited run, inside the audit's --out


# ---------------------------------------------------------------- the statistics (pure functions)

def likelihood_ratio_scores(projections: np.ndarray, q: float, sigma: float) -> np.ndarray:
    """(M,) scores s_j = Σ_t log(1 − q + q·exp((x_tj − ½)/σ²)) of the (S, M) projections x (module docstring).

    >>> s = likelihood_ratio_scores(np.array([[1.0, 0.0], [1.0, 0.0]]), q=0.5, sigma=1.0)
    >>> bool(s[0] > 0 > s[1])
    True
    """
    x = np.asarray(projections, dtype=np.float64)
    with np.errstate(divide="ignore"):  # q = 1: log(1 − q) = −inf, and the score is the Gaussian's alone
        return np.logaddexp(np.log1p(-q), math.log(q) + (x - 0.5) / sigma**2).sum(axis=0)


@dataclass(frozen=True)
class Bound:
    """ε ≥ epsilon with the stated confidence, from the k highest scores (k = guesses, of them correct)."""

    epsilon: float
    guesses: int
    correct: int


def one_run_bound(held_in: np.ndarray, held_out: np.ndarray, delta: float, confidence: float,
                  fractions=GUESS_FRACTIONS) -> Bound:
    """The one-run lower bound on ε at δ (module docstring): the best over top-k guesses, union-bounded.

    >>> rng = np.random.default_rng(0)
    >>> one_run_bound(rng.normal(size=500), rng.normal(size=500), 1e-5, 0.95).epsilon
    0.0
    >>> one_run_bound(rng.normal(8, 1, size=500), rng.normal(size=500), 1e-5, 0.95).epsilon > 2
    True
    """
    from jax_privacy import auditing  # lazy: JAX; the CLI's parser imports this module for its defaults

    auditor = auditing.CanaryScoreAuditor(held_in, held_out)
    pooled = np.sort(np.concatenate([held_in, held_out]))[::-1]
    counts = sorted({max(1, round(f * len(pooled))) for f in fractions})
    significance = (1 - confidence) / len(counts)
    best = Bound(0.0, 0, 0)
    for k in counts:
        threshold = pooled[k - 1]  # guess "held in" for every score at or above it: the top k (more on ties)
        eps = float(auditor.epsilon_one_run(significance, delta, threshold_strategy=auditing.Explicit(threshold)))
        if eps > best.epsilon:
            best = Bound(eps, int(np.sum(pooled >= threshold)), int(np.sum(held_in >= threshold)))
    return best


def assess(scores_in: np.ndarray, scores_out: np.ndarray, claim: Claim, confidence: float) -> Assessment:
    """Bound, AUROC and verdict of one audit's scores against the run's claim."""
    from jax_privacy import auditing  # lazy: JAX; the CLI's parser imports this module for its defaults

    bound = one_run_bound(scores_in, scores_out, claim.delta, confidence)
    claimed, accountant = claim.add_remove
    violated = bound.epsilon > claimed
    level = f"{confidence:.0%}"
    reason = (f"the audit's {level} lower bound ε ≥ {bound.epsilon:.4g} exceeds the ε = {claimed:.4g} the run claims "
              f"({accountant.upper()}, add/remove-one, δ = {claim.delta:.3g}): the mechanism that ran is less private "
              "than accounted" if violated else
              f"the audit's {level} lower bound ε ≥ {bound.epsilon:.4g} does not exceed the claimed ε = {claimed:.4g} "
              f"({accountant.upper()}, add/remove-one, δ = {claim.delta:.3g})")
    return Assessment(verdict="violation" if violated else "consistent", reason=reason, claimed_epsilon=claimed,
                      claimed_accountant=accountant, lower_bound=bound.epsilon, guesses=bound.guesses,
                      correct_guesses=bound.correct, ratio=bound.epsilon / claimed if claimed > 0 else math.inf,
                      auroc=float(auditing.CanaryScoreAuditor(scores_in, scores_out).attack_auroc()))


# ---------------------------------------------------------------- checks, then the driver

def check_audit(cfg: Config, canaries: int, confidence: float) -> None:
    """UsageError for what the audit cannot audit, before any data is read or any file written."""
    from tanplan.engine.sparsity import enabled  # lazy: JAX; the CLI's parser imports this module for its defaults

    if not cfg.privacy.private:
        raise UsageError("privacy.private = false is not allowed for an audit: a non-private run claims no ε")
    if enabled(cfg):
        raise UsageError("pruning and gradient dropping are not allowed for an audit: the canaries enter the dense "
                         "DP-SGD step only; set pruning.method = \"none\" and pruning.drop_method = \"none\"")
    if canaries < MIN_CANARIES:
        raise UsageError(f"--canaries {canaries} is not allowed: must be >= {MIN_CANARIES} (half of them, by a fair "
                         "coin, are held out)")
    if not 0.5 < confidence < 1:
        raise UsageError(f"--confidence {confidence:g} is not allowed: must be in (0.5, 1), e.g. 0.95")


def check_audit_out(out: Path | None) -> None:
    """UsageError when out already holds an audited run: every audit trains a fresh one (it never resumes)."""
    if out is not None and (Path(out) / RUN_FOLDER).exists():
        raise UsageError(f"--out {str(out)!r} is not allowed: it already holds an audited run "
                         f"({str(Path(out) / RUN_FOLDER)!r}); every audit trains a new run: choose a new --out")


def check_canary_room(cfg: Config, canaries: int) -> None:
    """UsageError unless the model has at least M parameters (each canary needs coordinates of its own).
    Loads the data (its input shape) and initialises the model abstractly: before any file is written."""
    import jax

    from tanplan.engine.setup import build_model, load_data, public_example  # lazy: JAX; the API (the planner's) imports this module

    dataset = load_data(cfg)  # its metadata only: the input shape, from sources too
    model = build_model(cfg, dataset.num_classes, dataset.input_shape)  # as training builds it (a plug-in: checked)
    shapes = jax.eval_shape(model.init, jax.random.key(0), public_example(dataset.input_shape, 1))
    num_params = sum(math.prod(leaf.shape) for leaf in jax.tree.leaves(shapes))
    if canaries > num_params:
        raise UsageError(f"--canaries {canaries} is not allowed for model {cfg.model.name!r}: at most its {num_params} "
                         "parameters (each canary has coordinates of its own)")


def run_audit(cfg: Config, out: Path | None, *, canaries: int = DEFAULT_CANARIES,
              confidence: float = DEFAULT_CONFIDENCE, progress: bool = True,
              log=lambda line: print(line, file=sys.stderr)) -> AuditResult:
    """Train cfg's run with `canaries` gradient canaries into out/run (nothing written when out is None),
    score them, bound ε and write out/audit.json, audit.md and canary_scores.png. Checks every input first."""
    from tanplan.engine.loop import train_and_evaluate  # lazy: JAX; the API (the planner's) imports this module

    check_audit(cfg, canaries, confidence)
    check_audit_out(out)
    check_canary_room(cfg, canaries)
    started = time.perf_counter()
    workdir = out / RUN_FOLDER if out is not None else None
    records = []  # the canaries' record (their secret draw and what each step released on them): never written
    summary = train_and_evaluate(cfg, workdir, progress=progress, canaries=canaries, on_canaries=records.append)
    record = records[0]
    q = summary.batch_size / summary.dataset_size
    scores = likelihood_ratio_scores(record.observations, q, summary.sigma)
    held_in = record.arrays.held_in
    if held_in.all() or not held_in.any():  # fair coins: with M ≥ 20, once in 500,000 audits
        raise TanplanError(f"all {canaries} canaries fell on the same side of their coins: run the audit again")
    claim = Claim(epsilon_rdp=summary.epsilon_rdp, epsilon_pld=summary.epsilon_pld,
                  epsilon_replace_one=summary.epsilon_replace_one, accountant=summary.accountant,
                  delta=summary.delta)
    figures = assess(scores[held_in], scores[~held_in], claim, confidence)
    result = AuditResult(**fields_of(figures), claim=claim, confidence=confidence,
                         method=("one-run (Steinke, Nasr, Jagielski 2023) with jax-privacy's CanaryScoreAuditor, "
                                 f"white-box gradient canaries, top-k guesses for k in {len(GUESS_FRACTIONS)} "
                                 "fractions of M, union-bounded"),
                         canaries=canaries, held_in=int(held_in.sum()), held_out=int((~held_in).sum()),
                         canary_coordinates=record.design.block, dataset_size=summary.dataset_size,
                         batch_size=summary.batch_size, steps=summary.steps, sigma=summary.sigma,
                         clip_norm=summary.clip_norm, proxy=summary.target is not None,
                         wall_seconds=time.perf_counter() - started,
                         run_folder=str(workdir) if workdir is not None else None)
    if out is not None:
        sums = record.observations.sum(axis=0)
        for path in write_audit(result, scores[held_in], scores[~held_in], sums[held_in], sums[~held_in], out):
            log(f"tanplan: wrote {path}")
    return result
