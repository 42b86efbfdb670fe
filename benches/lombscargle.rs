//! Lomb-Scargle reference table: `cargo bench --bench lombscargle` (needs a GPU).
//!
//! Per variant and precision: registers (ptxas, or the driver's for JIT-compiled rows), the first
//! launch and the first pass (module load + first launch; context creation is timed separately),
//! the warm median over many event-timed launches, the speed-up over the f64 CPU reference (rayon,
//! all cores) and the error `max|P − P_ref| / max|P_ref|` against it.
//!
//! Signals: the default (2^10 candidate times in [0.01, 10π], ~10% kept, seed 1,
//! `y = 2·cos(x + π/2)`, 2^20 angular frequencies in [0.01, 10]) and 16384 samples (every candidate
//! of 2^14 kept) on the same frequencies. For the large one the CPU reference runs on every 256th
//! frequency plus the 513 around the peak, its time is scaled to all frequencies, and the error is
//! taken over that subset.
//!
//! Rows marked "PTX JIT" come from devices opened with `Device::gpu_with`, which loads the embedded
//! PTX through the driver's JIT: once plain (`force_ptx`), once with `CU_JIT_MAX_REGISTERS` (the
//! register-capped variant, also `--max-registers` on every command).
//!
//! `--sweep`: also time other launch shapes (block sizes, and grids of a few blocks per SM that
//! loop over the frequencies).

use kernel_suite::bench::{Stats, Table};
use kernel_suite::device::ModuleImage;
use kernel_suite::lombscargle::{
    Options, Plan, Precision, Variant, benchmark_signal, frequency_grid, lombscargle_reference,
    relative_error,
};
use kernel_suite::{Device, GpuOptions};
use std::time::Instant;

/// Register cap of the capped rows.
const MAX_REGISTERS: u32 = 32;

fn ms(since: Instant) -> f64 {
    since.elapsed().as_secs_f64() * 1e3
}

/// One benchmark problem: samples, frequencies, and the reference on (a subset of) them.
struct Problem {
    name: String,
    x: Vec<f64>,
    y: Vec<f64>,
    freqs: Vec<f64>,
    /// Indices of the frequencies the reference covers.
    checked: Vec<usize>,
    reference: Vec<f64>,
    /// CPU reference time for all frequencies, ms.
    cpu_ms: f64,
    warm_runs: usize,
}

impl Problem {
    fn new(
        name: &str,
        x: Vec<f64>,
        y: Vec<f64>,
        freqs: Vec<f64>,
        stride: usize,
        warm_runs: usize,
    ) -> anyhow::Result<Self> {
        let m = freqs.len();
        let checked: Vec<usize> = if stride == 1 {
            (0..m).collect()
        } else {
            let near_peak = freqs.iter().position(|&w| w >= 1.0).unwrap_or(0);
            let mut idx: Vec<usize> = (0..m)
                .step_by(stride)
                .chain(near_peak.saturating_sub(256)..(near_peak + 257).min(m))
                .collect();
            idx.sort_unstable();
            idx.dedup();
            idx
        };
        let subset: Vec<f64> = checked.iter().map(|&k| freqs[k]).collect();
        let start = Instant::now();
        let reference = lombscargle_reference(&x, &y, &subset, false, false)?;
        let cpu_ms = ms(start) * m as f64 / subset.len() as f64;
        Ok(Problem { name: name.into(), x, y, freqs, checked, reference, cpu_ms, warm_runs })
    }

    fn error(&self, power: &[f64]) -> f64 {
        let picked: Vec<f64> = self.checked.iter().map(|&k| power[k]).collect();
        relative_error(&picked, &self.reference)
    }

    fn describe(&self) -> String {
        format!("{}: {} samples × {} frequencies", self.name, self.x.len(), self.freqs.len())
    }
}

/// A row of the table.
struct Row {
    variant: String,
    precision: Precision,
    image: &'static str,
    registers: String,
    first_launch_ms: f64,
    first_pass_ms: f64,
    warm: Stats,
    speedup: f64,
    error: f64,
}

fn table(rows: &[Row]) -> Table {
    let mut t = Table::new(&[
        "variant",
        "precision",
        "image",
        "registers",
        "first launch ms",
        "first pass ms",
        "warm median ms",
        "warm min ms",
        "speed-up vs CPU",
        "max error",
    ]);
    for r in rows {
        t.row(&[
            r.variant.clone(),
            r.precision.to_string(),
            r.image.to_string(),
            r.registers.clone(),
            format!("{:.3}", r.first_launch_ms),
            format!("{:.3}", r.first_pass_ms),
            format!("{:.4}", r.warm.median_ms),
            format!("{:.4}", r.warm.min_ms),
            format!("{:.0}×", r.speedup),
            format!("{:.1e}", r.error),
        ]);
    }
    t
}

