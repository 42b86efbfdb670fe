//! The plan of a factorisation: every choice of method and launch shape, made once from the
//! device, the batch's shape and `k`, and read by every later step. `--profile` prints it
//! ([`Plan`]'s `Display`), so a user sees which method ran; `docs/svd-gpu.md` ("The plan") has
//! the table of which solver runs for which size.

use super::block_jacobi::BlockJacobi;
use super::cholesky::cholesky_panel_rows;
use super::host_eigensolver::HostEigensolver;
use super::one_block_jacobi::OneBlockJacobi;
use super::ritz::RitzSolver;
use super::tridiagonal_eigensolver::{TRIDIAGONAL_MAX_B, TridiagonalEigensolver};
use crate::launch::device::{Backend, Device};
use crate::launch::error::{Result, ensure};
use gpu_std::sim::{Dim3, LaunchConfig};
use kernels::svd_factor as kf;

/// Where the Ritz eigenproblems (`b × b`, one per image and Rayleigh–Ritz step) are solved: one
/// implementation of [`RitzSolver`] each, built by [`Plan::ritz_solver`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum RitzMethod {
    /// Jacobi in one thread block per image ([`kf::ritz_eigen`]), the matrix in shared memory
    /// where it fits.
    OneBlockJacobi,
    /// Block Jacobi over several blocks per image ([`BlockJacobi`]).
    BlockJacobi,
    /// faer's symmetric eigensolver on the host, the matrices copied each way.
    Host,
    /// Householder tridiagonalisation by a group of blocks per image (or one block:
    /// [`kf::tridiagonal_reduce_grid`], [`kf::tridiagonal_reduce`]), divide and conquer in one
    /// thread block per image ([`kf::tridiagonal_divide_and_conquer`]), the back-transformation
    /// over the GPU ([`TridiagonalEigensolver`]).
    Tridiagonal,
}

impl RitzMethod {
    /// The solver for `images` problems of `b × b` on `device`: [`RitzMethod::OneBlockJacobi`]
    /// for batches of more than [`ONE_BLOCK_JACOBI_MIN_IMAGES`] with `b` below
    /// [`ONE_BLOCK_JACOBI_MAX_B`] (where its work space fits one block's shared memory), else the
    /// [`RitzMethod::Tridiagonal`] solver up to its largest `b` ([`TRIDIAGONAL_MAX_B`]), and
    /// [`RitzMethod::BlockJacobi`] beyond. Measured on an H100 (`benches/svd_factor --ritz`, one
    /// call): at `b = 104` the tridiagonal solver took 0.89–0.96 ms for one matrix, 0.93–1.00 for
    /// 16 and 1.36–1.52 for 64, the Jacobi one 4.6–5.2 ms for each. The host's solver is not
    /// chosen (`docs/benchmarks/eigensolvers.md`).
    pub fn for_problem(device: &Device, b: usize, images: usize) -> Result<RitzMethod> {
        Ok(
            if images > ONE_BLOCK_JACOBI_MIN_IMAGES
                && b < ONE_BLOCK_JACOBI_MAX_B
                && one_block_fits(device, b)?
            {
                RitzMethod::OneBlockJacobi
            } else if b <= TRIDIAGONAL_MAX_B {
                RitzMethod::Tridiagonal
            } else {
                RitzMethod::BlockJacobi
            },
        )
    }
}

/// Batches of at most this many images take the tridiagonal Ritz solver at every `b`
/// ([`RitzMethod::for_problem`]).
pub const ONE_BLOCK_JACOBI_MIN_IMAGES: usize = 16;
/// From this `b` on every batch takes the tridiagonal Ritz solver ([`RitzMethod::for_problem`]).
pub const ONE_BLOCK_JACOBI_MAX_B: usize = 104;

/// How the leading eigenpairs of each Gram matrix are found.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum GramMethod {
    /// Subspace iteration with Rayleigh–Ritz on `b < r` columns (`docs/svd-gpu.md`).
    SubspaceIteration,
    /// Every eigenpair of `G` at once, by the Ritz solver on `G` itself (`b = r`): one solve, no
    /// iteration, no Cholesky QR and no wait for the host. For small Gram matrices, where one
    /// solve of `r × r` costs less than the iteration's solves of `b × b` and its products.
    WholeEigendecomposition,
}

