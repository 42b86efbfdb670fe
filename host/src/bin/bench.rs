//! `bench`: every kernel family's kernels × variants × precisions × sizes on one GPU, with warm-up and
//! many event-timed runs, first pass vs warm, block-size sweeps and the speed-up over the CPU
//! reference. Writes `report.md`, `report.json` and charts (PNG and SVG) into `--out-dir`.
//!
//! The per-family programs in `benches/` go deeper into one family each (end-to-end copies, the
//! batch pipeline, launch shapes); this one gives the overview.

use anyhow::Context;
use clap::Parser;
use indicatif::{ProgressBar, ProgressStyle};
use kernel_suite::bench::{Stats, Table};
use kernel_suite::plot::{LineChart, Scale};
use kernel_suite::profile::Work;
use kernel_suite::{Device, LaunchConfig, cli, conv, lombscargle, spiral, svd};
use ndarray::Array2;
use rand::{Rng, SeedableRng, rngs::SmallRng};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

/// Benchmark every kernel on the GPU.
#[derive(Parser)]
#[command(version = cli::VERSION)]
struct Args {
    /// Only the cases whose name (`family/kernel/precision/size/block`) contains this text.
    #[arg(long)]
    filter: Option<String>,
    /// About a minute: one or two sizes per family, fewer runs.
    #[arg(long)]
    quick: bool,
    /// Timed runs per case (default 50, or 10 with --quick).
    #[arg(long)]
    runs: Option<usize>,
    /// Untimed warm-up runs per case, after the first pass.
    #[arg(long, default_value_t = 3)]
    warmup: usize,
    /// Directory for report.md, report.json and the charts.
    #[arg(long, default_value = "bench-out")]
    out_dir: PathBuf,
    /// Index of the GPU.
    #[arg(long, default_value_t = 0)]
    gpu: u32,
    /// Do not run anything: re-write the report and the charts from a `report.json` of an earlier run.
    #[arg(long, value_name = "REPORT_JSON")]
    replot: Option<PathBuf>,
    /// Run the cases in the CPU simulator instead (very slow: for checking the benchmark itself with
    /// a --filter of small cases).
    #[arg(long)]
    sim: bool,
}

/// A queued launch on prepared device data.
type Launch<'d> = Box<dyn FnMut() -> kernel_suite::Result<()> + 'd>;
/// Uploads a case's inputs and returns its launch.
type Prepare = Box<dyn for<'d> Fn(&'d Device) -> kernel_suite::Result<Launch<'d>>>;
/// A CPU reference run.
type Reference = Box<dyn Fn() -> kernel_suite::Result<()>>;

/// One benchmark case: names, its useful work, how to prepare it, and its CPU reference.
struct Case {
    family: &'static str,
    kernel: String,
    precision: &'static str,
    size: String,
    block: String,
    /// Problem size in elements (output pixels, frequencies, …), the x axis of the charts.
    elements: f64,
    work: Work,
    /// Uploads the inputs and returns the launch.
    prepare: Prepare,
    /// Key and body of the CPU reference run (shared by the cases of one problem), if affordable.
    cpu: Option<(String, Reference)>,
}

impl Case {
    fn name(&self) -> String {
        format!("{}/{}/{}/{}/{}", self.family, self.kernel, self.precision, self.size, self.block)
    }
}

#[derive(Serialize, Deserialize)]
struct Report {
    device: String,
    command: String,
    warmup: usize,
    runs: usize,
    cpu_threads: usize,
    cases: Vec<Outcome>,
}

#[derive(Serialize, Deserialize)]
struct Outcome {
    family: String,
    kernel: String,
    precision: String,
    size: String,
    block: String,
    elements: f64,
    first_pass_ms: f64,
    median_ms: f64,
    min_ms: f64,
    max_ms: f64,
    runs: usize,
    gbs: f64,
    gflops: f64,
    registers: Option<u32>,
    cpu_reference_ms: Option<f64>,
    speedup: Option<f64>,
}

