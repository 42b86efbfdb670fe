//! Host side of the kernel suite: the launch layer and, per kernel family, a safe wrapper with its
//! CPU reference.
//!
//! * [`module`]: the PTX and cubin the builder (`build.rs`) embedded, and their `ptxas` resources;
//! * [`device`]: a [`Device`] (a GPU through `cust`, or the CPU simulator), its [`Buffer`]s and
//!   typed kernel launches (programmatic dependent launches through `dependent_launch`); [`graph`]:
//!   launches recorded once and replayed (CUDA graphs);
//! * [`cli`]: the `--device auto|gpu|sim|cpu` choice shared by every binary;
//! * [`image_io`]: grayscale images as `ndarray` arrays (PNG/JPEG in, PNG out);
//! * [`npy`]: NumPy `.npy` files of f32/f64 arrays (written by `svd --npy`, read by `numpy.load`);
//! * [`bench`](mod@bench): statistics and tables for the benchmark programs in `benches/`;
//! * [`plot`]: line charts as PNG or SVG files;
//! * [`profile`]: the `--profile` summary (kernels, copies, host costs, resources, occupancy);
//! * one module per kernel family ([`saxpy`], [`histogram`], [`reduce`], [`scan`], [`transpose`], [`conv`], [`lombscargle`], [`spiral`], [`svd`]
//!   (reconstruction), [`svd_factor`] (the SVD itself)), each pairing the safe GPU/simulator wrapper
//!   with a CPU reference;
//! * the `svd` job: [`svd_job`] (its images, results and CPU engine), [`svd_batch`] (the GPU engine),
//!   [`workload`] (procedural benchmark images).
#![warn(missing_docs)]

pub mod bench;
pub mod cli;
pub mod conv;
mod dependent_launch;
pub mod device;
pub mod error;
pub mod graph;
pub mod histogram;
pub mod image_io;
pub mod lombscargle;
pub mod module;
pub mod npy;
pub mod plot;
pub mod profile;
pub mod reduce;
pub mod saxpy;
pub mod scan;
pub mod spiral;
pub mod svd;
pub mod svd_batch;
pub mod svd_factor;
pub mod svd_job;
pub mod transpose;
pub mod workload;

pub use device::{
    Backend, Buffer, BufferView, BufferViewMut, CopyTotals, Device, Element, GpuOptions, HostBuffer,
    IntoKernelArgs, KernelArg, Mark, Queue, Staging, Startup, gpu_of_address,
};
pub use error::{Error, Result};

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
pub use gpu_std::sim::{Dim3, LaunchConfig};
