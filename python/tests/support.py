"""What the tests share: whether the GPU is usable (and required), and fake array producers."""

import os

import numpy as np

import kernel_suite as ks

REQUIRE_GPU = os.environ.get("KERNEL_SUITE_REQUIRE_GPU") == "1"


def _gpu_missing():
    """Why the GPU cannot be used, or None."""
    try:
        ks.convolve(np.ones((3, 3), np.float32), np.ones((1, 1), np.float32), device="gpu")
        return None
    except ks.CudaError as e:
        return str(e)


GPU_MISSING = _gpu_missing()


class Producer:
    """A DLPack producer over an array (NumPy here, CuPy on the GPU) that records the keyword
    arguments of every ``__dlpack__`` call."""

    def __init__(self, array, device=None):
        self.array = array
        self.device = device
        self.calls = []

    def __dlpack_device__(self):
        return self.device or self.array.__dlpack_device__()

    def __dlpack__(self, **kwargs):
        self.calls.append(kwargs)
        return self.array.__dlpack__(**kwargs)


class Interface:
    """A ``__cuda_array_interface__`` producer (version 3) with an explicit dictionary."""

    def __init__(self, **fields):
        self.__cuda_array_interface__ = {"version": 3, "strides": None, "stream": None, **fields}