impl GramMethod {
    /// [`GramMethod::WholeEigendecomposition`] on a GPU for batches of at most
    /// [`WHOLE_GRAM_MAX_IMAGES`] whose Gram matrix is at most 256 × 256, or at most
    /// [`WHOLE_GRAM_MAX_R`] with a subspace of at least 64 columns; else
    /// [`GramMethod::SubspaceIteration`]. Measured on an H100 (`docs/svd-gpu.md`, "Measured"):
    /// 512² at `k = 100` 7.1 ms whole against 11.9 iterating, 16 × 512² 14.7 against 17.6, 256²
    /// at `k = 20` 3.0 against 3.8; but 512² at `k = 20` 7.4 against 5.1, and 1024² at `k = 100`
    /// 17.3 against 14.4.
    pub fn for_problem(device: &Device, r: usize, b: usize, images: usize) -> GramMethod {
        let small_gram = r <= 256 || (r <= WHOLE_GRAM_MAX_R && b >= 64);
        if device.backend() == Backend::Gpu && small_gram && images <= WHOLE_GRAM_MAX_IMAGES {
            GramMethod::WholeEigendecomposition
        } else {
            GramMethod::SubspaceIteration
        }
    }
}

/// Largest Gram matrix ([`Plan::r`]) decomposed whole by default ([`GramMethod::for_problem`]).
pub const WHOLE_GRAM_MAX_R: usize = 512;
/// Most images of a batch whose Gram matrices are decomposed whole by default.
pub const WHOLE_GRAM_MAX_IMAGES: usize = 16;

/// Products with `G` from the random start before the first Rayleigh–Ritz step: its Ritz values
/// then predict the steps still needed. After one product the smallest Ritz value is far below
/// `λ_{b+1}` and the residuals too large for a Chebyshev filter, so the host predicted too few
/// power steps. Measured (H200, 2026-11-28, `benches/svd_factor --batches`, device time, one call;
/// 0, 2, 3 products before, then the σ error of image 0 against faer): 1 × 4096² `k = 100` 16.26,
/// 14.31, 14.89 ms (3.8e-7, 4.2e-7, 1.2e-7); `k = 256` 40.97, 35.90, 38.83; 1 × 2048² `k = 50`
/// 5.16, 4.17, 4.92 (1.5e-9, **2.5e-8**, 1.8e-10); 16 × 1024² `k = 50` 13.11, 10.52, 11.18;
/// noise 16.07, 14.28, 14.88; 256 × 512² `k = 20` 22.45, 19.24, 16.45; 8 × 2048² `k = 256` 51.19,
/// 49.22, 41.63; 64 × 256² `k = 50` 10.40, 7.04, 7.87. Three: faster than none on every row,
/// and the 2048² photograph's σ within the 2e-9·σ₁ of LAPACK's that two missed (each passes the
/// stop test; how far below it the last step lands varies with the path).
pub const PRODUCTS_BEFORE_RAYLEIGH_RITZ: usize = 3;

/// How Cholesky QR factors each `b × b` Gram matrix and inverts its factor.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum CholeskyMethod {
    /// In one thread block per image ([`kf::cholesky_inverse`]), beside the one-block Jacobi.
    OneBlock,
    /// In one thread block per image with the triangle packed in shared memory, by panels and
    /// register tiles ([`kf::cholesky_inverse_packed`]).
    Packed,
    /// In panels over many blocks ([`blocked_cholesky_inverse`](super::blocked_cholesky_inverse)).
    Blocked,
}

impl CholeskyMethod {
    /// [`CholeskyMethod::Packed`] where its packed triangle fits in one block's shared memory
    /// (`b ≤ 239` on an H100), [`CholeskyMethod::Blocked`] otherwise. Measured
    /// (`docs/benchmarks/cholesky.md`, H200, one call): the packed kernel 0.066–0.40 ms at
    /// `b = 64 … 232` against the blocked one's 0.094–0.52, whole factorisations of 2048² at
    /// `k = 50` 6.76 ms against 7.90 and 4096² at `k = 100` 20.6 against 23.4.
    pub fn for_problem(device: &Device, b: usize) -> Result<CholeskyMethod> {
        Ok(if packed_cholesky_fits(device, b)? { CholeskyMethod::Packed } else { CholeskyMethod::Blocked })
    }
}

