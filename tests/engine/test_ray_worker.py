"""`tanplan launch --backend ray --num-workers 2`: two local CPU worker processes (jax.distributed,
gloo collectives on loopback) complete a tiny run that matches the single-process run."""

import numpy as np
import pytest
from helpers import SEEDED, run_launch, saved_params


@pytest.mark.slow
def test_two_ray_workers_match_one_process(tmp_path):
    pytest.importorskip("ray.train.v2.jax")
    one = run_launch(tmp_path / "one", sets=SEEDED)["summary"]
    two = run_launch(tmp_path / "two", "--backend", "ray", "--num-workers", "2", sets=SEEDED, timeout=600)["summary"]
    assert two["processes"] == 2 and two["devices"] == 2 and two["backend"] == "ray"
    assert two["steps"] == one["steps"] == 8
    assert two["epsilon_rdp"] == pytest.approx(one["epsilon_rdp"], rel=1e-12)
    for x, y in zip(saved_params(tmp_path / "one"), saved_params(tmp_path / "two"), strict=True):
        np.testing.assert_allclose(x, y, rtol=1e-4, atol=1e-5)  # only the summation order differs
