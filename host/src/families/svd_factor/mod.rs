//! SVD on the device: the leading `k` singular triplets of a batch of same-shape images, by
//! subspace iteration with Rayleigh–Ritz on the f64 Gram matrix (`kernels::svd_factor`; the
//! method and its trade-offs: `docs/svd-gpu.md`). The CPU reference is faer's thin SVD
//! ([`crate::svd::thin_svd`]).
//!
//! Images are row-major `m × n` f64 on the device, `images` of them `m·n` apart. With
//! `r = min(m, n)` the Gram matrix is the `r × r` one (`AᵀA` for tall or square images, `AAᵀ` for
//! wide ones), its leading eigenvectors the right (or left) singular vectors; the other side is
//! `A·v/σ` (or `Aᵀ·u/σ`). Tests: `tests/svd_factor.rs`.
//!
//! This file holds the iteration ([`factor`]) and its entry points; `gemm.rs` the batched GEMMs,
//! `small.rs` the small problems of each iteration ([`SmallSolver`]), `passes.rs` the one-pass work
//! around it (conversions, sums of squares).

use crate::error::{Error, Result, ensure};
use crate::{Buffer, BufferView, Device, Dim3, LaunchConfig, Queue};
use kernels::svd_factor::{self as kf, Layout};
use ndarray::{Array2, ArrayView2};

mod chebyshev;
mod gemm;
mod passes;
mod small;

use chebyshev::ChebyshevFilter;
use gemm::{gemm, gemm_to_f32, operand};
pub use passes::{finish_squared_sums, launch_f32_to_f64, launch_gray8_to_f64, queue_squared_sums};
use small::ritz_eigen_host;
pub use small::{
    BLOCK_JACOBI_MIN_PAIRS, BlockJacobi, SmallSolver, blocked_cholesky_inverse, cholesky_panel_rows,
};

/// Residual tolerance of the iteration: each of the `k` leading Ritz pairs must satisfy
/// `‖G·v − θ·v‖ ≤ TOLERANCE·√(θ₁·θ)`. Since an eigenvalue lies within the residual of a Ritz
/// value, each singular value is then within `TOLERANCE·σ₁/2` of the exact one, half the accuracy
/// asked for; in practice (the error is quadratic in the residual) within about 1e-8·σ₁.
pub const TOLERANCE: f64 = 1e-5;

/// Iterations after which an image that has not converged is an error (natural images need 5–15,
/// white noise about 20 with the Chebyshev filter, 40 without).
pub const MAX_ITERATIONS: usize = 300;

/// Seed of the starting basis ([`kf::random_subspace`]), mixed with the shape.
const STARTING_SEED: u32 = 0x5eed_0000;

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
    /// Of those, the ones that ended in a Rayleigh–Ritz step.
    pub rayleigh_ritz_steps: usize,
    /// Of those, the steps of Chebyshev filters (the rest are power steps).
    pub filter_steps: usize,
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

/// The leading `k` Ritz pairs of one image (its `stats` as [`kf::ritz_residuals`] writes them,
/// `2b`, and `theta`, `b`) that are not numerically zero and still miss the stop test
/// `‖r_i‖ ≤ tol·√(θ₁·θ_i)`: `(θ_i, ‖r_i‖, tol·√(θ₁·θ_i))`.
fn pairs_to_converge<'a>(
    stats: &'a [f64],
    theta: &'a [f64],
    k: usize,
    tol: f64,
) -> impl Iterator<Item = (f64, f64, f64)> + 'a {
    (0..k).filter_map(move |i| {
        let (residual, target) = residual_and_target(stats, theta, i, tol);
        (theta[i] > kf::NULL_THRESHOLD * theta[0].max(0.0) && residual > target)
            .then_some((theta[i], residual, target))
    })
}

/// How many of the first `most` Ritz pairs of one image (as [`pairs_to_converge`] reads them)
/// meet the stop test, counted from the first and stopping at one that does not or is
/// numerically zero: the pairs a Chebyshev filter may lock.
fn converged_lead(stats: &[f64], theta: &[f64], most: usize, tol: f64) -> usize {
    (0..most)
        .take_while(|&i| {
            let (residual, target) = residual_and_target(stats, theta, i, tol);
            theta[i] > kf::NULL_THRESHOLD * theta[0].max(0.0) && residual <= target
        })
        .count()
}

