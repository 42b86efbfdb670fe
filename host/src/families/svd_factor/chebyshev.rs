//! The Chebyshev filter between Rayleigh–Ritz steps (the Chebyshev-filtered subspace iteration of
//! Zhou and Saad, as in ChASE), for spectra too flat for power steps: white noise's `λ_k/λ_{b+1}`
//! is about 1.2, so a power step shrinks a residual by 1.2 where a Chebyshev step (one product
//! with `G` as well) shrinks it by about 2.5.
//!
//! The filter is the Chebyshev polynomial of degree `d` mapped to `[0, θ_b]`, the part of the
//! spectrum the subspace should not keep (`θ_b` the smallest Ritz value; `G` has no eigenvalue
//! below 0). On that interval it stays within `±1/T_d(x₁)` of zero, and it grows like `T_d(x)` with
//! `x = 2θ/θ_b − 1` above it: each wanted pair's residual shrinks by `1/T_d(x_i)`. It is scaled
//! (the σ recurrence) so that its value at `θ₁` is 1, which keeps every intermediate basis finite.
//! Applied to the Ritz vectors `V` (with `W = G·V` already known, its first degree costs no
//! product), then each column divided by the filter's value at its Ritz value, so that the
//! columns keep about unit norm before Cholesky QR.
//!
//! The degree is as high as the residuals need ([`ChebyshevFilter::plan`]), but no higher than
//! keeps the columns apart for Cholesky QR: a column's error along a larger eigenvector grows
//! with the filter's value there relative to its own, by up to [`CONTAMINATION_LIMIT`].
//!
//! Leading pairs that have converged (up to [`kf::DEFLATED_PAIRS`] per image) are locked: the
//! filter runs with `G − Σ θ_l·v_l·v_lᵀ`, which has no eigenvalue above the first unlocked pair,
//! and puts their vectors back unfiltered. Without it, an outlying `θ₁` (a noise image's mean)
//! would cap the degree at 2–7, since every column's rounding-sized part along `v₁` grows by the
//! filter's value at `θ₁`.

use super::convergence::{StopTest, converged_lead, pairs_to_converge};
use kernels::svd_factor as kf;

/// Most products with `G` one filter takes before the next Rayleigh–Ritz step.
pub const MAX_DEGREE: usize = 16;

/// Most rounds of one filter between two Rayleigh–Ritz steps ([`ChebyshevFilter::rounds`]).
pub const MAX_ROUNDS: usize = 4;

/// How many times the degree the residuals predict a filter takes (within the contamination
/// limit): the prediction reads `x_i` from the last Ritz values, and `θ_b` still underestimates
/// the spectrum it stands for in the first steps, so a filter of the predicted degree falls short
/// (on 1024² noise, k = 50, the predicted 6 left the worst pair 49 times its target), while one
/// more Rayleigh–Ritz step costs as much as 15–30 products. Twice the prediction took 4 steps and
/// 21 products there, where the prediction took 5 and 17.
pub const OVERSHOOT: usize = 2;

/// Most the filter may amplify a basis column's estimated error along a larger eigenvector
/// against the column itself: the column's condition number, at most about 1e7, which the first
/// Cholesky QR pass survives (its Gram matrix's is the square, 1e14) and the second makes
/// orthonormal, losing about 7 of f64's 16 digits in that column. Lower limits took more products
/// on white noise (`docs/benchmarks/svd-job.md`, "The Ritz solver and the Chebyshev filter's
/// limits").
pub const CONTAMINATION_LIMIT: f64 = 1e7;

