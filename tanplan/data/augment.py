"""Data augmentations: pure JAX functions of (key, one example), so they jit and vmap.

`make_augmentation(family, data_kind)` returns `augment(key, x) -> x'` with x' of x's shape and dtype.
The same key gives the same output; the trainer draws one key per (example, augmentation), which is
what AugMult needs (K views of an example, gradients averaged before clipping) and what AugTest reuses
at test time. An augmentation sees one example only, so it cannot leak one example into another's
gradient.

Image families (TAN paper, appendix C, and the facebookresearch/tan code), on (height, width, channels):
- crop_flip: random crop after reflect padding (4 px up to 64 px images, as De et al. 2022 on CIFAR-10;
  20 px per 224 px above, as the paper's "Ours"), then a horizontal flip with probability 1/2;
- rrc: random resized crop, area in [8%, 100%] of the image, aspect ratio in [3/4, 4/3], resized back
  with bilinear interpolation;
- simclr: rrc, horizontal flip, colour jitter (brightness, contrast, saturation 0.4, hue 0.1; applied
  with probability 0.8), greyscale (p = 0.2), Gaussian blur (sigma in [0.1, 2], p = 0.5).
1D families (mnist1d), on (length, channels):
- shift: circular shift by up to 4 steps either way (mnist1d itself translates circularly);
- scale: amplitude times a factor in [0.8, 1.2] (the generator's own scale range);
- noise: additive Gaussian noise of std 0.1 (the data have unit std);
- shift_scale_noise: the three in turn.
"none" is the identity for both kinds.
"""

from __future__ import annotations

import math
from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np

from tanplan.errors import UsageError

Augment = Callable[[jax.Array, jax.Array], jax.Array]

IMAGE_FAMILIES = ("none", "crop_flip", "rrc", "simclr")
SIGNAL_FAMILIES = ("none", "shift", "scale", "noise", "shift_scale_noise")
DATA_KINDS = {"image": IMAGE_FAMILIES, "1d": SIGNAL_FAMILIES, "flat": ("none",)}  # flat: feature rows (d,)

MAX_SHIFT = 4
SCALE_RANGE = (0.8, 1.2)
NOISE_STD = 0.1
RRC_AREA = (0.08, 1.0)
RRC_RATIO = (3 / 4, 4 / 3)
JITTER = {"brightness": 0.4, "contrast": 0.4, "saturation": 0.4, "hue": 0.1, "p": 0.8}
GREYSCALE_P = 0.2
BLUR_P = 0.5
BLUR_SIGMA = (0.1, 2.0)
LUMA = (0.299, 0.587, 0.114)  # ITU-R 601, as torchvision's rgb_to_grayscale


def available_augmentations(data_kind: str | None = None) -> tuple[str, ...]:
    if data_kind is None:
        return tuple(dict.fromkeys(IMAGE_FAMILIES + SIGNAL_FAMILIES))
    _check_kind(data_kind)
    return DATA_KINDS[data_kind]


def make_augmentation(family: str, data_kind: str, *, mean=None, std=None) -> Augment:
    """The augmentation `family` for examples of `data_kind` ("image" or "1d").

    mean/std: the per-channel constants the images were normalised with (Dataset.mean, Dataset.std).
    Given, colour jitter runs in pixel space and clips to [0, 1] as torchvision does; omitted, it runs
    on the values as they are, without clipping. Geometric families do not need them.
    """
    _check_kind(data_kind)
    if family not in DATA_KINDS[data_kind]:
        raise UsageError(f"unknown augmentation {family!r} for {data_kind} data; valid: "
                         f"{', '.join(DATA_KINDS[data_kind])}")
    rank = 3 if data_kind == "image" else 2
    if family == "none":
        fn = _identity
    elif data_kind == "1d":
        fn = {"shift": random_shift, "scale": random_scale, "noise": random_noise,
              "shift_scale_noise": _shift_scale_noise}[family]
    elif family == "crop_flip":
        fn = _crop_flip
    elif family == "rrc":
        fn = random_resized_crop
    else:
        fn = _make_simclr(mean, std)

    def augment(key: jax.Array, x: jax.Array) -> jax.Array:
        if x.ndim != rank:
            raise UsageError(f"augmentation {family!r} takes one {data_kind} example of rank {rank}; got "
                             f"shape {x.shape} (vmap it over the batch)")
        return fn(key, x).astype(x.dtype)

    augment.__name__ = f"augment_{family}"
    return augment


