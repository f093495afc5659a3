"""[init]'s sources (.npz, .msgpack, orbax, a loader by import path) give the same weights and digest; the
head is re-initialised when the class count differs; frozen_blocks names Kurakin's block groups."""

import sys

import flax.serialization
import jax
import numpy as np
import pytest

from tanplan.config import load_config
from tanplan.errors import UsageError
from tanplan.models import create_model
from tanplan.models.freeze import trainable_paths
from tanplan.models.init import digest_of, load_init
from tanplan.models.paths import flat_params, matches


def _params(classes, width=8):
    model = create_model("mlp", classes, width=width, depth=1)
    return model.init(jax.random.key(classes), np.zeros((1, 16, 1), np.float32))["params"]


@pytest.fixture(scope="module")
def source():
    return _params(2)


def _cfg(*sets):
    return load_config(None, ["model.name=mlp", "model.width=8", "model.depth=1", *sets])


def _parts(cfg, model=False):
    """What models.init.load_init (or, model=True, models.freeze.trainable_paths) takes of a config."""
    return (cfg.init, cfg.model) if model else (cfg.init, cfg.model.name)


def test_every_source_gives_the_same_weights_and_digest(source, tmp_path, monkeypatch):
    import orbax.checkpoint as ocp

    flat = flat_params(source)
    np.savez(tmp_path / "w.npz", **flat)
    (tmp_path / "w.msgpack").write_bytes(flax.serialization.msgpack_serialize({"params": jax.device_get(source)}))
    ocp.PyTreeCheckpointer().save(str(tmp_path / "orbax"), jax.device_get(source))
    (tmp_path / "my_weights.py").write_text(
        "import numpy as np\n"
        f"def load_params():\n    f = np.load({str(tmp_path / 'w.npz')!r})\n"
        "    out = {}\n"
        "    for k in f.files:\n        mod, name = k.split('/')\n        out.setdefault(mod, {})[name] = f[k]\n"
        "    return out\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    sys.modules.pop("my_weights", None)
    fresh = _params(2)  # another draw: every array must come from the source
    for sets in ([f'init.path="{tmp_path / "w.npz"}"'], [f'init.path="{tmp_path / "w.msgpack"}"'],
                 [f'init.path="{tmp_path / "orbax"}"'], ['init.loader="my_weights:load_params"']):
        init = load_init(*_parts(_cfg(*sets)), jax.tree.map(lambda a: a + 1.0, fresh))
        assert init.digest == digest_of(flat) and init.reinitialised == ()
        for k, v in flat_params(init.params).items():
            assert np.array_equal(v, flat[k]), (sets, k)


def test_the_head_is_reinitialised_when_the_class_count_differs(source, tmp_path):
    np.savez(tmp_path / "w.npz", **flat_params(source))
    fresh = _params(5)
    init = load_init(*_parts(_cfg(f'init.path="{tmp_path / "w.npz"}"')), fresh)
    assert init.reinitialised == ("Dense_1/bias", "Dense_1/kernel")  # the MLP's last Dense: its head
    got, src, new = flat_params(init.params), flat_params(source), flat_params(fresh)
    assert np.array_equal(got["Dense_0/kernel"], src["Dense_0/kernel"])
    assert np.array_equal(got["Dense_1/kernel"], new["Dense_1/kernel"]) and got["Dense_1/kernel"].shape == (8, 5)
    with pytest.raises(UsageError, match=r"Dense_1/bias has shape \(2,\) .* the model's is \(5,\)"):
        load_init(*_parts(_cfg(f'init.path="{tmp_path / "w.npz"}"', 'init.head=["Dense_0"]')), fresh)


def test_an_extra_or_missing_array_is_named(source, tmp_path):
    flat = flat_params(source)
    np.savez(tmp_path / "extra.npz", **flat, **{"Dense_9/kernel": np.zeros(3)})
    with pytest.raises(UsageError, match="Dense_9/kernel"):
        load_init(*_parts(_cfg(f'init.path="{tmp_path / "extra.npz"}"')), source)
    np.savez(tmp_path / "missing.npz", **{k: v for k, v in flat.items() if k != "Dense_0/bias"})
    with pytest.raises(UsageError, match="Dense_0/bias .* is missing"):
        load_init(*_parts(_cfg(f'init.path="{tmp_path / "missing.npz"}"')), source)


def _shapes(name, depth, width):
    model = create_model(name, 10, width=width, depth=depth)
    return jax.eval_shape(lambda: model.init(jax.random.key(0), np.zeros((1, 16, 16, 3), np.float32)))["params"]


@pytest.mark.parametrize("name, depth, width, k, trainable_top", [
    ("resnet18_gn", 18, 8, 1, {"BasicBlock_2", "BasicBlock_3", "BasicBlock_4", "BasicBlock_5", "BasicBlock_6",
                               "BasicBlock_7", "Dense_0"}),
    ("resnet18_gn", 18, 8, 4, {"Dense_0"}),
    ("wrn16_4", 10, 1, 2, {"WRNBlock_2", "NormAct_0", "Dense_0"}),  # its final norm goes with the last group
    ("wrn16_4", 10, 1, 3, {"Dense_0"}),
    ("vit_tiny", 2, 64, 1, {"EncoderBlock_1", "LayerNorm_0", "Dense_0"}),
])
def test_frozen_blocks_are_the_stem_and_the_first_block_groups(name, depth, width, k, trainable_top):
    params = _shapes(name, depth, width)
    cfg = load_config(None, [f"model.name={name}", f"model.depth={depth}", f"model.width={width}",
                             f"init.frozen_blocks={k}"])
    assert {p.split("/")[0] for p in trainable_paths(cfg.init, cfg.model, params)} == trainable_top


def test_patterns_glob_and_regex_name_modules_and_frozen_wins():
    assert matches("BasicBlock_*", "BasicBlock_3/Conv_0/kernel") and matches("Conv_0", "Conv_0/kernel")
    assert matches("re:BasicBlock_[0-3]", "BasicBlock_3/Conv_0/kernel")
    assert not matches("re:BasicBlock_1", "BasicBlock_10/Conv_0/kernel")  # a regex matches a module whole
    params = _shapes("resnet18_gn", 18, 8)
    cfg = load_config(None, ["model.name=resnet18_gn", "model.width=8", 'init.trainable=["BasicBlock_7", "Dense_0"]',
                             'init.frozen=["*/GroupNorm_*"]'])
    kept = trainable_paths(cfg.init, cfg.model, params)
    assert kept and all(p.startswith(("BasicBlock_7/", "Dense_0/")) and "GroupNorm" not in p for p in kept)
    with pytest.raises(UsageError, match="frozen_blocks = 5 .* 4 block groups"):
        trainable_paths(*_parts(load_config(None, ["model.name=resnet18_gn", "init.frozen_blocks=5"]), model=True),
                        params)
