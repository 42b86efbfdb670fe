//! The launch layer: one API that runs a kernel on a GPU (through `cust`) or in the CPU simulator.
//!
//! ```no_run
//! use kernel_suite::{Device, LaunchConfig};
//! # fn main() -> kernel_suite::Result<()> {
//! let device = Device::gpu(0)?; // or Device::simulator()
//! let x = device.upload(&[1.0f32, 2.0, 3.0])?;
//! let mut y = device.upload(&[10.0f32, 20.0, 30.0])?;
//! let cfg = LaunchConfig::for_1d(3, 256);
//! // SAFETY: one thread per element; the slices carry the buffers' lengths.
//! unsafe { device.launch(&kernels::saxpy::SAXPY, cfg, (2.0, &x, &mut y))? };
//! assert_eq!(device.download(&y)?, vec![12.0, 24.0, 36.0]);
//! # Ok(()) }
//! ```
//!
//! On the GPU, launches are asynchronous on the device's [`Queue`] (a CUDA stream); the copies
//! ([`Device::upload`], [`Device::download`]) are queued on it too and have finished when they
//! return, so phases can be timed with [`Device::mark`]. [`Device::new_queue`],
//! [`Device::pinned`] and the `_async` copies let copies and kernels of several queues overlap. Every launch checks `cuLaunchKernel`'s result, and every synchronisation reports a kernel
//! that failed while running (as [`Error::Kernel`], naming the last kernel launched).

use crate::error::{Error, Result, cuda, raw};
use crate::module;
use crate::profile::{Direction, HostCost, Peaks, Recorder, Report, Work};
use cust::context::Context;
use cust::device::DeviceAttribute;
use cust::error::CudaError;
use cust::event::{Event, EventFlags};
use cust::memory::{AsyncCopyDestination, DeviceBuffer, DeviceCopy, LockedBuffer};
use cust::module::{Module, ModuleJitOption};
use cust::stream::{Stream, StreamFlags, StreamWaitEventFlags};
use gpu_std::sim::LaunchConfig;
use gpu_std::{KernelFn, Slice, SliceMut};
use rayon::prelude::*;
use std::cell::{Cell, OnceCell, RefCell};
use std::fmt;
use std::marker::PhantomData;
use std::ops::{Bound, RangeBounds};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Instant;

/// A plain number that buffers can hold.
///
/// # Safety
/// Every bit pattern must be a valid value (buffers start as raw bytes, or poisoned with `0xff`).
pub unsafe trait Element: DeviceCopy + Default + Send + Sync {}

macro_rules! elements {
    ($($t:ty),*) => {$(
        // SAFETY: every bit pattern of a primitive number is a valid value.
        unsafe impl Element for $t {}
    )*};
}
elements!(f32, f64, u8, i8, u16, i16, u32, i32, u64, i64);

/// Where kernels run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    /// A CUDA GPU.
    Gpu,
    /// The CPU simulator (`gpu_std::sim`): the same kernel code on CPU threads.
    Simulator,
}

impl fmt::Display for Backend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Backend::Gpu => "gpu",
            Backend::Simulator => "sim",
        })
    }
}

/// Which image of the embedded kernels the GPU loaded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ModuleImage {
    /// The sm_90a cubin (no JIT): the device's compute capability matched.
    Cubin,
    /// The PTX, JIT-compiled by the driver for this device.
    Ptx,
}

/// A device kernels can be launched on. Owns, for a GPU, the (primary) context, the loaded module
/// and a stream.
pub struct Device {
    // Field order is drop order: the staging's pinned memory, the profiler's events and the queue go
    // before the context (inside `inner`) that owns them.
    staging: RefCell<Option<Box<Staging>>>,
    profiler: OnceCell<Box<Recorder>>,
    queue: Queue,
    copies: Cell<CopyTotals>,
    inner: Inner,
    poison: Cell<bool>,
    last_kernel: Cell<&'static str>,
}

/// An ordered queue of device work: a CUDA stream on a GPU. Work on different queues may overlap
/// (copies on the copy engines, kernels on the SMs). In the simulator, work runs when queued.
pub struct Queue {
    stream: Option<QueueStream>,
}

/// A queue's CUDA stream: one the queue created (destroyed with it), or one that belongs to the
/// caller ([`Device::caller_queue`]: PyTorch's or CuPy's current stream), never destroyed here.
struct QueueStream {
    stream: std::mem::ManuallyDrop<Stream>,
    owned: bool,
}

impl QueueStream {
    fn owned(stream: Stream) -> Self {
        QueueStream { stream: std::mem::ManuallyDrop::new(stream), owned: true }
    }
}

impl std::ops::Deref for QueueStream {
    type Target = Stream;
    fn deref(&self) -> &Stream {
        &self.stream
    }
}

impl Drop for QueueStream {
    fn drop(&mut self) {
        if self.owned {
            // SAFETY: the queue created this stream and drops it once, here.
            unsafe { std::mem::ManuallyDrop::drop(&mut self.stream) }
        }
    }
}

// cust 0.3's `Stream` is a struct of one field, its `CUstream`, and has no constructor from a raw
// handle: with the sizes equal, that field spans the whole struct, so a handle is a `Stream`.
const _: () = assert!(std::mem::size_of::<Stream>() == std::mem::size_of::<cust::sys::CUstream>());

/// The caller's stream `raw` as a cust `Stream` that is never destroyed.
///
/// # Safety
/// `raw` is 0, 1, 2 or a live stream, for as long as the result is used.
unsafe fn borrowed_stream(raw: usize) -> std::mem::ManuallyDrop<Stream> {
    // SAFETY: a `Stream` is its handle (the size assertion above); `ManuallyDrop` keeps it from
    // being destroyed.
    std::mem::ManuallyDrop::new(unsafe { std::mem::transmute::<cust::sys::CUstream, Stream>(raw as _) })
}

enum Inner {
    Gpu(Box<Gpu>),
    Simulator,
}

struct Gpu {
    // Field order is drop order: the module goes before the context that owns it.
    module: Module,
    context: Context,
    device: cust::device::Device,
    name: String,
    compute_capability: (u32, u32),
    startup: Startup,
}

/// How to open a GPU: see [`Device::gpu_with`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct GpuOptions {
    /// Cap on registers per thread, applied by the driver's JIT (`CU_JIT_MAX_REGISTERS`); implies
    /// loading the PTX.
    pub max_registers: Option<u32>,
    /// Load the PTX (JIT-compiled by the driver) even when the embedded cubin matches the GPU.
    pub force_ptx: bool,
}

/// Host-side costs of opening a GPU, milliseconds (wall clock).
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct Startup {
    /// `cuInit`: loading and starting the driver (cheap after the first device of a process).
    pub init_ms: f64,
    /// `cuDevicePrimaryCtxRetain`: creating the context.
    pub context_ms: f64,
    /// `cuModuleLoadData(Ex)`: loading the kernels (JIT-compiling them when from PTX).
    pub module_load_ms: f64,
    /// Which image was loaded.
    #[serde(skip)]
    pub image: ModuleImage,
}

/// An NVTX range around a host-side phase, so that an Nsight Systems timeline shows "module load",
/// "H2D", the kernel's name and "D2H". NVTX is loaded at run time by the profiling tool; with no
/// tool attached each call returns at once.
struct Phase;

impl Phase {
    fn new(name: &str) -> Phase {
        nvtx::range_push!("{name}");
        Phase
    }
}

impl Drop for Phase {
    fn drop(&mut self) {
        nvtx::range_pop!();
    }
}

fn new_stream() -> Result<Stream> {
    Stream::new(StreamFlags::NON_BLOCKING, None).map_err(cuda("cuStreamCreate"))
}

/// The ordinal of the GPU whose memory holds device address `address` (memory of another library,
/// handed over as a bare pointer by `__cuda_array_interface__`).
pub fn gpu_of_address(address: usize) -> Result<u32> {
    cust::init(cust::CudaFlags::empty()).map_err(init_error)?;
    let mut ordinal: i32 = -1;
    // SAFETY: the attribute is written as an `int`; any address may be asked about.
    let result = unsafe {
        cust::sys::cuPointerGetAttribute(
            &mut ordinal as *mut i32 as *mut std::ffi::c_void,
            cust::sys::CUpointer_attribute::CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
            address as cust::sys::CUdeviceptr,
        )
    };
    match result {
        cust::sys::cudaError_enum::CUDA_SUCCESS if ordinal >= 0 => Ok(ordinal as u32),
        _ => Err(Error::InvalidInput(format!("address {address:#x} is not memory of a GPU ({result:?})"))),
    }
}

/// Maps `cuInit`'s failure to "no driver" / "no GPU".
fn init_error(e: CudaError) -> Error {
    match e {
        CudaError::NoDevice => Error::NoGpu("the CUDA driver found no GPU".into()),
        other => Error::NoDriver(format!("cuInit failed: {other}")),
    }
}

impl Device {
    /// The GPU with index `ordinal` (0 is the first), with the embedded kernels loaded: the cubin if
    /// the GPU's compute capability is the cubin's, else the PTX (JIT-compiled by the driver).
    pub fn gpu(ordinal: u32) -> Result<Self> {
        Self::gpu_with(ordinal, GpuOptions::default())
    }