fn random(seed: u64, n: usize) -> Vec<f32> {
    let mut rng = SmallRng::seed_from_u64(seed);
    (0..n).map(|_| rng.random_range(-1.0..1.0)).collect()
}

fn saxpy_cases(quick: bool) -> Vec<Case> {
    let sizes: &[usize] = if quick { &[1 << 24] } else { &[1 << 20, 1 << 24, 1 << 26] };
    sizes
        .iter()
        .map(|&n| Case {
            family: "saxpy",
            kernel: "saxpy".into(),
            precision: "f32",
            size: format!("2^{}", n.trailing_zeros()),
            block: kernel_suite::saxpy::BLOCK.to_string(),
            elements: n as f64,
            work: Work { bytes: 12.0 * n as f64, flops: 2.0 * n as f64 },
            prepare: Box::new(move |device| {
                let x = device.upload(&random(1, n))?;
                let mut y = device.upload(&random(2, n))?;
                let cfg = LaunchConfig::for_1d(n, kernel_suite::saxpy::BLOCK);
                Ok(Box::new(move || unsafe {
                    device.launch(&kernels::saxpy::SAXPY, cfg, (1.0001, &x, &mut y))
                }))
            }),
            cpu: Some((
                format!("saxpy {n}"),
                Box::new(move || {
                    let (x, mut y) = (random(1, n), random(2, n));
                    kernel_suite::saxpy::saxpy_reference(1.0001, &x, &mut y)
                }),
            )),
        })
        .collect()
}

fn svd_cases(quick: bool) -> Vec<Case> {
    use svd::Variant;
    let sizes: &[usize] = if quick { &[1024, 4096] } else { &[512, 1024, 2048, 4096, 8192] };
    // Every variant at k = 256; the fast ones also at k = 64, 128 and 1024 on the larger sizes.
    let mut shapes: Vec<(usize, usize, &[Variant])> =
        sizes.iter().map(|&size| (size, 256, &Variant::ALL[..])).collect();
    if !quick {
        for size in [1024, 4096, 8192] {
            for k in [64, 128, 1024] {
                shapes.push((
                    size,
                    k,
                    &[
                        Variant::Regtiled,
                        Variant::Tf32,
                        Variant::Tf32x3,
                        Variant::Tf32Wgmma,
                        Variant::Tf32x3Wgmma,
                    ],
                ));
            }
        }
    }
    let mut cases = Vec::new();
    for (size, kk, variants) in shapes {
        for &variant in variants {
            let blocks: &[u32] = if variant.fixed_block() { &[16] } else { &[8, 16, 32] };
            for &block in blocks {
                let (m, n) = (size, size);
                cases.push(Case {
                    family: "svd",
                    kernel: variant.name().into(),
                    precision: "f32",
                    size: format!("{size}², k={kk}"),
                    block: variant.block_label(block),
                    elements: (m * n) as f64,
                    work: Work {
                        bytes: 4.0 * (m * kk + kk + kk * n + m * n) as f64,
                        flops: 2.0 * (m * n * kk) as f64,
                    },
                    prepare: Box::new(move |device| {
                        let u = device.upload(&random(3, m * kk))?;
                        let s = device.upload(&random(4, kk))?;
                        let vt = device.upload(&random(5, kk * n))?;
                        let mut out = device.alloc::<f32>(m * n)?;
                        Ok(Box::new(move || unsafe {
                            svd::launch_reconstruct(
                                device,
                                device.queue(),
                                variant,
                                block,
                                (&u, &s, &vt, &mut out),
                                (m, n, kk),
                            )
                        }))
                    }),
                    cpu: (size <= 4096 && kk == 256).then(|| {
                        let body: Reference = Box::new(move || {
                            let op = svd::RankK {
                                u: Array2::from_shape_vec((m, kk), random(3, m * kk)).expect("m·k"),
                                s: random(4, kk),
                                vt: Array2::from_shape_vec((kk, n), random(5, kk * n)).expect("k·n"),
                            };
                            svd::reconstruct_reference_f32(&op);
                            Ok(())
                        });
                        (format!("svd {size}"), body)
                    }),
                });
            }
        }
    }
    cases
}

