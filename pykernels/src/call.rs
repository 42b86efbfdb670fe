//! [`Call`]: one call of a kernel from Python, with its arrays.
//!
//! The first array decides where the call runs. GPU arrays (PyTorch, CuPy, JAX through DLPack;
//! Numba, PyCUDA through `__cuda_array_interface__`) are used in place, on their GPU, on the
//! caller's stream, and nothing waits. Host arrays (NumPy, PyTorch on the CPU) are copied to the
//! device that runs the call — the GPU, or the simulator with `device="sim"` or, with a warning,
//! when no GPU is usable — and the outputs copied back when the binding returns them. Every other
//! array must be in the same memory, and arrays are checked as they come: dtype, C-contiguity,
//! alignment, not empty, written arrays apart from every other array; shapes with
//! [`Input::expect_shape`] or when an output is made.

use crate::arrays::{ArrayElement, ForeignArray, Memory, Pending};
use crate::devices::{detached, different_devices, gpu_at, simulator, warn};
use crate::library::{caller_stream, empty_like, stream_handle};
use gpu_launch::{Buffer, BufferView, BufferViewMut, Device, Queue};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use std::cell::{OnceCell, RefCell};

/// One call of a kernel from Python: the device and queue it runs on, found from its first array,
/// and its arrays, checked and ready for the launch. A binding makes one per call:
///
/// ```ignore
/// let call = Call::new(py, device, stream)?;
/// let x = call.input::<f32>(x, "x")?;                          // any shape
/// let mut out = call.output::<f32>(out, "out", x.shape())?;    // `out=`, or allocated like `x`
/// // SAFETY: the kernel's contract, as in its Rust wrapper.
/// call.launch(|device, queue| unsafe {
///     device.launch_on(queue, &kernels::scale::SCALE, LaunchConfig::for_1d(x.len(), 256), (x.view(), out.view_mut()))
/// })?;
/// out.into_result()                                            // the array, written
/// ```
pub struct Call<'py> {
    py: Python<'py>,
    requested: Requested,
    /// The `stream=` argument's handle.
    stream: Option<usize>,
    /// Set by the first array.
    place: OnceCell<Place<'py>>,
    /// The arrays so far, for the overlap checks.
    extents: RefCell<Vec<Extent>>,
}

/// The `device=` argument.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Requested {
    /// None: GPU arrays on their GPU, host arrays on GPU 0 if usable, else in the simulator.
    Auto,
    Gpu,
    Simulator,
}

/// Where a call runs.
struct Place<'py> {
    /// Where its arrays are.
    memory: Memory,
    device: &'static Device,
    /// The caller's stream as a queue, for GPU arrays (host arrays use the device's own queue).
    caller: Option<Queue>,
    /// The raw caller's stream (0 for host arrays).
    stream: usize,
    /// The first array: new outputs are allocated by its library, on its device.
    like: Bound<'py, PyAny>,
}

impl Place<'_> {
    fn queue(&self) -> &Queue {
        self.caller.as_ref().unwrap_or_else(|| self.device.queue())
    }
}

/// The bytes an array of the call spans.
struct Extent {
    memory: Memory,
    start: usize,
    end: usize,
    name: &'static str,
    written: bool,
}

impl<'py> Call<'py> {
    /// A call with the binding's `device=` (`None`, `"gpu"` or `"sim"`) and `stream=` (an int
    /// handle, a `torch.cuda.Stream`, a `cupy.cuda.Stream` or an object with `__cuda_stream__`:
    /// where GPU arrays' work is queued instead of the current stream of the first array's library).
    pub fn new(py: Python<'py>, device: Option<&str>, stream: Option<&Bound<'py, PyAny>>) -> PyResult<Self> {
        let requested = match device {
            None => Requested::Auto,
            Some("gpu") => Requested::Gpu,
            Some("sim") => Requested::Simulator,
            Some(other) => {
                return Err(PyValueError::new_err(format!(
                    "device must be \"gpu\" or \"sim\" (or None: GPU arrays on their GPU, host arrays on the GPU when \
                     one is usable, else in the simulator), not {other:?}"
                )));
            }
        };
        let stream = stream.map(stream_handle).transpose()?;
        Ok(Call { py, requested, stream, place: OnceCell::new(), extents: RefCell::new(Vec::new()) })
    }

