"""Building blocks shared by the models. All of them act on each example on its own: GroupNorm and
LayerNorm normalise within an example, weight standardisation normalises the weights, never the batch.
"""

from __future__ import annotations

import math
from typing import Any, Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp

from tanplan.errors import UsageError

NORM_ORDERS = ("conv_gn_relu", "conv_relu_gn")
GN_GROUPS = 16  # De et al. (2022) and the TAN code use 16 groups


def gn_groups(channels: int, preferred: int = GN_GROUPS) -> int:
    """The largest divisor of `channels` not above `preferred` (narrow test models keep working)."""
    return next(g for g in range(min(preferred, channels), 0, -1) if channels % g == 0)


def group_norm(channels: int, name: str | None = None) -> nn.GroupNorm:
    return nn.GroupNorm(num_groups=gn_groups(channels), epsilon=1e-5, name=name)


class NormAct(nn.Module):
    """GroupNorm then ReLU ("conv_gn_relu", the usual order) or ReLU then GroupNorm ("conv_relu_gn",
    the reverse order that the TAN paper, section 4.4, finds better with DP-SGD)."""

    order: str = "conv_gn_relu"

    @nn.compact
    def __call__(self, x):
        norm = group_norm(x.shape[-1])
        return nn.relu(norm(x)) if self.order == "conv_gn_relu" else norm(nn.relu(x))


def expect_rank(x, rank: int, model: str, layout: str) -> None:
    if x.ndim != rank:
        raise UsageError(f"model {model} expects inputs {layout}; got shape {tuple(x.shape)}")


# --------------------------------------------------------------------------- NF-ResNet pieces

# ReLU scaled so that a unit-variance Gaussian input gives a unit second moment (Brock et al. 2021a).
RELU_GAIN = math.sqrt(2.0 / (1.0 - 1.0 / math.pi))


def scaled_relu(x):
    return nn.relu(x) * RELU_GAIN


def standardize(kernel, gain, eps):
    """WSConv's effective kernel: each output channel's fan-in standardised, times its gain (also used by
    the per-layer clipping route, tanplan.dp.ghost_layers, to chain per-example gradients through it)."""
    fan_in = math.prod(kernel.shape[:-1])
    axes = tuple(range(kernel.ndim - 1))
    mean = jnp.mean(kernel, axis=axes, keepdims=True)
    var = jnp.var(kernel, axis=axes, keepdims=True)
    return (kernel - mean) * jax.lax.rsqrt(var * fan_in + eps) * gain


class WSConv(nn.Module):
    """Convolution with scaled weight standardisation (Brock et al. 2021a; timm's ScaledStdConv2d):
    W' = gain * (W - mean(W)) / sqrt(var(W) * fan_in + eps), statistics over each output channel's
    fan-in. It normalises the weights, not the activations, so it needs no batch statistics."""

    features: int
    kernel_size: Sequence[int] = (3, 3)
    strides: Sequence[int] = (1, 1)
    use_bias: bool = True
    eps: float = 1e-4
    kernel_init: Any = nn.initializers.variance_scaling(1.0, "fan_in", "normal")

    @nn.compact
    def __call__(self, x):
        shape = (*self.kernel_size, x.shape[-1], self.features)
        kernel = self.param("kernel", self.kernel_init, shape)
        gain = self.param("gain", nn.initializers.ones, (self.features,))
        weight = standardize(kernel, gain, self.eps)
        y = jax.lax.conv_general_dilated(
            x, weight.astype(x.dtype), window_strides=tuple(self.strides), padding="SAME",
            dimension_numbers=("NHWC", "HWIO", "NHWC"))
        if self.use_bias:
            y = y + self.param("bias", nn.initializers.zeros, (self.features,))
        return y
