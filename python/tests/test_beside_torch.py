"""kernel_suite beside a PyTorch that holds most of the GPU in its cache: with 1 GiB left, ``svd``
factors a batch that needs more than that in one piece (in parts that fit), and ``convolve`` and
``reconstruct`` give what they give with the GPU free; with 100 MiB left, a call that needs more
raises ``OutOfMemoryError`` (a ``MemoryError``), and once PyTorch lets go
(``torch.cuda.empty_cache()``) the same call succeeds. GPU only: skipped without a GPU or PyTorch."""

import numpy as np
import pytest

import kernel_suite as ks
from support import gpu_library

MIB = 1 << 20


@pytest.fixture
def torch():
    torch = gpu_library("torch")
    yield torch
    torch.cuda.empty_cache()


def _hold_all_but(torch, left):
    """A tensor over all of the GPU's free memory but ``left`` bytes, as PyTorch's cache holds it."""
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    free, _ = torch.cuda.mem_get_info()
    return torch.empty(max(free - left, 0), dtype=torch.uint8, device="cuda")


def _images(count, side, seed):
    """``count`` float32 images of ``side``², smooth patterns plus noise."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:side, 0:side] / side
    base = (np.sin(6 * x) * np.cos(4 * y)).astype(np.float32)
    noise = [0.1 * rng.standard_normal((side, side), np.float32) for _ in range(count)]
    return np.stack([base * (1 + i / count) + noise[i] for i in range(count)])


def test_svd_convolve_and_reconstruct_fit_the_memory_torch_leaves(torch):
    # 64 images of 1024²: their float64 copies and Gram matrices alone take 1 GiB on the device.
    images = torch.from_numpy(_images(64, 1024, 53)).cuda()
    k, ranks = 20, [5, 20]
    weights = torch.from_numpy(np.full((5, 5), 1 / 25, np.float32)).cuda()
    with_room = ks.svd(images, k)
    convolved = ks.convolve(images[0], weights)
    rebuilt = ks.reconstruct(*with_room, ranks)
    torch.cuda.synchronize()

    hog = _hold_all_but(torch, 1024 * MIB)
    u, s, vt = ks.svd(images, k)
    torch.cuda.synchronize()
    assert u.shape == (64, 1024, k) and s.shape == (64, k) and vt.shape == (64, k, 1024)
    # Factored in other batches: equal to the batch's rounding.
    np.testing.assert_allclose(s.cpu().numpy(), with_room[1].cpu().numpy(), rtol=1e-6)
    reference = np.linalg.svd(images[7].cpu().numpy().astype(np.float64), compute_uv=False)[:k]
    np.testing.assert_allclose(s[7].cpu().numpy(), reference, rtol=1e-5)
    assert torch.equal(ks.convolve(images[0], weights), convolved)
    assert torch.equal(ks.reconstruct(*with_room, ranks), rebuilt)
    del hog


def test_out_of_memory_with_100_mib_left_and_usable_after_empty_cache(torch):
    # One 4096² image: its float64 copy and Gram matrix take 256 MiB.
    image = torch.from_numpy(_images(1, 4096, 7)).cuda()
    large = np.ones((8192, 8192), np.float32)  # 256 MiB to upload
    weights = np.full((3, 3), 1 / 9, np.float32)
    spectrum = ks.svd(image, 10)[1].cpu().numpy()
    smoothed = ks.convolve(large, weights, device="gpu")
    # The call's buffers stay in the GPU's pool for the next one (up to 512 MiB, as PyTorch's
    # allocator keeps its own); ks.empty_cache() gives them back to the driver.
    before = torch.cuda.mem_get_info()[0]
    ks.empty_cache()
    assert torch.cuda.mem_get_info()[0] >= before + 200 * MIB
    hog = _hold_all_but(torch, 100 * MIB)
    for call in (lambda: ks.svd(image, 10), lambda: ks.convolve(large, weights, device="gpu")):
        with pytest.raises(ks.OutOfMemoryError) as caught:
            call()
        assert isinstance(caught.value, MemoryError) and isinstance(caught.value, ks.CudaError)
        assert "MiB" in str(caught.value), str(caught.value)
    del hog
    torch.cuda.empty_cache()
    np.testing.assert_allclose(ks.svd(image, 10)[1].cpu().numpy(), spectrum, rtol=1e-12)
    np.testing.assert_array_equal(ks.convolve(large, weights, device="gpu"), smoothed)
