//! What opening a GPU takes of its memory ([`StartupMemory`]), and the per-thread stack limit set
//! to what the kernels need ([`stack_bytes_needed`]).
//!
//! The context's share is measured with NVML (`libnvidia-ml.so.1`, part of every driver, opened at
//! run time), since `cuMemGetInfo` needs the context it would measure; the module's and the stack
//! limit's with `cuMemGetInfo` before and after each.

use super::ModuleImage;
use crate::error::{Result, raw};
use crate::module::EmbeddedKernels;
use std::ffi::{CStr, c_char, c_int, c_uint, c_void};
use std::fmt;

/// What opening a GPU took of its memory, bytes (free memory before and after each step), and the
/// settings that decide it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct StartupMemory {
    /// The GPU's memory.
    pub total: usize,
    /// Free memory before the context was created and once it was, as NVML reports them; `None`
    /// where NVML is missing.
    pub context_nvml: Option<(usize, usize)>,
    /// Free once the context existed (`cuMemGetInfo`).
    pub after_context: usize,
    /// Free once the per-thread stack limit was set (before the module loads).
    pub after_stack: usize,
    /// Free once the kernels' module was loaded: what the start-up left.
    pub after_module: usize,
    /// Bytes of the module image loaded (the cubin, or the PTX text the driver compiles).
    pub image_bytes: usize,
    /// Whether the driver loads a module's kernels when first used (`CUDA_MODULE_LOADING=LAZY`,
    /// the default of Linux drivers since CUDA 12.2) rather than all at once; `None` where the
    /// driver does not say (`cuModuleGetLoadingMode`, CUDA 11.7).
    pub lazy_loading: Option<bool>,
    /// The driver's per-thread stack size (`CU_LIMIT_STACK_SIZE`) once the context existed, bytes.
    pub default_stack_bytes: usize,
    /// The per-thread stack size the kernels got: the largest stack frame of the cubin's kernels
    /// ([`stack_bytes_needed`]), or the driver's where not known (PTX) or the context is shared.
    pub stack_bytes: usize,
    /// Whether another library of the process (PyTorch, CuPy) had the GPU's primary context
    /// already: its stack limit is theirs too and was left as it was, and the context's memory
    /// is theirs.
    pub shared_context: bool,
}

impl StartupMemory {
    /// Bytes the context took, where NVML measured it.
    pub fn context_bytes(&self) -> Option<usize> {
        self.context_nvml.map(|(before, after)| before.saturating_sub(after))
    }

    /// Bytes loading the module took.
    pub fn module_bytes(&self) -> usize {
        self.after_stack.saturating_sub(self.after_module)
    }

    /// Bytes the stack limit gave back (positive) or took (negative).
    pub fn stack_freed_bytes(&self) -> i128 {
        self.after_stack as i128 - self.after_context as i128
    }
}

impl fmt::Display for StartupMemory {
    /// One line: `context 497.0 MiB, stack limit 1024 → 304 B per thread: 190.0 MiB given back,
    /// module 2.0 MiB (image of 3.1 MiB, lazy loading); 79121 MiB of 81079 MiB free after
    /// start-up`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mib = |bytes: f64| format!("{:.1} MiB", bytes / (1 << 20) as f64);
        match self.context_bytes() {
            _ if self.shared_context => write!(f, "context shared with another library of the process")?,
            Some(bytes) => write!(f, "context {}", mib(bytes as f64))?,
            None => write!(f, "context unknown (measured with --profile, where NVML is present)")?,
        }
        let freed = self.stack_freed_bytes();
        let change = if freed >= 0 {
            format!("{} given back", mib(freed as f64))
        } else {
            format!("{} taken", mib(-freed as f64))
        };
        write!(
            f,
            ", stack limit {} → {} B per thread: {change}",
            self.default_stack_bytes, self.stack_bytes
        )?;
        let loading = match self.lazy_loading {
            Some(true) => "lazy loading",
            Some(false) => "eager loading",
            None => "loading mode unknown",
        };
        write!(
            f,
            ", module {} (image of {}, {loading})",
            mib(self.module_bytes() as f64),
            mib(self.image_bytes as f64)
        )?;
        write!(
            f,
            "; {:.0} MiB of {:.0} MiB free after start-up",
            self.after_module as f64 / (1 << 20) as f64,
            self.total as f64 / (1 << 20) as f64
        )
    }
}

/// The per-thread stack (local memory) the kernels of `kernels` need when `image` is loaded: the
/// largest stack frame `ptxas` reported for the cubin's kernels, rounded up to 16 bytes; `None`
/// for the PTX (the driver's JIT decides its frames) or a build without `ptxas`. The driver
/// reserves the stack limit for every thread the GPU can hold (its default, 1 KiB, is 264 MiB on
/// an H100), and raises it by itself at a launch that needs more.
pub fn stack_bytes_needed(kernels: &EmbeddedKernels, image: ModuleImage) -> Option<usize> {
    if image != ModuleImage::Cubin {
        return None;
    }
    let largest = kernels.ptxas_resources.iter().map(|r| r.stack_bytes as usize).max()?;
    Some(largest.next_multiple_of(16).max(16))
}

