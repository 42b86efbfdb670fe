"""kernel_suite.svd and reconstruct against LAPACK (numpy.linalg.svd in float64) and against
matrices whose singular values are known exactly (repeated and zero ones included), on every
device this machine has: float32 images by the svd command's engine, float64 matrices of any shape
and batch to float64 accuracy."""

import numpy as np
import pytest

import kernel_suite as ks


def _with_spectrum(m, n, sigma, seed):
    """An m × n float32 matrix Q₁·diag(σ)·Q₂ᵀ with orthonormal Q₁, Q₂ (seeded)."""
    rng = np.random.default_rng(seed)
    q1, _ = np.linalg.qr(rng.standard_normal((m, len(sigma))))
    q2, _ = np.linalg.qr(rng.standard_normal((n, len(sigma))))
    return ((q1 * sigma) @ q2.T).astype(np.float32)


def _lapack(a):
    return np.linalg.svd(a.astype(np.float64), compute_uv=False)


@pytest.mark.parametrize("shape, k", [((3, 37, 53), 5), ((2, 61, 29), 7), ((1, 40, 40), 12)])
def test_singular_values_and_reconstructions_match_lapack(device, shape, k):
    rng = np.random.default_rng(sum(shape) + k)
    images = rng.uniform(0, 1, shape).astype(np.float32)
    u, s, vt = ks.svd(images, k, device=device)
    assert u.shape == (shape[0], shape[1], k) and u.dtype == np.float32
    assert s.shape == (shape[0], k) and s.dtype == np.float64
    assert vt.shape == (shape[0], k, shape[2]) and vt.dtype == np.float32
    ranks = [1, k // 2, k]
    recon = ks.reconstruct(u, s, vt, ranks, device=device)
    assert recon.shape == (shape[0], 3, shape[1], shape[2])
    for i, image in enumerate(images):
        exact = _lapack(image)
        np.testing.assert_allclose(s[i], exact[:k], rtol=0, atol=1e-5 * exact[0])
        norm = np.linalg.norm(image.astype(np.float64))
        for j, r in enumerate(ranks):
            # Eckart–Young: the error of the best rank-r approximation is the tail of the spectrum.
            error = np.linalg.norm(recon[i, j].astype(np.float64) - image) / norm
            bound = np.sqrt(np.sum(exact[r:] ** 2)) / norm
            assert abs(error - bound) < 2e-5, (i, r, error, bound)


def test_repeated_and_zero_singular_values(device):
    sigma = np.array([5.0, 5.0, 5.0, 2.0, 2.0, 1.0, 0.0, 0.0])
    image = _with_spectrum(48, 36, sigma, seed=9)
    u, s, vt = ks.svd(image, 6, device=device)
    np.testing.assert_allclose(s, sigma[:6], rtol=0, atol=1e-5 * sigma[0])
    # Rank 3 cuts between the groups, so its reconstruction is unique: the σ = 5 part.
    want = _with_spectrum(48, 36, np.where(sigma == 5.0, sigma, 0.0), seed=9)
    np.testing.assert_allclose(ks.reconstruct(u, s, vt, 3, device=device), want, rtol=0, atol=5e-5)
    # The orthonormality of the factors.
    np.testing.assert_allclose(u.T.astype(np.float64) @ u, np.eye(6), atol=2e-5)
    np.testing.assert_allclose(vt.astype(np.float64) @ vt.T, np.eye(6), atol=2e-5)


def test_an_exactly_rank_one_image(device):
    # (i % 16)·(j % 16) / 255 as a PNG gives it: the CPU path once refused it (its null space's
    # singular values came back out of order).
    a = np.arange(200) % 16
    b = np.arange(150) % 16
    image = (np.outer(a, b).astype(np.uint8) / np.float32(255)).astype(np.float32)
    u, s, vt = ks.svd(image, 5, device=device)
    exact = np.linalg.norm(a) * np.linalg.norm(b) / 255
    assert abs(s[0] - exact) <= 2e-7 * exact
    assert np.all(s[1:] >= 0) and np.all(s[1:] <= 1e-5 * exact) and np.all(np.diff(s) <= 0)
    np.testing.assert_allclose(ks.reconstruct(u, s, vt, 1, device=device), image, rtol=0, atol=1e-6)


def test_one_image_and_array_likes(device):
    image = (np.arange(30 * 20).reshape(30, 20) % 7).tolist()
    u, s, vt = ks.svd(image, 4, device=device)
    assert u.shape == (30, 4) and s.shape == (4,) and vt.shape == (4, 20)
    np.testing.assert_allclose(s, _lapack(np.array(image, np.float32))[:4], rtol=0, atol=1e-4)


@pytest.mark.parametrize(
    "call, error, words",
    [
        (lambda: ks.svd(np.ones((8, 8), np.float32), 0), ValueError, "outside 1..=8"),
        (lambda: ks.svd(np.ones((8, 5), np.float32), 6), ValueError, "outside 1..=5"),
        (lambda: ks.svd(np.full((8, 8), np.nan, np.float32), 2), ValueError, "finite"),
        (lambda: ks.svd(np.ones(8, np.float32), 1), ValueError, "2-D"),
        (lambda: ks.svd(np.ones((0, 5)), 1), ValueError, "empty"),
        (lambda: ks.svd(np.ones((3, 0, 5)), 1), ValueError, "empty"),
        (lambda: ks.svd(np.ones((8, 8), np.complex128), 2), ValueError, "float32 or float64"),
        (lambda: ks.svd(np.ones((8, 8)), 2, dtype="int32"), ValueError, "float32 or float64"),
        (lambda: ks.svd(np.ones((8, 5)), 6), ValueError, "outside 1..=5"),
        (lambda: ks.svd(np.ones((8, 5)), 0), ValueError, "outside 1..=5"),
        (lambda: ks.svd(np.ones((8, 8), np.float32), 2.5), TypeError, "int"),
        (lambda: ks.reconstruct(np.ones((8, 3)), np.ones(3), np.ones((3, 5)), 4), ValueError, "outside 1..=3"),
        (lambda: ks.reconstruct(np.ones((8, 3)), np.ones(2), np.ones((3, 5)), 1), ValueError, "expected"),
        (lambda: ks.reconstruct(np.ones((8, 3)), np.ones(3), np.ones((3, 5)), []), ValueError, "no ranks"),
    ],
)
def test_bad_arguments(call, error, words):
    with pytest.raises(error, match=words):
        call()


def _known_spectrum(shape, sigma, seed):
    """A float64 array of ``shape`` (``… × m × n``) of matrices Q₁·diag(σ)·Q₂ᵀ (seeded)."""
    rng = np.random.default_rng(seed)
    *lead, m, n = shape
    out = np.empty(shape)
    for index in np.ndindex(*lead):
        q1, _ = np.linalg.qr(rng.standard_normal((m, len(sigma))))
        q2, _ = np.linalg.qr(rng.standard_normal((n, len(sigma))))
        out[index] = (q1 * sigma) @ q2.T
    return out


def _check_exact(a, u, s, vt, k, sigma=None):
    """float64 factors of every matrix of ``a``: σ within 1e-12·σ₁ of LAPACK's (and of ``sigma``,
    the constructed ones), orthonormal vectors to 1e-12, residuals ‖A·vᵢ − σᵢ·uᵢ‖ ≤ 1e-12·‖A‖ and the
    sign convention."""
    *lead, m, n = a.shape
    assert u.shape == (*lead, m, k) and s.shape == (*lead, k) and vt.shape == (*lead, k, n)
    assert u.dtype == s.dtype == vt.dtype == np.float64
    for index in np.ndindex(*lead):
        lapack = np.linalg.svd(a[index], compute_uv=False)
        sigma1 = lapack[0]
        np.testing.assert_allclose(s[index], lapack[:k], rtol=0, atol=1e-12 * sigma1)
        if sigma is not None:
            want = np.concatenate([sigma, np.zeros(k)])[:k]
            np.testing.assert_allclose(s[index], want, rtol=0, atol=1e-12 * sigma1)
        np.testing.assert_allclose(u[index].T @ u[index], np.eye(k), rtol=0, atol=1e-12)
        np.testing.assert_allclose(vt[index] @ vt[index].T, np.eye(k), rtol=0, atol=1e-12)
        residuals = np.linalg.norm(a[index] @ vt[index].T - u[index] * s[index], axis=0)
        assert residuals.max() <= 1e-12 * sigma1, residuals.max()
        largest = np.take_along_axis(u[index], np.abs(u[index]).argmax(axis=0)[None], axis=0)
        assert np.all(largest > 0)


@pytest.mark.parametrize(
    "shape, k",
    [((300, 40), 10), ((300, 40), 40), ((40, 300), 33), ((2, 3, 61, 37), 9), ((1, 57, 57), 20)],
)
def test_float64_matrices_are_exact(device, shape, k):
    sigma = np.logspace(0, -12, min(shape[-2:]))
    a = _known_spectrum(shape, sigma, seed=sum(shape) + k)
    u, s, vt = ks.svd(a, k, device=device)
    _check_exact(a, u, s, vt, k, sigma)


def test_rank_below_k_repeated_and_zero_values_in_float64(device):
    sigma = np.array([3.0, 2.0, 2.0, 2.0, 1.0, 1e-3, 1e-9])
    a = _known_spectrum((70, 45), sigma, seed=5)
    u, s, vt = ks.svd(a, 12, device=device)
    _check_exact(a, u, s, vt, 12, sigma)
    zero = np.zeros((2, 23, 17))
    u, s, vt = ks.svd(zero, 5, device=device)
    _check_exact(zero, u, s, vt, 5, np.zeros(0))


def test_the_dtype_argument_and_layouts(device):
    sigma = np.logspace(0, -6, 30)
    a = _known_spectrum((90, 30), sigma, seed=13)
    single = a.astype(np.float32)
    # float32 input, float64 factors: exact for the float32 values, widened.
    u, s, vt = ks.svd(single, 6, dtype="float64", device=device)
    _check_exact(single.astype(np.float64), u, s, vt, 6)
    # float64 input, float32 vectors (S stays float64).
    u, s, vt = ks.svd(a, 6, dtype=np.float32, device=device)
    assert u.dtype == vt.dtype == np.float32 and s.dtype == np.float64
    np.testing.assert_allclose(s, sigma[:6], rtol=0, atol=1e-12)
    # float32 input alone keeps the engine's float32 factors.
    u, s, vt = ks.svd(single, 6, device=device)
    assert u.dtype == vt.dtype == np.float32 and s.dtype == np.float64
    np.testing.assert_allclose(s, sigma[:6], rtol=0, atol=1e-5)
    # A non-contiguous view and a Fortran-ordered copy give the same factors as the array.
    wide = np.asfortranarray(_known_spectrum((30, 180), sigma, seed=14))
    want = ks.svd(np.ascontiguousarray(wide), 5, device=device)
    for layout in (wide, np.ascontiguousarray(_known_spectrum((30, 360), sigma, seed=14)[:, ::2])):
        got = ks.svd(layout, 5, device=device)
        _check_exact(np.asarray(layout), *got, 5)
    for got, expected in zip(ks.svd(wide, 5, device=device), want):
        np.testing.assert_allclose(got, expected, rtol=0, atol=1e-12)


def test_float64_errors_name_the_matrix_and_entry(device):
    a = _known_spectrum((3, 12, 9), np.array([1.0, 0.5]), seed=3)
    a[1, 3, 4] = np.nan
    with pytest.raises(ValueError, match=r"matrix 1: entry \(3, 4\) is NaN"):
        ks.svd(a, 2, device=device)
    a[1, 3, 4] = 0.0
    a[2, 0, 8] = -np.inf
    with pytest.raises(ValueError, match=r"matrix 2: entry \(0, 8\) is -inf"):
        ks.svd(a, 2, device=device)
    with pytest.raises(ValueError, match="outside 1..=9"):
        ks.svd(a, 10, device=device)