    /// The array `object` (named `name` in errors), read by the kernel: of dtype `T`, any shape.
    pub fn input<T: ArrayElement>(
        &self,
        object: &Bound<'py, PyAny>,
        name: &'static str,
    ) -> PyResult<Input<T>> {
        let (array, place) = self.import::<T>(object, name, false)?;
        let staged = self.stage(place, &array, true)?;
        Ok(Input { array, staged })
    }

    /// The array `object`, read and written by the kernel (updated in place): of dtype `T`, any
    /// shape, writable.
    pub fn inout<T: ArrayElement>(
        &self,
        object: &Bound<'py, PyAny>,
        name: &'static str,
    ) -> PyResult<Output<'py, T>> {
        let (array, place) = self.import::<T>(object, name, true)?;
        let staged = self.stage(place, &array, true)?;
        Ok(Output { object: object.clone(), array, staged: staged.map(|b| (place.device, b)) })
    }

    /// An array the kernel writes, of dtype `T` and `shape`: `out` (the binding's `out=`), checked,
    /// or a new array allocated by the first array's library on its device (a NumPy array when
    /// the call has no other array).
    pub fn output<T: ArrayElement>(
        &self,
        out: Option<&Bound<'py, PyAny>>,
        name: &'static str,
        shape: &[usize],
    ) -> PyResult<Output<'py, T>> {
        let object = match out {
            Some(out) => out.clone(),
            None => match self.place.get() {
                Some(place) => empty_like(&place.like, T::DTYPE, shape)?,
                None => self.py.import("numpy")?.call_method1("empty", (shape.to_vec(), T::DTYPE.name()))?,
            },
        };
        let (array, place) = self.import::<T>(&object, name, true)?;
        expect_shape(&array, shape)?;
        let staged = self.stage(place, &array, false)?;
        Ok(Output { object, array, staged: staged.map(|b| (place.device, b)) })
    }

    /// As [`Call::output`], but every element is 0 before the kernel runs: for a kernel that
    /// accumulates into its output (a histogram's `atomic_add`s, a sum over blocks), which
    /// [`Call::output`]'s memory — uninitialised, or whatever `out=` held — would corrupt. The zeroing
    /// is a memset queued on the call's queue (the caller's stream for GPU arrays) before the
    /// kernels [`Call::launch`] queues, so nothing waits and no zeroing kernel is needed; in the
    /// simulator the memory is zero-filled at once.
    pub fn zeroed_output<T: ArrayElement>(
        &self,
        out: Option<&Bound<'py, PyAny>>,
        name: &'static str,
        shape: &[usize],
    ) -> PyResult<Output<'py, T>> {
        let mut output = self.output::<T>(out, name, shape)?;
        self.launch(|device, queue| device.zero_on(queue, output.view_mut()))?;
        Ok(output)
    }

    /// Runs `launch` (the binding's kernel launches on the device and queue given) with the GIL
    /// released. GPU arrays: queued on the caller's stream, not waited for; host arrays: done
    /// when their outputs are returned ([`Output::into_result`]).
    pub fn launch<R>(&self, launch: impl FnOnce(&Device, &Queue) -> gpu_launch::Result<R>) -> PyResult<R> {
        let place = self.place.get().ok_or_else(|| PyValueError::new_err("a kernel call needs an array"))?;
        detached(self.py, || launch(place.device, place.queue()))
    }

    /// Imports `object` as an array of `T` (to be `written` or only read), where the call runs.
    fn import<T: ArrayElement>(
        &self,
        object: &Bound<'py, PyAny>,
        name: &'static str,
        written: bool,
    ) -> PyResult<(ForeignArray, &Place<'py>)> {
        let pending = Pending::new(object, name, &[T::DTYPE])?;
        let place = match self.place.get() {
            Some(place) if place.memory != pending.memory() => {
                return Err(different_devices(place.memory, pending.memory()));
            }
            Some(place) => place,
            None => {
                let place = self.place_for(object, pending.memory())?;
                self.place.get_or_init(|| place)
            }
        };
        let array = pending.import(place.device, place.queue(), place.stream)?;
        if array.is_empty() {
            return Err(PyValueError::new_err(format!(
                "{name} is empty (shape {})",
                shape_text(&array.shape)
            )));
        }
        if written {
            array.expect_writable()?;
        }
        let extent = Extent {
            memory: array.memory,
            start: array.address,
            end: array.address + array.len() * T::DTYPE.size(),
            name,
            written,
        };
        let mut extents = self.extents.borrow_mut();
        if let Some(other) = extents.iter().find(|e| {
            (e.written || written)
                && e.memory == extent.memory
                && e.start < extent.end
                && extent.start < e.end
        }) {
            return Err(PyValueError::new_err(format!(
                "{name} overlaps {}: an array the kernel writes must not share memory with another",
                other.name
            )));
        }
        extents.push(extent);
        Ok((array, place))
    }

    /// Where the call runs, from its first array `object` in `memory`.
    fn place_for(&self, object: &Bound<'py, PyAny>, memory: Memory) -> PyResult<Place<'py>> {
        let like = object.clone();
        if let Memory::Gpu(ordinal) = memory {
            if self.requested == Requested::Simulator {
                return Err(PyValueError::new_err(
                    "device=\"sim\" runs host arrays (NumPy); GPU arrays run on their GPU (device=None or \"gpu\")",
                ));
            }
            let device = gpu_at(ordinal)?;
            let stream = match self.stream {
                Some(stream) => stream,
                None => caller_stream(None, &[object])?,
            };
            // SAFETY: the caller's stream (its library's current one, or `stream=`) on this GPU,
            // which outlives the call.
            let caller = Some(unsafe { device.caller_queue(stream) });
            return Ok(Place { memory, device, caller, stream, like });
        }
        if self.stream.is_some() {
            return Err(PyValueError::new_err(
                "stream= is for GPU arrays; host arrays are copied and waited for",
            ));
        }
        let device = match self.requested {
            Requested::Gpu => gpu_at(0)?,
            Requested::Simulator => simulator()?,
            Requested::Auto => match gpu_at(0) {
                Ok(gpu) => gpu,
                Err(why) => {
                    warn(self.py, &format!("no GPU ({why}): running the kernel in the simulator"))?;
                    simulator()?
                }
            },
        };
        Ok(Place { memory, device, caller: None, stream: 0, like })
    }

    /// For a host array, its copy on the device (`upload`: with its elements, else uninitialised);
    /// `None` for a GPU array, used in place.
    fn stage<T: ArrayElement>(
        &self,
        place: &Place<'py>,
        array: &ForeignArray,
        upload: bool,
    ) -> PyResult<Option<Buffer<T>>> {
        if place.memory != Memory::Host {
            return Ok(None);
        }
        let device = place.device;
        detached(self.py, || {
            if upload {
                // SAFETY: a host array of `len` elements of `T` (checked on import), kept alive by
                // `array`; read only while this copy runs.
                device.upload(unsafe { std::slice::from_raw_parts(array.address as *const T, array.len()) })
            } else {
                device.alloc(array.len())
            }
        })
        .map(Some)
    }
}

