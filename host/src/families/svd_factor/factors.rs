//! What a factorisation gives: the factors on the device as the reconstruction reads them, or
//! downloaded per image.

use super::plan::Plan;
use crate::launch::device::Buffer;
use ndarray::Array2;

/// The factorisation of every image of a batch, on the device, as the reconstruction reads it:
/// f32 `U` (`m × k`), `s` (`k`) and `Vᵀ` (`k × n`) per image, consecutive. Buffers of the device's
/// queue (from its memory pool where small): use them there, and drop them before the device.
pub struct DeviceFactors {
    /// Images in the batch.
    pub images: usize,
    /// Rows and columns of each image.
    pub dims: (usize, usize),
    /// Triplets per image.
    pub k: usize,
    /// `U`, `images × m × k`.
    pub u: Buffer<f32>,
    /// Singular values, `images × k`.
    pub s: Buffer<f32>,
    /// `Vᵀ`, `images × k × n`.
    pub vt: Buffer<f32>,
    /// Per image, the `k` leading singular values in f64, non-increasing.
    pub singular_values: Vec<Vec<f64>>,
    /// Per image, `‖A‖_F`.
    pub frobenius_norms: Vec<f64>,
    /// Subspace iterations (products with the Gram matrix) the batch took.
    pub iterations: usize,
    /// Of those, the ones that ended in a Rayleigh–Ritz step.
    pub rayleigh_ritz_steps: usize,
    /// Of those, the steps of Chebyshev filters (the rest are power steps).
    pub filter_steps: usize,
    /// The plan it ran by.
    pub plan: Plan,
}

/// Leading singular triplets of one image, downloaded (for tests and small jobs).
#[derive(Debug, Clone)]
pub struct Triplets {
    /// `U[:, :k]`, `m × k`.
    pub u: Array2<f32>,
    /// `σ₁ ≥ … ≥ σ_k`, f64.
    pub s: Vec<f64>,
    /// `Vᵀ[:k, :]`, `k × n`.
    pub vt: Array2<f32>,
    /// `‖A‖_F`.
    pub frobenius_norm: f64,
}

/// Subspace iterations a factorisation took, by kind.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct IterationCounts {
    /// Products with the Gram matrix.
    pub(super) iterations: usize,
    /// Of those, the ones that ended in a Rayleigh–Ritz step.
    pub(super) rayleigh_ritz_steps: usize,
    /// Of those, the steps of Chebyshev filters.
    pub(super) filter_steps: usize,
}
