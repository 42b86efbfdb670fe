//! SVD on the device: the leading `k` singular triplets of a batch of same-shape images, by
//! subspace iteration with Rayleigh–Ritz on the f64 Gram matrix (`kernels::svd_factor`; the
//! method and its trade-offs: `docs/svd-gpu.md`). The CPU reference is faer's thin SVD
//! ([`crate::svd::thin_svd`]).
//!
//! Images are row-major `m × n` f64 on the device, `images` of them `m·n` apart. With
//! `r = min(m, n)` the Gram matrix is the `r × r` one (`AᵀA` for tall or square images, `AAᵀ` for
//! wide ones), its leading eigenvectors the right (or left) singular vectors; the other side is
//! `A·v/σ` (or `Aᵀ·u/σ`). Tests: `tests/svd_factor.rs`.

use crate::error::{Error, Result, ensure};
use crate::profile::Work;
use crate::{Buffer, BufferView, BufferViewMut, Device, Dim3, Element, LaunchConfig, Queue};
use faer::Mat;
use gpu_std::{KernelFn, Slice, SliceMut};
use kernels::svd_factor::{self as kf, Layout};
use ndarray::{Array2, ArrayView2};
use rand::{Rng, SeedableRng, rngs::SmallRng};
use rayon::prelude::*;

/// Residual tolerance of the iteration: each of the `k` leading Ritz pairs must satisfy
/// `‖G·v − θ·v‖ ≤ TOLERANCE·√(θ₁·θ)`. Since an eigenvalue lies within the residual of a Ritz
/// value, each singular value is then within `TOLERANCE·σ₁/2` of the exact one, half the accuracy
/// asked for; in practice (the error is quadratic in the residual) within about 1e-8·σ₁.
pub const TOLERANCE: f64 = 1e-5;

/// Iterations after which an image that has not converged is an error (natural images need 5–15,
/// white noise about 40).
pub const MAX_ITERATIONS: usize = 300;

/// Most threads of the one-block-per-image Jacobi kernels on a GPU (fewer where the kernels'
/// registers allow fewer; the simulator, which runs a thread per GPU thread, uses 64).
const JACOBI_THREADS: u32 = 1024;

/// Size of the iterated subspace for `k` triplets of an image with `r = min(m, n)`: twice `k`
/// (at least `k + 16`), rounded up to a multiple of 8, at most `r`.
pub fn subspace_size(k: usize, r: usize) -> usize {
    (2 * k).max(k + 16).next_multiple_of(8).min(r)
}

/// The factorisation of every image of a batch, on the device, as the reconstruction reads it:
/// f32 `U` (`m × k`), `s` (`k`) and `Vᵀ` (`k × n`) per image, consecutive.
pub struct DeviceFactors {
    /// Images in the batch.
    pub images: usize,
    /// Rows and columns of each image.
    pub dims: (usize, usize),
    /// Triplets per image.
    pub k: usize,
    /// `U`, `images × m × k`.
    pub u: Buffer<f32>,
    /// Singular values, `images × k`.
    pub s: Buffer<f32>,
    /// `Vᵀ`, `images × k × n`.
    pub vt: Buffer<f32>,
    /// Per image, the `k` leading singular values in f64, non-increasing.
    pub singular_values: Vec<Vec<f64>>,
    /// Per image, `‖A‖_F`.
    pub frobenius_norms: Vec<f64>,
    /// Subspace iterations (products with the Gram matrix) the batch took.
    pub iterations: usize,
    /// Of those, the ones that ended in a Rayleigh–Ritz step (the others are power steps).
    pub rayleigh_ritz_steps: usize,
}

/// Leading singular triplets of one image, downloaded (for tests and small jobs).
#[derive(Debug, Clone)]
pub struct Triplets {
    /// `U[:, :k]`, `m × k`.
    pub u: Array2<f32>,
    /// `σ₁ ≥ … ≥ σ_k`, f64.
    pub s: Vec<f64>,
    /// `Vᵀ[:k, :]`, `k × n`.
    pub vt: Array2<f32>,
    /// `‖A‖_F`.
    pub frobenius_norm: f64,
}

/// Launch configuration of the GEMM kernels for an `m × n` result over `images`.
fn gemm_config(m: usize, n: usize, images: usize) -> LaunchConfig {
    LaunchConfig {
        grid: Dim3 {
            x: n.div_ceil(kf::GEMM_TILE as usize) as u32,
            y: m.div_ceil(kf::GEMM_TILE as usize) as u32,
            z: images as u32,
        },
        block: Dim3::x(kf::GEMM_THREADS),
        shared_bytes: kf::GEMM_SHARED_BYTES,
    }
}

