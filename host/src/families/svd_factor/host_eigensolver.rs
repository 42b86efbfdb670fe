//! The host's Ritz solver: faer's symmetric eigensolver, images in parallel, the matrices
//! downloaded (a wait for the queue) and the pairs uploaded once per Rayleigh–Ritz step.

use super::ritz::{RitzPairs, RitzSolver};
use crate::launch::device::{Buffer, BufferViewMut, Device};
use crate::launch::error::{Error, Result};
use faer::Mat;
use faer::diag::Diag;
use faer::dyn_stack::{MemBuffer, MemStack};
use faer::linalg::evd::{ComputeEigenvectors, self_adjoint_evd, self_adjoint_evd_scratch};
use kernels::svd_factor::{self as kf, Layout};
use rayon::prelude::*;

/// faer's symmetric eigensolver on the host: the matrices are downloaded (a wait for the queue)
/// and the pairs uploaded.
pub struct HostEigensolver {
    b: usize,
    images: usize,
    t: Buffer<f64>,
}

impl HostEigensolver {
    /// Work space for `images` problems of `b × b`.
    pub fn new(device: &Device, b: usize, images: usize) -> Result<HostEigensolver> {
        Ok(HostEigensolver { b, images, t: device.alloc(images * b * b)? })
    }
}

impl RitzSolver for HostEigensolver {
    fn input(&mut self) -> Result<(BufferViewMut<'_, f64>, Layout)> {
        let b = self.b as u32;
        Ok((self.t.view_mut(..)?, Layout::row_major(b, b * b)))
    }

    unsafe fn solve(&mut self, device: &Device, pairs: &mut RitzPairs) -> Result<()> {
        let t = device.download(&self.t)?;
        let [theta, sigma, inv_sigma, vectors] = device
            .time_host("Ritz eigenproblems (faer, host)", || ritz_pairs_on_host(&t, self.b, self.images))?;
        device.upload_into(&mut pairs.theta, &theta)?;
        device.upload_into(&mut pairs.sigma, &sigma)?;
        device.upload_into(&mut pairs.inv_sigma, &inv_sigma)?;
        device.upload_into(&mut pairs.vectors, &vectors)
    }
}

/// The host's [`kf::ritz_eigen`]: per image, the Ritz pairs of `T` (`b × b` per image), as
/// `[theta, sigma, inv_sigma, vectors]` laid out as [`RitzPairs`].
fn ritz_pairs_on_host(t: &[f64], b: usize, images: usize) -> Result<[Vec<f64>; 4]> {
    // One image runs on the calling thread: rayon's pool adds a wake-up per solve and, on a busy
    // host, long tails (`docs/benchmarks/svd-job.md`, "The Ritz solver and the Chebyshev
    // filter's limits").
    let per_image: Vec<[Vec<f64>; 4]> = if images == 1 {
        vec![one_image_on_host(&t[..b * b], b)?]
    } else {
        t.par_chunks(b * b).take(images).map(|block| one_image_on_host(block, b)).collect::<Result<_>>()?
    };
    let mut out: [Vec<f64>; 4] = Default::default();
    for image in per_image {
        for (all, part) in out.iter_mut().zip(image) {
            all.extend(part);
        }
    }
    Ok(out)
}

/// The Ritz pairs of one `b × b` matrix (row-major, symmetrised), sorted as the device's are.
fn one_image_on_host(block: &[f64], b: usize) -> Result<[Vec<f64>; 4]> {
    let t = Mat::<f64>::from_fn(b, b, |i, j| 0.5 * (block[i * b + j] + block[j * b + i]));
    let (mut s, mut vectors) = (Diag::<f64>::zeros(b), Mat::<f64>::zeros(b, b));
    // Sequential: images run in parallel, and for one image of b ≤ 1024 faer's own threads do
    // not pay (`docs/benchmarks/svd-job.md`, "The Ritz solver and the Chebyshev filter's
    // limits").
    let par = faer::Par::Seq;
    let scratch = self_adjoint_evd_scratch::<f64>(b, ComputeEigenvectors::Yes, par, Default::default());
    self_adjoint_evd(
        t.as_ref(),
        s.as_mut(),
        Some(vectors.as_mut()),
        par,
        MemStack::new(&mut MemBuffer::new(scratch)),
        Default::default(),
    )
    .map_err(|e| Error::Numerical(format!("the Ritz eigenproblem did not converge: {e:?}")))?;
    let values: Vec<f64> = s.column_vector().iter().copied().collect();
    let mut order: Vec<usize> = (0..b).collect();
    order.sort_by(|&x, &y| values[y].total_cmp(&values[x]));
    let theta: Vec<f64> = order.iter().map(|&i| values[i]).collect();
    let sigma: Vec<f64> = theta.iter().map(|&t| kf::sigma_of(t)).collect();
    let inv_sigma =
        theta.iter().zip(&sigma).map(|(&t, &s)| kf::inverse_sigma(t, s, theta[0].max(0.0))).collect();
    let mut ritz = Vec::with_capacity(b * b);
    for row in 0..b {
        ritz.extend(order.iter().map(|&col| vectors[(row, col)]));
    }
    Ok([theta, sigma, inv_sigma, ritz])
}