/// One filter for a batch: the coefficients of each step and image, and the weights that scale
/// the filtered columns, both read by the kernels.
#[derive(Debug, Clone, PartialEq)]
pub struct ChebyshevFilter {
    /// Products with `G` (steps of the recurrence): at least 2, at most [`MAX_DEGREE`].
    pub degree: usize,
    /// Per image, the locked pairs' Ritz values ([`kf::DEFLATED_PAIRS`] each, 0 where not locked),
    /// as `deflation_overlaps` and `chebyshev_step` read them.
    pub locked_theta: Vec<f64>,
    /// Whether any image locked a pair (else the deflation's overlaps need not be computed).
    pub deflates: bool,
    /// `[a, p, q]` per step and image (`degree × images × 3`), as `chebyshev_step` reads them:
    /// step `j` makes `X_j = a·G·X_{j−1} + p·X_{j−1} + q·X_{j−2}`; its first step `X_1 = p·V + q·W`.
    /// An image whose degree is lower holds its basis (`[0, 1, 0]`) for the remaining steps; a
    /// converged image holds `V` throughout.
    pub coefficients: Vec<f64>,
    /// The next basis's column weights `[e f g]` per image (`3b` each, as `combine_columns` reads
    /// `e` and `f`): each column of the half that holds the last step's basis (the right half,
    /// `W`'s, for odd degrees) divided by the filter's value at its Ritz value; 1 for a locked
    /// column, which the last step puts back unfiltered.
    pub weights: Vec<f64>,
    /// Times the filter runs, each followed by Cholesky QR, before the next Rayleigh–Ritz step:
    /// more than 1 where the residuals need a higher degree than [`CONTAMINATION_LIMIT`] allows
    /// in one (the orthonormalisation between rounds takes the columns' errors along larger
    /// eigenvectors out again), at most [`MAX_ROUNDS`].
    pub rounds: usize,
}

/// The filter of one image: its interval's centre and half-width (both `θ_b/2`) and the σ
/// recurrence's values, one per step, which scale it to 1 at the largest Ritz value it filters.
struct Interval {
    centre: f64,
    half_width: f64,
    sigmas: Vec<f64>,
}

impl Interval {
    /// The filter of `[0, θ_b]` scaled to 1 at `θ_{locked+1}` (the largest Ritz value not
    /// locked), up to `degree` steps; `None` where `θ_b` is numerically zero (no interval to damp).
    fn new(theta: &[f64], locked: usize, degree: usize) -> Option<Self> {
        let (top, floor) = (theta[locked], theta[theta.len() - 1]);
        if !(top > 0.0 && floor > kf::NULL_THRESHOLD * theta[0]) {
            return None;
        }
        let (centre, half_width) = (floor / 2.0, floor / 2.0);
        let sigma1 = half_width / (top - centre);
        let mut sigmas = vec![sigma1];
        for _ in 1..degree {
            let last = *sigmas.last().expect("one value");
            sigmas.push(1.0 / (2.0 / sigma1 - last));
        }
        Some(Self { centre, half_width, sigmas })
    }

    /// `[a, p, q]` of step `j` (from 1).
    fn step(&self, j: usize) -> [f64; 3] {
        let (c, e, s) = (self.centre, self.half_width, &self.sigmas);
        if j == 1 {
            [0.0, -c * s[0] / e, s[0] / e]
        } else {
            let a = 2.0 * s[j - 1] / e;
            [a, -c * a, -s[j - 2] * s[j - 1]]
        }
    }

    /// The filter of degree `d` at `θ` (the same recurrence on scalars).
    fn value(&self, theta: f64, d: usize) -> f64 {
        let (mut older, mut newer) = (1.0, 1.0);
        for j in 1..=d {
            let [a, p, q] = self.step(j);
            let next = if j == 1 { p + q * theta } else { a * theta * newer + p * newer + q * older };
            (older, newer) = (newer, next);
        }
        newer
    }
}

/// `T_d(x)` for `x ≥ 1`.
fn chebyshev_t(d: usize, x: f64) -> f64 {
    (d as f64 * x.max(1.0).acosh()).cosh()
}

