"""The data-size term (tanplan.laws.data_size): proxies on a public set of N_pub < N examples carry, in the
prediction's mean and interval, what halving their data does, extrapolated over log2(N/N_pub) doublings."""

import math
import statistics

import pytest

from tanplan.laws.batch_law import predict
from tanplan.laws.data_size import MISSPECIFICATION_SHARE, DataSizeTerm, needs_term

ROWS = [(b, acc + e) for b, acc in ((16, 0.75), (32, 0.8), (64, 0.85), (128, 0.85)) for e in (-0.01, 0, 0.01)]


def _term(public=(0.80, 0.82, 0.81), half=(0.76, 0.78, 0.77), sizes=(4000, 2000, 16000)):
    n_pub, n_half, n = sizes
    return DataSizeTerm(public_size=n_pub, private_size=n, half_size=n_half, batch_size=128, public=public, half=half)


def test_one_halvings_effect_is_carried_over_the_doublings_to_n():
    term = _term()
    d = statistics.fmean(term.public) - statistics.fmean(term.half)
    assert term.doublings == pytest.approx(math.log2(16000 / 4000)) == pytest.approx(2.0)
    assert term.per_halving == pytest.approx(d) and term.shift == pytest.approx(2 * d)
    noise = statistics.variance(term.public) / 3 + statistics.variance(term.half) / 3
    assert term.variance == pytest.approx(4 * noise + (MISSPECIFICATION_SHARE * 2 * d) ** 2)
    # the same seeds with no data effect: only their noise, no shift, no stated misspecification
    flat = _term(half=term.public)
    assert flat.shift == 0 and flat.variance == pytest.approx(4 * 2 * statistics.variance(term.public) / 3)


def test_no_term_where_the_public_set_is_as_large_as_the_private_one():
    assert needs_term(4000, 16000) and not needs_term(16000, 16000) and not needs_term(20000, 16000)
    with pytest.raises(ValueError, match="two seeds"):
        _term(public=(0.8,))


def test_the_prediction_moves_by_the_shift_and_its_interval_carries_the_terms_variance():
    plain, term = predict(ROWS, 4096), _term()
    with_term = predict(ROWS, 4096, data_size=term)
    assert with_term.mean == pytest.approx(plain.mean + term.shift) and with_term.law_mean == pytest.approx(plain.mean)
    assert with_term.variance == pytest.approx(plain.variance + term.variance)
    low, high = with_term.interval
    assert (high - low) / 2 == pytest.approx(with_term.quantile * math.sqrt(plain.variance + term.variance))
    assert with_term.lower_bound() < with_term.mean
    record = with_term.record()
    assert record.data_size.shift == pytest.approx(term.shift) and record.data_size.std == pytest.approx(
        math.sqrt(term.variance))
    assert plain.record().data_size is None and plain.record() == predict(ROWS, 4096).record()  # unchanged without
