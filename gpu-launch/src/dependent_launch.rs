//! Programmatic dependent launch (sm_90): `cuLaunchKernelEx` with
//! `CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION`, which lets a kernel start while the
//! kernel before it on the stream is finishing. The kernel waits for the earlier one's writes in
//! `gpu_std::thread::grid_dependency_synchronize`. `cust` 0.3 predates the call, so this module
//! declares the driver's structures (as `cuda.h` of CUDA 12 lays them out) and finds the entry
//! point with `cuGetProcAddress`.

use cust::sys::{CUfunction, CUresult, CUstream};
use std::ffi::c_void;
use std::sync::OnceLock;

/// `CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION` of `CUlaunchAttributeID`.
const PROGRAMMATIC_STREAM_SERIALIZATION: u32 = 6;

/// `CUlaunchAttribute`: the id, padding to 8 bytes, and a 64-byte value union whose first `int`
/// is `programmaticStreamSerializationAllowed` for this attribute.
#[repr(C)]
struct LaunchAttribute {
    id: u32,
    pad: [u8; 4],
    value: [u64; 8],
}

/// `CUlaunchConfig`.
#[repr(C)]
struct LaunchConfigEx {
    grid: [u32; 3],
    block: [u32; 3],
    shared_bytes: u32,
    stream: CUstream,
    attributes: *mut LaunchAttribute,
    attribute_count: u32,
}

/// `cuLaunchKernelEx`.
type LaunchKernelEx = unsafe extern "C" fn(
    config: *const LaunchConfigEx,
    function: CUfunction,
    params: *mut *mut c_void,
    extra: *mut *mut c_void,
) -> CUresult;

/// The driver's `cuLaunchKernelEx` (CUDA 11.8 and later), looked up once; `None` on an older
/// driver.
fn launch_kernel_ex() -> Option<LaunchKernelEx> {
    static ENTRY: OnceLock<Option<usize>> = OnceLock::new();
    let entry = *ENTRY.get_or_init(|| {
        let mut pfn: *mut c_void = std::ptr::null_mut();
        // SAFETY: a NUL-terminated name and a pointer the call writes; version 12000 asks for
        // the CUDA 12 form of the entry point, flags 0 for the default stream semantics.
        let result = unsafe { cust::sys::cuGetProcAddress(c"cuLaunchKernelEx".as_ptr(), &mut pfn, 12000, 0) };
        (result == CUresult::CUDA_SUCCESS && !pfn.is_null()).then_some(pfn as usize)
    });
    // SAFETY: the driver's entry point for `cuLaunchKernelEx`, whose signature is the type's.
    entry.map(|pfn| unsafe { std::mem::transmute::<usize, LaunchKernelEx>(pfn) })
}

/// Launches `function` on `stream` as a programmatic dependent of the kernel queued before it:
/// its blocks may start before that kernel has finished, so the kernel must call
/// `grid_dependency_synchronize` before it reads what that kernel writes. `None` where the driver
/// has no `cuLaunchKernelEx`: the caller then launches it the ordinary way (the wait returns at
/// once).
///
/// # Safety
/// As for `cuLaunchKernel`: a function of the stream's context, and `params` the kernel's
/// parameters.
pub(crate) unsafe fn launch(
    function: CUfunction,
    stream: CUstream,
    grid: [u32; 3],
    block: [u32; 3],
    shared_bytes: u32,
    params: &mut [*mut c_void],
) -> Option<CUresult> {
    let launch_ex = launch_kernel_ex()?;
    let mut attribute = LaunchAttribute { id: PROGRAMMATIC_STREAM_SERIALIZATION, pad: [0; 4], value: [0; 8] };
    attribute.value[0] = 1;
    let config =
        LaunchConfigEx { grid, block, shared_bytes, stream, attributes: &mut attribute, attribute_count: 1 };
    // SAFETY: `config` and its attribute live across the call; the rest is the caller's contract.
    Some(unsafe { launch_ex(&config, function, params.as_mut_ptr(), std::ptr::null_mut()) })
}
