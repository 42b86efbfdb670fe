"""kernel_suite.convolve against scipy.ndimage.convolve, on every device this machine has (the
`device` fixture of conftest.py)."""

import warnings

import numpy as np
import pytest
import scipy.ndimage

import kernel_suite as ks


@pytest.mark.parametrize("dtype, rtol", [(np.float32, 2e-5), (np.float64, 1e-13)])
@pytest.mark.parametrize("shape, mask_shape", [((37, 53), (3, 3)), ((200, 129), (5, 7)), ((1, 9), (1, 3))])
def test_matches_scipy(device, dtype, rtol, shape, mask_shape):
    rng = np.random.default_rng(sum(shape) + sum(mask_shape))
    image = rng.uniform(-1, 1, shape).astype(dtype)
    weights = rng.uniform(-1, 1, mask_shape).astype(dtype)
    got = ks.convolve(image, weights, device=device)
    want = scipy.ndimage.convolve(image.astype(np.float64), weights.astype(np.float64), mode="constant", cval=0.0)
    assert got.dtype == dtype and got.shape == shape
    scale = np.abs(image).max() * np.abs(weights).sum()
    np.testing.assert_allclose(got, want, rtol=0, atol=rtol * scale)


def test_strided_and_fortran_inputs(device):
    rng = np.random.default_rng(7)
    base = rng.uniform(0, 1, (60, 80)).astype(np.float32)
    weights = np.asfortranarray(rng.uniform(0, 1, (3, 5)).astype(np.float32))
    view = base[::2, 1::3]
    want = scipy.ndimage.convolve(view.astype(np.float64), weights.astype(np.float64), mode="constant")
    np.testing.assert_allclose(ks.convolve(view, weights, device=device), want, rtol=0, atol=1e-5)


@pytest.mark.parametrize(
    "image, weights, kwargs, error, words",
    [
        (np.ones((8, 8), np.float32), np.ones((2, 3), np.float32), {}, ValueError, "odd"),
        (np.ones((8, 8), np.float32), np.ones((3, 3), np.float32), {"mode": "reflect"}, NotImplementedError, "mode"),
        (np.ones((8, 8), np.float32), np.ones((3, 3), np.float32), {"cval": 1.0}, NotImplementedError, "cval"),
        (np.ones((8, 8), np.int32), np.ones((3, 3), np.int32), {}, ValueError, "float32 or float64"),
        (np.ones((8, 8), np.float32), np.ones((3, 3), np.float64), {}, ValueError, "one dtype"),
        (np.ones((2, 8, 8), np.float32), np.ones((3, 3), np.float32), {}, ValueError, "3-D"),
        ([[1.0, 2.0]], np.ones((1, 1), np.float32), {}, TypeError, "NumPy arrays"),
        (np.ones((8, 8), np.float32), np.ones((3, 3), np.float32), {"device": "tpu"}, ValueError, "device"),
        (np.full((4, 4), np.nan, np.float32), np.ones((3, 3), np.float32), {}, ValueError, "finite"),
    ],
)
def test_bad_arguments_raise(image, weights, kwargs, error, words):
    kwargs.setdefault("device", "sim")
    with pytest.raises(error, match=words):
        ks.convolve(image, weights, **kwargs)


def test_no_gpu_falls_back_to_the_cpu_with_a_warning(gpu_missing):
    image = np.arange(20, dtype=np.float64).reshape(4, 5)
    weights = np.ones((3, 3))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = ks.convolve(image, weights)
    np.testing.assert_allclose(got, scipy.ndimage.convolve(image, weights, mode="constant"), rtol=1e-14)
    fell_back = [w for w in caught if "running the CPU reference" in str(w.message)]
    assert bool(fell_back) == (gpu_missing is not None), [str(w.message) for w in caught]