/// Whether [`kf::cholesky_inverse_packed`]'s packed triangle of `b × b` fits in one block's shared
/// memory.
fn packed_cholesky_fits(device: &Device, b: usize) -> Result<bool> {
    Ok(b as u32 <= kf::cholesky_packed_max_b(device.max_shared_bytes_per_block()?))
}

/// Whether the one-block kernels' `b × b` work space fits in one block's shared memory.
fn one_block_fits(device: &Device, b: usize) -> Result<bool> {
    Ok(kf::jacobi_shared_bytes(b as u32) <= device.max_shared_bytes_per_block()?)
}

/// Most threads of the packed Cholesky's blocks on a GPU (its launch bounds).
const PACKED_CHOLESKY_MAX_THREADS: u32 = 512;

/// Most threads of the one-block-per-image kernels on a GPU (fewer where their registers allow
/// fewer; the simulator, which runs a thread per GPU thread, uses 64).
const ONE_BLOCK_MAX_THREADS: u32 = 1024;

/// Every choice of one factorisation (see the module doc). The fields are public so that tests
/// and benchmarks can force a method; [`Plan::new`] chooses them all.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct Plan {
    /// Rows and columns of each image.
    pub dims: (usize, usize),
    /// Images in the batch.
    pub images: usize,
    /// Singular triplets wanted per image.
    pub k: usize,
    /// `r = min(m, n)`: the Gram matrix is `r × r`.
    pub r: usize,
    /// How the leading eigenpairs of `G` are found: **chosen in [`Plan::new`]** by
    /// [`GramMethod::for_problem`].
    pub method: GramMethod,
    /// Columns of the iterated subspace ([`subspace_size`]), or `r` for the whole
    /// eigendecomposition.
    pub b: usize,
    /// Products `Q ← G·Q` (orthonormalised) from the random start before the first
    /// Rayleigh–Ritz step ([`PRODUCTS_BEFORE_RAYLEIGH_RITZ`]).
    pub products_before_rayleigh_ritz: usize,
    /// The Ritz eigensolver: **the one line that chooses it is in [`Plan::new`]**.
    pub ritz: RitzMethod,
    /// Cholesky QR's factorisation.
    pub cholesky: CholeskyMethod,
    /// Threads of the one-block-per-image kernels.
    pub one_block_threads: u32,
    /// Threads of the packed Cholesky's blocks ([`kf::cholesky_inverse_packed`]).
    pub packed_cholesky_threads: u32,
    /// Dynamic shared memory of the one-block kernels, bytes: their `b × b` work space where it
    /// fits, else 8 (the work space then lies in global memory).
    pub one_block_shared_bytes: u32,
    /// Threads of the per-image kernels that read a few values per pair (weights, flags).
    pub per_image_threads: u32,
    /// Rows per block of block Jacobi (its subproblems are `2nb × 2nb`).
    pub block_jacobi_rows: usize,
    /// Panel rows of the blocked Cholesky.
    pub cholesky_panel_rows: usize,
    /// Cholesky QR takes a Gram matrix `W` as near the identity, and inverts its factor to first
    /// order, when `b·max|W − I|` is at most this ([`kf::NEAR_IDENTITY`]; 0 turns it off, for
    /// benchmarks to compare).
    pub near_identity: f64,
    /// Whether the GEMMs run on the f64 tensor cores (`mma.sync`): on a GPU. The simulator runs the
    /// FMA kernels, which agree to rounding.
    pub tensor_cores: bool,
}

impl Plan {
    /// The plan for `images` images of `m × n` and `k` triplets each on `device`.
    pub fn new(device: &Device, dims: (usize, usize), images: usize, k: usize) -> Result<Plan> {
        let r = dims.0.min(dims.1);
        let method = GramMethod::for_problem(device, r, subspace_size(k, r), images);
        Plan::with_method(device, dims, images, k, method)
    }

