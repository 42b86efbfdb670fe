//! SVD on the GPU: the leading singular triplets of a batch of images, by subspace iteration with
//! Rayleigh–Ritz on the f64 Gram matrix. The algorithm and its trade-offs are in
//! `docs/svd-gpu.md`; the host driver is `host/src/families/svd_factor/`; tests: `tests/svd_factor.rs`.
//!
//! Every kernel works on a batch: `blockIdx.z` (or `blockIdx.x` for the one-block-per-image
//! kernel) selects the image, and each operand's [`Layout`] gives its row, column and batch
//! strides in elements, so one launch serves every image of a batch and transposed views cost
//! nothing. f64 throughout, but for the f32 outputs the reconstruction reads.
//!
//! Every kernel takes device slices. The two one-block-per-image Jacobi kernels ([`ritz_eigen`],
//! [`cholesky_inverse`]) take their image's parts of them by `sub_unchecked` and read them
//! unchecked on the GPU (checked in the simulator): bounds checks changed the register allocation
//! of the Jacobi solver inlined beside them. They keep their `b × b` work matrices in a
//! `JacobiSpace`: shared memory where the launch gives enough, else the image's part of the global
//! `scratch` slice, addressed like shared memory; the solver is an `unsafe fn` whose contract is
//! that all threads of the block call it.
//!
//! The files, by role (this one only declares them and re-exports their public items):
//! - `layout.rs`: [`Layout`], the row, column and batch strides of an operand.
//! - `constants.rs`: the numeric thresholds shared by kernels and host ([`NULL_THRESHOLD`],
//!   [`PIVOT_FLOOR`]).
//! - `gemm.rs`: the batched f64 GEMM ([`gemm_f64_to`], [`gemm_f64_mma_to`]), its tile constants,
//!   and the shared-memory stages the blocked Cholesky reuses.
//! - `passes.rs`: the one-pass kernels: conversions to f64, the random starting subspace, sums
//!   of squares.
//! - `eigensolver.rs`: the one-block cyclic Jacobi solver, its work space and their sizes.
//! - `ritz_pairs.rs`: the Ritz pairs as every eigensolver writes them (ordered, with `σ` and
//!   `1/σ`), in the solvers' kernels and as a kernel of its own ([`sorted_ritz_pairs`]).
//! - `ritz.rs`: the Rayleigh–Ritz step ([`ritz_eigen`], residuals, weights), the next basis
//!   (power and Chebyshev steps) and the one-block Cholesky QR step ([`cholesky_inverse`]).
//! - `block_jacobi.rs`: the block Jacobi eigensolver for subspaces too large for one block.
//! - `packed_cholesky.rs`: the Cholesky QR step in one block per image with the triangle packed
//!   in shared memory, by panels and register tiles ([`cholesky_inverse_packed`]).
//! - `blocked_cholesky.rs`: the Cholesky QR step by panels over many blocks, for subspaces too
//!   large for one block.
//! - `tridiagonal.rs`: the one-block eigensolver by tridiagonalisation for batches of larger
//!   subspaces, and its back-transformation; `divide_and_conquer.rs` its tridiagonal stage;
//!   `tridiagonal_grid.rs` its reduction by a group of blocks per image, for one matrix or a few;
//!   `band_reduction.rs` and `bulge_chasing.rs` its two-stage reduction (to a band over the GPU,
//!   then to tridiagonal form in one block) and the second stage's back-transformation.
//! - `jacobi_svd.rs`: the SVD of the accurate pass's small projected matrix by one-sided Jacobi.

mod band_reduction;
mod block_jacobi;
mod blocked_cholesky;
mod bulge_chasing;
mod constants;
mod divide_and_conquer;
mod eigensolver;
mod gemm;
mod gemm_pipelined;
mod jacobi_svd;
mod layout;
mod packed_cholesky;
mod passes;
mod ritz;
mod ritz_pairs;
mod tridiagonal;
mod tridiagonal_grid;

pub use band_reduction::*;
pub use block_jacobi::*;
pub use blocked_cholesky::*;
pub use bulge_chasing::*;
pub use constants::*;
pub use divide_and_conquer::*;
pub use eigensolver::*;
pub use gemm::*;
pub use gemm_pipelined::*;
pub use jacobi_svd::*;
pub use layout::*;
pub use packed_cholesky::*;
pub use passes::*;
pub use ritz::*;
pub use ritz_pairs::*;
pub use tridiagonal::*;
pub use tridiagonal_grid::*;
