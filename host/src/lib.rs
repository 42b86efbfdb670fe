//! Host side of the kernel suite: per kernel family, a safe wrapper with its CPU reference, the
//! `svd` job and what the binaries share. The sources are in three folders, one per layer —
//! `families/`, `job/` (the `svd` job) and `commands/` (what the binaries share) — on the launch
//! layer, the crate `gpu-launch` (re-exported as `launch`, its modules and main types at the root):
//!
//! * [`KERNELS`]: the PTX and cubin of `kernels/` that the builder (`build.rs`, the crate
//!   `gpu-builder`) embedded, with their `ptxas` resources, for [`Device::gpu`];
//! * [`device`]: a [`Device`] (a GPU through `cust`, or the CPU simulator), its [`Buffer`]s and
//!   typed kernel launches; [`graph`]: launches recorded once and replayed (CUDA graphs);
//! * [`cli`]: the `--device auto|gpu|sim|cpu` choice shared by every binary;
//! * [`image_io`]: grayscale images as `ndarray` arrays (PNG/JPEG in, PNG out);
//! * [`npy`]: NumPy `.npy` files of f32/f64 arrays (written by `svd --npy`, read by `numpy.load`);
//! * [`bench`](mod@bench): statistics and tables for the benchmark programs in `benches/` (from
//!   `gpu-launch`);
//! * [`plot`]: line charts as PNG or SVG files;
//! * [`profile`]: the `--profile` summary (kernels, copies, host costs, resources, occupancy);
//! * one module per kernel family ([`saxpy`], [`histogram`], [`reduce`], [`scan`], [`transpose`],
//!   [`conv`], [`lombscargle`], [`spiral`], [`svd`] (reconstruction, the CPU reference and the
//!   metrics), [`svd_factor`] (the SVD itself), [`matrix_svd`] (an exact truncated SVD of any
//!   matrix)), each pairing the safe GPU/simulator wrapper with
//!   a CPU reference;
//! * [`job`]: the `svd` job, one module per role (its images and results, the input queue, the
//!   CPU and GPU engines, the driver, the outputs, the benchmark workloads).
//!
//! Paths: inside the crate, modules name each other by their real paths
//! (`crate::job::input_queue::ImageQueue`, `crate::families::svd::metrics`, `super::images`), so
//! the import graph shows the structure. For the binaries, tests, benchmarks and the Python crate,
//! the crate root re-exports the modules of `launch`, `commands/` and `families/` under short
//! names (`kernel_suite::svd`, `kernel_suite::cli`) and the launch layer's main types; [`job`] is
//! public as it is (`kernel_suite::job::driver::Engine`), its [`workload`] also re-exported at the
//! root for the `svd-workload` binary and the benchmarks.
#![warn(missing_docs)]

mod commands;
mod families;
pub mod job;

pub use commands::{cli, image_io, npy, plot};
pub use families::{
    conv, histogram, lombscargle, matrix_svd, reduce, saxpy, scan, spiral, svd, svd_factor, transpose,
};
pub use gpu_launch as launch;
pub use job::workload;
pub use launch::{bench, device, error, graph, module, profile};

pub use launch::{
    Backend, Buffer, BufferView, BufferViewMut, CopyTotals, Device, Element, EmbeddedKernels, Error,
    GpuOptions, HostBuffer, IntoKernelArgs, KernelArg, Mark, Queue, Result, Staging, Startup, gpu_count,
    gpu_of_address,
};

/// The suite's kernels (`kernels/`), compiled and embedded by the builder: what
/// [`Device::gpu`] loads.
pub static KERNELS: EmbeddedKernels = gpu_launch::embedded_kernels!();

/// The floating-point type of a kernel's arithmetic (its inputs are rounded to it once); every
/// command's `--precision`. CPU references compute in f64.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize, clap::ValueEnum,
)]
#[serde(rename_all = "lowercase")]
pub enum Precision {
    /// 32-bit (`f32`).
    F32,
    /// 64-bit (`f64`).
    #[default]
    F64,
}

impl std::fmt::Display for Precision {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Precision::F32 => "f32",
            Precision::F64 => "f64",
        })
    }
}
pub use launch::{Dim3, LaunchConfig};
