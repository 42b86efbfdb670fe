"""GPU kernels written in Rust, called on NumPy, CuPy, PyTorch, JAX and Numba arrays.

``convolve(image, weights, mode="constant", cval=0.0)`` is ``scipy.ndimage.convolve`` for 2-D
arrays, ``lombscargle(x, y, freqs, precenter=False, normalize=False)`` is
``scipy.signal.lombscargle``, ``svd(A, k)`` the exact truncated SVD of any matrix or batch
(float64 to float64 accuracy, float32 by the ``svd`` command's engine) and
``reconstruct(U, S, Vt, ranks)`` its rank-k reconstructions;
``spiral(...)`` paints the ``spiral`` command's image; ``saxpy(a, x, y)`` is the template's
example kernel (``y <- a*x + y`` in place), a binding of a few lines on the ``pykernels`` layer.

GPU arrays (anything with ``__dlpack__`` or ``__cuda_array_interface__`` in CUDA memory) are used
in place: the kernel is queued on the caller's current stream (PyTorch's or CuPy's current stream,
or ``stream=``: an int handle, a ``torch.cuda.Stream``, a ``cupy.cuda.Stream`` or an object with
``__cuda_stream__``) without waiting for it, and the result is allocated on the same GPU by the
input's library (PyTorch, CuPy, Numba) or written into ``out=``.

NumPy arrays run on the GPU when one is present (copied there and back), as the f64 CPU reference
with a warning when none is usable, or where ``device=`` says: ``"gpu"``, ``"cpu"``, or ``"sim"``
(the kernels' CPU simulator, which reads host arrays of any DLPack library in place). Without the
NVIDIA driver the package still imports (``DRIVER_MISSING`` says why) and runs on the CPU.
"""

import contextlib

import numpy as _np

from ._driver import DRIVER_MISSING  # first: loads the driver (or its stand-in) that _native links
from . import _native
from ._native import CudaError, NumericalError, OutOfMemoryError, empty_cache
from ._native import saxpy  # the kernel families' functions (scripts/new-family adds each here and below)

__all__ = ["CudaError", "DRIVER_MISSING", "NumericalError", "OutOfMemoryError", "convolve", "empty_cache",
           "lombscargle", "reconstruct", "spiral", "svd"]
__all__ += ["saxpy"]  # the kernel families' functions

_KDL_CUDA = 2


def convolve(image, weights, *, mode="constant", cval=0.0, out=None, stream=None, device=None):
    """``scipy.ndimage.convolve(image, weights, mode="constant", cval=0.0)`` for 2-D float32 or
    float64 arrays: the result has the input's dtype; float64 is computed in float64 end to end.
    Only ``mode="constant"`` with ``cval=0.0`` is implemented (others raise
    ``NotImplementedError``)."""
    if not _on_gpu(image, weights, out) and not _in_place_on_host(device, image, weights, out=out):
        _no_gpu_options(out, stream)
        return _via_numpy(lambda i, w: _native.convolve(i, w, mode=mode, cval=cval, device=device), image, weights)
    if mode != "constant":
        raise NotImplementedError(f'mode={mode!r}: only mode="constant" is implemented')
    if cval != 0.0:
        raise NotImplementedError(f"cval={cval}: only cval=0.0 is implemented")
    if out is None:
        out = _native._empty_like(image)
    handle = _native._caller_stream(stream, image, weights, out)
    _native._convolve_into(image, weights, out, stream=handle, device=device)
    return out


def lombscargle(x, y, freqs, *, precenter=False, normalize=False, out=None, stream=None, device=None):
    """The Lomb-Scargle periodogram of samples ``y`` at times ``x`` for the angular frequencies
    ``freqs``, as ``scipy.signal.lombscargle`` (SciPy >= 1.15; no weights,
    ``floating_mean=False``), in float64. NumPy inputs (and array-likes) are converted to float64
    as SciPy does; GPU arrays must be float64 and C-contiguous, and ``precenter``/``normalize`` are
    done with the input's library on the caller's stream (PyTorch or CuPy)."""
    if not _on_gpu(x, y, freqs, out) and not _in_place_on_host(device, x, y, freqs, out=out):
        _no_gpu_options(out, stream)
        as_f64 = lambda a, name: _checked_1d(_np.ascontiguousarray(a, dtype=_np.float64), name)
        return _native.lombscargle(
            as_f64(x, "x"), as_f64(y, "y"), as_f64(freqs, "freqs"),
            precenter=precenter, normalize=normalize, device=device,
        )
    if (precenter or normalize) and not hasattr(y, "mean"):
        raise TypeError(
            f"precenter and normalize on a {type(y).__name__} need array arithmetic (PyTorch, CuPy, NumPy arrays)"
        )
    handle = _native._caller_stream(stream, y, x, freqs, out)
    if out is None:
        out = _native._empty_like(freqs, dtype="float64")
    if not (precenter or normalize):
        _native._lombscargle_into(x, y, freqs, out, scale=1.0, stream=handle, device=device)
        return out
    with _library_stream(y, handle):
        if precenter:
            y = y - y.mean()
        _native._lombscargle_into(x, y, freqs, out, scale=1.0, stream=handle, device=device)
        if normalize:
            out *= 2.0 / (y * y).sum()
    return out


