"""train.epochs / --epochs: S = ceil(epochs·N/B), exactly one of steps and epochs, the run's config.toml
reads back, the proxies' stages ask for train.steps; `tanplan plan` shows the epochs (text and JSON)."""

import json
import math

import pytest
from helpers import run_cli

from tanplan.config import config_to_toml, load_config, train_steps
from tanplan.errors import UsageError
from tanplan.privacy.mechanism import resolve_plan


@pytest.mark.parametrize("epochs, n, b", [(2.5, 4000, 500), (1, 1000, 300), (0.1, 1000, 100), (3, 999, 7)])
def test_steps_are_the_ceiling_of_epochs_times_n_over_b(epochs, n, b):
    cfg = load_config(None, [f"train.epochs={epochs}", f"train.batch_size={b}", "privacy.sigma=1"])
    expected = -(-round(epochs * 10) * n // (10 * b))  # exact integer ceiling of the decimal epochs
    assert train_steps(cfg.train, n) == expected == math.ceil(round(epochs * n / b, 9))
    assert resolve_plan(cfg, n).steps == expected


def test_exactly_one_of_steps_and_epochs(tmp_path):
    with pytest.raises(UsageError, match="exactly one"):
        load_config(None, ["train.steps=10", "train.epochs=2"])
    both = tmp_path / "both.toml"
    both.write_text("[train]\nsteps = 10\nepochs = 2\n")
    with pytest.raises(UsageError, match="exactly one"):
        load_config(both)
    by_epochs = load_config(None, ["train.epochs=2"])
    assert by_epochs.with_overrides({"train.steps": 30}).train.epochs == 0  # an S given replaces the epochs
    path = tmp_path / "run.toml"
    path.write_text(config_to_toml(by_epochs))
    assert load_config(path) == by_epochs and "\nsteps = " not in path.read_text()


def test_the_train_command_takes_epochs(tmp_path, capsys):
    code, out, err = run_cli(capsys, "train", "--epochs", "0.5", "--json", "--quiet", "--set", "data.num_samples=1000",
                             "--set", "train.batch_size=100", "--set", "model.name=mlp", "--set", "model.width=8",
                             "--set", "privacy.epsilon=8", "--set", "train.physical_batch_size=128")
    assert code == 0, err
    assert json.loads(out)["steps"] == 4  # ceil(0.5 · 800 / 100)


def test_plan_shows_the_epochs(capsys):
    code, out, _ = run_cli(capsys, "plan", "--dataset-size", "50000", "--batch-size", "4096", "--steps", "2500",
                           "--sigma", "3", "--json")
    assert code == 0 and json.loads(out)["epochs"] == pytest.approx(2500 * 4096 / 50000)
    code, out, _ = run_cli(capsys, "plan", "--dataset-size", "50000", "--batch-size", "4096", "--steps", "2500",
                           "--sigma", "3")
    assert code == 0 and "epochs S·B/N" in out and f"{2500 * 4096 / 50000:.4g}" in out
