"""saxpy, the example kernel bound through the pykernels layer, against NumPy: host arrays in the
simulator and on the GPU, PyTorch GPU tensors in place, the checks made before any launch, and the
package without the NVIDIA driver."""

import os
import subprocess
import sys
import textwrap
import warnings

import numpy as np
import pytest

import kernel_suite as ks
from support import GPU_MISSING, Producer, gpu_library, on


@pytest.fixture(params=["sim", "gpu"])
def device(request):
    return on(request.param)


def _case(shape, seed):
    """Seeded ``a``, ``x``, ``y`` and NumPy's ``a·x + y``, computed in float64 and rounded once to
    float32 (the kernel's FMA rounds once), with the bound of each element's difference."""
    rng = np.random.default_rng(seed)
    a = np.float32(rng.uniform(-4, 4))
    x = rng.uniform(-1, 1, shape).astype(np.float32)
    y = rng.uniform(-1, 1, shape).astype(np.float32)
    want = (np.float64(a) * x + y).astype(np.float32)
    bound = np.finfo(np.float32).eps * (np.abs(a * x) + np.abs(y))
    return a, x, y, want, bound


@pytest.mark.parametrize("shape", [(1,), (255,), (257,), (100_003,), (37, 53)])
def test_matches_numpy_in_place(device, shape):
    a, x, y, want, bound = _case(shape, seed=sum(shape))
    x_before = x.copy()
    got = ks.saxpy(a, x, y, device=device)
    assert got is y and y.dtype == np.float32 and y.shape == shape
    assert np.all(np.abs(y - want) <= bound), np.abs(y - want).max()
    np.testing.assert_array_equal(x, x_before)


@pytest.mark.parametrize(
    "make, error, words",
    [
        (lambda x, y: (x.astype(np.float64), y), ValueError, "x is float64: expected float32"),
        (lambda x, y: (x, y.astype(np.int32)), ValueError, "y is int32: expected float32"),
        (lambda x, y: (x[:-1].copy(), y), ValueError, r"x has shape \(256,\), expected \(257,\)"),
        (lambda x, y: (x.reshape(1, -1), y), ValueError, "shape"),
        (lambda x, y: (x, np.asfortranarray(np.ones((3, 5), np.float32))[:, 1:]), ValueError, "C-contiguous"),
        (lambda x, y: (x, y[::2]), ValueError, "C-contiguous"),
        (lambda x, y: (x, _read_only(y)), (ValueError, BufferError), "read"),
        (lambda x, y: (y, y), ValueError, "y overlaps x"),
        (lambda x, y: (x.tolist(), y), TypeError, "__dlpack__"),
        (lambda x, y: (x, Producer(y, device=(2, 0))), ValueError, "different devices"),
        (lambda x, y: (x[:0], y[:0]), ValueError, "x is empty"),
    ],
)
def test_bad_arrays_raise_before_any_launch(make, error, words):
    a, x, y, _, _ = _case((257,), seed=1)
    y_before = y.copy()
    bad_x, bad_y = make(x, y)
    with pytest.raises(error, match=words):
        ks.saxpy(a, bad_x, bad_y, device="sim")
    np.testing.assert_array_equal(y, y_before)


def _read_only(a):
    a = a.copy()
    a.flags.writeable = False
    return a


def test_bad_options_raise():
    a, x, y, _, _ = _case((9,), seed=2)
    with pytest.raises(ValueError, match='device must be "gpu" or "sim"'):
        ks.saxpy(a, x, y, device="cpu")
    with pytest.raises(ValueError, match="stream= is for GPU arrays"):
        ks.saxpy(a, x, y, stream=1, device="sim")
    with pytest.raises(TypeError, match="stream"):
        ks.saxpy(a, x, y, stream="s", device="sim")


def test_without_a_gpu_runs_in_the_simulator_with_a_warning():
    a, x, y, want, bound = _case((1001,), seed=3)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ks.saxpy(a, x, y)
    fell_back = [w for w in caught if "running the kernel in the simulator" in str(w.message)]
    assert bool(fell_back) == (GPU_MISSING is not None), [str(w.message) for w in caught]
    assert np.all(np.abs(y - want) <= bound)


CHILD = textwrap.dedent(
    """
    import warnings
    import numpy as np
    import kernel_suite as ks
    assert ks.DRIVER_MISSING == "KERNEL_SUITE_DRIVER=stub", ks.DRIVER_MISSING
    x, y = np.arange(5, dtype=np.float32), np.ones(5, np.float32)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ks.saxpy(2.0, x, y)
    assert any("running the kernel in the simulator" in str(w.message) for w in caught), caught
    np.testing.assert_array_equal(y, 2 * np.arange(5) + 1)
    try:
        ks.saxpy(2.0, x, y, device="gpu")
        raise SystemExit("device='gpu' worked without a driver")
    except ks.CudaError as e:
        print("gpu:", e)
    print("ok")
    """
)


def test_imports_and_runs_in_the_simulator_without_the_driver():
    env = dict(os.environ, KERNEL_SUITE_DRIVER="stub")
    child = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True, text=True, timeout=300)
    assert child.returncode == 0, child.stdout + child.stderr
    assert child.stdout.endswith("ok\n") and "gpu: " in child.stdout, child.stdout


@pytest.mark.parametrize("shape", [(1,), (100_003,), (301, 257)])
def test_torch_tensors_in_place(shape):
    torch = gpu_library("torch")
    a, x, y, want, bound = _case(shape, seed=4)
    tx, ty = torch.from_numpy(x).cuda(), torch.from_numpy(y).cuda()
    address = ty.data_ptr()
    assert ks.saxpy(a, tx, ty) is ty and ty.data_ptr() == address
    assert np.all(np.abs(ty.cpu().numpy() - want) <= bound)


def test_torch_current_stream_orders_the_call():
    torch = gpu_library("torch")
    a, x, y, want, bound = _case((4099,), seed=5)
    tx, source = torch.from_numpy(x).cuda(), torch.from_numpy(y).cuda()
    ty = torch.zeros_like(source)
    side = torch.cuda.Stream()
    torch.cuda.synchronize()
    with torch.cuda.stream(side):
        # A long wait, then y, both queued on `side`: a launch on another stream would read zeros.
        torch.cuda._sleep(200_000_000)
        ty.copy_(source)
        ks.saxpy(a, tx, ty)
    side.synchronize()
    assert np.all(np.abs(ty.cpu().numpy() - want) <= bound)


def test_torch_errors_before_any_launch():
    torch = gpu_library("torch")
    x = torch.rand(64, 48, device="cuda")
    y = torch.rand(64, 48, device="cuda")
    with pytest.raises(ValueError, match="float32"):
        ks.saxpy(2.0, x.double(), y)
    with pytest.raises(ValueError, match="C-contiguous"):
        ks.saxpy(2.0, x.T, y.T)
    with pytest.raises(ValueError, match="different devices"):
        ks.saxpy(2.0, x, y.cpu())
    with pytest.raises(ValueError, match="sim"):
        ks.saxpy(2.0, x, y, device="sim")
    want = 2.0 * x + y
    ks.saxpy(2.0, x, y)
    torch.testing.assert_close(y, want)
