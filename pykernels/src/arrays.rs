//! Arrays of other libraries (PyTorch, CuPy, JAX, Numba, NumPy) used in place by the kernels: read
//! through DLPack (`__dlpack__`, with `dlpark`) or `__cuda_array_interface__`, checked, and handed to
//! the launch layer as views over the caller's memory.
//!
//! Every array names the dtypes it may have; one of another dtype, not C-contiguous, misaligned,
//! masked or in other memory than CUDA's or the host's is refused with a `ValueError` (a
//! `NotImplementedError` for masks, a `TypeError` for an object that is not an array) before any
//! launch.
//!
//! An import happens in two steps, because the stream handshake needs the device first: [`Pending`]
//! learns where an array lives ([`Memory`]); once the caller's queue on that device exists,
//! [`Pending::import`] takes the array with the queue ordered after the producer's pending work
//! (DLPack's `__dlpack__(stream=…)`, or the `stream` of `__cuda_array_interface__`).

use dlpark::ffi::{DLDataType, DLDevice, DLDeviceType};
use dlpark::python::{DlpackStream, ImportRequest, ImportedDlpack, StreamArg};
use dlpark::{DlpackFlags, python::consumer::stream};
use gpu_launch::{Device, Queue};
use pyo3::exceptions::{PyNotImplementedError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyTuple};
use std::ffi::c_void;

/// Where an array's elements are.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Memory {
    /// Device memory of the GPU with this ordinal.
    Gpu(u32),
    /// Host memory (NumPy, PyTorch on the CPU): what the simulator runs on.
    Host,
}

impl std::fmt::Display for Memory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Memory::Gpu(ordinal) => write!(f, "GPU {ordinal}"),
            Memory::Host => f.write_str("host memory"),
        }
    }
}

/// An element type of arrays: the number types device buffers hold.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dtype {
    /// `float32`.
    F32,
    /// `float64`.
    F64,
    /// `int8`.
    I8,
    /// `int16`.
    I16,
    /// `int32`.
    I32,
    /// `int64`.
    I64,
    /// `uint8`.
    U8,
    /// `uint16`.
    U16,
    /// `uint32`.
    U32,
    /// `uint64`.
    U64,
}

impl Dtype {
    const ALL: [Dtype; 10] = [
        Dtype::F32,
        Dtype::F64,
        Dtype::I8,
        Dtype::I16,
        Dtype::I32,
        Dtype::I64,
        Dtype::U8,
        Dtype::U16,
        Dtype::U32,
        Dtype::U64,
    ];

    /// Bytes per element.
    pub fn size(self) -> usize {
        self.dlpack().bits as usize / 8
    }

    /// NumPy's name for it (also PyTorch's and CuPy's): `"float32"`, `"uint8"`, ….
    pub fn name(self) -> &'static str {
        match self {
            Dtype::F32 => "float32",
            Dtype::F64 => "float64",
            Dtype::I8 => "int8",
            Dtype::I16 => "int16",
            Dtype::I32 => "int32",
            Dtype::I64 => "int64",
            Dtype::U8 => "uint8",
            Dtype::U16 => "uint16",
            Dtype::U32 => "uint32",
            Dtype::U64 => "uint64",
        }
    }

    /// The dtype NumPy (or PyTorch, CuPy) names `name`.
    pub fn from_name(name: &str) -> Option<Dtype> {
        Dtype::ALL.into_iter().find(|d| d.name() == name)
    }

    fn dlpack(self) -> DLDataType {
        match self {
            Dtype::F32 => DLDataType::F32,
            Dtype::F64 => DLDataType::F64,
            Dtype::I8 => DLDataType::I8,
            Dtype::I16 => DLDataType::I16,
            Dtype::I32 => DLDataType::I32,
            Dtype::I64 => DLDataType::I64,
            Dtype::U8 => DLDataType::U8,
            Dtype::U16 => DLDataType::U16,
            Dtype::U32 => DLDataType::U32,
            Dtype::U64 => DLDataType::U64,
        }
    }

    /// `__array_interface__`'s type string: kind and bytes (`"f4"`), after the byte order.
    fn typestr(self) -> String {
        let kind = match self {
            Dtype::F32 | Dtype::F64 => 'f',
            Dtype::I8 | Dtype::I16 | Dtype::I32 | Dtype::I64 => 'i',
            _ => 'u',
        };
        format!("{kind}{}", self.size())
    }

    /// The type of a `__cuda_array_interface__` type string (little-endian, or one byte).
    fn from_typestr(typestr: &str) -> Option<Dtype> {
        let (order, rest) = typestr.split_at_checked(1)?;
        Dtype::ALL.into_iter().find(|d| {
            rest == d.typestr() && (order == "<" || order == "=" || (order == "|" && d.size() == 1))
        })
    }
}