impl ChebyshevFilter {
    /// The filter for the next steps, from the last Rayleigh–Ritz step's `stats` (as
    /// `ritz_residuals` writes them: `‖W_i‖²` then the residuals `‖W_i − θ_i·V_i‖²`, `2b` per
    /// image), `theta` (`b` per image, non-increasing) and `converged` flags; at most `budget`
    /// products. Each image that has not converged gets [`OVERSHOOT`] times the degree after
    /// which its `k` leading pairs should meet `test`, capped by [`CONTAMINATION_LIMIT`] over
    /// the columns it does not lock (its leading pairs that meet `test` already); the batch takes
    /// the largest, in as many [`rounds`](Self::rounds) as the most capped image needs for its
    /// whole degree (within [`MAX_ROUNDS`] and `budget`). `None` (power steps instead) where the
    /// degree is below 2, or an image still iterating has a numerically zero `θ_b`.
    pub fn plan(
        stats: &[f64],
        theta: &[f64],
        converged: &[u32],
        (b, k): (usize, usize),
        test: StopTest,
        budget: usize,
    ) -> Option<Self> {
        let images = converged.len();
        let max_degree = MAX_DEGREE.min(budget);
        if max_degree < 2 {
            return None;
        }
        let mut filters = Vec::with_capacity(images);
        let mut degrees = Vec::with_capacity(images);
        let mut locked_theta = vec![0.0; images * kf::DEFLATED_PAIRS];
        // Rounds the most demanding image needs at the degree its columns allow.
        let mut rounds = 1usize;
        for img in 0..images {
            let (stats, theta) = (&stats[img * 2 * b..(img + 1) * 2 * b], &theta[img * b..(img + 1) * b]);
            if converged[img] == 1 {
                filters.push(None);
                degrees.push(0);
                continue;
            }
            let locked =
                converged_lead(stats, theta, k.min(kf::DEFLATED_PAIRS).min(b.saturating_sub(2)), test);
            locked_theta[img * kf::DEFLATED_PAIRS..][..locked].copy_from_slice(&theta[..locked]);
            let filter = Interval::new(theta, locked, max_degree)?;
            let floor = theta[b - 1];
            let x = |th: f64| 2.0 * th / floor - 1.0;
            // Degree each unconverged leading pair needs: 1/T_d(x_i) ≤ target/residual.
            let mut need = 1usize;
            for (th, residual, target) in pairs_to_converge(stats, theta, k, test) {
                let xi = x(th);
                let d = if xi > 1.0 + 1e-12 {
                    ((residual / target).acosh() / xi.acosh()).ceil()
                } else {
                    f64::MAX
                };
                need = need.max(d.min(max_degree as f64) as usize);
            }
            // Highest degree that keeps every column's estimated error along a larger Ritz
            // vector (its residual over its distance to θ_b) amplified by at most the limit.
            let allowed = (1..=max_degree)
                .take_while(|&d| {
                    (locked..b).all(|j| {
                        let gap = theta[j] - floor;
                        let error = if gap > 0.0 { (stats[b + j].sqrt() / gap).min(1.0) } else { 1.0 };
                        error * chebyshev_t(d, x(theta[j])) <= CONTAMINATION_LIMIT
                    })
                })
                .last()
                .unwrap_or(1);
            let wanted = OVERSHOOT * need;
            rounds = rounds.max(wanted.div_ceil(allowed));
            degrees.push(wanted.min(allowed));
            filters.push(Some(filter));
        }
        let widest = degrees.iter().copied().max().unwrap_or(0).max(1);
        let rounds = rounds.min(MAX_ROUNDS).min(budget / widest).max(1);
        let degree = degrees.iter().copied().max().unwrap_or(0);
        if degree < 2 {
            return None;
        }
        let hold = [0.0, 1.0, 0.0];
        let mut coefficients = Vec::with_capacity(degree * images * 3);
        for j in 1..=degree {
            for (filter, &d) in filters.iter().zip(&degrees) {
                coefficients.extend(match filter {
                    Some(f) if j <= d => f.step(j),
                    _ => hold,
                });
            }
        }
        // The last step writes the right half (W's) for odd degrees, the left (V's) for even.
        let last_in_right = degree % 2 == 1;
        let mut weights = vec![0.0; images * 3 * b];
        for (img, (filter, &d)) in filters.iter().zip(&degrees).enumerate() {
            let theta = &theta[img * b..(img + 1) * b];
            let w = &mut weights[img * 3 * b..(img + 1) * 3 * b];
            let half = if last_in_right { b } else { 0 };
            let locked = &locked_theta[img * kf::DEFLATED_PAIRS..(img + 1) * kf::DEFLATED_PAIRS];
            for i in 0..b {
                w[half + i] = match filter {
                    Some(f) if d > 0 && locked.get(i).is_none_or(|&t| t == 0.0) => 1.0 / f.value(theta[i], d),
                    _ => 1.0,
                };
            }
        }
        let deflates = locked_theta.iter().any(|&t| t != 0.0);
        Some(Self { degree, locked_theta, deflates, coefficients, weights, rounds })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The scaled recurrence is the Chebyshev polynomial on `[0, θ_b]` over its value at `θ₁`.
    #[test]
    fn the_recurrence_is_the_scaled_chebyshev_polynomial() {
        let theta = [9.0, 5.0, 3.5, 2.0];
        let filter = Interval::new(&theta, 0, 8).unwrap();
        let x = |t: f64| 2.0 * t / 2.0 - 1.0;
        for d in 1..=8 {
            for t in [0.0, 0.3, 1.0, 1.9, 2.0, 2.7, 5.0, 9.0, 12.0] {
                let xt = x(t);
                let exact = if xt.abs() <= 1.0 {
                    (d as f64 * xt.acos()).cos()
                } else {
                    chebyshev_t(d, xt.abs()) * xt.signum().powi(d as i32)
                };
                let want = exact / chebyshev_t(d, x(9.0));
                let got = filter.value(t, d);
                assert!(
                    (got - want).abs() <= 1e-12 * want.abs().max(1e-3),
                    "d = {d}, θ = {t}: {got} vs {want}"
                );
            }
        }
    }

    /// A flat spectrum gets a filter of several degrees; a steep one, or one already converged,
    /// none; an image with a zero `θ_b` still iterating gets none.
    #[test]
    fn the_degree_follows_the_spectrum() {
        let (b, k) = (4, 2);
        let stats = |residuals: [f64; 4]| {
            let mut s = vec![1.0; 4];
            s.extend(residuals.iter().map(|r| r * r));
            s
        };
        let flat = [4.0, 3.6, 3.3, 3.0];
        let plan =
            ChebyshevFilter::plan(&stats([1e-2; 4]), &flat, &[0], (b, k), StopTest::IMAGES, 100).unwrap();
        assert!(plan.degree >= 2 && plan.degree <= MAX_DEGREE, "{plan:?}");
        assert_eq!(plan.coefficients.len(), plan.degree * 3);
        assert_eq!(plan.coefficients[..3], Interval::new(&flat, 0, MAX_DEGREE).unwrap().step(1));
        // The weights bring each Ritz column back to unit scale.
        let half = if plan.degree % 2 == 1 { b } else { 0 };
        let f = Interval::new(&flat, 0, MAX_DEGREE).unwrap();
        for (i, &theta) in flat.iter().enumerate() {
            assert!((plan.weights[half + i] * f.value(theta, plan.degree) - 1.0).abs() < 1e-12);
            assert_eq!(plan.weights[b - half + i], 0.0);
        }
        // Converged: no filter.
        assert!(
            ChebyshevFilter::plan(&stats([1e-2; 4]), &flat, &[1], (b, k), StopTest::IMAGES, 100).is_none()
        );
        // Zero θ_b while iterating: no filter.
        assert!(
            ChebyshevFilter::plan(
                &stats([1e-2; 4]),
                &[4.0, 3.0, 1.0, 0.0],
                &[0],
                (b, k),
                StopTest::IMAGES,
                100
            )
            .is_none()
        );
        // A budget below 2 products: no filter.
        assert!(ChebyshevFilter::plan(&stats([1e-2; 4]), &flat, &[0], (b, k), StopTest::IMAGES, 1).is_none());
        // A large unconverged residual at a far larger Ritz value limits the degree.
        let steep = [1e6, 4.0, 3.5, 3.0];
        let plan = ChebyshevFilter::plan(
            &stats([1e3, 1e-2, 1e-2, 1e-2]),
            &steep,
            &[0],
            (b, k),
            StopTest::IMAGES,
            100,
        );
        assert!(plan.is_none(), "{plan:?}");
        // A batch takes the largest degree; the converged image holds V with unit weights.
        let plan = ChebyshevFilter::plan(
            &[stats([1e-2; 4]), stats([1e-2; 4])].concat(),
            &[flat, flat].concat(),
            &[0, 1],
            (b, k),
            StopTest::IMAGES,
            100,
        )
        .unwrap();
        for j in 0..plan.degree {
            assert_eq!(plan.coefficients[(j * 2 + 1) * 3..(j * 2 + 2) * 3], [0.0, 1.0, 0.0]);
        }
        assert!(plan.weights[3 * b + half..3 * b + half + b].iter().all(|&w| w == 1.0));
        assert!(!plan.deflates);
    }

    /// A residual that wants a higher degree than the columns' contamination allows gets the
    /// allowed degree in several rounds, within the budget.
    #[test]
    fn a_degree_past_the_contamination_limit_runs_in_rounds() {
        let (b, k) = (4, 2);
        let flat = [4.0, 3.6, 3.3, 3.0];
        // Pair 1: residual 0.5 against its bound 4e-5: T_d(5/3) ≥ 12 500 wants d = 10, twice that
        // 20; its error along larger vectors, 0.5/(θ₁ − θ_b) = 0.5, allows T_d(5/3) ≤ 2e7: d ≤ 15.
        let mut stats = vec![1.0; b];
        stats.extend([0.5f64, 1e-2, 1e-2, 1e-2].iter().map(|r| r * r));
        let plan = ChebyshevFilter::plan(&stats, &flat, &[0], (b, k), StopTest::IMAGES, 100).unwrap();
        assert_eq!((plan.degree, plan.rounds), (15, 2), "{plan:?}");
        // Without the budget for a second round, one.
        let plan = ChebyshevFilter::plan(&stats, &flat, &[0], (b, k), StopTest::IMAGES, 20).unwrap();
        assert_eq!((plan.degree, plan.rounds), (15, 1), "{plan:?}");
        // A smaller residual fits in one round.
        let mut stats = vec![1.0; b];
        stats.extend([1e-2f64; 4].iter().map(|r| r * r));
        let plan = ChebyshevFilter::plan(&stats, &flat, &[0], (b, k), StopTest::IMAGES, 100).unwrap();
        assert_eq!(plan.rounds, 1, "{plan:?}");
    }

    /// Converged leading pairs are locked: the filter is scaled at the first unlocked pair, an
    /// outlying `θ₁` no longer caps the degree, and the locked column keeps a unit weight.
    #[test]
    fn converged_leading_pairs_are_deflated() {
        let (b, k) = (6, 3);
        let theta = [1e4, 4.0, 3.6, 3.3, 3.1, 3.0];
        // ‖r₁‖ meets the stop test (1e-5·θ₁ = 0.1); the rest do not.
        let residuals = [0.05, 0.5, 0.5, 0.5, 0.5, 0.5];
        let mut stats = vec![1.0; b];
        stats.extend(residuals.iter().map(|r| r * r));
        let plan = ChebyshevFilter::plan(&stats, &theta, &[0], (b, k), StopTest::IMAGES, 100).unwrap();
        assert!(plan.deflates);
        assert_eq!(plan.locked_theta, [1e4, 0.0, 0.0, 0.0]);
        let f = Interval::new(&theta, 1, MAX_DEGREE).unwrap();
        assert!((f.value(theta[1], plan.degree) - 1.0).abs() < 1e-12);
        assert!(plan.degree > 7, "{plan:?}");
        let half = if plan.degree % 2 == 1 { b } else { 0 };
        assert_eq!(plan.weights[half], 1.0);
        for (weight, &t) in plan.weights[half..half + b].iter().zip(&theta).skip(1) {
            assert!((weight * f.value(t, plan.degree) - 1.0).abs() < 1e-12);
        }
        // Unconverged, θ₁ is not locked and its filter value caps the degree.
        let mut unconverged = stats.clone();
        unconverged[b] = 1.0;
        let capped = ChebyshevFilter::plan(&unconverged, &theta, &[0], (b, k), StopTest::IMAGES, 100);
        assert!(capped.as_ref().is_none_or(|p| p.degree < plan.degree && !p.deflates), "{capped:?}");
    }
}
