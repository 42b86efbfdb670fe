"""Arrays of other libraries used in place: DLPack and __cuda_array_interface__ producers, the
stream handshake, and the checks made before any launch.

These run without a GPU, on host memory in the simulator (device="sim"), through fake producers
(support.py) that wrap NumPy arrays and record what they are asked; test_gpu_arrays.py runs the
libraries' GPU arrays."""

import numpy as np
import pytest
import scipy.ndimage
import scipy.signal

import kernel_suite as ks
from support import Interface, Producer


def _conv_case(dtype=np.float32, shape=(45, 38), mask=(5, 3), seed=3):
    rng = np.random.default_rng(seed)
    image = rng.uniform(-1, 1, shape).astype(dtype)
    weights = rng.uniform(-1, 1, mask).astype(dtype)
    want = scipy.ndimage.convolve(image.astype(np.float64), weights.astype(np.float64), mode="constant")
    return image, weights, want


@pytest.mark.parametrize("dtype, atol", [(np.float32, 2e-5), (np.float64, 1e-13)])
def test_host_producers_in_place_in_the_simulator(dtype, atol):
    image, weights, want = _conv_case(dtype)
    out = np.full(image.shape, np.nan, dtype)
    producers = [Producer(image), Producer(weights), Producer(out)]
    result = ks.convolve(*producers[:2], out=producers[2], device="sim")
    assert result is producers[2]
    np.testing.assert_allclose(out, want, rtol=0, atol=atol * np.abs(weights).sum())
    for p in producers:
        # DLPack: host memory takes no stream, and a versioned capsule is asked for.
        assert len(p.calls) == 1 and p.calls[0].get("stream") is None
        assert p.calls[0]["max_version"][0] == 1


def test_numpy_out_in_place_in_the_simulator():
    image, weights, want = _conv_case(np.float64, (17, 64), (3, 7))
    out = np.full(image.shape, np.nan)
    assert ks.convolve(image, weights, out=out, device="sim") is out
    np.testing.assert_allclose(out, want, rtol=0, atol=1e-12)


def test_lombscargle_in_place_in_the_simulator():
    rng = np.random.default_rng(11)
    x = np.sort(rng.uniform(0, 20, 301))
    y = np.sin(1.7 * x) + 0.3 * rng.standard_normal(301) + 0.5
    freqs = np.linspace(0.05, 4.0, 257)
    out = np.full(freqs.shape, np.nan)
    got = ks.lombscargle(Producer(x), Producer(y), Producer(freqs), out=Producer(out), device="sim")
    want = scipy.signal.lombscargle(x, y, freqs)
    np.testing.assert_allclose(out, want, rtol=1e-10, atol=1e-12 * np.abs(want).max())
    assert got.array is out
    # Centring and normalising use the arrays' own arithmetic (here NumPy's), then the kernel.
    for precenter, normalize in [(True, False), (False, True), (True, True)]:
        out = np.full(freqs.shape, np.nan)
        assert ks.lombscargle(x, y, freqs, precenter=precenter, normalize=normalize, out=out, device="sim") is out
        want = _scipy_lombscargle(x, y, freqs, precenter, normalize)
        np.testing.assert_allclose(out, want, rtol=1e-10, atol=1e-12 * np.abs(want).max())
    with pytest.raises(TypeError, match="arithmetic"):
        ks.lombscargle(Producer(x), Producer(y), Producer(freqs), precenter=True, out=Producer(out), device="sim")


def _scipy_lombscargle(x, y, freqs, precenter, normalize):
    """SciPy's periodogram; centring done on ``y`` first (SciPy 1.17 deprecates ``precenter``,
    whose documented equivalent this is)."""
    return scipy.signal.lombscargle(x, y - y.mean() if precenter else y, freqs, normalize=normalize)


def test_result_allocation_needs_a_known_library():
    image, weights, _ = _conv_case()
    with pytest.raises(TypeError, match="pass out="):
        ks.convolve(Producer(image), Producer(weights), device="sim")


