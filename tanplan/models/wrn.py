"""Wide ResNet (Zagoruyko & Komodakis 2016) with GroupNorm, as in the TAN code (models/wideresnet.py).

Pre-activation blocks; `norm_order` sets the order of GroupNorm and ReLU before each convolution, which
the TAN paper (section 4.4, figure 5) compares: "conv_gn_relu" (conv, GN, ReLU, conv: the classic
order) and "conv_relu_gn" (conv, ReLU, GN, conv: the reverse order, better and more robust with
DP-SGD and the only one that gains from augmentation). WRN-16-4 is depth 16, widen factor 4: three
groups of two blocks, 16k·{1, 2, 4} channels, about 2.75M parameters for 10 classes.
"""

from __future__ import annotations

import flax.linen as nn

from tanplan.models.layers import NormAct, expect_rank


class WRNBlock(nn.Module):
    features: int
    stride: int
    norm_order: str

    @nn.compact
    def __call__(self, x):
        pre = NormAct(self.norm_order)(x)
        if x.shape[-1] != self.features or self.stride != 1:
            # The TAN code normalises the shortcut's input with a GroupNorm of its own.
            skip = nn.Conv(self.features, (1, 1), strides=self.stride)(NormAct(self.norm_order)(x))
        else:
            skip = x
        out = nn.Conv(self.features, (3, 3), strides=self.stride, padding="SAME")(pre)
        out = nn.Conv(self.features, (3, 3), padding="SAME")(NormAct(self.norm_order)(out))
        return skip + out


class WideResNet(nn.Module):
    num_classes: int
    depth: int = 16
    widen: int = 4
    norm_order: str = "conv_gn_relu"

    @nn.compact
    def __call__(self, x):
        expect_rank(x, 4, "wrn16_4", "(batch, height, width, channels)")
        blocks = (self.depth - 4) // 6
        x = nn.Conv(16, (3, 3), padding="SAME")(x)
        for group, stride in enumerate((1, 2, 2)):
            for b in range(blocks):
                x = WRNBlock(16 * self.widen * 2 ** group, stride if b == 0 else 1, self.norm_order)(x)
        x = NormAct(self.norm_order)(x)
        x = x.mean(axis=(1, 2))
        return nn.Dense(self.num_classes)(x)