fn conv_cases(quick: bool) -> Vec<Case> {
    let sizes: &[usize] = if quick { &[4096] } else { &[4096, 8192] };
    let mut cases = Vec::new();
    for &size in sizes {
        for (kernel, precision) in [("naive", "f32"), ("tiled", "f32"), ("naive", "f64")] {
            let bytes = if precision == "f32" { 4.0 } else { 8.0 };
            let pixels = (size * size) as f64;
            cases.push(Case {
                family: "conv",
                kernel: kernel.into(),
                precision,
                size: format!("{size}², 13×13"),
                block: if kernel == "tiled" { "32×8, 8 rows/thread".into() } else { "32×32".into() },
                elements: pixels,
                work: Work { bytes: bytes * (2.0 * pixels + 169.0), flops: 2.0 * pixels * 169.0 },
                prepare: Box::new(move |device| {
                    let image = Array2::from_shape_vec((size, size), random(6, size * size)).expect("size²");
                    let mask = conv::gaussian_mask(2.0, Some(13))?;
                    if precision == "f64" {
                        let mut c =
                            conv::Convolution::upload(device, image.mapv(f64::from).view(), mask.view())?;
                        Ok(Box::new(move || c.launch_f64()))
                    } else {
                        let variant =
                            if kernel == "tiled" { conv::Variant::Tiled } else { conv::Variant::Naive };
                        let mask = mask.mapv(|v| v as f32);
                        let mut c = conv::Convolution::upload(device, image.view(), mask.view())?;
                        Ok(Box::new(move || c.launch(variant)))
                    }
                }),
                cpu: Some((
                    format!("conv {size}"),
                    Box::new(move || {
                        let image =
                            Array2::from_shape_vec((size, size), random(6, size * size)).expect("size²");
                        let mask = conv::gaussian_mask(2.0, Some(13))?.mapv(|v| v as f32);
                        conv::convolve_reference(image.view(), mask.view()).map(drop)
                    }),
                )),
            });
        }
    }
    cases
}

fn lombscargle_cases(quick: bool) -> Vec<Case> {
    use lombscargle::{Options, Plan, Precision, Variant};
    let signals: &[(&str, usize, f64)] = if quick {
        &[("default", 1 << 10, 0.1)]
    } else {
        &[("default", 1 << 10, 0.1), ("16384 samples", 1 << 14, 1.0)]
    };
    let mut cases = Vec::new();
    for &(label, candidates, keep) in signals {
        for (variant, precision) in [
            (Variant::Precise, Precision::F32),
            (Variant::Precise, Precision::F64),
            (Variant::Fast, Precision::F32),
            (Variant::Recurrence, Precision::F32),
            (Variant::Recurrence, Precision::F64),
        ] {
            let (x, _) = lombscargle::benchmark_signal(candidates, keep, 1);
            let (samples, freqs) = (x.len() as f64, (1u64 << 20) as f64);
            let bytes = if precision == Precision::F32 { 4.0 } else { 8.0 };
            let options = Options { variant, precision, ..Options::default() };
            cases.push(Case {
                family: "lombscargle",
                kernel: variant.to_string(),
                precision: if precision == Precision::F32 { "f32" } else { "f64" },
                size: format!("{label} ({samples} × 2^20)"),
                block: lombscargle::BLOCK.to_string(),
                elements: samples * freqs,
                work: Work { bytes: bytes * 2.0 * (samples + freqs), flops: 10.0 * samples * freqs },
                prepare: Box::new(move |device| {
                    let freqs = lombscargle::frequency_grid(0.01, 10.0, 1 << 20)?;
                    let (x, y) = lombscargle::benchmark_signal(candidates, keep, 1);
                    let mut plan = Plan::new(device, &x, &y, &freqs, &options)?;
                    Ok(Box::new(move || plan.launch()))
                }),
                // The large signal's reference takes half a minute on 16 cores: left out.
                cpu: (candidates == 1 << 10).then(|| {
                    let body: Reference = Box::new(move || {
                        let freqs = lombscargle::frequency_grid(0.01, 10.0, 1 << 20)?;
                        let (x, y) = lombscargle::benchmark_signal(candidates, keep, 1);
                        lombscargle::lombscargle_reference(&x, &y, &freqs, false, false).map(drop)
                    });
                    (format!("lombscargle {label}"), body)
                }),
            });
        }
    }
    cases
}

