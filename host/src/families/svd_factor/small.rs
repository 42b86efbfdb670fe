//! The small `b × b` problems of each iteration — the Ritz pairs and the Cholesky QR of the next
//! basis — on the device (one block per image, or block Jacobi over several) or on the host.

use crate::error::{Error, Result};
use crate::{Buffer, Device, Dim3, LaunchConfig};
use faer::Mat;
use kernels::svd_factor as kf;
use rayon::prelude::*;

/// Where the small `b × b` problems of each iteration (the Ritz pairs, the Cholesky QR of the
/// next basis) are solved.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SmallSolver {
    /// On the device, one block per image, in shared memory: the default wherever the work space
    /// fits ([`kernels::svd_factor::jacobi_shared_bytes`]; `b ≤ 118` on an H100, so `k ≤ 59`).
    Device,
    /// The Ritz pairs on the device by block Jacobi (several blocks per image, [`BlockJacobi`]),
    /// the Cholesky factorisations on the host: the default for larger subspaces of batches that
    /// give every multiprocessor a pair of blocks.
    DeviceBlocked,
    /// On the host (faer's symmetric eigensolver and a Cholesky factorisation, images in
    /// parallel), the matrices copied each way once per Rayleigh–Ritz step: the default for
    /// larger subspaces of a few images, where the block Jacobi's rounds of a few blocks each
    /// leave the GPU idle (a 200 × 200 problem: 2.4 ms on one core of the H100's host, 14 ms by
    /// block Jacobi).
    Host,
}

impl SmallSolver {
    /// [`SmallSolver::Device`] when the work space of a `b`-column subspace fits in one block's
    /// shared memory on `device`; else [`SmallSolver::DeviceBlocked`] when the batch of `images`
    /// gives the block Jacobi at least one pair of blocks per multiprocessor, and
    /// [`SmallSolver::Host`] when it does not.
    pub fn for_subspace(device: &Device, b: usize, images: usize) -> Result<SmallSolver> {
        if kf::jacobi_shared_bytes(b as u32) <= device.max_shared_bytes_per_block()? {
            return Ok(SmallSolver::Device);
        }
        let pairs = b.div_ceil(2 * BlockJacobi::block_rows(device, b));
        Ok(if images * pairs >= device.multiprocessors()? as usize {
            SmallSolver::DeviceBlocked
        } else {
            SmallSolver::Host
        })
    }
}

/// Sweeps after which the block Jacobi gives up (a dense matrix needs about 10; the Ritz
/// problems of later iterations, nearly diagonal, 1–3).
const BLOCK_JACOBI_SWEEPS: usize = 40;

/// The symmetric eigenproblems of a batch of `b × b` matrices on the device, by block Jacobi
/// (`kernels::svd_factor::block_jacobi_*`): the matrix, zero-padded to `n = 2·nb·pairs`, is
/// diagonalised by sweeps of `2·pairs − 1` rounds, each round diagonalising `pairs` submatrices
/// of `2nb × 2nb` per image in shared memory and applying their rotations to the whole matrix and
/// to the eigenvectors (two launches); the host reads one flag per image and sweep.
pub struct BlockJacobi {
    /// The padded size `n`.
    pub n: usize,
    /// Rows per block.
    nb: usize,
    images: usize,
    /// The matrix (two buffers: each round reads one and writes the other), `n × n` per image.
    x: [Buffer<f64>; 2],
    /// The accumulated eigenvectors, likewise.
    z: [Buffer<f64>; 2],
    rot: Buffer<f64>,
    rotated: Buffer<u32>,
    scratch: Buffer<f64>,
}

impl BlockJacobi {
    /// Rows per block for `b × b` problems: 32 on a GPU (`2nb × 2nb` subproblems of 64: 67 KiB
    /// of work space); in the simulator 8 up to `b = 64` and 16 above, so that its tests take
    /// several rounds and stay quick (it runs one OS thread per GPU thread).
    pub fn block_rows(device: &Device, b: usize) -> usize {
        match device.backend() {
            crate::Backend::Gpu => 32,
            _ if b <= 64 => 8,
            _ => 16,
        }
    }

    /// Work space for `images` matrices of `b × b`; the matrix buffer to fill is
    /// [`BlockJacobi::matrix`] (zero past `b`).
    pub fn new(device: &Device, b: usize, images: usize) -> Result<BlockJacobi> {
        let nb = Self::block_rows(device, b);
        let n = b.next_multiple_of(2 * nb);
        let zeros = vec![0.0f64; images * n * n];
        let x = [device.upload(&zeros)?, device.upload(&zeros)?];
        let z = [device.alloc::<f64>(images * n * n)?, device.alloc::<f64>(images * n * n)?];
        let rot = device.alloc::<f64>(images * n * 2 * nb)?;
        let rotated = device.alloc::<u32>(images)?;
        let scratch = device.alloc::<f64>(images * 2 * b)?;
        Ok(BlockJacobi { n, nb, images, x, z, rot, rotated, scratch })
    }

