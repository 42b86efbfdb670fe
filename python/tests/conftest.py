"""The devices the tests run on: the simulator and the CPU reference always, the GPU when one is
usable. Without one its cases are skipped with the reason, unless KERNEL_SUITE_REQUIRE_GPU=1 (then they
fail), as in the Rust tests."""

import os

import numpy as np
import pytest

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


@pytest.fixture
def gpu_missing():
    return GPU_MISSING


@pytest.fixture(params=["sim", "cpu", "gpu"])
def device(request):
    if request.param == "gpu" and GPU_MISSING is not None:
        if REQUIRE_GPU:
            pytest.fail(f"the GPU is required (KERNEL_SUITE_REQUIRE_GPU=1) but: {GPU_MISSING}")
        pytest.skip(f"on the GPU: {GPU_MISSING}")
    return request.param
