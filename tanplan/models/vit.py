"""A small Vision Transformer (Dosovitskiy et al. 2020), ViT-Tiny sized by default: embedding width
192, 12 pre-LayerNorm blocks, 3 heads of 64, MLP 4x, class token, learnt position embeddings (about
5.4M parameters). Patches are 16 px for images of 128 px and more, 4 px from 16 px (CIFAR-10: 8x8
tokens), else 2 px; pixels beyond a whole number of patches are dropped. LayerNorm normalises each
token of each example on its own.
"""

from __future__ import annotations

import flax.linen as nn
import jax.numpy as jnp

from tanplan.models.layers import expect_rank

HEAD_DIM = 64


def patch_size(size: int) -> int:
    return 16 if size >= 128 else 4 if size >= 16 else 2


def num_heads(width: int) -> int:
    return max(1, width // HEAD_DIM)


class ClassToken(nn.Module):
    """Prepends a learnt token to each example's sequence. A layer of its own (not a parameter of the ViT
    itself), so that the per-layer clipping route (tanplan.dp.ghost) sees its input and output gradient."""

    @nn.compact
    def __call__(self, x):
        token = self.param("token", nn.initializers.zeros, (1, 1, x.shape[-1]))
        return jnp.concatenate([jnp.broadcast_to(token, (x.shape[0], 1, x.shape[-1])).astype(x.dtype), x], axis=1)


class PositionEmbedding(nn.Module):
    """Adds a learnt embedding to each position (a layer of its own, like ClassToken)."""

    @nn.compact
    def __call__(self, x):
        return x + self.param("embedding", nn.initializers.normal(0.02), (1,) + x.shape[1:])


class EncoderBlock(nn.Module):
    width: int
    heads: int

    @nn.compact
    def __call__(self, x):
        y = nn.LayerNorm()(x)
        x = x + nn.MultiHeadDotProductAttention(num_heads=self.heads, deterministic=True)(y)
        y = nn.LayerNorm()(x)
        y = nn.Dense(4 * self.width)(y)
        return x + nn.Dense(self.width)(nn.gelu(y))


class ViT(nn.Module):
    num_classes: int
    width: int = 192
    depth: int = 12

    @nn.compact
    def __call__(self, x):
        expect_rank(x, 4, "vit_tiny", "(batch, height, width, channels)")
        p = patch_size(min(x.shape[1], x.shape[2]))
        x = nn.Conv(self.width, (p, p), strides=(p, p), padding="VALID", name="patch_embed")(x)
        n = x.shape[0]
        x = x.reshape(n, -1, self.width)
        x = ClassToken(name="cls_token")(x)
        x = PositionEmbedding(name="pos_embed")(x)
        for _ in range(self.depth):
            x = EncoderBlock(self.width, num_heads(self.width))(x)
        x = nn.LayerNorm()(x[:, 0])
        return nn.Dense(self.num_classes)(x)
