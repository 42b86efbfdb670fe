//! The small `b × b` problems of each iteration — the Ritz pairs and the Cholesky QR of the next
//! basis — on the device (one block per image; block Jacobi and the blocked Cholesky over several)
//! or, for the Ritz pairs of a few images, on the host.

use crate::error::{Error, Result};
use crate::{Buffer, Device, Dim3, LaunchConfig};
use faer::Mat;
use faer::diag::Diag;
use faer::dyn_stack::{MemBuffer, MemStack};
use faer::linalg::evd::{ComputeEigenvectors, self_adjoint_evd, self_adjoint_evd_scratch};
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
    /// the Cholesky factorisations by [`blocked_cholesky_inverse`]: the default for larger
    /// subspaces of batches that give every multiprocessor a pair of blocks.
    DeviceBlocked,
    /// The Ritz pairs on the host (faer's symmetric eigensolver, images in parallel), the
    /// matrices copied each way once per Rayleigh–Ritz step; the Cholesky factorisations by
    /// [`blocked_cholesky_inverse`]: the default for larger subspaces of a few images, where the
    /// block Jacobi's rounds of a few blocks each leave the GPU idle (a 200 × 200 problem: 2.4 ms
    /// on one core of the H100's host, 14 ms by block Jacobi).
    Host,
}

impl SmallSolver {
    /// [`SmallSolver::Device`] when the work space of a `b`-column subspace fits in one block's
    /// shared memory on `device`; else [`SmallSolver::DeviceBlocked`] when the batch of `images`
    /// gives the block Jacobi at least one pair of blocks per multiprocessor, or when the
    /// problem has [`BLOCK_JACOBI_MIN_PAIRS`] pairs of blocks itself; [`SmallSolver::Host`]
    /// otherwise.
    pub fn for_subspace(device: &Device, b: usize, images: usize) -> Result<SmallSolver> {
        if kf::jacobi_shared_bytes(b as u32) <= device.max_shared_bytes_per_block()? {
            return Ok(SmallSolver::Device);
        }
        let pairs = b.div_ceil(2 * BlockJacobi::block_rows(device, b));
        Ok(if images * pairs >= device.multiprocessors()? as usize || pairs >= BLOCK_JACOBI_MIN_PAIRS {
            SmallSolver::DeviceBlocked
        } else {
            SmallSolver::Host
        })
    }
}

/// Pairs of blocks from which block Jacobi solves even one image's Ritz problem (`b > 320` on a
/// GPU): one image on an H200, the whole factorisation's device time, host solver against block
/// Jacobi: b = 200 (512², k = 100) 30.5 against 53.2 ms, (4096², k = 100) 105 against 135; b = 512
/// (2048², k = 256) 172 against 155, (4096², k = 256) 267 against 230 (`benches/svd_factor
/// --one-image`, 2026-11-26).
pub const BLOCK_JACOBI_MIN_PAIRS: usize = 6;

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
    let solve = |block: &[f64]| -> Result<[Vec<f64>; 4]> {
        let t = Mat::<f64>::from_fn(b, b, |i, j| 0.5 * (block[i * b + j] + block[j * b + i]));
        let (mut s, mut vectors) = (Diag::<f64>::zeros(b), Mat::<f64>::zeros(b, b));
        // Sequential: images run in parallel, and for one image of b ≤ 1024 faer's own threads
        // do not pay (b = 200 on the H100's 16-core host: 4.0–5.0 ms with 16 threads, 3.3–4.6
        // with one).
        let par = faer::Par::Seq;
        let scratch = self_adjoint_evd_scratch::<f64>(b, ComputeEigenvectors::Yes, par, Default::default());
        self_adjoint_evd(
            t.as_ref(),
            s.as_mut(),
            Some(vectors.as_mut()),
            par,
            MemStack::new(&mut MemBuffer::new(scratch)),
            Default::default(),
        )
        .map_err(|e| Error::Numerical(format!("the Ritz eigenproblem did not converge: {e:?}")))?;
        let values: Vec<f64> = s.column_vector().iter().copied().collect();
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
        let mut ritz = Vec::with_capacity(b * b);
        for row in 0..b {
            ritz.extend(order.iter().map(|&col| vectors[(row, col)]));
        }
        Ok([theta, sigma, inv_sigma, ritz])
    };
    // One image on the calling thread: handed to rayon's pool, a 512² job at k = 100 on the
    // H100's 16-core host spent a median 26.4 ms in its three solves instead of 22.8, up to
    // 107 against 25 (twelve runs of each).
    let per_image: Vec<[Vec<f64>; 4]> = if images == 1 {
        vec![solve(&t[..b * b])?]
    } else {
        t.par_chunks(b * b).take(images).map(solve).collect::<Result<_>>()?
    };
    let mut out: [Vec<f64>; 4] = Default::default();
    for image in per_image {
        for (all, part) in out.iter_mut().zip(image) {
            all.extend(part);
        }
    }
    Ok(out)
}