    /// [`Device::gpu`] with options: a register cap for the JIT, or the PTX instead of the cubin.
    pub fn gpu_with(ordinal: u32, options: GpuOptions) -> Result<Self> {
        let ms = |t: Instant| t.elapsed().as_secs_f64() * 1e3;
        let t = Instant::now();
        cust::init(cust::CudaFlags::empty()).map_err(init_error)?;
        let init_ms = ms(t);
        let count = cust::device::Device::num_devices().map_err(cuda("cuDeviceGetCount"))?;
        if ordinal >= count {
            return Err(Error::NoGpu(format!("GPU index {ordinal} requested, {count} GPU(s) present")));
        }
        let device = cust::device::Device::get_device(ordinal).map_err(cuda("cuDeviceGet"))?;
        let attr = |a| device.get_attribute(a).map_err(cuda("cuDeviceGetAttribute"));
        let compute_capability = (
            attr(DeviceAttribute::ComputeCapabilityMajor)? as u32,
            attr(DeviceAttribute::ComputeCapabilityMinor)? as u32,
        );
        let name = device.name().map_err(cuda("cuDeviceGetName"))?;
        let (major, minor) = compute_capability;
        if major * 10 + minor < module::MIN_COMPUTE_CAPABILITY {
            let need = module::MIN_COMPUTE_CAPABILITY;
            return Err(Error::NoGpu(format!(
                "GPU {ordinal} ({name}) has compute capability {major}.{minor}; the kernels need {}.{} or newer",
                need / 10,
                need % 10
            )));
        }
        let t = Instant::now();
        let context = Context::new(device).map_err(cuda("cuDevicePrimaryCtxRetain"))?;
        // The pool of `alloc_temporary` keeps freed memory for the next call (by default it gives
        // it back to the system at every synchronization).
        let mut pool: cust::sys::CUmemoryPool = std::ptr::null_mut();
        // SAFETY: a valid device; the pool handle is written by the call.
        raw("cuDeviceGetDefaultMemPool", unsafe {
            cust::sys::cuDeviceGetDefaultMemPool(&mut pool, device.as_raw())
        })?;
        let keep_all = u64::MAX;
        // SAFETY: a valid pool; the attribute takes a u64.
        raw("cuMemPoolSetAttribute", unsafe {
            cust::sys::cuMemPoolSetAttribute(
                pool,
                cust::sys::CUmemPool_attribute::CU_MEMPOOL_ATTR_RELEASE_THRESHOLD,
                &keep_all as *const u64 as *mut std::ffi::c_void,
            )
        })?;
        let context_ms = ms(t);
        let t = Instant::now();
        let load = Phase::new("module load");
        let cubin_fits = compute_capability.0 * 10 + compute_capability.1 == module::CUBIN_ARCH;
        let (module, image) = match module::CUBIN {
            Some(cubin) if cubin_fits && !options.force_ptx && options.max_registers.is_none() => (
                Module::from_cubin(cubin, &[]).map_err(cuda("cuModuleLoadData (cubin)"))?,
                ModuleImage::Cubin,
            ),
            _ => {
                let jit: Vec<ModuleJitOption> =
                    options.max_registers.map(ModuleJitOption::MaxRegisters).into_iter().collect();
                (
                    Module::from_ptx(module::PTX, &jit).map_err(cuda("cuModuleLoadDataEx (PTX JIT)"))?,
                    ModuleImage::Ptx,
                )
            }
        };
        drop(load);
        let startup = Startup { init_ms, context_ms, module_load_ms: ms(t), image };
        let queue = Queue { stream: Some(QueueStream::owned(new_stream()?)) };
        let gpu = Gpu { module, context, device, name, compute_capability, startup };
        Ok(Self::with(queue, Inner::Gpu(Box::new(gpu))))
    }

    /// Registers per thread of kernel `name` as the driver loaded it (after any JIT register cap);
    /// `None` in the simulator.
    pub fn kernel_registers(&self, name: &str) -> Result<Option<u32>> {
        match &self.inner {
            Inner::Gpu(g) => {
                let function = g.module.get_function(name).map_err(cuda("cuModuleGetFunction"))?;
                let registers = function
                    .get_attribute(cust::function::FunctionAttribute::NumRegisters)
                    .map_err(cuda("cuFuncGetAttribute"))?;
                Ok(Some(registers as u32))
            }
            Inner::Simulator => Ok(None),
        }
    }

    /// Whether the loaded module has kernel `name`: the [`module::HOPPER_KERNELS`] exist only in
    /// the sm_90a cubin (an H100 or H200 that loaded it, not a PTX JIT); the simulator has all.
    pub fn has_kernel(&self, name: &str) -> bool {
        match &self.inner {
            Inner::Gpu(g) => g.module.get_function(name).is_ok(),
            Inner::Simulator => true,
        }
    }

    /// The most threads a block of kernel `name` may have, as the driver loaded it (its registers
    /// per thread limit it below the device's 1024); 1024 in the simulator.
    pub fn max_threads_per_block(&self, name: &str) -> Result<u32> {
        match &self.inner {
            Inner::Gpu(g) => {
                let function = g.module.get_function(name).map_err(cuda("cuModuleGetFunction"))?;
                let threads = function
                    .get_attribute(cust::function::FunctionAttribute::MaxThreadsPerBlock)
                    .map_err(cuda("cuFuncGetAttribute"))?;
                Ok(threads as u32)
            }
            Inner::Simulator => Ok(1024),
        }
    }

    /// What opening the GPU cost (`None` for the simulator).
    pub fn startup(&self) -> Option<Startup> {
        match &self.inner {
            Inner::Gpu(g) => Some(g.startup),
            Inner::Simulator => None,
        }
    }

    /// Starts recording every kernel and copy (with CUDA events) and host-side costs, for
    /// [`Device::profile_report`]. Returns `false` (and records nothing) in the simulator.
    pub fn enable_profiling(&self) -> Result<bool> {
        let Inner::Gpu(g) = &self.inner else { return Ok(false) };
        if self.profiler.get().is_none() {
            let s = g.startup;
            let load = match s.image {
                ModuleImage::Cubin => "module load (cuModuleLoadData, cubin)",
                ModuleImage::Ptx => "module load (cuModuleLoadDataEx, PTX JIT)",
            };
            let startup = vec![
                HostCost { what: "driver start-up (cuInit)".into(), calls: 1, ms: s.init_ms },
                HostCost {
                    what: "context creation (cuDevicePrimaryCtxRetain)".into(),
                    calls: 1,
                    ms: s.context_ms,
                },
                HostCost { what: load.into(), calls: 1, ms: s.module_load_ms },
            ];
            let _ = self.profiler.set(Box::new(Recorder::new(Peaks::of(&g.device)?, startup)));
        }
        Ok(true)
    }

    /// The profile recorded since [`Device::enable_profiling`] (waits for the recorded work), or
    /// `None` when profiling is off.
    pub fn profile_report(&self) -> Result<Option<Report>> {
        match (self.profiler.get(), &self.inner) {
            (Some(p), Inner::Gpu(g)) => p.report(&self.describe_gpu(g)).map(Some),
            _ => Ok(None),
        }
    }

    /// The CPU simulator.
    pub fn simulator() -> Self {
        Self::with(Queue { stream: None }, Inner::Simulator)
    }

    fn with(queue: Queue, inner: Inner) -> Self {
        Self {
            queue,
            inner,
            poison: Cell::new(false),
            last_kernel: Cell::new("(none)"),
            staging: RefCell::new(None),
            copies: Cell::new(CopyTotals::default()),
            profiler: OnceCell::new(),
        }
    }

    /// A new queue (CUDA stream) for work that should overlap with other queues' work.
    pub fn new_queue(&self) -> Result<Queue> {
        Ok(Queue { stream: self.is_gpu().then(new_stream).transpose()?.map(QueueStream::owned) })
    }

    /// A queue over the caller's CUDA stream `stream` (a raw `CUstream`: 0 or `CU_STREAM_LEGACY` (1)
    /// for the legacy default stream, `CU_STREAM_PER_THREAD` (2), or a stream's handle): what a
    /// binding launches on so that its kernels run in order with the caller's own work (PyTorch's
    /// or CuPy's current stream). The queue never destroys the stream. In the simulator, where
    /// work runs when queued, the stream is ignored.
    ///
    /// # Safety
    /// `stream` is 0, 1, 2 or a live stream of this device's primary context, and outlives the
    /// queue.
    pub unsafe fn caller_queue(&self, stream: usize) -> Queue {
        // SAFETY: forwarded from the caller.
        let stream =
            self.is_gpu().then(|| QueueStream { stream: unsafe { borrowed_stream(stream) }, owned: false });
        Queue { stream }
    }

    /// Makes this GPU's (primary) context current on the calling thread, as a binding called from
    /// any thread, or for GPUs in turn, must before it launches. Nothing to do in the simulator.
    pub fn make_current(&self) -> Result<()> {
        match &self.inner {
            Inner::Gpu(g) => {
                cust::context::CurrentContext::set_current(&g.context).map_err(cuda("cuCtxSetCurrent"))
            }
            Inner::Simulator => Ok(()),
        }
    }

    /// Makes the work queued on `queue` from now on wait for the work queued so far on the caller's
    /// stream `producer` (a raw `CUstream`, as in [`Device::caller_queue`]), without blocking the
    /// host: an array another library is still writing on its own stream. Nothing to do when
    /// `producer` is the queue's own stream, or in the simulator.
    ///
    /// # Safety
    /// `producer` is 0, 1, 2 or a live stream of this device's primary context.
    pub unsafe fn queue_wait_stream(&self, queue: &Queue, producer: usize) -> Result<()> {
        let Some(consumer) = &queue.stream else { return Ok(()) };
        if consumer.as_inner() as usize == producer {
            return Ok(());
        }
        let event = Event::new(EventFlags::DISABLE_TIMING).map_err(cuda("cuEventCreate"))?;
        // SAFETY: forwarded from the caller.
        let producer = unsafe { borrowed_stream(producer) };
        event.record(&producer).map_err(cuda("cuEventRecord"))?;
        consumer.wait_event(event, StreamWaitEventFlags::DEFAULT).map_err(cuda("cuStreamWaitEvent"))
    }

    /// The queue that [`Device::launch`], the copies and [`Device::mark`] use.
    pub fn queue(&self) -> &Queue {
        &self.queue
    }

    /// The CUDA stream of the device's queue (`None` in the simulator).
    pub(crate) fn queue_stream(&self) -> Option<&Stream> {
        self.queue.stream.as_deref()
    }

    fn is_gpu(&self) -> bool {
        matches!(self.inner, Inner::Gpu(_))
    }

    /// The most dynamic shared memory one block may opt in to, bytes (227 KiB on an H100, 96 KiB
    /// on a V100). The simulator reports an H100's.
    pub fn max_shared_bytes_per_block(&self) -> Result<u32> {
        match &self.inner {
            Inner::Gpu(g) => {
                let mut bytes = 0i32;
                // SAFETY: a valid device handle and attribute; `bytes` is written by the call.
                raw("cuDeviceGetAttribute(MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)", unsafe {
                    cust::sys::cuDeviceGetAttribute(
                        &mut bytes,
                        cust::sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN,
                        g.device.as_raw(),
                    )
                })?;
                Ok(bytes as u32)
            }
            Inner::Simulator => Ok(227 * 1024),
        }
    }

