"""Small convolutional networks with GroupNorm: CNN1D for mnist1d, CNN2D for MNIST-sized images."""

from __future__ import annotations

import flax.linen as nn

from tanplan.models.layers import NormAct, expect_rank


class CNN1D(nn.Module):
    """`depth` conv blocks (conv, GroupNorm, ReLU in `norm_order`) on (n, length, channels) signals;
    every second block halves the length and the channels double every two blocks; then global
    average pooling and a linear classifier. Pooling makes it blind to where a pattern sits, which suits
    mnist1d (its digits are translated at random); about 23k parameters at the default size."""

    num_classes: int
    width: int = 32
    depth: int = 4
    norm_order: str = "conv_gn_relu"

    @nn.compact
    def __call__(self, x):
        expect_rank(x, 3, "cnn1d", "(batch, length, channels)")
        for i in range(self.depth):
            x = nn.Conv(self.width * 2 ** (i // 2), kernel_size=(5,) if i == 0 else (3,),
                        strides=(2,) if i % 2 else (1,), padding="SAME")(x)
            x = NormAct(self.norm_order)(x)
        x = x.mean(axis=1)
        return nn.Dense(self.num_classes)(x)


class CNN2D(nn.Module):
    """`depth` stages of (3x3 conv, GroupNorm, ReLU in `norm_order`, 2x2 max-pool), channels doubling
    from `width`; then a hidden dense layer of 128 and the classifier. About 0.42M parameters on 28x28
    inputs at the default size (the dense layer sees the flattened 7x7x64 map)."""

    num_classes: int
    width: int = 32
    depth: int = 2
    norm_order: str = "conv_gn_relu"

    @nn.compact
    def __call__(self, x):
        expect_rank(x, 4, "cnn2d", "(batch, height, width, channels)")
        for i in range(self.depth):
            x = nn.Conv(self.width * 2 ** i, kernel_size=(3, 3), padding="SAME")(x)
            x = NormAct(self.norm_order)(x)
            x = nn.max_pool(x, (2, 2), strides=(2, 2), padding="SAME")
        x = x.reshape(x.shape[0], -1)
        x = nn.relu(nn.Dense(128)(x))
        return nn.Dense(self.num_classes)(x)
