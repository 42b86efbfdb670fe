//! 2-D convolution with SciPy's semantics: safe wrappers of `kernels::conv`, the f64 CPU reference,
//! and the masks the `conv` command offers.
//!
//! Images and masks are `ndarray` arrays `(rows, cols)`, element `[[i, j]]` in row `i` and column
//! `j`. For a mask of `mh × mw` (both odd, at most [`MAX_MASK_SIDE`]) with half sizes
//! `dr = mh/2`, `dc = mw/2`, the result is
//!
//! ```text
//! out[i, j] = Σ_{k, l} mask[k, l] · image[i − k + dr, j − l + dc]   (image = 0 outside)
//! ```
//!
//! the same as `scipy.ndimage.convolve(image, mask, mode='constant', cval=0.0)`: a correlation
//! with the mask flipped in both directions.
//!
//! Device code: `kernels/src/conv.rs`; tests: `tests/conv.rs`; benchmark: `benches/conv.rs`;
//! command: `cargo run --release --bin conv`.

use crate::error::{Error, Result, ensure};
use crate::profile::Work;
use crate::{Buffer, BufferView, BufferViewMut, Device, Element, LaunchConfig, Queue};
use kernels::conv::{BLOCK_X, BLOCK_Y, TILED_BLOCK_Y, TILED_TILE_COLS, TILED_TILE_ROWS};
use ndarray::{Array2, ArrayView2};
use rand::{Rng, SeedableRng, rngs::SmallRng};
use rayon::prelude::*;
use std::path::Path;

pub use kernels::conv::MAX_MASK_SIDE;

/// Which f32 kernel computes the convolution.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Variant {
    /// `conv2d_naive_f32`: one thread per output pixel, all reads from global memory.
    Naive,
    /// `conv2d_tiled`: input tile, halo and mask staged in shared memory, several outputs per
    /// thread (`kernels::conv::TILED_ROWS_PER_THREAD`).
    Tiled,
}

impl Variant {
    /// Every variant, for tests and benchmarks.
    pub const ALL: [Variant; 2] = [Variant::Naive, Variant::Tiled];
}

/// Checks an image and a mask before any work: the sides (see [`Dims::validate`]) and every value
/// finite.
pub fn validate<T: Copy + Into<f64> + Sync>(image: ArrayView2<T>, mask: ArrayView2<T>) -> Result<()> {
    Dims::of(image, mask).validate()?;
    check_finite("image", image)?;
    check_finite("mask", mask)
}

/// The sides of a convolution: the image (and the result) `rows × cols`, the mask
/// `mask_rows × mask_cols`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Dims {
    /// Rows of the image and of the result.
    pub rows: usize,
    /// Columns of the image and of the result.
    pub cols: usize,
    /// Rows of the mask.
    pub mask_rows: usize,
    /// Columns of the mask.
    pub mask_cols: usize,
}

impl Dims {
    /// The sides of `image` and `mask`.
    pub fn of<T>(image: ArrayView2<T>, mask: ArrayView2<T>) -> Dims {
        let ((rows, cols), (mask_rows, mask_cols)) = (image.dim(), mask.dim());
        Dims { rows, cols, mask_rows, mask_cols }
    }

    /// Checks the sides: both arrays non-empty, mask sides odd and at most [`MAX_MASK_SIDE`], the
    /// image small enough for the kernels' u32 indices.
    pub fn validate(&self) -> Result<()> {
        let Dims { rows, cols, mask_rows, mask_cols } = *self;
        ensure(rows > 0 && cols > 0, || format!("the image is empty ({rows} × {cols})"))?;
        ensure(mask_rows > 0 && mask_cols > 0, || format!("the mask is empty ({mask_rows} × {mask_cols})"))?;
        ensure(mask_rows % 2 == 1 && mask_cols % 2 == 1, || {
            format!(
                "the mask is {mask_rows} × {mask_cols}: both sides must be odd (the centre is the origin)"
            )
        })?;
        let max = MAX_MASK_SIDE as usize;
        ensure(mask_rows <= max && mask_cols <= max, || {
            format!("the mask is {mask_rows} × {mask_cols}: sides are limited to {max}")
        })?;
        ensure(rows <= u32::MAX as usize && cols <= u32::MAX as usize, || {
            format!("the image is {rows} × {cols}: sides are limited to {}", u32::MAX)
        })
    }

