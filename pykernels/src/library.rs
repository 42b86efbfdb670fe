//! What a call asks of the caller's array library: new arrays allocated by it (its allocator owns
//! them, on the input's device) and its current CUDA stream.

use crate::arrays::Dtype;
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyTuple};

/// The top-level module of `a`'s type: `"numpy"`, `"torch"`, `"cupy"`, `"numba"`, ….
fn library(a: &Bound<'_, PyAny>) -> PyResult<String> {
    let module: String = a.get_type().getattr("__module__")?.extract()?;
    Ok(module.split('.').next().unwrap_or_default().to_string())
}

/// `like`'s library, if it is one [`empty_like`] allocates with; else a `TypeError` asking for
/// `out=`.
fn allocator(like: &Bound<'_, PyAny>) -> PyResult<String> {
    let library = library(like)?;
    if ["numpy", "torch", "cupy", "numba"].contains(&library.as_str()) {
        return Ok(library);
    }
    Err(PyTypeError::new_err(format!(
        "cannot allocate the result for a {}.{}: pass out= (a writable C-contiguous array on the same device)",
        like.get_type().getattr("__module__")?,
        like.get_type().name()?
    )))
}

/// A new, uninitialised C-contiguous array of `shape` and `dtype` on `like`'s device, allocated by
/// `like`'s library: NumPy (host), PyTorch (host or GPU), CuPy or Numba (GPU). Other libraries'
/// arrays (JAX's are immutable) raise a `TypeError` asking for `out=`.
pub fn empty_like<'py>(
    like: &Bound<'py, PyAny>,
    dtype: Dtype,
    shape: &[usize],
) -> PyResult<Bound<'py, PyAny>> {
    let py = like.py();
    let shape = shape.to_vec();
    match allocator(like)?.as_str() {
        "numpy" => py.import("numpy")?.call_method1("empty", (shape, dtype.name())),
        "torch" => {
            let torch = py.import("torch")?;
            let kwargs = PyDict::new(py);
            kwargs.set_item("dtype", torch.getattr(dtype.name())?)?;
            kwargs.set_item("device", like.getattr("device")?)?;
            torch.call_method("empty", (shape,), Some(&kwargs))
        }
        "cupy" => {
            let cupy = py.import("cupy")?;
            let on_device =
                cupy.getattr("cuda")?.getattr("Device")?.call1((like.getattr("device")?.getattr("id")?,))?;
            on_device.call_method0("__enter__")?;
            let array = cupy.call_method1("empty", (shape, dtype.name()));
            on_device.call_method1("__exit__", (py.None(), py.None(), py.None()))?;
            array
        }
        _ => py.import("numba.cuda")?.call_method1("device_array", (shape, dtype.name())),
    }
}

/// The raw CUDA stream to launch on: `stream` if given (an int handle, an object with
/// `__cuda_stream__`, a `torch.cuda.Stream` or a `cupy.cuda.Stream`), else the current stream of
/// the first PyTorch or CuPy GPU array of `arrays` on its GPU, else the legacy default stream (0).
pub fn caller_stream(stream: Option<&Bound<'_, PyAny>>, arrays: &[&Bound<'_, PyAny>]) -> PyResult<usize> {
    if let Some(stream) = stream {
        return stream_handle(stream);
    }
    for &a in arrays {
        match library(a)?.as_str() {
            "torch" if a.getattr("is_cuda")?.is_truthy()? => {
                let current =
                    a.py().import("torch.cuda")?.call_method1("current_stream", (a.getattr("device")?,))?;
                return current.getattr("cuda_stream")?.extract();
            }
            "cupy" => {
                let cuda = a.py().import("cupy")?.getattr("cuda")?;
                let on_device = cuda.getattr("Device")?.call1((a.getattr("device")?.getattr("id")?,))?;
                on_device.call_method0("__enter__")?;
                let current =
                    cuda.call_method0("get_current_stream").and_then(|s| s.getattr("ptr")?.extract());
                on_device.call_method1("__exit__", (a.py().None(), a.py().None(), a.py().None()))?;
                return current;
            }
            _ => {}
        }
    }
    Ok(0)
}

/// The raw handle of a `stream=` argument.
pub(crate) fn stream_handle(stream: &Bound<'_, PyAny>) -> PyResult<usize> {
    if stream.is_instance_of::<pyo3::types::PyBool>() {
        return Err(PyTypeError::new_err("stream must be an int handle or a stream object, not a bool"));
    }
    if let Ok(handle) = stream.extract::<usize>() {
        return Ok(handle);
    }
    if stream.hasattr("__cuda_stream__")? {
        return stream.call_method0("__cuda_stream__")?.get_item(1)?.extract();
    }
    for attribute in ["cuda_stream", "ptr"] {
        // torch.cuda.Stream, cupy.cuda.Stream
        if stream.hasattr(attribute)? {
            return stream.getattr(attribute)?.extract();
        }
    }
    Err(PyTypeError::new_err(format!(
        "stream must be an int handle or a CUDA stream object, not a {}",
        stream.get_type().name()?
    )))
}

/// [`empty_like`] for Python: `dtype` a NumPy name (`like`'s if None), `shape` `like`'s if None.
#[pyfunction]
#[pyo3(signature = (like, dtype = None, shape = None))]
pub fn _empty_like<'py>(
    like: &Bound<'py, PyAny>,
    dtype: Option<&str>,
    shape: Option<Vec<usize>>,
) -> PyResult<Bound<'py, PyAny>> {
    allocator(like)?;
    let dtype = match dtype {
        Some(name) => name.to_string(),
        None => like.getattr("dtype")?.str()?.to_string().trim_start_matches("torch.").to_string(),
    };
    let dtype = Dtype::from_name(&dtype)
        .ok_or_else(|| PyValueError::new_err(format!("cannot allocate arrays of dtype {dtype}")))?;
    let shape = match shape {
        Some(shape) => shape,
        None => like.getattr("shape")?.extract()?,
    };
    empty_like(like, dtype, &shape)
}

/// [`caller_stream`] for Python: `_caller_stream(stream, *arrays)`.
#[pyfunction]
#[pyo3(signature = (stream, *arrays))]
pub fn _caller_stream(stream: Option<&Bound<'_, PyAny>>, arrays: &Bound<'_, PyTuple>) -> PyResult<usize> {
    let arrays: Vec<Bound<'_, PyAny>> = arrays.iter().filter(|a| !a.is_none()).collect();
    caller_stream(stream, &arrays.iter().collect::<Vec<_>>())
}
