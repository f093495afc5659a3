"""The experiments/ configs load, plan within their budget, and run (shrunk) on data the test writes."""

import json

import pytest
from helpers import ROOT, write_cifar_fixture

from tanplan.cli import main
from tanplan.config import load_config
from tanplan.privacy.plan import plan_from_config

CIFAR = ROOT / "experiments" / "cifar10_wrn16_4.toml"
# The paper's setting, made tiny: a WRN-10-1, 4 augmented views, B = 8 of 10 examples, 2 steps. By the vmap
# route: the per-layer route's self-check and costing of the WRN (7 of its 19 CPU-s) are tests/engine/test_routes.py's.
SHRUNK = ["model.depth=10", "model.width=1", "data.aug_mult=4", "train.batch_size=8", "train.steps=2",
          "train.physical_batch_size=16", "train.eval_every=2", "train.checkpoint_every=2",
          "train.eval_batch_size=8", "train.grad_method=vmap"]


def test_every_experiment_config_loads():
    for path in sorted((ROOT / "experiments").glob("*.toml")):
        assert load_config(path).experiment.name


def test_cifar10_setting_is_the_papers_and_within_its_budget():
    cfg = load_config(CIFAR)
    assert (cfg.train.batch_size, cfg.privacy.sigma, cfg.train.steps, cfg.data.aug_mult) == (4096, 3.0, 2500, 16)
    assert (cfg.model.name, cfg.data.augmentation, cfg.train.learning_rate, cfg.train.momentum) == \
        ("wrn16_4", "crop_flip", 4.0, 0.0)
    plan = plan_from_config(cfg, 50_000)
    assert plan.epsilon("rdp") <= cfg.privacy.epsilon and plan.regime.value == "tan"


def test_cifar10_setting_trains_and_launches_shrunk_on_a_fake_cifar_directory(tmp_path, capsys):
    root = tmp_path / "cifar-10-batches-py"
    write_cifar_fixture(root, per_batch=(2, 2, 2, 2, 2), test=4)
    sets = sum([["--set", s] for s in [f'data.path="{tmp_path}"', *SHRUNK]], [])
    assert main(["launch", "--config", str(CIFAR), "--out", str(tmp_path / "launch"), "--json", *sets]) == 0
    result = json.loads(capsys.readouterr().out)
    summary = result["summary"]
    assert summary["steps"] == 2 and summary["dataset_size"] == 10 and summary["grad_method"] in ("ghost", "vmap")
    assert summary["epsilon_rdp"] == pytest.approx(result["accounting"]["epsilon_rdp"])
    assert (tmp_path / "launch" / "model" / "params.npz").is_file()
