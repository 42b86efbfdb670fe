//! `saxpy(a, x, y)`: the SAXPY kernel (`y ← a·x + y`) on arrays of any library, through the
//! `pykernels` layer: a binding of a kernel in a few lines.

use kernel_suite::LaunchConfig;
use kernel_suite::saxpy::BLOCK;
use pykernels::Call;
use pyo3::prelude::*;

/// `y ← a·x + y` for float32 arrays `x` and `y` of one shape, in place in `y`, which is returned.
/// GPU arrays (PyTorch, CuPy, …) are updated in place on the caller's stream (or `stream=`) without
/// waiting; host arrays (NumPy) are copied to the GPU and back, or run in the simulator with
/// `device="sim"` (and, with a warning, when no GPU is usable).
#[pyfunction]
#[pyo3(signature = (a, x, y, *, stream = None, device = None))]
pub fn saxpy<'py>(
    py: Python<'py>,
    a: f32,
    x: &Bound<'py, PyAny>,
    y: &Bound<'py, PyAny>,
    stream: Option<&Bound<'py, PyAny>>,
    device: Option<&str>,
) -> PyResult<Bound<'py, PyAny>> {
    let call = Call::new(py, device, stream)?;
    let x = call.input::<f32>(x, "x")?;
    let mut y = call.inout::<f32>(y, "y")?;
    x.expect_shape(y.shape())?;
    // SAFETY: one thread per element, each writing its own `y[i]`; `x` and `y` have one length.
    call.launch(|device, queue| unsafe {
        let config = LaunchConfig::for_1d(x.len(), BLOCK);
        device.launch_on(queue, &kernels::saxpy::SAXPY, config, (a, x.view(), y.view_mut()))
    })?;
    y.into_result()
}
