"""DPPL-Public(K)'s exponential mechanisms: the sampled distribution is the stated one, and it is ε-DP.

The privacy checks compute exact output probabilities on two add/remove-one neighbouring datasets and
bound their log-ratio by ε over every possible output (every public point, or every K-set).
"""

from __future__ import annotations

from itertools import combinations
from math import comb

import numpy as np
import pytest
from scipy.special import logsumexp

from tanplan.baselines import prototypes
from tanplan.baselines.heads import unit_rows


def utilities_pair(seed: int, n_public: int, d_min: float = 1.0, d_max: float = 2.0):
    """Utilities of one class before and after removing one of its examples, on the same public points."""
    rng = np.random.default_rng(seed)
    members = rng.normal(size=(12, 4)) + 1.0
    public_unit = unit_rows(np.vstack([rng.normal(size=(n_public - 1, 4)), members[:1]]))  # incl. a near-copy
    u = prototypes.public_utilities(members, public_unit, d_min, d_max)
    u2 = prototypes.public_utilities(members[1:], public_unit, d_min, d_max)
    return u, u2, d_max - d_min


def log_probs(log_weights):
    return log_weights - logsumexp(log_weights)


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("epsilon", [0.1, 1.0, 5.0])
def test_one_prototype_mechanism_is_epsilon_dp(seed, epsilon):
    u, u2, du = utilities_pair(seed, 20)
    p = log_probs(prototypes.exponential_log_weights(u, epsilon, du))
    p2 = log_probs(prototypes.exponential_log_weights(u2, epsilon, du))
    assert np.abs(p - p2).max() <= epsilon + 1e-12


def set_mechanism_log_probs(u, k, epsilon, du):
    """Brute force: P(S) ∝ exp(ε(min_S u − u_(K))/(2Δu)) over all K-subsets."""
    uk = np.sort(u)[::-1][k - 1]
    sets = list(combinations(range(len(u)), k))
    return sets, log_probs(np.array([epsilon * (u[list(s)].min() - uk) / (2 * du) for s in sets]))


def sampler_log_probs(u, k, epsilon, du):
    """What sample_topk draws: the rank y of the lowest member, then K−1 uniform among the y−1 above."""
    order = np.argsort(-u, kind="stable")
    rank = {int(i): r + 1 for r, i in enumerate(order)}
    py = log_probs(prototypes.topk_rank_log_weights(u[order], k, epsilon, du))
    sets = list(combinations(range(len(u)), k))
    out = []
    for s in sets:
        y = max(rank[i] for i in s)
        out.append(py[y - 1] - np.log(comb(y - 1, k - 1)))
    return sets, np.array(out)


@pytest.mark.parametrize("k", [1, 2, 3])
@pytest.mark.parametrize("ties", [False, True])
def test_topk_sampler_is_the_set_exponential_mechanism(k, ties):
    u, _, du = utilities_pair(0, 7)
    if ties:
        u = np.round(u)  # equal utilities: the rank decomposition must still count each set once
    sets, exact = set_mechanism_log_probs(u, k, 2.0, du)
    sets2, sampled = sampler_log_probs(u, k, 2.0, du)
    assert sets == sets2
    np.testing.assert_allclose(sampled, exact, atol=1e-10)


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("k", [2, 3])
def test_topk_mechanism_is_epsilon_dp(seed, k):
    u, u2, du = utilities_pair(seed, 7)
    epsilon = 1.5
    _, p = set_mechanism_log_probs(u, k, epsilon, du)
    _, p2 = set_mechanism_log_probs(u2, k, epsilon, du)
    assert np.abs(p - p2).max() <= epsilon + 1e-12


def test_sample_topk_draws_match_the_exact_distribution():
    """Empirical frequencies of sample_topk (the code path the method runs) against the exact law."""
    u, _, du = utilities_pair(1, 6)
    k, epsilon = 2, 3.0
    sets, exact = set_mechanism_log_probs(u, k, epsilon, du)
    rng = np.random.default_rng(0)
    draws = 10_000
    counts = dict.fromkeys(sets, 0)
    for _ in range(draws):
        counts[tuple(sorted(int(i) for i in prototypes.sample_topk(rng, u, k, epsilon, du)))] += 1
    freq = np.array([counts[s] for s in sets]) / draws
    assert np.abs(freq - np.exp(exact)).max() < 0.02  # ~4 standard errors


def test_one_prototype_draws_match_the_exact_distribution():
    u, _, du = utilities_pair(2, 5)
    logw = prototypes.exponential_log_weights(u, 4.0, du)
    rng = np.random.default_rng(1)
    draws = np.bincount([prototypes.sample_log_weights(rng, logw) for _ in range(20_000)], minlength=5) / 20_000
    assert np.abs(draws - np.exp(log_probs(logw))).max() < 0.015
