//! SVD image reconstruction: rank-k reconstruction `A_k = (U[:, :k]·diag(s[:k]))·Vᵀ[:k, :]` on the
//! device, the CPU reference it is checked against, and the metrics of a reconstruction. One
//! module per role; this one only re-exports them, so `kernel_suite::svd::…` is the family's API:
//!
//! * [`reconstruct`](mod@reconstruct): the kernels' launches ([`Variant`], one image, a batch in
//!   one launch, the 8-bit quantisation for PNGs);
//! * [`reference`](mod@reference): the suite's one CPU SVD ([`cpu_svd`], faer, in canonical form) and the f64
//!   reconstructions ([`thin_svd`], [`Factors`], [`reconstruct_reference`]);
//! * [`metrics`]: the relative error and the Eckart–Young bound, with their zero-norm convention;
//! * [`finite`]: the finite-pixel check every SVD of the suite makes;
//! * [`phantom`]: the Shepp–Logan default image;
//! * [`slot_pipeline`]: the slot pipeline the benchmarks measure (several queues overlapping
//!   copies and kernels of single-image reconstructions).
//!
//! Matrices are row-major `(rows, cols)`; an image is `(height, width)`. Device code:
//! `kernels/src/svd/` (by kernel form); tests: `tests/svd.rs`; benchmark: `benches/svd.rs`; command:
//! `cargo run --release --bin svd`.

pub mod finite;
pub mod metrics;
pub mod phantom;
pub mod reconstruct;
pub mod reference;
pub mod slot_pipeline;

pub use finite::{check_finite, check_finite_sums};
pub use metrics::{eckart_young_bound, relative, relative_error};
pub use phantom::shepp_logan;
pub use reconstruct::{
    BatchShape, PhaseTimes, RankK, ReconstructBuffers, ReconstructViews, Variant, launch_quantize_gray8,
    launch_reconstruct, launch_reconstruct_batch, reconstruct,
};
pub use reference::{
    CanonicalSpectrum, CpuSvd, Factors, TripletSource, cpu_svd, reconstruct_reference,
    reconstruct_reference_f32, thin_svd,
};
pub use slot_pipeline::{BatchRun, reconstruct_batch, reconstruct_pinned};
