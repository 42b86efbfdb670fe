//! `lombscargle`: the Lomb-Scargle periodogram of unevenly sampled data, on the GPU (or the
//! simulator, or the CPU reference). Writes a CSV of `(ω, P)`, a plot and with `--npy` the power
//! as a NumPy array, and prints the peak.
//!
//! Without `--input` it uses the benchmark signal: 2^10 candidate times in `[0.01, 10π]` of which
//! about 10% are kept (seeded), `y = 2·cos(x + π/2)`, so the peak is at ω = 1.

use anyhow::Context;
use clap::Parser;
use kernel_suite::cli::{self, DeviceArgs, Target, Timing};
use kernel_suite::error::Error;
use kernel_suite::lombscargle::{
    Options, Precision, Variant, benchmark_signal, frequency_grid, lombscargle, lombscargle_reference, peak,
    relative_error,
};
use kernel_suite::npy;
use kernel_suite::plot::{self, LineChart};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// Lomb-Scargle periodogram: angular frequencies ω (rad per unit of t), P(ω) as
/// scipy.signal.lombscargle(t, y, ω, precenter, normalize) computes it in SciPy 1.15 – 1.18 (its
/// defaults floating_mean=False, no weights).
#[derive(Parser)]
#[command(version = cli::VERSION)]
struct Args {
    /// CSV of `t,y` rows (a header line, blank lines and `#` comments are skipped). Default: the
    /// benchmark signal (peak at ω = 1).
    #[arg(long, short)]
    input: Option<PathBuf>,
    /// Lowest angular frequency, > 0.
    #[arg(long, default_value_t = 0.01)]
    fmin: f64,
    /// Highest angular frequency.
    #[arg(long, default_value_t = 10.0)]
    fmax: f64,
    /// Number of frequencies, evenly spaced from fmin to fmax.
    #[arg(long, default_value_t = 1 << 20)]
    count: usize,
    /// Subtract the mean of y first (SciPy's precenter, deprecated there in 1.17: the same as passing
    /// y − mean(y)).
    #[arg(long)]
    precenter: bool,
    /// Scale P by 2/Σy², Σy² of the y used (after --precenter), as SciPy ≥ 1.15 does (SciPy ≤ 1.14
    /// took Σy² before centring).
    #[arg(long)]
    normalize: bool,
    /// Kernel: precise (libdevice sincos), fast (hardware sin/cos, f32 only), recurrence (rotation
    /// from frequency to frequency; needs the uniform grid, which --fmin/--fmax/--count give).
    #[arg(long, value_enum, default_value_t = Variant::Precise)]
    variant: Variant,
    /// Arithmetic of the kernel (the CPU reference is always f64).
    #[arg(long, value_enum, default_value_t = Precision::F64)]
    precision: Precision,
    /// Seed of the benchmark signal's sample selection.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Output CSV of `omega,power` rows.
    #[arg(long, short, default_value = "lombscargle.csv")]
    output: PathBuf,
    /// Also write the power as a NumPy array (float64, or float32 as computed with --precision
    /// f32), for numpy.load; the frequencies are the CSV's first column.
    #[arg(long, value_name = "FILE.npy")]
    npy: Option<PathBuf>,
    /// Also compute the f64 CPU reference and fail if max|P − P_ref|/max|P_ref| exceeds the
    /// variant's bound (1e-10 in f64, 1e-4 precise f32, 1e-3 fast or recurrence f32).
    #[arg(long)]
    check: bool,
    /// Output plot of the periodogram (.png or .svg).
    #[arg(long, default_value = "lombscargle.png")]
    plot: PathBuf,
    #[command(flatten)]
    device: DeviceArgs,
}

/// Reads `t,y` rows (the `csv` crate: fields trimmed, `#` lines skipped). The first row may be a
/// header.
fn read_samples(path: &Path) -> Result<(Vec<f64>, Vec<f64>), Error> {
    let file_error = |message: String| Error::File { path: path.to_path_buf(), message };
    let text = std::fs::read_to_string(path).map_err(|e| file_error(e.to_string()))?;
    let mut reader = csv::ReaderBuilder::new()
        .has_headers(false)
        .comment(Some(b'#'))
        .trim(csv::Trim::All)
        .flexible(true)
        .from_reader(text.as_bytes());
    let (mut t, mut y) = (Vec::new(), Vec::new());
    for (index, record) in reader.records().enumerate() {
        let record = record.map_err(|e| file_error(e.to_string()))?;
        let parsed = match (record.len(), record.get(0), record.get(1)) {
            (2, Some(a), Some(b)) => a.parse::<f64>().ok().zip(b.parse::<f64>().ok()),
            _ => None,
        };
        match parsed {
            Some((a, b)) => {
                t.push(a);
                y.push(b);
            }
            None if index == 0 => {} // a header
            None => {
                // The line in the file: the reader's own count skips comment lines, and its
                // position is where it started looking, blank lines before the row included.
                let from = record.position().map_or(0, |p| p.byte() as usize);
                let start = from + text[from..].len() - text[from..].trim_start().len();
                let line = text.as_bytes()[..start].iter().filter(|&&b| b == b'\n').count() + 1;
                let row = record.iter().collect::<Vec<_>>().join(",");
                return Err(file_error(format!("line {line}: expected `t,y`, got `{row}`")));
            }
        }
    }
    if t.is_empty() {
        return Err(file_error("no `t,y` rows".into()));
    }
    Ok((t, y))
}

