"""Augmentations: shape and dtype kept, determinism per key, the geometry of each family, bad names.

Each family is compiled once (jit of vmap over a few keys); inputs come from numpy, since jax.random
would compile a sampler per shape.
"""

from __future__ import annotations

import functools
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tanplan.data import available_augmentations, make_augmentation
from tanplan.data import augment as aug
from tanplan.errors import UsageError

N_KEYS = 6
IMAGE = (8, 8, 3)
SIGNAL = (40, 1)
MEAN, STD = (0.5, 0.4, 0.3), (0.25, 0.2, 0.3)


def _pixels(shape, seed=0):
    return np.random.default_rng(seed).uniform(0.0, 1.0, shape).astype(np.float32)


@functools.lru_cache(maxsize=None)
def _views(family, kind):
    """Views of one example under N_KEYS keys, twice with the same keys, once with other keys."""
    x = _pixels(IMAGE if kind == "image" else SIGNAL)
    if kind == "image":
        x = (x - np.asarray(MEAN, np.float32)) / np.asarray(STD, np.float32)
        fn = make_augmentation(family, kind, mean=MEAN, std=STD)
    else:
        fn = make_augmentation(family, kind)
    many = jax.jit(jax.vmap(fn, in_axes=(0, None)))
    keys = jax.random.split(jax.random.key(0), N_KEYS)
    other = jax.random.split(jax.random.key(1), N_KEYS)
    return x, np.asarray(many(keys, x)), np.asarray(many(keys, x)), np.asarray(many(other, x))


FAMILIES = [(f, "image") for f in aug.IMAGE_FAMILIES] + [(f, "1d") for f in aug.SIGNAL_FAMILIES]


@pytest.mark.parametrize("family,kind", FAMILIES)
def test_shape_dtype_and_determinism_per_key(family, kind):
    x, views, same, other = _views(family, kind)
    assert views.shape == (N_KEYS, *x.shape) and views.dtype == np.float32
    assert np.isfinite(views).all()
    np.testing.assert_array_equal(views, same)  # same key, same view
    if family == "none":
        np.testing.assert_array_equal(views, np.broadcast_to(x, views.shape))
    else:
        assert not np.array_equal(views, other)  # other keys, other views
        assert len({v.tobytes() for v in views}) > 1  # the keys of one batch differ too


def test_crop_flip_is_a_window_of_the_reflect_padded_image():
    x, views, _, _ = _views("crop_flip", "image")
    pad = aug.crop_padding(IMAGE[0])
    padded = np.pad(x, ((pad, pad), (pad, pad), (0, 0)), mode="reflect")
    windows = [padded[i:i + IMAGE[0], j:j + IMAGE[1]] for i in range(2 * pad + 1) for j in range(2 * pad + 1)]
    for v in views:
        assert any(np.array_equal(v, w) or np.array_equal(v, w[:, ::-1]) for w in windows)


def test_rrc_of_the_whole_image_is_the_identity():
    x = _pixels(IMAGE)
    whole = jax.jit(partial(aug.random_resized_crop, area=(1.0, 1.0), ratio=(1.0, 1.0)))
    y = whole(jax.random.key(3), x)
    np.testing.assert_allclose(np.asarray(y), x, atol=1e-5)


def test_simclr_stays_in_pixel_range():
    """Colour jitter clips to [0, 1] in pixel space; blur and resampling are convex combinations."""
    _, views, _, _ = _views("simclr", "image")
    pixels = views * np.asarray(STD) + np.asarray(MEAN)
    assert pixels.min() >= -1e-5 and pixels.max() <= 1 + 1e-5


def test_hue_and_saturation_leave_grey_pixels_alone():
    grey = np.repeat(_pixels((4, 4, 1)), 3, axis=-1)
    np.testing.assert_allclose(np.asarray(aug._rotate_hue(jnp.asarray(grey), 0.7)), grey, atol=1e-5)
    np.testing.assert_allclose(np.asarray(aug.greyscale(jnp.asarray(grey))), grey, atol=1e-6)
    colour = _pixels((4, 4, 3), seed=1)
    np.testing.assert_allclose(np.asarray(aug._rotate_hue(jnp.asarray(colour), 0.0)), colour, atol=1e-5)


def test_shift_is_a_bounded_circular_roll():
    x, views, _, _ = _views("shift", "1d")
    for v in views:
        assert any(np.array_equal(v, np.roll(x, s, axis=0)) for s in range(-aug.MAX_SHIFT, aug.MAX_SHIFT + 1))


def test_scale_multiplies_by_a_factor_in_range():
    x, views, _, _ = _views("scale", "1d")
    factors = (views * x).sum(axis=(1, 2)) / (x * x).sum()
    np.testing.assert_allclose(views, factors[:, None, None] * x, rtol=1e-5)
    assert (aug.SCALE_RANGE[0] <= factors).all() and (factors <= aug.SCALE_RANGE[1]).all()


def test_augmentations_of_single_channel_images():
    fn = jax.jit(make_augmentation("simclr", "image"))
    x = _pixels((8, 8, 1))
    assert fn(jax.random.key(0), x).shape == x.shape


@pytest.mark.parametrize("family,kind,words", [
    ("cutout", "image", ["cutout", "crop_flip", "rrc", "simclr"]),
    ("shift", "image", ["shift", "crop_flip"]),
    ("crop_flip", "1d", ["crop_flip", "shift_scale_noise"]),
    ("none", "video", ["video", "image", "1d"]),
])
def test_unknown_family_or_kind(family, kind, words):
    with pytest.raises(UsageError) as err:
        make_augmentation(family, kind)
    for word in words:
        assert word in str(err.value)


def test_listing_and_rank_check():
    assert set(available_augmentations()) == set(aug.IMAGE_FAMILIES) | set(aug.SIGNAL_FAMILIES)
    assert available_augmentations("1d") == aug.SIGNAL_FAMILIES
    with pytest.raises(UsageError, match="vmap it over the batch"):
        make_augmentation("crop_flip", "image")(jax.random.key(0), np.zeros((2, *IMAGE), np.float32))