@pytest.mark.parametrize(
    "make, error, words",
    [
        # Not C-contiguous: a strided view.
        (lambda i, w, o: (i[:, ::2], w, o[:, ::2]), ValueError, "C-contiguous"),
        # An even mask: refused before the launch.
        (lambda i, w, o: (i, w[:4, :2].copy(), o), ValueError, "odd"),
        # Mixed dtypes.
        (lambda i, w, o: (i, w.astype(np.float64), o), ValueError, "float64"),
        # The wrong number of dimensions.
        (lambda i, w, o: (i.reshape(-1), w, o.reshape(-1)), ValueError, "2-D"),
        # An output of another shape.
        (lambda i, w, o: (i, w, o[:10].copy()), ValueError, "shape"),
        # An output that is an input.
        (lambda i, w, o: (i, w, i), ValueError, "overlaps"),
        # Integers.
        (lambda i, w, o: (i.astype(np.int32), w.astype(np.int32), o.astype(np.int32)), ValueError, "float32 or float64"),
        # A read-only output.
        (lambda i, w, o: (i, w, _read_only(o)), (ValueError, BufferError), "read"),
    ],
)
def test_bad_arrays_are_refused_before_any_launch(make, error, words):
    image, weights, _ = _conv_case()
    out = np.full(image.shape, 7.0, np.float32)
    i, w, o = make(image, weights, out)
    with pytest.raises(error, match=words):
        ks.convolve(Producer(i), Producer(w), out=Producer(o), device="sim")
    assert np.all(out == 7.0), "nothing was written"


def _read_only(a):
    a = a.copy()
    a.flags.writeable = False
    return a


def test_misaligned_arrays_are_refused():
    raw = np.zeros(45 * 38 * 4 + 1, np.uint8)
    image = raw[1:].view(np.float32).reshape(45, 38)
    weights = np.ones((3, 3), np.float32)
    with pytest.raises(ValueError, match="aligned"):
        ks.convolve(Producer(image), Producer(weights), out=Producer(np.empty((45, 38), np.float32)), device="sim")


def test_mixed_devices_are_refused_before_export():
    image, weights, _ = _conv_case()
    gpu_weights = Producer(weights, device=(2, 0))
    with pytest.raises(ValueError, match="different devices"):
        ks.convolve(Producer(image), gpu_weights, out=Producer(np.empty_like(image)), device="sim")
    assert gpu_weights.calls == [], "no array is exported before the checks"


def test_host_arrays_need_the_simulator_to_run_in_place():
    image, weights, _ = _conv_case()
    with pytest.raises(ValueError, match='device="sim"'):
        ks.convolve(Producer(image), Producer(weights), out=Producer(np.empty_like(image)), device="cpu")


def test_objects_without_a_protocol_are_type_errors():
    image, weights, _ = _conv_case()
    with pytest.raises(TypeError, match="__dlpack__"):
        ks.convolve(Producer(image), object(), out=Producer(np.empty_like(image)), device="sim")


def test_bad_streams_are_type_errors():
    image, weights, _ = _conv_case()
    with pytest.raises(TypeError, match="stream"):
        ks.convolve(Producer(image), Producer(weights), out=Producer(np.empty_like(image)), stream="s", device="sim")
    with pytest.raises(ValueError, match="stream= is for GPU arrays"):
        ks.convolve(image, weights, stream=1, device="cpu")


def test_gpu_arrays_without_a_gpu(gpu_missing):
    if gpu_missing is None:
        pytest.skip("a GPU is usable here: the GPU cases below cover GPU arrays")
    image, weights, _ = _conv_case()
    fakes = [Producer(a, device=(2, 0)) for a in (image, weights, np.empty_like(image))]
    with pytest.raises(ks.CudaError):
        ks.convolve(fakes[0], fakes[1], out=fakes[2])
    assert all(p.calls == [] for p in fakes), "nothing is exported when the GPU cannot be opened"
    interface = Interface(shape=(4, 4), typestr="<f4", data=(0x7F0000000000, False))
    with pytest.raises((ks.CudaError, ValueError)):
        ks.convolve(interface, interface, out=interface)


