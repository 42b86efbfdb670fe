"""kernel_suite.svd and reconstruct against LAPACK (numpy.linalg.svd in float64) and against
matrices whose singular values are known exactly (repeated and zero ones included), on every
device this machine has."""

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
        (lambda: ks.svd(np.ones((2, 2, 8, 8), np.float32), 2), ValueError, "2-D"),
        (lambda: ks.svd(np.ones((8, 8), np.float32), 2.5), TypeError, "int"),
        (lambda: ks.reconstruct(np.ones((8, 3)), np.ones(3), np.ones((3, 5)), 4), ValueError, "outside 1..=3"),
        (lambda: ks.reconstruct(np.ones((8, 3)), np.ones(2), np.ones((3, 5)), 1), ValueError, "expected"),
        (lambda: ks.reconstruct(np.ones((8, 3)), np.ones(3), np.ones((3, 5)), []), ValueError, "no ranks"),
    ],
)
def test_bad_arguments(call, error, words):
    with pytest.raises(error, match=words):
        call()