impl std::fmt::Display for Dtype {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// "float32", "float32 or float64", "float32, int32 or uint8": the dtypes `accepted` lists, each
/// as `describe` writes it.
pub(crate) fn either(accepted: &[Dtype], describe: impl Fn(Dtype) -> String) -> String {
    let names: Vec<String> = accepted.iter().map(|&d| describe(d)).collect();
    match names.split_last() {
        Some((last, [])) => last.clone(),
        Some((last, rest)) => format!("{} or {last}", rest.join(", ")),
        None => "no dtype".into(),
    }
}

/// A Rust element type that arrays hold: what [`Call::input`](crate::Call::input) and
/// [`Call::output`](crate::Call::output) check an array's dtype against.
pub trait ArrayElement: gpu_launch::Element {
    /// The arrays' dtype.
    const DTYPE: Dtype;
}

macro_rules! array_elements {
    ($($t:ty => $d:ident),*) => {$(
        impl ArrayElement for $t {
            const DTYPE: Dtype = Dtype::$d;
        }
    )*};
}
array_elements!(f32 => F32, f64 => F64, i8 => I8, i16 => I16, i32 => I32, i64 => I64, u8 => U8, u16 => U16,
    u32 => U32, u64 => U64);

/// An imported array: a C-contiguous block of `shape`'s product elements at `address`.
pub struct ForeignArray {
    /// The first element: a device address, or a host address for [`Memory::Host`].
    pub address: usize,
    /// Sides, outermost first.
    pub shape: Vec<usize>,
    /// The element type.
    pub dtype: Dtype,
    /// Where the elements are.
    pub memory: Memory,
    read_only: bool,
    /// The argument's name, for errors.
    pub name: &'static str,
    /// What keeps the memory alive until the array is dropped (after the launch is queued: the
    /// caller's allocator orders any reuse after work on the caller's stream).
    _owner: Box<dyn std::any::Any>,
}

impl ForeignArray {
    /// Number of elements.
    pub fn len(&self) -> usize {
        self.shape.iter().product()
    }

    /// Whether it has no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Checks the dimensions and, when `dtype` is given, the element type.
    pub fn expect(&self, ndim: usize, dtype: Option<Dtype>) -> PyResult<()> {
        if self.shape.len() != ndim {
            return Err(PyValueError::new_err(format!(
                "{} must be {ndim}-D, got {}-D (shape {:?})",
                self.name,
                self.shape.len(),
                self.shape
            )));
        }
        match dtype {
            Some(d) if d != self.dtype => Err(PyValueError::new_err(format!(
                "{} is {}, expected {d} like the other arrays",
                self.name, self.dtype
            ))),
            _ => Ok(()),
        }
    }

    /// Checks that the array may be written.
    pub fn expect_writable(&self) -> PyResult<()> {
        if self.read_only {
            return Err(PyValueError::new_err(format!("{} is read-only", self.name)));
        }
        Ok(())
    }

