"""GPU arrays of PyTorch, CuPy, Numba and JAX used in place: results against SciPy, results
allocated by the input's library, no copies, the caller's stream, and any Python thread.

Skipped (with the reason) where no GPU is usable or a library is missing; with
KERNEL_SUITE_REQUIRE_GPU=1 a missing GPU, PyTorch or CuPy fails instead."""

import os
import threading

import numpy as np
import pytest
import scipy.ndimage
import scipy.signal

import kernel_suite as ks
from support import Producer, gpu_library

os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")


def _case(dtype, shape=(301, 257), mask=(7, 5), seed=5):
    rng = np.random.default_rng(seed)
    image = rng.uniform(-1, 1, shape).astype(dtype)
    weights = rng.uniform(-1, 1, mask).astype(dtype)
    want = scipy.ndimage.convolve(image.astype(np.float64), weights.astype(np.float64), mode="constant")
    atol = (2e-5 if dtype == np.float32 else 1e-13) * np.abs(weights).sum()
    return image, weights, want, atol


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_torch_tensors_in_place(dtype):
    torch = gpu_library("torch")
    image, weights, want, atol = _case(dtype)
    t_image, t_weights = torch.from_numpy(image).cuda(), torch.from_numpy(weights).cuda()
    got = ks.convolve(t_image, t_weights)
    assert isinstance(got, torch.Tensor) and got.device == t_image.device and got.dtype == t_image.dtype
    np.testing.assert_allclose(got.cpu().numpy(), want, rtol=0, atol=atol)
    out = torch.full_like(t_image, float("nan"))
    assert ks.convolve(t_image, t_weights, out=out) is out
    np.testing.assert_allclose(out.cpu().numpy(), want, rtol=0, atol=atol)


def test_torch_call_copies_nothing_and_shows_in_its_profiler():
    torch = gpu_library("torch")
    image, weights, _, _ = _case(np.float32)
    t_image, t_weights = torch.from_numpy(image).cuda(), torch.from_numpy(weights).cuda()
    out = torch.empty_like(t_image)
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        ks.convolve(t_image, t_weights, out=out)
        torch.cuda.synchronize()
    names = [e.name for e in prof.events()]
    assert any("conv2d_tiled" in n for n in names), names
    assert not any("memcpy" in n.lower() or "memset" in n.lower() for n in names), names


def test_torch_current_stream_orders_the_call():
    torch = gpu_library("torch")
    image, weights, _, atol = _case(np.float32)
    t_weights, t_source = torch.from_numpy(weights).cuda(), torch.from_numpy(image).cuda()
    t_image = torch.zeros(image.shape, device="cuda")
    side = torch.cuda.Stream()
    torch.cuda.synchronize()
    with torch.cuda.stream(side):
        # A long wait, then the real image, both queued on `side` (the host does not wait): a launch
        # on any other stream would read the zeros.
        torch.cuda._sleep(200_000_000)
        t_image.copy_(t_source)
        producer = Producer(t_image)
        got = ks.convolve(producer, t_weights, out=torch.empty_like(t_image))
    assert producer.calls[0]["stream"] == side.cuda_stream
    side.synchronize()
    want = scipy.ndimage.convolve(image.astype(np.float64), weights.astype(np.float64), mode="constant")
    np.testing.assert_allclose(got.cpu().numpy(), want, rtol=0, atol=atol)


def test_explicit_stream_argument():
    torch = gpu_library("torch")
    image, weights, want, atol = _case(np.float64)
    t_image, t_weights = torch.from_numpy(image).cuda(), torch.from_numpy(weights).cuda()
    torch.cuda.synchronize()
    side = torch.cuda.Stream()
    for stream in (side, side.cuda_stream):
        out = torch.empty_like(t_image)
        side.wait_stream(torch.cuda.current_stream())
        ks.convolve(t_image, t_weights, out=out, stream=stream)
        side.synchronize()
        np.testing.assert_allclose(out.cpu().numpy(), want, rtol=0, atol=atol)


def test_cupy_arrays_and_current_stream():
    cupy = gpu_library("cupy")
    image, weights, want, atol = _case(np.float32)
    c_image, c_weights = cupy.asarray(image), cupy.asarray(weights)
    got = ks.convolve(c_image, c_weights)
    assert isinstance(got, cupy.ndarray) and got.dtype == c_image.dtype
    np.testing.assert_allclose(cupy.asnumpy(got), want, rtol=0, atol=atol)
    with cupy.cuda.Stream(non_blocking=True) as s:
        producer = Producer(c_image)
        got = ks.convolve(producer, c_weights, out=cupy.empty_like(c_image))
    assert producer.calls[0]["stream"] == s.ptr
    s.synchronize()
    np.testing.assert_allclose(cupy.asnumpy(got), want, rtol=0, atol=atol)


def test_numba_cuda_array_interface():
    gpu_library("numba", required=False)
    from numba import cuda

    image, weights, want, atol = _case(np.float64, (64, 129), (3, 3))
    d_image, d_weights = cuda.to_device(image), cuda.to_device(weights)
    got = ks.convolve(d_image, d_weights)
    assert isinstance(got, cuda.devicearray.DeviceNDArray)
    np.testing.assert_allclose(got.copy_to_host(), want, rtol=0, atol=atol)


