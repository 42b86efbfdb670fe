//! When the iteration stops and how far it looks ahead: the stop test on each Ritz pair's residual
//! and the predictions built on it (power steps to take, pairs a Chebyshev filter may lock).
//!
//! Every function reads one image's last Rayleigh–Ritz step as `ritz_residuals` writes it:
//! `stats` (`‖W_i‖²` then the residuals `‖W_i − θ_i·V_i‖²`, `2b` values) and `theta` (`b` values,
//! non-increasing).

use kernels::svd_factor as kf;

/// Residual tolerance of the iteration: each of the `k` leading Ritz pairs must satisfy
/// `‖G·v − θ·v‖ ≤ TOLERANCE·√(θ₁·θ)`. Since an eigenvalue lies within the residual of a Ritz
/// value, each singular value is then within `TOLERANCE·σ₁/2` of the exact one, half the accuracy
/// asked for; in practice (the error is quadratic in the residual) within about 1e-8·σ₁.
pub const TOLERANCE: f64 = 1e-5;

/// The stop test on each of the `k` leading Ritz pairs: `‖G·v − θ·v‖ ≤ max(tolerance·√(θ₁·θ),
/// floor·θ₁)`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct StopTest {
    /// The relative residual asked for.
    pub tolerance: f64,
    /// The residual's rounding, relative to `θ₁`, below which no pair is asked to go.
    pub floor: f64,
}

impl StopTest {
    /// The `svd` job's test, [`TOLERANCE`] (singular values within about 1e-9·σ₁).
    pub const IMAGES: StopTest = StopTest { tolerance: TOLERANCE, floor: 0.0 };

    /// The accurate pass's test (`refine.rs`) for a Gram matrix of `r × r`: 1e-12, down to 32·ε·√r
    /// (the rounding of `G·v`), so that the subspace the pass starts from holds the leading
    /// singular vectors to about 1e-12 on spectra that decay like `1/i`.
    pub fn accurate(r: usize) -> StopTest {
        StopTest { tolerance: 1e-12, floor: 32.0 * f64::EPSILON * (r as f64).sqrt() }
    }
}

/// A stop test with a floor (the accurate one) also ends the iteration where the residuals stop
/// shrinking (by less than a tenth from one Rayleigh–Ritz step to the next) within this factor of
/// their bounds: they are then at the rounding of the products that form them (the Ritz solver's,
/// the GEMMs'), the most the subspace gets, rather than an error after [`MAX_ITERATIONS`].
pub const STALLED_EXCESS: f64 = 100.0;

/// Each image's `stats` (`2b` values) and `theta` (`b`) of the batch's, for the images whose
/// `converged` flag is not set.
fn unconverged_images<'a>(
    stats: &'a [f64],
    theta: &'a [f64],
    converged: &'a [u32],
    b: usize,
) -> impl Iterator<Item = (&'a [f64], &'a [f64])> + 'a {
    stats
        .chunks(2 * b)
        .zip(theta.chunks(b))
        .zip(converged)
        .filter(|(_, flag)| **flag != 1)
        .map(|(pair, _)| pair)
}

/// How far the batch's unconverged images are from `test` after a Rayleigh–Ritz step (`stats`,
/// `theta` and the `converged` flags of the whole batch, `2b`, `b` and 1 per image): the largest
/// ratio of a leading pair's residual to its bound, 0 where all have converged.
pub(super) fn worst_excess(
    stats: &[f64],
    theta: &[f64],
    converged: &[u32],
    (b, k): (usize, usize),
    test: StopTest,
) -> f64 {
    let mut worst = 0.0f64;
    for (stats, theta) in unconverged_images(stats, theta, converged, b) {
        for (_, residual, target) in pairs_to_converge(stats, theta, k, test) {
            worst = worst.max(residual / target);
        }
    }
    worst
}

/// Iterations after which an image that has not converged is an error (natural images need 5–15,
/// white noise about 20 with the Chebyshev filter, 40 without).
pub const MAX_ITERATIONS: usize = 300;