    /// Useful work of one launch, for `--profile`: the image read once, the output written once,
    /// the mask read once; one FMA (2 flops) per pixel and mask element.
    fn work(&self, bytes_per_value: f64) -> Work {
        let (pixels, taps) = ((self.rows * self.cols) as f64, (self.mask_rows * self.mask_cols) as f64);
        Work { bytes: bytes_per_value * (2.0 * pixels + taps), flops: 2.0 * pixels * taps }
    }

    /// Validates the sides and that the views hold `rows·cols` and `mask_rows·mask_cols` values.
    fn check_views<T: Element>(
        &self,
        image: &BufferView<'_, T>,
        mask: &BufferView<'_, T>,
        output: &BufferViewMut<'_, T>,
    ) -> Result<()> {
        self.validate()?;
        let (pixels, taps) = (self.rows * self.cols, self.mask_rows * self.mask_cols);
        for (what, len, expected) in
            [("image", image.len(), pixels), ("mask", mask.len(), taps), ("output", output.len(), pixels)]
        {
            ensure(len == expected, || {
                format!("the {what} holds {len} values where {expected} were expected")
            })?;
        }
        Ok(())
    }
}

/// The first non-finite value in row-major order is reported; rows are searched on all cores.
fn check_finite<T: Copy + Into<f64> + Sync>(what: &str, values: ArrayView2<T>) -> Result<()> {
    let first_bad = values.outer_iter().into_par_iter().enumerate().find_map_first(|(i, row)| {
        row.iter().position(|v| !(*v).into().is_finite()).map(|j| (i, j, row[j].into()))
    });
    match first_bad {
        None => Ok(()),
        Some((i, j, v)) => Err(Error::InvalidInput(format!(
            "the {what} holds a non-finite value ({v}) at row {i}, column {j}"
        ))),
    }
}

/// Device times of one convolution, milliseconds, from [`Device::mark`]s (CUDA events on a GPU,
/// the wall clock in the simulator).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Timings {
    /// Host-to-device copies of the image and the mask, and the output's allocation.
    pub upload_ms: f64,
    /// The kernel.
    pub kernel_ms: f64,
    /// Device-to-host copy of the result.
    pub download_ms: f64,
}

/// An image, a mask and an output buffer on a device, ready for repeated kernel launches (what the
/// benchmark times). Element type f32 for [`Variant`]s, f64 for [`Convolution::launch_f64`].
pub struct Convolution<'d, T: Element> {
    device: &'d Device,
    image: Buffer<T>,
    mask: Buffer<T>,
    output: Buffer<T>,
    dims: Dims,
}

impl<'d, T: Element + Into<f64>> Convolution<'d, T> {
    /// Validates (see [`validate`]) and uploads `image` and `mask` (any memory layout), and
    /// allocates the output.
    pub fn upload(device: &'d Device, image: ArrayView2<T>, mask: ArrayView2<T>) -> Result<Self> {
        validate(image, mask)?;
        let dims = Dims::of(image, mask);
        let image_buf = device.upload(standard_slice(&image.as_standard_layout()))?;
        let mask_buf = device.upload(standard_slice(&mask.as_standard_layout()))?;
        let output = device.alloc::<T>(dims.rows * dims.cols)?;
        Ok(Self { device, image: image_buf, mask: mask_buf, output, dims })
    }

    /// Waits for the launches and copies the result back.
    pub fn download(&self) -> Result<Array2<T>> {
        let data = self.device.download(&self.output)?;
        Ok(Array2::from_shape_vec(self.dim(), data).expect("rows·cols values"))
    }

    /// `(rows, cols)` of the image and of the result.
    pub fn dim(&self) -> (usize, usize) {
        (self.dims.rows, self.dims.cols)
    }

    /// `(rows, cols)` of the mask.
    pub fn mask_dim(&self) -> (usize, usize) {
        (self.dims.mask_rows, self.dims.mask_cols)
    }

    /// The image, the mask and the output as kernel arguments.
    fn views(&mut self) -> Result<(BufferView<'_, T>, BufferView<'_, T>, BufferViewMut<'_, T>)> {
        Ok((self.image.view(..)?, self.mask.view(..)?, self.output.view_mut(..)?))
    }
}

