"""The devices the tests run on: the simulator and the CPU reference always, the GPU when one is
usable. Without one its cases are skipped with the reason, unless KERNEL_SUITE_REQUIRE_GPU=1 (then they
fail), as in the Rust tests."""

import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))

from support import GPU_MISSING, on  # noqa: E402


@pytest.fixture
def gpu_missing():
    return GPU_MISSING


@pytest.fixture(params=["sim", "cpu", "gpu"])
def device(request):
    return on(request.param)
