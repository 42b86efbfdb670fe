//! The accurate pass: after the Gram iteration, the triplets again from `A` itself, so that every
//! singular value is exact to f64 rounding relative to `σ₁` (the Gram matrix alone limits a small
//! `σᵢ` to about `ε·σ₁²/σᵢ`, and the iteration's stop test to about `1e-9·σ₁`).
//!
//! The iteration runs with a stricter stop test ([`StopTest::accurate`]: residuals of 1e-12
//! relative, down to their rounding, where the `svd` job asks 1e-5), so that its subspace holds the
//! leading singular vectors to about 1e-12; then from its leading `b` Ritz vectors `V` (`r × b`,
//! the right singular vectors of `A_eff`, which is `A` for tall matrices and `Aᵀ` for wide ones;
//! `b` the iteration's subspace size for `k`, also where `G` was decomposed whole), as randomised
//! SVD ends:
//!
//! 1. `W = A_eff·V` (`m_eff × b`) and its orthonormal basis `X`;
//! 2. `Bᵀ = A_effᵀ·X` (`r × b`) and its orthonormal basis `Y`;
//! 3. `S = Yᵀ·Bᵀ` (`b × b`), so that `A_eff ≈ X·Sᵀ·Yᵀ`; the SVD `Sᵀ = U_s·Σ·V_sᵀ` on the device,
//!    as the eigenproblem of `[[0, Sᵀ], [S, 0]]` by the Ritz solver, where every matrix's
//!    `σ_k ≥ 1e-3·σ₁` ([`projected_svd_on_device`]), else on the host (faer), of `Sᵀ` without the
//!    zero rows and columns of the bases' left-out columns;
//! 4. the triplets `X·U_s`, `Σ`, `Y·V_s`, the first `k` of them.
//!
//! The singular values are those of `Xᵀ·A_eff`, `A` restricted to a subspace that holds the leading
//! left singular vectors to the iteration's accuracy times `σ_{b+1}/σᵢ` (step 2 is a half power
//! step on `A`, without squaring), computed by two QR factorisations without forming `AᵀA`.
//!
//! The QR factorisations are Cholesky QR: two passes on the device and a check of the result
//! ([`orthonormalize_on_device`], one wait), or, where that basis is not orthonormal to rounding,
//! with column scaling and the factor on the host, repeated until it is (two passes, three for
//! bases of condition past about 1e4): each pass forms `QᵀQ` on the device (a GEMM), factors it
//! on the host (`b × b`), and multiplies on the device. The columns of `W` are `A·vᵢ`, about
//! `σᵢ·uᵢ`, so their norms span the spectrum but scaled to unit norm they are nearly orthogonal:
//! what is left of their condition comes from the Gram matrix's rounding in `V`'s smallest
//! vectors (up to `√ε·σ₁/σᵢ`, 1e4 at `σᵢ = 1e-12·σ₁`). On the host, a column of norm at most [`NULL_COLUMN`]` · ‖w_max‖` (a null direction of `A`) and a column
//! within [`DEPENDENT_PIVOT`] of the span of the columns before it are left out of the basis (a zero
//! column): what they hold of `A` is below `1e-13·σ₁`. Their triplets get `σ = 0` here, with zero
//! vectors; `matrix_svd` completes those vectors to an orthonormal set.

use super::cholesky::inverse_cholesky_factor;
use super::convergence::StopTest;
use super::factors::IterationCounts;
use super::gemm::{Gemms, operand as op};
use super::plan::{GramMethod, Plan, subspace_size};
use super::ritz::RitzPairs;
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
    let (work, counts) = super::converge(device, a, plan, StopTest::accurate(plan.r))?;
    let columns = subspace_size(plan.k, plan.r).min(plan.b);
    let v = work.ritz_vectors(columns)?;
    drop(work);
    refine(device, plan, a, (&v, columns), counts, transposed)
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

