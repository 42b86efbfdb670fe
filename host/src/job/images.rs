//! The `svd` job's data: what goes in ([`JobImage`], its [`Pixels`]; a [`FailedImage`] when it
//! cannot be taken), what to compute ([`JobOptions`]), and what comes out ([`ImageResult`], per
//! rank a [`RankResult`] with its [`Reconstruction`], and the [`StageTimes`]), handed to a
//! [`Sink`]; and the checks every engine makes of them ([`check_options`], [`check_image`],
//! [`check_size`]).
//!
//! Images are row-major `(rows, cols)` = `(height, width)`, values in `[0, 1]`.

use crate::commands::image_io::{self, Scaling};
use crate::families::svd::reconstruct::Variant;
use crate::launch::error::{Error, Result, ensure};
use ndarray::Array2;
use std::borrow::Cow;

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

/// An image the job cannot take: its file unreadable or not a decodable image, or the image unfit
/// for the job's ranks.
#[derive(Debug)]
pub struct FailedImage {
    /// [`JobImage::index`] it would have had.
    pub index: usize,
    /// [`JobImage::name`] it would have had.
    pub name: String,
    /// Why (naming the file or the image).
    pub error: Error,
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
    pub variant: Variant,
    /// GPU only: most images factored together in one batch (batches are also bounded by
    /// [`crate::job::gpu_engine::BATCH_PIXELS`]). With several GPUs each takes the next batch when it
    /// is free; a smaller cap spreads a small folder over them.
    pub batch_images: usize,
    /// What of each reconstruction the host needs: only that crosses PCIe.
    pub keep: Keep,
}

/// What of each reconstruction comes back to the host ([`RankResult::reconstruction`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Keep {
    /// Nothing: only the errors are reported (`--no-images`).
    Nothing,
    /// The 8-bit pixels a PNG stores (quantised on the device: a quarter of the bytes).
    Gray8,
    /// The f32 values (`--npy`).
    Float,
}

/// A reconstruction as it came back to the host, per [`Keep`].
#[derive(Debug, Clone)]
pub enum Reconstruction {
    /// Not brought back.
    Dropped,
    /// `round(clamp(v, 0, 1)·255)` of every value, `rows × cols`: the bytes of its PNG.
    Gray8(Array2<u8>),
    /// The f32 values, `rows × cols`.
    Float(Array2<f32>),
}

impl Reconstruction {
    /// `values` kept as `keep` asks.
    pub fn keep(values: Array2<f32>, keep: Keep) -> Self {
        match keep {
            Keep::Nothing => Reconstruction::Dropped,
            Keep::Gray8 => {
                let dim = values.dim();
                let bytes = image_io::to_gray8(values.view(), Scaling::Clamp);
                Reconstruction::Gray8(Array2::from_shape_vec(dim, bytes).expect("one byte per value"))
            }
            Keep::Float => Reconstruction::Float(values),
        }
    }

    /// The f32 values, if kept.
    pub fn float(&self) -> Option<&Array2<f32>> {
        match self {
            Reconstruction::Float(values) => Some(values),
            _ => None,
        }
    }

    /// The 8-bit pixels a PNG of it stores (`round(clamp(v, 0, 1)·255)`, row-major), if kept:
    /// [`Reconstruction::Gray8`]'s own bytes.
    pub fn to_gray8(&self) -> Option<Cow<'_, [u8]>> {
        match self {
            Reconstruction::Dropped => None,
            Reconstruction::Gray8(bytes) => Some(Cow::Borrowed(bytes.as_slice().expect("standard layout"))),
            Reconstruction::Float(values) => {
                Some(Cow::Owned(image_io::to_gray8(values.view(), Scaling::Clamp)))
            }
        }
    }
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
    /// The rank-k reconstruction `U_k·diag(s_k)·V_kᵀ` (`rows × cols`), as [`JobOptions::keep`]
    /// asked.
    pub reconstruction: Reconstruction,
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

impl StageTimes {
    /// Adds `other`'s times stage by stage (a job's totals).
    pub fn add(&mut self, other: &StageTimes) {
        self.decode_ms += other.decode_ms;
        self.h2d_ms += other.h2d_ms;
        self.svd_ms += other.svd_ms;
        self.reconstruct_ms += other.reconstruct_ms;
        self.d2h_ms += other.d2h_ms;
        self.encode_ms += other.encode_ms;
    }
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

/// Where engines hand finished images (called from engine threads; should return quickly, e.g. by
/// passing the result to encoder threads).
pub type Sink<'a> = &'a (dyn Fn(ImageResult) -> Result<()> + Sync);

/// Checks `options` as every engine needs them: at least one rank, ascending without repeats,
/// each ≥ 1, and at least one image in flight.
pub fn check_options(options: &JobOptions) -> Result<()> {
    ensure(!options.ranks.is_empty(), || "no ranks to reconstruct".into())?;
    ensure(options.ranks[0] >= 1, || "rank k = 0 is not allowed: ranks start at 1".into())?;
    ensure(options.ranks.windows(2).all(|w| w[0] < w[1]), || {
        format!("ranks {:?} must be ascending without repeats", options.ranks)
    })?;
    ensure(options.batch_images >= 1, || "a batch needs at least one image".into())
}

/// Checks that `image` can be factored for `options` (not empty, `max(ranks) ≤ min(rows, cols)`);
/// the error names the image. Engines call it before any work on the image.
pub fn check_image(image: &JobImage, options: &JobOptions) -> Result<()> {
    check_size(&image.name, image.pixels.dim(), options.ranks.last().copied().unwrap_or(0))
}

/// Checks that image `name` of `(rows, cols)` pixels can be factored up to rank `max_rank`: not
/// empty, and `max_rank ≤ min(rows, cols)`. [`check_image`] for an image not yet (or never)
/// decoded: the queue's screen, the default phantom before the job starts.
pub fn check_size(name: &str, (rows, cols): (usize, usize), max_rank: usize) -> Result<()> {
    ensure(rows > 0 && cols > 0, || format!("{name}: cannot factor an empty {rows} × {cols} image"))?;
    let r = rows.min(cols);
    ensure(max_rank <= r, || {
        format!(
            "{name} ({rows}×{cols}): rank k = {max_rank} is outside 1..={r} (min(rows, cols) of the image)"
        )
    })
}