    /// The matrix to diagonalise: `n × n` per image, row-major, `n²` apart; write the `b × b`
    /// problem into its top left corner (the rest stays zero).
    pub fn matrix(&mut self) -> &mut Buffer<f64> {
        &mut self.x[0]
    }

    /// Diagonalises the matrices and writes the leading `b` Ritz pairs per image as
    /// [`kf::ritz_eigen`] does: `(theta, sigma, inv_sigma, ritz)`.
    pub fn solve(
        &mut self,
        device: &Device,
        b: usize,
        (theta, sigma, inv_sigma, ritz): (
            &mut Buffer<f64>,
            &mut Buffer<f64>,
            &mut Buffer<f64>,
            &mut Buffer<f64>,
        ),
    ) -> Result<usize> {
        let (n, nb, images) = (self.n, self.nb, self.images);
        let q = device.queue();
        let pairs = n / (2 * nb);
        let players = 2 * pairs;
        let threads = if device.backend() == crate::Backend::Gpu { 256 } else { 64 };
        let rotations_cfg = LaunchConfig {
            grid: Dim3 { x: pairs as u32, y: 1, z: images as u32 },
            block: Dim3::x(threads),
            shared_bytes: kf::block_jacobi_rotations_bytes(nb as u32),
        };
        let apply_cfg = LaunchConfig {
            grid: Dim3 { x: pairs as u32, y: pairs as u32, z: images as u32 },
            block: Dim3::x(threads),
            shared_bytes: kf::block_jacobi_apply_bytes(nb as u32),
        };
        let fill_cfg = LaunchConfig {
            grid: Dim3 { x: (n * n).div_ceil(256).min(1024) as u32, y: 1, z: images as u32 },
            block: Dim3::x(256),
            shared_bytes: 0,
        };
        let (n32, nb32) = (n as u32, nb as u32);
        let mut cur = 0;
        // SAFETY (every launch here): the buffers belong to `self` and the caller, alive until
        // the downloads below wait for the queue; each kernel indexes through checked slices but
        // the rotations' work space, which the launch's shared memory holds.
        unsafe { device.launch_on(q, &kf::SET_IDENTITY, fill_cfg, (&mut self.z[0], n32))? };
        let mut sweeps = 0;
        loop {
            sweeps += 1;
            device.upload_into(&mut self.rotated, &vec![0; images])?;
            for round in 0..players as u32 - 1 {
                let (x_src, x_dst) = split_pair(&mut self.x, cur);
                let (z_src, z_dst) = split_pair(&mut self.z, cur);
                // SAFETY: as above.
                unsafe {
                    device.launch_on(
                        q,
                        &kf::BLOCK_JACOBI_ROTATIONS,
                        rotations_cfg,
                        (x_src, n32, nb32, round, &mut self.rot, &mut self.rotated),
                    )?;
                    device.launch_on(
                        q,
                        &kf::BLOCK_JACOBI_APPLY,
                        apply_cfg,
                        (x_src, n32, nb32, round, &self.rot, 1u32, x_dst),
                    )?;
                    device.launch_on(
                        q,
                        &kf::BLOCK_JACOBI_APPLY,
                        apply_cfg,
                        (z_src, n32, nb32, round, &self.rot, 0u32, z_dst),
                    )?;
                }
                cur = 1 - cur;
            }
            if device.download(&self.rotated)?.iter().all(|&r| r == 0) {
                break;
            }
            if sweeps >= BLOCK_JACOBI_SWEEPS {
                return Err(Error::Numerical(format!(
                    "the block Jacobi eigensolver did not converge in {BLOCK_JACOBI_SWEEPS} sweeps ({b} × {b})"
                )));
            }
        }
        // The result may end in either buffer; the next problem overwrites buffer 0's `b × b`
        // corner, and both buffers' padding stays zero (no rotation ever mixes it in).
        let config = LaunchConfig { grid: Dim3::x(images as u32), block: Dim3::x(threads), shared_bytes: 0 };
        // SAFETY: as above.
        unsafe {
            device.launch_on(
                q,
                &kf::BLOCK_JACOBI_FINISH,
                config,
                (&self.x[cur], &self.z[cur], n32, b as u32, &mut self.scratch, theta, sigma, inv_sigma, ritz),
            )?;
        }
        Ok(sweeps)
    }
}

/// The buffer `cur` of a pair to read and the other to write.
fn split_pair(pair: &mut [Buffer<f64>; 2], cur: usize) -> (&Buffer<f64>, &mut Buffer<f64>) {
    let (first, second) = pair.split_at_mut(1);
    if cur == 0 { (&first[0], &mut second[0]) } else { (&second[0], &mut first[0]) }
}