    /// Streaming multiprocessors of the GPU (132 on an H100 SXM), for kernels that size their grid
    /// by it. The simulator reports 4, so that such grids have several blocks there too.
    pub fn multiprocessors(&self) -> Result<u32> {
        match &self.inner {
            Inner::Gpu(g) => g
                .device
                .get_attribute(DeviceAttribute::MultiprocessorCount)
                .map(|count| count as u32)
                .map_err(cuda("cuDeviceGetAttribute(MULTIPROCESSOR_COUNT)")),
            Inner::Simulator => Ok(4),
        }
    }

    /// Which backend this is.
    pub fn backend(&self) -> Backend {
        match self.inner {
            Inner::Gpu(_) => Backend::Gpu,
            Inner::Simulator => Backend::Simulator,
        }
    }

    /// A one-line description: the GPU's name, compute capability and module image, or "CPU simulator".
    pub fn describe(&self) -> String {
        match &self.inner {
            Inner::Gpu(g) => self.describe_gpu(g),
            Inner::Simulator => "CPU simulator".to_string(),
        }
    }

    fn describe_gpu(&self, g: &Gpu) -> String {
        format!(
            "{} (sm_{}{}, kernels from the embedded {})",
            g.name,
            g.compute_capability.0,
            g.compute_capability.1,
            match g.startup.image {
                ModuleImage::Cubin => "cubin",
                ModuleImage::Ptx => "PTX, JIT-compiled",
            }
        )
    }

    /// For tests: when on, every buffer from [`Device::alloc`] starts filled with `0xff` bytes (NaN
    /// for floats), so an element a kernel never wrote cannot pass for a result.
    pub fn set_poison_allocations(&self, on: bool) {
        self.poison.set(on);
    }

    /// A buffer of `len` elements whose contents are unspecified (or poisoned, see
    /// [`Device::set_poison_allocations`]) until a kernel or an upload writes them.
    pub fn alloc<T: Element>(&self, len: usize) -> Result<Buffer<T>> {
        let bytes = len * std::mem::size_of::<T>();
        let inner = match &self.inner {
            Inner::Gpu(_) => {
                let t = Instant::now();
                // SAFETY: any bytes are a valid `Element`.
                let buf = unsafe { DeviceBuffer::uninitialized(len) }.map_err(cuda("cuMemAlloc"))?;
                if let Some(p) = self.profiler.get() {
                    p.host_cost("cuMemAlloc", t.elapsed().as_secs_f64() * 1e3);
                }
                if self.poison.get() && bytes > 0 {
                    let stream = self.queue.stream.as_ref().map_or(std::ptr::null_mut(), |s| s.as_inner());
                    // SAFETY: the pointer and byte count describe the allocation just made; the
                    // memset is ordered before any later work on the device's queue.
                    raw("cuMemsetD8Async", unsafe {
                        cust::sys::cuMemsetD8Async(buf.as_device_ptr().as_raw(), 0xff, bytes, stream)
                    })?;
                }
                BufferInner::Gpu(buf)
            }
            Inner::Simulator => {
                let mut v = Vec::<T>::with_capacity(len);
                // SAFETY: any bytes are a valid `Element`, so filling the bytes initialises them.
                unsafe {
                    std::ptr::write_bytes(v.as_mut_ptr() as *mut u8, 0xff, bytes);
                    v.set_len(len);
                }
                BufferInner::Host(v)
            }
        };
        Ok(Buffer { inner })
    }

    /// `len` uninitialised elements for temporaries of the work on `queue`, allocated and later
    /// freed in the queue's order (`cuMemAllocAsync`/`cuMemFreeAsync` from the device's memory
    /// pool): unlike [`Device::alloc`] neither synchronizes the device, and after the first use the
    /// pool hands the same memory back, so a launcher can take scratch space on every call. Drop
    /// the buffer before `queue`.
    pub fn alloc_temporary<T: Element>(&self, queue: &Queue, len: usize) -> Result<Buffer<T>> {
        match (&self.inner, &queue.stream) {
            (Inner::Gpu(_), Some(stream)) => {
                let mut ptr: cust::sys::CUdeviceptr = 0;
                let bytes = (len * std::mem::size_of::<T>()).max(1);
                // SAFETY: a valid stream; the pointer is written by the call.
                raw("cuMemAllocAsync", unsafe {
                    cust::sys::cuMemAllocAsync(&mut ptr, bytes, stream.as_inner())
                })?;
                let inner =
                    Ordered { ptr, len, stream: stream.as_inner(), element: std::marker::PhantomData };
                Ok(Buffer { inner: BufferInner::Ordered(inner) })
            }
            (Inner::Simulator, None) => self.alloc(len),
            _ => Err(mixed_devices()),
        }
    }

    /// A buffer holding a copy of `data`. The copy is queued on the device's queue and has
    /// finished when this returns.
    pub fn upload<T: Element>(&self, data: &[T]) -> Result<Buffer<T>> {
        let mut buffer = self.alloc(data.len())?;
        self.upload_into(&mut buffer, data)?;
        Ok(buffer)
    }

    /// Copies `data` into `buffer` (same length) on the device's queue; finished when this returns.
    /// On a GPU, ordinary memory of at least [`STAGING_CHUNK_BYTES`] goes through the device's own
    /// [`Staging`] (see [`Device::copy_totals`]); page-locked memory is copied directly.
    pub fn upload_into<T: Element>(&self, buffer: &mut Buffer<T>, data: &[T]) -> Result<()> {
        same_len(buffer.len(), data.len())?;
        let t = Instant::now();
        let setup_ms = if self.stages(data) {
            self.with_staging(|staging| staging.upload(self, &self.queue, data, buffer, 0))?
        } else {
            // SAFETY: the copy has finished before `data` can change: the queue is synchronised below.
            unsafe { self.upload_async(&self.queue, data, buffer)? };
            0.0
        };
        self.sync_queue(&self.queue)?;
        self.count_copy(Direction::HostToDevice, t, std::mem::size_of_val(data), setup_ms);
        Ok(())
    }

    /// Queues a copy of `src` into `dst` (same length) on `queue`, device to device (`cuMemcpyAsync`;
    /// in the simulator, done when it returns): results into another library's array.
    pub fn copy_view<T: Element>(
        &self,
        queue: &Queue,
        src: BufferView<'_, T>,
        dst: BufferViewMut<'_, T>,
    ) -> Result<()> {
        ensure_same_len(src.len, dst.len)?;
        let bytes = src.len * std::mem::size_of::<T>();
        match (&self.inner, &queue.stream) {
            // SAFETY: both views are valid for `len` elements of this device (their constructors'
            // contracts), and a view of a buffer never overlaps a mutable view of the same buffer.
            (Inner::Gpu(_), Some(stream)) => raw("cuMemcpyAsync", unsafe {
                cust::sys::cuMemcpyAsync(dst.ptr as u64, src.ptr as u64, bytes, stream.as_inner())
            }),
            (Inner::Simulator, None) => {
                // SAFETY: as above, host memory in the simulator.
                unsafe { std::ptr::copy_nonoverlapping(src.ptr, dst.ptr, src.len) };
                Ok(())
            }
            _ => Err(mixed_devices()),
        }
    }

    /// Waits for the work queued so far, then copies `buffer` into `out` (same length); staged as
    /// in [`Device::upload_into`].
    pub fn download_into<T: Element>(&self, buffer: &Buffer<T>, out: &mut [T]) -> Result<()> {
        same_len(buffer.len(), out.len())?;
        if self.stages(out) {
            // The kernels first, so that the copy's time is the copy's.
            self.sync_queue(&self.queue)?;
            let t = Instant::now();
            let setup_ms =
                self.with_staging(|staging| staging.download(self, &self.queue, buffer, 0, out))?;
            self.count_copy(Direction::DeviceToHost, t, std::mem::size_of_val(out), setup_ms);
        } else {
            self.sync_queue(&self.queue)?;
            let t = Instant::now();
            // SAFETY: `out` is not touched until the queue is synchronised below.
            unsafe { self.download_async(&self.queue, buffer, out)? };
            self.sync_queue(&self.queue)?;
            self.count_copy(Direction::DeviceToHost, t, std::mem::size_of_val(out), 0.0);
        }
        Ok(())
    }

    /// Host wall time and bytes of the copies made through [`Device::upload_into`],
    /// [`Device::download_into`] and the functions built on them ([`Device::upload`],
    /// [`Device::download`]), and what making the staging cost.
    pub fn copy_totals(&self) -> CopyTotals {
        self.copies.get()
    }

    /// Whether a synchronous copy of `data` goes through the staging: on a GPU, at least one
    /// staging chunk of ordinary (not page-locked) memory.
    fn stages<T>(&self, data: &[T]) -> bool {
        if !self.is_gpu() || std::mem::size_of_val(data) < STAGING_CHUNK_BYTES {
            return false;
        }
        !is_page_locked(data.as_ptr() as *const std::ffi::c_void)
    }

    /// Runs `copy` with the device's staging, made at its first use.
    /// Returns the milliseconds spent making the staging (0 once made).
    fn with_staging(&self, copy: impl FnOnce(&mut Staging) -> Result<()>) -> Result<f64> {
        let mut slot = self.staging.borrow_mut();
        let mut setup_ms = 0.0;
        let staging = match &mut *slot {
            Some(staging) => staging,
            None => {
                let t = Instant::now();
                let staging = slot.insert(Box::new(self.staging()?));
                setup_ms = t.elapsed().as_secs_f64() * 1e3;
                let mut totals = self.copies.get();
                totals.staging_setup_ms += setup_ms;
                self.copies.set(totals);
                staging
            }
        };
        copy(staging)?;
        Ok(setup_ms)
    }

    /// Counts a copy that started at `start`, less `setup_ms` spent making the staging.
    fn count_copy(&self, direction: Direction, start: Instant, bytes: usize, setup_ms: f64) {
        let ms = start.elapsed().as_secs_f64() * 1e3 - setup_ms;
        let mut totals = self.copies.get();
        match direction {
            Direction::HostToDevice => {
                totals.h2d_ms += ms;
                totals.h2d_bytes += bytes as u64;
            }
            Direction::DeviceToHost => {
                totals.d2h_ms += ms;
                totals.d2h_bytes += bytes as u64;
            }
        }
        self.copies.set(totals);
    }

