"""GPU kernels written in Rust, called on NumPy arrays.

``convolve(image, weights, mode="constant", cval=0.0, device=None)`` is
``scipy.ndimage.convolve`` for 2-D arrays, and ``lombscargle(x, y, freqs, precenter=False,
normalize=False, device=None)`` is ``scipy.signal.lombscargle``: on the GPU when one is present
(``device="gpu"`` requires it), in the kernels' CPU simulator (``device="sim"``), or as the f64 CPU
reference (``device="cpu"``; chosen, with a warning, when no GPU is usable).
"""

import numpy as _np

from . import _native
from ._native import CudaError, convolve

__all__ = ["CudaError", "convolve", "lombscargle"]


def lombscargle(x, y, freqs, *, precenter=False, normalize=False, device=None):
    """The Lomb-Scargle periodogram of samples ``y`` at times ``x`` for the angular frequencies
    ``freqs``, as ``scipy.signal.lombscargle`` (SciPy >= 1.15; no weights, ``floating_mean=False``):
    float64 in, float64 out (array-likes are converted, as SciPy does)."""
    as_f64 = lambda a, name: _checked_1d(_np.ascontiguousarray(a, dtype=_np.float64), name)
    return _native.lombscargle(
        as_f64(x, "x"), as_f64(y, "y"), as_f64(freqs, "freqs"),
        precenter=precenter, normalize=normalize, device=device,
    )


def _checked_1d(a, name):
    if a.ndim != 1:
        raise ValueError(f"{name} must be 1-D, got a {a.ndim}-D array")
    return a