/// The contiguous row-major data of a standard-layout array.
fn standard_slice<'a, T>(array: &'a ndarray::CowArray<'_, T, ndarray::Ix2>) -> &'a [T] {
    array.as_slice().expect("standard layout is contiguous")
}

impl Convolution<'_, f32> {
    /// The minimum and maximum of the result (NaNs ignored), reduced on the device: what
    /// `--scaling rescale` maps to `[0, 255]`, without a pass over the downloaded image.
    pub fn output_range(&self) -> Result<(f32, f32)> {
        crate::reduce::Reducer::new(self.device)?.min_max(&self.output)
    }

    /// Queues `variant` on the device (asynchronous on a GPU; [`Convolution::download`] waits).
    pub fn launch(&mut self, variant: Variant) -> Result<()> {
        let (device, dims) = (self.device, self.dims);
        let (image, mask, output) = self.views()?;
        launch_on(device, device.queue(), variant, dims, image, mask, output)
    }
}

impl Convolution<'_, f64> {
    /// Queues the f64 kernel `conv2d_naive_f64` (asynchronous on a GPU).
    pub fn launch_f64(&mut self) -> Result<()> {
        let (device, dims) = (self.device, self.dims);
        let (image, mask, output) = self.views()?;
        launch_f64_on(device, device.queue(), dims, image, mask, output)
    }
}

/// Queues `variant` on `queue` over row-major views: `image` and `output` of `dims.rows ×
/// dims.cols` values, `mask` of `dims.mask_rows × dims.mask_cols` (sides checked by
/// [`Dims::validate`], lengths against them; values are not read on the host). What
/// [`Convolution::launch`] runs, and what a binding runs on another library's arrays.
pub fn launch_on(
    device: &Device,
    queue: &Queue,
    variant: Variant,
    dims: Dims,
    image: BufferView<'_, f32>,
    mask: BufferView<'_, f32>,
    output: BufferViewMut<'_, f32>,
) -> Result<()> {
    dims.check_views(&image, &mask, &output)?;
    let work = Some(dims.work(4.0));
    let (rows, cols, mask_rows, mask_cols) = dims.u32_sides();
    let args = (image, rows, cols, mask, mask_rows, mask_cols, output);
    // SAFETY: the image and output views hold rows × cols values and the mask view mask_rows ×
    // mask_cols, the sizes passed (`check_views`), and the mask sides are odd and at most
    // MAX_MASK_SIDE.
    unsafe {
        match variant {
            Variant::Naive => device.launch_counted(
                queue,
                &kernels::conv::CONV2D_NAIVE_F32,
                LaunchConfig::for_2d(dims.cols, dims.rows, BLOCK_X, BLOCK_Y),
                args,
                work,
            ),
            Variant::Tiled => {
                let shared = kernels::conv::tiled_shared_bytes(mask_rows, mask_cols);
                let grid = crate::Dim3::xy(cols.div_ceil(TILED_TILE_COLS), rows.div_ceil(TILED_TILE_ROWS));
                let cfg = LaunchConfig {
                    grid,
                    block: crate::Dim3::xy(BLOCK_X, TILED_BLOCK_Y),
                    shared_bytes: shared,
                };
                device.launch_counted(queue, &kernels::conv::CONV2D_TILED, cfg, args, work)
            }
        }
    }
}

/// Queues the f64 kernel `conv2d_naive_f64` on `queue` over row-major views (as [`launch_on`]).
pub fn launch_f64_on(
    device: &Device,
    queue: &Queue,
    dims: Dims,
    image: BufferView<'_, f64>,
    mask: BufferView<'_, f64>,
    output: BufferViewMut<'_, f64>,
) -> Result<()> {
    dims.check_views(&image, &mask, &output)?;
    let (rows, cols, mask_rows, mask_cols) = dims.u32_sides();
    // SAFETY: as for `launch_on`.
    unsafe {
        device.launch_counted(
            queue,
            &kernels::conv::CONV2D_NAIVE_F64,
            LaunchConfig::for_2d(dims.cols, dims.rows, BLOCK_X, BLOCK_Y),
            (image, rows, cols, mask, mask_rows, mask_cols, output),
            Some(dims.work(8.0)),
        )
    }
}

impl Dims {
    /// The four sides as the kernels take them (after [`Dims::validate`]: they fit).
    fn u32_sides(&self) -> (u32, u32, u32, u32) {
        (self.rows as u32, self.cols as u32, self.mask_rows as u32, self.mask_cols as u32)
    }
}

