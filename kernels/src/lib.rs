//! The suite's GPU kernels, one family per module, written against the device library
//! [`gpu_std`] (indices, barriers, shared memory, device slices, math, warp collectives, tensor
//! cores, and the CPU simulator on the host).
//!
//! Each family has four places: its kernels here (`kernels/src/FAMILY.rs`), its safe host wrapper
//! and CPU reference (`host/src/families/FAMILY.rs`), its tests (`tests/FAMILY.rs`) and its
//! benchmark (`benches/FAMILY.rs`); `scripts/new-family NAME` writes a new family in all four. The
//! builder (`build.rs` at the root) compiles this crate to one PTX module; on the host, each
//! `#[kernel]` is a plain function that the simulator runs and a launch descriptor (its name in
//! upper case) that `kernel_suite::Device::launch` takes.
#![cfg_attr(target_arch = "nvptx64", no_std)]
#![cfg_attr(target_arch = "nvptx64", feature(abi_ptx))]
// `#[inline(always)]` on closures: a kernel's large closures must be inlined, or what they capture
// by reference (accumulators) goes to local memory.
#![feature(stmt_expr_attributes)]
#![warn(missing_docs)]

pub mod conv;
pub mod gpu_std_probe;
pub mod histogram;
pub mod lombscargle;
pub mod matrix_svd;
pub mod mma_probe;
pub mod reduce;
pub mod saxpy;
pub mod scan;
pub mod spiral;
pub mod svd;
pub mod svd_factor;
pub mod transpose;