def svd(A, k, *, dtype=None, out=None, device=None):
    """The leading ``k`` singular triplets of a matrix ``A`` (``m × n``: tall, wide or square) or of
    each matrix of a batch (``… × m × n``, any leading dimensions): ``(U, S, Vt)`` with ``U``
    ``(…, m, k)``, ``S`` ``(…, k)`` float64 (non-increasing) and ``Vt`` ``(…, k, n)``, the
    semantics of ``torch.linalg.svd(A, full_matrices=False)`` truncated to ``k``.

    float64 input gives float64 ``U`` and ``Vt``, every ``σᵢ`` within about 1e-12·σ₁ of LAPACK's,
    orthonormal vectors and ``‖A·vᵢ − σᵢ·uᵢ‖ ≤ 1e-12·‖A‖`` (tested on decaying, flat and
    rank-deficient spectra; the Gram iteration, then an accurate pass on ``A`` itself; on the CPU
    faer's SVD); its signs make each
    column of ``U`` have its entry of largest magnitude positive (scikit-learn's ``svd_flip``), with
    ``Vt``'s rows signed to match. float32 input keeps the ``svd`` command's engine: float32 ``U``
    and ``Vt`` (arbitrary signs), ``S`` within 1e-5·σ₁. ``dtype="float64"`` or ``"float32"`` asks
    for the other (float32 input widened exactly). Integer and bool arrays are widened to float64,
    float16 to float32; other dtypes are refused.

    GPU arrays (C-contiguous) are read in place after the caller's stream's work and the factors
    allocated by their library, or written into ``out=(U, S, Vt)``, arrays of the results' shapes
    and dtypes (needed for JAX, whose arrays are immutable; or host arrays with ``device="sim"``);
    the call returns when they are written. NumPy arrays of any layout are copied. Errors (``ValueError``): ``k`` outside ``1..=min(m, n)``, a NaN or infinite value,
    an empty array, an unsupported dtype, fewer than 2 dimensions."""
    if isinstance(k, bool) or not isinstance(k, (int, _np.integer)):
        raise TypeError(f"k must be an int, not a {type(k).__name__}")
    k = int(k)
    wanted = _float_dtype_name(dtype)
    if _on_gpu(A) or _in_place_on_host(device, A, out=out):
        name = _float_dtype_name(A.dtype, what="A")
        lead, m, n = _matrix_shape(A.shape)
        count = int(_np.prod(lead, dtype=_np.int64))
        batch = A.reshape(count, m, n)
        handle = _native._caller_stream(None, batch)
        single = name == "float32" and wanted in (None, "float32")
        if out is not None:
            if not isinstance(out, (tuple, list)) or len(out) != 3:
                raise ValueError("out= takes the three factors, a tuple (U, S, Vt)")
            if wanted == "float32" and not single:
                raise ValueError("out= takes the factors as computed: float64 from float64 input, without dtype=")
            into = _native._svd_into if single else _native._svd_f64_into
            into(batch, *out, k=k, stream=handle, device=device)
            return tuple(out)
        vectors = "float32" if single else "float64"
        u = _native._empty_like(batch, vectors, (count, m, k))
        s = _native._empty_like(batch, "float64", (count, k))
        vt = _native._empty_like(batch, vectors, (count, k, n))
        (_native._svd_into if single else _native._svd_f64_into)(batch, u, s, vt, k=k, stream=handle, device=device)
        if wanted == "float32" and not single:
            u, vt = _as_float32(u), _as_float32(vt)
        return u.reshape(lead + (m, k)), s.reshape(lead + (k,)), vt.reshape(lead + (k, n))
    _no_gpu_options(out, None)
    library = _library(A)
    a = _np.from_dlpack(A) if not isinstance(A, _np.ndarray) and hasattr(A, "__dlpack__") else _np.asarray(A)
    if a.dtype.kind in "iub":
        a = a.astype(_np.float64)
    elif a.dtype == _np.float16:
        a = a.astype(_np.float32)
    name = _float_dtype_name(a.dtype, what="A")
    lead, m, n = _matrix_shape(a.shape)
    count = int(_np.prod(lead, dtype=_np.int64))
    if name == "float32" and wanted in (None, "float32"):
        u, s, vt = _native._svd(_np.ascontiguousarray(a.reshape(count, m, n)), k, device=device)
    else:
        batch = _np.ascontiguousarray(a.reshape(count, m, n), dtype=_np.float64)
        u, s, vt = _native._svd_f64(batch, k, device=device)
        if wanted == "float32":
            u, vt = u.astype(_np.float32), vt.astype(_np.float32)
    factors = (u.reshape(lead + (m, k)), s.reshape(lead + (k,)), vt.reshape(lead + (k, n)))
    if library == "torch":
        import torch

        return tuple(torch.from_numpy(f) for f in factors)
    return factors