/// Whether GPU `device`'s primary context is active already (retained by another library of the
/// process).
pub(super) fn primary_context_active(device: cust::sys::CUdevice) -> Result<bool> {
    let (mut flags, mut active): (c_uint, c_int) = (0, 0);
    // SAFETY: a valid device; the call writes both.
    raw("cuDevicePrimaryCtxGetState", unsafe {
        cust::sys::cuDevicePrimaryCtxGetState(device, &mut flags, &mut active)
    })?;
    Ok(active != 0)
}

/// The current context's per-thread stack size, bytes.
pub(super) fn stack_limit() -> Result<usize> {
    let mut bytes = 0usize;
    // SAFETY: a context is current; the call writes the limit.
    raw("cuCtxGetLimit(CU_LIMIT_STACK_SIZE)", unsafe {
        cust::sys::cuCtxGetLimit(&mut bytes, cust::sys::CUlimit::CU_LIMIT_STACK_SIZE)
    })?;
    Ok(bytes)
}

/// Sets the current context's per-thread stack size, bytes.
pub(super) fn set_stack_limit(bytes: usize) -> Result<()> {
    // SAFETY: a context is current; nothing runs on it yet.
    raw("cuCtxSetLimit(CU_LIMIT_STACK_SIZE)", unsafe {
        cust::sys::cuCtxSetLimit(cust::sys::CUlimit::CU_LIMIT_STACK_SIZE, bytes)
    })
}

/// Free and total memory of the current context's GPU (`cuMemGetInfo`).
pub(super) fn free_memory() -> Result<(usize, usize)> {
    let (mut free, mut total) = (0usize, 0usize);
    // SAFETY: a context is current; the call writes both.
    raw("cuMemGetInfo", unsafe { cust::sys::cuMemGetInfo_v2(&mut free, &mut total) })?;
    Ok((free, total))
}

/// Whether the driver loads modules lazily (`cuModuleGetLoadingMode`, looked up at run time: the
/// driver may predate it).
pub(super) fn lazy_loading() -> Option<bool> {
    // SAFETY: looks a symbol up in the libraries already loaded (libcuda is).
    let symbol = unsafe { libc::dlsym(libc::RTLD_DEFAULT, c"cuModuleGetLoadingMode".as_ptr()) };
    if symbol.is_null() {
        return None;
    }
    // SAFETY: the driver's `CUresult cuModuleGetLoadingMode(CUmoduleLoadingMode *mode)`.
    let get: unsafe extern "C" fn(*mut c_int) -> c_int = unsafe { std::mem::transmute(symbol) };
    let mut mode: c_int = 0;
    // SAFETY: the call writes the mode: 1 eager, 2 lazy.
    match unsafe { get(&mut mode) } {
        0 => Some(mode == 2),
        _ => None,
    }
}

/// NVML, opened at run time, to read a GPU's free memory without a context.
pub(super) struct Nvml {
    free_of: unsafe extern "C" fn(*mut c_void, *mut NvmlMemory) -> c_int,
    shutdown: unsafe extern "C" fn() -> c_int,
    device: *mut c_void,
}

/// NVML's `nvmlMemory_t`.
#[repr(C)]
#[derive(Default)]
pub(super) struct NvmlMemory {
    total: u64,
    free: u64,
    used: u64,
}

impl Nvml {
    /// NVML's handle on the GPU with PCI bus id `bus_id` (`cuDeviceGetPCIBusId`'s form), or `None`
    /// where NVML is missing or does not know it.
    pub(super) fn open(device: cust::sys::CUdevice) -> Option<Nvml> {
        let mut bus_id = [0 as c_char; 32];
        // SAFETY: the call writes a NUL-terminated id of at most the length given.
        let id =
            unsafe { cust::sys::cuDeviceGetPCIBusId(bus_id.as_mut_ptr(), bus_id.len() as c_int, device) };
        if id != cust::sys::CUresult::CUDA_SUCCESS {
            return None;
        }
        // SAFETY: opens a shared library by name; NVML's initialisation has no other effect.
        unsafe {
            let library = libc::dlopen(c"libnvidia-ml.so.1".as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL);
            if library.is_null() {
                return None;
            }
            let symbol = |name: &CStr| Some(libc::dlsym(library, name.as_ptr())).filter(|s| !s.is_null());
            let init: unsafe extern "C" fn() -> c_int = std::mem::transmute(symbol(c"nvmlInit_v2")?);
            let by_bus: unsafe extern "C" fn(*const c_char, *mut *mut c_void) -> c_int =
                std::mem::transmute(symbol(c"nvmlDeviceGetHandleByPciBusId_v2")?);
            let free_of = std::mem::transmute::<
                *mut c_void,
                unsafe extern "C" fn(*mut c_void, *mut NvmlMemory) -> c_int,
            >(symbol(c"nvmlDeviceGetMemoryInfo")?);
            let shutdown: unsafe extern "C" fn() -> c_int = std::mem::transmute(symbol(c"nvmlShutdown")?);
            if init() != 0 {
                return None;
            }
            let mut handle: *mut c_void = std::ptr::null_mut();
            if by_bus(bus_id.as_ptr(), &mut handle) != 0 {
                shutdown();
                return None;
            }
            Some(Nvml { free_of, shutdown, device: handle })
        }
    }

