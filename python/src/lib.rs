//! `kernel_suite._native`: the suite's kernels as Python functions on NumPy arrays.
//!
//! Each call validates everything on the host before a launch (a device-side trap would poison the
//! process's CUDA context), runs on the device the caller picks, and turns every error into a Python
//! exception: `ValueError` for bad arguments, `NotImplementedError` for SciPy options the kernels do
//! not have, [`CudaError`] (a `RuntimeError`) for the GPU's failures.

use kernel_suite::conv::{self, Variant};
use kernel_suite::lombscargle as ls;
use kernel_suite::{Device, Error};
use ndarray::{Array2, ArrayView2};
use numpy::{IntoPyArray, PyArray1, PyReadonlyArray1, PyReadonlyArray2, PyUntypedArrayMethods};
use pyo3::exceptions::{PyNotImplementedError, PyRuntimeError, PyUserWarning, PyValueError};
use pyo3::prelude::*;
use std::cell::OnceCell;

pyo3::create_exception!(
    _native,
    CudaError,
    PyRuntimeError,
    "A CUDA failure: the message names the call or the kernel."
);

/// A value used, with the GIL released, on the thread that holds it: `Python::detach` runs its
/// closure on the calling thread, and the devices here are that thread's own.
struct OnThisThread<T>(T);

// SAFETY: only ever moved into a closure that `Python::detach` runs on the same thread.
unsafe impl<T> Send for OnThisThread<T> {}

impl<T> OnThisThread<T> {
    fn get(self) -> T {
        self.0
    }
}

/// Where a call runs.
enum Target {
    Gpu(&'static Device),
    Simulator(&'static Device),
    Cpu,
}

thread_local! {
    /// This Python thread's GPU (or why there is none), opened once and never dropped: CUDA objects
    /// dropped at interpreter exit crash the process.
    static GPU: OnceCell<Result<&'static Device, String>> = const { OnceCell::new() };
    static SIMULATOR: OnceCell<&'static Device> = const { OnceCell::new() };
}

fn gpu() -> Result<&'static Device, String> {
    GPU.with(|g| {
        g.get_or_init(|| Device::gpu(0).map(|d| &*Box::leak(Box::new(d))).map_err(|e| e.to_string())).clone()
    })
}

/// The target of `device` (`None`: the GPU if one is usable, else the CPU reference with a warning).
fn target(py: Python<'_>, device: Option<&str>) -> PyResult<Target> {
    match device {
        Some("gpu") => gpu().map(Target::Gpu).map_err(CudaError::new_err),
        Some("sim") => Ok(Target::Simulator(
            SIMULATOR.with(|s| *s.get_or_init(|| Box::leak(Box::new(Device::simulator())))),
        )),
        Some("cpu") => Ok(Target::Cpu),
        None => match gpu() {
            Ok(d) => Ok(Target::Gpu(d)),
            Err(why) => {
                let message = std::ffi::CString::new(format!("no GPU ({why}): running the CPU reference"))
                    .expect("no NUL in the message");
                PyErr::warn(py, &py.get_type::<PyUserWarning>(), &message, 1)?;
                Ok(Target::Cpu)
            }
        },
        Some(other) => {
            Err(PyValueError::new_err(format!("device must be \"gpu\", \"sim\" or \"cpu\", not {other:?}")))
        }
    }
}

/// The suite's error as a Python exception.
fn to_py(e: Error) -> PyErr {
    match e {
        Error::InvalidInput(message) => PyValueError::new_err(message),
        other => CudaError::new_err(other.to_string()),
    }
}

/// `scipy.ndimage.convolve(image, weights, mode="constant", cval=0.0)` for 2-D float32 or float64
/// arrays: the result has the input's dtype; float64 is computed in float64 end to end.
#[pyfunction]
#[pyo3(signature = (image, weights, *, mode = "constant", cval = 0.0, device = None))]
fn convolve<'py>(
    py: Python<'py>,
    image: &Bound<'py, PyAny>,
    weights: &Bound<'py, PyAny>,
    mode: &str,
    cval: f64,
    device: Option<&str>,
) -> PyResult<Bound<'py, PyAny>> {
    if mode != "constant" {
        return Err(PyNotImplementedError::new_err(format!(
            "mode={mode:?}: only mode=\"constant\" is implemented"
        )));
    }
    if cval != 0.0 {
        return Err(PyNotImplementedError::new_err(format!("cval={cval}: only cval=0.0 is implemented")));
    }
    let target = target(py, device)?;
    if let (Ok(image), Ok(weights)) =
        (image.extract::<PyReadonlyArray2<f32>>(), weights.extract::<PyReadonlyArray2<f32>>())
    {
        let (image, weights) = (image.as_array(), weights.as_array());
        let target = OnThisThread(&target);
        let result = py.detach(move || convolve_f32(target.get(), image, weights)).map_err(to_py)?;
        return Ok(result.into_pyarray(py).into_any());
    }
    if let (Ok(image), Ok(weights)) =
        (image.extract::<PyReadonlyArray2<f64>>(), weights.extract::<PyReadonlyArray2<f64>>())
    {
        let (image, weights) = (image.as_array(), weights.as_array());
        let target = OnThisThread(&target);
        let result = py.detach(move || convolve_f64(target.get(), image, weights)).map_err(to_py)?;
        return Ok(result.into_pyarray(py).into_any());
    }
    Err(describe_mismatch(image, weights))
}

