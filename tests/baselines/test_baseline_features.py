"""The demo feature source: an encoder trained on public mnist1d only, features cached and reusable."""

from __future__ import annotations

import numpy as np
import pytest

from tanplan.baselines import features
from tanplan.baselines.data import load_features, load_public

TINY = features.DemoSpec(private_samples=200, public_samples=300, width=16, steps=60, batch_size=32)


def fake_encoder(x, y, spec, num_classes=10):
    """A fixed random projection in place of the CNN (the training itself is tested in the slow test)."""
    proj = np.random.default_rng(0).normal(size=(x.shape[1] * x.shape[2], spec.width))

    def encode(data):
        f = np.maximum(data.reshape(len(data), -1) @ proj, 0)
        return f, f[:, :num_classes]

    return encode


@pytest.mark.parametrize("train", [pytest.param("cnn", marks=pytest.mark.slow), "fake"])
def test_demo_features_are_built_once_from_public_data(tmp_path, monkeypatch, train):
    monkeypatch.setenv("TANPLAN_CACHE", str(tmp_path))
    seen = []
    real_train = features.train_encoder if train == "cnn" else fake_encoder

    def spy(x, y, spec, num_classes=10):
        seen.append(len(x))
        return real_train(x, y, spec, num_classes)

    monkeypatch.setattr(features, "train_encoder", spy)
    f_path, p_path = features.demo_features(TINY)
    assert seen == [240]  # the encoder saw the public training split (80% of 300) and nothing else
    data = load_features(f_path)
    public = load_public(p_path, data.width)
    assert data.x_train.shape == (160, 16) and data.x_test.shape == (40, 16) and public.shape == (300, 16)
    assert data.num_classes == 10
    # standardised with public statistics: the public features have mean 0 and unit std per live unit
    live = public.std(0) > 0
    np.testing.assert_allclose(public.mean(0), 0, atol=1e-4)
    np.testing.assert_allclose(public.std(0)[live], 1, atol=1e-3)
    # a second call reuses the cache
    assert features.demo_features(TINY) == (f_path, p_path) and seen == [240]
    out_f, out_p = features.write_demo_features(tmp_path / "copy", TINY)
    assert out_f.read_bytes() == f_path.read_bytes() and out_p.name == "public.npz"


def test_public_and_private_seeds_must_differ():
    with pytest.raises(ValueError):
        features.DemoSpec(private_seed=3, public_seed=3)
