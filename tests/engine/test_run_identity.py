"""A secret belongs to one run: a new run into a folder never inherits it, and a resume of another run is
refused (exit 2, naming the key) with every checkpoint kept; a checkpoint of another structure is not damage.

Two released models with one noise cancel it (for SGD, θ_A/η_A − θ_B/η_B): the first test shows that run B,
trained into run A's folder after A's checkpoints were deleted, draws noise A never had.
"""

import json
import shutil

import numpy as np
import pytest
from helpers import tiny_overrides
from helpers import checkpoint_steps

from tanplan import cli
from tanplan.config import load_config
from tanplan.dp.secret import NOISE, RunSecret
from tanplan.engine.checkpoint import Checkpoints
from tanplan.engine.loop import train_and_evaluate
from tanplan.errors import UsageError
from tanplan.job import job_of

SETTINGS = ("train.checkpoint_every=3", "train.eval_every=3")


@pytest.fixture(scope="module")
def run_a(tiny_npz, tmp_path_factory):
    """Run A, finished, with checkpoints at steps 3 and 6: (its config, its folder)."""
    cfg = load_config(None, tiny_overrides(tiny_npz, *SETTINGS))
    out = tmp_path_factory.mktemp("identity") / "run"
    train_and_evaluate(job_of(cfg), out, progress=False)
    return cfg, out


def _secret(out) -> RunSecret:
    return RunSecret.load(out / "checkpoint")


def _files(out) -> dict:
    return {str(p.relative_to(out)): p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("change, key", [("model.width=16", "model.width"), ("train.ema_decay=0.9", "train.ema_decay")])
def test_resume_with_another_model_or_ema_exits_2_and_deletes_nothing(run_a, capsys, change, key):
    cfg, out = run_a
    before = _files(out)
    argv = ["train", "--quiet", "--resume", "--out", str(out)] + sum(
        [["--set", s] for s in [*[f"{k}={v}" for k, v in _flat(cfg).items()], change]], [])
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and key in err and "nothing was changed" in err
    assert checkpoint_steps(out) == [3, 6] and _files(out) == before


def test_a_checkpoint_of_another_structure_is_refused_not_deleted(run_a, tmp_path):
    _, out = run_a
    copy = tmp_path / "copy"
    shutil.copytree(out / "checkpoint", copy)
    ckpt = Checkpoints(copy)
    try:
        with pytest.raises(UsageError, match="holds another training state"):
            ckpt.restore_intact({"w": np.zeros((3, 3), np.float32)})  # another model's state
    finally:
        ckpt.close()
    assert sorted(p.name for p in copy.iterdir() if p.name.isdigit()) == ["3", "6"]


def test_a_new_run_into_a_folder_with_a_stale_secret_draws_its_own_noise(run_a, tmp_path):
    cfg, finished = run_a
    out = tmp_path / "run"
    shutil.copytree(finished, out)
    for step in checkpoint_steps(out):  # A crashed before its first save, or its checkpoints were deleted
        shutil.rmtree(out / "checkpoint" / str(step))
    a = _secret(out)
    b_cfg = cfg.with_overrides({"train.learning_rate": 0.5})
    with pytest.raises(UsageError, match="started with another train.learning_rate"):
        train_and_evaluate(job_of(b_cfg), out, progress=False, resume=True)  # B is not A: its resume is refused
    train_and_evaluate(job_of(b_cfg), out, progress=False)  # B as a new run
    b = _secret(out)
    assert a.words != b.words and not np.array_equal(a.key_data(NOISE), b.key_data(NOISE))
    assert json.loads((out / "summary.json").read_text())["steps"] == 6
    # Even A's own config, run again as a new run, never inherits B's secret.
    for step in checkpoint_steps(out):
        shutil.rmtree(out / "checkpoint" / str(step))
    train_and_evaluate(job_of(b_cfg), out, progress=False)
    assert _secret(out).words not in (a.words, b.words)


def _flat(cfg) -> dict:
    """The overrides that reproduce cfg from the defaults (the sections a run reads)."""
    default = load_config(None).to_dict()
    out = {}
    for section in ("data", "model", "privacy", "train"):
        for key, value in cfg.to_dict()[section].items():
            if value != default[section][key]:
                out[f"{section}.{key}"] = f'"{value}"' if isinstance(value, str) else value
    return out
