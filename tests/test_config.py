"""Config: TOML files, dotted overrides, validation with one-line errors, TOML round trip."""

import pytest
from helpers import CONFIG

from tanplan import config as C
from tanplan.errors import UsageError


def test_defaults_match_the_contract():
    cfg = C.load_config(None)
    assert cfg.experiment.seed == 0 and cfg.data.dataset == "mnist1d" and cfg.model.name == "cnn1d"
    assert cfg.privacy.epsilon == 8.0 and cfg.privacy.sigma == 0.0 and cfg.privacy.private is True
    assert cfg.train.batch_size == 4096 and cfg.train.steps == 200 and cfg.train.optimizer == "sgd"


def test_default_experiment_file_loads():
    cfg = C.load_config(CONFIG)
    assert cfg.data.dataset == "mnist1d" and cfg.privacy.epsilon <= 8


def test_overrides_are_parsed_as_toml_scalars():
    cfg = C.load_config(None, ["train.steps=300", "train.learning_rate=2", "privacy.private=false",
                               "experiment.name=123", "data.augmentation=shift"])
    assert cfg.train.steps == 300 and isinstance(cfg.train.steps, int)
    assert cfg.train.learning_rate == 2.0 and isinstance(cfg.train.learning_rate, float)
    assert cfg.privacy.private is False
    assert cfg.experiment.name == "123"  # a string key keeps the text typed
    assert cfg.data.augmentation == "shift"


@pytest.mark.parametrize("override, words", [
    ("train.stepz=3", ["train.stepz", "batch_size", "steps"]),
    ("trian.steps=3", ["trian", "train", "privacy"]),
    ("train.steps=0", ["train.steps", ">= 1"]),
    ("train.steps=1.5", ["train.steps", "whole number"]),
    ("train.optimizer=rmsprop", ["train.optimizer", "sgd", "adamw"]),
    ("privacy.delta=1", ["privacy.delta", "< 1"]),
    ("privacy.private=yes", ["privacy.private", "true or false"]),
    ("train.ema_decay=1.0", ["train.ema_decay", "< 1"]),
    ("steps=3", ["section.key=value"]),
])
def test_bad_overrides_name_the_key_and_what_is_allowed(override, words):
    with pytest.raises(UsageError) as err:
        C.load_config(None, [override])
    message = str(err.value)
    assert "\n" not in message
    for word in words:
        assert word in message


def test_unknown_key_in_file(tmp_path):
    path = tmp_path / "x.toml"
    path.write_text("[train]\nbatchsize = 3\n")
    with pytest.raises(UsageError, match="train.batchsize.*valid keys"):
        C.load_config(path)
    with pytest.raises(UsageError, match="does not exist"):
        C.load_config(tmp_path / "missing.toml")
    path.write_text("[train\n")
    with pytest.raises(UsageError, match="not valid TOML"):
        C.load_config(path)


def test_cross_field_checks():
    with pytest.raises(UsageError, match="proxy_batch_size"):
        C.load_config(None, ["train.batch_size=100", "train.proxy_batch_size=200"])
    with pytest.raises(UsageError, match="nesterov"):
        C.load_config(None, ["train.nesterov=true"])


def test_toml_round_trip_and_with_overrides():
    cfg = C.load_config(None, ["train.steps=7", "experiment.name=a \"quoted\" name", "privacy.sigma=1.25"])
    again = C.config_from_dict(__import__("tomllib").loads(C.config_to_toml(cfg)))
    assert again == cfg
    changed = cfg.with_overrides({"train.learning_rate": 0.5, "train.momentum": 0.9})
    assert changed.train.learning_rate == 0.5 and changed.train.momentum == 0.9 and changed.train.steps == 7
    assert cfg.train.learning_rate != 0.5  # frozen: the original is untouched
    assert changed.get("train.momentum") == 0.9
    assert C.load_config(None).to_dict()["train"]["steps"] == 200


def test_stage_sections_are_typed_fields_read_validated_and_written():
    cfg = C.load_config(None, ["fit.seeds=3", "fit.batch_sizes=[16, 32]", "sweep.trials=3"])
    assert (cfg.fit.seeds, cfg.fit.batch_sizes, cfg.sweep.trials) == (3, (16, 32), 3)
    assert "[fit]" in C.config_to_toml(cfg) and C.config_from_dict(C.tomllib.loads(C.config_to_toml(cfg))) == cfg
    assert C.load_config(None).fit.seeds == C.FitConfig().seeds  # defaults when the file has no such section
    for bad in ("fit.seeds=0", "fit.batch_sizes=[0]", 'fit.batch_sizes="abc"', "fit.level=5"):
        with pytest.raises(UsageError, match=bad.split("=")[0]):
            C.load_config(None, [bad])


def test_renamed_keys_are_read_under_their_new_names(tmp_path):
    cfg = C.load_config(None, ["train.prune_method=random", "train.prune_rate=0.5"])
    assert (cfg.pruning.method, cfg.pruning.rate) == ("random", 0.5)
    path = tmp_path / "old.toml"
    path.write_text("[train]\ngrad_drop_method = \"magnitude\"\ngrad_drop_rate = 0.3\n")
    assert C.load_config(path).pruning.drop_method == "magnitude"


def test_a_best_json_may_not_change_what_the_guarantee_rests_on():
    cfg = C.load_config(None)
    assert C.with_tuned(cfg, {"train.learning_rate": 0.5}, "best.json").train.learning_rate == 0.5
    for key in ("privacy.epsilon", "privacy.sigma", "privacy.delta", "data.dataset", "train.batch_size",
                "train.steps"):
        with pytest.raises(UsageError, match=f"best.json sets {key}"):
            C.with_tuned(cfg, {key: 1}, "best.json")
