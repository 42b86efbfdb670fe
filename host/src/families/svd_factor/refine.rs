//! The accurate pass: after the Gram iteration, the triplets again from `A` itself, so that every
//! singular value is exact to f64 rounding relative to `σ₁` (the Gram matrix alone limits a small
//! `σᵢ` to about `ε·σ₁²/σᵢ`, and the iteration's stop test to about `1e-9·σ₁`).
//!
//! The iteration runs with a stricter stop test ([`StopTest::accurate`]: residuals of 1e-12
//! relative, down to their rounding, where the `svd` job asks 1e-5), so that its subspace holds the
//! leading singular vectors to about 1e-12; then from its leading `b` Ritz vectors `V` (`r × b`,
//! the right singular vectors of `A_eff`, which is `A` for tall matrices and `Aᵀ` for wide ones;
//! `b` the iteration's subspace size for `k`, or `k` and a few more where `G` was decomposed
//! whole: [`pass_columns`]), as randomised SVD ends:
//!
//! 1. `W = A_eff·V` (`m_eff × b`) and its orthonormal basis `X`;
//! 2. `Bᵀ = A_effᵀ·X` (`r × b`) and its orthonormal basis `Y`;
//! 3. `S = Yᵀ·Bᵀ` (`b × b`), so that `A_eff ≈ X·Sᵀ·Yᵀ`; the SVD `Sᵀ = U_s·Σ·V_sᵀ`
//!    (`projected_svd.rs`: one-sided Jacobi on the device where it fits one block, else the
//!    Jordan–Wielandt eigenproblem on the device or faer on the host);
//! 4. the triplets `X·U_s`, `Σ`, `Y·V_s`, the first `k` of them.
//!
//! The singular values are those of `Xᵀ·A_eff`, `A` restricted to a subspace that holds the leading
//! left singular vectors to the iteration's accuracy times `σ_{b+1}/σᵢ` (step 2 is a half power
//! step on `A`, without squaring), computed by two QR factorisations without forming `AᵀA`.
//!
//! The pass is queued whole on the device's work, then checked in one wait (both bases and the
//! projected SVD's convergence); what a check refuses is made again. The QR factorisations are
//! Cholesky QR: two passes on the device, checked by the second pass's Gram matrix
//! ([`orthonormalize_on_device`]), or, where that basis is not orthonormal to rounding,
//! with column scaling and the factor on the host, repeated until it is (two passes, three for
//! bases of condition past about 1e4): each pass forms `QᵀQ` on the device (a GEMM), factors it
//! on the host (`b × b`), and multiplies on the device. The columns of `W` are `A·vᵢ`, about
//! `σᵢ·uᵢ`, so their norms span the spectrum but scaled to unit norm they are nearly orthogonal:
//! what is left of their condition comes from the Gram matrix's rounding in `V`'s smallest
//! vectors (up to `√ε·σ₁/σᵢ`, 1e4 at `σᵢ = 1e-12·σ₁`). On the host, a column of norm at most [`NULL_COLUMN`]` · ‖w_max‖` (a null direction of `A`) and a column
//! within [`DEPENDENT_PIVOT`] of the span of the columns before it are left out of the basis (a zero
//! column): what they hold of `A` is below `1e-13·σ₁`. Their triplets get `σ = 0` here, with zero
//! vectors; `matrix_svd` completes those vectors to an orthonormal set.

use super::FiniteCheck;
use super::cholesky::inverse_cholesky_factor;
use super::convergence::StopTest;
use super::factors::IterationCounts;
use super::gemm::{Gemms, Operand, operand as op};
use super::plan::{GramMethod, Plan, subspace_size};
use super::projected_svd::{
    ProjectedParts, jacobi_result, projected_svd, projected_svd_past_jacobi, queue_jacobi_svd,
};
use super::workspace::a_eff;
use crate::families::transpose::transpose_batch_f64;
use crate::launch::device::{Buffer, BufferView, BufferViewMut, Device};
use crate::launch::error::{Error, Result};
use faer::linalg::triangular_solve::solve_lower_triangular_in_place;
use faer::{Mat, Par, Side};
use kernels::svd_factor::{self as kf, Layout};