    /// Waits for the work queued so far, then returns a copy of `buffer`. A large result's fresh
    /// memory is first made resident on all cores (2 MiB pages where Linux grants them), which is
    /// counted in the copy's time.
    pub fn download<T: Element>(&self, buffer: &Buffer<T>) -> Result<Vec<T>> {
        let mut out = vec![T::default(); buffer.len()];
        if self.stages(&out) {
            let t = Instant::now();
            touch_in_parallel(&mut out);
            // Part of the copy's cost: counted with it (no bytes of its own).
            self.count_copy(Direction::DeviceToHost, t, 0, 0.0);
        }
        self.download_into(buffer, &mut out)?;
        Ok(out)
    }

    /// Queues a host-to-device copy of `data` into `buffer` on `queue`. From page-locked memory
    /// ([`HostBuffer`]) the copy runs asynchronously on a copy engine.
    ///
    /// # Safety
    /// `data` must stay alive and unmodified until `queue` has been synchronised.
    pub unsafe fn upload_async<T: Element>(
        &self,
        queue: &Queue,
        data: &[T],
        buffer: &mut Buffer<T>,
    ) -> Result<()> {
        same_len(buffer.len(), data.len())?;
        match (&mut buffer.inner, &queue.stream) {
            (BufferInner::Gpu(b), Some(stream)) => {
                let _phase = Phase::new("H2D");
                let start = self.profiler.get().map(|p| p.start(stream)).transpose()?;
                // SAFETY: forwarded from the caller; lengths checked.
                unsafe { b.async_copy_from(data, stream) }.map_err(cuda("cuMemcpyHtoDAsync"))?;
                if let (Some(p), Some(start)) = (self.profiler.get(), start) {
                    p.copy(stream, start, Direction::HostToDevice, std::mem::size_of_val(data) as u64)?;
                }
                Ok(())
            }
            (BufferInner::Host(v), None) => {
                v.copy_from_slice(data);
                Ok(())
            }
            _ => Err(mixed_devices()),
        }
    }

    /// Queues a device-to-host copy of `buffer` into `out` on `queue`.
    ///
    /// # Safety
    /// `out` must stay alive and must not be read or written until `queue` has been synchronised.
    pub unsafe fn download_async<T: Element>(
        &self,
        queue: &Queue,
        buffer: &Buffer<T>,
        out: &mut [T],
    ) -> Result<()> {
        same_len(buffer.len(), out.len())?;
        match (&buffer.inner, &queue.stream) {
            (BufferInner::Gpu(b), Some(stream)) => {
                let _phase = Phase::new("D2H");
                let start = self.profiler.get().map(|p| p.start(stream)).transpose()?;
                // SAFETY: forwarded from the caller; lengths checked.
                unsafe { b.async_copy_to(out, stream) }.map_err(cuda("cuMemcpyDtoHAsync"))?;
                if let (Some(p), Some(start)) = (self.profiler.get(), start) {
                    p.copy(stream, start, Direction::DeviceToHost, std::mem::size_of_val(out) as u64)?;
                }
                Ok(())
            }
            (BufferInner::Host(v), None) => {
                out.copy_from_slice(v);
                Ok(())
            }
            _ => Err(mixed_devices()),
        }
    }

    /// A page-locked ("pinned") host buffer of `len` elements: copies from and to it run
    /// asynchronously and at full PCIe bandwidth. In the simulator, ordinary memory.
    pub fn pinned<T: Element>(&self, len: usize) -> Result<HostBuffer<T>> {
        let inner = if self.is_gpu() {
            let t = Instant::now();
            let buffer = LockedBuffer::new(&T::default(), len).map_err(cuda("cuMemAllocHost"))?;
            if let Some(p) = self.profiler.get() {
                p.host_cost("cuMemAllocHost (pinned)", t.elapsed().as_secs_f64() * 1e3);
            }
            HostInner::Pinned(buffer)
        } else {
            HostInner::Pageable(vec![T::default(); len])
        };
        Ok(HostBuffer { inner })
    }

    /// Waits until every kernel launched so far has finished; reports one that failed.
    pub fn synchronize(&self) -> Result<()> {
        self.sync_queue(&self.queue)
    }

    /// A failure seen while waiting for the GPU, blamed on the last kernel launched.
    fn kernel_error(&self, source: CudaError) -> Error {
        Error::Kernel { kernel: self.last_kernel.get(), source }
    }

    /// Waits until the work queued on `queue` has finished; reports a kernel that failed.
    pub fn sync_queue(&self, queue: &Queue) -> Result<()> {
        match &queue.stream {
            Some(stream) => {
                let _phase = Phase::new("wait for the GPU");
                stream
                    .synchronize()
                    .map_err(|source| Error::Kernel { kernel: self.last_kernel.get(), source })
            }
            None => Ok(()),
        }
    }

    /// Launches `kernel` over `cfg` with `args`. On a GPU it is queued on the device's queue
    /// (asynchronous); in the simulator it has finished when this returns.
    ///
    /// `args` is the kernel's argument tuple, with `&Buffer<T>` (or `&mut Buffer<T>`) for each
    /// `&[T]` parameter and `&mut Buffer<T>` for each `&mut [T]` ([`KernelArg`]): the slice
    /// carries the buffer's length. A buffer longer than `u32::MAX` elements is refused.
    ///
    /// # Safety
    /// The kernel's documented preconditions hold for `cfg` and `args` (launch shape, counts,
    /// which thread writes what). Every raw pointer in `args` must come from a [`Buffer`] of this
    /// device (or be null where the kernel allows it) and be valid for every element the kernel
    /// accesses with these arguments; slices from buffers are valid by construction.
    pub unsafe fn launch<A: Copy>(
        &self,
        kernel: &KernelFn<A>,
        cfg: LaunchConfig,
        args: impl IntoKernelArgs<A>,
    ) -> Result<()> {
        // SAFETY: forwarded from the caller.
        unsafe { self.launch_on(&self.queue, kernel, cfg, args) }
    }

    /// [`Device::launch`] on another queue.
    ///
    /// # Safety
    /// As for [`Device::launch`].
    pub unsafe fn launch_on<A: Copy>(
        &self,
        queue: &Queue,
        kernel: &KernelFn<A>,
        cfg: LaunchConfig,
        args: impl IntoKernelArgs<A>,
    ) -> Result<()> {
        // SAFETY: forwarded from the caller.
        unsafe { self.launch_counted(queue, kernel, cfg, args, None) }
    }

    /// [`Device::launch_on`], telling the profiler the launch's useful [`Work`] (bytes and flops)
    /// so that `--profile` reports achieved GB/s and GFLOP/s.
    ///
    /// # Safety
    /// As for [`Device::launch`].
    pub unsafe fn launch_counted<A: Copy>(
        &self,
        queue: &Queue,
        kernel: &KernelFn<A>,
        cfg: LaunchConfig,
        args: impl IntoKernelArgs<A>,
        work: Option<Work>,
    ) -> Result<()> {
        // SAFETY: forwarded from the caller.
        unsafe { self.launch_with(queue, kernel, cfg, args, work, false) }
    }

    /// [`Device::launch_counted`] as a programmatic dependent launch (sm_90 and later): the
    /// kernel's blocks may start, and run what comes before their
    /// [`grid_dependency_synchronize`](gpu_std::thread::grid_dependency_synchronize), while the
    /// kernel queued before it on `queue` is finishing. Saves the gap between two kernels where
    /// the second can only use the first's results. Under `--profile`, whose events go between
    /// the kernels, and in the simulator, an ordinary launch.
    ///
    /// # Safety
    /// As for [`Device::launch`]; in addition, the kernel calls `grid_dependency_synchronize`
    /// before it touches memory that the kernel before it writes, or writes memory that kernel
    /// reads.
    pub unsafe fn launch_dependent<A: Copy>(
        &self,
        queue: &Queue,
        kernel: &KernelFn<A>,
        cfg: LaunchConfig,
        args: impl IntoKernelArgs<A>,
        work: Option<Work>,
    ) -> Result<()> {
        // SAFETY: forwarded from the caller.
        unsafe { self.launch_with(queue, kernel, cfg, args, work, true) }
    }

    /// [`Device::launch_counted`], or with `dependent` [`Device::launch_dependent`].
    ///
    /// # Safety
    /// As for [`Device::launch_dependent`] with `dependent`, else [`Device::launch`].
    unsafe fn launch_with<A: Copy>(
        &self,
        queue: &Queue,
        kernel: &KernelFn<A>,
        cfg: LaunchConfig,
        args: impl IntoKernelArgs<A>,
        work: Option<Work>,
        dependent: bool,
    ) -> Result<()> {
        let name = kernel.name();
        cfg.validate().map_err(|e| Error::InvalidLaunch { kernel: name, message: e.0 })?;
        let args =
            args.into_kernel_args().map_err(|message| Error::InvalidLaunch { kernel: name, message })?;
        self.last_kernel.set(name);
        match (&self.inner, &queue.stream) {
            (Inner::Gpu(g), Some(stream)) => {
                let _phase = Phase::new(name);
                let function = g.module.get_function(name).map_err(cuda("cuModuleGetFunction"))?;
                if cfg.shared_bytes > 48 * 1024 {
                    // Above 48 KiB a kernel must opt in to more dynamic shared memory.
                    // SAFETY: a valid function handle and attribute.
                    raw("cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES)", unsafe {
                        cust::sys::cuFuncSetAttribute(
                            function.to_raw(),
                            cust::sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                            cfg.shared_bytes as i32,
                        )
                    })?;
                }
                let mut params = kernel.param_ptrs(&args);
                let (grid, block) = (cfg.grid, cfg.block);
                let start = self.profiler.get().map(|p| p.start(stream)).transpose()?;
                // SAFETY: `params` matches the kernel's signature by construction of `KernelFn<A>`;
                // pointer validity (and, for a dependent launch, the kernel's wait) is the
                // caller's contract.
                let dependent_launch = (dependent && start.is_none())
                    .then(|| unsafe {
                        crate::dependent_launch::launch(
                            function.to_raw(),
                            stream.as_inner(),
                            [grid.x, grid.y, grid.z],
                            [block.x, block.y, block.z],
                            cfg.shared_bytes,
                            &mut params,
                        )
                    })
                    .flatten();
                match dependent_launch {
                    Some(result) => raw("cuLaunchKernelEx", result)?,
                    None => unsafe {
                        stream.launch(
                            &function,
                            (grid.x, grid.y, grid.z),
                            (block.x, block.y, block.z),
                            cfg.shared_bytes,
                            &params,
                        )
                    }
                    .map_err(|source| Error::Kernel { kernel: name, source })?,
                }
                if let (Some(p), Some(start)) = (self.profiler.get(), start) {
                    p.kernel(stream, start, &function, name, cfg, work)?;
                }
                Ok(())
            }
            // SAFETY: forwarded from the caller.
            (Inner::Simulator, None) => unsafe { gpu_std::sim::launch(kernel, cfg, args) }
                .map_err(|e| Error::InvalidLaunch { kernel: name, message: e.0 }),
            _ => Err(mixed_devices()),
        }
    }
}

