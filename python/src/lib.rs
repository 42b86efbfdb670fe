//! `kernel_suite._native`: the suite's kernels as Python functions on NumPy arrays.
//!
//! Each call validates everything on the host before a launch (a device-side trap would poison the
//! process's CUDA context), runs on the device the caller picks, and turns every error into a Python
//! exception: `ValueError` for bad arguments, `NotImplementedError` for SciPy options the kernels do
//! not have, [`CudaError`] (a `RuntimeError`) for the GPU's failures, [`NumericalError`] (an
//! `ArithmeticError`) for a method that failed on valid input, on any device.

use kernel_suite::conv::{self, Variant};
use kernel_suite::lombscargle as ls;
use kernel_suite::{Device, Error, Queue};
use ndarray::{Array2, ArrayView2};
use numpy::{IntoPyArray, PyArray1, PyReadonlyArray1, PyReadonlyArray2, PyUntypedArrayMethods};
use pyo3::exceptions::{PyNotImplementedError, PyRuntimeError, PyUserWarning, PyValueError};
use pyo3::prelude::*;
use std::cell::{OnceCell, RefCell};
use std::collections::HashMap;

mod arrays;
mod spiral;
mod svd;
use arrays::{Dtype, ForeignArray, Memory, Pending};

pyo3::create_exception!(
    _native,
    CudaError,
    PyRuntimeError,
    "A CUDA failure: the message names the call or the kernel."
);

pyo3::create_exception!(
    _native,
    NumericalError,
    pyo3::exceptions::PyArithmeticError,
    "A numerical method failed on valid input (it did not converge, or its result failed a consistency check), on any device."
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
    /// This Python thread's GPUs by ordinal (or why one cannot be used), each opened once, in the
    /// primary context PyTorch and CuPy use, and never dropped: CUDA objects dropped at interpreter
    /// exit crash the process.
    static GPUS: RefCell<HashMap<u32, Result<&'static Device, String>>> = RefCell::new(HashMap::new());
    static SIMULATOR: OnceCell<&'static Device> = const { OnceCell::new() };
}

/// GPU `ordinal`, its context current on this thread.
fn gpu_at(ordinal: u32) -> Result<&'static Device, String> {
    let device = GPUS.with(|g| {
        g.borrow_mut()
            .entry(ordinal)
            .or_insert_with(|| {
                Device::gpu(ordinal).map(|d| &*Box::leak(Box::new(d))).map_err(|e| e.to_string())
            })
            .clone()
    })?;
    device.make_current().map_err(|e| e.to_string())?;
    Ok(device)
}

fn gpu() -> Result<&'static Device, String> {
    gpu_at(0)
}

fn simulator() -> &'static Device {
    SIMULATOR.with(|s| *s.get_or_init(|| Box::leak(Box::new(Device::simulator()))))
}

/// The target of `device` (`None`: the GPU if one is usable, else the CPU reference with a warning).
fn target(py: Python<'_>, device: Option<&str>) -> PyResult<Target> {
    match device {
        Some("gpu") => gpu().map(Target::Gpu).map_err(CudaError::new_err),
        Some("sim") => Ok(Target::Simulator(simulator())),
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
        e @ Error::Numerical(_) => NumericalError::new_err(e.to_string()),
        e @ Error::File { .. } => pyo3::exceptions::PyOSError::new_err(e.to_string()),
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

/// The device that runs on arrays in `memory` (all the arrays' memory) for `device`: their GPU, or
/// the simulator for host arrays with `device="sim"`.
fn device_for(memory: Memory, device: Option<&str>) -> PyResult<&'static Device> {
    match (memory, device) {
        (Memory::Gpu(ordinal), None | Some("gpu")) => gpu_at(ordinal).map_err(CudaError::new_err),
        (Memory::Host, Some("sim")) => Ok(simulator()),
        (memory, device) => Err(PyValueError::new_err(format!(
            "arrays in {memory} with device={device:?}: GPU arrays run on their GPU (device=None or \"gpu\"); \
             host arrays run in the simulator in place with device=\"sim\" (NumPy arrays also on \"gpu\" or \"cpu\", \
             copied)"
        ))),
    }
}

/// Learns where every array lives, checks they share it, opens that device and the caller's queue
/// on it (`stream`), and imports the arrays in order after the producers' pending work.
fn import_all<'py>(
    arrays: Vec<(&Bound<'py, PyAny>, &'static str)>,
    stream: usize,
    device: Option<&str>,
) -> PyResult<(&'static Device, Queue, Vec<ForeignArray>)> {
    let pending = arrays.into_iter().map(|(a, name)| Pending::new(a, name)).collect::<PyResult<Vec<_>>>()?;
    let memory = pending[0].memory();
    if let Some(other) = pending.iter().find(|p| p.memory() != memory) {
        return Err(PyValueError::new_err(format!(
            "the arrays are on different devices: {memory} and {}",
            other.memory()
        )));
    }
    let target = device_for(memory, device)?;
    // SAFETY: the Python layer passes the caller's current stream (or `stream=`) of this GPU, which
    // lives for the call.
    let queue = unsafe { target.caller_queue(stream) };
    let arrays =
        pending.into_iter().map(|p| p.import(target, &queue, stream)).collect::<PyResult<Vec<_>>>()?;
    Ok((target, queue, arrays))
}