def test_jax_arrays_with_out():
    jax = gpu_library("jax", required=False)
    torch = gpu_library("torch")
    image, weights, want, atol = _case(np.float32, (96, 80), (5, 5))
    if not any(d.platform == "gpu" for d in jax.devices()):
        pytest.skip("JAX sees no GPU")
    j_image, j_weights = jax.device_put(image), jax.device_put(weights)
    with pytest.raises(TypeError, match="out="):
        ks.convolve(j_image, j_weights)
    out = torch.empty(image.shape, device="cuda")
    ks.convolve(j_image, j_weights, out=out)
    np.testing.assert_allclose(out.cpu().numpy(), want, rtol=0, atol=atol)


def test_svd_of_jax_arrays_with_out():
    """JAX arrays are immutable: svd needs out= (here torch tensors), float64 factors of a float32
    JAX batch with dtype="float64", exact against LAPACK."""
    jax = gpu_library("jax", required=False)
    torch = gpu_library("torch")
    if not any(d.platform == "gpu" for d in jax.devices()):
        pytest.skip("JAX sees no GPU")
    a = np.random.default_rng(17).uniform(0, 1, (3, 90, 40)).astype(np.float32)
    j = jax.device_put(a)
    with pytest.raises(TypeError, match="out="):
        ks.svd(j, 5)
    out = tuple(torch.empty(shape, device="cuda", dtype=torch.float64) for shape in [(3, 90, 5), (3, 5), (3, 5, 40)])
    ks.svd(j, 5, dtype="float64", out=out)
    exact = np.linalg.svd(a.astype(np.float64), compute_uv=False)[:, :5]
    np.testing.assert_allclose(out[1].cpu().numpy(), exact, rtol=0, atol=1e-12 * exact.max())
    u = out[0].cpu().numpy()
    np.testing.assert_allclose(np.swapaxes(u, 1, 2) @ u, np.broadcast_to(np.eye(5), (3, 5, 5)), rtol=0, atol=1e-12)


@pytest.mark.parametrize("precenter, normalize", [(False, False), (True, True)])
def test_lombscargle_on_torch_and_cupy(precenter, normalize):
    torch = gpu_library("torch")
    cupy = gpu_library("cupy")
    rng = np.random.default_rng(2)
    x = np.sort(rng.uniform(0, 30, 1001))
    y = np.cos(2.3 * x) + 0.2 * rng.standard_normal(1001) + 1.0
    freqs = np.linspace(0.1, 6.0, 2049)
    want = scipy.signal.lombscargle(x, y - y.mean() if precenter else y, freqs, normalize=normalize)
    for to_gpu, to_host in [(lambda a: torch.from_numpy(a).cuda(), lambda a: a.cpu().numpy()), (cupy.asarray, cupy.asnumpy)]:
        got = ks.lombscargle(to_gpu(x), to_gpu(y), to_gpu(freqs), precenter=precenter, normalize=normalize)
        np.testing.assert_allclose(to_host(got), want, rtol=1e-9, atol=1e-12 * np.abs(want).max())


def test_gpu_errors_before_any_launch():
    torch = gpu_library("torch")
    image = torch.rand(64, 48, device="cuda")
    weights = torch.rand(3, 3, device="cuda")
    with pytest.raises(ValueError, match="C-contiguous"):
        ks.convolve(image.T, weights)
    with pytest.raises(ValueError, match="different devices"):
        ks.convolve(image, weights.cpu())
    with pytest.raises(ValueError, match="float32"):
        ks.convolve(image, weights.double())
    with pytest.raises(ValueError, match="odd"):
        ks.convolve(image, torch.rand(2, 3, device="cuda"))
    with pytest.raises(ValueError, match="sim"):
        ks.convolve(image, weights, device="sim")
    # The context still works after the refusals.
    np.testing.assert_allclose(
        ks.convolve(image, weights).cpu().numpy(),
        scipy.ndimage.convolve(image.cpu().double().numpy(), weights.cpu().double().numpy(), mode="constant"),
        rtol=0, atol=1e-4,
    )


def test_any_python_thread():
    torch = gpu_library("torch")
    image, weights, want, atol = _case(np.float32, (128, 100), (3, 5))
    t_image, t_weights = torch.from_numpy(image).cuda(), torch.from_numpy(weights).cuda()
    results, errors = [None] * 4, []

    def work(i):
        try:
            results[i] = ks.convolve(t_image, t_weights).cpu().numpy()
        except Exception as e:  # reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    for r in results:
        np.testing.assert_allclose(r, want, rtol=0, atol=atol)


