"""kernel_suite.spiral against the formula written here in NumPy (float64), on every device this
machine has."""

import json

import numpy as np
import pytest

import kernel_suite as ks


def _numpy_spiral(width, height, center, symmetry, curve, multiplier, max_radius):
    """The command's formula: x = j − cx, y = cy − i, θ = 180·atan2(x, y)/π + (curve·r/R)·m(r) mod
    360, value ⌊(θ mod w)·256/w⌋ (w = 360/symmetry, at most 255), inverted where sin(θ·symmetry/100)
    < 0.5, 0 beyond R."""
    cx, cy = center
    j, i = np.meshgrid(np.arange(width, dtype=np.float64), np.arange(height, dtype=np.float64))
    x, y = j - cx, cy - i
    r = np.hypot(x, y)
    with np.errstate(divide="ignore"):
        m = [np.where(r > 0, np.log(np.where(r > 0, r, 1)), 0.0), np.sin(r / 100), np.cos(r / 100), np.tan(r / 100)][
            multiplier
        ]
    theta = np.mod(180 * np.arctan2(x, y) / np.pi + curve * r / max_radius * m, 360)
    sector = 360 / symmetry
    value = np.minimum(np.floor(np.mod(theta, sector) * 256 / sector), 255)
    value = np.where(np.sin(theta * symmetry / 100) < 0.5, 255 - value, value)
    return np.where(r > max_radius, 0, value).astype(np.uint8)


@pytest.mark.parametrize("multiplier", [0, 1, 2, 3])
def test_matches_the_formula(device, multiplier):
    width, height = (161, 97) if device == "sim" else (640, 360)
    params = dict(symmetry=5, curve=23.5, multiplier=multiplier, max_radius=0.45 * width)
    image = ks.spiral(width, height, center=(width * 0.4, height * 0.55), device=device, **params)
    want = _numpy_spiral(width, height, (width * 0.4, height * 0.55), **params)
    assert image.shape == (height, width) and image.dtype == np.uint8
    assert np.mean(image == want) >= 0.999, np.mean(image == want)
    assert len(np.unique(image)) > 100


def test_palette_seed_and_config(device):
    size = (120, 80) if device == "sim" else (480, 270)
    palette = ["#000000", "#ff8000", "#ffffff"]
    first = ks.spiral(*size, seed=42, palette=palette, device=device)
    assert first.shape == (size[1], size[0], 3) and first.dtype == np.uint8
    np.testing.assert_array_equal(first, ks.spiral(*size, seed=42, palette=palette, device=device))
    config = json.loads(ks._native._random_spiral_config(42, *size))
    gray = ks.spiral(config=config, device=device)
    np.testing.assert_array_equal(first, ks.spiral(config=dict(config, palette=palette), device=device))
    # One colour per gray level: black at 0, white at 255, about the middle colour at 127.5, linear
    # in between.
    levels = np.arange(256)
    want = np.stack([np.interp(levels, [0, 127.5, 255], [0, 255, 255]),
                     np.interp(levels, [0, 127.5, 255], [0, 128, 255]),
                     np.interp(levels, [0, 127.5, 255], [0, 0, 255])], axis=1)
    assert np.abs(first.astype(float) - want[gray]).max() <= 1.0


@pytest.mark.parametrize(
    "kwargs, error, words",
    [
        (dict(symmetry=3, curve=1.0, multiplier=0), TypeError, "max_radius"),
        (dict(symmetry=0, curve=1.0, multiplier=0, max_radius=10.0), ValueError, "symmetry"),
        (dict(symmetry=3, curve=1.0, multiplier="exp", max_radius=10.0), ValueError, "multiplier"),
        (dict(symmetry=3, curve=float("nan"), multiplier=0, max_radius=10.0), ValueError, "curve"),
        (dict(symmetry=3, curve=1.0, multiplier=0, max_radius=10.0, palette=["red"]), ValueError, "colour|color"),
    ],
)
def test_bad_configurations(kwargs, error, words):
    with pytest.raises(error, match=words):
        ks.spiral(64, 48, device="cpu", **kwargs)