    /// Whether the bytes of `self` and `other` overlap (an output must not alias an input).
    pub fn overlaps(&self, other: &ForeignArray) -> bool {
        let end = |a: &ForeignArray| a.address + a.len() * a.dtype.size();
        self.memory == other.memory && self.address < end(other) && other.address < end(self)
    }

    /// The elements as a kernel's `&[T]`. Panics if the array's dtype is not `T`.
    ///
    /// # Safety
    /// The array's memory is what the device launched on reads (see [`Memory`]).
    pub unsafe fn view<T: ArrayElement>(&self) -> gpu_launch::BufferView<'_, T> {
        assert_eq!(self.dtype, T::DTYPE, "{}: a view of another element type", self.name);
        // SAFETY: a contiguous, aligned array of `len` elements of `T` kept alive by `_owner`.
        unsafe { gpu_launch::BufferView::from_raw_parts(self.address as *const T, self.len()) }
    }

    /// The elements as a kernel's `&mut [T]` (after [`ForeignArray::expect_writable`]).
    ///
    /// # Safety
    /// As for [`ForeignArray::view`]; no other view of these elements is used meanwhile.
    pub unsafe fn view_mut<T: ArrayElement>(&self) -> gpu_launch::BufferViewMut<'_, T> {
        assert_eq!(self.dtype, T::DTYPE, "{}: a view of another element type", self.name);
        // SAFETY: as for `view`; the caller guarantees exclusivity.
        unsafe { gpu_launch::BufferViewMut::from_raw_parts(self.address as *mut T, self.len()) }
    }
}

/// An array whose memory is known and whose import waits for the caller's queue.
pub enum Pending<'py> {
    /// A DLPack producer (`__dlpack__` and `__dlpack_device__`).
    Dlpack {
        /// The export, not made yet.
        request: ImportRequest<'py>,
        /// Where the array is.
        memory: Memory,
        /// The dtypes it may have.
        accepted: Vec<Dtype>,
        /// The argument's name, for errors.
        name: &'static str,
    },
    /// A `__cuda_array_interface__` producer.
    CudaArrayInterface {
        /// The producer, kept alive with the array.
        object: Bound<'py, PyAny>,
        /// Its interface, checked.
        interface: Interface,
        /// The GPU the memory belongs to.
        memory: Memory,
        /// The argument's name, for errors.
        name: &'static str,
    },
    /// A legacy DLPack producer (no `__dlpack_device__`): imported without a stream handshake.
    Imported(ForeignArray),
}

/// The fields of a `__cuda_array_interface__` (version 3) that the kernels use.
pub struct Interface {
    address: usize,
    read_only: bool,
    shape: Vec<usize>,
    dtype: Dtype,
    /// The producer's stream with pending work on the array, if any.
    stream: Option<usize>,
}

impl<'py> Pending<'py> {
    /// Learns where `object` (named `name` in errors, of one of the dtypes `accepted`) lives,
    /// without importing it yet.
    pub fn new(object: &Bound<'py, PyAny>, name: &'static str, accepted: &[Dtype]) -> PyResult<Self> {
        let accepted = accepted.to_vec();
        if object.hasattr("__dlpack__")? {
            let request = ImportRequest::new(object.as_borrowed())?;
            return match request.device() {
                Ok(device) => {
                    Ok(Pending::Dlpack { request, memory: memory_of(device, name)?, accepted, name })
                }
                Err(_) => Ok(Pending::Imported(finish_dlpack(request.import(None, None)?, name, &accepted)?)),
            };
        }
        if let Ok(interface) = object.getattr("__cuda_array_interface__") {
            let interface = parse_interface(interface.cast::<PyDict>()?, name, &accepted)?;
            let memory = Memory::Gpu(gpu_launch::gpu_of_address(interface.address).map_err(crate::to_py)?);
            return Ok(Pending::CudaArrayInterface { object: object.clone(), interface, memory, name });
        }
        Err(PyTypeError::new_err(format!(
            "{name}: expected an array with __dlpack__ or __cuda_array_interface__ (NumPy, CuPy, PyTorch, JAX, \
             Numba), got a {}",
            object.get_type().name()?
        )))
    }