    /// The GPU's free memory now, bytes.
    pub(super) fn free(&self) -> Option<usize> {
        let mut memory = NvmlMemory::default();
        // SAFETY: a handle NVML gave; the call writes `memory`.
        let status = unsafe { (self.free_of)(self.device, &mut memory) };
        (status == 0)
            .then_some(memory.free as usize)
            .filter(|_| memory.total > 0 && memory.used <= memory.total)
    }
}

impl Drop for Nvml {
    fn drop(&mut self) {
        // SAFETY: balances the `nvmlInit_v2` of `open`.
        unsafe { (self.shutdown)() };
    }
}

#[cfg(test)]
mod tests {
    use super::{StartupMemory, stack_bytes_needed};
    use crate::device::ModuleImage;
    use crate::module::{EmbeddedKernels, KernelResources};

    const MIB: usize = 1 << 20;

    /// Each step's share is the drop in free memory across it; the stack limit's may be a gain.
    #[test]
    fn the_line_gives_each_steps_memory() {
        let memory = StartupMemory {
            total: 81_000 * MIB,
            context_nvml: Some((80_000 * MIB, 79_500 * MIB)),
            after_context: 79_490 * MIB,
            after_stack: 79_680 * MIB,
            after_module: 79_678 * MIB,
            image_bytes: 3 * MIB + MIB / 2,
            lazy_loading: Some(true),
            default_stack_bytes: 1024,
            stack_bytes: 304,
            shared_context: false,
        };
        assert_eq!((memory.context_bytes(), memory.module_bytes()), (Some(500 * MIB), 2 * MIB));
        assert_eq!(memory.stack_freed_bytes(), 190 * MIB as i128);
        assert_eq!(
            memory.to_string(),
            "context 500.0 MiB, stack limit 1024 → 304 B per thread: 190.0 MiB given back, module 2.0 MiB \
             (image of 3.5 MiB, lazy loading); 79678 MiB of 81000 MiB free after start-up"
        );
        let shared = StartupMemory {
            context_nvml: None,
            after_stack: 79_489 * MIB,
            lazy_loading: None,
            shared_context: true,
            ..memory
        };
        assert_eq!(
            shared.to_string(),
            "context shared with another library of the process, stack limit 1024 → 304 B per thread: 1.0 MiB \
             taken, module 0.0 MiB (image of 3.5 MiB, loading mode unknown); 79678 MiB of 81000 MiB free after \
             start-up"
        );
    }

    /// The stack limit is the largest frame of the cubin's kernels, rounded up to 16 bytes; none
    /// for the PTX, whose frames the JIT decides, or without a `ptxas` report.
    #[test]
    fn the_stack_is_the_largest_frame_of_the_cubin() {
        let kernel = |name, stack_bytes| KernelResources {
            name,
            registers: 32,
            stack_bytes,
            spill_store_bytes: 0,
            spill_load_bytes: 0,
            static_shared_bytes: 0,
        };
        static RESOURCES: [KernelResources; 0] = [];
        let resources = Box::leak(Box::new([kernel("a", 0), kernel("b", 296), kernel("c", 40)]));
        let kernels = |ptxas_resources: &'static [KernelResources]| EmbeddedKernels {
            ptx: "",
            ptx_target: "sm_80",
            min_compute_capability: 80,
            cubin: None,
            cubin_arch: 90,
            declared_kernels: &[],
            hopper_kernels: &[],
            ptxas_resources,
        };
        assert_eq!(stack_bytes_needed(&kernels(resources), ModuleImage::Cubin), Some(304));
        assert_eq!(stack_bytes_needed(&kernels(resources), ModuleImage::Ptx), None);
        assert_eq!(stack_bytes_needed(&kernels(&RESOURCES), ModuleImage::Cubin), None);
        let frameless = Box::leak(Box::new([kernel("a", 0)]));
        assert_eq!(stack_bytes_needed(&kernels(frameless), ModuleImage::Cubin), Some(16));
    }
}