    /// As [`Plan::new`] with the way to the eigenpairs given (tests and benchmarks force it with
    /// this; every other choice follows from it as in [`Plan::new`]).
    pub fn with_method(
        device: &Device,
        (m, n): (usize, usize),
        images: usize,
        k: usize,
        method: GramMethod,
    ) -> Result<Plan> {
        let r = m.min(n);
        let b = match method {
            GramMethod::SubspaceIteration => subspace_size(k, r),
            GramMethod::WholeEigendecomposition => r,
        };
        Plan::with_subspace(device, (m, n), images, (k, b), method)
    }

    /// As [`Plan::with_method`] with the subspace's `b` columns given too (`k ≤ b ≤ r`; benchmarks
    /// compare sizes with this).
    pub fn with_subspace(
        device: &Device,
        (m, n): (usize, usize),
        images: usize,
        (k, b): (usize, usize),
        method: GramMethod,
    ) -> Result<Plan> {
        ensure(m > 0 && n > 0 && images > 0, || format!("cannot factor {images} images of {m} × {n}"))?;
        let r = m.min(n);
        ensure(k >= 1 && k <= r, || {
            format!("rank k = {k} is outside 1..={r} (min(rows, cols) of the image)")
        })?;
        ensure(k <= b && b <= r, || {
            format!("a subspace of {b} columns for k = {k} of a Gram matrix of {r} × {r}")
        })?;
        // The largest arrays the kernels index (32-bit): the images and `[Q Y]` (`r × 2b` each;
        // `G`, `r²`, is no larger than an image).
        let largest = images.saturating_mul((m * n).max(r * 2 * b));
        ensure(largest < (1 << 31), || {
            format!(
                "a batch of {images} of {m} × {n} is too large for the kernels' 32-bit indexing: split it"
            )
        })?;
        let gpu = device.backend() == Backend::Gpu;
        let one_block_threads = if gpu {
            let mut threads = ONE_BLOCK_MAX_THREADS;
            for name in [kf::RITZ_EIGEN.name(), kf::CHOLESKY_INVERSE.name()] {
                threads = threads.min(device.max_threads_per_block(name)?);
            }
            threads / 32 * 32
        } else {
            64
        };
        let packed_cholesky_threads = if gpu {
            device.max_threads_per_block(kf::CHOLESKY_INVERSE_PACKED.name())?.min(PACKED_CHOLESKY_MAX_THREADS)
                / 32
                * 32
        } else {
            64
        };
        Ok(Plan {
            dims: (m, n),
            images,
            k,
            r,
            method,
            b,
            ritz: RitzMethod::for_problem(device, b, images)?,
            cholesky: CholeskyMethod::for_problem(device, b)?,
            one_block_threads,
            packed_cholesky_threads,
            one_block_shared_bytes: if one_block_fits(device, b)? {
                kf::jacobi_shared_bytes(b as u32)
            } else {
                8
            },
            per_image_threads: if gpu { 256 } else { 64 },
            block_jacobi_rows: BlockJacobi::block_rows(device, b),
            cholesky_panel_rows: cholesky_panel_rows(device),
            near_identity: kf::NEAR_IDENTITY,
            products_before_rayleigh_ritz: PRODUCTS_BEFORE_RAYLEIGH_RITZ,
            tensor_cores: gpu,
        })
    }

    /// The plan's Ritz solver, with its work space for the batch.
    pub fn ritz_solver(&self, device: &Device) -> Result<Box<dyn RitzSolver>> {
        let (b, images) = (self.b, self.images);
        Ok(match self.ritz {
            RitzMethod::OneBlockJacobi => {
                Box::new(OneBlockJacobi::new(device, b, images, self.one_block_config())?)
            }
            RitzMethod::BlockJacobi => Box::new(BlockJacobi::new(device, b, images)?),
            RitzMethod::Host => Box::new(HostEigensolver::new(device, b, images)?),
            RitzMethod::Tridiagonal => Box::new(TridiagonalEigensolver::new(device, b, images)?),
        })
    }

    /// The launch of the one-block-per-image kernels ([`kf::ritz_eigen`], [`kf::cholesky_inverse`]).
    pub fn one_block_config(&self) -> LaunchConfig {
        LaunchConfig {
            grid: Dim3::x(self.images as u32),
            block: Dim3::x(self.one_block_threads),
            shared_bytes: self.one_block_shared_bytes,
        }
    }

