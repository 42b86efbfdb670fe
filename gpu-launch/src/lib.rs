//! The host side of GPU kernels written in Rust with `gpu-std`: one API that opens a GPU (through
//! `cust`) or the CPU simulator, moves data, and launches kernels with typed argument lists.
//!
//! * [`device`]: a [`Device`], its [`Queue`]s (CUDA streams) and [`Mark`]s, [`Buffer`]s and views,
//!   copies (page-locked [`Staging`] for large ones), typed launches ([`IntoKernelArgs`]), plain,
//!   programmatic-dependent and cooperative;
//! * [`module`]: the [`EmbeddedKernels`] that `gpu-builder` compiled from a kernel crate, which a
//!   GPU loads;
//! * [`graph`]: launches recorded once and replayed (CUDA graphs);
//! * [`profile`]: kernel and copy timings with CUDA events, host costs, occupancy and throughput
//!   ([`Device::enable_profiling`]);
//! * [`bench`](mod@bench): statistics and tables for benchmark programs;
//! * [`error`]: the [`Error`] every call returns.
//!
//! A kernel is a function marked `gpu_std::kernel` in a kernel crate; the attribute makes a launch
//! descriptor whose type carries the argument tuple, so a launch with the wrong arguments does not
//! compile. The same launch runs the kernel in the simulator:
//!
//! ```
//! use gpu_launch::{Device, LaunchConfig};
//! use gpu_std::{kernel, thread};
//!
//! /// `out[i] = x[i]²`.
//! #[kernel]
//! pub fn square(x: &[f32], out: &mut [f32]) {
//!     let i = thread::index_1d() as usize;
//!     if i < out.len() {
//!         out[i] = x[i] * x[i];
//!     }
//! }
//!
//! # fn main() -> gpu_launch::Result<()> {
//! let device = Device::simulator(); // a GPU: Device::gpu(0, &KERNELS)
//! let x = device.upload(&[1.0f32, 2.0, 3.0])?;
//! let mut out = device.alloc::<f32>(3)?;
//! // SAFETY: one thread per element, each writing its own out[i].
//! unsafe { device.launch(&SQUARE, LaunchConfig::for_1d(3, 128), (&x, &mut out))? };
//! assert_eq!(device.download(&out)?, [1.0, 4.0, 9.0]);
//! # Ok(()) }
//! ```
#![warn(missing_docs)]

pub mod bench;
mod dependent_launch;
pub mod device;
pub mod error;
pub mod graph;
pub mod module;
pub mod profile;

pub use device::{
    Backend, Buffer, BufferView, BufferViewMut, CopyTotals, Device, Element, GpuOptions, HostBuffer,
    IntoKernelArgs, KernelArg, Mark, Queue, Staging, Startup, StartupMemory, gpu_count, gpu_of_address,
};
pub use error::{Error, Result};
pub use gpu_std::sim::{Dim3, LaunchConfig};
pub use module::{EmbeddedKernels, KernelResources};