/// A row through `Device` (the embedded cubin): first launch (wall clock, launch + wait), warm
/// median, error.
fn row(
    device: &Device,
    problem: &Problem,
    variant: Variant,
    precision: Precision,
    shape: Option<(u32, Option<u32>)>,
    note: &str,
) -> anyhow::Result<Row> {
    let startup = device.startup().expect("a GPU device");
    let options = Options { variant, precision, ..Options::default() };
    let mut plan = Plan::new(device, &problem.x, &problem.y, &problem.freqs, &options)?;
    if let Some((block, blocks)) = shape {
        plan = plan.with_launch(block, blocks, kernel_suite::lombscargle::TILE)?;
    }
    let start = Instant::now();
    plan.launch()?;
    device.synchronize()?;
    let first_launch_ms = ms(start);
    let error = problem.error(&plan.result()?);
    let warm = Stats::of(&device.time_ms(3, problem.warm_runs, || plan.launch())?);
    let registers = device.kernel_registers(plan.kernel_name())?.map_or("?".into(), |r| r.to_string());
    let label = match shape {
        Some((block, Some(blocks))) => format!("{variant} ({blocks} × {block}){note}"),
        Some((block, None)) => format!("{variant} (block {block}){note}"),
        None => format!("{variant}{note}"),
    };
    Ok(Row {
        variant: label,
        precision,
        image: match startup.image {
            ModuleImage::Cubin => "cubin",
            ModuleImage::Ptx => "PTX JIT",
        },
        registers,
        first_launch_ms,
        first_pass_ms: startup.module_load_ms + first_launch_ms,
        warm,
        speedup: problem.cpu_ms / warm.median_ms,
        error,
    })
}

fn main() -> std::process::ExitCode {
    kernel_suite::bench::run(measure)
}

/// The benchmark; without a GPU, or on any failure, its error as one line (`bench::run`).
fn measure() -> anyhow::Result<()> {
    let sweep = std::env::args().any(|a| a == "--sweep");

    // The first device of the process pays for the driver and the context; the PTX-loading devices
    // opened below retain the same (primary) context, so their start-up is mostly the JIT.
    let device = Device::gpu(0, &kernel_suite::KERNELS)?;
    let startup = device.startup().expect("a GPU device");
    println!("device: {}", device.describe());
    println!(
        "cuInit: {:.1} ms; context creation: {:.1} ms; module load (embedded cubin): {:.2} ms",
        startup.init_ms, startup.context_ms, startup.module_load_ms
    );

    let freqs = frequency_grid(0.01, 10.0, 1 << 20)?;
    let (x, y) = benchmark_signal(1 << 10, 0.1, 1);
    let default = Problem::new("default signal", x, y, freqs.clone(), 1, 200)?;
    let (x, y) = benchmark_signal(1 << 14, 1.0, 1);
    let large = Problem::new("16384 samples", x, y, freqs, 256, 30)?;
    println!(
        "CPU reference (f64, {} threads): {:.1} ms for the default, {:.0} ms (scaled) for 16384 samples",
        rayon::current_num_threads(),
        default.cpu_ms,
        large.cpu_ms
    );

    let cases = [
        (Variant::Precise, Precision::F32),
        (Variant::Precise, Precision::F64),
        (Variant::Fast, Precision::F32),
        (Variant::Recurrence, Precision::F32),
        (Variant::Recurrence, Precision::F64),
    ];
    let mut rows = Vec::new();
    for (variant, precision) in cases {
        rows.push(row(&device, &default, variant, precision, None, "")?);
    }
    let capped_note = format!(", ≤ {MAX_REGISTERS} registers");
    for (options, note) in [
        (GpuOptions { force_ptx: true, ..GpuOptions::default() }, ""),
        (GpuOptions { max_registers: Some(MAX_REGISTERS), ..GpuOptions::default() }, capped_note.as_str()),
    ] {
        let jit_device = Device::gpu_with(0, &kernel_suite::KERNELS, options)?;
        for precision in [Precision::F32, Precision::F64] {
            rows.push(row(&jit_device, &default, Variant::Precise, precision, None, note)?);
        }
    }
    println!("\n{}\n\n{}", default.describe(), table(&rows).render());

    let mut rows = Vec::new();
    for (variant, precision) in cases {
        rows.push(row(&device, &large, variant, precision, None, "")?);
    }
    println!("{}\n\n{}", large.describe(), table(&rows).render());

    if sweep {
        let mut rows = Vec::new();
        for problem in [&default, &large] {
            for (variant, precision) in cases {
                for shape in [
                    (64, None),
                    (256, None),
                    (128, Some(132 * 4)),
                    (128, Some(132 * 8)),
                    (128, Some(132 * 16)),
                ] {
                    rows.push(row(&device, problem, variant, precision, Some(shape), "")?);
                }
            }
        }
        println!("launch shapes (default signal first, then 16384 samples)\n\n{}", table(&rows).render());
    }
    Ok(())
}