    /// The launch of [`kf::cholesky_inverse_packed`]: a block per image, the packed triangle in
    /// shared memory.
    pub fn packed_cholesky_config(&self) -> LaunchConfig {
        LaunchConfig {
            grid: Dim3::x(self.images as u32),
            block: Dim3::x(self.packed_cholesky_threads),
            shared_bytes: kf::cholesky_packed_shared_bytes(self.b as u32),
        }
    }

    /// Whether each image is at least as tall as wide: the Gram matrix is then `AᵀA` and its
    /// eigenvectors the right singular vectors (else `AAᵀ` and the left ones).
    pub fn tall(&self) -> bool {
        self.dims.0 >= self.dims.1
    }
}

impl std::fmt::Display for Plan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (m, n) = self.dims;
        let ritz = match self.ritz {
            RitzMethod::OneBlockJacobi => "one-block Jacobi".to_string(),
            RitzMethod::BlockJacobi => format!("block Jacobi ({} rows per block)", self.block_jacobi_rows),
            RitzMethod::Host => "host (faer)".to_string(),
            RitzMethod::Tridiagonal => "tridiagonal (Householder reduction, divide and conquer)".to_string(),
        };
        let cholesky = match self.cholesky {
            CholeskyMethod::OneBlock => "one block per image".to_string(),
            CholeskyMethod::Packed => "one block per image, packed in shared memory".to_string(),
            CholeskyMethod::Blocked => format!("blocked ({}-row panels)", self.cholesky_panel_rows),
        };
        let space = if self.one_block_shared_bytes > 8 { "shared memory" } else { "global memory" };
        let method = match self.method {
            GramMethod::SubspaceIteration => format!("subspace iteration, b = {}", self.b),
            GramMethod::WholeEigendecomposition => "every eigenpair of G at once".to_string(),
        };
        writeln!(
            f,
            "svd plan: {} × {m}×{n}, k = {}, Gram {r}×{r}: {method}",
            self.images,
            self.k,
            r = self.r
        )?;
        writeln!(f, "  Ritz eigensolver: {ritz}; Cholesky QR: {cholesky}")?;
        write!(
            f,
            "  one-block kernels: {} threads, work space in {space}; GEMMs: {}",
            self.one_block_threads,
            if self.tensor_cores { "f64 tensor cores" } else { "f64 FMA" }
        )
    }
}

/// Size of the iterated subspace for `k` triplets of an image with `r = min(m, n)`: twice `k`
/// (at least `k + 16`), rounded up to a multiple of 8, at most `r`.
pub fn subspace_size(k: usize, r: usize) -> usize {
    (2 * k).max(k + 16).next_multiple_of(8).min(r)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The Ritz solver per size, as measured (`docs/benchmarks/eigensolvers.md`): one-block
    /// Jacobi where it fits for batches, the tridiagonal solver for a few images and up to its
    /// largest `b`, block Jacobi beyond; the packed Cholesky wherever it fits.
    #[test]
    fn the_tridiagonal_solver_takes_every_subspace_past_one_block_up_to_its_largest() -> Result<()> {
        let device = Device::simulator();
        let many = ONE_BLOCK_JACOBI_MIN_IMAGES + 1;
        assert_eq!(RitzMethod::for_problem(&device, 40, many)?, RitzMethod::OneBlockJacobi);
        assert_eq!(RitzMethod::for_problem(&device, 40, 1)?, RitzMethod::Tridiagonal);
        assert_eq!(RitzMethod::for_problem(&device, ONE_BLOCK_JACOBI_MAX_B, many)?, RitzMethod::Tridiagonal);
        for b in [128, 200, 320, TRIDIAGONAL_MAX_B] {
            assert_eq!(RitzMethod::for_problem(&device, b, many)?, RitzMethod::Tridiagonal, "b = {b}");
        }
        assert_eq!(RitzMethod::for_problem(&device, TRIDIAGONAL_MAX_B + 8, 1)?, RitzMethod::BlockJacobi);
        // The simulator's blocks have 227 KiB of shared memory, as an H100's.
        assert_eq!(kf::cholesky_packed_max_b(227 * 1024), 239);
        assert_eq!(CholeskyMethod::for_problem(&device, 239)?, CholeskyMethod::Packed);
        assert_eq!(CholeskyMethod::for_problem(&device, 240)?, CholeskyMethod::Blocked);
        Ok(())
    }
}
