"""train.epochs / --epochs: S = ceil(epochs·N/B), exactly one of steps and epochs, the run's config.toml
reads back, the proxies' stages ask for train.steps; `tanplan plan` shows the epochs (text and JSON)."""

import json
import math

import pytest
from helpers import run_cli

import tanplan

from tanplan.config import config_to_toml, load_config, train_steps
from tanplan.errors import UsageError
from tanplan.privacy.run_plan import resolve_plan


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


def test_the_train_command_takes_epochs(tmp_path, capsys, monkeypatch):
    from fakes import use_mnist1d_shaped

    # the steps are a function of N, not of the signals: random rows of mnist1d's shapes stand in for its draw;
    # the per-example route (its self-check and costing: tests/engine/test_routes.py) is not tested here
    use_mnist1d_shaped(monkeypatch)
    code, out, err = run_cli(capsys, "train", "--epochs", "0.5", "--json", "--quiet", "--set", "data.num_samples=1000",
                             "--set", "train.batch_size=100", "--set", "model.name=mlp", "--set", "model.width=8",
                             "--set", "privacy.epsilon=8", "--set", "train.physical_batch_size=128",
                             "--set", "train.grad_method=vmap")
    assert code == 0, err
    assert json.loads(out)["steps"] == 4  # ceil(0.5 · 800 / 100)


def test_plan_shows_the_epochs(capsys):
    code, out, _ = run_cli(capsys, "plan", "--dataset-size", "50000", "--batch-size", "4096", "--steps", "2500",
                           "--sigma", "3", "--json")
    assert code == 0 and json.loads(out)["epochs"] == pytest.approx(2500 * 4096 / 50000)
    code, out, _ = run_cli(capsys, "plan", "--dataset-size", "50000", "--batch-size", "4096", "--steps", "2500",
                           "--sigma", "3")
    assert code == 0 and "epochs S·B/N" in out and f"{2500 * 4096 / 50000:.4g}" in out


def _plan(capsys, *extra):
    return run_cli(capsys, "plan", "--dataset-size", "50000", "--batch-size", "4096", "--sigma", "3", *extra)


def test_plan_takes_epochs_and_shows_both_ways(capsys):
    """`plan --epochs 3`: S = ceil(3·50000/4096) = 37 (rounded up: 36 steps would be 2.95 passes), the E asked
    and the S·B/N that S gives both shown; the same plan as `--steps 37`."""
    steps = -(-3 * 50000 // 4096)  # exact integer ceiling
    assert steps == 37 and 36 * 4096 / 50000 < 3 <= steps * 4096 / 50000
    code, out, err = _plan(capsys, "--epochs", "3", "--json")
    by_epochs = json.loads(out)
    assert code == 0 and by_epochs["steps"] == steps and by_epochs["epochs_asked"] == 3
    assert by_epochs["epochs"] == pytest.approx(steps * 4096 / 50000)
    code, out, _ = _plan(capsys, "--steps", str(steps), "--json")
    by_steps = json.loads(out)
    assert "epochs_asked" not in by_steps
    assert {k: v for k, v in by_epochs.items() if k != "epochs_asked"} == by_steps
    code, out, _ = _plan(capsys, "--epochs", "3")
    assert code == 0 and "epochs asked E" in out and "steps S = ceil(E·N/B)" in out
    assert f"{steps * 4096 / 50000:.4g}" in out and " 37\n" in out


@pytest.mark.parametrize("extra, says", [
    (("--epochs", "3", "--steps", "20"), "--steps 20 and --epochs 3 are not allowed together"),
    ((), "--steps or --epochs"),
    (("--epochs", "0"), "--epochs"),
    (("--epochs", "1e9"), "above"),
])
def test_plan_refuses_steps_and_epochs_together_or_neither(capsys, extra, says):
    code, out, err = _plan(capsys, *extra)
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1 and says in err


def test_the_api_and_proxy_take_epochs(capsys):
    result = tanplan.plan(1000, 300, epochs=1.0, sigma=2.0)
    assert result.plan.steps == 4 and result.epochs_asked == 1.0  # ceil(1000/300)
    assert type(result).from_dict(result.to_dict()) == result
    with pytest.raises(UsageError, match="not allowed together"):
        tanplan.plan(1000, 300, 4, epochs=1.0, sigma=2.0)
    code, out, _ = run_cli(capsys, "proxy", "--dataset-size", "1000", "--batch-size", "300", "--epochs", "1",
                           "--sigma", "2", "--proxy-batch-size", "30", "--json")
    assert code == 0 and json.loads(out)["steps"] == 4
    code, _, err = run_cli(capsys, "plan", "--dataset-size", "1000", "--epsilon", "1", "--compute", "100000",
                           "--epochs", "2")
    assert code == 2 and "--epochs is not allowed with --compute" in err