    /// Where the array lives.
    pub fn memory(&self) -> Memory {
        match self {
            Pending::Dlpack { memory, .. } | Pending::CudaArrayInterface { memory, .. } => *memory,
            Pending::Imported(a) => a.memory,
        }
    }

    /// Imports the array for work on `queue` of `device` (the device of [`Pending::memory`]):
    /// the producer's pending work on the array is ordered before the queue's next work.
    pub fn import(self, device: &Device, queue: &Queue, stream: usize) -> PyResult<ForeignArray> {
        match self {
            Pending::Dlpack { request, accepted, name, .. } => {
                let consumer = CallerStream { device, queue, stream };
                finish_dlpack(request.import(Some(&consumer), None)?, name, &accepted)
            }
            Pending::CudaArrayInterface { object, interface, memory, name } => {
                if let Some(producer) = interface.stream {
                    // SAFETY: the producer's stream, live while its array is (the protocol's contract).
                    unsafe { device.queue_wait_stream(queue, producer) }.map_err(crate::to_py)?;
                }
                Ok(ForeignArray {
                    address: interface.address,
                    shape: interface.shape,
                    dtype: interface.dtype,
                    memory,
                    read_only: interface.read_only,
                    name,
                    _owner: Box::new(object.unbind()),
                })
            }
            Pending::Imported(array) => Ok(array),
        }
    }
}

/// The caller's stream, as DLPack's `__dlpack__(stream=…)` and C exchange API expect it.
struct CallerStream<'a> {
    device: &'a Device,
    queue: &'a Queue,
    stream: usize,
}

// SAFETY: `stream` is the live stream the caller launches on (or 0/1/2), on the producer's device.
unsafe impl DlpackStream for CallerStream<'_> {
    fn as_python_arg(&self, _py: Python<'_>, device: DLDevice) -> PyResult<StreamArg> {
        Ok(if device.device_type == DLDeviceType::CUDA {
            stream::cuda(self.stream as *mut c_void)
        } else {
            stream::none()
        })
    }

    unsafe fn wait_for_producer(&self, device: DLDevice, producer: *mut c_void) -> PyResult<bool> {
        if device.device_type != DLDeviceType::CUDA {
            return Ok(true);
        }
        // SAFETY: the producer's live stream on this device (the trait's contract).
        unsafe { self.device.queue_wait_stream(self.queue, producer as usize) }.map_err(crate::to_py)?;
        Ok(true)
    }
}

fn memory_of(device: DLDevice, name: &str) -> PyResult<Memory> {
    match device.device_type {
        DLDeviceType::CUDA => Ok(Memory::Gpu(device.device_id as u32)),
        DLDeviceType::CPU => Ok(Memory::Host),
        other => Err(PyValueError::new_err(format!(
            "{name} is on DLPack device type {} (id {}): the kernels take CUDA device memory or host \
             memory",
            other.0, device.device_id
        ))),
    }
}

