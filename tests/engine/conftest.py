import numpy as np
import pytest


@pytest.fixture(scope="session")
def tiny_npz(tmp_path_factory):
    """Two separable classes of 16-long signals: 240 train, 80 test."""
    rng = np.random.default_rng(0)

    def make(n):
        y = rng.integers(0, 2, n).astype(np.int32)
        x = rng.normal(size=(n, 16, 1)).astype(np.float32) + (2 * y - 1)[:, None, None] * 0.8
        return x, y

    (x_train, y_train), (x_test, y_test) = make(240), make(80)
    path = tmp_path_factory.mktemp("data") / "tiny.npz"
    np.savez(path, x_train=x_train, y_train=y_train, x_test=x_test, y_test=y_test)
    return path
