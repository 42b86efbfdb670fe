//! The job's CPU engine: [`run_cpu`] takes images from the queue and factors each with
//! [`factor_cpu`] (the suite's CPU SVD, faer) on rayon's pool, in parallel across images.

use super::images::{
    ImageResult, JobImage, JobOptions, Pixels, RankResult, Reconstruction, Sink, StageTimes, check_image,
    check_options,
};
use super::input_queue::ImageQueue;
use super::lock::{into_inner, lock, wait};
use crate::families::svd::finite::check_finite;
use crate::families::svd::metrics::{eckart_young_bound, energy, relative};
use crate::families::svd::reference::{CpuSvd, cpu_svd};
use crate::launch::error::{Error, Result};
use faer::{Accum, Mat, Par};
use ndarray::Array2;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Condvar, Mutex};
use std::time::Instant;

/// The CPU engine, parallel across images: takes images from `queue` as long as one of rayon's
/// global threads is free for it, computes each on rayon's pool with [`factor_cpu`] and hands the
/// result to `sink` (from the pool's threads). The first error (a failed image from an unscreened
/// queue, a bad image, or the sink's) stops taking images and is returned once the running ones are
/// done; a screened queue's failures never reach it, and a stopped queue ends it likewise.
///
/// At most one image per thread is in progress, so memory stays bounded. An image that takes the
/// last free thread is factored sequentially (`Par::Seq`: with many images, cores go to images);
/// one started while other threads stay idle (few images, or the job's start) uses faer's rayon
/// parallelism, so the idle threads help. Measured on 16 cores (`svd --device cpu`, PNGs written):
/// 8 images of 2048² in 4.5 s (7.2 s with `Par::Seq` for every image, 4.8 s with rayon for every
/// image), 16 of 1024² in 1.23 s (1.17 s, 1.17 s), 64 of 256² in 0.18 s (0.16 s, 0.29 s).
pub fn run_cpu(queue: &ImageQueue, options: &JobOptions, sink: Sink) -> Result<()> {
    check_options(options)?;
    let threads = rayon::current_num_threads();
    let busy = Mutex::new(0usize);
    let freed = Condvar::new();
    let stop = AtomicBool::new(false);
    let first_error = Mutex::new(None);
    let fail = |e: Error| {
        stop.store(true, Ordering::SeqCst);
        lock(&first_error).get_or_insert(e);
    };
    // In place: this thread takes images; the pool's threads compute them.
    rayon::in_place_scope(|scope| {
        while !stop.load(Ordering::SeqCst) {
            let mut running = lock(&busy);
            while *running >= threads {
                running = wait(&freed, running);
            }
            drop(running);
            let image = match queue.next() {
                None => break,
                Some(Err(e)) => {
                    fail(e);
                    break;
                }
                Some(Ok(image)) => image,
            };
            // A running image may have failed meanwhile.
            if stop.load(Ordering::SeqCst) {
                break;
            }
            let par = {
                let mut running = lock(&busy);
                *running += 1;
                if *running < threads { Par::rayon(0) } else { Par::Seq }
            };
            let (busy, freed, fail) = (&busy, &freed, &fail);
            scope.spawn(move |_| {
                if let Err(e) = factor_cpu(&image, options, par).and_then(sink) {
                    fail(e);
                }
                *lock(busy) -= 1;
                freed.notify_one();
            });
        }
    });
    match into_inner(first_error) {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

/// One image on the CPU with faer's parallelism `par` (`Par::Seq`: on the calling thread only):
/// the suite's CPU SVD ([`cpu_svd`], f64), then for each rank the f64 reconstruction
/// `U_k·diag(s_k)·V_kᵀ` (built up rank by rank, so all ranks cost as much as the largest), rounded
/// to f32, with its errors. `check_error` (with [`JobOptions::check`]) is the f32 rounding error
/// against that f64 reconstruction. Times: `svd_ms` and `reconstruct_ms` (wall clock); the other
/// stages are 0.
pub fn factor_cpu(image: &JobImage, options: &JobOptions, par: Par) -> Result<ImageResult> {
    check_options(options)?;
    check_image(image, options)?;
    let (rows, cols) = image.pixels.dim();
    let name = &image.name;
    let start = Instant::now();
    let a = pixels_f64(image)?;
    let svd = cpu_svd(&a, (rows, cols), par).map_err(|e| match e {
        Error::Numerical(what) => Error::Numerical(format!("{name}: {what}")),
        e => e,
    })?;
    let svd_ms = start.elapsed().as_secs_f64() * 1e3;

    let start = Instant::now();
    let ranks = reconstruct_ranks(&svd, &a, (rows, cols), options, par);
    let reconstruct_ms = start.elapsed().as_secs_f64() * 1e3;
    let kmax = options.ranks.last().copied().unwrap_or(0);
    Ok(ImageResult {
        index: image.index,
        name: name.clone(),
        rows,
        cols,
        singular_values: svd.s[..kmax].to_vec(),
        frobenius_norm: svd.norm_sq.sqrt(),
        ranks,
        times: StageTimes { svd_ms, reconstruct_ms, ..StageTimes::default() },
    })
}

/// The image's pixels in f64, row-major; an error names a non-finite one.
fn pixels_f64(image: &JobImage) -> Result<Vec<f64>> {
    Ok(match &image.pixels {
        Pixels::Gray8 { data, .. } => {
            let table: Vec<f64> = (0..=255u8).map(|v| f64::from(f32::from(v) / 255.0)).collect();
            data.iter().map(|&v| table[v as usize]).collect()
        }
        Pixels::Float(pixels) => {
            check_finite(pixels.view(), Some(&image.name))?;
            pixels.iter().map(|&v| f64::from(v)).collect()
        }
    })
}

/// Every rank of `options` from the SVD of `a` (row-major `rows × cols`): the f64 reconstruction
/// `Aᵀ_k` built up rank by rank in one column-major `cols × rows` matrix (so that its columns are
/// `A_k`'s rows), each rank's rounded to f32 and compared with `a`.
fn reconstruct_ranks(
    svd: &CpuSvd,
    a: &[f64],
    (rows, cols): (usize, usize),
    options: &JobOptions,
    par: Par,
) -> Vec<RankResult> {
    let CpuSvd { u, s, v, norm_sq } = svd;
    let spectrum_sq = energy(s);
    let mut reference = Mat::<f64>::zeros(cols, rows);
    let mut done = 0;
    let mut ranks = Vec::with_capacity(options.ranks.len());
    for &k in &options.ranks {
        // reference += (V[:, done..k]·diag(s[done..k]))·U[:, done..k]ᵀ  (that is, Aᵀ_k).
        let mut vs = v.subcols(done, k - done).to_owned();
        for (p, sigma) in s[done..k].iter().enumerate() {
            vs.col_mut(p).iter_mut().for_each(|x| *x *= sigma);
        }
        faer::linalg::matmul::matmul(
            reference.as_mut(),
            Accum::Add,
            vs.as_ref(),
            u.subcols(done, k - done).transpose(),
            1.0,
            par,
        );
        done = k;
        let (out, errors) = round_and_compare(&reference, a, (rows, cols));
        ranks.push(RankResult {
            k,
            relative_error: relative(errors.diff_sq, *norm_sq),
            eckart_young_bound: eckart_young_bound(s, k, spectrum_sq),
            reconstruction: Reconstruction::keep(out, options.keep),
            check_error: options.check.then(|| relative(errors.rounding_sq, errors.reference_sq)),
        });
    }
    ranks
}

/// Squared sums of a rank's reconstruction ([`round_and_compare`]).
struct RankSums {
    /// `‖A_k(f32) − A‖²`.
    diff_sq: f64,
    /// `‖A_k(f32) − A_k‖²`: the f32 rounding.
    rounding_sq: f64,
    /// `‖A_k‖²`.
    reference_sq: f64,
}

/// `Aᵀ_k` (`reference`, `cols × rows` column-major) rounded to f32 as the row-major `rows × cols`
/// reconstruction, with its squared sums against `a` and against itself.
fn round_and_compare(
    reference: &Mat<f64>,
    a: &[f64],
    (rows, cols): (usize, usize),
) -> (Array2<f32>, RankSums) {
    let mut out = Vec::with_capacity(rows * cols);
    let mut sums = RankSums { diff_sq: 0.0, rounding_sq: 0.0, reference_sq: 0.0 };
    for i in 0..rows {
        let row = reference.col_as_slice(i);
        for (&x, &orig) in row.iter().zip(&a[i * cols..(i + 1) * cols]) {
            let y = x as f32;
            let y64 = f64::from(y);
            sums.diff_sq += (y64 - orig) * (y64 - orig);
            sums.rounding_sq += (y64 - x) * (y64 - x);
            sums.reference_sq += x * x;
            out.push(y);
        }
    }
    (Array2::from_shape_vec((rows, cols), out).expect("rows·cols values"), sums)
}