fn finish_dlpack(imported: ImportedDlpack, name: &'static str, accepted: &[Dtype]) -> PyResult<ForeignArray> {
    let read_only = imported.flags().contains(DlpackFlags::READ_ONLY);
    let (address, shape, dtype, memory) = {
        let tensor = imported.validate().map_err(|e| PyValueError::new_err(format!("{name}: {e}")))?;
        let shape: Vec<usize> = tensor.shape().iter().map(|&s| s as usize).collect();
        let dtype = match Dtype::ALL.into_iter().find(|d| d.dlpack() == tensor.dtype()) {
            Some(d) if accepted.contains(&d) => d,
            Some(d) => {
                return Err(PyValueError::new_err(format!(
                    "{name} is {d}: expected {}",
                    either(accepted, |d| d.name().into())
                )));
            }
            None => {
                let d = tensor.dtype();
                return Err(PyValueError::new_err(format!(
                    "{name} has DLPack dtype code {} with {} bits × {} lanes: expected {}",
                    d.code.0,
                    d.bits,
                    d.lanes,
                    either(accepted, |d| d.name().into())
                )));
            }
        };
        let strides: Option<Vec<usize>> =
            tensor.strides().map(|s| s.iter().map(|&v| v as usize * dtype.size()).collect());
        check_contiguous(&shape, strides.as_deref(), dtype, name)?;
        let address = tensor.data_ptr() as usize + tensor.byte_offset() as usize;
        (address, shape, dtype, memory_of(tensor.device(), name)?)
    };
    check_aligned(address, dtype, name)?;
    Ok(ForeignArray { address, shape, dtype, memory, read_only, name, _owner: Box::new(imported) })
}

fn parse_interface(interface: &Bound<'_, PyDict>, name: &str, accepted: &[Dtype]) -> PyResult<Interface> {
    let field = |key: &str| -> PyResult<Bound<'_, PyAny>> {
        interface
            .get_item(key)?
            .ok_or_else(|| PyValueError::new_err(format!("{name}: __cuda_array_interface__ has no {key:?}")))
    };
    let shape: Vec<usize> = field("shape")?.extract()?;
    let typestr: String = field("typestr")?.extract()?;
    let dtype = match Dtype::from_typestr(&typestr) {
        Some(d) if accepted.contains(&d) => d,
        _ => {
            return Err(PyValueError::new_err(format!(
                "{name} has typestr {typestr:?}: expected {}",
                either(accepted, |d| format!("{d} (\"<{}\")", d.typestr()))
            )));
        }
    };
    let (address, read_only): (usize, bool) = field("data")?.extract()?;
    if interface.get_item("mask")?.is_some_and(|m| !m.is_none()) {
        return Err(PyNotImplementedError::new_err(format!("{name}: masked arrays are not supported")));
    }
    let strides = match interface.get_item("strides")? {
        Some(s) if !s.is_none() => Some(s.cast::<PyTuple>()?.extract::<Vec<usize>>()?),
        _ => None,
    };
    check_contiguous(&shape, strides.as_deref(), dtype, name)?;
    check_aligned(address, dtype, name)?;
    let stream = match interface.get_item("stream")? {
        // 0 is disallowed by version 3 (ambiguous); taken, as the driver does, as the legacy
        // default stream.
        Some(s) if !s.is_none() => Some(s.extract::<usize>()?),
        _ => None,
    };
    Ok(Interface { address, read_only, shape, dtype, stream })
}

/// C-contiguous (row-major, no gaps), with `byte_strides` (`None`: contiguous); a side of one may
/// have any stride, as NumPy's flags allow.
fn check_contiguous(
    shape: &[usize],
    byte_strides: Option<&[usize]>,
    dtype: Dtype,
    name: &str,
) -> PyResult<()> {
    let Some(strides) = byte_strides else { return Ok(()) };
    let mut expected = dtype.size();
    for (&side, &stride) in shape.iter().zip(strides).rev() {
        if side != 1 && stride != expected {
            return Err(PyValueError::new_err(format!(
                "{name} is not C-contiguous (shape {shape:?}, byte strides {strides:?}): make a contiguous copy \
                 first (.contiguous(), cupy.ascontiguousarray)"
            )));
        }
        expected *= side;
    }
    Ok(())
}

fn check_aligned(address: usize, dtype: Dtype, name: &str) -> PyResult<()> {
    if !address.is_multiple_of(dtype.size()) {
        return Err(PyValueError::new_err(format!(
            "{name} starts at {address:#x}, not aligned to its {}-byte {dtype} elements",
            dtype.size()
        )));
    }
    Ok(())
}