fn spiral_cases(quick: bool) -> Vec<Case> {
    let scales: &[u32] = if quick { &[1] } else { &[1, 2] };
    let mut cases = Vec::new();
    for &scale in scales {
        for precision in [spiral::Precision::F32, spiral::Precision::F64] {
            let (w, h) = (spiral::DEFAULT_WIDTH * scale, spiral::DEFAULT_HEIGHT * scale);
            let config = spiral::SpiralConfig {
                precision,
                ..spiral::SpiralConfig::random(&mut SmallRng::seed_from_u64(1), w, h)
            };
            let reference_config =
                spiral::SpiralConfig { precision: spiral::Precision::F64, ..config.clone() };
            let pixels = (w * h) as f64;
            cases.push(Case {
                family: "spiral",
                kernel: "spiral".into(),
                precision: if precision == spiral::Precision::F32 { "f32" } else { "f64" },
                size: format!("{w}×{h}"),
                block: "32×8".into(),
                elements: pixels,
                work: Work { bytes: pixels, flops: 0.0 },
                prepare: Box::new(move |device| {
                    let mut image = device.alloc::<u8>(config.pixel_count())?;
                    let config = config.clone();
                    Ok(Box::new(move || spiral::launch_spiral(device, &config, &mut image)))
                }),
                cpu: Some((
                    format!("spiral {w}×{h}"),
                    Box::new(move || spiral::spiral_reference(&reference_config).map(drop)),
                )),
            });
        }
    }
    cases
}

