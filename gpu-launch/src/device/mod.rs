//! Devices: one API that runs a kernel on a GPU (through `cust`) or in the CPU simulator.
//!
//! ```
//! use gpu_launch::{Device, LaunchConfig};
//! use gpu_std::{kernel, thread};
//!
//! /// `y[i] = a·x[i] + y[i]`.
//! #[kernel]
//! pub fn saxpy(a: f32, x: &[f32], y: &mut [f32]) {
//!     let i = thread::index_1d() as usize;
//!     if i < y.len() {
//!         y[i] = a * x[i] + y[i];
//!     }
//! }
//!
//! # fn main() -> gpu_launch::Result<()> {
//! // A GPU is `Device::gpu(0, &KERNELS)`, with the kernels `gpu-builder` embedded.
//! let device = Device::simulator();
//! let x = device.upload(&[1.0f32, 2.0, 3.0])?;
//! let mut y = device.upload(&[10.0f32, 20.0, 30.0])?;
//! let cfg = LaunchConfig::for_1d(3, 256);
//! // SAFETY: one thread per element; the slices carry the buffers' lengths.
//! unsafe { device.launch(&SAXPY, cfg, (2.0, &x, &mut y))? };
//! assert_eq!(device.download(&y)?, vec![12.0, 24.0, 36.0]);
//! # Ok(()) }
//! ```
//!
//! On the GPU, launches are asynchronous on the device's [`Queue`] (a CUDA stream); the copies
//! ([`Device::upload`], [`Device::download`]) are queued on it too and have finished when they
//! return, so phases can be timed with [`Device::mark`]. [`Device::new_queue`],
//! [`Device::pinned`] and the `_async` copies let copies and kernels of several queues overlap.
//! Every launch checks `cuLaunchKernel`'s result, and every synchronisation reports a kernel that
//! failed while running (as [`Error::Kernel`], naming the last kernel launched).
//!
//! This file opens devices (GPU or simulator) and describes them; `queue.rs` holds queues and
//! marks, `memory.rs` buffers, views and copies, `launch.rs` the typed launches, `staging.rs` the
//! page-locked staging of large copies.

mod launch;
mod memory;
mod pool;
mod queue;
mod staging;
mod startup;

pub use launch::{IntoKernelArgs, KernelArg};
use memory::SimulatedMemory;
pub use memory::{Buffer, BufferView, BufferViewMut, CopyTotals, HostBuffer};
use pool::MemoryPool;
pub use pool::{POOL_KEEPS_MAX_BYTES, POOL_RESERVE_BYTES, pool_keeps_bytes};
pub use queue::{Mark, Queue};
use queue::{QueueStream, new_stream};
pub use staging::{STAGING_CHUNK_BYTES, Staging};
pub use startup::{StartupMemory, stack_bytes_needed};

use crate::error::{Error, Result, cuda, raw};
use crate::module::EmbeddedKernels;
use crate::profile::{HostCost, Peaks, Recorder, Report};
use cust::context::Context;
use cust::device::DeviceAttribute;
use cust::error::CudaError;
use cust::memory::DeviceCopy;
use cust::module::{Module, ModuleJitOption};
use std::cell::{Cell, OnceCell, RefCell};
use std::fmt;
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
    /// The simulator's memory when it has a size ([`Device::simulator_with_memory`]).
    memory: Option<std::sync::Arc<SimulatedMemory>>,
}

enum Inner {
    Gpu(Box<Gpu>),
    Simulator,
}

