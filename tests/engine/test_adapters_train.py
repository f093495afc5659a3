"""`tanplan train` with low-rank adapters ([init] adapters) on the tiny .npz, end to end on the per-layer route:
the base stays frozen and the adapters move (the released model, merged, differs from the base by a rank-r
update in each kernel and not at all elsewhere), summary.json counts the adapters as trainable and the base as
frozen, the model card says the adapters were merged, and `load_run` reads the release as the base model."""

import json

import jax
import numpy as np
import pytest
from helpers import tiny_overrides

from tanplan import cli
from tanplan.engine.release import load_params, load_run
from tanplan.fileio import write_bytes_atomic
from tanplan.models import create_model
from tanplan.models.paths import flat_params

RANK = 2


@pytest.fixture(scope="module")
def base_npz(tmp_path_factory):
    """Weights of the tiny MLP (16 -> 8 -> 2) as a .npz of "/"-joined paths: the pretrained base."""
    import io

    model = create_model("mlp", 2, width=8, depth=1)
    params = jax.jit(model.init)(jax.random.key(7), np.zeros((1, 16, 1), np.float32))["params"]
    buf = io.BytesIO()
    np.savez(buf, **flat_params(params))
    path = tmp_path_factory.mktemp("base") / "base.npz"
    write_bytes_atomic(path, buf.getvalue())
    return path


def _train(out, *sets) -> int:
    args = ["train", "--out", str(out), "--quiet"] + sum([["--set", s] for s in sets], [])
    return cli.main(args)


def test_training_with_adapters_moves_only_the_adapters(tiny_npz, base_npz, tmp_path):
    out = tmp_path / "lora"
    assert _train(out, *tiny_overrides(tiny_npz, f'init.path="{base_npz}"', 'init.adapters=["Dense_*"]',
                                       f"init.adapters_rank={RANK}", "train.grad_method=ghost", "train.steps=3")) == 0
    before, after = dict(np.load(base_npz)), load_params(out / "model")
    assert set(after) == set(before)  # merged: the base model's paths and shapes
    for key in before:
        if key.endswith("/bias"):
            assert np.array_equal(before[key], after[key]), key  # frozen: bit for bit
        else:  # the base kernel plus A·B: a change of rank r exactly, not a full update
            change = after[key].astype(np.float64) - before[key]
            assert np.linalg.matrix_rank(change, tol=1e-6 * np.abs(change).max()) == min(RANK, *change.shape), key
    summary = json.loads((out / "summary.json").read_text())
    adapters = (16 * RANK + RANK * 8) + (8 * RANK + RANK * 2)
    base = sum(v.size for v in before.values())
    assert summary["grad_method"] == "ghost"
    assert (summary["trainable_parameters"], summary["frozen_parameters"]) == (adapters, base)
    assert (summary["init"]["trainable_parameters"], summary["init"]["frozen_parameters"]) == (adapters, base)
    card = json.loads((out / "model" / "model.json").read_text())
    assert card["adapters"] == {"targets": ["Dense_*"], "rank": RANK, "merged": True}
    loaded = load_run(out)  # the base model, the merged weights
    assert loaded.predict(np.zeros((2, 16, 1), np.float32)).shape == (2, 2)
    assert summary["test_accuracy"] > 0.5


def test_a_run_without_init_counts_every_parameter_as_trainable(tiny_npz, tmp_path):
    out = tmp_path / "plain"
    assert _train(out, *tiny_overrides(tiny_npz, "train.grad_method=vmap", "train.steps=2")) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert (summary["trainable_parameters"], summary["frozen_parameters"]) == (16 * 8 + 8 + 8 * 2 + 2, 0)
    assert "init" not in summary


@pytest.mark.parametrize("sets, words", [
    (["init.adapters_rank=0"], "init.adapters_rank = 0 is not allowed: must be >= 1"),
    (['init.adapters=["Dense_0"]', 'init.path=""'], "without initial weights"),
    (['init.adapters=["Conv_*"]'], "names no Dense or Conv layer"),
    (['init.adapters=["Dense_*"]', 'init.trainable=["Dense_1"]'], "has an adapter and trains in full"),
    (['init.adapters=["re:Dense_["]'], "not a valid regex"),
])
def test_bad_adapters_are_one_line_and_nothing_is_written(tiny_npz, base_npz, tmp_path, capsys, sets, words):
    out = tmp_path / "bad"
    assert _train(out, *tiny_overrides(tiny_npz, f'init.path="{base_npz}"', *sets)) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and words in err, err
    assert not out.exists()