/// A column whose norm is at most this fraction of the largest column's is a null direction of
/// `A` and is left out of the orthonormal basis.
const NULL_COLUMN: f64 = 1e-14;

/// A column whose part orthogonal to the columns before it is at most `√DEPENDENT_PIVOT` of its
/// norm (a Cholesky pivot of the column-scaled Gram matrix at most this) is left out of the basis:
/// the pivots that remain bound the basis's condition number by about 1e6, which two Cholesky QR
/// passes make orthonormal to rounding.
const DEPENDENT_PIVOT: f64 = 1e-12;

/// A basis whose Gram matrix is within this of the identity comes out of one more Cholesky QR
/// pass orthonormal to rounding (its condition number is about 1 + 1e-6, and a pass's loss of
/// orthogonality is ε times its square), so that pass's result is not checked by another Gram
/// matrix.
const NEARLY_ORTHONORMAL: f64 = 1e-6;

/// Most Cholesky QR passes per basis; a basis still not orthonormal to rounding after them is an
/// error.
const MAX_QR_PASSES: usize = 4;

/// The factorisation of every matrix of a batch by [`factor_accurate`], on the device, in f64.
pub struct AccurateFactors {
    /// Matrices in the batch.
    pub images: usize,
    /// Rows and columns of each matrix.
    pub dims: (usize, usize),
    /// Triplets per matrix.
    pub k: usize,
    /// `U`, `images × m × k`, row-major per matrix; the vectors of the singular values the pass
    /// found zero (a null direction of `A`, below 1e-14 of the largest column) may be zero. Like
    /// `vt`, a temporary of the device's queue ([`Device::alloc_temporary`]): read it there, or
    /// after waiting for it.
    pub u: Buffer<f64>,
    /// `Vᵀ`, `images × k × n`, row-major per matrix; zero rows as in `u`.
    pub vt: Buffer<f64>,
    /// Per matrix, the `k` leading singular values, non-increasing.
    pub singular_values: Vec<Vec<f64>>,
    /// Products with the Gram matrix that the iteration took before the pass.
    pub iterations: usize,
    /// The plan of the iteration (of the transposes, for wide matrices: [`factor_accurate`]).
    pub plan: Plan,
}

/// The leading `k` singular triplets of each of the `images` row-major `m × n` f64 matrices in `a`
/// (device memory, `m·n` apart: a buffer, or a view of one or of another library's array), accurate to f64 rounding: [`factor`](super::factor)'s iteration,
/// then the accurate pass on `A` (this module's doc). Every `σᵢ` is within about `1e-13·σ₁` of the
/// exact one where `σ_{b+1}` (`b`, the plan's subspace) is small or the iteration resolved the
/// subspace; the vectors are orthonormal to rounding. Wide matrices are factored as their
/// transposes, copied on the device where it has the memory for them.
pub fn factor_accurate<'a>(
    device: &Device,
    a: impl Into<BufferView<'a, f64>>,
    dims: (usize, usize),
    images: usize,
    k: usize,
) -> Result<AccurateFactors> {
    let (a, (m, n)) = (a.into(), dims);
    if m < n
        && let Some(at) = transposed(device, a, dims, images)?
    {
        return accurate_factors(device, at.view(..)?, &Plan::new(device, (n, m), images, k)?, true);
    }
    factor_accurate_with(device, a, &Plan::new(device, dims, images, k)?)
}

/// [`factor_accurate`] by the given plan.
pub fn factor_accurate_with<'a>(
    device: &Device,
    a: impl Into<BufferView<'a, f64>>,
    plan: &Plan,
) -> Result<AccurateFactors> {
    accurate_factors(device, a.into(), plan, false)
}

