"""The privacy audit's bounds: from the canaries' scores and their secret coins to lower bounds on ε.

Both bounds are one-run bounds (one training run, M canaries with independent fair coins) computed by
jax-privacy's `CanaryScoreAuditor` (tanplan never re-implements them):

- the ε-based bound (Steinke, Nasr, Jagielski, *Privacy Auditing with One (1) Training Run*, NeurIPS 2023,
  `epsilon_one_run`): ε ≥ bound at δ holds, with the stated confidence, for ANY mechanism that is
  (ε, δ)-DP towards each canary. It is the one the verdict rests on.
- the f-DP estimate (Mahloujifar et al., *Auditing f-Differential Privacy in One Run*, ICML 2025,
  `epsilon_one_run_fdp`): the largest μ-GDP trade-off curve the guesses refute, given as its ε at δ. It
  uses the whole trade-off curve of the claim, not one (ε, δ) point, so it is much tighter; it is a
  lower bound for a mechanism whose trade-off curve is Gaussian (the Gaussian mechanism exactly, DP-SGD
  approximately, by the central limit theorem of Dong, Roth & Su), hence an ESTIMATE for DP-SGD, shown
  beside the bound, never the verdict's ground.

The guesses. The auditor guesses "held in" for the k_in highest scores, "held out" for the k_out lowest and
abstains on the middle: both bounds count guesses and correct ones only, and abstaining where the scores
say little keeps the precision high. The pair (k_in, k_out) is chosen BEFORE the scores are seen
(`planned_guesses`), from public values alone: the claimed mechanism's (q, σ, S) give the ideal canaries'
score distributions (`ideal_scores`), and the pair that maximises each bound's expected value for them is
its plan. No confidence is spent on that choice. Beside the plan, "every canary guessed" (what a badly
broken mechanism shows best) is tried too, by a weighted union bound: the plan at PLAN_SHARE of the
significance 1 − confidence, every canary at the rest. jax-privacy's default (a Bonferroni correction over
all M thresholds) pays for M choices instead.

The ceiling (`ceiling`): what the audit could prove at best with M canaries, every guess right (the best of
the guesses tried, each at its share of the significance): no mechanism, however broken, can be shown worse.

    >>> rng = np.random.default_rng(0)
    >>> bound_from_guesses(rng.normal(size=300), rng.normal(size=300), [Guesses(30, 30)], 1e-5, 0.95).epsilon
    0.0
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

EXACT = "epsilon"  # Steinke et al.'s ε-based bound: valid for any (ε, δ)-DP mechanism
FDP = "fdp"  # Mahloujifar et al.'s f-DP (μ-GDP) estimate
GRID = (0, 1 / 256, 1 / 128, 1 / 64, 1 / 32, 1 / 16, 1 / 8, 1 / 4, 1 / 2)  # k_in, k_out as fractions of M
SYMMETRIC = (1 / 32, 1 / 16, 1 / 8, 3 / 16, 1 / 4, 3 / 8)  # k_in = k_out as fractions of M (the f-DP plan)
PLANNING_DRAWS = 10_000  # ideal canaries per side when planning the guesses (public values only)
PLANNING_SEED = 0  # the simulation of the CLAIMED mechanism: public, no secret enters it
PLAN_SHARE = 0.9  # the planned guesses' part of the significance; every canary guessed gets the rest


@dataclass(frozen=True)
class Guesses:
    """The k_in highest scores guessed held in, the k_out lowest held out, the rest abstained on; `share`: the
    part of the significance 1 − confidence this guess spends (the shares of the guesses tried sum to 1)."""

    k_in: int
    k_out: int
    share: float = 1.0


@dataclass(frozen=True)
class Bound:
    """ε ≥ epsilon with the stated confidence, from `guesses` guesses of which `correct` were right."""

    epsilon: float
    guesses: int
    correct: int
    k_in: int
    k_out: int


def counts(scores_in: np.ndarray, scores_out: np.ndarray, guess: Guesses) -> tuple[int, int]:
    """(guesses, correct) of `guess` on the pooled scores (ties broken against the auditor: a held-out score
    equal to a held-in one ranks above it)."""
    pooled = np.concatenate([scores_in, scores_out])
    is_in = np.concatenate([np.ones(len(scores_in), bool), np.zeros(len(scores_out), bool)])
    order = np.lexsort((is_in, -pooled))  # descending score; on ties, held out first
    ranked = is_in[order]
    top, bottom = ranked[:guess.k_in], ranked[len(ranked) - guess.k_out:] if guess.k_out else ranked[:0]
    return guess.k_in + guess.k_out, int(top.sum() + (~bottom).sum())


def _epsilon(method: str, m: int, guesses: int, correct: int, delta: float, significance: float) -> float:
    """jax-privacy's one-run bound for `guesses` guesses, `correct` right, among m canaries.

    Both analyses depend on the guesses through these counts alone, whichever side each guess takes, so
    jax-privacy's bound functions are called on the counts (`CanaryScoreAuditor.epsilon_one_run[_fdp]` call
    the same functions for its one-sided guesses: tests/workflow/test_audit_bounds.py checks they agree)."""
    from jax_privacy import auditing  # lazy: JAX; the CLI's parser imports the audit for its defaults

    if guesses == 0:
        return 0.0
    bound = auditing._epsilon_one_run_fdp if method == FDP else auditing._epsilon_one_run  # noqa: SLF001
    return float(bound(0.0, m, guesses, correct, significance, delta))


def likelihood_ratio_scores(projections: np.ndarray, q: float, sigma) -> np.ndarray:
    """(M,) scores s_j = Σ_t log(1 − q + q·exp((x_tj − ½)/σ²)) of the (S, M) projections x: the log-likelihood
    ratio of "held in" (x_tj = Bernoulli(q) + N(0, σ²)) against "held out" (N(0, σ²)), the most powerful test
    for the claimed mechanism (tanplan.workflow.audit). sigma: a number, or (S, 1) / (S, M) per step.

    >>> s = likelihood_ratio_scores(np.array([[1.0, 0.0], [1.0, 0.0]]), q=0.5, sigma=1.0)
    >>> bool(s[0] > 0 > s[1])
    True
    """
    x = np.asarray(projections, dtype=np.float64)
    with np.errstate(divide="ignore"):  # q = 1: log(1 − q) = −inf, and the score is the Gaussian's alone
        return np.logaddexp(np.log1p(-q), math.log(q) + (x - 0.5) / np.asarray(sigma) ** 2).sum(axis=0)


def centred_by_group(projections: np.ndarray, groups: np.ndarray) -> np.ndarray:
    """(S, M) projections less, at each step, the mean over the canaries of the same group (input canaries: of
    the same label, whose gradients overlap most). What the other joined canaries of a group add to each of
    its readings is largely shared by the group, and goes; a canary's own signal loses 1/(its group's size).
    Coin-free (every canary of a group alike), so the scores stay valid.

    >>> centred_by_group(np.array([[1.0, 3.0, 5.0]]), np.array([0, 0, 1])).tolist()
    [[-1.0, 1.0, 0.0]]
    """
    x = np.array(projections, dtype=np.float64)
    for group in np.unique(groups):
        members = groups == group
        x[:, members] -= x[:, members].mean(axis=1, keepdims=True)
    return x


def ideal_scores(q: float, sigma: float, steps: int, draws: int, rng: np.random.Generator) -> tuple[np.ndarray, ...]:
    """(held in, held out) scores of `draws` ideal canaries each under the CLAIMED mechanism: x_t = Bernoulli(q)
    (held in) + N(0, σ²), S steps; drawn step by step (memory: 2·draws numbers, whatever S)."""
    scores = np.zeros((2, draws))
    for _ in range(steps):
        x = sigma * rng.standard_normal((2, draws))
        x[0] += rng.random(draws) < q
        scores += likelihood_ratio_scores(x[None], q, sigma)
    return scores[0], scores[1]


def _pairs(m: int, method: str) -> list[Guesses]:
    """The candidate guesses: any split over both ends for the fast ε-based bound; for the f-DP one (seconds per
    evaluation) as many guessed in as out, which is where its optimum lies for the claimed mechanism."""
    if method == FDP:
        pairs = {Guesses(round(a * m), round(a * m)) for a in SYMMETRIC}
    else:
        pairs = {Guesses(round(a * m), round(b * m)) for a in GRID for b in GRID if 0 < a + b <= 1}
    return sorted((p for p in pairs if p.k_in + p.k_out >= 1), key=lambda p: (p.k_in, p.k_out))


def planned_guesses(m: int, q: float, sigma: float, steps: int, delta: float, significance: float,
                    method: str = EXACT) -> Guesses:
    """The (k_in, k_out) that maximises the bound (of `method`) expected for M ideal canaries of the claimed
    mechanism (`ideal_scores`): public values only, so choosing it spends no confidence. The expected
    correct guesses of a pair are read off the ideal scores' quantiles (fair coins: half held in)."""
    ideal_in, ideal_out = ideal_scores(q, sigma, steps, PLANNING_DRAWS, np.random.default_rng(PLANNING_SEED))
    pooled = np.concatenate([ideal_in, ideal_out])
    is_in = np.concatenate([np.ones(len(ideal_in), bool), np.zeros(len(ideal_out), bool)])[np.argsort(-pooled)]
    in_above = np.concatenate([[0], np.cumsum(is_in)])  # held-in ideal canaries among the top r, r = 0..2n
    out_below = np.concatenate([[0], np.cumsum(~is_in[::-1])])  # held-out ones among the bottom r
    n = len(pooled)

    def expected(pair: Guesses) -> float:
        top, bottom = round(pair.k_in / m * n), round(pair.k_out / m * n)
        correct = (in_above[top] + out_below[bottom]) / n * m
        return _epsilon(method, m, pair.k_in + pair.k_out, round(correct), delta, significance)

    values = [(expected(p), -(p.k_in + p.k_out), p) for p in _pairs(m, method)]
    best = max(values, key=lambda v: v[:2])
    return best[2] if best[0] > 0 else Guesses(max(1, m // 16), max(1, m // 16))


def bound_from_guesses(scores_in: np.ndarray, scores_out: np.ndarray, tried: list[Guesses], delta: float,
                       confidence: float, method: str = EXACT) -> Bound:
    """The best bound over the guesses `tried` (fixed before the scores were seen), each at its share of the
    significance 1 − confidence (a weighted union bound keeps the stated confidence for the best of them)."""
    if not math.isclose(sum(g.share for g in tried), 1.0):
        raise ValueError(f"the guesses' shares of the significance must sum to 1, not {sum(g.share for g in tried)}")
    m = len(scores_in) + len(scores_out)
    best = Bound(0.0, 0, 0, 0, 0)
    for guess in tried:
        guesses, correct = counts(scores_in, scores_out, guess)
        eps = _epsilon(method, m, guesses, correct, delta, (1 - confidence) * guess.share)
        if eps > best.epsilon or best.guesses == 0:
            best = Bound(eps, guesses, correct, guess.k_in, guess.k_out)
    return best


def ceiling(m: int, tried: list[Guesses], delta: float, confidence: float, method: str = EXACT) -> float:
    """The largest ε the audit can prove with m canaries and these guesses: every guess right."""
    return max(_epsilon(method, m, g.k_in + g.k_out, g.k_in + g.k_out, delta, (1 - confidence) * g.share)
               for g in tried)
