//! The CPU reference: the one CPU SVD of the suite ([`cpu_svd`]: faer, f64, in the canonical form
//! of [`CanonicalSpectrum`]), which the `svd` job's CPU engine runs and [`thin_svd`] gives as
//! [`Factors`], and the f64 reconstructions the kernels are checked against.

use super::finite::check_finite;
use super::metrics::{eckart_young_bound, energy};
use super::reconstruct::RankK;
use crate::launch::error::{Error, Result, ensure};
use faer::diag::Diag;
use faer::dyn_stack::{MemBuffer, MemStack};
use faer::linalg::svd::{ComputeSvdVectors, SvdParams, svd, svd_scratch};
use faer::{Mat, MatRef, Par};
use ndarray::{Array2, ArrayView2, s};

/// A thin SVD `A = U·diag(s)·Vᵀ` in f64: `u` is `m × r`, `s` has `r` values in non-increasing
/// order, `vt` is `r × n`, with `r = min(m, n)`.
#[derive(Debug, Clone)]
pub struct Factors {
    /// Left singular vectors, `m × r`.
    pub u: Array2<f64>,
    /// Singular values, non-increasing.
    pub s: Vec<f64>,
    /// Right singular vectors, transposed: `r × n`.
    pub vt: Array2<f64>,
}

impl Factors {
    /// Rank of the factorisation, `min(m, n)`.
    pub fn rank(&self) -> usize {
        self.s.len()
    }

    /// Checks `1 ≤ k ≤ rank`.
    pub fn check_rank(&self, k: usize) -> Result<()> {
        ensure(k >= 1 && k <= self.rank(), || {
            format!("rank k = {k} is outside 1..={} (min(rows, cols) of the image)", self.rank())
        })
    }

    /// The f32 operands for rank `k`.
    pub fn rank_k(&self, k: usize) -> Result<RankK> {
        self.check_rank(k)?;
        Ok(RankK {
            u: self.u.slice(s![.., ..k]).mapv(|v| v as f32),
            s: self.s[..k].iter().map(|&v| v as f32).collect(),
            vt: self.vt.slice(s![..k, ..]).mapv(|v| v as f32),
        })
    }

    /// Eckart–Young: the smallest possible relative Frobenius error of a rank-k approximation,
    /// `sqrt(Σ_{i≥k} s_i²) / ‖A‖_F` (indices from 0), from the whole spectrum
    /// ([`eckart_young_bound`]).
    pub fn eckart_young_bound(&self, k: usize) -> f64 {
        eckart_young_bound(&self.s, k, energy(&self.s))
    }
}

/// Thin SVD of `a` (f32 input, f64 factorisation): [`cpu_svd`] with faer's global parallelism.
pub fn thin_svd(a: ArrayView2<f32>) -> Result<Factors> {
    let (m, n) = a.dim();
    ensure(m > 0 && n > 0, || format!("cannot factor an empty {m} × {n} matrix"))?;
    check_finite(a, None)?;
    let values: Vec<f64> = a.iter().map(|&v| f64::from(v)).collect();
    let CpuSvd { u, s, v, .. } = cpu_svd(&values, (m, n), faer::get_global_parallelism())?;
    Ok(Factors {
        u: Array2::from_shape_fn((m, s.len()), |(i, p)| u[(i, p)]),
        vt: Array2::from_shape_fn((s.len(), n), |(p, j)| v[(j, p)]),
        s,
    })
}

/// faer's SVD parameters without its QR step for tall (or wide) matrices: faer 0.24's QR
/// (`qr_in_place_unblocked`) leaves out a column whose part orthogonal to the columns before it
/// is below `16·rows·ε` of its norm, which loses every singular value below about `16·rows·ε·σ₁`
/// (on a 100 000 × 64 matrix with σ from 1 to 1e-12: values below 9e-12 came out 0, others
/// 5e-12 off); the bidiagonalisation of the whole matrix keeps them to 2e-15·σ₁ at about 1.8× the
/// time.
fn direct_bidiagonalization() -> SvdParams {
    SvdParams { qr_ratio_threshold: f64::INFINITY, ..faer::Auto::<f64>::auto() }
}

/// A thin SVD `A = U·diag(s)·Vᵀ` from [`cpu_svd`], as faer matrices, in canonical form.
#[derive(Debug, Clone)]
pub struct CpuSvd {
    /// Left singular vectors, `rows × r` (`r = min(rows, cols)`).
    pub u: Mat<f64>,
    /// Singular values, non-negative and non-increasing.
    pub s: Vec<f64>,
    /// Right singular vectors, `cols × r`.
    pub v: Mat<f64>,
    /// `‖A‖_F²`, summed in row-major order.
    pub norm_sq: f64,
}

