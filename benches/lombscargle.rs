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
//! Rows marked "PTX JIT" load the embedded PTX with `cuModuleLoadDataEx` here (through `cust`, on
//! the context `Device::gpu` made current): once plain, once with `CU_JIT_MAX_REGISTERS` (the
//! register-capped variant, which `Device` cannot load yet). They launch on their own stream.
//!
//! `--sweep`: also time other launch shapes (block sizes, and grids of a few blocks per SM that
//! loop over the frequencies).

use cust::event::{Event, EventFlags};
use cust::function::FunctionAttribute;
use cust::module::{Module, ModuleJitOption};
use cust::stream::{Stream, StreamFlags};
use kernel_suite::bench::{Stats, Table};
use kernel_suite::lombscargle::{
    Options, Plan, Precision, Variant, benchmark_signal, frequency_grid, lombscargle_reference,
    relative_error,
};
use kernel_suite::{Buffer, Device, Element, LaunchConfig, module};
use kernels::KernelArgs;
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
fn cubin_row(
    device: &Device,
    problem: &Problem,
    variant: Variant,
    precision: Precision,
    module_load_ms: f64,
    shape: Option<(u32, Option<u32>)>,
) -> anyhow::Result<Row> {
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
    let registers = module::resources(plan.kernel_name()).map_or("?".into(), |r| r.registers.to_string());
    let label = match shape {
        Some((block, Some(blocks))) => format!("{variant} ({blocks} × {block})"),
        Some((block, None)) => format!("{variant} (block {block})"),
        None => variant.to_string(),
    };
    Ok(Row {
        variant: label,
        precision,
        image: "cubin",
        registers,
        first_launch_ms,
        first_pass_ms: module_load_ms + first_launch_ms,
        warm,
        speedup: problem.cpu_ms / warm.median_ms,
        error,
    })
}

/// The precise kernel `name` (element type `T`) from a JIT-compiled module, on its own stream.
#[allow(clippy::too_many_arguments)]
fn jit_row<T: Element>(
    device: &Device,
    problem: &Problem,
    precision: Precision,
    name: &str,
    convert: impl Fn(f64) -> T,
    one: T,
    to_f64: impl Fn(T) -> f64,
    jit: (&Module, f64, &'static str),
) -> anyhow::Result<Row> {
    let (module, module_load_ms, image) = jit;
    let stream = Stream::new(StreamFlags::NON_BLOCKING, None)?;
    let (n, m) = (problem.x.len() as u32, problem.freqs.len() as u32);
    let c = |v: &[f64]| v.iter().map(|&a| convert(a)).collect::<Vec<T>>();
    let (x, y, freqs) =
        (device.upload(&c(&problem.x))?, device.upload(&c(&problem.y))?, device.upload(&c(&problem.freqs))?);
    let mut power: Buffer<T> = device.alloc(m as usize)?;
    let args =
        (x.as_kernel_ptr(), y.as_kernel_ptr(), n, freqs.as_kernel_ptr(), m, one, power.as_kernel_mut_ptr());
    let cfg = LaunchConfig::for_1d(m as usize, kernel_suite::lombscargle::BLOCK);
    let shared = (kernel_suite::lombscargle::TILE.min(n as usize) * 2 * std::mem::size_of::<T>()) as u32;
    let start = Instant::now();
    let function = module.get_function(name)?;
    // SAFETY: `args` matches the direct kernels' signature; the buffers hold n and m values.
    let launch = || unsafe { stream.launch(&function, cfg.grid.x, cfg.block.x, shared, &args.param_ptrs()) };
    launch()?;
    stream.synchronize()?;
    let first_launch_ms = ms(start);
    let error = problem.error(&device.download(&power)?.into_iter().map(to_f64).collect::<Vec<_>>());
    let registers = function.get_attribute(FunctionAttribute::NumRegisters)?;
    for _ in 0..3 {
        launch()?;
    }
    let mut times = Vec::with_capacity(problem.warm_runs);
    for _ in 0..problem.warm_runs {
        let (a, b) = (Event::new(EventFlags::DEFAULT)?, Event::new(EventFlags::DEFAULT)?);
        a.record(&stream)?;
        launch()?;
        b.record(&stream)?;
        b.synchronize()?;
        times.push(b.elapsed_time_f32(&a)? as f64);
    }
    let warm = Stats::of(&times);
    Ok(Row {
        variant: if image == "PTX JIT" {
            "precise".into()
        } else {
            format!("precise, ≤ {MAX_REGISTERS} registers")
        },
        precision,
        image,
        registers: registers.to_string(),
        first_launch_ms,
        first_pass_ms: module_load_ms + first_launch_ms,
        warm,
        speedup: problem.cpu_ms / warm.median_ms,
        error,
    })
}

fn main() -> anyhow::Result<()> {
    let sweep = std::env::args().any(|a| a == "--sweep");

    // Context creation, then `Device::gpu`, which finds the primary context alive and so mostly
    // loads the module (the embedded cubin on sm_90).
    let start = Instant::now();
    cust::init(cust::CudaFlags::empty())?;
    let context = cust::context::Context::new(cust::device::Device::get_device(0)?)?;
    let context_ms = ms(start);
    let start = Instant::now();
    let device = Device::gpu(0)?;
    let module_load_ms = ms(start);
    println!("device: {}", device.describe());
    println!(
        "context creation: {context_ms:.1} ms; Device::gpu after it (module load, stream): {module_load_ms:.2} ms"
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
        rows.push(cubin_row(&device, &default, variant, precision, module_load_ms, None)?);
    }
    let start = Instant::now();
    let jit = Module::from_ptx(module::PTX, &[])?;
    let jit_ms = ms(start);
    let start = Instant::now();
    let capped = Module::from_ptx(module::PTX, &[ModuleJitOption::MaxRegisters(MAX_REGISTERS)])?;
    let capped_ms = ms(start);
    println!(
        "PTX JIT of the whole module: {jit_ms:.1} ms; with CU_JIT_MAX_REGISTERS = {MAX_REGISTERS}: {capped_ms:.1} ms"
    );
    for (module, load_ms, image) in [(&jit, jit_ms, "PTX JIT"), (&capped, capped_ms, "PTX JIT, capped")] {
        let f32_row = jit_row(
            &device,
            &default,
            Precision::F32,
            "lombscargle_f32",
            |v| v as f32,
            1.0f32,
            f64::from,
            (module, load_ms, image),
        )?;
        let f64_row = jit_row(
            &device,
            &default,
            Precision::F64,
            "lombscargle_f64",
            |v| v,
            1.0f64,
            |v| v,
            (module, load_ms, image),
        )?;
        rows.extend([f32_row, f64_row]);
    }
    println!("\n{}\n\n{}", default.describe(), table(&rows).render());

    let mut rows = Vec::new();
    for (variant, precision) in cases {
        rows.push(cubin_row(&device, &large, variant, precision, module_load_ms, None)?);
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
                    rows.push(cubin_row(&device, problem, variant, precision, module_load_ms, Some(shape))?);
                }
            }
        }
        println!("launch shapes (default signal first, then 16384 samples)\n\n{}", table(&rows).render());
    }
    drop(device);
    drop(context);
    Ok(())
}