/// Pair `i`'s residual `‖r_i‖` and the stop test's bound on it, `tol·√(θ₁·θ_i)`.
fn residual_and_target(stats: &[f64], theta: &[f64], i: usize, tol: f64) -> (f64, f64) {
    (stats[theta.len() + i].sqrt(), tol * (theta[0].max(0.0) * theta[i]).sqrt())
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
        let floor = theta[b - 1].max(0.0);
        for (th, residual, target) in pairs_to_converge(stats, theta, k, TOLERANCE) {
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
    // The Chebyshev filter's `[a, p, q]` per step and image.
    let mut coefficients = device.alloc::<f64>(chebyshev::MAX_DEGREE * images * 3)?;
    // Its locked pairs: their vectors (`r × DEFLATED_PAIRS` per image, zero until a filter saves
    // them), values, and overlaps `θ_l·v_lᵀ·x_i` with the basis it filters.
    let deflated = kf::DEFLATED_PAIRS;
    let mut locked = device.zeroed::<f64>(images * r * deflated)?;
    let mut locked_theta = device.alloc::<f64>(images * deflated)?;
    let mut overlaps = device.alloc::<f64>(images * deflated * b)?;
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
    let overlaps_cfg =
        LaunchConfig { shared_bytes: 32 * kf::RESIDUAL_ROWS * deflated as u32 * 8, ..residuals_cfg };
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
    }
    // The starting basis: a seeded random matrix (the same for every image and run of a shape),
    // orthonormalised below by Cholesky QR, all on the device.
    let seed = STARTING_SEED ^ ((r as u32) << 12) ^ b as u32;
    // SAFETY: as above.
    unsafe {
        device.launch_on(
            q,
            &kf::RANDOM_SUBSPACE,
            columns_cfg,
            (&mut qy, r as u32, b as u32, (r * 2 * b) as u32, seed),
        )?;
    }
    // R⁻¹ of the Gram matrix in `gram` (which it may overwrite), on the device.
    let cholesky =
        |gram: &mut Buffer<f64>, scratch: &mut Buffer<f64>, rinv: &mut Buffer<f64>| -> Result<()> {
            match solver {
                // SAFETY: as above.
                SmallSolver::Device => unsafe {
                    device.launch_on(q, &kf::CHOLESKY_INVERSE, jacobi_cfg, (&*gram, b as u32, scratch, rinv))
                },
                // SAFETY: as above.
                SmallSolver::DeviceBlocked | SmallSolver::Host => unsafe {
                    blocked_cholesky_inverse(device, q, (gram, rinv, scratch), b, images)
                },
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

    cholesky_qr2(&mut qy, &mut vw, &mut gram, &mut scratch, &mut rinv)?;
    let (mut iterations, mut rayleigh_ritz_steps, mut filter_steps) = (0, 0, 0);
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
                let t = device.download(&t)?;
                let [th, s, inv, vectors] =
                    device.time_host("Ritz eigenproblems (faer, host)", || ritz_eigen_host(&t, b, images))?;
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
        let (stats_host, theta_host) = (device.download(&stats)?, device.download(&theta)?);
        let budget = MAX_ITERATIONS - iterations;
        if let Some(filter) =
            ChebyshevFilter::plan(&stats_host, &theta_host, &flags, (b, k), TOLERANCE, budget)
        {
            // A flat spectrum: the Chebyshev filter of [V W] in place (the halves of `vw` take
            // turns holding its last two bases; each product G·X goes to Y's place in `qy`).
            filter_steps += filter.degree;
            iterations += filter.degree - 1;
            let mut padded = filter.coefficients;
            padded.resize(coefficients.len(), 0.0);
            device.upload_into(&mut coefficients, &padded)?;
            device.upload_into(&mut weights, &filter.weights)?;
            device.upload_into(&mut locked_theta, &filter.locked_theta)?;
            let mut newer = 0;
            for step in 0..filter.degree {
                if step > 0 {
                    // SAFETY: as above.
                    unsafe {
                        if filter.deflates {
                            device.launch_on(
                                q,
                                &kf::DEFLATION_OVERLAPS,
                                overlaps_cfg,
                                (
                                    &vw,
                                    &locked,
                                    &locked_theta,
                                    r as u32,
                                    b as u32,
                                    newer as u32,
                                    &mut overlaps,
                                ),
                            )?;
                        }
                        gemm(
                            device,
                            q,
                            (op(g.view(..)?, g_layout), op(vw.view(newer..)?, qy_layout)),
                            (qy.view_mut(b..)?, qy_layout),
                            None,
                            (r, b, r),
                            images,
                            false,
                        )?;
                    }
                }
                // SAFETY: as above.
                unsafe {
                    device.launch_on(
                        q,
                        &kf::CHEBYSHEV_STEP,
                        columns_cfg,
                        (
                            &qy,
                            &coefficients,
                            r as u32,
                            b as u32,
                            step as u32,
                            filter.degree as u32 - 1,
                            newer as u32,
                            &locked_theta,
                            &overlaps,
                            &mut locked,
                            &mut vw,
                        ),
                    )?;
                }
                newer = b - newer;
            }
        } else {
            power_steps =
                steps_to_convergence(&stats_host, &theta_host, &flags, b, k).min(budget).saturating_sub(1);
        }
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
        filter_steps,
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
