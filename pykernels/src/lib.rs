//! The project's kernels from Python: what a pyo3 binding of a kernel needs besides the launch.
//!
//! A binding is a `#[pyfunction]` that makes a [`Call`], takes its arrays from it — checked
//! (dtype, C-contiguity, alignment, one device, outputs apart from inputs), on the device the call
//! runs on — and launches the kernel on the device and queue the call gives:
//!
//! ```ignore
//! /// `out = a·x` for a float32 array `x` of any shape.
//! #[pyfunction]
//! #[pyo3(signature = (a, x, *, out = None, stream = None, device = None))]
//! fn scale<'py>(py: Python<'py>, a: f32, x: &Bound<'py, PyAny>, out: Option<&Bound<'py, PyAny>>,
//!               stream: Option<&Bound<'py, PyAny>>, device: Option<&str>) -> PyResult<Bound<'py, PyAny>> {
//!     let call = Call::new(py, device, stream)?;
//!     let x = call.input::<f32>(x, "x")?;
//!     let mut out = call.output::<f32>(out, "out", x.shape())?;
//!     // SAFETY: one thread per element, each writing its own `out[i]`.
//!     call.launch(|device, queue| unsafe {
//!         device.launch_on(queue, &kernels::scale::SCALE, LaunchConfig::for_1d(x.len(), 256), (a, x.view(), out.view_mut()))
//!     })?;
//!     out.into_result()
//! }
//! ```
//!
//! [`Call::output`]'s memory is uninitialised; a kernel that accumulates into its output (a
//! histogram) takes [`Call::zeroed_output`], zeroed on the call's stream before the kernel.
//!
//! GPU arrays (PyTorch, CuPy, JAX through DLPack; Numba, PyCUDA through
//! `__cuda_array_interface__`) are used in place on the caller's stream, and new outputs are
//! allocated by the input's library on its GPU; host arrays (NumPy) are copied to the GPU and
//! back, or run in the simulator ([`call`] has the rules). The extension's module calls
//! [`register`] for the exceptions and its kernels (`pykernels::register(m, &KERNELS)`); its Python package loads the NVIDIA driver, or a stand-in that
//! reports no GPU (`python/driver-stub`), before the extension.
//!
//! Bindings that dispatch on dtypes or allocate in Python use the parts: [`arrays`] (imports of
//! DLPack and `__cuda_array_interface__` arrays), [`devices`] (the GPUs, the simulator,
//! [`import_all`](devices::import_all)), [`library`] (allocation by the input's library, the
//! caller's stream) and [`detached`](devices::detached) (a launch with the GIL released).
#![warn(missing_docs)]

pub mod arrays;
pub mod call;
pub mod devices;
pub mod library;

pub use arrays::{ArrayElement, Dtype};
pub use call::{Call, Input, Output};

use gpu_launch::{EmbeddedKernels, Error};
use pyo3::exceptions::{PyArithmeticError, PyMemoryError, PyOSError, PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyDict, PyTuple, PyType};

pyo3::create_exception!(
    pykernels,
    CudaError,
    PyRuntimeError,
    "A CUDA failure: the message names the call or the kernel."
);

pyo3::create_exception!(
    pykernels,
    NumericalError,
    PyArithmeticError,
    "A numerical method failed on valid input (it did not converge, or its result failed a consistency check), on any device."
);

/// `OutOfMemoryError` (PyTorch's name): a [`CudaError`] that is also a `MemoryError`, so that
/// `except MemoryError` catches it as it catches a failed NumPy allocation. Made with `type()`
/// because `create_exception!` takes one base.
static OUT_OF_MEMORY_ERROR: PyOnceLock<Py<PyType>> = PyOnceLock::new();

