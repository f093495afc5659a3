"""check_per_example remembers a linen module's pass for the process (a stage checks its model before loading data
and again when it builds the run), keyed by the module itself: an equal module of the same class is not checked
again, another class with the same fields is, and a refusal is never remembered."""

import flax.linen as nn
import jax.numpy as jnp
import pytest

from tanplan.errors import UsageError
from tanplan.models import plugins


class PerRow(nn.Module):
    num_classes: int

    @nn.compact
    def __call__(self, x):
        return nn.Dense(self.num_classes)(x.reshape(x.shape[0], -1))


class Centred(nn.Module):  # the same field as PerRow; each output reads the batch mean
    num_classes: int

    @nn.compact
    def __call__(self, x):
        x = x.reshape(x.shape[0], -1)
        return nn.Dense(self.num_classes)(x - jnp.mean(x, axis=0, keepdims=True))


class Listed(nn.Module):  # a list field: the module cannot be hashed, so it is checked every time
    sizes: list

    @nn.compact
    def __call__(self, x):
        return nn.Dense(self.sizes[-1])(x.reshape(x.shape[0], -1))


@pytest.fixture
def checked(monkeypatch):
    monkeypatch.setattr(plugins, "_PASSED", set())
    calls = []
    real = plugins._check_per_example

    def counted(module, *args):
        calls.append(type(module).__name__)
        return real(module, *args)

    monkeypatch.setattr(plugins, "_check_per_example", counted)
    return calls


def test_a_pass_is_remembered_for_an_equal_module_and_nothing_else(checked):
    plugins.check_per_example(PerRow(3), (5,), "m:PerRow", num_classes=3)
    plugins.check_per_example(PerRow(3), (5,), "m:PerRow", num_classes=3)  # another, equal instance
    assert checked == ["PerRow"]
    plugins.check_per_example(PerRow(3), (6,), "m:PerRow", num_classes=3)  # another input shape
    plugins.check_per_example(PerRow(3), (5,), "m:PerRow", seed=1, num_classes=3)  # another probe
    assert checked == ["PerRow"] * 3
    with pytest.raises(UsageError, match=r"outputs of shape \(4,\) per example"):
        plugins.check_per_example(PerRow(4), (5,), "m:PerRow", num_classes=3)  # 4 logits for 3 classes
    assert len(checked) == 4


def test_a_refusal_is_never_remembered_and_another_class_is_checked(checked):
    plugins.check_per_example(PerRow(3), (5,), "m:x", num_classes=3)
    for _ in range(2):  # equal fields, another class: checked, and refused each time
        with pytest.raises(UsageError, match="other examples of its batch change"):
            plugins.check_per_example(Centred(3), (5,), "m:x", num_classes=3)
    assert checked == ["PerRow", "Centred", "Centred"]


class PureRows:  # not a linen module (as an nnx model's wrapper is not): init/apply only, checked every time
    def init(self, key, x):
        return {"params": {"w": jnp.ones((x.shape[1], 3))}}

    def apply(self, variables, x):
        return x @ variables["params"]["w"]


def test_a_module_that_cannot_be_hashed_or_is_not_linen_is_checked_every_time(checked):
    for _ in range(2):
        plugins.check_per_example(Listed([4, 3]), (5,), "m:Listed", num_classes=3)
        plugins.check_per_example(PureRows(), (5,), "m:PureRows", num_classes=3)
    assert checked == ["Listed", "PureRows"] * 2
