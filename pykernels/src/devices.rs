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

/// GPU `ordinal`, its context current on this thread, or why it cannot be used. A GPU too full to
/// open (another library holds its memory) is tried again at the next call; other failures are
/// kept.
pub fn gpu_at(ordinal: u32) -> Result<&'static Device, Unusable> {
    let device = GPUS.with(|g| {
        if let Some(opened) = g.borrow().get(&ordinal) {
            return opened.clone().map_err(|message| Unusable { message, out_of_memory: false });
        }
        let kernels = KERNELS.get().ok_or_else(|| Unusable {
            message: "the extension registered no kernels (pykernels::register)".into(),
            out_of_memory: false,
        })?;
        match Device::gpu(ordinal, kernels) {
            Ok(device) => {
                let device: &'static Device = Box::leak(Box::new(device));
                g.borrow_mut().insert(ordinal, Ok(device));
                Ok(device)
            }
            Err(e) if e.is_out_of_memory() => Err(Unusable { message: e.to_string(), out_of_memory: true }),
            Err(e) => {
                g.borrow_mut().insert(ordinal, Err(e.to_string()));
                Err(Unusable { message: e.to_string(), out_of_memory: false })
            }
        }
    })?;
    device
        .make_current()
        .map_err(|e| Unusable { out_of_memory: e.is_out_of_memory(), message: e.to_string() })?;
    Ok(device)
}

/// Gives the memory that the GPUs opened on this thread keep between calls (their pools' idle
/// memory, up to 512 MiB each) back to the driver, for other libraries or processes: Python's
/// `empty_cache()`, as `torch.cuda.empty_cache()` is PyTorch's.
#[pyfunction]
pub fn empty_cache() -> PyResult<()> {
    let opened: Vec<&'static Device> =
        GPUS.with(|g| g.borrow().values().filter_map(|d| d.as_ref().ok().copied()).collect());
    for device in opened {
        device.make_current().map_err(to_py)?;
        device.release_idle_memory().map_err(to_py)?;
    }
    Ok(())
}

/// Why a GPU cannot be used: in Python an `OutOfMemoryError` where its memory is too full to open
/// it, else a [`CudaError`].
#[derive(Debug, Clone)]
pub struct Unusable {
    /// What failed.
    pub message: String,
    /// Whether it failed for memory.
    pub out_of_memory: bool,
}

impl std::fmt::Display for Unusable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl From<Unusable> for PyErr {
    fn from(unusable: Unusable) -> PyErr {
        if !unusable.out_of_memory {
            return CudaError::new_err(unusable.message);
        }
        Python::attach(|py| match crate::out_of_memory_error(py) {
            Ok(class) => PyErr::from_type(class.clone(), unusable.message),
            Err(failed) => failed,
        })
    }
}

/// For tests: the simulator's device memory, bytes, as for the `svd` command's `--device sim`; a
/// call that needs more runs in parts that fit, or fails with `OutOfMemoryError`, as on a GPU
/// with that much free.
pub const SIM_MEMORY_ENV: &str = "KERNEL_SUITE_SIM_MEMORY";

/// This thread's simulator, with the memory of [`SIM_MEMORY_ENV`] where it is set.
pub fn simulator() -> PyResult<&'static Device> {
    SIMULATOR.with(|s| {
        if let Some(device) = s.get() {
            return Ok(*device);
        }
        let device = match std::env::var(SIM_MEMORY_ENV) {
            Ok(text) => {
                let bytes = text.trim().parse().map_err(|_| {
                    PyValueError::new_err(format!("{SIM_MEMORY_ENV}={text:?}: expected a number of bytes"))
                })?;
                Device::simulator_with_memory(bytes, true)
            }
            Err(_) => Device::simulator(),
        };
        Ok(*s.get_or_init(|| Box::leak(Box::new(device))))
    })
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
        Some("gpu") => Ok(Target::Gpu(gpu_at(0)?)),
        Some("sim") => Ok(Target::Simulator(simulator()?)),
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
        (Memory::Gpu(ordinal), None | Some("gpu")) => Ok(gpu_at(ordinal)?),
        (Memory::Host, Some("sim")) => simulator(),
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