def _float_dtype_name(dtype, what="dtype="):
    """``"float32"`` or ``"float64"`` for a dtype of either (NumPy, PyTorch, CuPy, JAX, a string),
    ``None`` for ``None`` as ``dtype=``; a ``ValueError`` for any other."""
    if dtype is None and what == "dtype=":
        return None
    name = str(dtype)
    for wanted in ("float64", "float32"):
        if name == wanted or name.endswith("." + wanted) or name.endswith(f"'numpy.{wanted}'>"):
            return wanted
    raise ValueError(
        f"{what} is {name}: svd takes float32 or float64 (convert with .astype(numpy.float64) or .double())"
    )


def _matrix_shape(shape):
    """``(leading dimensions, m, n)`` of an array of matrices; a ``ValueError`` for fewer than 2
    dimensions or an empty array."""
    shape = tuple(int(side) for side in shape)
    if len(shape) < 2:
        raise ValueError(f"A must be a matrix (2-D) or a batch of matrices (… × m × n), got shape {shape}")
    if 0 in shape:
        raise ValueError(f"cannot factor an empty array of shape {shape}")
    return shape[:-2], shape[-2], shape[-1]


def reconstruct(U, S, Vt, ranks, *, device=None):
    """``U[..., :r] @ (S[..., :r, None] * Vt[..., :r, :])`` for the rank ``ranks`` (an int) or
    each rank of ``ranks`` (a sequence, then the result has a rank axis before the image's two),
    with the factors of ``svd`` (one image or a batch), as the ``svd`` command reconstructs:
    float32 operands and result (on the GPU its ``regtiled`` kernel, on the CPU in float64). GPU
    arrays are read in place (``S`` converted to float32 by its library) and the result, allocated
    by their library, is queued on the caller's stream without waiting."""
    single_rank = isinstance(ranks, (int, _np.integer)) and not isinstance(ranks, bool)
    rank_list = [int(ranks)] if single_rank else [int(r) for r in ranks]
    if not rank_list:
        raise ValueError("no ranks to reconstruct")
    if _on_gpu(U, S, Vt) or _in_place_on_host(device, U, S, Vt):
        batch = U.ndim == 3
        u, s, vt = (a if batch else a[None] for a in (U, S, Vt))
        s = _as_float32(s)
        count, m, _ = (int(side) for side in u.shape)
        out = _native._empty_like(u, "float32", (count, len(rank_list), m, int(vt.shape[-1])))
        handle = _native._caller_stream(None, u, s, vt)
        _native._reconstruct_into(u, s, vt, out, ranks=rank_list, stream=handle, device=device)
        out = out if batch else out[0]
        return out[..., 0, :, :] if single_rank else out
    u, s, vt = (_np.ascontiguousarray(a, dtype=_np.float32) for a in (U, S, Vt))
    if u.ndim not in (2, 3) or s.ndim != u.ndim - 1 or vt.ndim != u.ndim:
        raise ValueError(f"U, S, Vt have {u.ndim}, {s.ndim}, {vt.ndim} dimensions: expected svd's (3, 2, 3) or (2, 1, 2)")
    batch = u.ndim == 3
    out = _native._reconstruct(*(a if batch else a[None] for a in (u, s, vt)), rank_list, device=device)
    out = out if batch else out[0]
    return out[..., 0, :, :] if single_rank else out


_MULTIPLIERS = {"ln": 0, "sin": 1, "cos": 2, "tan": 3}