def test_interface_fields_are_checked(gpu_missing):
    bad = [
        (Interface(shape=(4, 4), typestr="<i4", data=(256, False)), ValueError, "typestr"),
        (Interface(shape=(4, 4), typestr="<f4", data=(256, False), mask=object()), NotImplementedError, "masked"),
        (Interface(shape=(4, 4), typestr="<f4", data=(256, False), strides=(4, 16)), ValueError, "C-contiguous"),
        (Interface(shape=(4, 4), typestr="<f4", data=(258, False)), ValueError, "aligned"),
    ]
    for interface, error, words in bad:
        with pytest.raises(error, match=words):
            ks.convolve(interface, interface, out=interface)


def test_svd_in_place_in_the_simulator():
    rng = np.random.default_rng(21)
    images = rng.uniform(0, 1, (2, 30, 22)).astype(np.float32)
    k = 4
    u = np.full((2, 30, k), np.nan, np.float32)
    s = np.full((2, k), np.nan)
    vt = np.full((2, k, 22), np.nan, np.float32)
    producers = [Producer(a) for a in (images, u, s, vt)]
    ks._native._svd_into(*producers, k=k, stream=0, device="sim")
    for i, image in enumerate(images):
        exact = np.linalg.svd(image.astype(np.float64), compute_uv=False)
        np.testing.assert_allclose(s[i], exact[:k], rtol=0, atol=1e-5 * exact[0])
        approx = u[i].astype(np.float64) @ (s[i][:, None] * vt[i])
        error = np.linalg.norm(approx - image) / np.linalg.norm(image)
        assert abs(error - np.sqrt(np.sum(exact[k:] ** 2)) / np.linalg.norm(exact)) < 2e-5
    bad = images.copy()
    bad[1, 3, 4] = np.inf
    with pytest.raises(ValueError, match="image 1 holds a non-finite pixel"):
        ks._native._svd_into(Producer(bad), *(Producer(a) for a in (u, s, vt)), k=k, stream=0, device="sim")
    with pytest.raises(ValueError, match="shape"):
        ks._native._svd_into(Producer(images), Producer(u), Producer(s[:, :2].copy()), Producer(vt), k=k, stream=0,
                             device="sim")