fn convolve_f32(
    target: &Target,
    image: ArrayView2<f32>,
    weights: ArrayView2<f32>,
) -> kernel_suite::Result<Array2<f32>> {
    match target {
        Target::Gpu(d) | Target::Simulator(d) => conv::convolve(d, image, weights, Variant::Tiled),
        Target::Cpu => conv::validate(image, weights)
            .and_then(|()| conv::convolve_reference(image, weights))
            .map(|r| r.mapv(|v| v as f32)),
    }
}

fn convolve_f64(
    target: &Target,
    image: ArrayView2<f64>,
    weights: ArrayView2<f64>,
) -> kernel_suite::Result<Array2<f64>> {
    match target {
        Target::Gpu(d) | Target::Simulator(d) => conv::convolve_f64(d, image, weights),
        Target::Cpu => conv::validate(image, weights).and_then(|()| conv::convolve_reference(image, weights)),
    }
}

/// `scipy.signal.lombscargle(x, y, freqs, precenter=False, normalize=False)` (SciPy ≥ 1.15, no
/// weights, `floating_mean=False`) for 1-D float64 arrays, in float64.
#[pyfunction]
#[pyo3(signature = (x, y, freqs, *, precenter = false, normalize = false, device = None))]
#[allow(clippy::too_many_arguments)]
fn lombscargle<'py>(
    py: Python<'py>,
    x: PyReadonlyArray1<'py, f64>,
    y: PyReadonlyArray1<'py, f64>,
    freqs: PyReadonlyArray1<'py, f64>,
    precenter: bool,
    normalize: bool,
    device: Option<&str>,
) -> PyResult<Bound<'py, PyArray1<f64>>> {
    let target = target(py, device)?;
    let (x, y, freqs) = (x.as_array().to_vec(), y.as_array().to_vec(), freqs.as_array().to_vec());
    let target = OnThisThread(&target);
    let power = py
        .detach(move || match target.get() {
            Target::Gpu(d) | Target::Simulator(d) => {
                let options = ls::Options { precenter, normalize, ..ls::Options::default() };
                ls::lombscargle(d, &x, &y, &freqs, &options)
            }
            Target::Cpu => ls::validate(&x, &y, &freqs)
                .and_then(|()| ls::lombscargle_reference(&x, &y, &freqs, precenter, normalize)),
        })
        .map_err(to_py)?;
    Ok(power.into_pyarray(py))
}

/// Why `image` and `weights` are not a pair of 2-D float32 or float64 arrays.
fn describe_mismatch(image: &Bound<'_, PyAny>, weights: &Bound<'_, PyAny>) -> PyErr {
    let describe = |a: &Bound<'_, PyAny>| match a.cast::<numpy::PyUntypedArray>() {
        Ok(arr) => Ok(format!("a {}-D {} array", arr.ndim(), arr.dtype())),
        Err(_) => Err(a.get_type().name().map(|n| n.to_string()).unwrap_or_else(|_| "?".into())),
    };
    match (describe(image), describe(weights)) {
        (Err(t), _) | (_, Err(t)) => {
            pyo3::exceptions::PyTypeError::new_err(format!("expected NumPy arrays, got a {t}"))
        }
        (Ok(a), Ok(b)) => PyValueError::new_err(format!(
            "image and weights must be 2-D arrays of one dtype, float32 or float64; got {a} and {b}"
        )),
    }
}

/// The extension module.
#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("CudaError", m.py().get_type::<CudaError>())?;
    m.add_function(wrap_pyfunction!(convolve, m)?)?;
    m.add_function(wrap_pyfunction!(lombscargle, m)?)?;
    Ok(())
}
