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
//! The files, by role: `plan.rs` makes every choice once ([`Plan`]: the subspace, the Ritz
//! solver, the Cholesky variant, launch shapes); `workspace.rs` owns the device buffers and runs
//! the steps; this file holds the iteration that calls them ([`factor_with`]) and the entry
//! points; `ritz.rs` is the Ritz eigensolver's interface ([`RitzSolver`]) with the one-block
//! Jacobi and the host's solver, `block_jacobi.rs` block Jacobi, `cholesky.rs` Cholesky QR's small
//! step, `chebyshev.rs` the filter for flat spectra, `convergence.rs` the stop test and its
//! predictions, `gemm.rs` the batched GEMMs, `passes.rs` the one-pass work (conversions, sums of
//! squares), `refine.rs` the accurate pass on `A` itself after the iteration ([`factor_accurate`]).

use crate::families::svd::finite::{check_finite, check_finite_sums};
use crate::launch::device::{Buffer, BufferView, Device, Queue};
use crate::launch::error::{Error, Result, ensure};
use ndarray::{Array2, ArrayView2};

mod block_jacobi;
mod chebyshev;
mod cholesky;
mod convergence;
mod factors;
mod gemm;
mod host_eigensolver;
mod one_block_jacobi;
mod passes;
mod plan;
mod projected_svd;
mod refine;
mod ritz;
mod tridiagonal_eigensolver;
mod workspace;

use chebyshev::ChebyshevFilter;
use convergence::{steps_to_convergence, worst_excess};
use factors::IterationCounts;
use workspace::Workspace;

pub use block_jacobi::BlockJacobi;
pub use cholesky::{blocked_cholesky_inverse, cholesky_panel_rows, inverse_cholesky_factor};
pub use convergence::{MAX_ITERATIONS, STALLED_EXCESS, StopTest, TOLERANCE};
pub use factors::{DeviceFactors, Triplets};
pub use host_eigensolver::HostEigensolver;
pub use one_block_jacobi::OneBlockJacobi;
pub use passes::{
    finish_squared_sums, launch_f32_to_f64, launch_gray8_to_f64, queue_squared_sums, squared_sum_blocks,
};
pub use plan::{
    CholeskyMethod, GramMethod, ONE_BLOCK_JACOBI_MAX_B, ONE_BLOCK_JACOBI_MIN_IMAGES,
    PRODUCTS_BEFORE_RAYLEIGH_RITZ, Plan, RitzMethod, WHOLE_GRAM_MAX_IMAGES, WHOLE_GRAM_MAX_R, subspace_size,
};
pub use refine::{AccurateFactors, factor_accurate, factor_accurate_with};
pub use ritz::{RitzPairs, RitzSolver};
pub use tridiagonal_eigensolver::{
    TRIDIAGONAL_MAX_B, TridiagonalEigensolver, TridiagonalReduction, overlaps_back_transform,
};

/// Factors the `images` row-major `m × n` f64 images in `a` (device memory, `m·n` apart): the
/// leading `k` singular triplets of each, with `‖A‖_F`, by the [`Plan`] for this device and shape.
/// Work is queued on the device's queue; the host waits once per Rayleigh–Ritz step for the
/// convergence flags.
pub fn factor(
    device: &Device,
    a: &Buffer<f64>,
    dims: (usize, usize),
    images: usize,
    k: usize,
) -> Result<DeviceFactors> {
    factor_with(device, a, &Plan::new(device, dims, images, k)?)
}

/// [`factor`] by the given plan (tests and benchmarks force methods through its fields): the
/// algorithm of `docs/svd-gpu.md`. Every eigenpair of `G` at once where the plan says so; else
/// subspace iteration (its first Rayleigh–Ritz step after [`Plan::products_before_rayleigh_ritz`]
/// products), with power steps between Rayleigh–Ritz steps where the spectrum decays
/// fast enough, a Chebyshev filter where it is flat.
pub fn factor_with(device: &Device, a: &Buffer<f64>, plan: &Plan) -> Result<DeviceFactors> {
    let (work, counts) = converge(device, a.view(..)?, plan, StopTest::IMAGES, FiniteCheck::ByTheCaller)?;
    work.extract(counts)
}

/// Whether [`converge`] checks that every image is finite (by its Gram matrix's trace, one wait,
/// before anything is solved on `G`), or the caller does (the `svd` job on the host before the
/// upload, and by `‖A‖_F` after the iteration, which a NaN leaves NaN).
#[derive(Clone, Copy, PartialEq, Eq)]
enum FiniteCheck {
    OnTheGram,
    ByTheCaller,
}

