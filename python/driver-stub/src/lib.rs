//! A stand-in `libcuda.so.1` for machines without the NVIDIA driver.
//!
//! The Python package's extension links the driver (through `cust`), so without one it cannot be
//! imported. `kernel_suite/_driver.py` loads this library in the driver's place when the real
//! `libcuda.so.1` cannot be loaded: `cuInit` then reports `CUDA_ERROR_STUB_LIBRARY` (what the CUDA
//! toolkit's own stub reports) and the package
//! runs the CPU reference (or the simulator) as on a machine with a driver and no GPU. No other
//! entry point can be reached after a failed `cuInit`; each reports `CUDA_ERROR_NOT_INITIALIZED`.
//! `scripts/python-wheel.sh` checks that this list covers every driver symbol the extension uses.

use std::ffi::{c_char, c_int};

/// `CUDA_ERROR_STUB_LIBRARY`.
const STUB_LIBRARY: c_int = 34;
/// `CUDA_ERROR_NOT_INITIALIZED`.
const NOT_INITIALIZED: c_int = 3;

/// `cuInit(flags)`: this is not a driver.
#[unsafe(no_mangle)]
pub extern "C" fn cuInit(_flags: u32) -> c_int {
    STUB_LIBRARY
}

/// `cuGetErrorString(error, &str)`: one message for every error.
///
/// # Safety
/// `message` is null or valid for one pointer write (the driver's contract).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuGetErrorString(_error: c_int, message: *mut *const c_char) -> c_int {
    if !message.is_null() {
        // SAFETY: the caller's pointer, checked non-null.
        unsafe { *message = c"no CUDA driver on this machine (libcuda.so.1 not found)".as_ptr() };
    }
    0
}

/// `cuGetErrorName(error, &str)`.
///
/// # Safety
/// As for [`cuGetErrorString`].
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuGetErrorName(_error: c_int, name: *mut *const c_char) -> c_int {
    if !name.is_null() {
        // SAFETY: the caller's pointer, checked non-null.
        unsafe { *name = c"CUDA_ERROR_STUB_LIBRARY".as_ptr() };
    }
    0
}

/// Entry points that report `CUDA_ERROR_NOT_INITIALIZED` (their arguments are not read: in the C
/// calling convention a callee may ignore what it is passed).
macro_rules! not_initialized {
    ($($name:ident),* $(,)?) => {$(
        #[unsafe(no_mangle)]
        pub extern "C" fn $name() -> c_int {
            NOT_INITIALIZED
        }
    )*};
}

not_initialized!(
    cuCtxGetLimit,
    cuCtxSetCurrent,
    cuCtxSetLimit,
    cuCtxSynchronize,
    cuDeviceGet,
    cuDeviceGetAttribute,
    cuDeviceGetCount,
    cuDeviceGetName,
    cuDeviceGetPCIBusId,
    cuDevicePrimaryCtxGetState,
    cuDevicePrimaryCtxRelease_v2,
    cuDevicePrimaryCtxRetain,
    cuEventCreate,
    cuEventDestroy_v2,
    cuEventElapsedTime,
    cuEventRecord,
    cuEventSynchronize,
    cuFuncGetAttribute,
    cuFuncSetAttribute,
    cuGetProcAddress,
    cuLaunchCooperativeKernel,
    cuLaunchKernel,
    cuMemAllocFromPoolAsync,
    cuMemAllocHost_v2,
    cuMemAlloc_v2,
    cuMemFreeAsync,
    cuMemFreeHost,
    cuMemFree_v2,
    cuMemGetInfo_v2,
    cuMemPoolCreate,
    cuMemPoolDestroy,
    cuMemPoolGetAttribute,
    cuMemPoolSetAttribute,
    cuMemPoolTrimTo,
    cuMemcpyAsync,
    cuMemcpyDtoHAsync_v2,
    cuMemcpyHtoDAsync_v2,
    cuMemsetD16Async,
    cuMemsetD32Async,
    cuMemsetD8Async,
    cuModuleGetFunction,
    cuModuleLoadDataEx,
    cuModuleUnload,
    cuOccupancyMaxActiveBlocksPerMultiprocessor,
    cuPointerGetAttribute,
    cuPointerGetAttributes,
    cuStreamCreateWithPriority,
    cuStreamDestroy_v2,
    cuStreamSynchronize,
    cuStreamWaitEvent,
);
