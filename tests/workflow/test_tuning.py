"""Where proxies learn: public data keeps the target's σ/B whatever its size; private data is the config's;
a "public" set that is the private file, shares its examples, or belongs to another task is refused."""

from dataclasses import dataclass

import numpy as np
import pytest

from tanplan.config import load_config
from tanplan.errors import UsageError
from tanplan.privacy.run_plan import resolve_plan
from tanplan.privacy.plan import Plan
from tanplan.workflow import tuning

TARGET = Plan(dataset_size=16_000, batch_size=4096, steps=300, sigma=22.0, delta=16_000 ** -1.1)


@dataclass
class _Data:
    """Stands in for a Dataset: what the tuning checks read."""

    num_train: int = 16_000
    input_shape: tuple = (40, 1)
    num_classes: int = 10
    x_train: np.ndarray = None
    x_test: np.ndarray = None

    def __post_init__(self):
        rng = np.random.default_rng(self.num_train)
        self.x_train = rng.normal(size=(20, *self.input_shape)) if self.x_train is None else self.x_train
        self.x_test = rng.normal(size=(5, *self.input_shape)) if self.x_test is None else self.x_test


def test_public_mnist1d_is_an_independent_draw_of_the_same_size():
    cfg = load_config(None, ["data.seed=3"])
    t = tuning.resolve(cfg, TARGET, load=lambda c: _Data())
    assert t.data == "public" and t.proxy_cfg.data.seed == 4 and not t.sizes_differ
    assert t.proxy_cfg.privacy.sigma == pytest.approx(22.0) and t.proxy_cfg.privacy.delta == TARGET.delta
    assert t.proxy_cfg.privacy.allow_large_delta  # δ was checked on the private N: proxies guarantee nothing


@pytest.mark.parametrize("n_pub", [8_000, 16_000, 40_000])
def test_a_public_set_of_another_size_keeps_the_noise_on_the_targets_mean_gradient(tmp_path, n_pub):
    """Each proxy is (B', σ·B'/B, S) on N_pub examples: σ'/B' = σ/B, the launch's noise on its mean gradient (issue
    48: keeping η_step instead made a proxy on N/2 examples twice as noisy, and its accuracy 22 points low)."""
    path = tmp_path / "public.npz"
    np.savez(path, x_train=np.zeros((2, 4)), y_train=[0, 1], x_test=np.zeros((2, 4)), y_test=[0, 1])
    cfg = load_config(None, [f'tuning.path="{path}"', "train.batch_size=4096", "train.steps=300"])
    t = tuning.resolve(cfg, TARGET, load=lambda c: _Data(num_train=n_pub))
    assert t.proxy_cfg.data.dataset == "npz" and t.sizes_differ == (n_pub != 16_000)
    for b in (64, 128):  # each proxy, as the engine resolves it on N_pub examples
        proxy = resolve_plan(t.proxy_cfg.with_overrides({"train.proxy_batch_size": b}), n_pub).plan
        assert proxy.sigma / b == pytest.approx(TARGET.sigma / TARGET.batch_size, rel=1e-12)
        assert proxy.steps == TARGET.steps and proxy.q == pytest.approx(b / n_pub)
        assert (proxy.eta_step == pytest.approx(TARGET.eta_step, rel=1e-12)) == (n_pub == 16_000)  # η_step: at N only


def test_private_tuning_keeps_the_config():
    cfg = load_config(None, ["tuning.data=private"])
    t = tuning.resolve(cfg, TARGET, load=lambda c: pytest.fail("private tuning loads nothing more"))
    assert t.proxy_cfg is cfg and t.to_dict()["tuning_data"] == "private"


@pytest.mark.parametrize("overrides, words", [
    (['tuning.path="/nope.npz"'], "tuning.path"),
    (['tuning.path="/tmp"'], "not a memmap folder"),  # a folder is now read as a memmap public set
    (["data.dataset=cifar10"], "needs tuning.path"),
])
def test_unusable_tuning_data_is_refused_before_any_load(overrides, words):
    with pytest.raises(UsageError, match=words):
        tuning.check(load_config(None, overrides))


def test_the_private_file_itself_is_no_public_set(tmp_path):
    path = tmp_path / "data.npz"
    np.savez(path, x_train=np.zeros((2, 4)), y_train=[0, 1], x_test=np.zeros((2, 4)), y_test=[0, 1])
    cfg = load_config(None, ["data.dataset=npz", f'data.path="{path}"', f'tuning.path="{tmp_path}/../{tmp_path.name}/data.npz"'])
    with pytest.raises(UsageError, match="is the private data file"):
        tuning.check(cfg)


@pytest.mark.parametrize("public, words", [
    (_Data(input_shape=(8, 1)), "shape"),
    (_Data(num_classes=3), "3 classes"),
])
def test_a_public_set_of_another_task_is_refused(public, words):
    with pytest.raises(UsageError, match=words):
        tuning.resolve(load_config(None), TARGET, private=_Data(), load=lambda c: public)


def test_a_public_set_sharing_private_examples_is_refused():
    private = _Data()
    for shared in (private.x_train[3:5], private.x_test[:1]):  # rows of the training and of the test set
        public = _Data(num_train=16_001, x_train=np.concatenate([_Data(num_train=7).x_train, shared]))
        with pytest.raises(UsageError, match="it holds examples of the private training or test set") as caught:
            tuning.resolve(load_config(None), TARGET, private=private, load=lambda c: public)
        assert f"{len(shared)} of its" not in str(caught.value)  # how many private rows match is private: not said
    tuning.resolve(load_config(None), TARGET, private=private, load=lambda c: _Data(num_train=17_000))


@pytest.mark.parametrize("rows", [slice(0, 20), slice(3, 4)])
def test_a_near_duplicate_public_set_is_refused(rows):
    """The private rows × 1.0000001 + 1e-6 (all of them, or one) are not bit-identical but are the same
    examples; rows moved by 2e-2 of the data's scale, alternately up and down, are other examples (moved
    alike they are a shifted copy: the near-copy rule standardises each row)."""
    private = _Data()
    near = private.x_train[rows] * 1.0000001 + 1e-6
    assert not (np.asarray(near, np.float32) == np.asarray(private.x_train[rows], np.float32)).all(axis=(1, 2)).any()
    public = _Data(num_train=16_001, x_train=np.concatenate([_Data(num_train=7).x_train, near]))
    with pytest.raises(UsageError, match="it holds examples of the private training or test set"):
        tuning.resolve(load_config(None), TARGET, private=private, load=lambda c: public)
    scale = float(np.sqrt(np.mean(private.x_test ** 2)))
    signs = np.where(np.arange(private.x_train[0].size) % 2, 1.0, -1.0).reshape(private.x_train.shape[1:])
    apart = _Data(num_train=16_002, x_train=private.x_train + 20 * tuning.NEAR * scale * signs)
    tuning.resolve(load_config(None), TARGET, private=private, load=lambda c: apart)


def test_a_public_set_smaller_than_the_target_batch_is_refused():
    with pytest.raises(UsageError, match="fewer than train.batch_size"):
        tuning.resolve(load_config(None), TARGET, load=lambda c: _Data(num_train=1000))


def test_the_public_mnist1d_draw_shares_no_example_with_the_private_one():
    from tanplan.engine.setup import load_data

    cfg = load_config(None, ["data.num_samples=2000", "train.batch_size=256"])
    private = load_data(cfg.data)
    t = tuning.resolve(cfg, Plan(1600, 256, 10, 2.0, 1600 ** -1.1), private=private)  # checks every row
    assert t.proxy_cfg.data.seed == cfg.data.seed + 1