/// One operand of a batched GEMM: the buffer (or part of one) and the layout it is read through.
#[derive(Clone, Copy)]
struct Operand<'a> {
    data: BufferView<'a, f64>,
    layout: Layout,
}

/// The operand `data` read through `layout`.
fn operand(data: BufferView<'_, f64>, layout: Layout) -> Operand<'_> {
    Operand { data, layout }
}

/// Checks that `len` elements hold `images` `rows × cols` matrices through `layout` (the span from
/// the first element to the last), which the GEMM kernels index without checks.
fn check_span(
    what: &str,
    len: usize,
    layout: Layout,
    (rows, cols): (usize, usize),
    images: usize,
) -> Result<()> {
    let span = (images - 1) * layout.batch as usize
        + (rows - 1) * layout.row as usize
        + (cols - 1) * layout.col as usize
        + 1;
    ensure(span <= len, || {
        format!(
            "GEMM {what}: {images} matrices of {rows} × {cols} span {span} elements; the buffer holds {len}"
        )
    })
}

/// `C = A·B·diag(scale)` for every image (`m × n` result, inner dimension `k`), f64 result;
/// `scale` is `n` values per image, its stride apart. Only the upper triangle of blocks is
/// computed and mirrored when `symmetric`.
///
/// # Safety
/// The buffers must live until the queue reaches the launch (as for [`Device::launch_on`]).
#[allow(clippy::too_many_arguments)]
unsafe fn gemm(
    device: &Device,
    queue: &Queue,
    operands: (Operand, Operand),
    c: (BufferViewMut<f64>, Layout),
    scale: Option<(BufferView<f64>, u32)>,
    dims: (usize, usize, usize),
    images: usize,
    symmetric: bool,
) -> Result<()> {
    // SAFETY: forwarded from the caller.
    unsafe { gemm_into(device, queue, &kf::GEMM_F64_TO_F64, operands, c, scale, dims, images, symmetric) }
}

/// [`gemm`] with an f32 result.
///
/// # Safety
/// As for [`gemm`].
unsafe fn gemm_to_f32(
    device: &Device,
    queue: &Queue,
    operands: (Operand, Operand),
    c: (BufferViewMut<f32>, Layout),
    scale: Option<(BufferView<f64>, u32)>,
    dims: (usize, usize, usize),
    images: usize,
) -> Result<()> {
    // SAFETY: forwarded from the caller.
    unsafe { gemm_into(device, queue, &kf::GEMM_F64_TO_F32, operands, c, scale, dims, images, false) }
}

/// [`gemm`] with the result type of `kernel`; every operand's layout checked against its buffer.
///
/// # Safety
/// As for [`gemm`].
#[allow(clippy::too_many_arguments)]
unsafe fn gemm_into<T: Element>(
    device: &Device,
    queue: &Queue,
    kernel: &KernelFn<GemmArgs<T>>,
    (a, b): (Operand, Operand),
    (c, c_layout): (BufferViewMut<T>, Layout),
    scale: Option<(BufferView<f64>, u32)>,
    (m, n, k): (usize, usize, usize),
    images: usize,
    symmetric: bool,
) -> Result<()> {
    check_span("A", a.data.len(), a.layout, (m, k), images)?;
    check_span("B", b.data.len(), b.layout, (k, n), images)?;
    check_span("C", c.len(), c_layout, (m, n), images)?;
    let scale_stride = match scale {
        Some((values, stride)) => {
            check_span("scale", values.len(), Layout::row_major(1, stride), (1, n), images)?;
            stride
        }
        None => 0,
    };
    let work = gemm_work(m, n, k, images, symmetric);
    let args = (
        a.data,
        a.layout,
        b.data,
        b.layout,
        c,
        c_layout,
        scale.map(|(values, _)| values),
        scale_stride,
        m as u32,
        n as u32,
        k as u32,
        symmetric as u32,
    );
    // SAFETY: forwarded from the caller; the layouts lie inside their buffers (checked above);
    // one thread block per 64 × 64 tile and image.
    unsafe { device.launch_counted(queue, kernel, gemm_config(m, n, images), args, Some(work)) }
}

/// The argument tuple of the GEMM kernels with result type `T`.
type GemmArgs<T> =
    (Slice<f64>, Layout, Slice<f64>, Layout, SliceMut<T>, Layout, Slice<f64>, u32, u32, u32, u32, u32);

fn gemm_work(m: usize, n: usize, k: usize, images: usize, symmetric: bool) -> Work {
    let half = if symmetric { 0.5 } else { 1.0 };
    Work {
        bytes: images as f64 * 8.0 * (m * k + k * n + m * n) as f64 * half,
        flops: images as f64 * 2.0 * (m * n * k) as f64 * half,
    }
}

/// A seeded random `r × b` matrix with orthonormal columns (row-major): the starting subspace.
pub fn starting_basis(r: usize, b: usize) -> Vec<f64> {
    let mut rng = SmallRng::seed_from_u64(0x5eed_0000 ^ ((r as u64) << 20) ^ b as u64);
    let random = Mat::<f64>::from_fn(r, b, |_, _| rng.random_range(-1.0..1.0));
    let q = random.qr().compute_thin_Q();
    let mut out = Vec::with_capacity(r * b);
    for i in 0..r {
        for j in 0..b {
            out.push(q[(i, j)]);
        }
    }
    out
}

/// Sums of squares per image (`Σ (a − x)²`, or `Σ a²` without `x`) over the `count` elements of
/// each of `images` images (`count` apart), queued on `queue`: returns the partial-sum buffer
/// (`images × blocks`) to add up on the host.
///
/// # Safety
/// `a` and `x` must live until the queue reaches the launch (as for [`Device::launch_on`]).
pub unsafe fn queue_squared_sums(
    device: &Device,
    queue: &Queue,
    a: &Buffer<f64>,
    x: Option<&Buffer<f32>>,
    count: usize,
    images: usize,
) -> Result<(Buffer<f64>, usize)> {
    let len = images * count;
    ensure(count > 0 && images > 0, || format!("squared sums over {images} images of {count} values"))?;
    ensure(a.len() >= len, || format!("squared sums: {} values for {images} images of {count}", a.len()))?;
    if let Some(x) = x {
        ensure(x.len() >= len, || {
            format!("squared sums: {} values to compare for {images} images of {count}", x.len())
        })?;
    }
    const THREADS: u32 = 256;
    let blocks = count.div_ceil(THREADS as usize * 16).clamp(1, 64);
    let mut partial = device.alloc::<f64>(images * blocks)?;
    let cfg = LaunchConfig {
        grid: Dim3 { x: blocks as u32, y: 1, z: images as u32 },
        block: Dim3::x(THREADS),
        shared_bytes: THREADS * 8,
    };
    let args = (a, count as u32, x, count as u32, count as u32, &mut partial);
    let work = Work { bytes: (len * 12) as f64, flops: (len * 3) as f64 };
    // SAFETY: forwarded from the caller; the kernel reads each image's `count` values through
    // checked slices; `partial` holds a value per block and image.
    unsafe { device.launch_counted(queue, &kf::SQUARED_DIFFERENCE_SUMS, cfg, args, Some(work))? };
    Ok((partial, blocks))
}

/// Adds up the partial sums of [`queue_squared_sums`] per image (waits for the queue).
pub fn finish_squared_sums(device: &Device, partial: &Buffer<f64>, blocks: usize) -> Result<Vec<f64>> {
    let values = device.download(partial)?;
    Ok(values.chunks(blocks).map(|c| c.iter().sum()).collect())
}

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
fn ritz_eigen_host(t: &[f64], b: usize, images: usize) -> Result<[Vec<f64>; 4]> {
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
fn cholesky_inverse_host(w: &[f64], b: usize, images: usize) -> Vec<f64> {
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

/// Subspace iterations (products with `G`) after which every image not yet converged should
/// meet the tolerance, predicted from its last Rayleigh–Ritz step (`stats` as
/// [`kf::ritz_residuals`] writes them, `theta` and the `converged` flags, per image): the residual
/// of pair `i` shrinks by about `θ_b/θ_i` per iteration (`θ_b` the smallest Ritz value, which
/// approximates `λ_{b+1}`). At least 1; at most 8, so a poor early estimate costs little.
fn steps_to_convergence(stats: &[f64], theta: &[f64], converged: &[u32], b: usize, k: usize) -> usize {
    let mut steps = 1.0f64;
    for img in (0..converged.len()).filter(|&img| converged[img] != 1) {
        let (stats, theta) = (&stats[img * 2 * b..(img + 1) * 2 * b], &theta[img * b..(img + 1) * b]);
        let theta0 = theta[0].max(0.0);
        let floor = theta[b - 1].max(0.0);
        for i in 0..k {
            let th = theta[i];
            let (residual, target) = (stats[b + i].sqrt(), TOLERANCE * (theta0 * th).sqrt());
            if th <= kf::NULL_THRESHOLD * theta0 || residual <= target {
                continue;
            }
            let rate = floor / th;
            steps = steps.max(if rate < 0.99 { (target / residual).ln() / rate.ln() } else { 8.0 });
        }
    }
    (steps.ceil() as usize).clamp(1, 8)
}

/// Factors the `images` row-major `m × n` f64 images in `a` (device memory, `m·n` apart): the
/// leading `k` singular triplets of each, with `‖A‖_F`. Work is queued on the device's queue;
/// the host waits once per iteration for the convergence flags.
pub fn factor(
    device: &Device,
    a: &Buffer<f64>,
    dims: (usize, usize),
    images: usize,
    k: usize,
) -> Result<DeviceFactors> {
    let b = subspace_size(k, dims.0.min(dims.1));
    factor_with(device, a, dims, images, k, SmallSolver::for_subspace(device, b, images)?)
}

/// [`factor`] with the small problems solved where `solver` says (tests run both on small shapes).
pub fn factor_with(
    device: &Device,
    a: &Buffer<f64>,
    dims: (usize, usize),
    images: usize,
    k: usize,
    solver: SmallSolver,
) -> Result<DeviceFactors> {
    let (m, n) = dims;
    ensure(m > 0 && n > 0 && images > 0, || format!("cannot factor {images} images of {m} × {n}"))?;
    let r = m.min(n);
    ensure(k >= 1 && k <= r, || format!("rank k = {k} is outside 1..={r} (min(rows, cols) of the image)"))?;
    ensure(a.len() == images * m * n, || format!("{} values for {images} images of {m} × {n}", a.len()))?;
    ensure((images * m * n.max(m)) < (1 << 31), || "batch too large for 32-bit indexing".into())?;
    let q = device.queue();
    let b = subspace_size(k, r);
    let mn = (m * n) as u32;
    let tall = m >= n;
    let m_eff = m.max(n);
    // A_eff (m_eff × r) is A for tall images and Aᵀ for wide ones.
    let a_layout = Layout::row_major(n as u32, mn);
    let a_eff = if tall { a_layout } else { a_layout.transposed() };
    let a_all = a.view(..)?;

    let mut g = device.alloc::<f64>(images * r * r)?;
    // [Q Y] (r × 2b per image); the next basis is built in its left half.
    let mut qy = device.alloc::<f64>(images * r * 2 * b)?;
    // [V W]: the Ritz vectors V = Q·Z and W = G·V; the first Cholesky QR pass's result goes to
    // its left half.
    let mut vw = device.alloc::<f64>(images * r * 2 * b)?;
    let square = || device.alloc::<f64>(images * b * b);
    let (mut t, mut ritz, mut gram, mut rinv) = (square()?, square()?, square()?, square()?);
    let mut blocked =
        if solver == SmallSolver::DeviceBlocked { Some(BlockJacobi::new(device, b, images)?) } else { None };
    let mut stats = device.alloc::<f64>(images * 2 * b)?;
    let mut weights = device.alloc::<f64>(images * 3 * b)?;
    let mut scratch = device.alloc::<f64>(images * kf::eigen_scratch(b as u32) as usize)?;
    let mut theta = device.alloc::<f64>(images * b)?;
    let mut sigma = device.alloc::<f64>(images * b)?;
    let mut inv_sigma = device.alloc::<f64>(images * b)?;
    let mut converged = device.alloc::<u32>(images)?;
    let q0 = device.upload(&starting_basis(r, b))?;
    let gpu = device.backend() == crate::Backend::Gpu;
    // The Jacobi and Cholesky solvers keep their matrices in shared memory where they fit.
    let jacobi_cfg = {
        let bytes = kf::jacobi_shared_bytes(b as u32);
        let shared = if bytes <= device.max_shared_bytes_per_block()? { bytes } else { 8 };
        let threads = if gpu {
            let fit = [kf::RITZ_EIGEN.name(), kf::CHOLESKY_INVERSE.name()]
                .into_iter()
                .map(|name| device.max_threads_per_block(name))
                .collect::<Result<Vec<_>>>()?;
            fit.into_iter().fold(JACOBI_THREADS, u32::min) / 32 * 32
        } else {
            64
        };
        LaunchConfig { grid: Dim3::x(images as u32), block: Dim3::x(threads), shared_bytes: shared }
    };
    let per_image_cfg = LaunchConfig {
        grid: Dim3::x(images as u32),
        block: Dim3::x(if gpu { 256 } else { 64 }),
        shared_bytes: 8,
    };
    let residuals_cfg = LaunchConfig {
        grid: Dim3 { x: b.div_ceil(32) as u32, y: 1, z: images as u32 },
        block: Dim3 { x: 32, y: kf::RESIDUAL_ROWS, z: 1 },
        shared_bytes: 32 * kf::RESIDUAL_ROWS * 16,
    };
    let columns_cfg = LaunchConfig {
        grid: Dim3 { x: (r * b).div_ceil(256).min(1024) as u32, y: 1, z: images as u32 },
        block: Dim3::x(256),
        shared_bytes: 0,
    };

    // SAFETY (every launch in this function): the buffers live until the end, after the last
    // download has waited for the queue.
    let (norm_partial, norm_blocks) = unsafe { queue_squared_sums(device, q, a, None, m * n, images)? };

    let g_layout = Layout::row_major(r as u32, (r * r) as u32);
    let qy_layout = Layout::row_major(2 * b as u32, (r * 2 * b) as u32);
    let sq_layout = Layout::row_major(b as u32, (b * b) as u32);
    let op = operand;
    // SAFETY: as above.
    unsafe {
        // G = A_effᵀ·A_eff, only the upper triangle of blocks computed and mirrored.
        gemm(
            device,
            q,
            (op(a_all, a_eff.transposed()), op(a_all, a_eff)),
            (g.view_mut(..)?, g_layout),
            None,
            (r, r, m_eff),
            images,
            true,
        )?;
        device.launch_on(
            q,
            &kf::INIT_SUBSPACE,
            columns_cfg,
            (&q0, &mut qy, r as u32, b as u32, (r * 2 * b) as u32),
        )?;
    }
    // R⁻¹ of the Gram matrix in `gram`, on the device or the host.
    let cholesky = |gram: &Buffer<f64>, scratch: &mut Buffer<f64>, rinv: &mut Buffer<f64>| -> Result<()> {
        match solver {
            // SAFETY: as above.
            SmallSolver::Device => unsafe {
                device.launch_on(q, &kf::CHOLESKY_INVERSE, jacobi_cfg, (gram, b as u32, scratch, rinv))
            },
            SmallSolver::DeviceBlocked | SmallSolver::Host => {
                device.upload_into(rinv, &cholesky_inverse_host(&device.download(gram)?, b, images))
            }
        }
    };

    // Two passes of Cholesky QR on the columns in Q's place (`qy`'s left half → `vw`'s left half
    // → back): each forms the Gram matrix, inverts its Cholesky factor and multiplies.
    let cholesky_qr2 = |qy: &mut Buffer<f64>,
                        vw: &mut Buffer<f64>,
                        gram: &mut Buffer<f64>,
                        scratch: &mut Buffer<f64>,
                        rinv: &mut Buffer<f64>|
     -> Result<()> {
        for pass in 0..2 {
            let (from, to): (&Buffer<f64>, &mut Buffer<f64>) = if pass == 0 { (qy, vw) } else { (vw, qy) };
            // SAFETY: as above.
            unsafe {
                gemm(
                    device,
                    q,
                    (op(from.view(..)?, qy_layout.transposed()), op(from.view(..)?, qy_layout)),
                    (gram.view_mut(..)?, sq_layout),
                    None,
                    (b, b, r),
                    images,
                    true,
                )?;
            }
            cholesky(gram, scratch, rinv)?;
            // SAFETY: as above.
            unsafe {
                gemm(
                    device,
                    q,
                    (op(from.view(..)?, qy_layout), op(rinv.view(..)?, sq_layout)),
                    (to.view_mut(..)?, qy_layout),
                    None,
                    (r, b, b),
                    images,
                    false,
                )?;
            }
        }
        Ok(())
    };

    let (mut iterations, mut rayleigh_ritz_steps) = (0, 0);
    // Power steps still to take before the next Rayleigh–Ritz step.
    let mut power_steps = 0;
    loop {
        iterations += 1;
        {
            // Y = G·Q is written to the right half of each row of [Q Y] while the left half (Q) is
            // read, so the read view aliases the written one.
            let qy_whole = qy.view_mut(..)?;
            // SAFETY: Y = G·Q reads only columns 0..b through it and writes only columns b..2b.
            let qy_read = unsafe { qy_whole.aliased_view() };
            let y_write = qy_whole.into_view_mut(b..)?;
            // SAFETY: as above.
            unsafe {
                gemm(
                    device,
                    q,
                    (op(g.view(..)?, g_layout), op(qy_read, qy_layout)),
                    (y_write, qy_layout),
                    None,
                    (r, b, r),
                    images,
                    false,
                )?;
            }
        }
        if power_steps > 0 {
            // A power step without Rayleigh–Ritz (which would not change the subspace): Q ← G·Q
            // with the columns scaled by the last Ritz values, orthonormalised. Nothing to wait for
            // but the host's Cholesky factorisations of large subspaces.
            power_steps -= 1;
            // SAFETY: as above.
            unsafe {
                device.launch_on(
                    q,
                    &kf::POWER_STEP_COLUMNS,
                    columns_cfg,
                    (&mut qy, &weights, r as u32, b as u32),
                )?;
            }
            cholesky_qr2(&mut qy, &mut vw, &mut gram, &mut scratch, &mut rinv)?;
            continue;
        }
        rayleigh_ritz_steps += 1;
        // SAFETY: as above.
        unsafe {
            // T = QᵀY (symmetric: only the upper triangle of blocks computed, and mirrored), into
            // the block Jacobi's padded matrix when that solves it.
            let target = match &mut blocked {
                Some(solver) => {
                    let n = solver.n as u32;
                    (solver.matrix().view_mut(..)?, Layout::row_major(n, n * n))
                }
                None => (t.view_mut(..)?, sq_layout),
            };
            gemm(
                device,
                q,
                (op(qy.view(..)?, qy_layout.transposed()), op(qy.view(b..)?, qy_layout)),
                target,
                None,
                (b, b, r),
                images,
                true,
            )?;
        }
        // Ritz pairs of T.
        match solver {
            // SAFETY: as above.
            SmallSolver::Device => unsafe {
                device.launch_on(
                    q,
                    &kf::RITZ_EIGEN,
                    jacobi_cfg,
                    (&t, b as u32, &mut scratch, &mut theta, &mut sigma, &mut inv_sigma, &mut ritz),
                )?;
            },
            SmallSolver::DeviceBlocked => {
                let solver = blocked.as_mut().expect("allocated for this solver");
                solver.solve(device, b, (&mut theta, &mut sigma, &mut inv_sigma, &mut ritz))?;
            }
            SmallSolver::Host => {
                let [th, s, inv, vectors] = ritz_eigen_host(&device.download(&t)?, b, images)?;
                device.upload_into(&mut theta, &th)?;
                device.upload_into(&mut sigma, &s)?;
                device.upload_into(&mut inv_sigma, &inv)?;
                device.upload_into(&mut ritz, &vectors)?;
            }
        }
        // SAFETY: as above.
        unsafe {
            // [V W] = [Q·Z  Y·Z], then each pair's ‖W_i‖ and residual ‖W_i − θ_i·V_i‖, the
            // convergence flags and the next basis's column weights.
            for half in [0, b] {
                gemm(
                    device,
                    q,
                    (op(qy.view(half..)?, qy_layout), op(ritz.view(..)?, sq_layout)),
                    (vw.view_mut(half..)?, qy_layout),
                    None,
                    (r, b, b),
                    images,
                    false,
                )?;
            }
            device.launch_on(
                q,
                &kf::RITZ_RESIDUALS,
                residuals_cfg,
                (&vw, &theta, r as u32, b as u32, &mut stats),
            )?;
            device.launch_on(
                q,
                &kf::RITZ_WEIGHTS,
                per_image_cfg,
                (&stats, &theta, b as u32, k as u32, TOLERANCE, &mut weights, &mut converged),
            )?;
        }
        let flags = device.download(&converged)?;
        if flags.iter().all(|&f| f == 1) {
            break;
        }
        if iterations >= MAX_ITERATIONS {
            let stuck = flags.iter().filter(|&&f| f != 1).count();
            return Err(Error::Numerical(format!(
                "the GPU SVD did not converge in {MAX_ITERATIONS} iterations for {stuck} of {images} images of {m} × {n}"
            )));
        }
        power_steps =
            steps_to_convergence(&device.download(&stats)?, &device.download(&theta)?, &flags, b, k)
                .min(MAX_ITERATIONS - iterations)
                .saturating_sub(1);
        // The next basis X = V·E + W·F in Q's place, orthonormalised.
        // SAFETY: as above.
        unsafe {
            device.launch_on(
                q,
                &kf::COMBINE_COLUMNS,
                columns_cfg,
                (&vw, &weights, r as u32, b as u32, &mut qy),
            )?;
        }
        cholesky_qr2(&mut qy, &mut vw, &mut gram, &mut scratch, &mut rinv)?;
    }

    // The Gram side's vectors X = Q·ritz[:, :k] (r × k, f64), then the f32 operands.
    let mut x = device.alloc::<f64>(images * r * k)?;
    let mut u = device.alloc::<f32>(images * m * k)?;
    let mut vt = device.alloc::<f32>(images * k * n)?;
    let x_layout = Layout::row_major(k as u32, (r * k) as u32);
    let u_layout = Layout::row_major(k as u32, (m * k) as u32);
    // Vᵀ (k × n) written as the transpose of an n × k result.
    let v_layout = Layout::row_major(n as u32, (k * n) as u32).transposed();
    let (gram_side, other_side) = if tall { (v_layout, u_layout) } else { (u_layout, v_layout) };
    // SAFETY: as above.
    unsafe {
        let basis = op(qy.view(..)?, qy_layout);
        let vectors = op(ritz.view(..)?, sq_layout);
        gemm(device, q, (basis, vectors), (x.view_mut(..)?, x_layout), None, (r, k, b), images, false)?;
        let (gram, other) =
            if tall { (vt.view_mut(..)?, u.view_mut(..)?) } else { (u.view_mut(..)?, vt.view_mut(..)?) };
        gemm_to_f32(device, q, (basis, vectors), (gram, gram_side), None, (r, k, b), images)?;
        // Other side = A_eff·X·diag(1/σ) (m_eff × k).
        gemm_to_f32(
            device,
            q,
            (op(a_all, a_eff), op(x.view(..)?, x_layout)),
            (other, other_side),
            Some((inv_sigma.view(..)?, b as u32)),
            (m_eff, k, r),
            images,
        )?;
    }
    let sigma_host = device.download(&sigma)?;
    let singular_values: Vec<Vec<f64>> = sigma_host.chunks(b).map(|c| c[..k].to_vec()).collect();
    let s32: Vec<f32> = singular_values.iter().flatten().map(|&v| v as f32).collect();
    let s = device.upload(&s32)?;
    let frobenius_norms =
        finish_squared_sums(device, &norm_partial, norm_blocks)?.into_iter().map(f64::sqrt).collect();
    Ok(DeviceFactors {
        images,
        dims,
        k,
        u,
        s,
        vt,
        singular_values,
        frobenius_norms,
        iterations,
        rayleigh_ritz_steps,
    })
}

/// Factors the `images` row-major `m × n` f32 images of `pixels` (`images·m·n` values already on
/// the device: a buffer, or another library's array), read after the work queued on `queue`: the
/// leading `k` triplets of each, as [`factor`] (whose queue, the device's, waits for `queue`). A
/// non-finite pixel is an error naming its image.
pub fn factor_pixels(
    device: &Device,
    queue: &Queue,
    pixels: BufferView<'_, f32>,
    (m, n): (usize, usize),
    images: usize,
    k: usize,
) -> Result<DeviceFactors> {
    ensure(pixels.len() == images * m * n, || {
        format!("{} values for {images} images of {m} × {n}", pixels.len())
    })?;
    ensure(m > 0 && n > 0 && images > 0, || format!("cannot factor {images} images of {m} × {n}"))?;
    let mut a = device.alloc::<f64>(pixels.len())?;
    // SAFETY: `a` lives until `factor` has waited for its work; `pixels` is the caller's.
    unsafe { launch_f32_to_f64(device, queue, pixels, a.view_mut(..)?)? };
    device.queue_wait(device.queue(), device.mark_on(queue)?)?;
    // SAFETY: `a` outlives the wait in `finish_squared_sums`.
    let (partial, blocks) = unsafe { queue_squared_sums(device, device.queue(), &a, None, m * n, images)? };
    let sums = finish_squared_sums(device, &partial, blocks)?;
    if let Some(i) = sums.iter().position(|s| !s.is_finite()) {
        return Err(Error::InvalidInput(format!(
            "image {i} holds a non-finite pixel: the images must be finite"
        )));
    }
    factor(device, &a, (m, n), images, k)
}

/// The leading `k` singular triplets of each image (all of one shape) on `device`: uploads the
/// images, factors them in one batch and downloads the triplets.
pub fn truncated_svd(device: &Device, images: &[ArrayView2<f32>], k: usize) -> Result<Vec<Triplets>> {
    ensure(!images.is_empty(), || "no images to factor".into())?;
    let (m, n) = images[0].dim();
    let solver = SmallSolver::for_subspace(device, subspace_size(k.max(1), m.min(n).max(1)), images.len())?;
    truncated_svd_with(device, images, k, solver)
}

/// [`truncated_svd`] with the small problems solved where `solver` says.
pub fn truncated_svd_with(
    device: &Device,
    images: &[ArrayView2<f32>],
    k: usize,
    solver: SmallSolver,
) -> Result<Vec<Triplets>> {
    ensure(!images.is_empty(), || "no images to factor".into())?;
    let (m, n) = images[0].dim();
    let mut host = Vec::with_capacity(images.len() * m * n);
    for (i, image) in images.iter().enumerate() {
        ensure(image.dim() == (m, n), || {
            format!("image {i} is {} × {}; the batch is {m} × {n}", image.dim().0, image.dim().1)
        })?;
        if let Some(((y, x), v)) = image.indexed_iter().find(|(_, v)| !v.is_finite()) {
            return Err(Error::InvalidInput(format!(
                "image {i}: pixel ({y}, {x}) is {v}: the image must be finite"
            )));
        }
        host.extend(image.iter().copied());
    }
    let raw = device.upload(&host)?;
    let mut a = device.alloc::<f64>(host.len())?;
    // SAFETY: both buffers live until `factor_with` has downloaded its results.
    unsafe { launch_f32_to_f64(device, device.queue(), raw.view(..)?, a.view_mut(..)?)? };
    let f = factor_with(device, &a, (m, n), images.len(), k, solver)?;
    let (u, vt) = (device.download(&f.u)?, device.download(&f.vt)?);
    Ok((0..images.len())
        .map(|i| Triplets {
            u: Array2::from_shape_vec((m, k), u[i * m * k..(i + 1) * m * k].to_vec()).expect("m·k values"),
            s: f.singular_values[i].clone(),
            vt: Array2::from_shape_vec((k, n), vt[i * k * n..(i + 1) * k * n].to_vec()).expect("k·n values"),
            frobenius_norm: f.frobenius_norms[i],
        })
        .collect())
}

/// Widens the f32 values of `src` to f64 in `dst` (of the same length) on `queue`: images of a
/// buffer, or of another library's array ([`BufferView::from_raw_parts`]).
///
/// # Safety
/// Both views' memory must live until the queue reaches the launch (as for [`Device::launch_on`]).
pub unsafe fn launch_f32_to_f64(
    device: &Device,
    queue: &Queue,
    src: BufferView<'_, f32>,
    dst: BufferViewMut<'_, f64>,
) -> Result<()> {
    // SAFETY: forwarded from the caller.
    unsafe { launch_conversion(device, queue, &kf::F32_TO_F64, src, dst) }
}

/// Converts the 8-bit pixels of `src` to f64 in `[0, 1]` in `dst` (of the same length) on `queue`.
///
/// # Safety
/// As for [`launch_f32_to_f64`].
pub unsafe fn launch_gray8_to_f64(
    device: &Device,
    queue: &Queue,
    src: &Buffer<u8>,
    dst: &mut Buffer<f64>,
) -> Result<()> {
    // SAFETY: forwarded from the caller.
    unsafe { launch_conversion(device, queue, &kf::GRAY8_TO_F64, src.view(..)?, dst.view_mut(..)?) }
}

/// One element-wise conversion kernel over two buffers of the same length, grid-stride.
///
/// # Safety
/// As for [`launch_f32_to_f64`].
unsafe fn launch_conversion<S: Element>(
    device: &Device,
    queue: &Queue,
    kernel: &KernelFn<(Slice<S>, SliceMut<f64>)>,
    src: BufferView<'_, S>,
    dst: BufferViewMut<'_, f64>,
) -> Result<()> {
    ensure(src.len() == dst.len(), || {
        format!("`{}`: {} values in, room for {} out", kernel.name(), src.len(), dst.len())
    })?;
    let cfg = LaunchConfig::for_grid_stride(src.len(), 256, 4096);
    // SAFETY: forwarded from the caller; the kernel indexes both slices below their length.
    unsafe { device.launch_on(queue, kernel, cfg, (src, dst)) }
}