/// An array a kernel reads (see [`Call::input`]).
pub struct Input<T: ArrayElement> {
    array: ForeignArray,
    /// Its copy on the device, for a host array.
    staged: Option<Buffer<T>>,
}

// Arrays of a call are never empty ([`Call::input`] refuses them): no `is_empty`.
#[allow(clippy::len_without_is_empty)]
impl<T: ArrayElement> Input<T> {
    /// Sides, outermost first.
    pub fn shape(&self) -> &[usize] {
        &self.array.shape
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        self.array.len()
    }

    /// Checks that the array has `shape`: a `ValueError` naming both.
    pub fn expect_shape(&self, shape: &[usize]) -> PyResult<()> {
        expect_shape(&self.array, shape)
    }

    /// The elements as the kernel's `&[T]`, on the device the call runs on.
    pub fn view(&self) -> BufferView<'_, T> {
        match &self.staged {
            Some(buffer) => buffer.into(),
            // SAFETY: GPU memory of the call's device (the call imported it there).
            None => unsafe { self.array.view() },
        }
    }
}

/// An array a kernel writes (see [`Call::output`], [`Call::zeroed_output`] and [`Call::inout`]):
/// hand it back to Python with [`Output::into_result`].
#[must_use = "an output is written back to its array by `into_result`"]
pub struct Output<'py, T: ArrayElement> {
    object: Bound<'py, PyAny>,
    array: ForeignArray,
    /// Its copy on the device, for a host array.
    staged: Option<(&'static Device, Buffer<T>)>,
}

