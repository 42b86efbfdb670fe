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
    /// The solver for problems of `b × b` on `device`: [`RitzMethod::OneBlockJacobi`] when its
    /// work space fits in one block's shared memory, else the [`RitzMethod::Tridiagonal`] solver
    /// up to its largest `b` ([`TRIDIAGONAL_MAX_B`]), for one image and for batches, and
    /// [`RitzMethod::BlockJacobi`] beyond. The host's solver is not chosen
    /// (`docs/benchmarks/eigensolvers.md`: the whole factorisation of one image of 512² at
    /// `k = 100` took 15.5 ms with the tridiagonal solver, 24.5 with the host's, 43.9 with block
    /// Jacobi; 4096² at `k = 256`, `b = 512`, 115.1 tridiagonal, 140.4 block Jacobi).
    pub fn for_problem(device: &Device, b: usize) -> Result<RitzMethod> {
        Ok(if one_block_fits(device, b)? {
            RitzMethod::OneBlockJacobi
        } else if b <= TRIDIAGONAL_MAX_B {
            RitzMethod::Tridiagonal
        } else {
            RitzMethod::BlockJacobi
        })
    }
}

/// How Cholesky QR factors each `b × b` Gram matrix and inverts its factor.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum CholeskyMethod {
    /// In one thread block per image ([`kf::cholesky_inverse`]), beside the one-block Jacobi.
    OneBlock,
    /// In panels over many blocks ([`blocked_cholesky_inverse`](super::blocked_cholesky_inverse)).
    Blocked,
}

impl CholeskyMethod {
    /// [`CholeskyMethod::OneBlock`] where its work space fits in one block's shared memory,
    /// [`CholeskyMethod::Blocked`] otherwise.
    pub fn for_problem(device: &Device, b: usize) -> Result<CholeskyMethod> {
        Ok(if one_block_fits(device, b)? { CholeskyMethod::OneBlock } else { CholeskyMethod::Blocked })
    }
}

/// Whether the one-block kernels' `b × b` work space fits in one block's shared memory.
fn one_block_fits(device: &Device, b: usize) -> Result<bool> {
    Ok(kf::jacobi_shared_bytes(b as u32) <= device.max_shared_bytes_per_block()?)
}

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
    /// Columns of the iterated subspace ([`subspace_size`]).
    pub b: usize,
    /// The Ritz eigensolver: **the one line that chooses it is in [`Plan::new`]**.
    pub ritz: RitzMethod,
    /// Cholesky QR's factorisation.
    pub cholesky: CholeskyMethod,
    /// Threads of the one-block-per-image kernels.
    pub one_block_threads: u32,
    /// Dynamic shared memory of the one-block kernels, bytes: their `b × b` work space where it
    /// fits, else 8 (the work space then lies in global memory).
    pub one_block_shared_bytes: u32,
    /// Threads of the per-image kernels that read a few values per pair (weights, flags).
    pub per_image_threads: u32,
    /// Rows per block of block Jacobi (its subproblems are `2nb × 2nb`).
    pub block_jacobi_rows: usize,
    /// Panel rows of the blocked Cholesky.
    pub cholesky_panel_rows: usize,
    /// Whether the GEMMs run on the f64 tensor cores (`mma.sync`): on a GPU. The simulator runs the
    /// FMA kernels, which agree to rounding.
    pub tensor_cores: bool,
}

impl Plan {
    /// The plan for `images` images of `m × n` and `k` triplets each on `device`.
    pub fn new(device: &Device, (m, n): (usize, usize), images: usize, k: usize) -> Result<Plan> {
        ensure(m > 0 && n > 0 && images > 0, || format!("cannot factor {images} images of {m} × {n}"))?;
        let r = m.min(n);
        ensure(k >= 1 && k <= r, || {
            format!("rank k = {k} is outside 1..={r} (min(rows, cols) of the image)")
        })?;
        ensure(images * m * n.max(m) < (1 << 31), || "batch too large for 32-bit indexing".into())?;
        let b = subspace_size(k, r);
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
        Ok(Plan {
            dims: (m, n),
            images,
            k,
            r,
            b,
            ritz: RitzMethod::for_problem(device, b)?,
            cholesky: CholeskyMethod::for_problem(device, b)?,
            one_block_threads,
            one_block_shared_bytes: if one_block_fits(device, b)? {
                kf::jacobi_shared_bytes(b as u32)
            } else {
                8
            },
            per_image_threads: if gpu { 256 } else { 64 },
            block_jacobi_rows: BlockJacobi::block_rows(device, b),
            cholesky_panel_rows: cholesky_panel_rows(device),
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
            CholeskyMethod::Blocked => format!("blocked ({}-row panels)", self.cholesky_panel_rows),
        };
        let space = if self.one_block_shared_bytes > 8 { "shared memory" } else { "global memory" };
        writeln!(
            f,
            "svd plan: {} × {m}×{n}, k = {}, subspace b = {} (Gram {r}×{r})",
            self.images,
            self.k,
            self.b,
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
    /// Jacobi where it fits, the tridiagonal solver up to its largest `b`, block Jacobi beyond.
    #[test]
    fn the_tridiagonal_solver_takes_every_subspace_past_one_block_up_to_its_largest() -> Result<()> {
        let device = Device::simulator();
        assert_eq!(RitzMethod::for_problem(&device, 40)?, RitzMethod::OneBlockJacobi);
        for b in [128, 200, 320, TRIDIAGONAL_MAX_B] {
            assert_eq!(RitzMethod::for_problem(&device, b)?, RitzMethod::Tridiagonal, "b = {b}");
        }
        assert_eq!(RitzMethod::for_problem(&device, TRIDIAGONAL_MAX_B + 8)?, RitzMethod::BlockJacobi);
        Ok(())
    }
}
