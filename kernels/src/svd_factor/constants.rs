//! The numeric thresholds the kernels share with each other and with the host driver.

/// Ritz values at or below this fraction of the largest are numerically zero (singular values
/// ≤ 1e-6·σ₁): their vectors are kept as they are instead of being multiplied by the Gram matrix.
pub const NULL_THRESHOLD: f64 = 1e-12;

/// [`cholesky_inverse`](super::ritz::cholesky_inverse) floors a pivot that fell below this
/// fraction of its diagonal element of the Gram matrix (a numerically dependent column) there.
pub const PIVOT_FLOOR: f64 = 1e-12;

/// Cholesky QR's small step takes a Gram matrix `W = XᵀX` (`b × b`) as near the identity when
/// `b·max|W − I| ≤` this (the kernels take the bound as an argument; the plan passes this): `R⁻¹` is then `I − U` (`U` the upper triangle of `W − I`, halved on the
/// diagonal) to within `(b·max|W − I|)² ≤ 1e-14`, without a factorisation. A second pass of
/// Cholesky QR meets it whenever the first left `X` orthonormal to about `1e-7/b`.
pub const NEAR_IDENTITY: f64 = 1e-7;