/// Panel rows of [`blocked_cholesky_inverse`]: 64 on a GPU (a panel is one GEMM tile); 16 in
/// the simulator, so that its tests on small matrices take several panels.
pub fn cholesky_panel_rows(device: &Device) -> usize {
    match device.backend() {
        crate::Backend::Gpu => kf::CHOLESKY_PANEL_MAX as usize,
        _ => 16,
    }
}

/// Cholesky QR's small step for any `b`, on the device over many blocks
/// (`kernels::svd_factor::blocked_cholesky`): per image, `rinv = R⁻¹` (`b × b`, row-major, upper
/// triangular) for the Gram matrix `w = RᵀR` (`b × b`, row-major, upper triangle read), pivots
/// floored as [`kf::cholesky_inverse`] floors them. `w`'s upper triangle is overwritten with `R`;
/// `diagonal` (`b` per image) is work space. Queued on `queue`: `4·⌈b/nb⌉ − 2` launches
/// ([`cholesky_panel_rows`]), each for every image, and no wait.
///
/// # Safety
/// The buffers must live until the queue reaches the launches (as for [`Device::launch_on`]).
pub unsafe fn blocked_cholesky_inverse(
    device: &Device,
    queue: &crate::Queue,
    (w, rinv, diagonal): (&mut Buffer<f64>, &mut Buffer<f64>, &mut Buffer<f64>),
    b: usize,
    images: usize,
) -> Result<()> {
    let len = images * b * b;
    crate::error::ensure(
        b > 0 && images > 0 && w.len() >= len && rinv.len() >= len && diagonal.len() >= images * b,
        || {
            format!(
                "blocked Cholesky of {images} matrices of {b} × {b}: buffers of {}, {} and {} values",
                w.len(),
                rinv.len(),
                diagonal.len()
            )
        },
    )?;
    let nb = cholesky_panel_rows(device);
    let panels = b.div_ceil(nb);
    let config = |blocks: usize| LaunchConfig {
        grid: Dim3 { x: blocks as u32, y: 1, z: images as u32 },
        block: Dim3::x(kf::BLOCKED_CHOLESKY_THREADS),
        shared_bytes: kf::BLOCKED_CHOLESKY_SHARED_BYTES,
    };
    let (b32, nb32) = (b as u32, nb as u32);
    for panel in 0..panels {
        let right = b - (b.min((panel + 1) * nb));
        // SAFETY: forwarded from the caller; the kernels index through checked slices, each
        // image's `b²` values inside the buffers (checked above).
        unsafe {
            device.launch_on(
                queue,
                &kf::CHOLESKY_DIAGONAL_BLOCK,
                config(1),
                (&mut *w, &mut *rinv, &mut *diagonal, b32, nb32, panel as u32),
            )?;
            if right > 0 {
                let tiles = right.div_ceil(kf::GEMM_TILE as usize);
                device.launch_on(
                    queue,
                    &kf::CHOLESKY_ROW_PANEL,
                    config(tiles),
                    (&mut *w, &*rinv, b32, nb32, panel as u32),
                )?;
                let trailing = LaunchConfig {
                    grid: Dim3 { x: tiles as u32, y: tiles as u32, z: images as u32 },
                    ..config(1)
                };
                device.launch_on(
                    queue,
                    &kf::CHOLESKY_TRAILING_UPDATE,
                    trailing,
                    (&mut *w, b32, nb32, panel as u32),
                )?;
            }
        }
    }
    for panel in 0..panels {
        // SAFETY: as above.
        unsafe {
            device.launch_on(
                queue,
                &kf::TRIANGULAR_INVERSE_COLUMN,
                config(panels),
                (&*w, &mut *rinv, b32, nb32, panel as u32),
            )?;
        }
    }
    Ok(())
}
