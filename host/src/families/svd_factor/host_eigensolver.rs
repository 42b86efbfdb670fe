//! The host's Ritz solver: faer's symmetric eigensolver, images in parallel, the matrices
//! downloaded (a wait for the queue) and the eigenpairs uploaded once per Rayleigh–Ritz step.

use super::ritz::{PairOrdering, RitzPairs, RitzSolver};
use crate::launch::device::{Buffer, BufferViewMut, Device};
use crate::launch::error::{Error, Result};
use faer::Mat;
use faer::diag::Diag;
use faer::dyn_stack::{MemBuffer, MemStack};
use faer::linalg::evd::{ComputeEigenvectors, self_adjoint_evd, self_adjoint_evd_scratch};
use kernels::svd_factor::Layout;
use rayon::prelude::*;

/// faer's symmetric eigensolver on the host: the matrices are downloaded (a wait for the queue),
/// the eigenpairs uploaded and ordered on the device by
/// [`kernels::svd_factor::sorted_ritz_pairs`], as the block Jacobi solver's are.
pub struct HostEigensolver {
    b: usize,
    images: usize,
    /// `T` (`b × b` per image), then the eigenvectors (`b × b` per image, row-major, unordered).
    t: Buffer<f64>,
    /// The eigenvalues, `b` per image, unordered.
    values: Buffer<f64>,
    /// The eigenpairs' ordering into the Ritz pairs.
    ordering: PairOrdering,
}

impl HostEigensolver {
    /// Work space for `images` problems of `b × b`.
    pub fn new(device: &Device, b: usize, images: usize) -> Result<HostEigensolver> {
        Ok(HostEigensolver {
            b,
            images,
            t: device.alloc_temporary(device.queue(), images * b * b)?,
            values: device.alloc_temporary(device.queue(), images * b)?,
            ordering: PairOrdering::new(device, b, images)?,
        })
    }
}

impl RitzSolver for HostEigensolver {
    fn input(&mut self) -> Result<(BufferViewMut<'_, f64>, Layout)> {
        let b = self.b as u32;
        Ok((self.t.view_mut(..)?, Layout::row_major(b, b * b)))
    }

    unsafe fn solve(&mut self, device: &Device, pairs: &mut RitzPairs) -> Result<()> {
        let t = device.download(&self.t)?;
        let (values, vectors) = device
            .time_host("Ritz eigenproblems (faer, host)", || eigenpairs_on_host(&t, self.b, self.images))?;
        device.upload_into(&mut self.values, &values)?;
        device.upload_into(&mut self.t, &vectors)?;
        let b = self.b as u32;
        let values = (self.values.view(..)?, Layout { row: 0, col: 1, batch: b });
        let vectors = (self.t.view(..)?, Layout::row_major(b, b * b));
        // SAFETY: the values and vectors belong to `self` (`b` and `b²` per image, uploaded
        // above), and the layouts keep each image's inside them; the pairs live as the caller
        // promises.
        unsafe { self.ordering.write(device, values, vectors, pairs) }
    }
}

/// Per image, faer's eigenpairs of `T` (`b × b` per image, row-major): the values (`b` per image)
/// and the vectors (`b × b` per image, row-major, column `i` that of value `i`), unordered.
fn eigenpairs_on_host(t: &[f64], b: usize, images: usize) -> Result<(Vec<f64>, Vec<f64>)> {
    // One image runs on the calling thread: rayon's pool adds a wake-up per solve and, on a busy
    // host, long tails (`docs/benchmarks/svd-job.md`, "The Ritz solver and the Chebyshev
    // filter's limits").
    let per_image: Vec<(Vec<f64>, Vec<f64>)> = if images == 1 {
        vec![one_image_on_host(&t[..b * b], b)?]
    } else {
        t.par_chunks(b * b).take(images).map(|block| one_image_on_host(block, b)).collect::<Result<_>>()?
    };
    let (mut values, mut vectors) = (Vec::with_capacity(images * b), Vec::with_capacity(images * b * b));
    for (image_values, image_vectors) in per_image {
        values.extend(image_values);
        vectors.extend(image_vectors);
    }
    Ok((values, vectors))
}

/// faer's eigenpairs of one `b × b` matrix (row-major, symmetrised): values, and vectors row-major.
fn one_image_on_host(block: &[f64], b: usize) -> Result<(Vec<f64>, Vec<f64>)> {
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
    let values = s.column_vector().iter().copied().collect();
    let rows = (0..b).flat_map(|row| (0..b).map(move |col| (row, col)));
    Ok((values, rows.map(|(row, col)| vectors[(row, col)]).collect()))
}
