"""A law the data chooses (issue 48, item 2): law "auto", the default, averages the knee and noise forms by how
well each predicts the top rungs from those below them, and the interval carries their disagreement."""

import math

import numpy as np
import pytest

from tanplan.config import load_config
from tanplan.laws.batch_law import LAW_PRIOR, forms_of, law_weights, out_of_sample_score, predict, rungs_of

SIZES = (16, 32, 64, 128, 256)
HINGE = lambda b: 0.85 - 0.05 * max(0.0, math.log2(64 / b))  # noqa: E731  a clear plateau from 64
SLOW = lambda b: 0.78 - 1.5 / b  # noqa: E731  fine-tuning's shape: still rising a point a doubling at 128-256


def rows(curve, rng, seeds=3, noise=0.01, sizes=SIZES):
    return [(b, curve(b) + e) for b in sizes for e in rng.normal(0, noise, seeds)]


def test_auto_is_the_default_so_no_user_needs_fit_law():
    assert load_config(None).fit.law == "auto" and forms_of("auto") == ("knee", "noise")


def test_the_weights_follow_the_forms_out_of_sample_fit():
    rng = np.random.default_rng(0)
    slow = [predict(rows(SLOW, rng, noise=0.004), 4096, forms=forms_of("auto")) for _ in range(10)]
    hinge = [predict(rows(HINGE, rng, noise=0.004), 4096, forms=forms_of("auto")) for _ in range(10)]
    noise_weight = lambda p: next(c.weight for c in p.candidates if c.law.form == "noise")  # noqa: E731
    assert np.mean([noise_weight(p) for p in slow]) > 0.6  # the knee stops rising too early there
    assert np.mean([noise_weight(p) for p in hinge]) < 0.4  # the noise law keeps rising past a plateau
    assert law_weights([0.0, math.log(3.0)]) == pytest.approx([0.25, 0.75])  # exp(score), without a prior
    assert law_weights([0.0, math.log(3.0)], ("knee", "noise")) == pytest.approx([0.5, 0.5])  # 3:1 for the knee


def test_the_prediction_is_the_weighted_mean_and_the_forms_disagreement_widens_it():
    p = predict(rows(SLOW, np.random.default_rng(1)), 4096, forms=forms_of("auto"))
    w = np.array([c.weight for c in p.candidates])
    means = np.array([c.mean for c in p.candidates])
    assert w.sum() == pytest.approx(1.0) and p.mean == pytest.approx(w @ means)
    assert p.var_choice == pytest.approx(w @ (means - p.mean) ** 2) and p.var_choice > 0
    own = sum(wi * (c.var_mean + c.var_knee) for wi, c in zip(w, p.candidates))
    assert p.var_mean == pytest.approx(own + p.var_choice)  # "which law" is part of the law's mean at B
    assert p.law.form == max(p.candidates, key=lambda c: c.weight).law.form  # the law of record: the heaviest
    record = p.record()
    assert [c.weight for c in record.candidates] == pytest.approx(list(w))


def test_every_form_is_scored_on_the_same_top_rungs_each_from_the_rungs_below_it():
    rungs = rungs_of(rows(HINGE, np.random.default_rng(2)))
    for form in ("knee", "noise"):
        score, scored = out_of_sample_score(rungs, form)
        assert scored == 2 and math.isfinite(score)
    # each scored rung has MIN_WINDOW (3) rungs below it: four rungs score the top one, three none
    assert out_of_sample_score(rungs[:4], "knee")[1] == 1 and out_of_sample_score(rungs[:3], "knee")[1] == 0


def test_averaging_covers_a_slow_rise_the_knee_alone_misses():
    rng = np.random.default_rng(4)
    target, noise = 4096, 0.01
    hits = {"knee": [], "auto": []}
    for _ in range(25):
        data = rows(SLOW, rng, noise=noise, sizes=(16, 32, 64, 128))
        launches = SLOW(target) + rng.normal(0, noise, 20)
        for law in hits:
            low, high = predict(data, target, forms=forms_of(law)).interval
            hits[law].append(np.mean((launches >= low) & (launches <= high)))
    assert np.mean(hits["auto"]) >= 0.9 and np.mean(hits["auto"]) > np.mean(hits["knee"])


def test_with_no_rung_to_hold_out_the_prior_alone_weighs_the_forms():
    two = [(b, a) for b in (64, 128) for a in (0.80, 0.82)]
    p = predict(two, 4096, forms=forms_of("auto"))
    prior = np.array([LAW_PRIOR[f] for f in forms_of("auto")])
    assert [c.weight for c in p.candidates] == pytest.approx(list(prior / prior.sum()))
    assert all(c.score is None for c in p.candidates)
