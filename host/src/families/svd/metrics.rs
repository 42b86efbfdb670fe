//! How good a reconstruction is, written once for the whole suite: the relative Frobenius error
//! ([`relative_error`], [`relative`]) and the Eckart–Young bound ([`eckart_young_bound`]), the
//! smallest relative error any rank-k approximation can have.
//!
//! One zero-norm convention: a relative error is `‖a − b‖ / ‖b‖`, and where the reference `b`
//! is zero (a zero image) it is the absolute error `‖a − b‖` instead. So a zero image
//! reconstructed as zero has error 0, one reconstructed as anything else reports how far off it
//! is, and no error is ever NaN or infinite. The bound follows it: 0 for a zero image.

use ndarray::ArrayView2;

/// `‖a − b‖_F / ‖b‖_F` in f64 ([`relative`]: the absolute error when `b` is zero).
pub fn relative_error(a: ArrayView2<f32>, b: ArrayView2<f64>) -> f64 {
    let (mut diff, mut norm) = (0.0f64, 0.0f64);
    for (&x, &y) in a.iter().zip(b.iter()) {
        diff += (x as f64 - y).powi(2);
        norm += y * y;
    }
    relative(diff, norm)
}

/// A relative error from squared sums: `sqrt(diff_sq / norm_sq)`, or `sqrt(diff_sq)` when
/// `norm_sq` is 0 (the module's zero-norm convention).
pub fn relative(diff_sq: f64, norm_sq: f64) -> f64 {
    if norm_sq == 0.0 { diff_sq.sqrt() } else { (diff_sq / norm_sq).sqrt() }
}

/// `Σ v²`: the energy of singular values (`‖A‖_F²` of a whole spectrum).
pub fn energy(values: &[f64]) -> f64 {
    values.iter().map(|v| v * v).sum()
}

/// The Eckart–Young bound of rank `k`, `sqrt(Σ_{i≥k} σ_i²) / ‖A‖_F` (indices from 0), from the
/// singular values `sigma` (non-increasing) and `norm_sq = ‖A‖_F²`.
///
/// `sigma` may be the whole spectrum or only its leading values: the energy past rank `k` is that
/// of the values from `k` on plus what all of `sigma` leaves of `norm_sq`. For a whole spectrum,
/// pass its own [`energy`] as `norm_sq`: nothing is left, and the tail is summed exactly however
/// small it is (a CPU SVD). For leading values (the GPU factorisation) the rest of the tail is
/// what they leave of the image's `‖A‖_F²`.
pub fn eckart_young_bound(sigma: &[f64], k: usize, norm_sq: f64) -> f64 {
    let beyond = (norm_sq - energy(sigma)).max(0.0);
    let tail = energy(&sigma[k.min(sigma.len())..]) + beyond;
    relative(tail, norm_sq)
}