def _check_kind(data_kind: str) -> None:
    if data_kind not in DATA_KINDS:
        raise UsageError(f"unknown data kind {data_kind!r}; valid: {', '.join(DATA_KINDS)}")


def _identity(key, x):
    del key
    return x


# ---------------------------------------------------------------- 1D signals (length, channels)


def random_shift(key, x, max_shift: int = MAX_SHIFT):
    shift = jax.random.randint(key, (), -max_shift, max_shift + 1)
    return jnp.roll(x, shift, axis=0)


def random_scale(key, x, low: float = SCALE_RANGE[0], high: float = SCALE_RANGE[1]):
    return x * jax.random.uniform(key, (), minval=low, maxval=high)


def random_noise(key, x, std: float = NOISE_STD):
    return x + std * jax.random.normal(key, x.shape, x.dtype)


def _shift_scale_noise(key, x):
    k1, k2, k3 = jax.random.split(key, 3)
    return random_noise(k3, random_scale(k2, random_shift(k1, x)))


# ---------------------------------------------------------------- images (height, width, channels)


def crop_padding(size: int) -> int:
    """Reflect padding for crop_flip: 4 px for CIFAR-sized images, 20 px per 224 px above 64 px."""
    return 4 if size <= 64 else max(1, round(size * 20 / 224))


def random_crop(key, x, pad: int):
    """Crop back to the original size at a uniform offset from the image reflect-padded by `pad`."""
    h, w, c = x.shape
    pad = min(pad, h - 1, w - 1)  # reflect padding must stay inside the image
    padded = jnp.pad(x, ((pad, pad), (pad, pad), (0, 0)), mode="reflect")
    ky, kx = jax.random.split(key)
    y0 = jax.random.randint(ky, (), 0, 2 * pad + 1)
    x0 = jax.random.randint(kx, (), 0, 2 * pad + 1)
    return jax.lax.dynamic_slice(padded, (y0, x0, 0), (h, w, c))


def random_flip(key, x, p: float = 0.5):
    return jnp.where(jax.random.uniform(key) < p, x[:, ::-1, :], x)


def _crop_flip(key, x):
    k1, k2 = jax.random.split(key)
    return random_flip(k2, random_crop(k1, x, crop_padding(min(x.shape[0], x.shape[1]))))


def random_resized_crop(key, x, area=RRC_AREA, ratio=RRC_RATIO):
    """A box of random area and aspect ratio, resized to the full image with bilinear interpolation.

    torchvision rejects boxes that do not fit and retries; here the box is clipped to the image, which
    keeps one shape-static program (slightly favours larger crops at extreme aspect ratios).
    """
    h, w, _ = x.shape
    ka, kr, ky, kx = jax.random.split(key, 4)
    target = h * w * jax.random.uniform(ka, (), minval=area[0], maxval=area[1])
    aspect = jnp.exp(jax.random.uniform(kr, (), minval=math.log(ratio[0]), maxval=math.log(ratio[1])))
    cw = jnp.clip(jnp.sqrt(target * aspect), 1.0, w)
    ch = jnp.clip(jnp.sqrt(target / aspect), 1.0, h)
    y0 = jax.random.uniform(ky, ()) * (h - ch)
    x0 = jax.random.uniform(kx, ()) * (w - cw)
    scale = jnp.stack([h / ch, w / cw])
    translation = -jnp.stack([y0, x0]) * scale  # output = input * scale + translation
    return jax.image.scale_and_translate(x, x.shape, (0, 1), scale, translation, method="linear",
                                         antialias=False)


def _make_simclr(mean, std) -> Augment:
    if (mean is None) != (std is None):
        raise UsageError("simclr augmentation: give both mean and std (the dataset's normalisation), or neither")
    to_pixels, from_pixels, clip = _pixel_space(mean, std)

    def simclr(key, x):
        k_rrc, k_flip, k_jit, k_grey, k_blur = jax.random.split(key, 5)
        x = random_flip(k_flip, random_resized_crop(k_rrc, x))
        p = to_pixels(x)
        p = _maybe(k_jit, JITTER["p"], lambda k, v: colour_jitter(k, v, clip), p)
        if p.shape[-1] == 3:
            p = _maybe(k_grey, GREYSCALE_P, lambda k, v: greyscale(v), p)
        p = _maybe(k_blur, BLUR_P, gaussian_blur, p)
        return from_pixels(p)

    return simclr


