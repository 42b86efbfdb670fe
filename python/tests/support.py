"""What the tests share: whether the GPU is usable (and required), the devices and GPU libraries
to run on, and fake array producers."""

import os

import numpy as np
import pytest

import kernel_suite as ks

REQUIRE_GPU = os.environ.get("KERNEL_SUITE_REQUIRE_GPU") == "1"


def _gpu_missing():
    """Why the GPU cannot be used, or None."""
    try:
        ks.saxpy(1.0, np.ones(1, np.float32), np.ones(1, np.float32), device="gpu")
        return None
    except ks.CudaError as e:
        return str(e)


GPU_MISSING = _gpu_missing()


def on(device):
    """``device`` ("gpu", "sim", "cpu"), or for the GPU where none is usable a skip with the reason
    (a failure with KERNEL_SUITE_REQUIRE_GPU=1)."""
    if device == "gpu" and GPU_MISSING is not None:
        if REQUIRE_GPU:
            pytest.fail(f"the GPU is required (KERNEL_SUITE_REQUIRE_GPU=1) but: {GPU_MISSING}")
        pytest.skip(f"on the GPU: {GPU_MISSING}")
    return device


def gpu_library(name, required=True):
    """The module ``name`` (torch, cupy, …) for a test of GPU arrays: skipped where no GPU is usable
    or the library is missing; with KERNEL_SUITE_REQUIRE_GPU=1 a missing GPU, or a missing library
    that is ``required``, fails instead."""
    on("gpu")
    try:
        return __import__(name)
    except ImportError as e:
        if REQUIRE_GPU and required:
            pytest.fail(f"{name} is needed for the GPU tests: {e}")
        pytest.skip(f"{name} is not installed: {e}")


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
