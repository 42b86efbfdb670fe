"""The package without the NVIDIA driver: it imports (the stand-in driver answers the extension's
libcuda.so.1), says why, runs on the CPU and in the simulator, and empty_cache() is a no-op. Run in a child process with
KERNEL_SUITE_DRIVER=stub, which makes the package load the stand-in as it does where
libcuda.so.1 is missing."""

import os
import subprocess
import sys
import textwrap

CHILD = textwrap.dedent(
    """
    import warnings
    import numpy as np, scipy.ndimage
    import kernel_suite as ks
    assert ks.DRIVER_MISSING == "KERNEL_SUITE_DRIVER=stub", ks.DRIVER_MISSING
    image = np.random.default_rng(1).uniform(0, 1, (40, 30))
    weights = np.arange(15.0).reshape(3, 5)
    want = scipy.ndimage.convolve(image, weights, mode="constant")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = ks.convolve(image, weights)
    assert any("running the CPU reference" in str(w.message) for w in caught), [str(w.message) for w in caught]
    np.testing.assert_allclose(got, want, rtol=1e-13, atol=1e-13)
    np.testing.assert_allclose(ks.convolve(image, weights, device="sim"), want, rtol=1e-13, atol=1e-12)
    try:
        ks.convolve(image, weights, device="gpu")
        raise SystemExit("device='gpu' worked without a driver")
    except ks.CudaError as e:
        print("gpu:", e)
    ks.empty_cache()  # no GPU opened: nothing to give back, and no error
    print("ok")
    """
)


def test_imports_and_runs_on_the_cpu_without_the_driver():
    env = dict(os.environ, KERNEL_SUITE_DRIVER="stub")
    child = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True, text=True, timeout=300)
    assert child.returncode == 0, child.stdout + child.stderr
    assert child.stdout.endswith("ok\n") and "gpu: " in child.stdout, child.stdout
