"""`tanplan pretrain` refuses a public set holding near-copies of private rows (docs/privacy.md, "Pretraining
data: the near-copy rule"; tanplan.data.near_copy): rows equal after per-row standardisation (private × 255,
another brightness and contrast), in any order, with float noise, or with their features reversed. Issue 44
item 5: `pretrain` accepted private × 255 and a copy whose rows' features were reversed.

Each refused case is one line, exit 2, nothing written; an independent public set still pretrains."""

import numpy as np
import pytest

from tanplan import cli
from tanplan.data import near_copy

N, D = 300, 12
SETS = ["data.dataset=npz", "model.name=mlp", "model.width=8", "model.depth=1", "train.batch_size=32",
        "train.steps=2", "train.eval_every=2", "train.physical_batch_size=32"]
REFUSED = "it holds examples of the private training or test set"


def _private(rng):
    return rng.normal(size=(N, D)), rng.integers(0, 4, N)


# Each public set is built from the private inputs x (train rows first): every one is refused. Each also
# changes the rows' scale or their features' order, which the old check (near-equal rows only) let through.
COPIES = {
    "private × 255": lambda x, rng: x * 255,
    "rows in reverse order, × 255": lambda x, rng: x[::-1] * 255,
    "a shuffled subset of 20 rows, brighter (+3) and at half the contrast, among 280 others":
        lambda x, rng: np.concatenate([0.5 * x[rng.permutation(N)[:20]] + 3, rng.normal(size=(N - 20, D))])[
            rng.permutation(N)],
    "a copy × 255 with noise 1e-5 of its scale": lambda x, rng: x * 255 + rng.normal(size=x.shape) * 255e-5,
    "every row's features reversed (the issue's row-reversed copy)": lambda x, rng: x[:, ::-1],
    "one test row's features reversed, × 0.1": lambda x, rng: np.concatenate([rng.normal(size=(N - 1, D)),
                                                                               x[-1:, ::-1] * 0.1]),
}


@pytest.fixture
def files(tmp_path):
    rng = np.random.default_rng(0)
    x, y = _private(rng)
    np.savez(tmp_path / "private.npz", x_train=x[:240], y_train=y[:240], x_test=x[240:], y_test=y[240:])
    for i, make in enumerate(COPIES.values()):
        p = make(x, rng)
        np.savez(tmp_path / f"copy{i}.npz", x_train=p[:240], y_train=y[:240], x_test=p[240:], y_test=y[240:])
    z = rng.normal(size=(N, D))  # an independent draw of the same task
    np.savez(tmp_path / "independent.npz", x_train=z[:240], y_train=y[:240], x_test=z[240:], y_test=y[240:])
    return tmp_path


def _pretrain(files, public: str, capsys) -> tuple[int, str, str]:
    sets = [*SETS, f"data.path={files / 'private.npz'}", f"tuning.path={files / public}"]
    code = cli.main(["pretrain", *sum([["--set", s] for s in sets], []), "--out", str(files / "pre"), "--quiet"])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("index", range(len(COPIES)), ids=list(COPIES))
def test_a_near_copy_of_the_private_set_is_refused_before_anything_is_written(files, capsys, index):
    before = sorted(p.name for p in files.iterdir())
    code, out, err = _pretrain(files, f"copy{index}.npz", capsys)
    assert (code, out, err.count("\n")) == (2, "", 1), err
    assert REFUSED in err and "near-copy rule" in err and "Traceback" not in err
    assert "tuning.data = 'private'" not in err  # pretraining has no private way out: it trains on public data
    assert sorted(p.name for p in files.iterdir()) == before  # no run folder


def test_an_independent_public_set_is_pretrained_on_and_private_times_255_is_not(files, capsys):
    code, _, err = _pretrain(files, "independent.npz", capsys)
    assert code == 0, err
    assert (files / "pre" / "model").is_dir()
    code, _, err = _pretrain(files, "copy0.npz", capsys)  # private × 255, into a fresh folder
    assert code == 2 and REFUSED in err


@pytest.mark.parametrize("turn", [(1,), (0,), (0, 1)], ids=["mirrored", "upside down", "turned 180°"])
def test_an_image_reversed_along_its_spatial_axes_is_a_copy(turn):
    """(H, W, C) rows: a mirrored, flipped or half-turned copy at another brightness is found; the channels
    stay in their order (reversing them is not the same image)."""
    rng = np.random.default_rng(1)
    private = _Images(rng.normal(size=(30, 4, 5, 3)), rng.normal(size=(10, 4, 5, 3)))
    turned = np.flip(private.x_train[7:8], axis=tuple(a + 1 for a in turn)) * 2 + 1
    public = _Images(np.concatenate([rng.normal(size=(30, 4, 5, 3)), turned]), rng.normal(size=(10, 4, 5, 3)))
    assert near_copy.shares_an_example(public, private, 1e-3)
    assert not near_copy.shares_an_example(_Images(*[rng.normal(size=(30, 4, 5, 3))] * 2), private, 1e-3)


class _Images:
    """What the check reads of a dataset: inputs, shape and class count."""

    def __init__(self, x_train, x_test):
        self.x_train, self.x_test = x_train, x_test
        self.input_shape, self.num_classes = tuple(x_train.shape[1:]), 4
