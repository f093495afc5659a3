"""ResNet-18 (He et al. 2016) with GroupNorm in place of BatchNorm (Kurakin et al. 2022; TAN paper).

Post-activation basic blocks: conv, GN, ReLU, conv, GN, add the shortcut (1x1 conv + GN when the shape
changes), ReLU. Images up to 64 px get a 3x3 stride-1 stem without max-pool (the CIFAR variant),
larger ones the 7x7 stride-2 stem and max-pool (the ImageNet one). depth 10, 18 or 34; `width` is the
first stage's channel count (64: about 11.2M parameters).
"""

from __future__ import annotations

import flax.linen as nn

from tanplan.models.layers import expect_rank, group_norm

STAGES = {10: (1, 1, 1, 1), 18: (2, 2, 2, 2), 34: (3, 4, 6, 3)}


class BasicBlock(nn.Module):
    features: int
    stride: int

    @nn.compact
    def __call__(self, x):
        out = nn.Conv(self.features, (3, 3), strides=self.stride, padding="SAME", use_bias=False)(x)
        out = nn.relu(group_norm(self.features)(out))
        out = nn.Conv(self.features, (3, 3), padding="SAME", use_bias=False)(out)
        out = group_norm(self.features)(out)
        if x.shape[-1] != self.features or self.stride != 1:
            x = nn.Conv(self.features, (1, 1), strides=self.stride, use_bias=False)(x)
            x = group_norm(self.features)(x)
        return nn.relu(out + x)


def stem(x, width: int, conv):
    """CIFAR-style stem for images up to 64 px, ImageNet-style (7x7/2 conv, 3x3/2 max-pool) above."""
    if min(x.shape[1], x.shape[2]) <= 64:
        return conv(width, (3, 3), (1, 1))(x), False
    return conv(width, (7, 7), (2, 2))(x), True


class ResNetGN(nn.Module):
    num_classes: int
    depth: int = 18
    width: int = 64

    @nn.compact
    def __call__(self, x):
        expect_rank(x, 4, "resnet18_gn", "(batch, height, width, channels)")
        x, pool = stem(x, self.width,
                       lambda f, k, s: nn.Conv(f, k, strides=s, padding="SAME", use_bias=False))
        x = nn.relu(group_norm(self.width)(x))
        if pool:
            x = nn.max_pool(x, (3, 3), strides=(2, 2), padding="SAME")
        for stage, blocks in enumerate(STAGES[self.depth]):
            for b in range(blocks):
                x = BasicBlock(self.width * 2 ** stage, 2 if stage > 0 and b == 0 else 1)(x)
        x = x.mean(axis=(1, 2))
        return nn.Dense(self.num_classes)(x)
