"""The [sweep] section and its search space: parsing, defaults, and one-line errors for bad spaces."""

import pytest

from tanplan.config import load_config
from tanplan.errors import UsageError
from tanplan.workflow.sweep.space import KEYS, PAPER_GRID, default_space, overrides, parse_space, to_optuna

AUGS_1D = ("none", "shift", "scale", "noise", "shift_scale_noise")
MODELS = ("mlp", "cnn1d")


def _cfg(**overrides_):
    return load_config(None, [f"{k}={v}" for k, v in overrides_.items()])


def _parse(space, cfg=None):
    return parse_space(space, cfg or _cfg(), augmentations=AUGS_1D, models=MODELS)


def test_sweep_section_reads_from_toml(tmp_path):
    path = tmp_path / "x.toml"
    path.write_text("[train]\nbatch_size = 512\n[sweep]\ntrials = 7\nscheduler = \"asha\"\n"
                    "[sweep.space]\nlearning_rate = { low = 0.5, high = 8.0, log = true }\nmomentum = [0.0, 0.9]\n")
    cfg = load_config(path)
    section = cfg.sweep
    assert (section.trials, section.scheduler, section.top_k) == (7, "asha", 3)
    dims = _parse(section.space, cfg)
    assert [d.path for d in dims] == ["train.learning_rate", "train.momentum"]
    assert dims[0].log and (dims[0].low, dims[0].high) == (0.5, 8.0)


def test_dotted_keys_written_bare_in_toml(tmp_path):
    path = tmp_path / "x.toml"
    path.write_text("[sweep.space]\ntrain.weight_decay = [0.0, 0.0001]\nmodel.width = { low = 8, high = 32 }\n")
    cfg = load_config(path)
    dims = _parse(cfg.sweep.space, cfg)
    assert [(d.name, d.path) for d in dims] == [("train.weight_decay", "train.weight_decay"),
                                                ("model.width", "model.width")]
    assert dims[1].integer


def test_sweep_section_defaults_when_absent():
    section = _cfg().sweep
    assert section.space == {} and section.trials >= 1


def test_sweep_section_scalar_keys_are_validated(tmp_path):
    path = tmp_path / "x.toml"
    path.write_text("[sweep]\ntrails = 3\n")
    with pytest.raises(UsageError, match="sweep.trails"):
        load_config(path)
    with pytest.raises(UsageError, match="sweep.scheduler"):
        _cfg(**{"sweep.scheduler": '"hyperband"'})


def test_every_short_key_maps_to_a_config_key():
    cfg = _cfg()
    for name, path in KEYS.items():
        cfg.get(path)  # raises on a key the config does not have
        assert _parse({name: [cfg.get(path)]}, cfg)[0].path == path


def test_paper_grid_is_the_image_default():
    cfg = _cfg(**{"data.dataset": '"cifar10"', "model.name": '"wrn16_4"'})
    space = default_space("image")
    assert space == PAPER_GRID
    dims = parse_space(space, cfg, augmentations=("none", "crop_flip", "rrc", "simclr"))
    by_name = {d.name: d for d in dims}
    assert by_name["learning_rate"].choices == (1.0, 2.0, 4.0, 8.0, 12.0, 16.0)
    assert by_name["aug_mult"].choices == (1, 2, 4, 8, 16)
    assert by_name["ema_decay"].choices[-1] == 0.99999


def test_signal_default_is_valid_for_mnist1d():
    dims = _parse(default_space("1d"))
    assert {d.path for d in dims} >= {"train.learning_rate", "data.aug_mult"}


def test_integer_range_and_dotted_key():
    dims = _parse({"aug_mult": {"low": 1, "high": 4}, "train.weight_decay": {"low": 0.0, "high": 0.1}})
    k, wd = dims
    assert k.integer and (k.low, k.high) == (1, 4)
    assert not wd.integer and wd.path == "train.weight_decay"
    dists = to_optuna(dims)
    assert type(dists["aug_mult"]).__name__ == "IntDistribution"
    assert type(dists["train.weight_decay"]).__name__ == "FloatDistribution"


