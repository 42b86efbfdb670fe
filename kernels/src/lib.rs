//! Device crate of the kernel suite.
//!
//! Every GPU kernel lives here, one kernel family per module, written against a small device
//! support layer with cuda_std-like names:
//!
//! * [`thread`]: thread/block/grid indices, [`thread::index_1d`], [`thread::index_2d`],
//!   [`thread::sync_threads`];
//! * [`shared`]: the launch-sized (dynamic) shared memory as a typed array;
//! * [`math`]: f32/f64 math through CUDA's libdevice, and [`math::fast`] approximate variants;
//! * [`warp`]: warp shuffles;
//! * [`mma`]: tensor-core matrix multiply-accumulate (tf32, f16, bf16, f64) and `cp.async`;
//! * [`global`]: 16- and 8-byte global stores that stay one instruction.
//!
//! The same source compiles twice. For `nvptx64-nvidia-cuda` (by the builder, `../build.rs`) each
//! `#[kernel]` becomes a PTX entry point. For the host, each kernel is a plain function and the
//! support layer talks to the CPU simulator ([`sim`]), so tests without a GPU run the real kernel
//! code.
#![cfg_attr(target_arch = "nvptx64", no_std)]
#![cfg_attr(target_arch = "nvptx64", allow(internal_features))]
#![cfg_attr(
    target_arch = "nvptx64",
    feature(
        abi_ptx,
        stdarch_nvptx,
        asm_experimental_arch,
        core_intrinsics,
        gpu_intrinsics,
        gpu_launch_sized_workgroup_mem
    )
)]
// `#[inline(always)]` on closures: a kernel's large closures must be inlined, or what they capture
// by reference (accumulators) goes to local memory.
#![feature(stmt_expr_attributes)]
#![warn(missing_docs)]

extern crate self as kernels;

pub use kernels_macros::kernel;

pub mod global;
pub mod math;
pub mod mma;
pub mod shared;
pub mod slice;
pub mod thread;
pub mod warp;

pub use math::Float;
pub use slice::{Slice, SliceMut};

#[cfg(not(target_arch = "nvptx64"))]
mod kernel_fn;
#[cfg(not(target_arch = "nvptx64"))]
pub mod sim;
#[cfg(not(target_arch = "nvptx64"))]
pub use kernel_fn::KernelFn;

pub mod conv;
pub mod lombscargle;
pub mod mma_probe;
pub mod reduce;
pub mod saxpy;
pub mod spiral;
pub mod svd;
pub mod svd_factor;

/// A kernel that panics stops only its own thread on the GPU; there is nothing to unwind to.
#[cfg(target_arch = "nvptx64")]
#[panic_handler]
fn panic(_: &core::panic::PanicInfo) -> ! {
    // SAFETY: `trap` aborts the kernel; the host sees a launch failure.
    unsafe { core::arch::nvptx::trap() }
}
