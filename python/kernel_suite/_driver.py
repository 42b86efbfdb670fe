"""The NVIDIA driver for the extension, which links ``libcuda.so.1``: the driver itself or, where it
cannot be loaded, the package's stand-in (``_driver_stub/libcuda.so.1``, from python/driver-stub:
every call reports that there is no GPU), so that the package imports and runs without a GPU.
Imported before the extension."""

import ctypes as _ctypes
import os as _os


def _load_driver():
    """Loads the driver, or the stand-in where it cannot be loaded or ``KERNEL_SUITE_DRIVER=stub``
    asks for it. Returns why the driver is missing, or None."""
    if _os.environ.get("KERNEL_SUITE_DRIVER") == "stub":
        why = "KERNEL_SUITE_DRIVER=stub"
    else:
        try:
            _ctypes.CDLL("libcuda.so.1")
            return None
        except OSError as e:
            why = f"libcuda.so.1 cannot be loaded: {e}"
    stub = _os.path.join(_os.path.dirname(__file__), "_driver_stub", "libcuda.so.1")
    if _os.path.exists(stub):
        # Loaded under the driver's soname, it answers the extension's NEEDED libcuda.so.1.
        _ctypes.CDLL(stub)
    return why


DRIVER_MISSING = _load_driver()