/// The suite's CPU SVD: faer's thin SVD in f64 of the row-major `rows × cols` matrix `a` (finite:
/// the caller checks its pixels, [`check_finite`]) with faer's parallelism `par` (`Par::Seq`: on
/// the calling thread only), in the canonical form of [`CanonicalSpectrum`] (the sign of a
/// triplet goes with `u`). Errors ([`Error::Numerical`]) when faer does not converge or its
/// spectrum is not that of `a`.
///
/// faer bidiagonalises `a` itself, whatever its shape: its QR step first loses small singular
/// values of tall matrices (`direct_bidiagonalization`).
pub fn cpu_svd(a: &[f64], (rows, cols): (usize, usize), par: Par) -> Result<CpuSvd> {
    ensure(a.len() == rows * cols, || format!("{} values for a {rows} × {cols} matrix", a.len()))?;
    // Read column-major, the row-major values are Aᵀ (cols × rows), whose SVD Aᵀ = V·diag(s)·Uᵀ
    // gives A's factors with the roles of U and V swapped.
    let at = MatRef::from_column_major_slice(a, cols, rows);
    let r = rows.min(cols);
    let mut s = Diag::<f64>::zeros(r);
    let mut v = Mat::<f64>::zeros(cols, r);
    let mut u = Mat::<f64>::zeros(rows, r);
    let thin = ComputeSvdVectors::Thin;
    let params = direct_bidiagonalization();
    let scratch = svd_scratch::<f64>(cols, rows, thin, thin, par, params.into());
    svd(
        at,
        s.as_mut(),
        Some(v.as_mut()),
        Some(u.as_mut()),
        par,
        MemStack::new(&mut MemBuffer::new(scratch)),
        params.into(),
    )
    .map_err(|e| Error::Numerical(format!("the CPU SVD did not converge: {e:?}")))?;
    let raw: Vec<f64> = s.column_vector().iter().copied().collect();
    let norm_sq: f64 = a.iter().map(|v| v * v).sum();
    let canonical = CanonicalSpectrum::of(&raw, norm_sq)?;
    if !canonical.is_identity() {
        let source = &canonical.source;
        v = Mat::from_fn(cols, r, |i, p| v[(i, source[p].index)]);
        u = Mat::from_fn(rows, r, |i, p| source[p].sign * u[(i, source[p].index)]);
    }
    Ok(CpuSvd { u, s: canonical.values(), v, norm_sq })
}

/// Where the `p`-th canonical singular triplet comes from in a solver's output.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TripletSource {
    /// The solver's index of the triplet.
    pub index: usize,
    /// `±1`: the left vector is multiplied by it, and the singular value by it too (so the value
    /// is `|σ|` and the product `σ·u·vᵀ` is unchanged).
    pub sign: f64,
}

/// A full spectrum (all `min(m, n)` singular values of a CPU SVD) in canonical form: non-negative
/// and non-increasing.
///
/// faer returns the singular values of a null space (an exactly rank-deficient image: rank 1, a
/// zero image) as tiny values that may be negative or slightly out of order. Negating a value with
/// its left vector and permuting the triplets are the same decomposition, so the canonical form
/// changes no product `U·diag(σ)·Vᵀ` and needs no tolerance. What it does not accept is a spectrum
/// that lost or invented energy: `Σσ²` must match `‖A‖_F²` to 1e-10 (faer 0.22 returned
/// `[25.1, 1e-307, 0, …]` for four equal values), and every value must be finite, so a wrong SVD
/// is an error rather than wrong errors and a bound that agrees with them.
#[derive(Debug, Clone)]
pub struct CanonicalSpectrum {
    /// The `p`-th triplet of the canonical form is the solver's `source[p]`.
    pub source: Vec<TripletSource>,
    raw: Vec<f64>,
}

impl CanonicalSpectrum {
    /// The canonical order of the solver's values `raw`, checked against `‖A‖_F² = norm_sq`.
    pub fn of(raw: &[f64], norm_sq: f64) -> Result<Self> {
        if let Some(bad) = raw.iter().find(|v| !v.is_finite()) {
            return Err(Error::Numerical(format!("the CPU SVD returned a singular value of {bad}")));
        }
        let sum: f64 = raw.iter().map(|v| v * v).sum();
        if (sum - norm_sq).abs() > 1e-10 * norm_sq {
            return Err(Error::Numerical(format!(
                "the CPU SVD lost part of the spectrum: Σσ² = {sum:e}, but ‖A‖_F² = {norm_sq:e}"
            )));
        }
        let mut order: Vec<usize> = (0..raw.len()).collect();
        // Stable: equal values keep the solver's order.
        order.sort_by(|&i, &j| raw[j].abs().total_cmp(&raw[i].abs()));
        let source = order
            .into_iter()
            .map(|index| TripletSource { index, sign: if raw[index] < 0.0 { -1.0 } else { 1.0 } })
            .collect();
        Ok(CanonicalSpectrum { source, raw: raw.to_vec() })
    }

    /// Whether the solver's output is already canonical (nothing to permute or negate).
    pub fn is_identity(&self) -> bool {
        self.source.iter().enumerate().all(|(p, t)| t.index == p && t.sign > 0.0)
    }

    /// The singular values, non-negative and non-increasing.
    pub fn values(&self) -> Vec<f64> {
        self.source.iter().map(|t| t.sign * self.raw[t.index]).collect()
    }
}

/// CPU reference: `(U[:, :k]·diag(s[:k]))·Vᵀ[:k, :]` in f64.
pub fn reconstruct_reference(f: &Factors, k: usize) -> Result<Array2<f64>> {
    f.check_rank(k)?;
    let mut us = f.u.slice(s![.., ..k]).to_owned();
    for (mut col, &sv) in us.columns_mut().into_iter().zip(&f.s[..k]) {
        col *= sv;
    }
    Ok(us.dot(&f.vt.slice(s![..k, ..])))
}

/// CPU reference of the f32 operands (f64 accumulation), for checking the kernels on inputs that
/// did not come from an SVD.
pub fn reconstruct_reference_f32(op: &RankK) -> Array2<f64> {
    let mut us = op.u.mapv(|v| v as f64);
    for (mut col, &sv) in us.columns_mut().into_iter().zip(&op.s) {
        col *= sv as f64;
    }
    us.dot(&op.vt.mapv(|v| v as f64))
}
