//! The one-block Jacobi Ritz solver ([`kf::ritz_eigen`]): one thread block per image, its work
//! matrices in shared memory where they fit (else in global memory).

use super::ritz::{RitzPairs, RitzSolver};
use crate::launch::device::{Buffer, BufferViewMut, Device};
use crate::launch::error::Result;
use gpu_std::sim::LaunchConfig;
use kernels::svd_factor::{self as kf, Layout};

/// Jacobi in one thread block per image ([`kf::ritz_eigen`]), its work matrices in shared memory
/// where its launch gives enough.
pub struct OneBlockJacobi {
    b: usize,
    t: Buffer<f64>,
    scratch: Buffer<f64>,
    config: LaunchConfig,
}

impl OneBlockJacobi {
    /// Work space for `images` problems of `b × b`, solved by launches of `config` (one block per
    /// image, its dynamic shared memory [`kf::jacobi_shared_bytes`] or 8).
    pub fn new(device: &Device, b: usize, images: usize, config: LaunchConfig) -> Result<OneBlockJacobi> {
        Ok(OneBlockJacobi {
            b,
            t: device.alloc_temporary(device.queue(), images * b * b)?,
            scratch: device.alloc_temporary(device.queue(), images * kf::eigen_scratch(b as u32) as usize)?,
            config,
        })
    }
}

impl RitzSolver for OneBlockJacobi {
    fn input(&mut self) -> Result<(BufferViewMut<'_, f64>, Layout)> {
        let b = self.b as u32;
        Ok((self.t.view_mut(..)?, Layout::row_major(b, b * b)))
    }

    unsafe fn solve(&mut self, device: &Device, pairs: &mut RitzPairs) -> Result<()> {
        let RitzPairs { theta, sigma, inv_sigma, vectors } = pairs;
        // SAFETY: `t` and `scratch` are the solver's, the pairs' buffers live as the caller
        // promises; every image's part of them lies inside (sized from the plan).
        unsafe {
            device.launch(
                &kf::RITZ_EIGEN,
                self.config,
                (&self.t, self.b as u32, &mut self.scratch, theta, sigma, inv_sigma, vectors),
            )
        }
    }
}
