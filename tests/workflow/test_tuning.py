"""Where proxies learn: public data keeps the target's η_step at its own size; private data is the config's."""

import numpy as np
import pytest

from tanplan.config import load_config
from tanplan.errors import UsageError
from tanplan.privacy.mechanism import resolve_plan
from tanplan.privacy.plan import Plan
from tanplan.workflow import tuning

TARGET = Plan(dataset_size=16_000, batch_size=4096, steps=300, sigma=22.0, delta=1 / 16_000)


def test_public_mnist1d_is_an_independent_draw_of_the_same_size():
    cfg = load_config(None, ["data.seed=3"])
    t = tuning.resolve(cfg, TARGET, load_size=lambda c: 16_000)
    assert t.data == "public" and t.proxy_cfg.data.seed == 4 and not t.sizes_differ
    assert t.proxy_cfg.privacy.sigma == pytest.approx(22.0) and t.proxy_cfg.privacy.delta == TARGET.delta


@pytest.mark.parametrize("n_pub", [8_000, 16_000, 40_000])
def test_a_public_set_of_another_size_keeps_the_targets_eta_step(tmp_path, n_pub):
    path = tmp_path / "public.npz"
    np.savez(path, x_train=np.zeros((2, 4)), y_train=[0, 1], x_test=np.zeros((2, 4)), y_test=[0, 1])
    cfg = load_config(None, [f'tuning.path="{path}"', "train.batch_size=4096", "train.steps=300"])
    t = tuning.resolve(cfg, TARGET, load_size=lambda c: n_pub)
    assert t.proxy_cfg.data.dataset == "npz" and t.sizes_differ == (n_pub != 16_000)
    for b in (64, 128):  # each proxy, as the engine resolves it on N_pub examples
        proxy = resolve_plan(t.proxy_cfg.with_overrides({"train.proxy_batch_size": b}), n_pub).plan
        assert proxy.eta_step == pytest.approx(TARGET.eta_step, rel=1e-12) and proxy.steps == TARGET.steps
        assert proxy.q == pytest.approx(b / n_pub)


def test_private_tuning_keeps_the_config():
    cfg = load_config(None, ["tuning.data=private"])
    t = tuning.resolve(cfg, TARGET, load_size=lambda c: pytest.fail("private tuning loads nothing more"))
    assert t.proxy_cfg is cfg and t.to_dict()["tuning_data"] == "private"


@pytest.mark.parametrize("overrides, words", [
    (['tuning.path="/nope.npz"'], "tuning.path"),
    (["data.dataset=cifar10"], "needs tuning.path"),
])
def test_unusable_tuning_data_is_refused_before_any_load(overrides, words):
    with pytest.raises(UsageError, match=words):
        tuning.check(load_config(None, overrides))


def test_a_public_set_smaller_than_the_target_batch_is_refused():
    with pytest.raises(UsageError, match="fewer than train.batch_size"):
        tuning.resolve(load_config(None), TARGET, load_size=lambda c: 1000)