/// Runs `work` on the items `0..count` (a batch's images) in parts that fit the device's free
/// memory, as the `svd` job's engine does: all at once, and where a part runs out of device memory
/// ([`gpu_launch::Error::is_out_of_memory`]: another library, PyTorch's cache, holds the rest), again as its
/// first half, and no later part larger; an item that does not fit alone ends it with its error
/// (an `OutOfMemoryError` in Python). The parts' results, in order.
pub fn in_fitting_parts<T>(
    count: usize,
    mut work: impl FnMut(std::ops::Range<usize>) -> gpu_launch::Result<Vec<T>>,
) -> gpu_launch::Result<Vec<T>> {
    let mut results = Vec::with_capacity(count);
    let (mut start, mut most) = (0, count.max(1));
    while start < count {
        let end = count.min(start + most);
        match work(start..end) {
            Ok(part) => {
                results.extend(part);
                start = end;
            }
            Err(e) if e.is_out_of_memory() && end - start > 1 => most = (end - start).div_ceil(2),
            Err(e) => return Err(e),
        }
    }
    Ok(results)
}

#[cfg(test)]
mod tests {
    use super::{Unusable, in_fitting_parts};
    use crate::CudaError;
    use gpu_launch::Error;
    use pyo3::exceptions::PyMemoryError;
    use pyo3::prelude::*;

    /// A GPU too full to open is an `OutOfMemoryError` in Python (a `CudaError` and a
    /// `MemoryError`), another failure to open it a `CudaError` alone; both with the message.
    #[test]
    fn a_gpu_too_full_to_open_is_out_of_memory() {
        Python::initialize();
        Python::attach(|py| {
            let message = "cuModuleLoadData (cubin) failed: out of memory";
            let full = PyErr::from(Unusable { message: message.into(), out_of_memory: true });
            assert!(full.is_instance_of::<CudaError>(py) && full.is_instance_of::<PyMemoryError>(py));
            assert_eq!(full.value(py).to_string(), message);
            let broken = PyErr::from(Unusable { message: "no GPU".into(), out_of_memory: false });
            assert!(broken.is_instance_of::<CudaError>(py) && !broken.is_instance_of::<PyMemoryError>(py));
        });
    }

    /// Work on at most `fits` items at once, recording each part it was given.
    fn parts_of(count: usize, fits: usize) -> (gpu_launch::Result<Vec<usize>>, Vec<(usize, usize)>) {
        let mut tried = Vec::new();
        let result = in_fitting_parts(count, |range| {
            tried.push((range.start, range.end));
            if range.len() > fits {
                return Err(Error::OutOfMemory { bytes: range.len() as u128, free: None });
            }
            Ok(range.map(|i| 10 * i).collect())
        });
        (result, tried)
    }

    /// A part that runs out of memory is tried again as its first half, and later parts are no
    /// larger; the results come back whole and in order.
    #[test]
    fn parts_halve_until_they_fit() {
        let (result, tried) = parts_of(7, 2);
        assert_eq!(result.unwrap(), [0, 10, 20, 30, 40, 50, 60]);
        assert_eq!(tried, [(0, 7), (0, 4), (0, 2), (2, 4), (4, 6), (6, 7)]);
        let (result, tried) = parts_of(3, 3);
        assert_eq!((result.unwrap().len(), tried), (3, vec![(0, 3)]));
    }

    /// An item that does not fit alone ends the work with its error; other errors end it at once.
    #[test]
    fn an_item_too_large_alone_is_its_error() {
        let (result, tried) = parts_of(3, 0);
        assert!(result.unwrap_err().is_out_of_memory());
        assert_eq!(tried, [(0, 3), (0, 2), (0, 1)]);
        let mut calls = 0;
        let other = in_fitting_parts::<u8>(4, |_| {
            calls += 1;
            Err(Error::InvalidInput("bad".into()))
        });
        assert_eq!((other.unwrap_err().to_string(), calls), ("invalid input: bad".to_string(), 1));
    }
}