def spiral(width=3840, height=2160, *, symmetry=None, curve=None, multiplier=None, max_radius=None,
           center=None, precision=None, palette=None, seed=None, config=None, device=None):
    """The ``spiral`` command's image: ``(height, width)`` uint8 gray, or ``(height, width, 3)`` RGB
    with ``palette`` (colours ``"#rrggbb"`` from level 0 to 255). Give ``symmetry``, ``curve``,
    ``multiplier`` (0-3 or ``"ln"``, ``"sin"``, ``"cos"``, ``"tan"``) and ``max_radius``; or
    ``seed`` for the command's random draw (``spiral --new --seed``); or ``config``, a dict of the
    command's JSON file. Parameters given override the draw or the dict. ``center`` is ``(x, y)`` in
    pixels (default: the middle); ``precision`` is the kernels' ``"f32"`` or ``"f64"`` (default)."""
    import json

    if config is not None:
        config = dict(config)
    elif seed is not None:
        config = json.loads(_native._random_spiral_config(int(seed), int(width), int(height)))
    else:
        missing = [name for name, value in (("symmetry", symmetry), ("curve", curve), ("multiplier", multiplier),
                                            ("max_radius", max_radius)) if value is None]
        if missing:
            raise TypeError(f"spiral() needs seed=, config= or the parameters (missing: {', '.join(missing)})")
        config = {"width": width, "height": height, "center": [width // 2, height // 2]}
    if isinstance(multiplier, str):
        if multiplier not in _MULTIPLIERS:
            raise ValueError(f"multiplier {multiplier!r}: use one of {', '.join(_MULTIPLIERS)} or 0-3")
        multiplier = _MULTIPLIERS[multiplier]
    given = {"symmetry": symmetry, "curve": curve, "multiplier": multiplier, "max_radius": max_radius,
             "center": None if center is None else list(center), "palette": palette, "precision": precision}
    config.update({key: value for key, value in given.items() if value is not None})
    for key in ("curve", "max_radius", "center"):
        if not _np.all(_np.isfinite(_np.asarray(config.get(key, 0.0), dtype=float))):
            raise ValueError(f"{key} {config[key]} is not finite")
    return _native._spiral(json.dumps(config), device=device)


def _on_gpu(*arrays):
    """Whether any of the arrays is in CUDA memory."""
    for a in arrays:
        if a is None or isinstance(a, _np.ndarray):
            continue
        if hasattr(a, "__dlpack_device__"):
            if int(a.__dlpack_device__()[0]) == _KDL_CUDA:
                return True
        elif hasattr(a, "__cuda_array_interface__"):
            return True
    return False


def _in_place_on_host(device, *arrays, out=None):
    """Whether host arrays go to the simulator in place: with ``device="sim"``, when ``out=`` is
    given or an input is not a NumPy array (a PyTorch CPU tensor, a DLPack producer)."""
    if device != "sim":
        return False
    return out is not None or any(not isinstance(a, _np.ndarray) and hasattr(a, "__dlpack__") for a in arrays)


def _no_gpu_options(out, stream):
    if out is not None:
        raise ValueError("out= is for GPU arrays (or host arrays with device=\"sim\"); NumPy results are new arrays")
    if stream is not None:
        raise ValueError("stream= is for GPU arrays; NumPy inputs are copied and waited for")


def _via_numpy(call, *arrays):
    """``call`` on NumPy views of host arrays of other libraries (PyTorch CPU tensors, JAX CPU
    arrays), the result given back as the first input's kind."""
    first = arrays[0]
    if isinstance(first, _np.ndarray) or not hasattr(first, "__dlpack__"):
        return call(*arrays)
    result = call(*(_np.from_dlpack(a) if hasattr(a, "__dlpack__") else a for a in arrays))
    library = _library(first)
    if library == "torch":
        import torch

        return torch.from_numpy(result)
    if library in ("jax", "jaxlib"):
        import jax.numpy as jnp

        return jnp.asarray(result)
    return result


def _as_float32(a):
    """``a`` as float32 by its own library (PyTorch, CuPy), or ``a`` if it already is."""
    if "float32" in str(a.dtype):
        return a
    if _library(a) == "torch":
        return a.float()
    return a.astype("float32")


def _library(a):
    return type(a).__module__.split(".")[0]


def _library_stream(a, handle):
    """A context in which ``a``'s library (PyTorch, CuPy) queues its own operations on ``handle``."""
    library = _library(a)
    if library == "torch" and getattr(a, "is_cuda", False):
        import torch

        if handle != torch.cuda.current_stream(a.device).cuda_stream:
            return torch.cuda.stream(torch.cuda.ExternalStream(handle, device=a.device))
    if library == "cupy":
        import cupy

        if handle != cupy.cuda.get_current_stream().ptr:
            return cupy.cuda.ExternalStream(handle)
    return contextlib.nullcontext()


def _checked_1d(a, name):
    if a.ndim != 1:
        raise ValueError(f"{name} must be 1-D, got a {a.ndim}-D array")
    return a