/// `image` convolved with `mask` by `variant` on `device`, with the device times of the copies and
/// the kernel.
pub fn convolve_timed(
    device: &Device,
    image: ArrayView2<f32>,
    mask: ArrayView2<f32>,
    variant: Variant,
) -> Result<(Array2<f32>, Timings)> {
    let start = device.mark()?;
    let mut conv = Convolution::upload(device, image, mask)?;
    let uploaded = device.mark()?;
    conv.launch(variant)?;
    let computed = device.mark()?;
    let result = conv.download()?;
    let downloaded = device.mark()?;
    let timings = Timings {
        upload_ms: device.elapsed_ms(&start, &uploaded)?,
        kernel_ms: device.elapsed_ms(&uploaded, &computed)?,
        download_ms: device.elapsed_ms(&computed, &downloaded)?,
    };
    Ok((result, timings))
}

/// `image` convolved with `mask` by `variant` on `device`.
pub fn convolve(
    device: &Device,
    image: ArrayView2<f32>,
    mask: ArrayView2<f32>,
    variant: Variant,
) -> Result<Array2<f32>> {
    let mut conv = Convolution::upload(device, image, mask)?;
    conv.launch(variant)?;
    conv.download()
}

/// `image` convolved with `mask` in f64 on `device` (`conv2d_naive_f64`).
pub fn convolve_f64(device: &Device, image: ArrayView2<f64>, mask: ArrayView2<f64>) -> Result<Array2<f64>> {
    let mut conv = Convolution::upload(device, image, mask)?;
    conv.launch_f64()?;
    conv.download()
}

/// CPU reference: the same sum in f64, rows in parallel (rayon). Validates like the kernels.
pub fn convolve_reference<T: Copy + Into<f64> + Sync>(
    image: ArrayView2<T>,
    mask: ArrayView2<T>,
) -> Result<Array2<f64>> {
    validate(image, mask)?;
    let (rows, cols) = image.dim();
    let (mask_rows, mask_cols) = mask.dim();
    let (dr, dc) = (mask_rows / 2, mask_cols / 2);
    // A row-major f64 copy (`iter` walks in logical order whatever the memory layout).
    let image: Vec<f64> = image.iter().map(|&v| v.into()).collect();
    let mask = mask.mapv(Into::<f64>::into);
    let mut out = vec![0.0f64; rows * cols];
    out.par_chunks_mut(cols).enumerate().for_each(|(i, out_row)| {
        for k in 0..mask_rows {
            // Image row i − k + dr, if inside the image.
            let Some(ii) = (i + dr).checked_sub(k).filter(|&ii| ii < rows) else { continue };
            let image_row = &image[ii * cols..(ii + 1) * cols];
            for l in 0..mask_cols {
                let m = mask[[k, l]];
                // out[j] += m · image[ii, j + dc − l] for the j that keep j + dc − l inside.
                let first = l.saturating_sub(dc);
                let end = (cols + l).saturating_sub(dc).min(cols);
                if first >= end {
                    continue;
                }
                let src = &image_row[first + dc - l..end + dc - l];
                for (o, &v) in out_row[first..end].iter_mut().zip(src) {
                    *o += m * v;
                }
            }
        }
    });
    Ok(Array2::from_shape_vec((rows, cols), out).expect("rows × cols values"))
}

/// How far a result is from the reference: `max |result − reference|` and `max |reference|`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Deviation {
    /// Largest absolute difference.
    pub max_abs_error: f64,
    /// Largest absolute value of the reference (the scale of the relative error).
    pub max_abs_reference: f64,
}

impl Deviation {
    /// Compares `result` with `reference` (same shape; a NaN in `result` gives an infinite error).
    pub fn of<T: Copy + Into<f64>>(result: ArrayView2<T>, reference: ArrayView2<f64>) -> Result<Deviation> {
        ensure(result.dim() == reference.dim(), || {
            format!("result is {:?} but the reference is {:?}", result.dim(), reference.dim())
        })?;
        let mut max_abs_error = 0.0f64;
        for (&r, &e) in result.iter().zip(reference) {
            let d = (r.into() - e).abs();
            max_abs_error = if d.is_nan() { f64::INFINITY } else { max_abs_error.max(d) };
        }
        let max_abs_reference = reference.iter().fold(0.0f64, |m, v| m.max(v.abs()));
        Ok(Deviation { max_abs_error, max_abs_reference })
    }

