"""Normaliser-free ResNet (Brock et al. 2021a), the TAN paper's best ImageNet model (NF-ResNet-50).

No normalisation layer at all: every convolution uses scaled weight standardisation (WSConv) and the
residual stream's variance is tracked analytically. A block computes
    h = scaled_relu(x) / sqrt(expected_var);   x + alpha * gain * f(h)
with the shortcut taken from h (avg-pool + 1x1 WSConv) when the shape changes, alpha = 0.2,
expected_var growing by alpha^2 per block and reset to 1 + alpha^2 after each stage's first block.
The branch gain starts at 1, as in the TAN code. depth 10, 18 or 34 (basic blocks), 26, 50 or 101
(bottleneck blocks, stage output 4x `width`); default 50 with width 64 (about 23.5M parameters).
"""

from __future__ import annotations

import flax.linen as nn

from tanplan.models.layers import WSConv, expect_rank, scaled_relu
from tanplan.models.resnet import stem

ALPHA = 0.2
STAGES = {10: (1, 1, 1, 1), 18: (2, 2, 2, 2), 34: (3, 4, 6, 3), 26: (2, 2, 2, 2), 50: (3, 4, 6, 3),
          101: (3, 4, 23, 3)}
BOTTLENECK = {10: False, 18: False, 34: False, 26: True, 50: True, 101: True}


class NFBlock(nn.Module):
    features: int
    stride: int
    beta: float
    bottleneck: bool

    @nn.compact
    def __call__(self, x):
        h = scaled_relu(x) * self.beta
        shortcut = x
        if x.shape[-1] != self.features or self.stride != 1:
            s = nn.avg_pool(h, (2, 2), strides=(2, 2), padding="SAME") if self.stride > 1 else h
            shortcut = WSConv(self.features, (1, 1))(s)
        if self.bottleneck:
            mid = self.features // 4
            out = WSConv(mid, (1, 1))(h)
            out = WSConv(mid, (3, 3), (self.stride, self.stride))(scaled_relu(out))
            out = WSConv(self.features, (1, 1))(scaled_relu(out))
        else:
            out = WSConv(self.features, (3, 3), (self.stride, self.stride))(h)
            out = WSConv(self.features, (3, 3))(scaled_relu(out))
        gain = self.param("skip_gain", nn.initializers.ones, ())
        return shortcut + ALPHA * gain * out


class NFResNet(nn.Module):
    num_classes: int
    depth: int = 50
    width: int = 64

    @nn.compact
    def __call__(self, x):
        expect_rank(x, 4, "nf_resnet", "(batch, height, width, channels)")
        x, pool = stem(x, self.width, lambda f, k, s: WSConv(f, k, s))
        if pool:
            x = nn.max_pool(x, (3, 3), strides=(2, 2), padding="SAME")
        expansion = 4 if BOTTLENECK[self.depth] else 1
        expected_var = 1.0
        for stage, blocks in enumerate(STAGES[self.depth]):
            for b in range(blocks):
                x = NFBlock(self.width * 2 ** stage * expansion, 2 if stage > 0 and b == 0 else 1,
                            beta=expected_var ** -0.5, bottleneck=BOTTLENECK[self.depth])(x)
                expected_var = (1.0 if b == 0 else expected_var) + ALPHA ** 2
        x = scaled_relu(x).mean(axis=(1, 2))
        return nn.Dense(self.num_classes, kernel_init=nn.initializers.normal(0.01))(x)
