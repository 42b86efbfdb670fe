"""kernel_suite.lombscargle against scipy.signal.lombscargle on every device this machine has (the
`device` fixture of conftest.py)."""

import numpy as np
import pytest
import scipy.signal

import kernel_suite as ks


def signal(n, seed):
    rng = np.random.default_rng(seed)
    x = np.sort(rng.uniform(0, 30, n))
    y = 2.0 * np.sin(1.7 * x + 0.3) + 0.5 * rng.standard_normal(n) + 1.0
    return x, y


@pytest.mark.parametrize("precenter", [False, True])
@pytest.mark.parametrize("normalize", [False, True])
@pytest.mark.parametrize("n, m", [(3, 5), (97, 301), (1000, 1024)])
def test_matches_scipy(device, precenter, normalize, n, m):
    x, y = signal(n, n + m)
    freqs = np.linspace(0.05, 6.0, m)
    got = ks.lombscargle(x, y, freqs, precenter=precenter, normalize=normalize, device=device)
    # SciPy 1.17 deprecates `precenter`; subtracting the mean is its documented equivalent.
    want = scipy.signal.lombscargle(x, y - y.mean() if precenter else y, freqs, normalize=normalize)
    assert got.dtype == np.float64 and got.shape == (m,)
    np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-9 * np.abs(want).max())


def test_lists_and_float32_are_converted_as_scipy_does(device):
    x, y = signal(50, 3)
    freqs = [0.5, 1.0, 1.7, 2.5]
    got = ks.lombscargle(list(x), y.astype(np.float32), freqs, device=device)
    want = scipy.signal.lombscargle(x, y.astype(np.float32).astype(np.float64), np.array(freqs))
    np.testing.assert_allclose(got, want, rtol=1e-9)


@pytest.mark.parametrize(
    "x, y, freqs, words",
    [
        (np.arange(5.0), np.arange(4.0), np.ones(3), "samples"),
        (np.arange(5.0), np.arange(5.0), np.array([]), "no frequencies"),
        (np.ones((2, 2)), np.ones(4), np.ones(3), "1-D"),
        (np.array([0.0, np.nan]), np.ones(2), np.ones(3), "finite"),
    ],
)
def test_bad_arguments_raise(x, y, freqs, words):
    with pytest.raises(ValueError, match=words):
        ks.lombscargle(x, y, freqs, device="sim")
