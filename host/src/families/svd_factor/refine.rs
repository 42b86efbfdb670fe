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
//! 3. `S = Yᵀ·Bᵀ` (`b × b`), so that `A_eff ≈ X·Sᵀ·Yᵀ`; the SVD `Sᵀ = U_s·Σ·V_sᵀ` on the host
//!    (faer), of `Sᵀ` without the zero rows and columns of the bases' left-out columns;
//! 4. the triplets `X·U_s`, `Σ`, `Y·V_s`, the first `k` of them.
//!
//! The singular values are those of `Xᵀ·A_eff`, `A` restricted to a subspace that holds the leading
//! left singular vectors to the iteration's accuracy times `σ_{b+1}/σᵢ` (step 2 is a half power
//! step on `A`, without squaring), computed by two QR factorisations without forming `AᵀA`.
//!
//! The QR factorisations are Cholesky QR with column scaling, repeated until the basis is
//! orthonormal to rounding (two passes, three for bases of condition past about 1e4): each pass
//! forms `QᵀQ` on the device (a GEMM), factors it on the host (`b × b`), and multiplies on the
//! device. The columns of `W` are `A·vᵢ`, about `σᵢ·uᵢ`, so their norms span the spectrum but
//! scaled to unit norm they are nearly orthogonal: what is left of their condition comes from the
//! Gram matrix's rounding in `V`'s smallest vectors (up to `√ε·σ₁/σᵢ`, 1e4 at `σᵢ = 1e-12·σ₁`).
//! A column of norm at most [`NULL_COLUMN`]` · ‖w_max‖` (a null direction of `A`) and a column
//! within [`DEPENDENT_PIVOT`] of the span of the columns before it are left out of the basis (a zero
//! column): what they hold of `A` is below `1e-13·σ₁`. Their triplets get `σ = 0` here, with zero
//! vectors; `matrix_svd` completes those vectors to an orthonormal set.

use super::convergence::StopTest;
use super::factors::IterationCounts;
use super::gemm::{Gemms, operand as op};
use super::plan::{Plan, subspace_size};
use super::workspace::a_eff;
use crate::launch::device::{Buffer, Device};
use crate::launch::error::{Error, Result};
use faer::linalg::triangular_solve::solve_lower_triangular_in_place;
use faer::{Mat, Par, Side};
use kernels::svd_factor::Layout;

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
    /// found zero (a null direction of `A`, below 1e-14 of the largest column) may be zero.
    pub u: Buffer<f64>,
    /// `Vᵀ`, `images × k × n`, row-major per matrix; zero rows as in `u`.
    pub vt: Buffer<f64>,
    /// Per matrix, the `k` leading singular values, non-increasing.
    pub singular_values: Vec<Vec<f64>>,
    /// Products with the Gram matrix that the iteration took before the pass.
    pub iterations: usize,
    /// The plan of the iteration.
    pub plan: Plan,
}

/// The leading `k` singular triplets of each of the `images` row-major `m × n` f64 matrices in `a`
/// (device memory, `m·n` apart), accurate to f64 rounding: [`factor`](super::factor)'s iteration,
/// then the accurate pass on `A` (this module's doc). Every `σᵢ` is within about `1e-13·σ₁` of the
/// exact one where `σ_{b+1}` (`b`, the plan's subspace) is small or the iteration resolved the
/// subspace; the vectors are orthonormal to rounding.
pub fn factor_accurate(
    device: &Device,
    a: &Buffer<f64>,
    dims: (usize, usize),
    images: usize,
    k: usize,
) -> Result<AccurateFactors> {
    factor_accurate_with(device, a, &Plan::new(device, dims, images, k)?)
}

/// [`factor_accurate`] by the given plan.
pub fn factor_accurate_with(device: &Device, a: &Buffer<f64>, plan: &Plan) -> Result<AccurateFactors> {
    let (work, counts) = super::converge(device, a, plan, StopTest::accurate(plan.r))?;
    let columns = subspace_size(plan.k, plan.r).min(plan.b);
    let v = work.ritz_vectors(columns)?;
    drop(work);
    refine(device, plan, a, (&v, columns), counts)
}