def test_overrides_map_sampled_params_to_config_keys():
    dims = _parse({"lr": [1.0, 2.0], "architecture": ["mlp"]})
    assert overrides(dims, {"lr": 2.0, "architecture": "mlp"}) == {"train.learning_rate": 2.0, "model.name": "mlp"}


def test_float_choices_are_coerced():
    (dim,) = _parse({"learning_rate": [1, 2, 4]})
    assert dim.choices == (1.0, 2.0, 4.0)
    assert all(isinstance(c, float) for c in dim.choices)


@pytest.mark.parametrize("space, message", [
    ({}, "is empty"),
    ({"learning_rate": []}, "is empty"),
    ({"learning_rate": {"low": 8.0, "high": 1.0}}, "low = 8.0 > high = 1.0"),
    ({"learning_rate": {"low": 0.0, "high": 1.0, "log": True}}, "log range needs low > 0"),
    ({"learning_rate": {"low": 1.0}}, "needs both low and high"),
    ({"learning_rate": {"low": 1.0, "high": 2.0, "lg": True}}, "unknown range key 'lg'"),
    ({"learning_rate": 4.0}, "list of choices or a range"),
    ({"learing_rate": [1.0]}, "'learing_rate' is unknown"),
    ({"train.nonsense": [1.0]}, "'train.nonsense' is unknown"),
    ({"sweep.trials": [1, 2]}, "is unknown"),
    ({"aug_mult": [0, 1, 2]}, "aug_mult.*must be >= 1"),
    ({"aug_mult": {"low": 0, "high": 4}}, "aug_mult.*must be >= 1"),
    ({"aug_mult": {"low": 1.5, "high": 4}}, "whole number"),
    ({"momentum": [0.0, 1.5]}, "momentum.*must be <= 1"),
    ({"ema_decay": [0.9, 1.0]}, "ema_decay.*must be < 1"),
    ({"learning_rate": [0.0, 1.0]}, "learning_rate.*must be > 0"),
    ({"optimizer": ["sgd", "lamb"]}, "optimizer.*use one of"),
    ({"augmentation": ["shift", "rrc"]}, "augmentation 'rrc' is not available"),
    ({"model": ["mlp", "resnet1000"]}, "model 'resnet1000' is unknown"),
    ({"lr": [1.0], "learning_rate": [2.0]}, "sets train.learning_rate twice"),
    ({"model": {"low": 1, "high": 2}}, "not numeric"),
])
def test_bad_spaces_are_one_line_usage_errors(space, message):
    with pytest.raises(UsageError, match=message) as err:
        _parse(space)
    assert "\n" not in str(err.value)


def test_pruning_options_are_sweep_keys_checked_against_the_config():
    cfg = load_config(None)
    dims = parse_space({"prune_method": ["none", "random", "synflow"], "prune_rate": [0.0, 0.5],
                        "grad_drop_method": ["random", "magnitude"], "grad_drop_rate": {"low": 0.0, "high": 0.9}}, cfg)
    assert {d.path for d in dims} == {"pruning.method", "pruning.rate", "pruning.drop_method", "pruning.drop_rate"}
    with pytest.raises(UsageError):
        parse_space({"grad_drop_rate": {"low": 0.0, "high": 0.95}}, cfg)


@pytest.mark.parametrize("key", ["privacy.epsilon", "privacy.sigma", "privacy.accountant", "privacy.noise_seed",
                                 "data.num_samples", "train.batch_size", "train.steps"])
def test_a_space_may_not_search_what_the_guarantee_rests_on(key):
    with pytest.raises(UsageError, match=f"{key}.*privacy guarantee rests on") as err:
        parse_space({key: [1, 2]}, load_config(None))
    assert "\n" not in str(err.value)
    parse_space({"privacy.clip_norm": [0.5, 1.0]}, load_config(None))  # C stays searchable