def _pixel_space(mean, std):
    if mean is None:
        return (lambda x: x), (lambda p: p), (lambda p: p)
    m, s = jnp.asarray(mean, jnp.float32), jnp.asarray(std, jnp.float32)
    return (lambda x: x * s + m), (lambda p: (p - m) / s), (lambda p: jnp.clip(p, 0.0, 1.0))


def _maybe(key, prob, fn, x):
    """fn(x) with probability prob, else x (both are computed: branch-free, vmap friendly)."""
    k_coin, k_fn = jax.random.split(key)
    return jnp.where(jax.random.uniform(k_coin) < prob, fn(k_fn, x), x)


def greyscale(p):
    grey = jnp.tensordot(p, jnp.asarray(LUMA, p.dtype), axes=([-1], [0]))[..., None]
    return jnp.broadcast_to(grey, p.shape)


def colour_jitter(key, p, clip=lambda v: v):
    """Brightness, contrast, saturation, hue in a fixed order (torchvision draws a random order)."""
    kb, kc, ks, kh = jax.random.split(key, 4)
    factor = lambda k, a: jax.random.uniform(k, (), minval=1.0 - a, maxval=1.0 + a)  # noqa: E731
    p = clip(p * factor(kb, JITTER["brightness"]))
    lum = greyscale(p) if p.shape[-1] == 3 else p
    c = factor(kc, JITTER["contrast"])
    p = clip(c * p + (1.0 - c) * jnp.mean(lum))
    if p.shape[-1] == 3:  # saturation and hue mean nothing for one channel
        s = factor(ks, JITTER["saturation"])
        p = clip(s * p + (1.0 - s) * greyscale(p))
        angle = 2.0 * jnp.pi * jax.random.uniform(kh, (), minval=-JITTER["hue"], maxval=JITTER["hue"])
        p = clip(_rotate_hue(p, angle))
    return p


# RGB <-> YIQ: a hue shift is a rotation of the (I, Q) chroma plane, which keeps luma.
_RGB_TO_YIQ = np.array([[0.299, 0.587, 0.114], [0.596, -0.274, -0.322], [0.211, -0.523, 0.312]])
_YIQ_TO_RGB = np.linalg.inv(_RGB_TO_YIQ)


def _rotate_hue(p, angle):
    cos, sin = jnp.cos(angle), jnp.sin(angle)
    rot = jnp.array([[1.0, 0.0, 0.0], [0.0, cos, -sin], [0.0, sin, cos]], p.dtype)
    m = jnp.asarray(_YIQ_TO_RGB, p.dtype) @ rot @ jnp.asarray(_RGB_TO_YIQ, p.dtype)
    return p @ m.T


def gaussian_blur(key, p, sigma=BLUR_SIGMA):
    """Separable Gaussian blur, kernel about 10% of the image side (odd, >= 3), reflect borders."""
    h, w, _ = p.shape
    size = max(3, (int(0.1 * min(h, w)) // 2) * 2 + 1)
    half = size // 2
    s = jax.random.uniform(key, (), minval=sigma[0], maxval=sigma[1])
    t = jnp.arange(-half, half + 1, dtype=p.dtype)
    kernel = jnp.exp(-0.5 * (t / s) ** 2)
    kernel = kernel / kernel.sum()
    half_h, half_w = min(half, h - 1), min(half, w - 1)
    padded = jnp.pad(p, ((half_h, half_h), (half_w, half_w), (0, 0)), mode="reflect")
    # Kernel taps beyond what a tiny image can reflect are dropped and the rest renormalised.
    ky = kernel[half - half_h: half + half_h + 1]
    kx = kernel[half - half_w: half + half_w + 1]
    rows = sum(ky[i] * padded[i: i + h] for i in range(2 * half_h + 1)) / ky.sum()
    return sum(kx[j] * rows[:, j: j + w] for j in range(2 * half_w + 1)) / kx.sum()
