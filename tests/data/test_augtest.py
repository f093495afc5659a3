"""AugTest: majority vote over K test-time augmentations."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from tanplan.data import augtest_predict, make_augmentation, majority_vote


def test_majority_vote_counts_votes_not_confidence():
    # Three views of one example vote 2, 2, 1; class 1 has the highest mean probability, so averaging
    # logits would answer 1, the vote answers 2.
    logits = jnp.array([[[0.0, 0.0, 1.0]], [[0.0, 0.0, 1.0]], [[0.0, 20.0, 0.0]]])
    assert int(majority_vote(logits)[0]) == 2
    assert int(jnp.argmax(jax.nn.softmax(logits, -1).mean(0), -1)[0]) == 1


def test_majority_vote_breaks_ties_by_mean_probability():
    # Two views, one vote each for classes 0 and 2: the more confident view wins the tie.
    logits = jnp.array([[[3.0, 0.0, 0.0]], [[0.0, 0.0, 5.0]]])
    assert int(majority_vote(logits)[0]) == 2


def test_majority_vote_matches_a_plain_count():
    rng = np.random.default_rng(0)
    logits = rng.standard_normal((5, 200, 4)).astype(np.float32)  # odd K: ties only among 3+ classes
    votes = np.stack([np.bincount(col, minlength=4) for col in logits.argmax(-1).T])
    winners = np.asarray(majority_vote(jnp.asarray(logits)))
    assert (votes[np.arange(200), winners] == votes.max(1)).all()


def linear_logits(params, x):
    return x.reshape(x.shape[0], -1) @ params


def test_augtest_predict_votes_over_the_views_it_draws():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((16, 40, 1)).astype(np.float32)
    params = rng.standard_normal((40, 3)).astype(np.float32)
    augment = make_augmentation("shift", "1d")
    key, k = jax.random.key(5), 5

    @jax.jit  # one program for both: compiling is what costs time here
    def predict_and_by_hand(params, x, key):
        got = augtest_predict(linear_logits, params, x, key, k=k, augment=augment)
        # The same views, drawn with the same key schedule (example i's K views from fold_in(key, i)), then voted.
        own = [jax.random.split(jax.random.fold_in(key, i), k) for i in range(len(x))]
        views = [jax.vmap(augment)(jnp.stack([own[i][v] for i in range(len(x))]), x) for v in range(k)]
        return got, majority_vote(jnp.stack([linear_logits(params, v) for v in views]))

    got, expected = map(np.asarray, predict_and_by_hand(params, x, key))
    np.testing.assert_array_equal(got, expected)
    # Not vacuous: the views disagree on some examples, so voting is exercised.
    assert not np.array_equal(got, np.argmax(linear_logits(params, x), -1))
    assert got.dtype == np.int32 and got.shape == (16,)


def test_augtest_with_one_identity_view_is_plain_argmax():
    rng = np.random.default_rng(2)
    x = rng.standard_normal((8, 40, 1)).astype(np.float32)
    params = rng.standard_normal((40, 3)).astype(np.float32)
    got = augtest_predict(linear_logits, params, x, jax.random.key(0), k=1, augment=make_augmentation("none", "1d"))
    np.testing.assert_array_equal(np.asarray(got), np.argmax(linear_logits(params, x), -1))


def test_augtest_views_follow_the_test_index_not_the_batch():
    """An example's views come from its test index: predicted within any batch (other rows, another place)
    it gets the same vote. Keyed by position instead (index left out), the same rows vote otherwise."""
    rng = np.random.default_rng(3)
    x = rng.standard_normal((16, 40, 1)).astype(np.float32)
    params = rng.standard_normal((40, 3)).astype(np.float32)
    predict = jax.jit(lambda p, xs, i: augtest_predict(linear_logits, p, xs, jax.random.key(7), k=1,
                                                        augment=make_augmentation("shift_scale_noise", "1d"),
                                                        index=i))
    whole = np.asarray(predict(params, x, np.arange(16)))
    part = np.array([13, 2, 9, 5, 0, 11, 7, 15])  # half the test set, in another order
    np.testing.assert_array_equal(np.asarray(predict(params, x[part], part)), whole[part])
    by_position = np.asarray(predict(params, x[part], np.arange(len(part))))
    assert not np.array_equal(by_position, whole[part])  # the views matter: the check above can fail