/// A point in a device's work queue, for timing phases: a recorded CUDA event on a GPU, the wall
/// clock in the simulator.
pub struct Mark {
    inner: MarkInner,
}

enum MarkInner {
    Event(Event),
    Instant(Instant),
}

impl Device {
    /// Records a [`Mark`] after the work queued so far on the device's queue.
    pub fn mark(&self) -> Result<Mark> {
        self.mark_on(&self.queue)
    }

    /// Records a [`Mark`] after the work queued so far on `queue`.
    pub fn mark_on(&self, queue: &Queue) -> Result<Mark> {
        let inner = match &queue.stream {
            Some(stream) => {
                let event = Event::new(EventFlags::DEFAULT).map_err(cuda("cuEventCreate"))?;
                event.record(stream).map_err(cuda("cuEventRecord"))?;
                MarkInner::Event(event)
            }
            None => MarkInner::Instant(Instant::now()),
        };
        Ok(Mark { inner })
    }

    /// Makes the work queued on `queue` from now on wait until the work before `mark` (recorded on
    /// another queue of this device) has finished, without blocking the host (`cuStreamWaitEvent`):
    /// one queue's kernel consuming what another queue's kernel produces. The mark is used up. In
    /// the simulator, where work has finished when it is queued, there is nothing to wait for.
    pub fn queue_wait(&self, queue: &Queue, mark: Mark) -> Result<()> {
        match (&queue.stream, mark.inner) {
            (Some(stream), MarkInner::Event(event)) => {
                stream.wait_event(event, StreamWaitEventFlags::DEFAULT).map_err(cuda("cuStreamWaitEvent"))
            }
            (None, MarkInner::Instant(_)) => Ok(()),
            _ => Err(Error::InvalidInput("a mark and a queue of different devices".into())),
        }
    }

    /// Milliseconds of device time between two marks (waits for `to`). On a GPU this is
    /// `cuEventElapsedTime`, resolution about 0.5 µs.
    pub fn elapsed_ms(&self, from: &Mark, to: &Mark) -> Result<f64> {
        match (&from.inner, &to.inner) {
            (MarkInner::Event(a), MarkInner::Event(b)) => {
                b.synchronize().map_err(|source| Error::Kernel { kernel: self.last_kernel.get(), source })?;
                Ok(b.elapsed_time_f32(a).map_err(cuda("cuEventElapsedTime"))? as f64)
            }
            (MarkInner::Instant(a), MarkInner::Instant(b)) => Ok((*b - *a).as_secs_f64() * 1e3),
            _ => Err(Error::InvalidInput("marks from different devices".into())),
        }
    }

    /// Times `work` (which queues device work, e.g. a launch): `warmup` untimed calls, then `runs`
    /// calls queued back to back with a mark between each, so that each interval is one call's
    /// device time. One more untimed call is queued first, so the GPU is already busy when the first
    /// mark is recorded and the host's launch latency does not leak into the intervals. Returns the
    /// per-call times in milliseconds.
    pub fn time_ms(
        &self,
        warmup: usize,
        runs: usize,
        mut work: impl FnMut() -> Result<()>,
    ) -> Result<Vec<f64>> {
        for _ in 0..warmup {
            work()?;
        }
        self.synchronize()?;
        work()?;
        let mut marks = vec![self.mark()?];
        for _ in 0..runs {
            work()?;
            marks.push(self.mark()?);
        }
        marks.windows(2).map(|w| self.elapsed_ms(&w[0], &w[1])).collect()
    }
}

/// A host array for asynchronous copies: page-locked on a GPU device (see [`Device::pinned`]).
pub struct HostBuffer<T: Element> {
    inner: HostInner<T>,
}

enum HostInner<T: Element> {
    Pinned(LockedBuffer<T>),
    Pageable(Vec<T>),
}

impl<T: Element> std::ops::Deref for HostBuffer<T> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        match &self.inner {
            HostInner::Pinned(b) => b.as_slice(),
            HostInner::Pageable(v) => v,
        }
    }
}

impl<T: Element> std::ops::DerefMut for HostBuffer<T> {
    fn deref_mut(&mut self) -> &mut [T] {
        match &mut self.inner {
            HostInner::Pinned(b) => b.as_mut_slice(),
            HostInner::Pageable(v) => v,
        }
    }
}

fn same_len(a: usize, b: usize) -> Result<()> {
    if a == b { Ok(()) } else { Err(Error::InvalidInput(format!("copy between {a} and {b} elements"))) }
}

fn mixed_devices() -> Error {
    Error::InvalidInput("a buffer or queue of one device was used with another".into())
}

/// An array in device memory (or in host memory for the simulator), owned by the [`Device`] that
/// made it.
pub struct Buffer<T: Element> {
    inner: BufferInner<T>,
}

enum BufferInner<T: Element> {
    Gpu(DeviceBuffer<T>),
    Ordered(Ordered<T>),
    Host(Vec<T>),
}

/// Memory from [`Device::alloc_temporary`], given back to the pool in its queue's order when
/// dropped.
struct Ordered<T> {
    ptr: cust::sys::CUdeviceptr,
    len: usize,
    stream: cust::sys::CUstream,
    element: std::marker::PhantomData<T>,
}

impl<T> Drop for Ordered<T> {
    fn drop(&mut self) {
        // SAFETY: the allocation of `cuMemAllocAsync` on this stream, freed once.
        let result = unsafe { cust::sys::cuMemFreeAsync(self.ptr, self.stream) };
        if result != cust::sys::cudaError_enum::CUDA_SUCCESS {
            // Drop cannot return the error; the memory stays allocated until the context goes.
            eprintln!("warning: cuMemFreeAsync failed ({result:?}): a temporary buffer leaked");
        }
    }
}

impl<T: Element> Buffer<T> {
    /// Number of elements.
    pub fn len(&self) -> usize {
        match &self.inner {
            BufferInner::Gpu(b) => b.len(),
            BufferInner::Ordered(b) => b.len,
            BufferInner::Host(v) => v.len(),
        }
    }

    /// Whether the buffer has no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Elements `range` as a read-only kernel argument (`&[T]` in the kernel): one image of a
    /// batch, or a matrix that starts inside a larger one. A range past the end is an error.
    pub fn view(&self, range: impl RangeBounds<usize>) -> Result<BufferView<'_, T>> {
        let range = view_range(range, self.len())?;
        Ok(BufferView {
            ptr: self.as_kernel_ptr().wrapping_add(range.start),
            len: range.len(),
            buffer: PhantomData,
        })
    }

    /// Elements `range` as a writable kernel argument (`&mut [T]` in the kernel).
    pub fn view_mut(&mut self, range: impl RangeBounds<usize>) -> Result<BufferViewMut<'_, T>> {
        let range = view_range(range, self.len())?;
        Ok(BufferViewMut {
            ptr: self.as_kernel_mut_ptr().wrapping_add(range.start),
            len: range.len(),
            buffer: PhantomData,
        })
    }

    /// The address a kernel reads through: a device address on a GPU, a host address in the
    /// simulator. Kernels over slices take the buffer itself (or a [`Buffer::view`]); this is
    /// for a kernel with raw-pointer arguments.
    pub fn as_kernel_ptr(&self) -> *const T {
        match &self.inner {
            BufferInner::Gpu(b) => b.as_device_ptr().as_raw() as *const T,
            BufferInner::Ordered(b) => b.ptr as *const T,
            BufferInner::Host(v) => v.as_ptr(),
        }
    }

    /// The address a kernel writes through.
    pub fn as_kernel_mut_ptr(&mut self) -> *mut T {
        match &mut self.inner {
            BufferInner::Gpu(b) => b.as_device_ptr().as_raw() as *mut T,
            BufferInner::Ordered(b) => b.ptr as *mut T,
            BufferInner::Host(v) => v.as_mut_ptr(),
        }
    }
}

impl<'a, T: Element> From<&'a Buffer<T>> for BufferView<'a, T> {
    /// The whole buffer as a view.
    fn from(buffer: &'a Buffer<T>) -> Self {
        BufferView { ptr: buffer.as_kernel_ptr(), len: buffer.len(), buffer: PhantomData }
    }
}

impl<'a, T: Element> From<&'a mut Buffer<T>> for BufferViewMut<'a, T> {
    /// The whole buffer as a writable view.
    fn from(buffer: &'a mut Buffer<T>) -> Self {
        BufferViewMut { ptr: buffer.as_kernel_mut_ptr(), len: buffer.len(), buffer: PhantomData }
    }
}

/// `range` of a buffer of `len` elements as a half-open range, or why it is not one.
fn view_range(range: impl RangeBounds<usize>, len: usize) -> Result<std::ops::Range<usize>> {
    let start = match range.start_bound() {
        Bound::Included(&s) => s,
        Bound::Excluded(&s) => s.saturating_add(1),
        Bound::Unbounded => 0,
    };
    let end = match range.end_bound() {
        Bound::Included(&e) => e.saturating_add(1),
        Bound::Excluded(&e) => e,
        Bound::Unbounded => len,
    };
    if start > end || end > len {
        return Err(Error::InvalidInput(format!(
            "a view of elements {start}..{end} of a buffer of {len} elements"
        )));
    }
    Ok(start..end)
}

/// Part of a [`Buffer`] passed where a kernel takes `&[T]`, borrowing the buffer as `&buffer`
/// does: from [`Buffer::view`].
pub struct BufferView<'a, T: Element> {
    ptr: *const T,
    len: usize,
    buffer: PhantomData<&'a Buffer<T>>,
}

impl<T: Element> Clone for BufferView<'_, T> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<T: Element> Copy for BufferView<'_, T> {}