fn main() -> ExitCode {
    cli::run(|| {
        let args = Args::parse();
        if let Some(path) = &args.replot {
            let text =
                std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
            let report: Report = serde_json::from_str(&text)
                .with_context(|| format!("{}: not a bench report", path.display()))?;
            return write_report(&args.out_dir, &report);
        }
        let runs = args.runs.unwrap_or(if args.quick { 10 } else { 50 });
        anyhow::ensure!(runs >= 1, "--runs must be at least 1");
        let mut cases: Vec<Case> = [saxpy_cases, svd_cases, conv_cases, lombscargle_cases, spiral_cases]
            .iter()
            .flat_map(|f| f(args.quick))
            .collect();
        if let Some(filter) = &args.filter {
            cases.retain(|c| c.name().contains(filter.as_str()));
        }
        anyhow::ensure!(!cases.is_empty(), "no benchmark case matches the filter");
        let device =
            if args.sim { Device::simulator() } else { Device::gpu(args.gpu, &kernel_suite::KERNELS)? };
        println!("device: {}", device.describe());
        if let Some(s) = device.startup() {
            println!(
                "start-up: cuInit {:.1} ms, context {:.1} ms, module load {:.2} ms",
                s.init_ms, s.context_ms, s.module_load_ms
            );
        }
        let sms = device.multiprocessors()? as usize;
        let missing = |c: &Case| kernel_entry(c, sms).is_some_and(|k| !device.has_kernel(k));
        for case in cases.iter().filter(|c| missing(c)) {
            println!(
                "SKIPPED {}: this device has no `{}`",
                case.name(),
                kernel_entry(case, sms).unwrap_or("?")
            );
        }
        cases.retain(|c| !missing(c));
        anyhow::ensure!(!cases.is_empty(), "no benchmark case runs on this device");

        let progress = ProgressBar::new(cases.len() as u64);
        progress.set_style(
            ProgressStyle::with_template("{bar:30} {pos}/{len} {elapsed} {msg}").expect("template"),
        );
        let mut cpu_ms: HashMap<String, f64> = HashMap::new();
        let mut outcomes = Vec::new();
        for case in &cases {
            progress.set_message(case.name());
            let mut launch = (case.prepare)(&device).with_context(|| case.name())?;
            device.synchronize()?;
            let start = Instant::now();
            launch()?;
            device.synchronize().with_context(|| case.name())?;
            let first_pass_ms = start.elapsed().as_secs_f64() * 1e3;
            let stats = Stats::of(&device.time_ms(args.warmup, runs, &mut launch)?);
            drop(launch);
            let cpu_reference_ms = match &case.cpu {
                Some((key, body)) => Some(match cpu_ms.get(key) {
                    Some(&ms) => ms,
                    None => {
                        let start = Instant::now();
                        body()?;
                        let ms = start.elapsed().as_secs_f64() * 1e3;
                        cpu_ms.insert(key.clone(), ms);
                        ms
                    }
                }),
                None => None,
            };
            let seconds = stats.median_ms * 1e-3;
            let kernel_name = kernel_entry(case, sms);
            outcomes.push(Outcome {
                family: case.family.into(),
                kernel: case.kernel.clone(),
                precision: case.precision.into(),
                size: case.size.clone(),
                block: case.block.clone(),
                elements: case.elements,
                first_pass_ms,
                median_ms: stats.median_ms,
                min_ms: stats.min_ms,
                max_ms: stats.max_ms,
                runs: stats.runs,
                gbs: case.work.bytes / seconds / 1e9,
                gflops: case.work.flops / seconds / 1e9,
                registers: kernel_name.and_then(|k| device.kernel_registers(k).ok().flatten()),
                speedup: cpu_reference_ms.map(|ms| ms / stats.median_ms),
                cpu_reference_ms,
            });
            progress.inc(1);
        }
        progress.finish_and_clear();
        let report = Report {
            device: device.describe(),
            command: std::env::args().collect::<Vec<_>>().join(" "),
            warmup: args.warmup,
            runs,
            cpu_threads: rayon::current_num_threads(),
            cases: outcomes,
        };
        write_report(&args.out_dir, &report)
    })
}

/// The PTX entry a case launches, for its register count.
fn kernel_entry(case: &Case, sms: usize) -> Option<&'static str> {
    Some(match (case.family, case.kernel.as_str(), case.precision) {
        ("saxpy", _, _) => "saxpy",
        ("svd", name, _) => {
            let variant = svd::Variant::ALL.into_iter().find(|v| v.name() == name)?;
            let k = case.size.rsplit("k=").next()?.parse().ok()?;
            let side = case.size.split('²').next()?.parse().ok()?;
            variant.kernel_name((side, side, k), sms)
        }
        ("conv", "naive", "f32") => "conv2d_naive_f32",
        ("conv", "naive", "f64") => "conv2d_naive_f64",
        ("conv", "tiled", _) => "conv2d_tiled",
        ("lombscargle", "precise", "f32") => "lombscargle_f32",
        ("lombscargle", "precise", "f64") => "lombscargle_f64",
        ("lombscargle", "fast", _) => "lombscargle_fast_f32",
        ("lombscargle", "recurrence", "f32") => "lombscargle_recurrence_f32",
        ("lombscargle", "recurrence", "f64") => "lombscargle_recurrence_f64",
        ("spiral", _, "f32") => "spiral_f32",
        ("spiral", _, "f64") => "spiral_f64",
        _ => return None,
    })
}