/// The accurate pass from the leading `b` Ritz vectors `v` (`r × b` per matrix): the module's
/// steps 1–4.
fn refine(
    device: &Device,
    plan: &Plan,
    a: BufferView<'_, f64>,
    (v, b): (&Buffer<f64>, usize),
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
    // SAFETY: every buffer lives until the projected SVD below has waited for the queue; the
    // GEMMs check each operand's span against its buffer.
    unsafe {
        let a_v = (op(a.view(..)?, a_eff(plan)), op(v.view(..)?, basis_layout));
        gemms.product(a_v, (w.view_mut(..)?, tall_layout), None, (m_eff, b, r), false)?;
    }
    let x = orthonormalize(device, &gemms, &w, (m_eff, b))?;
    // SAFETY: as above.
    unsafe {
        let at_x = (op(a.view(..)?, a_eff(plan).transposed()), op(x.view(..)?, tall_layout));
        gemms.product(at_x, (bt.view_mut(..)?, basis_layout), None, (r, b, m_eff), false)?;
    }
    let y = orthonormalize(device, &gemms, &bt, (r, b))?;
    let projected = match projected_svd_on_device(device, plan, &gemms, (&y, &bt), b)? {
        Some(projected) => projected,
        None => projected_svd_on_host(device, plan, &gemms, (&y, &bt), b)?,
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
    let (x_side, y_side) = if plan.tall() != transposed {
        ((&mut u, u_layout), (&mut vt, v_layout))
    } else {
        ((&mut vt, v_layout), (&mut u, u_layout))
    };
    let ProjectedVectors { values: singular_values, vectors, left, right, scale } = projected;
    let scale = match &scale {
        Some(values) => Some((values.view(..)?, 0)),
        None => None,
    };
    // SAFETY: as above; `u` and `vt` go to the caller, temporaries of the queue these run on.
    unsafe {
        let x_us = (op(x.view(..)?, tall_layout), op(vectors.view(left.0..)?, left.1));
        gemms.product(x_us, (x_side.0.view_mut(..)?, x_side.1), scale, (m_eff, k, b), false)?;
        let y_vs = (op(y.view(..)?, basis_layout), op(vectors.view(right.0..)?, right.1));
        gemms.product(y_vs, (y_side.0.view_mut(..)?, y_side.1), scale, (r, k, b), false)?;
    }
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

/// The leading `k` singular triplets of every matrix's projected `Sᵀ` (`b × b`), as the last
/// products read them: the values, and `U_s` and `V_s` (`b × k` per matrix) in `vectors` at the
/// offsets and through the layouts of `left` and `right`, each column times `scale` (one value per
/// column, the same for every matrix) where there is one.
struct ProjectedVectors {
    values: Vec<Vec<f64>>,
    vectors: Buffer<f64>,
    left: (usize, Layout),
    right: (usize, Layout),
    scale: Option<Buffer<f64>>,
}

/// The projected SVD on the device takes a batch whose every matrix has `σ_k ≥` this `·σ₁`
/// ([`projected_svd_on_device`]).
const DEVICE_PROJECTED_SVD_MIN: f64 = 1e-3;

/// The projected SVD on the device, from the symmetric eigenproblem of `M = [[0, Sᵀ], [S, 0]]`
/// (`2b × 2b`, the Jordan–Wielandt matrix, by the Ritz solver the plans choose for its size): its
/// eigenvalues are `±σᵢ` and the unit eigenvector of `+σᵢ` is `[u_i; v_i]/√2`. An eigensolver's
/// rounding (`ε·‖S‖` backward) mixes a pair with the others by `ε·‖S‖` over their distance, as an
/// SVD's does, and with its mirror `−σᵢ` by `ε·‖S‖/2σᵢ`, which moves the halves' norms off `1/√2`
/// and their orthogonality by that much; so this path takes a batch only where every matrix's
/// `σ_k ≥` [`DEVICE_PROJECTED_SVD_MIN`]`·σ₁` (the halves then orthonormal to about 1e-13, and
/// `U_s`, `V_s` read as `√2` times them), and returns `None` for the host's SVD otherwise. The
/// bases' left-out columns (zero rows and columns of `S`) give eigenvalues 0, which sort below
/// every pair it takes. One wait, for the eigenvalues.
fn projected_svd_on_device(
    device: &Device,
    plan: &Plan,
    gemms: &Gemms<'_>,
    (y, bt): (&Buffer<f64>, &Buffer<f64>),
    b: usize,
) -> Result<Option<ProjectedVectors>> {
    let (images, k, r) = (plan.images, plan.k, plan.r);
    let jordan =
        Plan::with_subspace(device, (2 * b, 2 * b), images, (k, 2 * b), GramMethod::WholeEigendecomposition)?;
    let mut solver = jordan.ritz_solver(device)?;
    let mut pairs = RitzPairs::new(device, 2 * b, images)?;
    {
        let (mut m, layout) = solver.input()?;
        device.zero_on(device.queue(), m.view_mut(..)?)?;
        // SAFETY: `y`, `bt` and the solver's input live until the download of the eigenvalues
        // below waits for the queue; the GEMMs check the spans: S into the lower left block,
        // Sᵀ (S through the transposed layout) into the upper right one.
        unsafe {
            let lower_left = m.view_mut(b * layout.row as usize..)?;
            queue_projected(gemms, (y, bt), (b, r), (lower_left, layout))?;
            let upper_right = m.view_mut(b * layout.col as usize..)?;
            queue_projected(gemms, (y, bt), (b, r), (upper_right, layout.transposed()))?;
        }
    }
    // SAFETY: `pairs` lives until the download below waits for the queue.
    unsafe { solver.solve(device, &mut pairs)? };
    let theta = device.download(&pairs.theta)?;
    let resolved = theta
        .chunks(2 * b)
        .all(|t| t[0].is_finite() && t[0] > 0.0 && t[k - 1] >= DEVICE_PROJECTED_SVD_MIN * t[0]);
    if !resolved {
        return Ok(None);
    }
    let values = theta.chunks(2 * b).map(|t| t[..k].to_vec()).collect();
    let halves = Layout::row_major((2 * b) as u32, (4 * b * b) as u32);
    Ok(Some(ProjectedVectors {
        values,
        vectors: pairs.vectors,
        left: (0, halves),
        right: (b * 2 * b, halves),
        scale: Some(device.upload(&vec![std::f64::consts::SQRT_2; k])?),
    }))
}

/// Queues the projected matrix `S = Yᵀ·Bᵀ` (`b × b` per matrix, from the bases' `r × b` row-major
/// `Y` and `Bᵀ`) into `out` through its layout.
///
/// # Safety
/// The buffers must live until the queue reaches the product (as for [`Gemms::product`]).
unsafe fn queue_projected(
    gemms: &Gemms<'_>,
    (y, bt): (&Buffer<f64>, &Buffer<f64>),
    (b, r): (usize, usize),
    out: (BufferViewMut<'_, f64>, Layout),
) -> Result<()> {
    let basis_layout = Layout::row_major(b as u32, (r * b) as u32);
    let yt_bt = (op(y.view(..)?, basis_layout.transposed()), op(bt.view(..)?, basis_layout));
    // SAFETY: forwarded from the caller; the GEMM checks every span.
    unsafe { gemms.product(yt_bt, out, None, (b, b, r), false) }
}

/// The projected SVD on the host: `S = Yᵀ·Bᵀ` downloaded, and per matrix faer's SVD of `Sᵀ`
/// ([`projected_svd`]).
fn projected_svd_on_host(
    device: &Device,
    plan: &Plan,
    gemms: &Gemms<'_>,
    (y, bt): (&Buffer<f64>, &Buffer<f64>),
    b: usize,
) -> Result<ProjectedVectors> {
    let (images, k, r) = (plan.images, plan.k, plan.r);
    let mut s = device.alloc::<f64>(images * b * b)?;
    let square = Layout::row_major(b as u32, (b * b) as u32);
    // SAFETY: the buffers live until the download of `s` waits for the queue.
    unsafe { queue_projected(gemms, (y, bt), (b, r), (s.view_mut(..)?, square))? };
    let small = device.download(&s)?;
    // Per matrix its first k left vectors (for X) then right vectors (for Y), b × k each.
    let mut vectors = Vec::with_capacity(2 * images * b * k);
    let mut right = Vec::with_capacity(images * b * k);
    let mut values = Vec::with_capacity(images);
    for st in small.chunks(b * b) {
        let (found, u_s, v_s) = projected_svd(Mat::from_fn(b, b, |i, j| st[j * b + i]), k)?;
        values.push(found);
        vectors.extend(u_s);
        right.extend(v_s);
    }
    vectors.extend(right);
    let layout = Layout::row_major(k as u32, (b * k) as u32);
    Ok(ProjectedVectors {
        values,
        vectors: device.upload(&vectors)?,
        left: (0, layout),
        right: (images * b * k, layout),
        scale: None,
    })
}

/// The leading `k` singular triplets of the projected matrix `Sᵀ` (`b × b`): the values
/// (non-increasing, 0 past its rank) and the left and right vectors (`b × k` each, row-major), by
/// faer's SVD of `Sᵀ` without its zero rows and columns. Those belong to the columns the bases
/// left out (zero vectors), and kept in they would let faer mix a singular vector of a tiny `σᵢ`
/// with them by up to `ε·‖S‖/σᵢ` (1e-4 at `σᵢ = 1e-12·σ₁`): weight on a zero column, which
/// leaves `X·uᵢ` short of unit norm by its square.
fn projected_svd(st: Mat<f64>, k: usize) -> Result<(Vec<f64>, Vec<f64>, Vec<f64>)> {
    let b = st.nrows();
    let rows: Vec<usize> = (0..b).filter(|&i| (0..b).any(|j| st[(i, j)] != 0.0)).collect();
    let cols: Vec<usize> = (0..b).filter(|&j| (0..b).any(|i| st[(i, j)] != 0.0)).collect();
    let mut values = vec![0.0; k];
    let (mut u_s, mut v_s) = (vec![0.0; b * k], vec![0.0; b * k]);
    if rows.is_empty() || cols.is_empty() {
        return Ok((values, u_s, v_s));
    }
    let kept = Mat::from_fn(rows.len(), cols.len(), |i, j| st[(rows[i], cols[j])]);
    let svd = kept
        .thin_svd()
        .map_err(|e| Error::Numerical(format!("the SVD of the {b} × {b} projected matrix failed: {e:?}")))?;
    // faer's singular values are non-negative and non-increasing.
    let found = k.min(rows.len()).min(cols.len());
    for p in 0..found {
        values[p] = svd.S().column_vector()[p];
        for (i, &row) in rows.iter().enumerate() {
            u_s[row * k + p] = svd.U()[(i, p)];
        }
        for (j, &col) in cols.iter().enumerate() {
            v_s[col * k + p] = svd.V()[(j, p)];
        }
    }
    Ok((values, u_s, v_s))
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
    match orthonormalize_on_device(device, gemms, input, (rows, cols))? {
        Some(basis) => Ok(basis),
        None => orthonormalize_on_host(device, gemms, input, (rows, cols)),
    }
}

/// Two passes of Cholesky QR on the device (the iteration's, [`inverse_cholesky_factor`]), then
/// the result's Gram matrix downloaded, the one wait: the basis where that is the identity to
/// rounding on every matrix, else `None` (for [`orthonormalize_on_host`]). The columns
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
) -> Result<Option<Buffer<f64>>> {
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
        // SAFETY: the buffers live until the download below waits for the queue; `next` is
        // written after the factor that reads `gram`, in the queue's order.
        unsafe {
            let operands = (op(from.view(..)?, layout.transposed()), op(from.view(..)?, layout));
            gemms.product(operands, (gram.view_mut(..)?, square), None, (cols, cols, rows), true)?;
            inverse_cholesky_factor(device, &plan, (&mut gram, &mut rinv, &mut scratch))?;
            let operands = (op(from.view(..)?, layout), op(rinv.view(..)?, square));
            gemms.product(operands, (next.view_mut(..)?, layout), None, (rows, cols, cols), false)?;
        }
        std::mem::swap(&mut current, &mut next);
    }
    // SAFETY: as above.
    unsafe {
        let operands = (op(current.view(..)?, layout.transposed()), op(current.view(..)?, layout));
        gemms.product(operands, (gram.view_mut(..)?, square), None, (cols, cols, rows), true)?;
    }
    let grams = device.download(&gram)?;
    let tolerance = orthonormal_to_rounding(rows);
    Ok(grams.chunks(cols * cols).all(|g| is_orthonormal(g, cols, tolerance)).then_some(current))
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

    /// The projected SVD through the Jordan–Wielandt eigenproblem on the device: exact values
    /// and vectors of two known `Sᵀ` (a Householder reflection times a spread spectrum times
    /// another), read as the last products read them; and `None` where `σ_k` falls below
    /// [`DEVICE_PROJECTED_SVD_MIN`]`·σ₁`, for the host's SVD.
    #[test]
    fn the_projected_svd_on_the_device_is_exact_where_it_is_taken() -> Result<()> {
        let device = Device::simulator();
        device.set_poison_allocations(true);
        let (b, k, r) = (7usize, 4usize, 9usize);
        // A Householder reflection I − 2·h·hᵀ/hᵀh, orthogonal and symmetric.
        let reflection = |seed: usize| -> Vec<f64> {
            let h: Vec<f64> = (0..b).map(|i| ((i * 5 + seed * 3) % 7) as f64 - 2.5).collect();
            let norm: f64 = h.iter().map(|v| v * v).sum();
            (0..b * b)
                .map(|e| f64::from(u8::from(e / b == e % b)) - 2.0 * h[e / b] * h[e % b] / norm)
                .collect()
        };
        let spectra = [[3.0, 2.0, 1.5, 0.25, 0.1, 0.01, 0.0], [5.0, 4.0, 4.0, 0.5, 1e-3, 1e-5, 0.0]];
        let check = |spectra: &[[f64; 7]]| -> Result<bool> {
            let images = spectra.len();
            let plan = Plan::new(&device, (r, r), images, k)?;
            // Y = [I; 0] (r × b) and Bᵀ = [S; 0], so that S = Yᵀ·Bᵀ; Sᵀ = G·diag(σ)·Hᵀ.
            let (g, h) = (reflection(1), reflection(2));
            let mut y = vec![0.0; images * r * b];
            let mut bt = vec![0.0; images * r * b];
            let mut st = Vec::new();
            for (image, sigma) in spectra.iter().enumerate() {
                for i in 0..b {
                    y[image * r * b + i * b + i] = 1.0;
                }
                let t: Vec<f64> = (0..b * b)
                    .map(|e| (0..b).map(|p| g[(e / b) * b + p] * sigma[p] * h[(e % b) * b + p]).sum())
                    .collect();
                for i in 0..b {
                    for j in 0..b {
                        bt[image * r * b + i * b + j] = t[j * b + i];
                    }
                }
                st.push(t);
            }
            let gemms = Gemms::new(&device, images, false);
            let (y, bt) = (device.upload(&y)?, device.upload(&bt)?);
            let Some(found) = projected_svd_on_device(&device, &plan, &gemms, (&y, &bt), b)? else {
                return Ok(false);
            };
            let vectors = device.download(&found.vectors)?;
            let scale = device.download(found.scale.as_ref().expect("a scale"))?;
            let read = |(offset, layout): (usize, Layout), image: usize| -> Vec<f64> {
                (0..b * k)
                    .map(|e| {
                        let at = offset + image * layout.batch as usize + (e / k) * layout.row as usize;
                        vectors[at + (e % k) * layout.col as usize] * scale[e % k]
                    })
                    .collect()
            };
            for (image, t) in st.iter().enumerate() {
                let (u_s, v_s) = (read(found.left, image), read(found.right, image));
                for p in 0..k {
                    let sigma = found.values[image][p];
                    assert!((sigma - spectra[image][p]).abs() < 1e-14, "σ {p} of {image}: {sigma}");
                    // Sᵀ·v_p = σ_p·u_p, and unit vectors orthogonal to the others.
                    for i in 0..b {
                        let stv: f64 = (0..b).map(|j| t[i * b + j] * v_s[j * k + p]).sum();
                        assert!((stv - sigma * u_s[i * k + p]).abs() < 1e-14, "Sᵀv − σu of pair {p}");
                    }
                    for q in 0..k {
                        let want = f64::from(u8::from(p == q));
                        let uu: f64 = (0..b).map(|i| u_s[i * k + p] * u_s[i * k + q]).sum();
                        let vv: f64 = (0..b).map(|i| v_s[i * k + p] * v_s[i * k + q]).sum();
                        assert!((uu - want).abs() < 1e-14 && (vv - want).abs() < 1e-14, "pairs {p}, {q}");
                    }
                }
            }
            Ok(true)
        };
        assert!(check(&spectra)?, "σ_k ≥ 1e-3·σ₁ in both: the device's SVD");
        let low = [[1.0, 0.5, 0.2, 1e-4, 1e-5, 0.0, 0.0]];
        assert!(!check(&low)?, "σ_k = 1e-4·σ₁: the host's SVD");
        Ok(())
    }

    /// Cholesky QR on the device gives an orthonormal basis of the same span where the columns'
    /// norms fall by 1e-3 and by 1e-12 (as `A·vᵢ` do for spectra that decay that far: graded, not
    /// ill-conditioned), and leaves a basis with a repeated column to the host (`None`), whose
    /// factor leaves the column out.
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
        assert!(orthonormalize_on_device(&device, &gemms, &repeated, (rows, cols))?.is_none());
        for spread in [1e-3, 1e-12] {
            let w = columns(spread, false);
            let basis = orthonormalize_on_device(&device, &gemms, &device.upload(&w)?, (rows, cols))?;
            let q = device.download(&basis.expect("an orthonormal basis from the device"))?;
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

    /// The projected matrix's zero rows and columns (the bases' left-out columns) get no weight in
    /// any singular vector, also beside a singular value of 1e-12; its values are exact.
    #[test]
    fn the_projected_svd_leaves_the_left_out_columns_out() {
        let (c, s) = (0.6f64, 0.8f64);
        // Sᵀ = G·diag(1, 1e-12)·Hᵀ on rows and columns {0, 2} of 3 (G, H rotations); row and column
        // 1 zero.
        let sigma = [1.0, 1e-12];
        let (g, h) = ([[c, -s], [s, c]], [[s, c], [-c, s]]);
        let mut st = Mat::<f64>::zeros(3, 3);
        let at = [0, 2];
        for i in 0..2 {
            for j in 0..2 {
                st[(at[i], at[j])] = (0..2).map(|p| g[i][p] * sigma[p] * h[j][p]).sum();
            }
        }
        let k = 3;
        let (values, u_s, v_s) = projected_svd(st, k).unwrap();
        assert!((values[0] - 1.0).abs() < 1e-15 && (values[1] - 1e-12).abs() < 1e-15, "{values:?}");
        assert_eq!(values[2], 0.0);
        for p in 0..k {
            assert_eq!((u_s[k + p], v_s[k + p]), (0.0, 0.0), "vector {p} on the left-out row or column");
        }
        // The first two vectors are unit vectors; the third (σ = 0) is zero, for the completion.
        for p in 0..2 {
            let norm = |m: &[f64]| (0..3).map(|i| m[i * k + p] * m[i * k + p]).sum::<f64>();
            assert!((norm(&u_s) - 1.0).abs() < 1e-15 && (norm(&v_s) - 1.0).abs() < 1e-15);
        }
        assert!((0..3).all(|i| u_s[i * k + 2] == 0.0 && v_s[i * k + 2] == 0.0));
    }
}
