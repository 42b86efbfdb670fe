//! The Ritz eigensolver's interface: each Rayleigh–Ritz step writes the projected matrices
//! `T = QᵀGQ` (`b × b`, symmetric, one per image) where the solver asks ([`RitzSolver::input`]),
//! and the solver writes their eigenpairs as [`RitzPairs`]. The implementations, one file each:
//! `one_block_jacobi.rs`, `block_jacobi.rs`, `host_eigensolver.rs`. Adding a solver is one more
//! implementation, a [`RitzMethod`](super::RitzMethod) variant and its line in the plan.

use crate::launch::device::{Buffer, BufferView, BufferViewMut, Device};
use crate::launch::error::Result;
use gpu_std::sim::{Dim3, LaunchConfig};
use kernels::svd_factor::{self as kf, Layout};

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
            theta: device.alloc_temporary(device.queue(), images * b)?,
            sigma: device.alloc_temporary(device.queue(), images * b)?,
            inv_sigma: device.alloc_temporary(device.queue(), images * b)?,
            vectors: device.alloc_temporary(device.queue(), images * b * b)?,
        })
    }
}

/// The step the block Jacobi, tridiagonal and host solvers end with: their eigenpairs, in any
/// order, written as [`RitzPairs`] by [`kf::sorted_ritz_pairs`]; and its work space.
pub(super) struct PairOrdering {
    scratch: Buffer<f64>,
    b: usize,
    images: usize,
}

impl PairOrdering {
    /// The work space for `images` sets of `b` pairs.
    pub(super) fn new(device: &Device, b: usize, images: usize) -> Result<Self> {
        let scratch =
            device.alloc_temporary(device.queue(), images * kf::sorted_pairs_scratch(b as u32) as usize)?;
        Ok(PairOrdering { scratch, b, images })
    }

    /// Queues the ordering of every image's `b` values (value `i` element `(i, i)` of `values`
    /// through its layout) and vectors (vector `i` column `i` of `vectors` through its layout)
    /// into `pairs`.
    ///
    /// # Safety
    /// Each image's values and vectors lie inside `values` and `vectors` through their layouts,
    /// written by work queued before on the device's queue; `pairs` (of this `b` and batch) lives
    /// until the queue reaches the launch.
    pub(super) unsafe fn write(
        &mut self,
        device: &Device,
        (values, value_layout): (BufferView<'_, f64>, Layout),
        (vectors, vector_layout): (BufferView<'_, f64>, Layout),
        pairs: &mut RitzPairs,
    ) -> Result<()> {
        let b = self.b as u32;
        let config = LaunchConfig {
            grid: Dim3 { x: self.images as u32, y: kf::sorted_pairs_blocks(b), z: 1 },
            block: Dim3::x(256),
            shared_bytes: 0,
        };
        let RitzPairs { theta, sigma, inv_sigma, vectors: ritz } = pairs;
        let args = (
            values,
            value_layout,
            vectors,
            vector_layout,
            b,
            &mut self.scratch,
            theta,
            sigma,
            inv_sigma,
            ritz,
        );
        // SAFETY: the caller's contract for the inputs and the pairs; the scratch is this
        // ordering's, `sorted_pairs_scratch` per image.
        unsafe { device.launch(&kf::SORTED_RITZ_PAIRS, config, args) }
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
