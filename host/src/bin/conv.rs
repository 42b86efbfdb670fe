//! `conv`: convolves a grayscale image with a mask on the GPU (or the simulator, or the CPU
//! reference), with SciPy's `ndimage.convolve(mode='constant', cval=0)` semantics; writes the
//! result as a PNG and/or a NumPy array and reports the time of the copies and of the kernel.

use anyhow::Context;
use clap::Parser;
use kernel_suite::cli::{self, DeviceArgs, Target, Timing};
use kernel_suite::conv::{self, Convolution, Deviation, Variant};
use kernel_suite::image_io::{self, Scaling};
use kernel_suite::{Device, Precision, bench::Stats, npy};
use ndarray::{Array2, ArrayView2};
use std::path::PathBuf;
use std::process::ExitCode;

/// Convolves a grayscale image with a mask: out[i, j] = Σ mask[k, l] · image[i − k + dr, j − l + dc],
/// zero outside the image (scipy.ndimage.convolve with mode='constant', cval=0).
#[derive(Parser)]
#[command(version = cli::VERSION)]
struct Args {
    /// Input image (PNG or JPEG, converted to grayscale in [0, 1]). Default: an embedded procedural
    /// test pattern of --width × --height pixels (rings, checkerboard, ramp).
    #[arg(long, short)]
    input: Option<PathBuf>,
    /// Width of the embedded test pattern (without --input).
    #[arg(long, default_value_t = 1024)]
    width: usize,
    /// Height of the embedded test pattern (without --input).
    #[arg(long, default_value_t = 768)]
    height: usize,
    /// The mask: gaussian (normalised, --sigma), box (mean of --size × --size), sharpen (3×3),
    /// random (--size × --size values in [0, 1) from --seed, normalised).
    #[arg(long, value_enum, default_value_t = MaskKind::Gaussian)]
    mask: MaskKind,
    /// Standard deviation of the gaussian mask, pixels.
    #[arg(long, default_value_t = 2.0)]
    sigma: f64,
    /// Side of the mask, odd, at most 31. Default: 2⌈3σ⌉ + 1 for gaussian, 13 for box and random.
    #[arg(long)]
    size: Option<usize>,
    /// Seed of the random mask.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Read the mask from a text file instead: one row per line, numbers separated by spaces or
    /// commas, `#` comment lines; both sides odd, at most 31. Used as given (not normalised).
    #[arg(long, conflicts_with_all = ["mask", "sigma", "size", "seed"])]
    mask_file: Option<PathBuf>,
    /// Kernel: tiled (shared-memory tiles; f32) or naive (one thread per pixel; f32 or f64).
    /// Default: tiled, naive with --precision f64.
    #[arg(long, value_enum)]
    variant: Option<Variant>,
    /// Arithmetic of the kernel (the CPU reference is always f64).
    #[arg(long, value_enum, default_value_t = Precision::F32)]
    precision: Precision,
    /// Write the result to this PNG (8-bit grayscale). Values outside [0, 1] are handled by
    /// --scaling.
    #[arg(long, short)]
    output: Option<PathBuf>,
    /// Write the result to this NumPy file, rows × columns, float32 (float64 with --precision f64
    /// or --device cpu, as computed), for numpy.load.
    #[arg(long, value_name = "FILE.npy")]
    npy: Option<PathBuf>,
    /// How the result becomes 8-bit gray: clamp = clamp to [0, 1], then ×255 (keeps the brightness
    /// of normalised masks); rescale = map the result's own [min, max] to [0, 255] (for masks
    /// with negative or large values, e.g. edge detectors).
    #[arg(long, value_enum, default_value_t = Scaling::Clamp)]
    scaling: Scaling,
    /// Also compute the f64 CPU reference, print the maximum error against it and fail if the
    /// relative error max|result − reference| / max|reference| exceeds 1e-5.
    #[arg(long)]
    check: bool,
    /// Kernel launches to time (reports the median; the result is that of the last).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    runs: u32,
    #[command(flatten)]
    device: DeviceArgs,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
enum MaskKind {
    Gaussian,
    Box,
    Sharpen,
    Random,
}

/// Largest relative error `--check` accepts (the 1e-5).
const CHECK_TOLERANCE: f64 = 1e-5;

/// Procedural `rows × cols` test pattern in [0, 1]: a zone plate (rings of rising frequency) in a
/// disc, on a checkerboard of 32-pixel squares shaded by a horizontal ramp.
fn test_pattern(rows: usize, cols: usize) -> Array2<f64> {
    let scale = rows.min(cols).max(1) as f64;
    Array2::from_shape_fn((rows, cols), |(i, j)| {
        let (y, x) = ((i as f64 - rows as f64 / 2.0) / scale, (j as f64 - cols as f64 / 2.0) / scale);
        let r2 = x * x + y * y;
        if r2 < 0.16 {
            0.5 + 0.5 * (300.0 * r2).cos()
        } else {
            let ramp = j as f64 / cols.max(2) as f64;
            if (i / 32 + j / 32) % 2 == 0 { 0.2 + 0.6 * ramp } else { 0.8 - 0.6 * ramp }
        }
    })
}

/// The mask in f64, as it is defined (the f32 kernels get it rounded).
fn build_mask(args: &Args) -> anyhow::Result<Array2<f64>> {
    if let Some(path) = &args.mask_file {
        return Ok(conv::load_mask(path)?);
    }
    Ok(match args.mask {
        MaskKind::Gaussian => conv::gaussian_mask(args.sigma, args.size)?,
        MaskKind::Box => conv::box_mask(args.size.unwrap_or(13))?,
        MaskKind::Sharpen => {
            anyhow::ensure!(args.size.is_none_or(|s| s == 3), "the sharpen mask is 3×3 (--size 3 or none)");
            conv::sharpen_mask()
        }
        MaskKind::Random => conv::random_mask(args.size.unwrap_or(13), args.seed)?,
    })
}

/// The result as the kernel computed it.
enum Output {
    /// With its `[min, max]` when the device computed it (for `--scaling rescale`).
    F32(Array2<f32>, Option<(f32, f32)>),
    F64(Array2<f64>),
}

impl Output {
    fn as_f64(&self) -> Array2<f64> {
        match self {
            Output::F32(a, _) => a.mapv(f64::from),
            Output::F64(a) => a.clone(),
        }
    }
}

/// The kernel for `--variant`/`--precision`: tiled is f32 only.
fn choose_variant(variant: Option<Variant>, precision: Precision) -> anyhow::Result<Variant> {
    match (variant, precision) {
        (Some(Variant::Tiled), Precision::F64) => {
            anyhow::bail!("the tiled kernel is f32 only; use --variant naive with --precision f64")
        }
        (Some(v), _) => Ok(v),
        (None, Precision::F32) => Ok(Variant::Tiled),
        (None, Precision::F64) => Ok(Variant::Naive),
    }
}

/// Runs the chosen kernel with timing; with `rescale`, the f32 result's range comes from the device
/// (one reduction before the download) instead of a pass over the downloaded image.
fn run_kernels(
    device: &Device,
    image: ArrayView2<f64>,
    mask: ArrayView2<f64>,
    (variant, precision): (Variant, Precision),
    runs: u32,
    rescale: bool,
) -> anyhow::Result<Output> {
    Ok(match precision {
        Precision::F32 => {
            let (image, mask) = (image.mapv(|v| v as f32), mask.mapv(|v| v as f32));
            let mut range = None;
            let result = timed(
                device,
                image.view(),
                mask.view(),
                runs,
                |c| c.launch(variant),
                |c| {
                    range = rescale.then(|| c.output_range()).transpose()?;
                    Ok(())
                },
            )?;
            Output::F32(result, range)
        }
        Precision::F64 => Output::F64(timed(device, image, mask, runs, |c| c.launch_f64(), |_| Ok(()))?),
    })
}
/// Upload, `runs` launches and download, each between device marks; prints the times.
fn timed<T: kernel_suite::Element + Into<f64>>(
    device: &Device,
    image: ArrayView2<T>,
    mask: ArrayView2<T>,
    runs: u32,
    mut launch: impl FnMut(&mut Convolution<'_, T>) -> kernel_suite::Result<()>,
    before_download: impl FnOnce(&Convolution<'_, T>) -> kernel_suite::Result<()>,
) -> anyhow::Result<Array2<T>> {
    let start = device.mark()?;
    let mut conv = Convolution::upload(device, image, mask)?;
    let uploaded = device.mark()?;
    let upload_ms = device.elapsed_ms(&start, &uploaded)?;
    let mut kernel_ms = Vec::new();
    let mut before = uploaded;
    for _ in 0..runs {
        launch(&mut conv).context("kernel launch")?;
        let after = device.mark()?;
        kernel_ms.push(device.elapsed_ms(&before, &after)?);
        before = after;
    }
    before_download(&conv)?;
    let result = conv.download()?;
    let downloaded = device.mark()?;
    let kernel = Stats::of(&kernel_ms);
    println!(
        "{}: H2D {:.3} ms, kernel {:.4} ms{}, D2H {:.3} ms",
        device.describe(),
        upload_ms,
        kernel.median_ms,
        if runs > 1 { format!(" (median of {runs}, min {:.4})", kernel.min_ms) } else { String::new() },
        device.elapsed_ms(&before, &downloaded)?,
    );
    Ok(result)
}

fn main() -> ExitCode {
    cli::run(|| {
        let timing = Timing::start();
        let args = Args::parse();
        let variant = choose_variant(args.variant, args.precision)?;
        let image = match &args.input {
            Some(path) => timing.io(|| image_io::load_grayscale_f64(path))?,
            None => {
                anyhow::ensure!(
                    args.width > 0 && args.height > 0,
                    "the test pattern needs --width and --height > 0"
                );
                timing.io(|| test_pattern(args.height, args.width))
            }
        };
        let mask = build_mask(&args)?;
        conv::validate(image.view(), mask.view())?;
        let (rows, cols) = image.dim();
        let (mh, mw) = mask.dim();
        println!(
            "conv: image {cols}×{rows} ({}), mask {mw}×{mh}, {variant:?} kernel, {}",
            args.input.as_ref().map_or("test pattern".into(), |p| p.display().to_string()),
            args.precision
        );

        let reference = |what: &str| -> anyhow::Result<Array2<f64>> {
            let r = timing.cpu(|| conv::convolve_reference(image.view(), mask.view()))?;
            println!("CPU reference (f64, {} threads){what}", rayon::current_num_threads());
            Ok(r)
        };
        let target = args.device.select()?;
        let result = match &target {
            Target::CpuReference => {
                if args.check {
                    println!(
                        "note: --check compares the kernels with the reference; this run is the reference"
                    );
                }
                Output::F64(reference("")?)
            }
            Target::Kernels(device) => {
                let result = run_kernels(
                    device,
                    image.view(),
                    mask.view(),
                    (variant, args.precision),
                    args.runs,
                    args.scaling == Scaling::Rescale,
                )?;
                if args.check {
                    let d = Deviation::of(result.as_f64().view(), reference(" for --check")?.view())?;
                    println!(
                        "max |result − reference| = {:.3e}, max |reference| = {:.3e}, relative {:.3e}",
                        d.max_abs_error,
                        d.max_abs_reference,
                        d.relative()
                    );
                    anyhow::ensure!(
                        d.relative() <= CHECK_TOLERANCE,
                        "the kernel's result differs from the CPU reference by more than {CHECK_TOLERANCE:e} (relative)"
                    );
                }
                result
            }
        };
        timing.io(|| -> anyhow::Result<()> {
            if let Some(path) = &args.output {
                match &result {
                    Output::F32(a, Some(range)) => image_io::save_gray_in_range(path, a.view(), *range)?,
                    Output::F32(a, None) => image_io::save_grayscale(path, a.view(), args.scaling)?,
                    Output::F64(a) => {
                        image_io::save_grayscale(path, a.mapv(|v| v as f32).view(), args.scaling)?
                    }
                }
                println!("wrote {} ({:?} scaling)", path.display(), args.scaling);
            }
            if let Some(path) = &args.npy {
                match &result {
                    Output::F32(a, _) => npy::write(path, a)?,
                    Output::F64(a) => npy::write(path, a)?,
                }
                println!("wrote {}", path.display());
            }
            Ok(())
        })?;
        args.device.finish(&target, &timing)?;
        Ok(())
    })
}