/// The accurate pass from the leading `b` Ritz vectors `v` (`r × b` per matrix): the module's
/// steps 1–4.
fn refine(
    device: &Device,
    plan: &Plan,
    a: &Buffer<f64>,
    (v, b): (&Buffer<f64>, usize),
    counts: IterationCounts,
) -> Result<AccurateFactors> {
    let ((m, n), images, k, r) = (plan.dims, plan.images, plan.k, plan.r);
    let m_eff = m.max(n);
    let gemms = Gemms::new(device, images, plan.tensor_cores);
    let tall_layout = Layout::row_major(b as u32, (m_eff * b) as u32);
    let basis_layout = Layout::row_major(b as u32, (r * b) as u32);
    let square = Layout::row_major(b as u32, (b * b) as u32);

    let mut w = device.alloc::<f64>(images * m_eff * b)?;
    let mut bt = device.alloc::<f64>(images * r * b)?;
    let mut s = device.alloc::<f64>(images * b * b)?;
    // SAFETY: every buffer lives until the download of `s` below has waited for the queue; the
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
    // SAFETY: as above.
    unsafe {
        let yt_bt = (op(y.view(..)?, basis_layout.transposed()), op(bt.view(..)?, basis_layout));
        gemms.product(yt_bt, (s.view_mut(..)?, square), None, (b, b, r), false)?;
    }
    let small = device.download(&s)?;

    // Per matrix the SVD of Sᵀ (b × b): its first k left vectors (for X) and right vectors (for Y).
    let mut left = Vec::with_capacity(images * b * k);
    let mut right = Vec::with_capacity(images * b * k);
    let mut singular_values = Vec::with_capacity(images);
    for st in small.chunks(b * b) {
        let (values, u_s, v_s) = projected_svd(Mat::from_fn(b, b, |i, j| st[j * b + i]), k)?;
        singular_values.push(values);
        left.extend(u_s);
        right.extend(v_s);
    }
    let left = device.upload(&left)?;
    let right = device.upload(&right)?;

    let mut u = device.alloc::<f64>(images * m * k)?;
    let mut vt = device.alloc::<f64>(images * k * n)?;
    let vectors_layout = Layout::row_major(k as u32, (b * k) as u32);
    let u_layout = Layout::row_major(k as u32, (m * k) as u32);
    // Vᵀ (k × n) written as the transpose of an n × k result.
    let v_layout = Layout::row_major(n as u32, (k * n) as u32).transposed();
    let (x_side, y_side) = if plan.tall() {
        ((&mut u, u_layout), (&mut vt, v_layout))
    } else {
        ((&mut vt, v_layout), (&mut u, u_layout))
    };
    // SAFETY: as above; `u` and `vt` go to the caller, and freeing them waits for the queue.
    unsafe {
        let x_us = (op(x.view(..)?, tall_layout), op(left.view(..)?, vectors_layout));
        gemms.product(x_us, (x_side.0.view_mut(..)?, x_side.1), None, (m_eff, k, b), false)?;
        let y_vs = (op(y.view(..)?, basis_layout), op(right.view(..)?, vectors_layout));
        gemms.product(y_vs, (y_side.0.view_mut(..)?, y_side.1), None, (r, k, b), false)?;
    }
    Ok(AccurateFactors {
        images,
        dims: plan.dims,
        k,
        u,
        vt,
        singular_values,
        iterations: counts.iterations,
        plan: plan.clone(),
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
/// of them, consecutive), by Cholesky QR with column scaling until `QᵀQ` is the identity to
/// rounding; the columns left out ([`NULL_COLUMN`], [`DEPENDENT_PIVOT`]) are zero.
fn orthonormalize(
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
    // Orthonormal to rounding: the Gram matrix of an orthonormal basis, summed over `rows`.
    let tolerance = (8.0 * f64::EPSILON * (rows as f64).sqrt()).max(1e-13);
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