def test_reconstruct_in_place_in_the_simulator():
    rng = np.random.default_rng(22)
    count, m, n, k = 3, 21, 17, 6
    u = rng.standard_normal((count, m, k)).astype(np.float32)
    s = rng.uniform(1, 2, (count, k)).astype(np.float32)
    vt = rng.standard_normal((count, k, n)).astype(np.float32)
    ranks = [1, 4, 6]
    out = np.full((count, len(ranks), m, n), np.nan, np.float32)
    ks._native._reconstruct_into(*(Producer(a) for a in (u, s, vt, out)), ranks=ranks, stream=0, device="sim")
    for i in range(count):
        for j, r in enumerate(ranks):
            want = u[i, :, :r].astype(np.float64) @ (s[i, :r, None] * vt[i, :r].astype(np.float64))
            np.testing.assert_allclose(out[i, j], want, rtol=0, atol=1e-5 * np.abs(want).max())
    with pytest.raises(ValueError, match="outside 1..=6"):
        ks._native._reconstruct_into(*(Producer(a) for a in (u, s, vt, out)), ranks=[1, 4, 7], stream=0, device="sim")
    with pytest.raises(ValueError, match="out has shape"):
        ks._native._reconstruct_into(*(Producer(a) for a in (u, s, vt, out[:, :2].copy())), ranks=ranks, stream=0,
                                     device="sim")
    with pytest.raises(ValueError, match="float32"):
        ks._native._reconstruct_into(*(Producer(a) for a in (u, s.astype(np.float64), vt, out)), ranks=ranks,
                                     stream=0, device="sim")


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_float64_svd_of_host_producers_in_the_simulator(dtype):
    """svd's path for GPU arrays (``_svd_f64_into``: the input widened on the device, float64
    factors written in place) on host producers in the simulator, against LAPACK: σ within
    1e-12·σ₁, orthonormal vectors, residuals, every output element written."""
    from kernel_suite import _native

    rng = np.random.default_rng(33)
    sigma = np.logspace(0, -10, 20)
    a = np.empty((2, 50, 20))
    for i in range(2):
        q1, _ = np.linalg.qr(rng.standard_normal((50, 20)))
        q2, _ = np.linalg.qr(rng.standard_normal((20, 20)))
        a[i] = (q1 * sigma) @ q2.T
    a = a.astype(dtype)
    u, s, vt = np.full((2, 50, 6), np.nan), np.full((2, 6), np.nan), np.full((2, 6, 20), np.nan)
    producers = [Producer(x) for x in (a, u, s, vt)]
    handle = _native._caller_stream(None, producers[0])
    _native._svd_f64_into(*producers, k=6, stream=handle, device="sim")
    for i in range(2):
        matrix = a[i].astype(np.float64)
        exact = np.linalg.svd(matrix, compute_uv=False)
        np.testing.assert_allclose(s[i], exact[:6], rtol=0, atol=1e-12 * exact[0])
        np.testing.assert_allclose(u[i].T @ u[i], np.eye(6), rtol=0, atol=1e-12)
        np.testing.assert_allclose(vt[i] @ vt[i].T, np.eye(6), rtol=0, atol=1e-12)
        residual = np.linalg.norm(matrix @ vt[i].T - u[i] * s[i], axis=0)
        assert residual.max() <= 1e-12 * exact[0]
    with pytest.raises(ValueError, match="outside|must lie in"):
        _native._svd_f64_into(*producers, k=21, stream=handle, device="sim")


def test_svd_into_out_arrays_of_any_batch_shape_in_the_simulator():
    """svd(A, k, out=(U, S, Vt)) writes into the given arrays (host producers in the simulator, as
    JAX arrays on a GPU) whatever the batch's leading dimensions: float64 factors of a
    (2, 2, 30, 12) batch, float32 ones of one matrix, as svd returns them; wrong outputs refused."""
    rng = np.random.default_rng(35)
    a = rng.standard_normal((2, 2, 30, 12))
    outs = [np.full((2, 2, 30, 4), np.nan), np.full((2, 2, 4), np.nan), np.full((2, 2, 4, 12), np.nan)]
    producers = tuple(Producer(x) for x in outs)
    assert ks.svd(a, 4, out=producers, device="sim") == producers
    for got, want in zip(outs, ks.svd(a, 4, device="sim")):
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-12)
    single = a[0, 0].astype(np.float32)
    outs = [np.full((30, 4), np.nan, np.float32), np.full(4, np.nan), np.full((4, 12), np.nan, np.float32)]
    ks.svd(single, 4, out=tuple(Producer(x) for x in outs), device="sim")
    for got, want in zip(outs, ks.svd(single, 4, device="sim")):
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-6)
    wrong = [
        ((np.zeros((30, 4), np.float32), np.zeros(4), np.zeros((4, 12))), a[0, 0], "expected float64"),
        ((np.zeros((30, 5)), np.zeros(4), np.zeros((4, 12))), a[0, 0], r"U is float64 of shape \[30, 5\]"),
        ((np.zeros((30, 4)), np.zeros(4)), a[0, 0], "three factors"),
    ]
    for out, matrix, words in wrong:
        with pytest.raises(ValueError, match=words):
            ks.svd(matrix, 4, out=tuple(Producer(x) for x in out), device="sim")
    with pytest.raises(ValueError, match="out= is for GPU arrays"):
        ks.svd(a, 4, out=tuple(outs))