/// Part of a [`Buffer`] passed where a kernel takes `&mut [T]`, borrowing the buffer as
/// `&mut buffer` does: from [`Buffer::view_mut`].
pub struct BufferViewMut<'a, T: Element> {
    ptr: *mut T,
    len: usize,
    buffer: PhantomData<&'a mut Buffer<T>>,
}

impl<'a, T: Element> BufferView<'a, T> {
    /// A view of `len` elements at `ptr` in memory no [`Buffer`] owns: an array of another library
    /// (PyTorch, CuPy, Numba), handed over through DLPack or `__cuda_array_interface__`.
    ///
    /// # Safety
    /// `ptr` is aligned for `T` and valid for reads of `len` elements for `'a`, in the memory the
    /// kernels of the device it is launched on read (device memory of that GPU's primary context,
    /// host memory for the simulator), and nothing writes those elements while a kernel reads them.
    pub unsafe fn from_raw_parts(ptr: *const T, len: usize) -> Self {
        BufferView { ptr, len, buffer: PhantomData }
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the view has no elements.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Elements `range` of this view.
    pub fn view(&self, range: impl RangeBounds<usize>) -> Result<BufferView<'a, T>> {
        let range = view_range(range, self.len)?;
        Ok(BufferView { ptr: self.ptr.wrapping_add(range.start), len: range.len(), buffer: PhantomData })
    }
}

impl<'a, T: Element> BufferViewMut<'a, T> {
    /// A writable view of `len` elements at `ptr` in memory no [`Buffer`] owns (see
    /// [`BufferView::from_raw_parts`]).
    ///
    /// # Safety
    /// As for [`BufferView::from_raw_parts`], for writes too; nothing else reads or writes those
    /// elements while a kernel writes them.
    pub unsafe fn from_raw_parts(ptr: *mut T, len: usize) -> Self {
        BufferViewMut { ptr, len, buffer: PhantomData }
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the view has no elements.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Elements `range` of this view, writable, for as long as this view is borrowed.
    pub fn view_mut(&mut self, range: impl RangeBounds<usize>) -> Result<BufferViewMut<'_, T>> {
        let range = view_range(range, self.len)?;
        Ok(BufferViewMut { ptr: self.ptr.wrapping_add(range.start), len: range.len(), buffer: PhantomData })
    }

    /// Elements `range` of this view, still writable.
    pub fn into_view_mut(self, range: impl RangeBounds<usize>) -> Result<BufferViewMut<'a, T>> {
        let range = view_range(range, self.len)?;
        Ok(BufferViewMut { ptr: self.ptr.wrapping_add(range.start), len: range.len(), buffer: PhantomData })
    }

    /// A read-only view of the same elements that lives as long as the buffer's borrow, for a
    /// launch that reads some elements of a buffer while writing others that no split separates
    /// (interleaved column blocks of one matrix).
    ///
    /// # Safety
    /// No launch may read an element through the returned view (or one made from it) while
    /// another view writes it, nor write one it reads.
    pub unsafe fn aliased_view(&self) -> BufferView<'a, T> {
        BufferView { ptr: self.ptr, len: self.len, buffer: PhantomData }
    }
}

/// A host value that becomes one kernel argument of type `A`: the value itself (scalars, `Copy`
/// structs, raw pointers), or a buffer for a device slice — `&Buffer<T>` or `&mut Buffer<T>` for a
/// [`Slice<T>`] (`&[T]` in the kernel), only `&mut Buffer<T>` for a [`SliceMut<T>`]
/// (`&mut [T]`), so passing a read-only buffer where the kernel writes does not compile.
pub trait KernelArg<A> {
    /// The argument, or why it cannot be one (a buffer longer than a slice's `u32` length).
    fn kernel_arg(self) -> std::result::Result<A, String>;
}

impl<T: Copy> KernelArg<T> for T {
    fn kernel_arg(self) -> std::result::Result<T, String> {
        Ok(self)
    }
}

/// A buffer's length as a device slice's `u32` length.
fn slice_len(len: usize) -> std::result::Result<u32, String> {
    u32::try_from(len)
        .map_err(|_| format!("a buffer of {len} elements is longer than a kernel slice (u32::MAX elements)"))
}

impl<T: Element> KernelArg<Slice<T>> for &Buffer<T> {
    fn kernel_arg(self) -> std::result::Result<Slice<T>, String> {
        // SAFETY: the buffer holds `len` elements and outlives the launch (the borrow is held
        // until the launch call returns; the caller of the launch keeps the buffer until the work
        // completes, as for every launch).
        Ok(unsafe { Slice::from_raw_parts(self.as_kernel_ptr(), slice_len(self.len())?) })
    }
}

impl<T: Element> KernelArg<Slice<T>> for &mut Buffer<T> {
    fn kernel_arg(self) -> std::result::Result<Slice<T>, String> {
        (&*self).kernel_arg()
    }
}

impl<T: Element> KernelArg<SliceMut<T>> for &mut Buffer<T> {
    fn kernel_arg(self) -> std::result::Result<SliceMut<T>, String> {
        let len = slice_len(self.len())?;
        // SAFETY: as for `Slice`; the exclusive borrow keeps other arguments from aliasing it.
        Ok(unsafe { SliceMut::from_raw_parts(self.as_kernel_mut_ptr(), len) })
    }
}

impl<T: Element> KernelArg<Slice<T>> for BufferView<'_, T> {
    fn kernel_arg(self) -> std::result::Result<Slice<T>, String> {
        // SAFETY: the view lies inside its buffer, which the borrow keeps alive, as for `&Buffer`.
        Ok(unsafe { Slice::from_raw_parts(self.ptr, slice_len(self.len)?) })
    }
}

impl<T: Element> KernelArg<SliceMut<T>> for BufferViewMut<'_, T> {
    fn kernel_arg(self) -> std::result::Result<SliceMut<T>, String> {
        // SAFETY: as for `BufferView`; the exclusive borrow keeps other arguments from aliasing it
        // (but for views made by the unsafe `aliased_view`).
        Ok(unsafe { SliceMut::from_raw_parts(self.ptr, slice_len(self.len)?) })
    }
}

/// An optional input: `None` passes an empty slice, which kernels with optional inputs read as
/// "absent".
impl<T: Element, V: KernelArg<Slice<T>>> KernelArg<Slice<T>> for Option<V> {
    fn kernel_arg(self) -> std::result::Result<Slice<T>, String> {
        match self {
            Some(v) => v.kernel_arg(),
            // SAFETY: an empty slice reads no memory.
            None => Ok(unsafe { Slice::from_raw_parts(std::ptr::null(), 0) }),
        }
    }
}

/// What [`Device::launch`] takes for a kernel whose argument tuple is `A`: a tuple of the same
/// length whose elements are each a [`KernelArg`] of the kernel's argument.
pub trait IntoKernelArgs<A> {
    /// The kernel's argument tuple.
    fn into_kernel_args(self) -> std::result::Result<A, String>;
}

macro_rules! impl_into_kernel_args {
    ($($arg:ident $value:ident : $idx:tt),*) => {
        impl<$($arg, $value: KernelArg<$arg>),*> IntoKernelArgs<($($arg,)*)> for ($($value,)*) {
            fn into_kernel_args(self) -> std::result::Result<($($arg,)*), String> {
                Ok(($(self.$idx.kernel_arg()?,)*))
            }
        }
    };
}

impl_into_kernel_args!(A0 P0: 0);
impl_into_kernel_args!(A0 P0: 0, A1 P1: 1);
impl_into_kernel_args!(A0 P0: 0, A1 P1: 1, A2 P2: 2);
impl_into_kernel_args!(A0 P0: 0, A1 P1: 1, A2 P2: 2, A3 P3: 3);
impl_into_kernel_args!(A0 P0: 0, A1 P1: 1, A2 P2: 2, A3 P3: 3, A4 P4: 4);
impl_into_kernel_args!(A0 P0: 0, A1 P1: 1, A2 P2: 2, A3 P3: 3, A4 P4: 4, A5 P5: 5);
impl_into_kernel_args!(A0 P0: 0, A1 P1: 1, A2 P2: 2, A3 P3: 3, A4 P4: 4, A5 P5: 5, A6 P6: 6);
impl_into_kernel_args!(A0 P0: 0, A1 P1: 1, A2 P2: 2, A3 P3: 3, A4 P4: 4, A5 P5: 5, A6 P6: 6, A7 P7: 7);
impl_into_kernel_args!(A0 P0: 0, A1 P1: 1, A2 P2: 2, A3 P3: 3, A4 P4: 4, A5 P5: 5, A6 P6: 6, A7 P7: 7, A8 P8: 8);
impl_into_kernel_args!(
    A0 P0: 0, A1 P1: 1, A2 P2: 2, A3 P3: 3, A4 P4: 4, A5 P5: 5, A6 P6: 6, A7 P7: 7, A8 P8: 8, A9 P9: 9
);
impl_into_kernel_args!(
    A0 P0: 0, A1 P1: 1, A2 P2: 2, A3 P3: 3, A4 P4: 4, A5 P5: 5, A6 P6: 6, A7 P7: 7, A8 P8: 8, A9 P9: 9,
    A10 P10: 10
);
impl_into_kernel_args!(
    A0 P0: 0, A1 P1: 1, A2 P2: 2, A3 P3: 3, A4 P4: 4, A5 P5: 5, A6 P6: 6, A7 P7: 7, A8 P8: 8, A9 P9: 9,
    A10 P10: 10, A11 P11: 11
);

/// Host wall time and bytes of a device's synchronous copies ([`Device::copy_totals`]).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct CopyTotals {
    /// Host-to-device milliseconds (from the call to the copy's end, host-side staging included).
    pub h2d_ms: f64,
    /// Host-to-device bytes.
    pub h2d_bytes: u64,
    /// Device-to-host milliseconds (after the queued kernels have finished).
    pub d2h_ms: f64,
    /// Device-to-host bytes.
    pub d2h_bytes: u64,
    /// Page-locking the device's staging chunks, once, at the first staged copy.
    pub staging_setup_ms: f64,
}

impl CopyTotals {
    /// All copy time, staging set-up included.
    pub fn total_ms(&self) -> f64 {
        self.h2d_ms + self.d2h_ms + self.staging_setup_ms
    }
}

