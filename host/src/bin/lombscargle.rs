//! `lombscargle`: the Lomb-Scargle periodogram of unevenly sampled data, on the GPU (or the
//! simulator, or the CPU reference). Writes a CSV of `(ω, P)` and a plot, and prints the peak.
//!
//! Without `--input` it uses the benchmark signal: 2^10 candidate times in `[0.01, 10π]` of which
//! about 10% are kept (seeded), `y = 2·cos(x + π/2)`, so the peak is at ω = 1.

use anyhow::Context;
use clap::Parser;
use kernel_suite::cli::{self, DeviceArgs, Target};
use kernel_suite::error::Error;
use kernel_suite::lombscargle::{
    Options, Precision, Variant, benchmark_signal, frequency_grid, lombscargle, lombscargle_reference, peak,
};
use kernel_suite::plot::{self, LineChart};
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

/// Lomb-Scargle periodogram: angular frequencies ω (rad per unit of t), P(ω) as in
/// scipy.signal.lombscargle.
#[derive(Parser)]
#[command(version)]
struct Args {
    /// CSV of `t,y` rows (a header line, blank lines and `#` comments are skipped). Default: the
    /// benchmark signal (peak at ω = 1).
    #[arg(long)]
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
    /// Subtract the mean of y first.
    #[arg(long)]
    precenter: bool,
    /// Scale P by 2/Σy² (Σy² of y as given, before any centring, as SciPy does).
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
    #[arg(long, default_value = "lombscargle.csv")]
    output: PathBuf,
    /// Output plot of the periodogram (.png or .svg).
    #[arg(long, default_value = "lombscargle.png")]
    plot: PathBuf,
    #[command(flatten)]
    device: DeviceArgs,
}

/// Reads `t,y` rows. The first non-comment line may be a header.
fn read_samples(path: &Path) -> Result<(Vec<f64>, Vec<f64>), Error> {
    let file_error = |message: String| Error::File { path: path.to_path_buf(), message };
    let text = std::fs::read_to_string(path).map_err(|e| file_error(e.to_string()))?;
    let (mut t, mut y) = (Vec::new(), Vec::new());
    let mut first = true;
    for (number, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let fields: Vec<&str> = line.split(',').map(str::trim).collect();
        let parsed = match fields.as_slice() {
            [a, b] => a.parse::<f64>().ok().zip(b.parse::<f64>().ok()),
            _ => None,
        };
        match parsed {
            Some((a, b)) => {
                t.push(a);
                y.push(b);
            }
            None if first => {} // a header
            None => return Err(file_error(format!("line {}: expected `t,y`, got `{line}`", number + 1))),
        }
        first = false;
    }
    if t.is_empty() {
        return Err(file_error("no `t,y` rows".into()));
    }
    Ok((t, y))
}

fn write_csv(path: &Path, freqs: &[f64], power: &[f64]) -> Result<(), Error> {
    let file_error = |e: std::io::Error| Error::File { path: path.to_path_buf(), message: e.to_string() };
    let mut out = BufWriter::new(std::fs::File::create(path).map_err(file_error)?);
    writeln!(out, "omega,power").map_err(file_error)?;
    for (w, p) in freqs.iter().zip(power) {
        writeln!(out, "{w},{p}").map_err(file_error)?;
    }
    out.flush().map_err(file_error)
}

fn main() -> ExitCode {
    cli::run(|| {
        let args = Args::parse();
        plot::Format::of(&args.plot)?;
        let (x, y, source) = match &args.input {
            Some(path) => {
                let (x, y) = read_samples(path)?;
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
        let start = Instant::now();
        let target = args.device.select()?;
        let power = match &target {
            Target::CpuReference => {
                let power = lombscargle_reference(&x, &y, &freqs, args.precenter, args.normalize)?;
                println!(
                    "CPU reference (f64, {} threads): {:.1} ms",
                    rayon::current_num_threads(),
                    start.elapsed().as_secs_f64() * 1e3
                );
                power
            }
            Target::Kernels(device) => {
                let power = lombscargle(device, &x, &y, &freqs, &options).context("periodogram kernel")?;
                println!(
                    "{}: {} variant, {}: {:.1} ms including copies and the first launch",
                    device.describe(),
                    args.variant,
                    args.precision,
                    start.elapsed().as_secs_f64() * 1e3
                );
                power
            }
        };
        let (w, p) = peak(&freqs, &power).context("the periodogram has no finite value")?;
        println!(
            "peak: ω = {w:.6} (P = {p:.6}){}",
            if args.input.is_none() { "; expected ω = 1" } else { "" }
        );
        write_csv(&args.output, &freqs, &power)?;
        let points = freqs.iter().copied().zip(power.iter().copied()).collect();
        LineChart::new(
            format!("Lomb-Scargle periodogram, {} samples", x.len()),
            "angular frequency ω",
            if args.normalize { "normalised power" } else { "power P(ω)" },
        )
        .with_series("", points)
        .save(&args.plot)?;
        println!("wrote {} and {}", args.output.display(), args.plot.display());
        args.device.finish(&target)?;
        Ok(())
    })
}