fn out_of_memory_error(py: Python<'_>) -> PyResult<&Bound<'_, PyType>> {
    let class = OUT_OF_MEMORY_ERROR.get_or_try_init(py, || -> PyResult<_> {
        let cuda_error = py.get_type::<CudaError>();
        let namespace = PyDict::new(py);
        namespace.set_item("__module__", cuda_error.getattr("__module__")?)?;
        namespace.set_item(
            "__doc__",
            "A buffer did not fit in the device's free memory: a CudaError and a MemoryError; the message \
             gives the memory needed and free.",
        )?;
        let bases = PyTuple::new(py, [cuda_error, py.get_type::<PyMemoryError>()])?;
        let class = py.get_type::<PyType>().call1(("OutOfMemoryError", bases, namespace))?;
        Ok(class.cast_into::<PyType>()?.unbind())
    })?;
    Ok(class.bind(py))
}

/// The host library's error as a Python exception: `ValueError` for invalid input,
/// [`NumericalError`] for a method that failed on valid input, `OSError` for files,
/// `OutOfMemoryError` for a shortage of device memory (a buffer that does not fit, a driver call
/// or launch that failed for memory, work that does not fit even at its smallest), [`CudaError`]
/// for the rest (the driver, the GPU, a kernel).
pub fn to_py(e: Error) -> PyErr {
    match e {
        Error::InvalidInput(message) => PyValueError::new_err(message),
        e @ Error::Numerical(_) => NumericalError::new_err(e.to_string()),
        e @ Error::File { .. } => PyOSError::new_err(e.to_string()),
        e if e.is_out_of_memory() || matches!(e, Error::DoesNotFit { .. }) => {
            Python::attach(|py| match out_of_memory_error(py) {
                Ok(class) => PyErr::from_type(class.clone(), e.to_string()),
                Err(failed) => failed,
            })
        }
        other => CudaError::new_err(other.to_string()),
    }
}

/// Adds [`CudaError`], `OutOfMemoryError`, [`NumericalError`], `empty_cache`
/// ([`devices::empty_cache`]) and, for a package's Python code, `_empty_like` and
/// `_caller_stream` ([`library`]) to the extension's module `m`, and makes
/// `kernels` (the extension's kernels, as `gpu-builder` embedded them) the module every GPU of a
/// call loads.
pub fn register(m: &Bound<'_, PyModule>, kernels: &'static EmbeddedKernels) -> PyResult<()> {
    devices::use_kernels(kernels);
    m.add("CudaError", m.py().get_type::<CudaError>())?;
    m.add("OutOfMemoryError", out_of_memory_error(m.py())?)?;
    m.add("NumericalError", m.py().get_type::<NumericalError>())?;
    m.add_function(wrap_pyfunction!(devices::empty_cache, m)?)?;
    m.add_function(wrap_pyfunction!(library::_empty_like, m)?)?;
    m.add_function(wrap_pyfunction!(library::_caller_stream, m)?)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A buffer that does not fit, a driver call that failed for memory and work that does not fit
    /// at its smallest are each an `OutOfMemoryError`, which `except CudaError` and
    /// `except MemoryError` both catch, with the host library's message; other CUDA failures are
    /// no `MemoryError`.
    #[test]
    fn out_of_memory_is_a_cuda_error_and_a_memory_error() {
        Python::initialize();
        Python::attach(|py| {
            let err = to_py(Error::OutOfMemory { bytes: 3 << 30, free: Some((1 << 30, 80 << 30)) });
            assert!(err.get_type(py).is(out_of_memory_error(py).unwrap()));
            assert!(err.is_instance_of::<CudaError>(py) && err.is_instance_of::<PyMemoryError>(py));
            assert_eq!(
                err.value(py).to_string(),
                "out of memory: a buffer of 3072 MiB does not fit (1024 of 81920 MiB free); a smaller batch or \
                 another GPU may"
            );
            // A driver call that failed for memory, and work that does not fit at its smallest.
            let driver = Error::CudaCode {
                call: "cuMemAllocFromPoolAsync",
                code: 2,
                name: "CUDA_ERROR_OUT_OF_MEMORY".into(),
            };
            let whole = Error::DoesNotFit {
                what: "a batch of 1 image of 4096×4096".into(),
                needed: 2 << 30,
                free: Some((100 << 20, 80 << 30)),
                help: "free memory on this GPU".into(),
            };
            for (err, text) in [
                (driver, "cuMemAllocFromPoolAsync failed: CUDA error 2 (CUDA_ERROR_OUT_OF_MEMORY)"),
                (
                    whole,
                    "a batch of 1 image of 4096×4096 needs about 2048 MiB of GPU memory, 100 MiB free of 81920 MiB; \
                     free memory on this GPU",
                ),
            ] {
                let err = to_py(err);
                assert!(err.get_type(py).is(out_of_memory_error(py).unwrap()), "{err}");
                assert_eq!(err.value(py).to_string(), text);
            }
            let other = to_py(Error::NoGpu("no device".into()));
            assert!(other.is_instance_of::<CudaError>(py) && !other.is_instance_of::<PyMemoryError>(py));
        });
    }
}