fn write_report(out_dir: &std::path::Path, report: &Report) -> anyhow::Result<()> {
    std::fs::create_dir_all(out_dir).with_context(|| format!("cannot create {}", out_dir.display()))?;
    let outcomes = &report.cases;
    let mut table = Table::new(&[
        "family",
        "kernel",
        "precision",
        "size",
        "block",
        "regs",
        "first pass ms",
        "median ms",
        "min ms",
        "max ms",
        "GB/s",
        "GFLOP/s",
        "CPU ms",
        "speed-up",
    ]);
    for o in outcomes {
        table.row(&[
            o.family.clone(),
            o.kernel.clone(),
            o.precision.clone(),
            o.size.clone(),
            o.block.clone(),
            o.registers.map_or("?".into(), |r| r.to_string()),
            format!("{:.3}", o.first_pass_ms),
            format!("{:.4}", o.median_ms),
            format!("{:.4}", o.min_ms),
            format!("{:.4}", o.max_ms),
            format!("{:.0}", o.gbs),
            format!("{:.0}", o.gflops),
            o.cpu_reference_ms.map_or("—".into(), |ms| format!("{ms:.1}")),
            o.speedup.map_or("—".into(), |s| format!("{s:.0}×")),
        ]);
    }
    let markdown = format!(
        "# Benchmark report\n\nDevice: {}. Command: `{}`. {} warm-up and {} event-timed runs per case, queued back to \
         back, after a first pass (module already loaded; the first pass includes the driver's lazy load of the \
         function). CPU reference: rayon on {} threads.\n\n{}",
        report.device,
        report.command,
        report.warmup,
        report.runs,
        report.cpu_threads,
        table.render()
    );
    print!("{}", table.render());
    std::fs::write(out_dir.join("report.md"), markdown)?;
    std::fs::write(out_dir.join("report.json"), serde_json::to_string_pretty(report)?)?;

    let series = |filter: &dyn Fn(&Outcome) -> bool,
                  label: &dyn Fn(&Outcome) -> String,
                  y: &dyn Fn(&Outcome) -> Option<f64>| {
        let mut all: Vec<(String, Vec<(f64, f64)>)> = Vec::new();
        for o in outcomes.iter().filter(|o| filter(o)) {
            let Some(value) = y(o) else { continue };
            let name = label(o);
            match all.iter_mut().find(|(n, _)| *n == name) {
                Some((_, points)) => points.push((o.elements, value)),
                None => all.push((name, vec![(o.elements, value)])),
            }
        }
        all
    };
    let charts = [
        (
            "block-sweep",
            LineChart::new("SVD reconstruction: block size sweep (k = 256)", "output elements", "GFLOP/s"),
            series(&|o| o.family == "svd", &|o| format!("{} {}", o.kernel, o.block), &|o| Some(o.gflops)),
        ),
        (
            "speedup",
            LineChart::new("Speed-up over the CPU reference", "problem size (elements)", "speed-up (×)"),
            series(&|_| true, &|o| format!("{} {} {} {}", o.family, o.kernel, o.precision, o.block), &|o| {
                o.speedup
            }),
        ),
        (
            "first-pass",
            LineChart::new("First pass vs warm median", "problem size (elements)", "ms"),
            [
                series(&|_| true, &|o| format!("{} first pass", o.family), &|o| Some(o.first_pass_ms)),
                series(&|_| true, &|o| format!("{} warm", o.family), &|o| Some(o.median_ms)),
            ]
            .concat(),
        ),
    ];
    for (name, chart, data) in charts {
        if data.is_empty() {
            continue;
        }
        let chart = data
            .into_iter()
            .fold(chart.with_scales(Scale::Log, Scale::Log).with_size(1100, 700), |c, (l, p)| {
                c.with_series(l, p)
            });
        for ext in ["png", "svg"] {
            chart.save(&out_dir.join(format!("{name}.{ext}")))?;
        }
    }
    println!("wrote {}/report.md, report.json and charts", out_dir.display());
    Ok(())
}