/// Bytes of each of the two pinned chunks of a [`Staging`].
pub const STAGING_CHUNK_BYTES: usize = 4 << 20;

/// Page-locked staging for copies between ordinary (pageable) host memory and the device: two
/// pinned chunks used in turn, so that the copy engine moves one chunk while the host copies the
/// other. Made once ([`Device::staging`]; page-locking costs milliseconds per hundred megabytes)
/// and reused for every copy, it gives pinned bandwidth for data of any size without pinning the
/// data itself. In the simulator the copies are direct.
pub struct Staging {
    chunks: Vec<HostBuffer<u8>>,
    done: Vec<Event>,
}

impl Device {
    /// A [`Staging`] of two [`STAGING_CHUNK_BYTES`] chunks for this device.
    pub fn staging(&self) -> Result<Staging> {
        if !self.is_gpu() {
            return Ok(Staging { chunks: Vec::new(), done: Vec::new() });
        }
        let event = || Event::new(EventFlags::DISABLE_TIMING).map_err(cuda("cuEventCreate"));
        Ok(Staging {
            chunks: vec![self.pinned(STAGING_CHUNK_BYTES)?, self.pinned(STAGING_CHUNK_BYTES)?],
            done: vec![event()?, event()?],
        })
    }
}

impl Staging {
    /// Copies `data` into `buffer[offset..offset + data.len()]` on `queue`. `data` may change as
    /// soon as this returns (the copies read the staging chunks, which the next use waits for).
    pub fn upload<T: Element>(
        &mut self,
        device: &Device,
        queue: &Queue,
        data: &[T],
        buffer: &mut Buffer<T>,
        offset: usize,
    ) -> Result<()> {
        in_range(offset, data.len(), buffer.len())?;
        let stream = match (&mut buffer.inner, &queue.stream) {
            (BufferInner::Host(v), None) => {
                v[offset..offset + data.len()].copy_from_slice(data);
                return Ok(());
            }
            (BufferInner::Gpu(b), Some(stream)) => (stream, device_address(b, offset)),
            _ => return Err(mixed_devices()),
        };
        let (stream, base) = stream;
        let bytes = as_bytes(data);
        let _phase = Phase::new("H2D (staged)");
        let chunks = bytes.len().div_ceil(STAGING_CHUNK_BYTES);
        let slots = [self.chunks[0].as_mut_ptr() as usize, self.chunks[1].as_mut_ptr() as usize];
        let share = |c: usize, range: std::ops::Range<usize>| {
            let at = c * STAGING_CHUNK_BYTES;
            // SAFETY: shares of a chunk are disjoint ranges inside it, written by one thread each
            // while the copy engine does not read that slot (the driver below orders both).
            let slot = unsafe {
                std::slice::from_raw_parts_mut((slots[c % 2] + range.start) as *mut u8, range.len())
            };
            slot.copy_from_slice(&bytes[at + range.start..at + range.end]);
        };
        let chunk_len = |c: usize| STAGING_CHUNK_BYTES.min(bytes.len() - c * STAGING_CHUNK_BYTES);
        Crew::run(chunks, bytes.len(), &chunk_len, &share, |crew| {
            crew.upload(
                |slot| self.done[slot].synchronize().map_err(|source| device.kernel_error(source)),
                |c| {
                    let slot = c % 2;
                    let start = device.profiler.get().map(|p| p.start(stream)).transpose()?;
                    // SAFETY: the slot is pinned, owned by `self` and not written again before
                    // `done[slot]` has passed; the destination range lies inside `buffer` (checked
                    // above).
                    raw("cuMemcpyHtoDAsync", unsafe {
                        cust::sys::cuMemcpyHtoDAsync_v2(
                            base + (c * STAGING_CHUNK_BYTES) as u64,
                            slots[slot] as *const std::ffi::c_void,
                            chunk_len(c),
                            stream.as_inner(),
                        )
                    })?;
                    self.done[slot].record(stream).map_err(cuda("cuEventRecord"))?;
                    if let (Some(p), Some(start)) = (device.profiler.get(), start) {
                        p.copy(stream, start, Direction::HostToDevice, chunk_len(c) as u64)?;
                    }
                    Ok(())
                },
            )
        })
    }

    /// Waits for the work queued on `queue` so far, then copies `buffer[offset..offset + out.len()]`
    /// into `out`.
    pub fn download<T: Element>(
        &mut self,
        device: &Device,
        queue: &Queue,
        buffer: &Buffer<T>,
        offset: usize,
        out: &mut [T],
    ) -> Result<()> {
        in_range(offset, out.len(), buffer.len())?;
        let stream = match (&buffer.inner, &queue.stream) {
            (BufferInner::Host(v), None) => {
                out.copy_from_slice(&v[offset..offset + out.len()]);
                return Ok(());
            }
            (BufferInner::Gpu(b), Some(stream)) => (stream, device_address(b, offset)),
            _ => return Err(mixed_devices()),
        };
        let (stream, base) = stream;
        let out = as_bytes_mut(out);
        let _phase = Phase::new("D2H (staged)");
        let total = out.len();
        let chunks = total.div_ceil(STAGING_CHUNK_BYTES);
        let slots = [self.chunks[0].as_mut_ptr() as usize, self.chunks[1].as_mut_ptr() as usize];
        let out_address = out.as_mut_ptr() as usize;
        let share = |c: usize, range: std::ops::Range<usize>| {
            let at = c * STAGING_CHUNK_BYTES;
            // SAFETY: shares are disjoint ranges of `out`, written by one thread each; the slot holds
            // chunk `c`, complete (the driver releases a chunk after its copy's event has passed).
            unsafe {
                let dst =
                    std::slice::from_raw_parts_mut((out_address + at + range.start) as *mut u8, range.len());
                let src = std::slice::from_raw_parts((slots[c % 2] + range.start) as *const u8, range.len());
                dst.copy_from_slice(src);
            }
        };
        let chunk_len = |c: usize| STAGING_CHUNK_BYTES.min(total - c * STAGING_CHUNK_BYTES);
        Crew::run(chunks, total, &chunk_len, &share, |crew| {
            crew.download(
                |c| {
                    let slot = c % 2;
                    let start = device.profiler.get().map(|p| p.start(stream)).transpose()?;
                    // SAFETY: the slot is pinned and owned by `self`; the host reads it only after
                    // `done[slot]` has passed; the source range lies inside `buffer` (checked above).
                    raw("cuMemcpyDtoHAsync", unsafe {
                        cust::sys::cuMemcpyDtoHAsync_v2(
                            slots[slot] as *mut std::ffi::c_void,
                            base + (c * STAGING_CHUNK_BYTES) as u64,
                            chunk_len(c),
                            stream.as_inner(),
                        )
                    })?;
                    self.done[slot].record(stream).map_err(cuda("cuEventRecord"))?;
                    if let (Some(p), Some(start)) = (device.profiler.get(), start) {
                        p.copy(stream, start, Direction::DeviceToHost, chunk_len(c) as u64)?;
                    }
                    Ok(())
                },
                |slot| self.done[slot].synchronize().map_err(|source| device.kernel_error(source)),
            )
        })
    }
}

/// The host side of a staged copy, shared by several threads. The calling thread drives the device
/// side (waits for events, queues the copies between the pinned slots and the device) and copies one
/// share of each chunk; scoped helper threads copy the other shares. One core moves about 10 GB/s
/// between ordinary and page-locked memory, a fifth of the copy engine's 55 GB/s; a thread pool woken
/// for every chunk pays its wake-up (tens of microseconds) each time, so the helpers stay awake,
/// spinning, for the whole transfer, and a chunk is released to them the moment its slot is free.
struct Crew<'a> {
    parts: usize,
    chunk_len: &'a (dyn Fn(usize) -> usize + Sync),
    share: &'a (dyn Fn(usize, std::ops::Range<usize>) + Sync),
    /// Chunks `0..released` may be copied.
    released: AtomicUsize,
    /// Shares copied, per chunk.
    copied: Vec<AtomicUsize>,
    /// Set when the driver fails: the helpers stop.
    abort: AtomicBool,
}

/// Bytes per thread below which a staged copy uses fewer threads.
const BYTES_PER_COPY_THREAD: usize = 1 << 20;
/// Most threads copying a staged transfer.
const MAX_COPY_THREADS: usize = 8;

