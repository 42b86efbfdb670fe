//! The `svd` job over many images: what goes in ([`JobImage`] from an [`ImageQueue`]), what comes
//! out ([`ImageResult`] to a sink), and the engines that turn one into the other: the GPU pipeline
//! (`svd_batch::run_gpu`) and the CPU path ([`run_cpu`], faer, in parallel across images).
//!
//! Images are row-major `(rows, cols)` = `(height, width)`, values in `[0, 1]`.

use crate::error::Result;
use ndarray::Array2;
use std::sync::Mutex;
use std::sync::mpsc::Receiver;

/// Decoded pixels of one image.
#[derive(Debug, Clone)]
pub enum Pixels {
    /// 8-bit gray, row-major `rows × cols`; value `v` means `v / 255`. Uploaded as bytes and
    /// converted on the device.
    Gray8 {
        /// Height.
        rows: usize,
        /// Width.
        cols: usize,
        /// `rows · cols` bytes.
        data: Vec<u8>,
    },
    /// Any other source (16-bit files, generated images), already in `[0, 1]`.
    Float(Array2<f32>),
}

impl Pixels {
    /// `(rows, cols)`.
    pub fn dim(&self) -> (usize, usize) {
        match self {
            Pixels::Gray8 { rows, cols, .. } => (*rows, *cols),
            Pixels::Float(a) => a.dim(),
        }
    }

    /// The image as f32 in `[0, 1]`.
    pub fn to_f32(&self) -> Array2<f32> {
        match self {
            Pixels::Gray8 { rows, cols, data } => {
                Array2::from_shape_fn((*rows, *cols), |(i, j)| data[i * cols + j] as f32 / 255.0)
            }
            Pixels::Float(a) => a.clone(),
        }
    }
}

/// One image of the job.
#[derive(Debug, Clone)]
pub struct JobImage {
    /// Position in the job's (sharded) input list; results carry it back.
    pub index: usize,
    /// Name used for output files (the file stem).
    pub name: String,
    /// The pixels.
    pub pixels: Pixels,
}

/// What to compute for every image.
#[derive(Debug, Clone)]
pub struct JobOptions {
    /// Ranks to reconstruct, ascending, without repeats, each ≥ 1. An image whose `min(rows, cols)`
    /// is smaller than the largest rank is an error naming the image.
    pub ranks: Vec<usize>,
    /// Also compute the f64 CPU reference reconstruction and report its difference (`--check`).
    pub check: bool,
    /// GPU only: the reconstruction kernel.
    pub variant: crate::svd::Variant,
    /// GPU only: images in flight per GPU (bounds device memory; 2 or more overlap copies,
    /// compute and the host's work).
    pub in_flight: usize,
}

/// One rank of one image.
#[derive(Debug, Clone)]
pub struct RankResult {
    /// The rank.
    pub k: usize,
    /// `‖A − A_k‖_F / ‖A‖_F` of the f32 reconstruction actually returned (0 for the zero image).
    pub relative_error: f64,
    /// `sqrt(Σ_{i≥k} σ_i²) / ‖A‖_F`, from the computed singular values and `‖A‖_F`.
    pub eckart_young_bound: f64,
    /// The rank-k reconstruction `U_k·diag(s_k)·V_kᵀ`, f32, `rows × cols`.
    pub reconstruction: Array2<f32>,
    /// With `check`: `‖A_k − A_k^ref‖_F / ‖A_k^ref‖_F` against the f64 CPU reference.
    pub check_error: Option<f64>,
}

/// Wall or device time per stage of one image, milliseconds (0 where a stage does not apply).
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize)]
pub struct StageTimes {
    /// File read and decode (host, one core).
    pub decode_ms: f64,
    /// Copies to the device (device time).
    pub h2d_ms: f64,
    /// Factorisation (device time on the GPU, wall time on the CPU).
    pub svd_ms: f64,
    /// Reconstruction of every rank and the errors.
    pub reconstruct_ms: f64,
    /// Copies back.
    pub d2h_ms: f64,
    /// PNG/NPY encode and write (host, one core).
    pub encode_ms: f64,
}

/// Everything computed for one image.
#[derive(Debug, Clone)]
pub struct ImageResult {
    /// [`JobImage::index`].
    pub index: usize,
    /// [`JobImage::name`].
    pub name: String,
    /// Height.
    pub rows: usize,
    /// Width.
    pub cols: usize,
    /// The leading `max(ranks)` singular values, non-increasing.
    pub singular_values: Vec<f64>,
    /// `‖A‖_F`.
    pub frobenius_norm: f64,
    /// One entry per requested rank, in the order of [`JobOptions::ranks`].
    pub ranks: Vec<RankResult>,
    /// Times of this image's stages.
    pub times: StageTimes,
}

/// The job's images, decoded by producer threads and taken by one or more engines (one per GPU).
/// Thread-safe; yields `None` once every image has been taken.
pub struct ImageQueue {
    receiver: Mutex<Receiver<Result<JobImage>>>,
}

impl ImageQueue {
    /// Wraps the receiving end of the producers' channel.
    pub fn new(receiver: Receiver<Result<JobImage>>) -> Self {
        ImageQueue { receiver: Mutex::new(receiver) }
    }

    /// The next decoded image (or decode error), `None` when the producers are done.
    pub fn next(&self) -> Option<Result<JobImage>> {
        self.receiver.lock().expect("no panics while holding the lock").recv().ok()
    }
}

/// Where engines hand finished images (called from engine threads; should return quickly, e.g. by
/// passing the result to encoder threads).
pub type Sink<'a> = &'a (dyn Fn(ImageResult) -> Result<()> + Sync);
