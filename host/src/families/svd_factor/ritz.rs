//! The Ritz eigensolver's interface: each Rayleigh–Ritz step writes the projected matrices
//! `T = QᵀGQ` (`b × b`, symmetric, one per image) where the solver asks ([`RitzSolver::input`]),
//! and the solver writes their eigenpairs as [`RitzPairs`]. The implementations, one file each:
//! `one_block_jacobi.rs`, `block_jacobi.rs`, `host_eigensolver.rs`. Adding a solver is one more
//! implementation, a [`RitzMethod`](super::RitzMethod) variant and its line in the plan.

use crate::launch::device::{Buffer, BufferViewMut, Device};
use crate::launch::error::Result;
use kernels::svd_factor::Layout;

/// The Ritz pairs of a batch, on the device, as every later step reads them: per image, `b`
/// values of each vector and the `b × b` eigenvectors, pairs in non-increasing order of `θ`.
pub struct RitzPairs {
    /// The Ritz values `θ` (eigenvalues of `T`), `b` per image, non-increasing.
    pub theta: Buffer<f64>,
    /// `σ = √max(θ, 0)`, `b` per image.
    pub sigma: Buffer<f64>,
    /// `1/σ`, or 0 for a pair whose `θ` is numerically zero (`≤ NULL_THRESHOLD·θ₁`), `b` per image.
    pub inv_sigma: Buffer<f64>,
    /// The eigenvectors `Z`, `b × b` per image, row-major: column `i` belongs to pair `i`.
    pub vectors: Buffer<f64>,
}

impl RitzPairs {
    /// Buffers for `images` sets of `b` pairs.
    pub fn new(device: &Device, b: usize, images: usize) -> Result<RitzPairs> {
        Ok(RitzPairs {
            theta: device.alloc_scratch(device.queue(), images * b)?,
            sigma: device.alloc_scratch(device.queue(), images * b)?,
            inv_sigma: device.alloc_scratch(device.queue(), images * b)?,
            vectors: device.alloc_scratch(device.queue(), images * b * b)?,
        })
    }
}

/// A solver of the Ritz eigenproblems of a batch.
pub trait RitzSolver {
    /// Where the Rayleigh–Ritz step writes `T`: a view of the solver's own buffer and the layout
    /// of its `b × b` matrices in it (the solver may pad them).
    fn input(&mut self) -> Result<(BufferViewMut<'_, f64>, Layout)>;

    /// Solves the problems written into [`RitzSolver::input`] and writes their pairs into `pairs`,
    /// queued on the device's queue after the work that wrote `T` (a solver may wait for it).
    ///
    /// # Safety
    /// `pairs`' buffers must live until the queue reaches the launches (as for
    /// [`Device::launch_on`]).
    unsafe fn solve(&mut self, device: &Device, pairs: &mut RitzPairs) -> Result<()>;
}