/// Writes the `omega,power` table.
fn write_csv(path: &Path, freqs: &[f64], power: &[f64]) -> Result<(), Error> {
    let file_error = |e: csv::Error| Error::File { path: path.to_path_buf(), message: e.to_string() };
    let mut out = csv::Writer::from_path(path).map_err(file_error)?;
    out.write_record(["omega", "power"]).map_err(file_error)?;
    for (w, p) in freqs.iter().zip(power) {
        out.serialize((w, p)).map_err(file_error)?;
    }
    out.flush().map_err(|e| Error::File { path: path.to_path_buf(), message: e.to_string() })
}

/// The largest relative error `--check` accepts for a variant and precision (the test suite's).
fn check_bound(variant: Variant, precision: Precision) -> f64 {
    match (variant, precision) {
        (_, Precision::F64) => 1e-10,
        (Variant::Precise, Precision::F32) => 1e-4,
        _ => 1e-3,
    }
}

fn main() -> ExitCode {
    cli::run(|| {
        let timing = Timing::start();
        let args = Args::parse();
        plot::Format::of(&args.plot)?;
        let (x, y, source) = match &args.input {
            Some(path) => {
                let (x, y) = timing.io(|| read_samples(path))?;
                (x, y, path.display().to_string())
            }
            None => {
                let (x, y) = benchmark_signal(1 << 10, 0.1, args.seed);
                (x, y, format!("the benchmark signal, seed {}", args.seed))
            }
        };
        let freqs = frequency_grid(args.fmin, args.fmax, args.count)?;
        println!(
            "lombscargle: {} samples ({source}), {} angular frequencies in [{}, {}]",
            x.len(),
            freqs.len(),
            args.fmin,
            args.fmax
        );
        let options = Options {
            variant: args.variant,
            precision: args.precision,
            precenter: args.precenter,
            normalize: args.normalize,
        };
        let reference =
            || timing.cpu(|| lombscargle_reference(&x, &y, &freqs, args.precenter, args.normalize));
        let target = args.device.select()?;
        let power = match &target {
            Target::CpuReference => {
                if args.check {
                    println!(
                        "note: --check compares the kernels with the reference; this run is the reference"
                    );
                }
                reference()?
            }
            Target::Kernels(device) => {
                let power = lombscargle(device, &x, &y, &freqs, &options).context("periodogram kernel")?;
                println!("{}: {} variant, {}", device.describe(), args.variant, args.precision);
                if args.check {
                    let (error, bound) =
                        (relative_error(&power, &reference()?), check_bound(args.variant, args.precision));
                    println!("max|P − P_ref|/max|P_ref| = {error:.3e} (bound {bound:.0e})");
                    anyhow::ensure!(
                        error <= bound,
                        "the kernel's periodogram differs from the CPU reference by {error:.3e} > {bound:.0e}"
                    );
                }
                power
            }
        };
        let (w, p) = peak(&freqs, &power).context("the periodogram has no finite value")?;
        println!(
            "peak: ω = {w:.6} (P = {p:.6}){}",
            if args.input.is_none() { "; expected ω = 1" } else { "" }
        );
        timing.io(|| -> anyhow::Result<()> {
            write_csv(&args.output, &freqs, &power)?;
            if let Some(path) = &args.npy {
                match (&target, args.precision) {
                    (Target::Kernels(_), Precision::F32) => {
                        let values: Vec<f32> = power.iter().map(|&v| v as f32).collect();
                        npy::write(path, &ndarray::ArrayView1::from(&values))?;
                    }
                    _ => npy::write(path, &ndarray::ArrayView1::from(&power))?,
                }
            }
            let points = freqs.iter().copied().zip(power.iter().copied()).collect();
            LineChart::new(
                format!("Lomb-Scargle periodogram, {} samples", x.len()),
                "angular frequency ω",
                if args.normalize { "normalised power" } else { "power P(ω)" },
            )
            .with_series("", points)
            .save(&args.plot)?;
            Ok(())
        })?;
        let npy_note = args.npy.as_ref().map_or(String::new(), |p| format!(", {}", p.display()));
        println!("wrote {}{npy_note} and {}", args.output.display(), args.plot.display());
        args.device.finish(&target, &timing)?;
        Ok(())
    })
}
