//! The device library: what GPU kernels written in Rust are written with, in the role of
//! Rust-CUDA's `cuda_std`. It holds no kernels; a kernel crate (the suite's `kernels/`, or one
//! made by `scripts/new-project`) depends on it. cuda_std-like names:
//!
//! * [`thread`]: thread/block/grid indices, [`thread::index_1d`], [`thread::index_2d`],
//!   [`thread::sync_threads`];
//! * [`slice`](mod@slice): device slices, [`Slice`] and [`SliceMut`], the kernel-parameter form of `&[T]` and
//!   `&mut [T]`, with bounds-checked indexing;
//! * [`shared`]: the launch-sized (dynamic) shared memory, placed by a [`shared::Allocator`] whose
//!   [`shared::Layout`] the host sizes launches with: safe tiles written by their owners and read
//!   after [`shared::sync_threads`](fn@shared::sync_threads), atomic counters, and raw arrays;
//! * [`math`]: f32/f64 math through CUDA's libdevice, the [`Float`] trait of generic kernels, and
//!   [`math::fast`] approximate variants;
//! * [`warp`]: warp collectives: shuffles, votes, reductions and scans;
//! * [`block`]: block collectives: counting and voting barriers, reductions and scans;
//! * [`atomic`]: atomics on global and shared memory with explicit ordering and scope;
//! * [`print`](mod@print): `printf!` and `gpu_assert!` (CUDA's device-side `printf` and `assert`);
//! * [`half`]: `f16` and `bf16` with one-instruction conversions;
//! * [`mma`]: tensor-core matrix multiply-accumulate (`mma.sync` in tf32, f16, bf16, f64, and
//!   Hopper's `wgmma`), `ldmatrix` and `cp.async`;
//! * [`global`]: 16- and 8-byte global stores that stay one instruction;
//! * [`grid`]: barriers across the blocks of a cooperative launch.
//!
//! A kernel crate compiles twice. For `nvptx64-nvidia-cuda` (by the builder, the crate
//! `gpu-builder` that a host package's `build.rs` calls) each `#[kernel]` becomes a PTX entry point. For the host, each kernel is a plain function and the
//! support layer talks to the CPU simulator ([`sim`]), so tests without a GPU run the real kernel
//! code.
//!
//! # Writing a kernel
//!
//! A kernel takes scalars, `Copy` structs and slices, and returns nothing:
//!
//! ```ignore
//! #[kernel]
//! pub fn saxpy(a: f32, x: &[f32], y: &mut [f32]) {
//!     let i = thread::index_1d() as usize;
//!     if i < y.len() {
//!         y[i] = math::fma(a, x[i], y[i]);
//!     }
//! }
//! ```
//!
//! `&[T]` and `&mut [T]` arrive as [`Slice<T>`] and [`SliceMut<T>`] (pointer and `u32` length;
//! `#[kernel]` passes them to the PTX entry as two parameters). `x[i]` is checked: a panic naming
//! the kernel, block, thread and source line in the simulator, `trap` on the GPU; LLVM removes the
//! check where a comparison already proves the index (`i < y.len()` above). Hot loops where it
//! cannot can use the unsafe [`Slice::get_unchecked`] / [`SliceMut::set_unchecked`], still
//! checked in the simulator. `sub(start, len)` and `tail(start)` give sub-slices (one image of a
//! batch), `as_ptr` the address for vector loads. Row-major images: `image.matrix(rows, cols)`
//! checks `rows·cols ≤ len` once, then `m[(row, col)]` and `m.row(r)` are checked against `rows`
//! and `cols`, which the kernel's own guard (`if row < rows && col < cols`) already proves; a
//! matrix whose rows lie `ld ≥ cols` apart (BLAS's leading dimension, as `U` in the suite's `svd` kernels) is
//! `x.strided_matrix(rows, cols, ld)`. A kernel with raw-pointer arguments (`*const T`) must be
//! an `unsafe fn`; one without may be safe.
//!
//! A generic kernel lists its types; each becomes a PTX entry `name_TYPE` with a host descriptor
//! `NAME_TYPE`:
//!
//! ```ignore
//! #[kernel(f32, f64)]                 // entries scale_f32, scale_f64; descriptors SCALE_F32, SCALE_F64
//! pub fn scale<F: Float>(a: F, x: &mut [F]) {
//!     let i = thread::index_1d() as usize;
//!     if i < x.len() {
//!         x[i] = a * x[i].sqrt();
//!     }
//! }
//! ```
//!
//! `#[kernel(f32, f64, launch_bounds(256, 2))]` adds CUDA's `__launch_bounds__` to every entry.
//!
//! Shared memory is allocated in order from the launch-sized region; a `const fn` giving the same
//! [`shared::Layout`] tells the host how many bytes to launch with:
//!
//! ```ignore
//! pub const fn shared_layout(block: u32) -> shared::Layout {
//!     shared::Layout::new().array::<f32>(block as usize).array::<u32>(1)
//! }
//! // in the kernel:
//! let mut smem = shared::Allocator::new();
//! let sums = smem.tile::<f32>(thread::block_dim_x() as usize);
//! let flag = smem.tile::<u32>(1);
//! ```
//!
//! On the host, [`KernelFn`] descriptors are launched with the buffers themselves for slices:
//! `device.launch(&SAXPY, cfg, (2.0, &x, &mut y))` (see `gpu_launch::Device::launch`).
#![cfg_attr(target_arch = "nvptx64", no_std)]
#![cfg_attr(target_arch = "nvptx64", allow(internal_features))]
#![cfg_attr(
    target_arch = "nvptx64",
    feature(
        stdarch_nvptx,
        asm_experimental_arch,
        core_intrinsics,
        gpu_intrinsics,
        gpu_launch_sized_workgroup_mem
    )
)]
#![warn(missing_docs)]

extern crate self as gpu_std;

pub use gpu_std_macros::kernel;

pub mod atomic;
pub mod block;
pub mod global;
pub mod grid;
pub mod half;
pub mod math;
pub mod mma;
pub mod print;
pub mod shared;
pub mod slice;
pub mod thread;
pub mod warp;

pub use math::Float;
pub use slice::{Matrix, MatrixMut, Slice, SliceMut};

#[cfg(not(target_arch = "nvptx64"))]
mod kernel_fn;
#[cfg(not(target_arch = "nvptx64"))]
pub mod sim;
#[cfg(not(target_arch = "nvptx64"))]
pub use kernel_fn::KernelFn;

/// A kernel that panics stops only its own thread on the GPU; there is nothing to unwind to.
#[cfg(target_arch = "nvptx64")]
#[panic_handler]
fn panic(_: &core::panic::PanicInfo) -> ! {
    // SAFETY: `trap` aborts the kernel; the host sees a launch failure.
    unsafe { core::arch::nvptx::trap() }
}
