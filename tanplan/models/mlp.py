"""A multilayer perceptron on the flattened input (any shape): mnist1d's simplest baseline."""

from __future__ import annotations

import flax.linen as nn


class MLP(nn.Module):
    num_classes: int
    width: int = 128
    depth: int = 2  # hidden layers

    @nn.compact
    def __call__(self, x):
        x = x.reshape(x.shape[0], -1)
        for _ in range(self.depth):
            x = nn.relu(nn.Dense(self.width)(x))
        return nn.Dense(self.num_classes)(x)