/// The leading `k` Ritz pairs of one image that are not numerically zero and still miss the stop
/// test `test`: `(θ_i, ‖r_i‖, its bound)`.
pub(super) fn pairs_to_converge<'a>(
    stats: &'a [f64],
    theta: &'a [f64],
    k: usize,
    test: StopTest,
) -> impl Iterator<Item = (f64, f64, f64)> + 'a {
    (0..k).filter_map(move |i| {
        let (residual, target) = residual_and_target(stats, theta, i, test);
        (theta[i] > kf::NULL_THRESHOLD * theta[0].max(0.0) && residual > target)
            .then_some((theta[i], residual, target))
    })
}

/// How many of the first `most` Ritz pairs of one image meet the stop test, counted from the first
/// and stopping at one that does not or is numerically zero: the pairs a Chebyshev filter may lock.
pub(super) fn converged_lead(stats: &[f64], theta: &[f64], most: usize, test: StopTest) -> usize {
    (0..most)
        .take_while(|&i| {
            let (residual, target) = residual_and_target(stats, theta, i, test);
            theta[i] > kf::NULL_THRESHOLD * theta[0].max(0.0) && residual <= target
        })
        .count()
}

/// Pair `i`'s residual `‖r_i‖` and the stop test's bound on it.
fn residual_and_target(stats: &[f64], theta: &[f64], i: usize, test: StopTest) -> (f64, f64) {
    let theta0 = theta[0].max(0.0);
    let bound = (test.tolerance * (theta0 * theta[i]).sqrt()).max(test.floor * theta0);
    (stats[theta.len() + i].sqrt(), bound)
}

/// Subspace iterations (products with `G`) after which every image not yet converged should
/// meet the tolerance, predicted from its last Rayleigh–Ritz step (`stats`, `theta` and the
/// `converged` flags of the whole batch, `2b`, `b` and 1 per image): the residual of pair `i`
/// shrinks by about `θ_b/θ_i` per iteration (`θ_b` the smallest Ritz value, which approximates
/// `λ_{b+1}`). At least 1; at most 8, so a poor early estimate costs little.
pub(super) fn steps_to_convergence(
    stats: &[f64],
    theta: &[f64],
    converged: &[u32],
    (b, k): (usize, usize),
    test: StopTest,
) -> usize {
    let mut steps = 1.0f64;
    for (stats, theta) in unconverged_images(stats, theta, converged, b) {
        let floor = theta[b - 1].max(0.0);
        for (th, residual, target) in pairs_to_converge(stats, theta, k, test) {
            let rate = floor / th;
            steps = steps.max(if rate < 0.99 { (target / residual).ln() / rate.ln() } else { 8.0 });
        }
    }
    (steps.ceil() as usize).clamp(1, 8)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The worst excess reads each unconverged image's leading pairs against their bounds, the
    /// floor included, and skips converged images and pairs that meet their bounds.
    #[test]
    fn the_worst_excess_is_the_largest_residual_over_its_bound() {
        let (b, k) = (4, 2);
        let theta = [4.0, 1.0, 0.5, 0.1, 4.0, 1.0, 0.5, 0.1];
        // Per image `‖W_i‖²` (unused here) then the squared residuals.
        let mut stats = vec![1.0; 4 * b];
        stats[b..2 * b].copy_from_slice(&[(4e-11f64).powi(2), (1e-12f64).powi(2), 1.0, 1.0]);
        stats[3 * b..].copy_from_slice(&[1.0; 4]);
        let test = StopTest { tolerance: 1e-12, floor: 1e-13 };
        // Pair 0: bound max(1e-12·√(4·4), 1e-13·4) = 4e-12, residual 4e-11; pair 1 meets its bound
        // (1e-12 ≤ max(2e-12, 4e-13)); pairs past k and the converged image do not count.
        let worst = worst_excess(&stats, &theta, &[0, 1], (b, k), test);
        assert!((worst - 10.0).abs() < 1e-9, "{worst}");
        // A floor above the tolerance's bound takes its place: pair 0 meets it (4e-11 ≤ 1e-11·4).
        let floored = StopTest { tolerance: 1e-12, floor: 1e-11 };
        assert_eq!(worst_excess(&stats, &theta, &[0, 1], (b, k), floored), 0.0);
        assert_eq!(worst_excess(&stats, &theta, &[1, 1], (b, k), test), 0.0);
    }
}
