//! The numeric thresholds the kernels share with each other and with the host driver.

/// Ritz values at or below this fraction of the largest are numerically zero (singular values
/// ≤ 1e-6·σ₁): their vectors are kept as they are instead of being multiplied by the Gram matrix.
pub const NULL_THRESHOLD: f64 = 1e-12;

/// [`cholesky_inverse`](super::ritz::cholesky_inverse) floors a pivot that fell below this
/// fraction of its diagonal element of the Gram matrix (a numerically dependent column) there.
pub const PIVOT_FLOOR: f64 = 1e-12;