def test_svd_of_torch_and_cupy_batches():
    torch = gpu_library("torch")
    cupy = gpu_library("cupy")
    rng = np.random.default_rng(8)
    images = rng.uniform(0, 1, (4, 96, 80)).astype(np.float32)
    k = 8
    exact = np.linalg.svd(images.astype(np.float64), compute_uv=False)
    for to_gpu, to_host in [(lambda a: torch.from_numpy(a).cuda(), lambda a: a.cpu().numpy()), (cupy.asarray, cupy.asnumpy)]:
        u, s, vt = ks.svd(to_gpu(images), k)
        assert type(u) is type(to_gpu(images[:1])) and tuple(u.shape) == (4, 96, k) and tuple(s.shape) == (4, k)
        u, s, vt = to_host(u), to_host(s), to_host(vt)
        assert s.dtype == np.float64 and u.dtype == np.float32
        assert np.all(np.abs(s - exact[:, :k]).max(axis=1) <= 1e-5 * exact[:, 0])
        for i in range(4):
            error = np.linalg.norm(u[i].astype(np.float64) @ (s[i][:, None] * vt[i]) - images[i])
            assert abs(error - np.sqrt(np.sum(exact[i, k:] ** 2))) < 2e-5 * np.linalg.norm(images[i])
    one = ks.svd(torch.from_numpy(images[2]).cuda(), 3)
    np.testing.assert_allclose(one[1].cpu().numpy(), exact[2, :3], rtol=0, atol=1e-5 * exact[2, 0])
    bad = torch.from_numpy(images).cuda()
    bad[3, 5, 5] = float("nan")
    with pytest.raises(ValueError, match="image 3 holds a non-finite pixel"):
        ks.svd(bad, k)
    with pytest.raises(ValueError, match="float32 or float64"):
        ks.svd(torch.from_numpy(images).cuda().half(), k)


def test_float64_svd_of_torch_and_cupy_batches():
    """float64 GPU arrays of any batch shape, and float32 ones with dtype=float64: float64 factors
    allocated by the input's library, exact to 1e-12·σ₁ against LAPACK, orthonormal, signed."""
    torch = gpu_library("torch")
    cupy = gpu_library("cupy")
    rng = np.random.default_rng(21)
    sigma = np.logspace(0, -12, 48)
    a = np.empty((2, 3, 160, 48))
    for index in np.ndindex(2, 3):
        q1, _ = np.linalg.qr(rng.standard_normal((160, 48)))
        q2, _ = np.linalg.qr(rng.standard_normal((48, 48)))
        a[index] = (q1 * sigma) @ q2.T
    k = 12
    for to_gpu, to_host in [(lambda x: torch.from_numpy(x).cuda(), lambda x: x.cpu().numpy()), (cupy.asarray, cupy.asnumpy)]:
        u, s, vt = ks.svd(to_gpu(a), k)
        assert type(u) is type(to_gpu(a[0, 0])) and tuple(u.shape) == (2, 3, 160, k) and tuple(vt.shape) == (2, 3, k, 48)
        u, s, vt = to_host(u), to_host(s), to_host(vt)
        assert u.dtype == s.dtype == vt.dtype == np.float64
        for index in np.ndindex(2, 3):
            np.testing.assert_allclose(s[index], sigma[:k], rtol=0, atol=1e-12)
            np.testing.assert_allclose(u[index].T @ u[index], np.eye(k), rtol=0, atol=1e-12)
            residual = np.linalg.norm(a[index] @ vt[index].T - u[index] * s[index], axis=0)
            assert residual.max() <= 1e-12
        single = a[0, 0].astype(np.float32)
        u, s, vt = ks.svd(to_gpu(single), k, dtype="float64")
        exact = np.linalg.svd(single.astype(np.float64), compute_uv=False)
        np.testing.assert_allclose(to_host(s), exact[:k], rtol=0, atol=1e-12 * exact[0])
        bad = a.copy()
        bad[1, 2, 7, 7] = np.nan
        with pytest.raises(ValueError, match="matrix 5 holds a NaN"):
            ks.svd(to_gpu(bad), k)


def test_reconstruct_on_torch_and_cupy():
    torch = gpu_library("torch")
    cupy = gpu_library("cupy")
    rng = np.random.default_rng(12)
    images = rng.uniform(0, 1, (3, 130, 70)).astype(np.float32)
    k, ranks = 10, [1, 5, 10]
    for to_gpu, to_host in [(lambda a: torch.from_numpy(a).cuda(), lambda a: a.cpu().numpy()), (cupy.asarray, cupy.asnumpy)]:
        u, s, vt = ks.svd(to_gpu(images), k)
        recon = ks.reconstruct(u, s, vt, ranks)
        assert type(recon) is type(u) and tuple(recon.shape) == (3, 3, 130, 70)
        hu, hs, hvt, hr = to_host(u), to_host(s), to_host(vt), to_host(recon)
        for i in range(3):
            for j, r in enumerate(ranks):
                want = hu[i, :, :r].astype(np.float64) @ (hs[i, :r, None] * hvt[i, :r])
                np.testing.assert_allclose(hr[i, j], want, rtol=0, atol=1e-5 * np.abs(want).max())
        one = ks.reconstruct(u[1], s[1], vt[1], 5)
        np.testing.assert_allclose(to_host(one), hr[1, 1], rtol=0, atol=1e-6)
