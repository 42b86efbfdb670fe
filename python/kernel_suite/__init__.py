"""GPU kernels written in Rust, called on NumPy arrays.

``convolve(image, weights, mode="constant", cval=0.0, device=None)`` is
``scipy.ndimage.convolve`` for 2-D arrays: on the GPU when one is present (``device="gpu"``
requires it), in the kernels' CPU simulator (``device="sim"``), or as the f64 CPU reference
(``device="cpu"``; chosen, with a warning, when no GPU is usable).
"""

from ._native import CudaError, convolve

__all__ = ["CudaError", "convolve"]
