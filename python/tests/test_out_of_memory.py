"""kernel_suite.OutOfMemoryError: a buffer the device cannot hold is an error that both
``except kernel_suite.CudaError`` and ``except MemoryError`` catch, with the memory in its message,
and the device stays usable; in the simulator and on the GPU."""

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