// Arrays of a call are never empty ([`Call::output`] refuses them): no `is_empty`.
#[allow(clippy::len_without_is_empty)]
impl<'py, T: ArrayElement> Output<'py, T> {
    /// Sides, outermost first.
    pub fn shape(&self) -> &[usize] {
        &self.array.shape
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        self.array.len()
    }

    /// The elements as the kernel's `&mut [T]`, on the device the call runs on.
    pub fn view_mut(&mut self) -> BufferViewMut<'_, T> {
        match &mut self.staged {
            Some((_, buffer)) => buffer.into(),
            // SAFETY: GPU memory of the call's device, written by nothing else in the call (it
            // overlaps no other array of the call, and this view borrows `self` mutably).
            None => unsafe { self.array.view_mut() },
        }
    }

    /// The Python array, written: a host array once the device's copy is back (waiting for the
    /// kernels and reporting their failures), a GPU array at once (its work queued on the caller's
    /// stream).
    pub fn into_result(self) -> PyResult<Bound<'py, PyAny>> {
        if let Some((device, buffer)) = &self.staged {
            let array = &self.array;
            detached(self.object.py(), || {
                // SAFETY: the writable host array of `len` elements of `T` (checked on import),
                // kept alive by `array` and apart from every other array of the call.
                let host = unsafe { std::slice::from_raw_parts_mut(array.address as *mut T, array.len()) };
                device.download_into(buffer, host)
            })?;
        }
        Ok(self.object)
    }
}

fn expect_shape(array: &ForeignArray, shape: &[usize]) -> PyResult<()> {
    if array.shape != shape {
        return Err(PyValueError::new_err(format!(
            "{} has shape {}, expected {}",
            array.name,
            shape_text(&array.shape),
            shape_text(shape)
        )));
    }
    Ok(())
}

