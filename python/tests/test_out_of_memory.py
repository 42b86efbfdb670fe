"""kernel_suite.OutOfMemoryError: a buffer the device cannot hold is an error that both
``except kernel_suite.CudaError`` and ``except MemoryError`` catch, with the memory in its message,
and the device stays usable; in the simulator and on the GPU. ``svd`` runs a batch in parts that
fit the memory left, shown in a simulator with little memory (``KERNEL_SUITE_SIM_MEMORY``);
test_beside_torch.py does it on the GPU beside PyTorch."""

import threading

import numpy as np
import pytest

import kernel_suite as ks
from support import on

# 2**48 float32 elements: 1 PiB, more than any device (or the simulator's host) can allocate.
HUGE = 1 << 48
MIB = HUGE * 4 >> 20


@pytest.fixture(params=["sim", "gpu"])
def device(request):
    return on(request.param)


def _huge():
    """A C-contiguous float32 array of ``HUGE`` elements over one element's memory: the copy to the
    device allocates its buffer first, which fails, so nothing past the first element is read."""
    return np.lib.stride_tricks.as_strided(np.zeros(1, np.float32), shape=(HUGE,), strides=(4,))


def test_is_a_cuda_error_and_a_memory_error():
    assert issubclass(ks.OutOfMemoryError, ks.CudaError) and issubclass(ks.OutOfMemoryError, MemoryError)
    assert issubclass(ks.OutOfMemoryError, RuntimeError)
    assert ks.OutOfMemoryError.__module__ == ks.CudaError.__module__
    assert "OutOfMemoryError" in ks.__all__


def test_a_buffer_larger_than_the_memory(device):
    y = np.ones(3, np.float32)
    caught = []
    try:
        ks.saxpy(2.0, _huge(), y, device=device)
    except MemoryError as e:
        caught.append(e)
    try:
        ks.saxpy(2.0, _huge(), y, device=device)
    except ks.CudaError as e:
        caught.append(e)
    assert [type(e) for e in caught] == [ks.OutOfMemoryError] * 2, caught
    for e in caught:
        message = str(e)
        assert message.startswith(f"out of memory: a buffer of {MIB} MiB does not fit"), message
        # The GPU says what was free; the simulator has no such figure.
        assert (" MiB free)" in message) == (device == "gpu"), message
    # The device still works.
    ks.saxpy(2.0, np.arange(3, dtype=np.float32), y, device=device)
    np.testing.assert_array_equal(y, [1, 3, 5])


def _on_a_thread(call):
    """``call()`` on a new thread, whose simulator is made with the environment as it is then (each
    Python thread has its own): its result, or the exception it raised."""
    outcome = {}

    def run():
        try:
            outcome["result"] = call()
        except Exception as e:  # handed to the caller
            outcome["error"] = e

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    return outcome


def _least_memory(call, monkeypatch):
    """The fewest bytes of simulator memory (``KERNEL_SUITE_SIM_MEMORY``) ``call`` succeeds in."""
    def fits(memory):
        monkeypatch.setenv("KERNEL_SUITE_SIM_MEMORY", str(memory))
        outcome = _on_a_thread(call)
        assert "result" in outcome or isinstance(outcome["error"], ks.OutOfMemoryError), outcome
        return "result" in outcome

    low, high = 0, 1 << 20
    assert fits(high)
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (low, middle) if fits(middle) else (middle, high)
    return high


def test_svd_runs_in_parts_that_fit_the_memory_left(monkeypatch):
    """A batch of eight images needs no more memory than one: in the least memory one image needs
    it runs in parts that fit (halved until they do), with the factors of the whole batch; with a
    byte less, OutOfMemoryError; from NumPy arrays and from arrays used in place."""
    from support import Producer

    rng = np.random.default_rng(53)
    images = rng.uniform(0, 1, (8, 40, 32)).astype(np.float32)
    k = 3
    whole = ks.svd(images, k, device="sim")

    def from_numpy(batch):
        return lambda: ks.svd(batch, k, device="sim")

    def in_place(batch):
        def call():
            count = len(batch)
            u, s, vt = (np.full(shape, np.nan, dtype) for shape, dtype in
                        [((count, 40, k), np.float32), ((count, k), np.float64), ((count, k, 32), np.float32)])
            ks._native._svd_into(*(Producer(a) for a in (batch, u, s, vt)), k=k, stream=0, device="sim")
            return u, s, vt
        return call

    for way in (from_numpy, in_place):
        one = _least_memory(way(images[:1]), monkeypatch)
        assert one > 40 * 32 * 8, one  # the image in float64, at least
        monkeypatch.setenv("KERNEL_SUITE_SIM_MEMORY", str(one))
        u, s, vt = _on_a_thread(way(images))["result"]
        # Converged in other batches: alike to the engine's tolerance (pixels in [0, 1]).
        np.testing.assert_allclose(s, whole[1], rtol=1e-6)
        np.testing.assert_allclose(u @ (s[..., None] * vt), whole[0] @ (whole[1][..., None] * whole[2]), atol=1e-4)
        monkeypatch.setenv("KERNEL_SUITE_SIM_MEMORY", str(one - 1))
        error = _on_a_thread(way(images)).get("error")
        assert isinstance(error, ks.OutOfMemoryError) and isinstance(error, MemoryError), (way.__name__, error)
        assert str(error).startswith("out of memory: a buffer of "), str(error)
    monkeypatch.setenv("KERNEL_SUITE_SIM_MEMORY", "lots")
    error = _on_a_thread(from_numpy(images))["error"]
    assert isinstance(error, ValueError) and 'KERNEL_SUITE_SIM_MEMORY="lots": expected a number of bytes' in str(error)


def test_float64_svd_runs_in_parts_that_fit_the_memory_left(monkeypatch):
    """As above for float64 matrices (the exact path): in the least memory one matrix needs a batch
    of eight runs in parts, with the factors of the whole batch to rounding; with a byte less,
    OutOfMemoryError; from NumPy arrays and from arrays used in place."""
    from support import Producer

    rng = np.random.default_rng(54)
    matrices = rng.standard_normal((8, 40, 32))
    k = 3
    whole = ks.svd(matrices, k, device="sim")

    def from_numpy(batch):
        return lambda: ks.svd(batch, k, device="sim")

    def in_place(batch):
        def call():
            count = len(batch)
            u, s, vt = (np.full(shape, np.nan) for shape in [(count, 40, k), (count, k), (count, k, 32)])
            ks._native._svd_f64_into(*(Producer(a) for a in (batch, u, s, vt)), k=k, stream=0, device="sim")
            return u, s, vt
        return call

    for way in (from_numpy, in_place):
        one = _least_memory(way(matrices[:1]), monkeypatch)
        assert one > 40 * 32 * 8, one  # the matrix in float64, at least
        monkeypatch.setenv("KERNEL_SUITE_SIM_MEMORY", str(one))
        u, s, vt = _on_a_thread(way(matrices))["result"]
        np.testing.assert_allclose(s, whole[1], rtol=0, atol=1e-12 * whole[1].max())
        np.testing.assert_allclose(u, whole[0], rtol=0, atol=1e-10)
        np.testing.assert_allclose(vt, whole[2], rtol=0, atol=1e-10)
        monkeypatch.setenv("KERNEL_SUITE_SIM_MEMORY", str(one - 1))
        error = _on_a_thread(way(matrices)).get("error")
        assert isinstance(error, ks.OutOfMemoryError) and isinstance(error, MemoryError), (way.__name__, error)
