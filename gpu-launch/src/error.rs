//! The error type of the launch layer and the kernel wrappers.

use cust::error::CudaError;

/// Everything the launch layer and the wrappers can fail with.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The CUDA driver library is missing or could not start.
    #[error("no usable CUDA driver ({0})")]
    NoDriver(String),
    /// The driver works but there is no GPU (or not the one asked for).
    #[error("no CUDA GPU available ({0})")]
    NoGpu(String),
    /// A CUDA driver call failed.
    #[error("{call} failed: {source}")]
    Cuda {
        /// The driver API function, e.g. `cuMemAlloc`.
        call: &'static str,
        /// The driver's error code.
        source: CudaError,
    },
    /// A driver call made directly (not through `cust`) failed with this `CUresult` code.
    #[error("{call} failed: CUDA error {code} ({name})")]
    CudaCode {
        /// The driver API function.
        call: &'static str,
        /// The `CUresult` value.
        code: u32,
        /// The driver's name for it (`cuGetErrorName`).
        name: String,
    },
    /// A kernel failed to launch or failed while running.
    #[error("kernel `{kernel}` failed: {source}")]
    Kernel {
        /// The kernel's name.
        kernel: &'static str,
        /// The driver's error code.
        source: CudaError,
    },
    /// A buffer did not fit in the device's free memory (another process, or a library's cache,
    /// may hold the rest).
    #[error(
        "out of memory: a buffer of {} MiB does not fit{}; a smaller batch or another GPU may",
        mib(*bytes),
        free.map_or(String::new(), |(free, total)| format!(" ({} of {} MiB free)", mib(free as u128), mib(total as u128)))
    )]
    OutOfMemory {
        /// The buffer's size, bytes.
        bytes: u128,
        /// The device's free and total memory when it failed, bytes (`None` in a simulator
        /// without a size).
        free: Option<(usize, usize)>,
    },
    /// Work that does not fit in the device's free memory even at its smallest (one image of the
    /// `svd` job, where [`Error::OutOfMemory`] names one buffer of it): what it needs in all, what
    /// is free, and what may help.
    #[error(
        "{what} needs about {} of GPU memory, {}; {help}",
        size(*needed),
        free.map_or("the free memory unknown".into(), |(free, total)| format!("{} free of {}", size(free as u128), size(total as u128)))
    )]
    DoesNotFit {
        /// What does not fit.
        what: String,
        /// Its bytes in all.
        needed: u128,
        /// The device's free and total memory, bytes, when it was tried.
        free: Option<(usize, usize)>,
        /// What may help.
        help: String,
    },
    /// A kernel failed in the CPU simulator (an index out of range, a failed `gpu_assert!`, a
    /// barrier some threads never reach …): the simulator's message, which names the kernel, the
    /// first failing block and thread and the kernel's source line. On a GPU the same fault is a
    /// [`Error::Kernel`] (the `trap`'s CUDA error).
    #[error("{message}")]
    SimulatedKernel {
        /// The kernel's name.
        kernel: &'static str,
        /// The simulator's report.
        message: String,
    },
    /// The launch configuration is outside the device's limits.
    #[error("invalid launch of kernel `{kernel}`: {message}")]
    InvalidLaunch {
        /// The kernel's name.
        kernel: &'static str,
        /// What is wrong.
        message: String,
    },
    /// A file could not be read or written.
    #[error("{}: {message}", path.display())]
    File {
        /// The file.
        path: std::path::PathBuf,
        /// What went wrong.
        message: String,
    },
    /// The caller's data cannot be processed (empty, mismatched lengths, NaN, …).
    #[error("invalid input: {0}")]
    InvalidInput(String),
    /// A numerical method failed on valid input: it did not converge, or its result failed a
    /// consistency check (so no wrong answer is returned).
    #[error("numerical failure: {0}")]
    Numerical(String),
}

/// `Result` with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// Whether this error means "there is no GPU to run on" (as opposed to a failure on one).
    pub fn is_no_gpu(&self) -> bool {
        matches!(self, Error::NoDriver(_) | Error::NoGpu(_))
    }

    /// Whether this error is a device memory shortage: a buffer that did not fit, or a driver call
    /// or launch that failed for memory (a stream-ordered allocation, a kernel whose local memory
    /// the driver could not reserve). Unlike other CUDA failures, the device stays usable after one.
    pub fn is_out_of_memory(&self) -> bool {
        match self {
            Error::OutOfMemory { .. } => true,
            Error::Cuda { source, .. } | Error::Kernel { source, .. } => *source == CudaError::OutOfMemory,
            Error::CudaCode { name, .. } => name == "CUDA_ERROR_OUT_OF_MEMORY",
            _ => false,
        }
    }
}

/// Bytes as MiB, rounded up.
fn mib(bytes: u128) -> u128 {
    bytes.div_ceil(1 << 20)
}

/// Bytes as MiB, rounded up, or as KiB below one MiB (the simulator's small tests).
fn size(bytes: u128) -> String {
    if bytes < 1 << 20 { format!("{} KiB", bytes.div_ceil(1 << 10)) } else { format!("{} MiB", mib(bytes)) }
}

/// Adapts a `CudaError` from the driver call `call`: `result.map_err(cuda("cuMemAlloc"))`.
pub(crate) fn cuda(call: &'static str) -> impl FnOnce(CudaError) -> Error {
    move |source| Error::Cuda { call, source }
}

/// Checks the `CUresult` of a raw driver call.
pub(crate) fn raw(call: &'static str, result: cust::sys::CUresult) -> Result<()> {
    if result == cust::sys::CUresult::CUDA_SUCCESS {
        return Ok(());
    }
    let mut name: *const std::ffi::c_char = std::ptr::null();
    // SAFETY: cuGetErrorName writes a pointer to a static string, or leaves it null.
    unsafe { cust::sys::cuGetErrorName(result, &mut name) };
    let name = if name.is_null() {
        "unknown".to_string()
    } else {
        // SAFETY: a NUL-terminated static string from the driver.
        unsafe { std::ffi::CStr::from_ptr(name) }.to_string_lossy().into_owned()
    };
    Err(Error::CudaCode { call, code: result as u32, name })
}

/// Fails with [`Error::InvalidInput`] unless `condition` holds.
pub fn ensure(condition: bool, message: impl FnOnce() -> String) -> Result<()> {
    if condition { Ok(()) } else { Err(Error::InvalidInput(message())) }
}