impl<'a> Crew<'a> {
    /// Runs `drive` with a crew for `chunks` chunks of `total` bytes; `share(c, range)` copies the
    /// byte `range` of chunk `c` (of `chunk_len(c)` bytes).
    fn run(
        chunks: usize,
        total: usize,
        chunk_len: &'a (dyn Fn(usize) -> usize + Sync),
        share: &'a (dyn Fn(usize, std::ops::Range<usize>) + Sync),
        drive: impl FnOnce(&Crew<'a>) -> Result<()>,
    ) -> Result<()> {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let parts = cores.min(MAX_COPY_THREADS).min(total.div_ceil(BYTES_PER_COPY_THREAD)).max(1);
        let crew = Crew {
            parts,
            chunk_len,
            share,
            released: AtomicUsize::new(0),
            copied: (0..chunks).map(|_| AtomicUsize::new(0)).collect(),
            abort: AtomicBool::new(false),
        };
        std::thread::scope(|scope| {
            for part in 1..parts {
                let crew = &crew;
                scope.spawn(move || {
                    for c in 0..chunks {
                        if !spin_until(|| crew.released.load(Ordering::Acquire) > c, &crew.abort) {
                            return;
                        }
                        crew.copy_share(c, part);
                    }
                });
            }
            let result = drive(&crew);
            if result.is_err() {
                crew.abort.store(true, Ordering::Release);
            }
            result
        })
    }

    /// The byte range of share `part` of chunk `c` (64-byte aligned boundaries).
    fn copy_share(&self, c: usize, part: usize) {
        let len = (self.chunk_len)(c);
        let per = len.div_ceil(self.parts).next_multiple_of(64);
        let start = (part * per).min(len);
        let end = (start + per).min(len);
        if start < end {
            (self.share)(c, start..end);
        }
        self.copied[c].fetch_add(1, Ordering::AcqRel);
    }

    /// The upload order: for each chunk, `wait_slot(slot)` until the device has read the slot's
    /// previous chunk, fill the slot on every thread, then `send(c)` it from slot `c % 2`.
    fn upload(
        &self,
        mut wait_slot: impl FnMut(usize) -> Result<()>,
        mut send: impl FnMut(usize) -> Result<()>,
    ) -> Result<()> {
        for c in 0..self.copied.len() {
            wait_slot(c % 2)?;
            self.release(c);
            self.copy_own_share(c);
            self.wait_copied(c);
            send(c)?;
        }
        Ok(())
    }

    /// The download order: `fetch(c)` queues chunk `c` into slot `c % 2` once the host has moved
    /// the slot's previous chunk out; meanwhile every thread moves the chunk before it out, after
    /// `wait_slot(slot)` says it has arrived.
    fn download(
        &self,
        mut fetch: impl FnMut(usize) -> Result<()>,
        mut wait_slot: impl FnMut(usize) -> Result<()>,
    ) -> Result<()> {
        let chunks = self.copied.len();
        for c in 0..=chunks {
            if c < chunks {
                if c >= 2 {
                    self.wait_copied(c - 2);
                }
                fetch(c)?;
            }
            if c >= 1 {
                wait_slot((c - 1) % 2)?;
                self.release(c - 1);
                self.copy_own_share(c - 1);
            }
        }
        if chunks > 0 {
            // Each thread copies its shares in chunk order: the last chunk done means all are.
            self.wait_copied(chunks - 1);
        }
        Ok(())
    }

    /// Lets the helpers copy chunk `c` (and every earlier one).
    fn release(&self, c: usize) {
        self.released.store(c + 1, Ordering::Release);
    }

    /// The driver's own share of chunk `c`.
    fn copy_own_share(&self, c: usize) {
        self.copy_share(c, 0);
    }

    /// Waits until every share of chunk `c` has been copied.
    fn wait_copied(&self, c: usize) {
        let never = AtomicBool::new(false);
        spin_until(|| self.copied[c].load(Ordering::Acquire) == self.parts, &never);
    }
}

/// Spins (yielding now and then) until `ready()`; `false` if `abort` was set first.
fn spin_until(ready: impl Fn() -> bool, abort: &AtomicBool) -> bool {
    let mut spins = 0u32;
    while !ready() {
        if abort.load(Ordering::Acquire) {
            return false;
        }
        spins += 1;
        if spins.is_multiple_of(256) {
            std::thread::yield_now();
        } else {
            std::hint::spin_loop();
        }
    }
    true
}

impl Drop for Staging {
    fn drop(&mut self) {
        // Copies may still read or write the chunks: wait for them before the memory goes.
        for event in &self.done {
            let _ = event.synchronize();
        }
    }
}

/// Makes `data`'s fresh (not yet touched) memory resident on all cores: asks Linux for 2 MiB
/// pages (`madvise(MADV_HUGEPAGE)`, advice only: nothing changes where transparent huge pages are
/// off), then writes its default value at every 4 KiB, each thread in its own 2 MiB blocks. The
/// first touch zeroes the page in the kernel; left to the staged copy, whose threads share each
/// 4 MiB chunk and so meet in the same huge pages, that zeroing ran nearly serially (a fresh
/// 64 MiB result cost 6–7.5 ms to download against 2.6 ms into touched memory on the H100's host).
fn touch_in_parallel<T: Element>(data: &mut [T]) {
    const HUGE_PAGE: usize = 2 << 20;
    const PAGE: usize = 4 << 10;
    let begin = data.as_mut_ptr() as usize;
    let (start, end) =
        (begin.next_multiple_of(HUGE_PAGE), (begin + std::mem::size_of_val(data)) & !(HUGE_PAGE - 1));
    if end > start {
        // SAFETY: the range lies inside `data`'s allocation; MADV_HUGEPAGE changes no contents.
        unsafe { libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_HUGEPAGE) };
    }
    let size = std::mem::size_of::<T>().max(1);
    data.par_chunks_mut(HUGE_PAGE / size).for_each(|block| {
        for value in block.iter_mut().step_by((PAGE / size).max(1)) {
            // SAFETY: a valid, aligned element of `block`; volatile so the store is not elided
            // (the memory already holds that value).
            unsafe { std::ptr::write_volatile(value, T::default()) };
        }
    });
}

/// Whether `ptr` lies in page-locked host memory the driver knows (from [`Device::pinned`] or
/// registered). `cuPointerGetAttributes`, unlike `cuPointerGetAttribute` and `cuMemHostGetFlags`,
/// answers "unknown memory" (type 0) for ordinary memory instead of failing, so error checkers
/// such as compute-sanitizer see no failed call.
fn is_page_locked(ptr: *const std::ffi::c_void) -> bool {
    let mut memory_type = 0u32;
    let mut attribute = cust::sys::CUpointer_attribute::CU_POINTER_ATTRIBUTE_MEMORY_TYPE;
    let mut data = [&mut memory_type as *mut u32 as *mut std::ffi::c_void];
    // SAFETY: one attribute, whose value (a CUmemorytype, 32 bits) is written to `memory_type`.
    let status =
        unsafe { cust::sys::cuPointerGetAttributes(1, &mut attribute, data.as_mut_ptr(), ptr as u64) };
    status == cust::sys::cudaError_enum::CUDA_SUCCESS
        && memory_type == cust::sys::CUmemorytype_enum::CU_MEMORYTYPE_HOST as u32
}

fn in_range(offset: usize, len: usize, capacity: usize) -> Result<()> {
    if offset.checked_add(len).is_some_and(|end| end <= capacity) {
        Ok(())
    } else {
        Err(Error::InvalidInput(format!("copy of {len} elements at {offset} into a buffer of {capacity}")))
    }
}

/// The device address of element `offset` of a GPU allocation.
fn ensure_same_len(src: usize, dst: usize) -> Result<()> {
    if src != dst {
        return Err(Error::InvalidInput(format!("a copy of {src} elements into room for {dst}")));
    }
    Ok(())
}

fn device_address<T: Element>(buffer: &DeviceBuffer<T>, offset: usize) -> u64 {
    buffer.as_device_ptr().as_raw() + (offset * std::mem::size_of::<T>()) as u64
}

fn as_bytes<T: Element>(data: &[T]) -> &[u8] {
    // SAFETY: an `Element` is plain data without padding; any initialised value is valid bytes.
    unsafe { std::slice::from_raw_parts(data.as_ptr() as *const u8, std::mem::size_of_val(data)) }
}

fn as_bytes_mut<T: Element>(data: &mut [T]) -> &mut [u8] {
    // SAFETY: as for `as_bytes`; every bit pattern is a valid `Element`, so any bytes written are.
    unsafe { std::slice::from_raw_parts_mut(data.as_mut_ptr() as *mut u8, std::mem::size_of_val(data)) }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The crew's two orders with a host stand-in for the copy engine (synchronous copies between
    /// the slots and a "device" vector): every byte arrives, for transfers from one byte to several
    /// odd-sized chunks, with as many threads as the transfer and the machine allow.
    #[test]
    fn crew_moves_every_byte_both_ways() {
        const CHUNK: usize = 1_500_007;
        for total in [1usize, 1000, CHUNK, 3 * CHUNK + 12_345, 9 << 20] {
            let data: Vec<u8> = (0..total).map(|i| (i * 131 % 251) as u8).collect();
            let chunks = total.div_ceil(CHUNK);
            let chunk_len = |c: usize| CHUNK.min(total - c * CHUNK);
            let mut slots = [vec![0u8; CHUNK], vec![0u8; CHUNK]];
            let slot_at = [slots[0].as_mut_ptr() as usize, slots[1].as_mut_ptr() as usize];

            // Up: data → slots (crew) → device (driver).
            let mut device = vec![0u8; total];
            let fill = |c: usize, range: std::ops::Range<usize>| {
                // SAFETY: disjoint ranges of the slot, one thread each.
                let slot = unsafe {
                    std::slice::from_raw_parts_mut((slot_at[c % 2] + range.start) as *mut u8, range.len())
                };
                slot.copy_from_slice(&data[c * CHUNK + range.start..c * CHUNK + range.end]);
            };
            Crew::run(chunks, total, &chunk_len, &fill, |crew| {
                crew.upload(
                    |_| Ok(()),
                    |c| {
                        // SAFETY: the crew has finished writing the slot (the order under test).
                        let slot =
                            unsafe { std::slice::from_raw_parts(slot_at[c % 2] as *const u8, chunk_len(c)) };
                        device[c * CHUNK..c * CHUNK + chunk_len(c)].copy_from_slice(slot);
                        Ok(())
                    },
                )
            })
            .unwrap();
            assert!(device == data, "upload of {total} bytes");

            // Down: device (driver) → slots → out (crew).
            let mut out = vec![0u8; total];
            let out_at = out.as_mut_ptr() as usize;
            let drain = |c: usize, range: std::ops::Range<usize>| {
                // SAFETY: disjoint ranges of `out`, one thread each; the slot holds chunk `c`.
                unsafe {
                    let dst = std::slice::from_raw_parts_mut(
                        (out_at + c * CHUNK + range.start) as *mut u8,
                        range.len(),
                    );
                    dst.copy_from_slice(std::slice::from_raw_parts(
                        (slot_at[c % 2] + range.start) as *const u8,
                        range.len(),
                    ));
                }
            };
            Crew::run(chunks, total, &chunk_len, &drain, |crew| {
                crew.download(
                    |c| {
                        // SAFETY: the crew has moved the slot's previous chunk out (the order under test).
                        let slot = unsafe {
                            std::slice::from_raw_parts_mut(slot_at[c % 2] as *mut u8, chunk_len(c))
                        };
                        slot.copy_from_slice(&device[c * CHUNK..c * CHUNK + chunk_len(c)]);
                        Ok(())
                    },
                    |_| Ok(()),
                )
            })
            .unwrap();
            assert!(out == data, "download of {total} bytes");
        }
    }

    /// A failing driver stops the helpers instead of leaving them spinning.
    #[test]
    fn crew_stops_when_the_driver_fails() {
        let total = 8 << 20;
        let chunk_len = |_| 1 << 20;
        let share = |_: usize, _: std::ops::Range<usize>| {};
        let result = Crew::run(8, total, &chunk_len, &share, |crew| {
            crew.upload(
                |slot| if slot == 1 { Err(Error::InvalidInput("stop".into())) } else { Ok(()) },
                |_| Ok(()),
            )
        });
        assert_eq!(result.unwrap_err().to_string(), "invalid input: stop");
    }
}
