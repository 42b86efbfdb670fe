//! Where a call runs: the GPUs (each opened once per Python thread, in the primary context PyTorch
//! and CuPy use), the simulator, or a CPU reference; and the arrays of a call imported together on
//! their device.

use crate::arrays::{Dtype, ForeignArray, Memory, Pending};
use crate::{CudaError, to_py};
use gpu_launch::{Device, EmbeddedKernels, Queue};
use pyo3::exceptions::{PyUserWarning, PyValueError};
use pyo3::prelude::*;
use std::cell::{OnceCell, RefCell};
use std::collections::HashMap;
use std::sync::OnceLock;

/// The extension's kernels, which every GPU loads: set once by [`crate::register`] when the
/// extension's module is made.
static KERNELS: OnceLock<&'static EmbeddedKernels> = OnceLock::new();

/// Makes `kernels` the module GPUs load (the first call's, if called again).
pub(crate) fn use_kernels(kernels: &'static EmbeddedKernels) {
    KERNELS.get_or_init(|| kernels);
}

thread_local! {
    /// This Python thread's GPUs by ordinal (or why one cannot be used), each opened once, in the
    /// primary context PyTorch and CuPy use, and never dropped: CUDA objects dropped at interpreter
    /// exit crash the process.
    static GPUS: RefCell<HashMap<u32, Result<&'static Device, String>>> = RefCell::new(HashMap::new());
    static SIMULATOR: OnceCell<&'static Device> = const { OnceCell::new() };
}

/// GPU `ordinal`, its context current on this thread, or why it cannot be used.
pub fn gpu_at(ordinal: u32) -> Result<&'static Device, String> {
    let device = GPUS.with(|g| {
        g.borrow_mut()
            .entry(ordinal)
            .or_insert_with(|| {
                let kernels =
                    KERNELS.get().ok_or("the extension registered no kernels (pykernels::register)")?;
                Device::gpu(ordinal, kernels).map(|d| &*Box::leak(Box::new(d))).map_err(|e| e.to_string())
            })
            .clone()
    })?;
    device.make_current().map_err(|e| e.to_string())?;
    Ok(device)
}

/// This thread's simulator.
pub fn simulator() -> &'static Device {
    SIMULATOR.with(|s| *s.get_or_init(|| Box::leak(Box::new(Device::simulator()))))
}

/// Where a call on host arrays runs.
pub enum Target {
    /// GPU 0.
    Gpu(&'static Device),
    /// The simulator.
    Simulator(&'static Device),
    /// The binding's CPU reference.
    Cpu,
}

/// The target of `device` (`"gpu"`, `"sim"`, `"cpu"`; `None`: GPU 0 if it is usable, else the
/// CPU reference with a warning), for a binding with a CPU reference.
pub fn target(py: Python<'_>, device: Option<&str>) -> PyResult<Target> {
    match device {
        Some("gpu") => gpu_at(0).map(Target::Gpu).map_err(CudaError::new_err),
        Some("sim") => Ok(Target::Simulator(simulator())),
        Some("cpu") => Ok(Target::Cpu),
        None => match gpu_at(0) {
            Ok(d) => Ok(Target::Gpu(d)),
            Err(why) => {
                warn(py, &format!("no GPU ({why}): running the CPU reference"))?;
                Ok(Target::Cpu)
            }
        },
        Some(other) => {
            Err(PyValueError::new_err(format!("device must be \"gpu\", \"sim\" or \"cpu\", not {other:?}")))
        }
    }
}

/// A `UserWarning` with `message`, pointing at the caller's line.
pub(crate) fn warn(py: Python<'_>, message: &str) -> PyResult<()> {
    let message = std::ffi::CString::new(message).expect("no NUL in the message");
    PyErr::warn(py, &py.get_type::<PyUserWarning>(), &message, 1)
}

/// The device that runs, in place, on arrays in `memory` for `device`: their GPU, or the simulator
/// for host arrays with `device="sim"`.
pub fn device_for(memory: Memory, device: Option<&str>) -> PyResult<&'static Device> {
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

/// Learns where every array of `arrays` (object and name; each of a dtype of `accepted`) lives,
/// checks that they share it, opens the device that runs on them in place ([`device_for`]) and the
/// caller's queue on it (`stream`, a raw `CUstream`), and imports the arrays in order after the
/// producers' pending work. Nothing is exported before the checks.
pub fn import_all<'py>(
    arrays: &[(&Bound<'py, PyAny>, &'static str)],
    accepted: &[Dtype],
    stream: usize,
    device: Option<&str>,
) -> PyResult<(&'static Device, Queue, Vec<ForeignArray>)> {
    let pending =
        arrays.iter().map(|(a, name)| Pending::new(a, name, accepted)).collect::<PyResult<Vec<_>>>()?;
    let memory = pending[0].memory();
    if let Some(other) = pending.iter().find(|p| p.memory() != memory) {
        return Err(different_devices(memory, other.memory()));
    }
    let target = device_for(memory, device)?;
    // SAFETY: the binding passes the caller's current stream (or `stream=`) of this GPU, which
    // lives for the call.
    let queue = unsafe { target.caller_queue(stream) };
    let arrays =
        pending.into_iter().map(|p| p.import(target, &queue, stream)).collect::<PyResult<Vec<_>>>()?;
    Ok((target, queue, arrays))
}

pub(crate) fn different_devices(first: Memory, other: Memory) -> PyErr {
    PyValueError::new_err(format!("the arrays are on different devices: {first} and {other}"))
}

/// Checks that `out` can take a result: writable and apart from every input.
pub fn check_output(out: &ForeignArray, inputs: &[&ForeignArray]) -> PyResult<()> {
    out.expect_writable()?;
    if let Some(input) = inputs.iter().find(|i| out.overlaps(i)) {
        return Err(PyValueError::new_err(format!(
            "{} overlaps {}: the kernels read the inputs while they write the outputs",
            out.name, input.name
        )));
    }
    Ok(())
}

/// `work` run with the GIL released (other Python threads run meanwhile), its error a Python
/// exception ([`to_py`]). `work` runs on this thread, so it may use this thread's devices and
/// borrow anything, as the launches of a binding do.
pub fn detached<R>(py: Python<'_>, work: impl FnOnce() -> gpu_launch::Result<R>) -> PyResult<R> {
    let work = OnThisThread(work);
    py.detach(move || OnThisThread(work.get()())).get().map_err(to_py)
}

/// A value used, with the GIL released, on the thread that holds it: `Python::detach` runs its
/// closure on the calling thread, and the devices here are that thread's own.
struct OnThisThread<T>(T);

// SAFETY: only ever moved into a closure that `Python::detach` runs on the same thread, and out of it.
unsafe impl<T> Send for OnThisThread<T> {}

impl<T> OnThisThread<T> {
    fn get(self) -> T {
        self.0
    }
}