/// The iteration of [`factor_with`] until every image meets `test`: the workspace holding the
/// converged Ritz pairs (or `G`'s eigenpairs), and the iterations it took.
fn converge<'a>(
    device: &'a Device,
    a: BufferView<'a, f64>,
    plan: &'a Plan,
    test: StopTest,
    finite: FiniteCheck,
) -> Result<(Workspace<'a>, IterationCounts)> {
    let ((m, n), images, b, k) = (plan.dims, plan.images, plan.b, plan.k);
    ensure(a.len() == images * m * n, || format!("{} values for {images} images of {m} × {n}", a.len()))?;
    let mut work = Workspace::new(device, plan, a)?;
    if plan.method == GramMethod::WholeEigendecomposition {
        work.gram_eigenpairs(finite == FiniteCheck::OnTheGram)?;
        return Ok((work, IterationCounts::default()));
    }
    work.gram_matrix(finite == FiniteCheck::OnTheGram)?;
    work.start_basis()?;
    let mut counts = IterationCounts::default();
    for i in 0..plan.products_before_rayleigh_ritz {
        counts.iterations += 1;
        work.multiply_by_g()?;
        work.subspace_step(i + 1 == plan.products_before_rayleigh_ritz)?;
    }
    // Power steps still to take before the next Rayleigh–Ritz step.
    let mut power_steps = 0;
    // The largest residual over its bound at the last Rayleigh–Ritz step (`STALLED_EXCESS`).
    let mut last_excess = f64::INFINITY;
    loop {
        counts.iterations += 1;
        work.multiply_by_g()?;
        if power_steps > 0 {
            power_steps -= 1;
            work.power_step()?;
            continue;
        }
        counts.rayleigh_ritz_steps += 1;
        work.rayleigh_ritz(test)?;
        let flags = work.converged()?;
        if flags.iter().all(|&f| f == 1) {
            break;
        }
        if counts.iterations >= MAX_ITERATIONS {
            let stuck = flags.iter().filter(|&&f| f != 1).count();
            return Err(Error::Numerical(format!(
                "the GPU SVD did not converge in {MAX_ITERATIONS} iterations for {stuck} of {images} images of {m} × {n}"
            )));
        }
        let (stats, theta) = work.ritz_statistics()?;
        let excess = worst_excess(&stats, &theta, &flags, (b, k), test);
        if test.floor > 0.0 && excess < STALLED_EXCESS && excess > 0.9 * last_excess {
            break;
        }
        last_excess = excess;
        let budget = MAX_ITERATIONS - counts.iterations;
        match ChebyshevFilter::plan(&stats, &theta, &flags, (b, k), test, budget) {
            Some(filter) => {
                counts.filter_steps += filter.degree;
                counts.iterations += filter.degree - 1;
                work.chebyshev_filter(&filter)?;
                // Further rounds start from the orthonormalised basis, one product more each.
                for _ in 1..filter.rounds {
                    work.next_basis()?;
                    counts.filter_steps += filter.degree;
                    counts.iterations += filter.degree;
                    work.filter_again(&filter)?;
                }
            }
            None => {
                power_steps =
                    steps_to_convergence(&stats, &theta, &flags, (b, k), test).min(budget).saturating_sub(1);
            }
        }
        work.next_basis()?;
    }
    Ok((work, counts))
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
    // The device's queue reads the pixels after the caller's work; everything after is on it.
    device.queue_wait(device.queue(), device.mark_on(queue)?)?;
    let mut a = device.alloc_temporary::<f64>(device.queue(), pixels.len())?;
    // SAFETY: `a` lives until `factor` has waited for its work; `pixels` is the caller's.
    unsafe { launch_f32_to_f64(device, device.queue(), pixels, a.view_mut(..)?)? };
    // SAFETY: `a` outlives the wait in `finish_squared_sums`.
    let (partial, blocks) = unsafe { queue_squared_sums(device, device.queue(), &a, None, m * n, images)? };
    let sums = finish_squared_sums(device, &partial, blocks)?;
    check_finite_sums(&sums)?;
    factor(device, &a, (m, n), images, k)
}

/// The leading `k` singular triplets of each image (all of one shape) on `device`: uploads the
/// images, factors them in one batch and downloads the triplets.
pub fn truncated_svd(device: &Device, images: &[ArrayView2<f32>], k: usize) -> Result<Vec<Triplets>> {
    truncated_svd_with(device, images, k, |_| {})
}

/// [`truncated_svd`] with the plan changed by `adjust` first (tests force a Ritz solver or a
/// Cholesky variant through it).
pub fn truncated_svd_with(
    device: &Device,
    images: &[ArrayView2<f32>],
    k: usize,
    adjust: impl FnOnce(&mut Plan),
) -> Result<Vec<Triplets>> {
    ensure(!images.is_empty(), || "no images to factor".into())?;
    let (m, n) = images[0].dim();
    let mut plan = Plan::new(device, (m, n), images.len(), k)?;
    adjust(&mut plan);
    let mut host = Vec::with_capacity(images.len() * m * n);
    for (i, image) in images.iter().enumerate() {
        ensure(image.dim() == (m, n), || {
            format!("image {i} is {} × {}; the batch is {m} × {n}", image.dim().0, image.dim().1)
        })?;
        check_finite(image.view(), Some(&format!("image {i}")))?;
        host.extend(image.iter().copied());
    }
    let raw = device.upload(&host)?;
    let mut a = device.alloc::<f64>(host.len())?;
    // SAFETY: both buffers live until `factor_with` has downloaded its results.
    unsafe { launch_f32_to_f64(device, device.queue(), raw.view(..)?, a.view_mut(..)?)? };
    let f = factor_with(device, &a, &plan)?;
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