/// A shape as Python writes it: `(3,)`, `(2, 5)`.
fn shape_text(shape: &[usize]) -> String {
    match shape {
        [side] => format!("({side},)"),
        _ => format!("({})", shape.iter().map(|s| s.to_string()).collect::<Vec<_>>().join(", ")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::CudaError;
    use gpu_launch::LaunchConfig;
    use gpu_std::{kernel, thread};
    use pyo3::types::PyDict;

    /// Writes `out[i]` for `i <= out.len()`: one thread (the `len`-th) writes past the end, an
    /// off-by-one that faults in the simulator.
    #[kernel]
    pub fn write_past_end(out: &mut [f32]) {
        let i = thread::index_1d() as usize;
        if i <= out.len() {
            out[i] = 1.0;
        }
    }

    /// Runs `test` with NumPy, or skips (saying so) where the interpreter the tests embed has none:
    /// `scripts/python-test.sh`'s environment has it (run with
    /// `PYTHONPATH=target/python-venv/lib/python3.X/site-packages`).
    fn with_numpy(test: &str, run: impl FnOnce(Python<'_>, &Bound<'_, PyModule>)) {
        Python::initialize();
        Python::attach(|py| match py.import("numpy") {
            Ok(numpy) => run(py, &numpy),
            Err(e) => eprintln!("SKIPPED {test}: no NumPy in the embedded Python ({e})"),
        });
    }

    /// Whether every element of the NumPy array `array` is 0.
    fn all_zero(array: &Bound<'_, PyAny>) -> bool {
        array
            .call_method1("__eq__", (0,))
            .and_then(|eq| eq.call_method0("all"))
            .and_then(|a| a.extract())
            .unwrap()
    }

    /// `zeroed_output` hands the kernel zeros where `output`'s memory is not: in the simulator a
    /// staged output starts poisoned (`0xff` bytes, NaN), and an `out=` array filled with 7 must
    /// come back 0 too, not 7 or NaN. Without a kernel, what comes back is what the kernel found.
    #[test]
    fn zeroed_output_is_zero_where_output_is_poisoned() {
        with_numpy("zeroed_output_is_zero_where_output_is_poisoned", |py, numpy| {
            // The control: the memory `output` gives is not zero, so the checks below can fail.
            let call = Call::new(py, Some("sim"), None).unwrap();
            let out = call.output::<f32>(None, "out", &[3, 5]).unwrap().into_result().unwrap();
            assert!(!all_zero(&out), "the simulator's staged output should start poisoned: {out}");

            let call = Call::new(py, Some("sim"), None).unwrap();
            let out = call.zeroed_output::<f32>(None, "out", &[3, 5]).unwrap().into_result().unwrap();
            assert!(all_zero(&out), "a new zeroed output is not zero: {out}");
            assert_eq!(out.getattr("shape").unwrap().extract::<Vec<usize>>().unwrap(), [3, 5]);

            let call = Call::new(py, Some("sim"), None).unwrap();
            let x = numpy.call_method1("arange", (0, 12, 1, "float32")).unwrap();
            let x = call.input::<f32>(&x, "x").unwrap();
            let given = numpy.call_method1("full", (vec![12usize], 7, "float32")).unwrap();
            let out =
                call.zeroed_output::<f32>(Some(&given), "out", x.shape()).unwrap().into_result().unwrap();
            assert!(out.is(&given), "out= must be the array returned");
            assert!(all_zero(&given), "out= filled with 7 is not zeroed: {given}");
        });
    }

    /// A kernel that faults in the simulator reaches Python as the package's `CudaError` (an
    /// `Exception`, not pyo3's `PanicException`, a `BaseException`), with the simulator's report:
    /// the kernel, the block and thread, the source line.
    #[test]
    fn a_simulated_fault_is_a_cuda_error() {
        with_numpy("a_simulated_fault_is_a_cuda_error", |py, _| {
            let call = Call::new(py, Some("sim"), None).unwrap();
            let mut out = call.zeroed_output::<f32>(None, "out", &[100]).unwrap();
            // SAFETY: the simulator, where the write past the end is caught and reported.
            let err = call
                .launch(|device, queue| unsafe {
                    device.launch_on(queue, &WRITE_PAST_END, LaunchConfig::for_1d(128, 64), (out.view_mut(),))
                })
                .expect_err("the write past the end must fail");
            assert!(err.is_instance_of::<CudaError>(py), "{err} is not a CudaError");
            assert!(err.is_instance_of::<pyo3::exceptions::PyException>(py), "{err} is not an Exception");
            let text = err.value(py).to_string();
            for part in
                ["kernel `write_past_end`", "block (1, 0, 0)", "thread (36, 0, 0)", "pykernels/src/call.rs:"]
            {
                assert!(text.contains(part), "the message lacks {part:?}: {text}");
            }
            // Python's own `except Exception` catches it.
            let globals = PyDict::new(py);
            globals.set_item("err", err.value(py)).unwrap();
            py.run(c"try:\n    raise err\nexcept Exception as e:\n    caught = e", Some(&globals), None)
                .unwrap();
            assert!(globals.get_item("caught").unwrap().is_some());
        });
    }
}