/// Checks that `out` can take a result: writable and apart from every input.
fn check_output(out: &ForeignArray, inputs: &[&ForeignArray]) -> PyResult<()> {
    out.expect_writable()?;
    if inputs.iter().any(|i| out.overlaps(i)) {
        return Err(PyValueError::new_err(
            "out overlaps an input: the kernels read the inputs while they write out",
        ));
    }
    Ok(())
}

/// `convolve` on arrays of another library, in place: `image` and `weights` read, `out` written,
/// queued on the caller's `stream` (a raw `CUstream`) without waiting. The Python layer allocates
/// `out` with the input's library.
#[pyfunction]
#[pyo3(signature = (image, weights, out, *, stream, device = None))]
fn _convolve_into(
    py: Python<'_>,
    image: &Bound<'_, PyAny>,
    weights: &Bound<'_, PyAny>,
    out: &Bound<'_, PyAny>,
    stream: usize,
    device: Option<&str>,
) -> PyResult<()> {
    let (target, queue, arrays) =
        import_all(vec![(image, "image"), (weights, "weights"), (out, "out")], stream, device)?;
    let [image, weights, out] = &arrays[..] else { unreachable!("three arrays imported") };
    image.expect(2, None)?;
    weights.expect(2, Some(image.dtype))?;
    out.expect(2, Some(image.dtype))?;
    if out.shape != image.shape {
        return Err(PyValueError::new_err(format!(
            "out has shape {:?}, the image {:?}",
            out.shape, image.shape
        )));
    }
    check_output(out, &[image, weights])?;
    let dims = conv::Dims {
        rows: image.shape[0],
        cols: image.shape[1],
        mask_rows: weights.shape[0],
        mask_cols: weights.shape[1],
    };
    let work = OnThisThread((target, &queue, image, weights, out));
    py.detach(move || {
        let (target, queue, image, weights, out) = work.get();
        // SAFETY: each view's dtype was checked above, and its memory is the target's (`import_all`);
        // `out` overlaps no input.
        unsafe {
            match image.dtype {
                Dtype::F32 => conv::launch_on(
                    target,
                    queue,
                    Variant::Tiled,
                    dims,
                    image.view(),
                    weights.view(),
                    out.view_mut(),
                ),
                Dtype::F64 => {
                    conv::launch_f64_on(target, queue, dims, image.view(), weights.view(), out.view_mut())
                }
            }
        }
    })
    .map_err(to_py)
}

/// `lombscargle` on float64 arrays of another library, in place: `x`, `y` (centred by the caller if
/// asked) and `freqs` read, `out` written with every power times `scale`, queued on the caller's
/// `stream` without waiting.
#[pyfunction]
#[pyo3(signature = (x, y, freqs, out, *, scale, stream, device = None))]
#[allow(clippy::too_many_arguments)]
fn _lombscargle_into(
    py: Python<'_>,
    x: &Bound<'_, PyAny>,
    y: &Bound<'_, PyAny>,
    freqs: &Bound<'_, PyAny>,
    out: &Bound<'_, PyAny>,
    scale: f64,
    stream: usize,
    device: Option<&str>,
) -> PyResult<()> {
    let (target, queue, arrays) =
        import_all(vec![(x, "x"), (y, "y"), (freqs, "freqs"), (out, "out")], stream, device)?;
    let [x, y, freqs, out] = &arrays[..] else { unreachable!("four arrays imported") };
    for a in [x, y, freqs, out] {
        a.expect(1, Some(Dtype::F64))?;
    }
    check_output(out, &[x, y, freqs])?;
    let work = OnThisThread((target, &queue, x, y, freqs, out));
    py.detach(move || {
        let (target, queue, x, y, freqs, out) = work.get();
        // SAFETY: float64 arrays (checked above) in the target's memory; `out` overlaps no input.
        unsafe {
            ls::launch_precise_f64_on(target, queue, x.view(), y.view(), freqs.view(), scale, out.view_mut())
        }
    })
    .map_err(to_py)
}

/// The extension module.
#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("CudaError", m.py().get_type::<CudaError>())?;
    m.add("NumericalError", m.py().get_type::<NumericalError>())?;
    m.add_function(wrap_pyfunction!(convolve, m)?)?;
    m.add_function(wrap_pyfunction!(lombscargle, m)?)?;
    m.add_function(wrap_pyfunction!(_convolve_into, m)?)?;
    m.add_function(wrap_pyfunction!(_lombscargle_into, m)?)?;
    m.add_function(wrap_pyfunction!(svd::_svd, m)?)?;
    m.add_function(wrap_pyfunction!(svd::_reconstruct, m)?)?;
    m.add_function(wrap_pyfunction!(svd::_svd_into, m)?)?;
    m.add_function(wrap_pyfunction!(svd::_reconstruct_into, m)?)?;
    m.add_function(wrap_pyfunction!(spiral::_spiral, m)?)?;
    m.add_function(wrap_pyfunction!(spiral::_random_spiral_config, m)?)?;
    Ok(())
}