struct Gpu {
    // Field order is drop order: the module and the pool go before the context that owns them.
    module: Module,
    pool: MemoryPool,
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
    /// Measure what the context takes of the GPU's memory ([`StartupMemory::context_nvml`]) with
    /// NVML, whose own start-up costs tens of milliseconds: for profiles.
    pub measure_context: bool,
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
    /// What the start-up took of the GPU's memory, step by step.
    pub memory: StartupMemory,
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

/// How many GPUs the CUDA driver sees (starting the driver): at least one, or [`Error::NoGpu`] /
/// [`Error::NoDriver`].
pub fn gpu_count() -> Result<u32> {
    cust::init(cust::CudaFlags::empty()).map_err(init_error)?;
    let count = cust::device::Device::num_devices().map_err(cuda("cuDeviceGetCount"))?;
    if count == 0 {
        return Err(Error::NoGpu("the CUDA driver found no GPU".into()));
    }
    Ok(count)
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
    /// The GPU with index `ordinal` (0 is the first), with `kernels` loaded: the cubin if the GPU's
    /// compute capability is the cubin's, else the PTX (JIT-compiled by the driver).
    pub fn gpu(ordinal: u32, kernels: &'static EmbeddedKernels) -> Result<Self> {
        Self::gpu_with(ordinal, kernels, GpuOptions::default())
    }

    /// [`Device::gpu`] with options: a register cap for the JIT, or the PTX instead of the cubin.
    pub fn gpu_with(ordinal: u32, kernels: &'static EmbeddedKernels, options: GpuOptions) -> Result<Self> {
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
        if major * 10 + minor < kernels.min_compute_capability {
            let need = kernels.min_compute_capability;
            return Err(Error::NoGpu(format!(
                "GPU {ordinal} ({name}) has compute capability {major}.{minor}; the kernels need {}.{} or newer",
                need / 10,
                need % 10
            )));
        }
        // Another library of this process (PyTorch, CuPy) may use the primary context already:
        // its stack limit is then theirs too, and left as it is.
        let shared_context = startup::primary_context_active(device.as_raw())?;
        let nvml = if options.measure_context { startup::Nvml::open(device.as_raw()) } else { None };
        let free_before_context = nvml.as_ref().and_then(startup::Nvml::free);
        let t = Instant::now();
        let context = Context::new(device).map_err(cuda("cuDevicePrimaryCtxRetain"))?;
        let context_ms = ms(t);
        let context_nvml = free_before_context.zip(nvml.as_ref().and_then(startup::Nvml::free));
        drop(nvml);
        let (after_context, total) = startup::free_memory()?;
        let default_stack_bytes = startup::stack_limit()?;
        let t = Instant::now();
        let pool = MemoryPool::new(ordinal, total)?;
        let context_ms = context_ms + ms(t);
        let cubin_fits = compute_capability.0 * 10 + compute_capability.1 == kernels.cubin_arch;
        let cubin =
            kernels.cubin.filter(|_| cubin_fits && !options.force_ptx && options.max_registers.is_none());
        let image = if cubin.is_some() { ModuleImage::Cubin } else { ModuleImage::Ptx };
        // The driver reserves the stack limit for every thread the GPU holds: cut to what the
        // kernels need before the module loads (it grows again by itself for a launch that needs
        // more), unless the context is shared.
        let stack_bytes = match stack_bytes_needed(kernels, image).filter(|_| !shared_context) {
            Some(bytes) => {
                startup::set_stack_limit(bytes)?;
                startup::stack_limit()?
            }
            None => default_stack_bytes,
        };
        let after_stack = startup::free_memory()?.0;
        let t = Instant::now();
        let load = Phase::new("module load");
        let (module, image_bytes) = match cubin {
            Some(cubin) => {
                (Module::from_cubin(cubin, &[]).map_err(cuda("cuModuleLoadData (cubin)"))?, cubin.len())
            }
            None => {
                let jit: Vec<ModuleJitOption> =
                    options.max_registers.map(ModuleJitOption::MaxRegisters).into_iter().collect();
                (
                    Module::from_ptx(kernels.ptx, &jit).map_err(cuda("cuModuleLoadDataEx (PTX JIT)"))?,
                    kernels.ptx.len(),
                )
            }
        };
        drop(load);
        let module_load_ms = ms(t);
        let memory = StartupMemory {
            total,
            context_nvml,
            after_context,
            after_stack,
            after_module: startup::free_memory()?.0,
            image_bytes,
            lazy_loading: startup::lazy_loading(),
            default_stack_bytes,
            stack_bytes,
            shared_context,
        };
        // The pool's memory after the start-up's measurements, which it would blur; its time
        // counted with the context's.
        let t = Instant::now();
        let queue = Queue { stream: Some(QueueStream::owned(new_stream()?)) };
        if let Some(stream) = &queue.stream {
            pool.reserve(stream.as_inner());
        }
        let context_ms = context_ms + ms(t);
        let startup = Startup { init_ms, context_ms, module_load_ms, image, memory };
        let gpu = Gpu { module, pool, context, device, name, compute_capability, startup };
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

    /// Whether the loaded module has kernel `name`: the
    /// [`hopper_kernels`](EmbeddedKernels::hopper_kernels) exist only in the sm_90a cubin (an H100
    /// or H200 that loaded it, not a PTX JIT); the simulator has all.
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
            let recorder = Recorder::new(Peaks::of(&g.device)?, startup, s.memory);
            let _ = self.profiler.set(Box::new(recorder));
        }
        Ok(true)
    }

    /// Runs `work` on the host and, while profiling, adds its wall time to the profile's host-side
    /// costs as `what`: host work the GPU waits for (a solver between two copies) shows apart from
    /// the copies and the idle time around them.
    pub fn time_host<R>(&self, what: &str, work: impl FnOnce() -> R) -> R {
        let start = Instant::now();
        let result = work();
        if let Some(p) = self.profiler.get() {
            p.host_cost(what, start.elapsed().as_secs_f64() * 1e3);
        }
        result
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

    /// The CPU simulator with `bytes` of device memory, as a GPU another process shares, so that
    /// tests can run code that fits its work to the memory: a buffer past what is left is
    /// [`Error::OutOfMemory`]. With `reports_free`, [`Device::free_memory`] says what is left, as
    /// `cuMemGetInfo` does; without, as where the driver does not say, the code finds the limit
    /// only by running out.
    pub fn simulator_with_memory(bytes: usize, reports_free: bool) -> Self {
        Self { memory: Some(SimulatedMemory::new(bytes, reports_free)), ..Self::simulator() }
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
            memory: None,
        }
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
}

fn same_len(a: usize, b: usize) -> Result<()> {
    if a == b { Ok(()) } else { Err(Error::InvalidInput(format!("copy between {a} and {b} elements"))) }
}

fn mixed_devices() -> Error {
    Error::InvalidInput("a buffer or queue of one device was used with another".into())
}
