"""`tanplan train` end to end on a tiny .npz dataset: files, reproducibility, bad input, divergence."""

import json

import numpy as np
import pytest

from tanplan import cli
from tanplan.config import load_config
from tanplan.errors import TrainingDiverged, UsageError
from tanplan.engine.loop import restore_checkpoint, train_and_evaluate


@pytest.fixture(scope="module")
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


def _overrides(path, *extra):
    return ["data.dataset=npz", f'data.path="{path}"', "model.name=mlp", "model.width=8",
            "model.depth=1", "train.batch_size=32", "train.steps=6", "train.eval_every=3",
            "train.physical_batch_size=64", "train.learning_rate=1.0", "privacy.epsilon=4", *extra]


def test_train_writes_files_and_is_reproducible(tiny_npz, tmp_path):
    cfg = load_config(None, _overrides(tiny_npz, "train.grad_method=ghost"))
    seen = []
    first = train_and_evaluate(cfg, tmp_path / "a", progress=False, on_eval=lambda s, m: seen.append((s, m)))
    for key in ("test_accuracy", "epsilon_rdp", "epsilon_pld", "delta", "steps", "batch_size", "sigma",
                "wall_seconds", "samples_per_second", "params_checksum"):
        assert key in first, key
    assert first["steps"] == 6 and first["batch_size"] == 32 and first["delta"] == pytest.approx(1 / 240)
    assert first["epsilon_rdp"] <= 4.0 * (1 + 1e-9) and first["epsilon_pld"] <= first["epsilon_rdp"]
    assert first["test_accuracy"] > 0.8  # separable data: even 6 noisy steps learn it
    assert [s for s, _ in seen] == [3, 6] and {"test_accuracy", "loss", "epsilon_spent"} <= set(seen[0][1])
    assert seen[0][1]["epsilon_spent"] < seen[1][1]["epsilon_spent"]
    lines = (tmp_path / "a" / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(line)["step"] for line in lines] == [3, 6]
    assert json.loads((tmp_path / "a" / "summary.json").read_text())["params_checksum"] == first["params_checksum"]
    restored = restore_checkpoint(tmp_path / "a" / "checkpoint")
    assert int(restored["step"]) == 6
    assert load_config(tmp_path / "a" / "config.toml") == cfg  # the run's config, reloadable


@pytest.mark.slow
def test_same_config_and_seed_give_the_same_weights(tiny_npz):
    cfg = load_config(None, _overrides(tiny_npz, "train.grad_method=ghost"))
    first = train_and_evaluate(cfg, None, progress=False)
    again = train_and_evaluate(cfg, None, progress=False)
    assert again["params_checksum"] == first["params_checksum"]
    other = train_and_evaluate(cfg.with_overrides({"experiment.seed": 1}), None, progress=False)
    assert other["params_checksum"] != first["params_checksum"]


def test_cli_json_and_nonprivate_mode(tiny_npz, tmp_path, capsys):
    overrides = _overrides(tiny_npz, "privacy.private=false", "train.grad_method=vmap")
    code = cli.main(["train", "--quiet", "--json", "--out", str(tmp_path / "np")]
                    + sum([["--set", o] for o in overrides], []))
    assert code == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["private"] is False and summary["epsilon_rdp"] is None and summary["sigma"] == 0
    assert summary["grad_method"] == "plain"


@pytest.mark.parametrize("override, words", [
    ("train.stepz=3", "valid keys"),
    ("model.name=resnet1000", "unknown model"),
    ("data.dataset=imagenet", "unknown dataset"),
    ("train.batch_size=100000", "batch size"),
])
def test_bad_input_is_one_line_and_exit_2(tiny_npz, override, words, capsys):
    args = ["train", "--quiet"] + sum([["--set", o] for o in _overrides(tiny_npz, override)], [])
    assert cli.main(args) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and words in err and "Traceback" not in err


def test_missing_cifar_directory_is_usage_error(tmp_path):
    cfg = load_config(None, ["data.dataset=cifar10", f'data.path="{tmp_path / "nope"}"'])
    with pytest.raises(UsageError):
        train_and_evaluate(cfg, None, progress=False)


def test_nan_loss_stops_keeps_last_good_checkpoint_and_exits_1(tiny_npz, tmp_path, capsys):
    # Non-private SGD with an absurd learning rate overflows within a few steps.
    overrides = _overrides(tiny_npz, "privacy.private=false", "train.learning_rate=1e30", "train.eval_every=1",
                           "train.steps=20", "train.grad_method=vmap")
    cfg = load_config(None, overrides)
    with pytest.raises(TrainingDiverged, match="diverged"):
        train_and_evaluate(cfg, tmp_path / "nan", progress=False)
    summary = json.loads((tmp_path / "nan" / "summary.json").read_text())
    assert summary["diverged_at_step"] is not None
    kept = restore_checkpoint(tmp_path / "nan" / "checkpoint")
    assert int(kept["step"]) < summary["diverged_at_step"]
    assert all(np.isfinite(np.asarray(v)).all() for v in __import__("jax").tree.leaves(kept["params"]))
    code = cli.main(["train", "--quiet", "--out", str(tmp_path / "nan2")] + sum([["--set", o] for o in overrides], []))
    assert code == 1 and "diverged" in capsys.readouterr().err