/// The iteration and the pass by `plan` on `a`, which holds the caller's matrices, or their
/// transposes where `transposed` (the factors are then the caller's: `U` from the pass's right side).
fn accurate_factors(
    device: &Device,
    a: BufferView<'_, f64>,
    plan: &Plan,
    transposed: bool,
) -> Result<AccurateFactors> {
    let (work, counts) =
        super::converge(device, a, plan, StopTest::accurate(plan.r), FiniteCheck::OnTheGram)?;
    let columns = pass_columns(plan);
    if plan.method == GramMethod::WholeEigendecomposition {
        return refine(device, plan, a, (work.eigenvectors()?, columns), counts, transposed);
    }
    let v = work.ritz_vectors(columns)?;
    // The workspace (`G` among it) freed before the pass's buffers are made.
    drop(work);
    let v_layout = Layout::row_major(columns as u32, (plan.r * columns) as u32);
    refine(device, plan, a, (op(v.view(..)?, v_layout), columns), counts, transposed)
}

/// Fewest columns past `k` that the pass starts from where `G` was decomposed whole.
const WHOLE_GRAM_OVERSAMPLING: usize = 8;

/// How many of the leading Ritz vectors the pass starts from: the iterated subspace's `b`, whose
/// columns past `k` are what resolves the leading ones; where `G` was decomposed whole, its
/// eigenvectors are exact to `G`'s rounding and `k` plus [`WHOLE_GRAM_OVERSAMPLING`], rounded up
/// to a multiple of 8 (the one-sided Jacobi's circle method wants an even count), serve: a vector
/// `vᵢ` mixed with `vⱼ` (`j` past them) by `G`'s rounding, `ε·σ₁²/(σᵢ² − σⱼ²)`, costs the pass's
/// residual that times `σⱼ`, and the next `σⱼ` are smaller and farther the more columns there are.
/// On an H200, 100 000 × 512 at `k = 50`: 5.46 ms with 66 columns, 6.06 with the subspace's 104
/// (the pass's GEMMs, Cholesky QR and Jacobi shrink with it), residuals 3.8e-15 and 1.1e-15 of
/// `σ₁`.
fn pass_columns(plan: &Plan) -> usize {
    let columns = match plan.method {
        GramMethod::WholeEigendecomposition => (plan.k + WHOLE_GRAM_OVERSAMPLING).next_multiple_of(8),
        GramMethod::SubspaceIteration => subspace_size(plan.k, plan.r),
    };
    columns.min(plan.b)
}

/// The transposes (`n × m` each) of the `images` wide `m × n` matrices of `a`, a temporary of the
/// device's queue, or `None` where the device has no memory left for them (the factorisation then
/// reads the wide matrices as they are). A wide matrix's Gram matrix `A·Aᵀ` reads both operands
/// along their rows, which the pipelined GEMM stages one element at a time; of the transpose it
/// is `AᵀA`, its fast form: on an H200, `G` of 4096 × 11008 took 6.03 ms (31 TFLOP/s) as `A·Aᵀ`
/// and 3.69 ms (50 TFLOP/s) as `AᵀA` of the transpose, which took 0.18 ms.
fn transposed(
    device: &Device,
    a: BufferView<'_, f64>,
    (m, n): (usize, usize),
    images: usize,
) -> Result<Option<Buffer<f64>>> {
    let mut at = match device.alloc_temporary::<f64>(device.queue(), a.len()) {
        Ok(at) => at,
        Err(e) if e.is_out_of_memory() => return Ok(None),
        Err(e) => return Err(e),
    };
    // SAFETY: `at` is a temporary of the device's queue, on which every later use of it runs; `a`
    // is the caller's, borrowed until the factors are made.
    unsafe { transpose_batch_f64(device, device.queue(), a, (m, n), images, at.view_mut(..)?)? };
    Ok(Some(at))
}