/// The host's [`kf::ritz_eigen`]: per image, the Ritz pairs of `T` (`b × b` per image), as
/// `(theta, sigma, inv_sigma, ritz)` laid out as the kernel writes them.
pub(super) fn ritz_eigen_host(t: &[f64], b: usize, images: usize) -> Result<[Vec<f64>; 4]> {
    let per_image: Vec<[Vec<f64>; 4]> = t
        .par_chunks(b * b)
        .take(images)
        .map(|block| {
            let t = Mat::<f64>::from_fn(b, b, |i, j| 0.5 * (block[i * b + j] + block[j * b + i]));
            let evd = t
                .self_adjoint_eigen(faer::Side::Lower)
                .map_err(|e| Error::Numerical(format!("the Ritz eigenproblem did not converge: {e:?}")))?;
            let values: Vec<f64> = evd.S().column_vector().iter().copied().collect();
            let mut order: Vec<usize> = (0..b).collect();
            order.sort_by(|&x, &y| values[y].total_cmp(&values[x]));
            let theta: Vec<f64> = order.iter().map(|&i| values[i]).collect();
            let theta0 = theta[0].max(0.0);
            let sigma: Vec<f64> = theta.iter().map(|&t| t.max(0.0).sqrt()).collect();
            let inv_sigma = theta
                .iter()
                .zip(&sigma)
                .map(|(&t, &s)| if t > kf::NULL_THRESHOLD * theta0 && s > 0.0 { 1.0 / s } else { 0.0 })
                .collect();
            let vectors = evd.U();
            let mut ritz = Vec::with_capacity(b * b);
            for row in 0..b {
                ritz.extend(order.iter().map(|&col| vectors[(row, col)]));
            }
            Ok([theta, sigma, inv_sigma, ritz])
        })
        .collect::<Result<_>>()?;
    let mut out: [Vec<f64>; 4] = Default::default();
    for image in per_image {
        for (all, part) in out.iter_mut().zip(image) {
            all.extend(part);
        }
    }
    Ok(out)
}

/// The host's [`kf::cholesky_inverse`] (same input, output and pivot floors): per image `R⁻¹`
/// (`b × b`, row-major) for the Gram matrix `w = RᵀR` (`b × b`, upper triangle read). Images in
/// parallel; each by faer's Cholesky factorisation and triangular solve (`R⁻¹ = (L⁻¹)ᵀ`), or where
/// a pivot falls below its floor by [`floored_cholesky_inverse`].
pub(super) fn cholesky_inverse_host(w: &[f64], b: usize, images: usize) -> Vec<f64> {
    w.par_chunks(b * b)
        .take(images)
        .flat_map_iter(|w| {
            let gram = Mat::<f64>::from_fn(b, b, |i, j| w[i.min(j) * b + i.max(j)]);
            let factor = gram.llt(faer::Side::Lower).ok().filter(|llt| {
                let l = llt.L();
                (0..b).all(|j| l[(j, j)] * l[(j, j)] > kf::PIVOT_FLOOR * gram[(j, j)])
            });
            match factor {
                Some(llt) => {
                    let mut l_inv = Mat::<f64>::identity(b, b);
                    faer::linalg::triangular_solve::solve_lower_triangular_in_place(
                        llt.L(),
                        l_inv.as_mut(),
                        faer::Par::Seq,
                    );
                    (0..b * b).map(|i| l_inv[(i % b, i / b)]).collect()
                }
                None => floored_cholesky_inverse(w, b),
            }
        })
        .collect()
}

/// [`kf::cholesky_inverse`]'s algorithm for one image on the host: a right-looking Cholesky
/// factorisation with floored pivots, then `R⁻¹` by back substitution (row-major `b × b`).
fn floored_cholesky_inverse(w: &[f64], b: usize) -> Vec<f64> {
    let mut w = w.to_vec();
    let diagonal: Vec<f64> = (0..b).map(|j| w[j * b + j]).collect();
    for j in 0..b {
        let (done, trailing) = w.split_at_mut((j + 1) * b);
        let row_j = &mut done[j * b..];
        let pivot = row_j[j].max(kf::PIVOT_FLOOR * diagonal[j]).max(f64::MIN_POSITIVE).sqrt();
        row_j[j] = pivot;
        row_j[j + 1..].iter_mut().for_each(|v| *v /= pivot);
        for (i, row) in trailing.chunks_mut(b).enumerate() {
            let r = j + 1 + i;
            let wjr = row_j[r];
            for c in r..b {
                row[c] -= wjr * row_j[c];
            }
        }
    }
    let mut rinv = vec![0.0; b * b];
    for c in 0..b {
        for r in (0..=c).rev() {
            let row = &w[r * b..(r + 1) * b];
            let mut acc = if r == c { 1.0 } else { 0.0 };
            for l in r + 1..=c {
                acc -= row[l] * rinv[l * b + c];
            }
            rinv[r * b + c] = acc / row[r];
        }
    }
    rinv
}
