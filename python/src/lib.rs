//! `kernel_suite._native`: the suite's kernels as Python functions on NumPy arrays and, in place,
//! on the arrays of other libraries, through the `pykernels` layer.
//!
//! Each call validates everything on the host before a launch (a device-side trap would poison the
//! process's CUDA context), runs on the device the caller picks, and turns every error into a Python
//! exception: `ValueError` for bad arguments, `NotImplementedError` for SciPy options the kernels do
//! not have, `CudaError` (a `RuntimeError`) for the GPU's failures, `OutOfMemoryError` (a
//! `CudaError` and a `MemoryError`) for a buffer the device cannot hold, `NumericalError` (an
//! `ArithmeticError`) for a method that failed on valid input, on any device.

use kernel_suite::conv::{self, Variant};
use kernel_suite::lombscargle as ls;
use ndarray::{Array2, ArrayView2};
use numpy::{IntoPyArray, PyArray1, PyReadonlyArray1, PyReadonlyArray2, PyUntypedArrayMethods};
use pykernels::Dtype;
use pykernels::devices::{Target, check_output, detached, import_all, target};
use pyo3::exceptions::{PyNotImplementedError, PyValueError};
use pyo3::prelude::*;

mod saxpy;
mod spiral;
mod svd;

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
        let result = detached(py, || convolve_f32(&target, image, weights))?;
        return Ok(result.into_pyarray(py).into_any());
    }
    if let (Ok(image), Ok(weights)) =
        (image.extract::<PyReadonlyArray2<f64>>(), weights.extract::<PyReadonlyArray2<f64>>())
    {
        let (image, weights) = (image.as_array(), weights.as_array());
        let result = detached(py, || convolve_f64(&target, image, weights))?;
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
    let power = detached(py, || match target {
        Target::Gpu(d) | Target::Simulator(d) => {
            let options = ls::Options { precenter, normalize, ..ls::Options::default() };
            ls::lombscargle(d, &x, &y, &freqs, &options)
        }
        Target::Cpu => ls::validate(&x, &y, &freqs)
            .and_then(|()| ls::lombscargle_reference(&x, &y, &freqs, precenter, normalize)),
    })?;
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
    let (target, queue, arrays) = import_all(
        &[(image, "image"), (weights, "weights"), (out, "out")],
        &[Dtype::F32, Dtype::F64],
        stream,
        device,
    )?;
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
    detached(py, || {
        // SAFETY: each view's dtype was checked above, and its memory is the target's (`import_all`);
        // `out` overlaps no input.
        unsafe {
            match image.dtype {
                Dtype::F32 => conv::launch_on(
                    target,
                    &queue,
                    Variant::Tiled,
                    dims,
                    image.view(),
                    weights.view(),
                    out.view_mut(),
                ),
                Dtype::F64 => {
                    conv::launch_f64_on(target, &queue, dims, image.view(), weights.view(), out.view_mut())
                }
                other => unreachable!("import_all took a {other} image"),
            }
        }
    })
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
        import_all(&[(x, "x"), (y, "y"), (freqs, "freqs"), (out, "out")], &[Dtype::F64], stream, device)?;
    let [x, y, freqs, out] = &arrays[..] else { unreachable!("four arrays imported") };
    for a in [x, y, freqs, out] {
        a.expect(1, Some(Dtype::F64))?;
    }
    check_output(out, &[x, y, freqs])?;
    // SAFETY: float64 arrays (checked above) in the target's memory; `out` overlaps no input.
    detached(py, || unsafe {
        ls::launch_precise_f64_on(target, &queue, x.view(), y.view(), freqs.view(), scale, out.view_mut())
    })
}

/// The extension module.
#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    pykernels::register(m, &kernel_suite::KERNELS)?;
    m.add_function(wrap_pyfunction!(convolve, m)?)?;
    m.add_function(wrap_pyfunction!(lombscargle, m)?)?;
    m.add_function(wrap_pyfunction!(_convolve_into, m)?)?;
    m.add_function(wrap_pyfunction!(_lombscargle_into, m)?)?;
    m.add_function(wrap_pyfunction!(svd::_svd, m)?)?;
    m.add_function(wrap_pyfunction!(svd::_reconstruct, m)?)?;
    m.add_function(wrap_pyfunction!(svd::_svd_into, m)?)?;
    m.add_function(wrap_pyfunction!(svd::_svd_f64, m)?)?;
    m.add_function(wrap_pyfunction!(svd::_svd_f64_into, m)?)?;
    m.add_function(wrap_pyfunction!(svd::_reconstruct_into, m)?)?;
    m.add_function(wrap_pyfunction!(spiral::_spiral, m)?)?;
    m.add_function(wrap_pyfunction!(spiral::_random_spiral_config, m)?)?;
    // The kernel families' functions on arrays of any library (scripts/new-family adds each here).
    m.add_function(wrap_pyfunction!(saxpy::saxpy, m)?)?;
    Ok(())
}