    /// `max_abs_error / max_abs_reference` (the absolute error when the reference is all zeros).
    pub fn relative(&self) -> f64 {
        if self.max_abs_reference > 0.0 {
            self.max_abs_error / self.max_abs_reference
        } else {
            self.max_abs_error
        }
    }
}

/// A normalised Gaussian mask (sum 1) of `size × size` (odd) with standard deviation `sigma`
/// pixels. `size` defaults to `2·⌈3σ⌉ + 1`.
pub fn gaussian_mask(sigma: f64, size: Option<usize>) -> Result<Array2<f64>> {
    ensure(sigma.is_finite() && sigma > 0.0, || format!("sigma must be positive, not {sigma}"))?;
    let size = size.unwrap_or(2 * (3.0 * sigma).ceil() as usize + 1);
    check_side(size)?;
    let half = (size / 2) as f64;
    let g = Array2::from_shape_fn((size, size), |(i, j)| {
        let (y, x) = (i as f64 - half, j as f64 - half);
        (-(x * x + y * y) / (2.0 * sigma * sigma)).exp()
    });
    let total = g.sum();
    Ok(g.mapv(|v| v / total))
}

/// A `size × size` box (mean) filter: every value `1 / size²`.
pub fn box_mask(size: usize) -> Result<Array2<f64>> {
    check_side(size)?;
    Ok(Array2::from_elem((size, size), 1.0 / (size * size) as f64))
}

/// The 3×3 sharpening mask `[[0, −1, 0], [−1, 5, −1], [0, −1, 0]]` (sum 1).
pub fn sharpen_mask() -> Array2<f64> {
    ndarray::array![[0.0, -1.0, 0.0], [-1.0, 5.0, -1.0], [0.0, -1.0, 0.0]]
}

/// A `size × size` mask of values uniform in `[0, 1)` from `seed`, normalised to sum 1.
pub fn random_mask(size: usize, seed: u64) -> Result<Array2<f64>> {
    check_side(size)?;
    let mut rng = SmallRng::seed_from_u64(seed);
    let m = Array2::from_shape_simple_fn((size, size), || rng.random_range(0.0..1.0f64));
    let total = m.sum();
    Ok(m.mapv(|v| v / total))
}

fn check_side(size: usize) -> Result<()> {
    ensure(size % 2 == 1 && size <= MAX_MASK_SIDE as usize, || {
        format!("mask size {size} must be odd and at most {MAX_MASK_SIDE}")
    })
}

/// Parses a mask from text: one mask row per line, numbers separated by spaces, tabs or commas;
/// blank lines and lines starting with `#` are skipped. Every row must have the same length.
/// (Odd sides and finite values are checked by [`validate`] when the mask is used.)
pub fn parse_mask(text: &str) -> Result<Array2<f64>> {
    let mut values = Vec::new();
    let mut cols = None;
    let mut rows = 0;
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let row: Vec<f64> = line
            .split(|c: char| c.is_whitespace() || c == ',')
            .filter(|t| !t.is_empty())
            .map(|t| {
                t.parse::<f64>()
                    .map_err(|_| Error::InvalidInput(format!("line {}: `{t}` is not a number", n + 1)))
            })
            .collect::<Result<_>>()?;
        let expected = *cols.get_or_insert(row.len());
        ensure(row.len() == expected, || {
            format!("line {}: {} numbers, but the first mask row has {expected}", n + 1, row.len())
        })?;
        values.extend(row);
        rows += 1;
    }
    ensure(rows > 0, || "the mask file holds no numbers".into())?;
    Ok(Array2::from_shape_vec((rows, cols.unwrap_or(0)), values).expect("rows × cols values"))
}

/// Reads a mask file (format of [`parse_mask`]).
pub fn load_mask(path: &Path) -> Result<Array2<f64>> {
    let text = std::fs::read_to_string(path).map_err(|e| Error::File {
        path: path.to_path_buf(),
        message: format!("cannot read the mask: {e}"),
    })?;
    parse_mask(&text).map_err(|e| match e {
        Error::InvalidInput(message) => Error::File { path: path.to_path_buf(), message },
        other => other,
    })
}