/// The accurate pass from the leading `b` Ritz vectors `v` (`r × b` per matrix, the first `b`
/// columns of what `v`'s layout reads): the module's steps 1–4.
fn refine(
    device: &Device,
    plan: &Plan,
    a: BufferView<'_, f64>,
    (v, b): (Operand<'_>, usize),
    counts: IterationCounts,
    transposed: bool,
) -> Result<AccurateFactors> {
    let (images, k, r) = (plan.images, plan.k, plan.r);
    // The caller's matrices: the plan's, or their transposes.
    let (m, n) = if transposed { (plan.dims.1, plan.dims.0) } else { plan.dims };
    let m_eff = m.max(n);
    let gemms = Gemms::new(device, images, plan.tensor_cores);
    let tall_layout = Layout::row_major(b as u32, (m_eff * b) as u32);
    let basis_layout = Layout::row_major(b as u32, (r * b) as u32);

    let queue = device.queue();
    let mut w = device.alloc_temporary::<f64>(queue, images * m_eff * b)?;
    let mut bt = device.alloc_temporary::<f64>(queue, images * r * b)?;
    // SAFETY: every buffer is a temporary of the queue this work runs on, or lives until the
    // pass's check below has waited for it; the GEMMs check each operand's span against its
    // buffer.
    unsafe {
        let a_v = (op(a.view(..)?, a_eff(plan)), v);
        gemms.product(a_v, (w.view_mut(..)?, tall_layout), None, (m_eff, b, r), false)?;
    }
    // Bᵀ = A_effᵀ·X.
    let times_a_transposed = |x: &Buffer<f64>, bt: &mut Buffer<f64>| -> Result<()> {
        // SAFETY: as above.
        unsafe {
            let at_x = (op(a.view(..)?, a_eff(plan).transposed()), op(x.view(..)?, tall_layout));
            gemms.product(at_x, (bt.view_mut(..)?, basis_layout), None, (r, b, m_eff), false)
        }
    };
    // From the pool, as the pass's own buffers: `cuMemAlloc` of `U` (8 MB at 100 000 × 10) left the
    // GPU idle for 0.2 ms (H200).
    let mut u = device.alloc_temporary::<f64>(queue, images * m * k)?;
    let mut vt = device.alloc_temporary::<f64>(queue, images * k * n)?;
    let u_layout = Layout::row_major(k as u32, (m * k) as u32);
    // Vᵀ (k × n) written as the transpose of an n × k result.
    let v_layout = Layout::row_major(n as u32, (k * n) as u32).transposed();
    // X spans the left singular vectors of the plan's matrices: the caller's `U` unless those are
    // wide, or the transposes of the caller's.
    let x_is_u = plan.tall() != transposed;
    // Step 4: the triplets `X·U_s`, `Y·V_s` of a projected SVD into `u` and `vt`.
    let queue_triplets = |(x, y): (&Buffer<f64>, &Buffer<f64>),
                          (vectors, left, right, scale): ProjectedParts<'_>,
                          (u, vt): (&mut Buffer<f64>, &mut Buffer<f64>)|
     -> Result<()> {
        let (x_side, y_side) =
            if x_is_u { ((u, u_layout), (vt, v_layout)) } else { ((vt, v_layout), (u, u_layout)) };
        let scale = match scale {
            Some(values) => Some((values.view(..)?, 0)),
            None => None,
        };
        // SAFETY: as above; `u` and `vt` go to the caller, temporaries of the queue these run on.
        unsafe {
            let x_us = (op(x.view(..)?, tall_layout), op(vectors.view(left.0..)?, left.1));
            gemms.product(x_us, (x_side.0.view_mut(..)?, x_side.1), scale, (m_eff, k, b), false)?;
            let y_vs = (op(y.view(..)?, basis_layout), op(vectors.view(right.0..)?, right.1));
            gemms.product(y_vs, (y_side.0.view_mut(..)?, y_side.1), scale, (r, k, b), false)
        }
    };

    // The pass queued whole on the device's bases and Jacobi's projected SVD, then checked in one
    // wait: both bases' second-pass Gram matrices and Jacobi's values in one buffer. Where a check
    // fails, what it fails is made again: a basis on the host (and what was computed from it), the
    // projected SVD by the next method.
    let (grams, values) = (images * b * b, images * b);
    let mut checks = device.alloc_temporary::<f64>(queue, 2 * grams + values)?;
    let x = orthonormalize_on_device(device, &gemms, &w, (m_eff, b), checks.view_mut(..grams)?)?;
    times_a_transposed(&x, &mut bt)?;
    let y = orthonormalize_on_device(device, &gemms, &bt, (r, b), checks.view_mut(grams..2 * grams)?)?;
    let jacobi = queue_jacobi_svd(device, plan, &gemms, (&y, &bt), b, checks.view_mut(2 * grams..)?)?;
    if let Some(vectors) = &jacobi {
        let layout = Layout::row_major(b as u32, (2 * b * b) as u32);
        queue_triplets((&x, &y), (vectors, (0, layout), (b * b, layout), None), (&mut u, &mut vt))?;
    }
    let checked = device.download(&checks)?;
    let (x_grams, rest) = checked.split_at(grams);
    let (y_grams, jacobi_values) = rest.split_at(grams);
    let singular_values = match (second_pass_sufficed(x_grams, b), second_pass_sufficed(y_grams, b)) {
        (true, true) => match jacobi.and_then(|vectors| jacobi_result(jacobi_values, vectors, (b, k))) {
            Some(projected) => projected.values,
            None => {
                let projected = projected_svd_past_jacobi(device, plan, &gemms, (&y, &bt), b)?;
                queue_triplets((&x, &y), projected.parts(), (&mut u, &mut vt))?;
                projected.values
            }
        },
        (x_orthonormal, _) => {
            let x = if x_orthonormal {
                x
            } else {
                let x = orthonormalize_on_host(device, &gemms, &w, (m_eff, b))?;
                times_a_transposed(&x, &mut bt)?;
                x
            };
            let y = if x_orthonormal {
                orthonormalize_on_host(device, &gemms, &bt, (r, b))?
            } else {
                orthonormalize(device, &gemms, &bt, (r, b))?
            };
            let projected = projected_svd(device, plan, &gemms, (&y, &bt), b)?;
            queue_triplets((&x, &y), projected.parts(), (&mut u, &mut vt))?;
            projected.values
        }
    };
    Ok(AccurateFactors {
        images,
        dims: (m, n),
        k,
        u,
        vt,
        singular_values,
        iterations: counts.iterations,
        plan: plan.clone(),
    })
}

/// An orthonormal basis of the columns of each `rows × cols` row-major matrix in `input` (`images`
/// of them, consecutive): by Cholesky QR on the device ([`orthonormalize_on_device`]) where that
/// leaves it orthonormal to rounding, else on the host ([`orthonormalize_on_host`]).
fn orthonormalize(
    device: &Device,
    gemms: &Gemms<'_>,
    input: &Buffer<f64>,
    (rows, cols): (usize, usize),
) -> Result<Buffer<f64>> {
    let mut check = device.alloc_temporary::<f64>(device.queue(), input.len() / rows * cols)?;
    let basis = orthonormalize_on_device(device, gemms, input, (rows, cols), check.view_mut(..)?)?;
    if second_pass_sufficed(&device.download(&check)?, cols) {
        return Ok(basis);
    }
    orthonormalize_on_host(device, gemms, input, (rows, cols))
}

/// Whether the second Cholesky QR pass of [`orthonormalize_on_device`] left every basis
/// orthonormal to rounding: its Gram matrices (`grams`, `cols × cols` each, downloaded) are within
/// [`NEARLY_ORTHONORMAL`] of the identity. A pass on a basis of condition `κ` leaves it orthonormal
/// to about `ε·κ²`, and `κ ≤ 1 + 1e-6` here.
fn second_pass_sufficed(grams: &[f64], cols: usize) -> bool {
    grams.chunks(cols * cols).all(|g| is_orthonormal(g, cols, NEARLY_ORTHONORMAL))
}

/// Two passes of Cholesky QR on the device (the iteration's, [`inverse_cholesky_factor`]), the
/// second pass's Gram matrices copied into `check` (`cols × cols` per matrix) for
/// [`second_pass_sufficed`]; no wait. The columns
/// `A·vᵢ ≈ σᵢ·uᵢ` are graded (their norms span the spectrum) but nearly orthogonal once scaled, and
/// Cholesky without pivoting is as accurate on such a `D·C·D` as `C`'s condition allows, so the
/// host's column scaling is not needed here; what goes to the host is a basis with a column
/// (nearly) dependent on the others, which the kernels' pivot floor turns into a column that one
/// more pass cannot make orthonormal, and which the host's factor leaves out.
fn orthonormalize_on_device(
    device: &Device,
    gemms: &Gemms<'_>,
    input: &Buffer<f64>,
    (rows, cols): (usize, usize),
    mut check: BufferViewMut<'_, f64>,
) -> Result<Buffer<f64>> {
    let images = input.len() / (rows * cols);
    let plan =
        Plan::with_subspace(device, (rows, cols), images, (cols, cols), GramMethod::SubspaceIteration)?;
    let layout = Layout::row_major(cols as u32, (rows * cols) as u32);
    let square = Layout::row_major(cols as u32, (cols * cols) as u32);
    let queue = device.queue();
    let mut gram = device.alloc_temporary::<f64>(queue, images * cols * cols)?;
    let mut rinv = device.alloc_temporary::<f64>(queue, images * cols * cols)?;
    let mut scratch =
        device.alloc_temporary::<f64>(queue, images * kf::eigen_scratch(cols as u32) as usize)?;
    let mut current = device.alloc_temporary::<f64>(queue, input.len())?;
    let mut next = device.alloc_temporary::<f64>(queue, input.len())?;
    for pass in 0..2 {
        let from = if pass == 0 { input } else { &current };
        // SAFETY: the buffers are temporaries of the queue this work runs on (freed in its
        // order), `input` and `check` the caller's until its wait; `next` is written after the
        // factor that reads `gram`, in the queue's order.
        unsafe {
            let operands = (op(from.view(..)?, layout.transposed()), op(from.view(..)?, layout));
            gemms.product(operands, (gram.view_mut(..)?, square), None, (cols, cols, rows), true)?;
            if pass == 1 {
                // Before the factor, which may overwrite it.
                device.copy_view(queue, gram.view(..)?, check.view_mut(..)?)?;
            }
            inverse_cholesky_factor(device, &plan, (&mut gram, &mut rinv, &mut scratch))?;
            let operands = (op(from.view(..)?, layout), op(rinv.view(..)?, square));
            gemms.product(operands, (next.view_mut(..)?, layout), None, (rows, cols, cols), false)?;
        }
        std::mem::swap(&mut current, &mut next);
    }
    Ok(current)
}

/// How far from the identity the Gram matrix of a basis of `rows`-long columns orthonormal to
/// rounding may be: `8·ε·√rows`, at least 1e-13.
fn orthonormal_to_rounding(rows: usize) -> f64 {
    (8.0 * f64::EPSILON * (rows as f64).sqrt()).max(1e-13)
}

/// An orthonormal basis of the columns of each `rows × cols` row-major matrix in `input` (`images`
/// of them, consecutive), by Cholesky QR with column scaling, factored on the host, until `QᵀQ` is
/// the identity to rounding; the columns left out ([`NULL_COLUMN`], [`DEPENDENT_PIVOT`]) are zero.
fn orthonormalize_on_host(
    device: &Device,
    gemms: &Gemms<'_>,
    input: &Buffer<f64>,
    (rows, cols): (usize, usize),
) -> Result<Buffer<f64>> {
    let images = input.len() / (rows * cols);
    let layout = Layout::row_major(cols as u32, (rows * cols) as u32);
    let square = Layout::row_major(cols as u32, (cols * cols) as u32);
    let mut gram = device.alloc::<f64>(images * cols * cols)?;
    let mut factor = device.alloc::<f64>(images * cols * cols)?;
    let mut current = device.alloc::<f64>(input.len())?;
    let mut next = device.alloc::<f64>(input.len())?;
    let tolerance = orthonormal_to_rounding(rows);
    for pass in 0..=MAX_QR_PASSES {
        let from = if pass == 0 { input } else { &current };
        // SAFETY: the buffers live until the download below waits for the queue.
        unsafe {
            let operands = (op(from.view(..)?, layout.transposed()), op(from.view(..)?, layout));
            gemms.product(operands, (gram.view_mut(..)?, square), None, (cols, cols, rows), true)?;
        }
        let grams = device.download(&gram)?;
        if pass > 0 && grams.chunks(cols * cols).all(|g| is_orthonormal(g, cols, tolerance)) {
            return Ok(current);
        }
        if pass == MAX_QR_PASSES {
            break;
        }
        let factors: Vec<f64> =
            grams.chunks(cols * cols).flat_map(|g| orthonormalizing_factor(g, cols)).collect();
        device.upload_into(&mut factor, &factors)?;
        // SAFETY: as above; `next` is read after this product in the queue's order.
        unsafe {
            let operands = (op(from.view(..)?, layout), op(factor.view(..)?, square));
            gemms.product(operands, (next.view_mut(..)?, layout), None, (rows, cols, cols), false)?;
        }
        std::mem::swap(&mut current, &mut next);
        if pass > 0 && grams.chunks(cols * cols).all(|g| is_orthonormal(g, cols, NEARLY_ORTHONORMAL)) {
            return Ok(current);
        }
    }
    Err(Error::Numerical(format!(
        "Cholesky QR left a {rows} × {cols} basis not orthonormal after {MAX_QR_PASSES} passes"
    )))
}

/// Whether the Gram matrix `g` (`cols × cols`) is the identity within `tolerance` on its nonzero
/// columns (the left-out ones are zero).
fn is_orthonormal(g: &[f64], cols: usize, tolerance: f64) -> bool {
    let kept: Vec<usize> = (0..cols).filter(|&i| g[i * cols + i] > 0.5).collect();
    (0..cols).all(|i| kept.contains(&i) || g[i * cols + i] == 0.0)
        && kept.iter().all(|&i| {
            kept.iter().all(|&j| (g[i * cols + j] - if i == j { 1.0 } else { 0.0 }).abs() <= tolerance)
        })
}

/// For the Gram matrix `g = WᵀW` of one matrix's columns (`cols × cols`, row-major), the upper
/// triangular `M` (row-major) with `W·M` orthonormal: `D⁻¹·L⁻ᵀ` where `D` holds the columns' norms
/// and `L·Lᵀ = D⁻¹·g·D⁻¹` (Cholesky, faer's; column by column where a column must be left out),
/// with the null and dependent columns' rows and columns zero.
fn orthonormalizing_factor(g: &[f64], cols: usize) -> Vec<f64> {
    let norms: Vec<f64> = (0..cols).map(|i| g[i * cols + i].max(0.0).sqrt()).collect();
    let largest = norms.iter().copied().fold(0.0, f64::max);
    let kept: Vec<usize> = (0..cols).filter(|&i| largest > 0.0 && norms[i] > NULL_COLUMN * largest).collect();
    let scaled = Mat::from_fn(kept.len(), kept.len(), |i, j| {
        let (a, b) = (kept[i], kept[j]);
        g[a * cols + b] / (norms[a] * norms[b])
    });
    let (l, kept) = match scaled.llt(Side::Lower) {
        Ok(llt) if (0..kept.len()).all(|i| llt.L()[(i, i)].powi(2) > DEPENDENT_PIVOT) => {
            (llt.L().to_owned(), kept)
        }
        _ => cholesky_leaving_out(&scaled, &kept),
    };
    // L⁻¹, then M[kept_j][kept_i] = (L⁻¹)[i][j] / norm_j for i ≥ j.
    let mut inverse = Mat::<f64>::identity(kept.len(), kept.len());
    solve_lower_triangular_in_place(l.as_ref(), inverse.as_mut(), Par::Seq);
    let mut m = vec![0.0; cols * cols];
    for (j, &column) in kept.iter().enumerate() {
        for (i, &row) in kept.iter().enumerate().skip(j) {
            m[column * cols + row] = inverse[(i, j)] / norms[column];
        }
    }
    m
}

/// The Cholesky factor `L` of the scaled Gram matrix `scaled` (over the columns `kept`), column
/// by column in order, leaving out a column whose pivot is at most [`DEPENDENT_PIVOT`]: `L` over
/// the columns factored, and those columns.
fn cholesky_leaving_out(scaled: &Mat<f64>, kept: &[usize]) -> (Mat<f64>, Vec<usize>) {
    // `rows[p]` is the row of L of the p-th factored column, `at[p]` its index in `scaled`.
    let mut rows: Vec<Vec<f64>> = Vec::with_capacity(kept.len());
    let mut at: Vec<usize> = Vec::with_capacity(kept.len());
    for c in 0..kept.len() {
        let mut row: Vec<f64> = Vec::with_capacity(at.len() + 1);
        for (p, &q) in at.iter().enumerate() {
            let dot: f64 = (0..p).map(|t| row[t] * rows[p][t]).sum();
            row.push((scaled[(c, q)] - dot) / rows[p][p]);
        }
        let pivot = scaled[(c, c)] - row.iter().map(|v| v * v).sum::<f64>();
        if pivot > DEPENDENT_PIVOT {
            row.push(pivot.sqrt());
            rows.push(row);
            at.push(c);
        }
    }
    let l = Mat::from_fn(at.len(), at.len(), |i, j| if j <= i { rows[i][j] } else { 0.0 });
    (l, at.iter().map(|&c| kept[c]).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Cholesky QR on the device gives an orthonormal basis of the same span where the columns'
    /// norms fall by 1e-3 and by 1e-12 (as `A·vᵢ` do for spectra that decay that far: graded, not
    /// ill-conditioned), and leaves a basis with a repeated column to the host (its second pass's
    /// Gram matrix far from the identity), whose factor leaves the column out.
    #[test]
    fn the_device_cholesky_qr_keeps_the_span_of_graded_columns() -> Result<()> {
        let device = Device::simulator();
        device.set_poison_allocations(true);
        let (rows, cols, images) = (41usize, 6usize, 2usize);
        // Columns `spread^(j/5)·(e_j + small mixing)`, nearly orthogonal, of falling norms; with
        // `repeat`, column 3 of each matrix is column 2 again.
        let columns = |spread: f64, repeat: bool| -> Vec<f64> {
            (0..images * rows * cols)
                .map(|e| {
                    let (image, i, mut j) = (e / (rows * cols), (e / cols) % rows, e % cols);
                    if repeat && j == 3 {
                        j = 2;
                    }
                    let mixing = (((i * 7 + j * 3 + image * 5) % 11) as f64 - 5.0) * 0.01;
                    spread.powf(j as f64 / 5.0) * (f64::from(u8::from(i == j + image)) + mixing)
                })
                .collect()
        };
        let gemms = Gemms::new(&device, images, false);
        let repeated = device.upload(&columns(1e-3, true))?;
        let mut check = device.alloc::<f64>(images * cols * cols)?;
        orthonormalize_on_device(&device, &gemms, &repeated, (rows, cols), check.view_mut(..)?)?;
        assert!(!second_pass_sufficed(&device.download(&check)?, cols), "repeated columns");
        for spread in [1e-3, 1e-12] {
            let w = columns(spread, false);
            let basis = orthonormalize_on_device(
                &device,
                &gemms,
                &device.upload(&w)?,
                (rows, cols),
                check.view_mut(..)?,
            )?;
            assert!(second_pass_sufficed(&device.download(&check)?, cols), "spread {spread}");
            let q = device.download(&basis)?;
            for image in 0..images {
                let at = |m: &[f64], i: usize, j: usize| m[image * rows * cols + i * cols + j];
                for p in 0..cols {
                    for t in 0..cols {
                        let dot: f64 = (0..rows).map(|i| at(&q, i, p) * at(&q, i, t)).sum();
                        let want = f64::from(u8::from(p == t));
                        assert!((dot - want).abs() < 1e-14, "{spread}: QᵀQ ({p}, {t}) = {dot}");
                    }
                    // Column p of W lies in the span of Q: W − Q·QᵀW vanishes to rounding of its
                    // own norm.
                    let norm: f64 = (0..rows).map(|i| at(&w, i, p).powi(2)).sum::<f64>().sqrt();
                    let coefficients: Vec<f64> =
                        (0..cols).map(|t| (0..rows).map(|i| at(&q, i, t) * at(&w, i, p)).sum()).collect();
                    for i in 0..rows {
                        let projected: f64 = (0..cols).map(|t| at(&q, i, t) * coefficients[t]).sum();
                        let off = (at(&w, i, p) - projected).abs();
                        assert!(off < 1e-14 * norm, "{spread}: column {p}, row {i}: {off:e} of {norm:e}");
                    }
                }
            }
        }
        Ok(())
    }
}
