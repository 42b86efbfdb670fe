//! `svd`: rank-k image reconstruction from a thin SVD, the project's main job.
//!
//! Takes PNG/JPEG files and folders of them (or, with none, a Shepp–Logan phantom), factors every
//! image and writes, per image and rank k, the reconstruction `<out>/<name>-k<k>.png` (optionally
//! `.npy`), a CSV report of the errors and, with `--json`, a full report with per-stage times.
//! Images are decoded on all cores into a bounded queue, computed by the engine (the GPU pipeline,
//! one thread per GPU, or the CPU in parallel across images) and encoded on other threads.

use anyhow::{Context, anyhow, bail, ensure};
use clap::Parser;
use indicatif::{ProgressBar, ProgressStyle};
use kernel_suite::cli::{self, DeviceArgs, DeviceChoice, Target};
use kernel_suite::svd::{self, Variant};
use kernel_suite::svd_batch::{self, run_gpu};
use kernel_suite::svd_job::{
    self, ImageQueue, ImageResult, JobImage, JobOptions, Keep, Pixels, Sink, StageTimes, run_cpu,
};
use kernel_suite::svd_outputs::{ImageReport, Outputs, write_csv};
use kernel_suite::{Device, GpuOptions, Startup};
use ndarray::Array2;
use serde::Serialize;
use std::collections::HashMap;
use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::sync_channel;
use std::time::Instant;

/// Up to this many images, the command prints each image's per-rank table; above, a summary and a
/// progress bar.
const FEW: usize = 4;

/// Rank-k SVD reconstruction of grayscale images: one image or a whole folder, on one GPU, several
/// GPUs or the CPU.
#[derive(Parser)]
#[command(
    version = cli::VERSION,
    after_help = "Outputs (in --out-dir): <name>-k<k>.png per image and rank (clamped to [0, 1]), with --npy \
also <name>-k<k>.npy (float32) and <name>-s.npy (the leading singular values, float64), with --mosaic \
<name>-mosaic.png, and report.csv (report-<I>-of-<N>.csv with --shard I/N): name, rows, cols, k, \
relative_error, eckart_young_bound, sigma_1, frobenius_norm, check_error.

Job arrays split a folder with no coordinator: every task runs the same command with its own shard, e.g. \
in a Slurm array (#SBATCH --array=0-15)
  svd scans/ --shard $SLURM_ARRAY_TASK_ID/$SLURM_ARRAY_TASK_COUNT --json report-$SLURM_ARRAY_TASK_ID.json
or in a Kubernetes indexed Job: --shard $JOB_COMPLETION_INDEX/<completions>."
)]
struct Args {
    /// PNG/JPEG files and directories of them (a directory's files are taken in name order; images
    /// are converted to grayscale in [0, 1] and may differ in size). Default: a procedural
    /// Shepp–Logan phantom of --size pixels.
    inputs: Vec<PathBuf>,
    /// Ranks k to reconstruct, comma-separated (sorted, repeats dropped); each must be at least 1 and
    /// at most min(rows, cols) of every image.
    #[arg(long, value_delimiter = ',', default_values_t = [1, 5, 10, 20, 50, 100])]
    ranks: Vec<usize>,
    /// GPU reconstruction kernel.
    #[arg(long, value_enum, default_value_t = Variant::Regtiled)]
    variant: Variant,
    /// Side of the default phantom image, pixels.
    #[arg(long, default_value_t = 512)]
    size: usize,
    /// Directory for the outputs (created if missing).
    #[arg(long, default_value = "svd-out")]
    out_dir: PathBuf,
    /// Also write every reconstruction as `<name>-k<k>.npy` (float32) and the singular values as
    /// `<name>-s.npy` (float64), for numpy.load.
    #[arg(long)]
    npy: bool,
    /// Also write a labelled mosaic (original and every rank) per image, `<name>-mosaic.png`; always
    /// written for the default phantom.
    #[arg(long)]
    mosaic: bool,
    /// Write no PNG files (to time the computation); the reports and --npy files are still written.
    #[arg(long)]
    no_images: bool,
    /// Also write the full report as JSON to this file: per image its errors, singular values and
    /// stage times, and the run's totals.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Compare every reconstruction with the f64 CPU reference and report the largest relative
    /// difference.
    #[arg(long)]
    check: bool,
    /// Take only every N-th image of the input list, starting at the I-th (0 ≤ I < N), e.g.
    /// --shard $SLURM_ARRAY_TASK_ID/$SLURM_ARRAY_TASK_COUNT.
    #[arg(long, value_name = "I/N")]
    shard: Option<String>,
    /// GPUs to spread the images over: `all` or indices such as 0,1 (one engine thread per GPU).
    /// Default: the one of --gpu.
    #[arg(long, value_name = "all|0,1,…")]
    gpus: Option<String>,
    /// Most images factored together on a GPU (default: as many as fit in a batch of 32 Mi pixels;
    /// with --gpus each GPU takes the next batch when it is free). Fewer bound device memory
    /// further, and spread a small folder over several GPUs.
    #[arg(long, value_name = "N")]
    batch_images: Option<usize>,
    #[command(flatten)]
    device: DeviceArgs,
}

/// `--shard I/N`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
struct Shard {
    index: usize,
    count: usize,
}

impl Shard {
    fn parse(text: &str) -> anyhow::Result<Shard> {
        let bad = || {
            anyhow!(
                "--shard {text:?}: expected I/N with 0 ≤ I < N, e.g. --shard 0/4 for the first of four shards"
            )
        };
        let (index, count) = text.split_once('/').ok_or_else(bad)?;
        let index: usize = index.trim().parse().map_err(|_| bad())?;
        let count: usize = count.trim().parse().map_err(|_| bad())?;
        ensure!(index < count, bad());
        Ok(Shard { index, count })
    }
}

/// `--gpus`: every GPU, or these indices.
enum GpuList {
    All,
    Some(Vec<u32>),
}

impl GpuList {
    fn parse(text: &str) -> anyhow::Result<GpuList> {
        if text.trim() == "all" {
            return Ok(GpuList::All);
        }
        let mut ordinals =
            text.split(',').map(|s| s.trim().parse::<u32>()).collect::<Result<Vec<_>, _>>().map_err(
                |_| anyhow!("--gpus {text:?}: expected `all` or GPU indices separated by commas, e.g. 0,1"),
            )?;
        ordinals.sort_unstable();
        ordinals.dedup();
        Ok(GpuList::Some(ordinals))
    }
}

/// Where the images come from.
enum Source {
    /// The default image.
    Phantom(Array2<f32>),
    /// Files; image `i` of the job is `files[i]`.
    Files(Vec<PathBuf>),
}

impl Source {
    fn len(&self) -> usize {
        match self {
            Source::Phantom(_) => 1,
            Source::Files(files) => files.len(),
        }
    }

    /// The original pixels of image `index` (decoded again from its file), for the mosaic.
    fn original(&self, index: usize) -> kernel_suite::Result<Array2<f32>> {
        match self {
            Source::Phantom(image) => Ok(image.clone()),
            Source::Files(files) => Ok(svd_job::decode_file(&files[index])?.to_f32()),
        }
    }

    /// The queue of the job's images: decoded on a background pool for files.
    fn queue(&self) -> ImageQueue {
        match self {
            Source::Phantom(image) => ImageQueue::from_images(vec![JobImage {
                index: 0,
                name: "shepp-logan".into(),
                pixels: Pixels::Float(image.clone()),
            }]),
            Source::Files(files) => svd_job::decode_into_queue(files.iter().cloned().enumerate().collect()),
        }
    }
}

/// What runs the job.
enum Engine {
    /// The CPU engine, parallel across images.
    Cpu,
    /// The GPU engine on one device (a GPU or the simulator), on this thread.
    One(Device),
    /// The GPU engine on several GPUs, one thread each.
    Many(Vec<u32>),
}

/// The start-up of one GPU, as reported.
#[derive(Serialize)]
struct StartupReport {
    gpu: u32,
    #[serde(flatten)]
    startup: Startup,
}

/// The `--json` report.
#[derive(Serialize)]
struct JobReport<'a> {
    device: &'a str,
    variant: Variant,
    ranks: &'a [usize],
    shard: Option<Shard>,
    images: usize,
    pixels: u64,
    /// From the engines' start to the last output written, ms.
    job_ms: f64,
    /// Opening the device(s): driver, context, module, ms (the slowest GPU's, plus counting the GPUs
    /// for `--gpus`).
    startup_ms: f64,
    /// The whole command, ms.
    wall_ms: f64,
    /// Sum of every image's stage times, ms.
    stages: StageTimes,
    max_check_error: Option<f64>,
    startup: Vec<StartupReport>,
    results: &'a [ImageReport],
}

/// The first error of any thread; later ones (mostly "stopped" echoes of it) are dropped.
#[derive(Default)]
struct Failure {
    first: Mutex<Option<anyhow::Error>>,
    failed: AtomicBool,
}

impl Failure {
    fn record(&self, error: anyhow::Error) {
        self.first.lock().expect("no panics while holding the lock").get_or_insert(error);
        self.failed.store(true, Ordering::SeqCst);
    }

    fn failed(&self) -> bool {
        self.failed.load(Ordering::SeqCst)
    }

    fn into_result(self) -> anyhow::Result<()> {
        match self.first.into_inner().expect("no panics while holding the lock") {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}

fn main() -> ExitCode {
    let command_start = Instant::now();
    cli::run(|| run(command_start))
}

fn run(command_start: Instant) -> anyhow::Result<()> {
    let args = Args::parse();
    ensure!(!args.ranks.contains(&0), "--ranks: rank 0 is not allowed (ranks start at 1)");
    let mut ranks = args.ranks.clone();
    ranks.sort_unstable();
    ranks.dedup();
    ensure!(!ranks.is_empty(), "--ranks: no ranks given");
    ensure!(args.batch_images != Some(0), "--batch-images must be at least 1");
    let mosaic = args.mosaic || args.inputs.is_empty();
    // Only what is written comes back from the GPU: f32 for .npy files, else the PNGs' bytes.
    let keep = if args.npy {
        Keep::Float
    } else if args.no_images {
        Keep::Nothing
    } else {
        Keep::Gray8
    };
    let shard = args.shard.as_deref().map(Shard::parse).transpose()?;
    let gpus = args.gpus.as_deref().map(GpuList::parse).transpose()?;
    let (source, total) = collect_inputs(&args, shard)?;
    if let Some(dir) = args.json.as_deref().and_then(Path::parent).filter(|d| !d.as_os_str().is_empty()) {
        ensure!(dir.is_dir(), "--json: directory {} does not exist", dir.display());
    }
    std::fs::create_dir_all(&args.out_dir)
        .with_context(|| format!("cannot create {}", args.out_dir.display()))?;
    // Decoding starts before the device opens, so the first images are ready when it is.
    let queue = source.queue();
    let (engine, count_ms) = open_engine(&args, gpus)?;
    let batch_images = args.batch_images.unwrap_or(svd_batch::BATCH_IMAGES);
    let options = JobOptions { ranks, check: args.check, variant: args.variant, batch_images, keep };
    let label = match &engine {
        Engine::Cpu => format!("CPU (faer, {} threads)", rayon::current_num_threads()),
        Engine::One(device) => device.describe(),
        Engine::Many(ordinals) => format!("{} GPUs ({ordinals:?})", ordinals.len()),
    };
    let images = match shard {
        Some(Shard { index, count }) => {
            format!("{} image(s): shard {index}/{count} of {total}", source.len())
        }
        None => format!("{} image(s)", source.len()),
    };
    println!("device: {label}; variant: {}; {images}; ranks {:?}", args.variant.name(), options.ranks);

    let progress = if source.len() > FEW && std::io::stderr().is_terminal() {
        ProgressBar::new(source.len() as u64).with_style(
            ProgressStyle::with_template("{bar:30} {pos}/{len} images {elapsed} (eta {eta})")
                .expect("template"),
        )
    } else {
        ProgressBar::hidden()
    };
    let outputs = Outputs {
        dir: &args.out_dir,
        png: !args.no_images,
        npy: args.npy,
        mosaic: mosaic && !args.no_images,
        original: &|index| source.original(index),
    };
    let run = run_job(&engine, &args, &queue, &options, &outputs, &progress)?;
    progress.finish_and_clear();
    drop(queue);
    let mut results = run.reports;
    results.sort_by_key(|r| r.index);

    let report_name = match shard {
        Some(s) => format!("report-{}-of-{}.csv", s.index, s.count),
        None => "report.csv".into(),
    };
    let csv_path = args.out_dir.join(report_name);
    write_csv(&csv_path, &results)?;
    let job_ms = run.job_start.elapsed().as_secs_f64() * 1e3;

    print_results(&results, &options, &outputs);
    println!("report: {}", csv_path.display());
    let mut stages = StageTimes::default();
    for r in &results {
        stages.add(&r.times);
    }
    let max_check_error =
        results.iter().flat_map(|r| r.ranks.iter().filter_map(|k| k.check_error)).reduce(f64::max);
    if let Some(max) = max_check_error {
        println!("check: largest relative difference from the f64 CPU reference {max:.3e}");
    }
    let pixels: u64 = results.iter().map(|r| (r.rows * r.cols) as u64).sum();
    let startup_ms = count_ms + run.startup.iter().map(|s| startup_total(&s.startup)).fold(0.0, f64::max);
    let wall_ms = command_start.elapsed().as_secs_f64() * 1e3;
    if let Some(path) = &args.json {
        let report = JobReport {
            device: &label,
            variant: args.variant,
            ranks: &options.ranks,
            shard,
            images: results.len(),
            pixels,
            job_ms,
            startup_ms,
            wall_ms,
            stages,
            max_check_error,
            startup: run.startup,
            results: &results,
        };
        std::fs::write(path, serde_json::to_string_pretty(&report)?)
            .with_context(|| format!("cannot write {}", path.display()))?;
        println!("report: {}", path.display());
    }
    println!(
        "job: {} images ({pixels} pixels) in {job_ms:.1} ms after start-up; start-up {startup_ms:.1} ms (driver, \
         context, module); whole command {wall_ms:.1} ms",
        results.len()
    );
    println!(
        "stages, summed over images (ms): decode {:.1}, h2d {:.1}, svd {:.1}, reconstruct {:.1}, d2h {:.1}, \
         encode {:.1}",
        stages.decode_ms,
        stages.h2d_ms,
        stages.svd_ms,
        stages.reconstruct_ms,
        stages.d2h_ms,
        stages.encode_ms
    );
    if let Some(peak) = peak_memory_mib() {
        println!("peak resident memory: {peak:.1} MiB");
    }
    if let Engine::One(device) = engine {
        args.device.print_profile(&Target::Kernels(device))?;
    }
    Ok(())
}

/// The job's images: the phantom, or the files of the inputs (directories listed in name order),
/// every one checked to exist, names unique, then sharded; and the number before sharding.
fn collect_inputs(args: &Args, shard: Option<Shard>) -> anyhow::Result<(Source, usize)> {
    if args.inputs.is_empty() {
        ensure!(args.size >= 1, "--size must be at least 1");
        let phantom = Source::Phantom(svd::shepp_logan(args.size));
        let total = phantom.len();
        return Ok((phantom, total));
    }
    let mut files = Vec::new();
    for input in &args.inputs {
        if input.is_dir() {
            let mut found = Vec::new();
            for entry in std::fs::read_dir(input)
                .with_context(|| format!("cannot read directory {}", input.display()))?
            {
                let path =
                    entry.with_context(|| format!("cannot read directory {}", input.display()))?.path();
                let image = path
                    .extension()
                    .and_then(|e| e.to_str())
                    .is_some_and(|e| matches!(e.to_ascii_lowercase().as_str(), "png" | "jpg" | "jpeg"));
                if image && path.is_file() {
                    found.push(path);
                }
            }
            ensure!(!found.is_empty(), "{}: no PNG or JPEG files in this directory", input.display());
            found.sort();
            files.extend(found);
        } else {
            ensure!(input.exists(), "{}: no such file or directory", input.display());
            files.push(input.clone());
        }
    }
    let mut names: HashMap<String, &Path> = HashMap::new();
    for file in &files {
        if let Some(other) = names.insert(svd_job::image_name(file), file) {
            bail!(
                "{} and {} have the same name, so their outputs would overwrite each other",
                other.display(),
                file.display()
            );
        }
    }
    let total = files.len();
    if let Some(Shard { index, count }) = shard {
        files = files.into_iter().skip(index).step_by(count).collect();
    }
    Ok((Source::Files(files), total))
}

/// Opens what runs the job: `--device cpu` the CPU engine; `sim` the simulator; `gpu`/`auto` the
/// GPU of `--gpu`, or those of `--gpus` (with `auto`, falling back to the CPU when there is none).
/// Also returns the time spent counting the GPUs for `--gpus` (it starts the driver), ms.
fn open_engine(args: &Args, gpus: Option<GpuList>) -> anyhow::Result<(Engine, f64)> {
    let choice = args.device.device;
    if gpus.is_some() && matches!(choice, DeviceChoice::Cpu | DeviceChoice::Sim) {
        bail!("--gpus needs --device gpu or auto");
    }
    let start = Instant::now();
    let ordinals = match gpus {
        None => vec![args.device.gpu],
        Some(list) => {
            let count = match gpu_count() {
                Ok(count) => count,
                Err(e) if choice == DeviceChoice::Auto && e.is_no_gpu() => {
                    eprintln!("note: {e}; falling back to the CPU reference (--device cpu)");
                    return Ok((Engine::Cpu, 0.0));
                }
                Err(e) => return Err(e.into()),
            };
            let ordinals = match list {
                GpuList::All => (0..count).collect(),
                GpuList::Some(ordinals) => ordinals,
            };
            if let Some(bad) = ordinals.iter().find(|&&i| i >= count) {
                bail!("--gpus: GPU index {bad} requested, {count} GPU(s) present");
            }
            ordinals
        }
    };
    let count_ms = start.elapsed().as_secs_f64() * 1e3;
    if let [ordinal] = ordinals[..] {
        let device_args = DeviceArgs { gpu: ordinal, ..args.device.clone() };
        return Ok(match device_args.select_for_job()? {
            Target::Kernels(device) => (Engine::One(device), count_ms),
            Target::CpuReference => (Engine::Cpu, 0.0),
        });
    }
    if args.device.profile {
        eprintln!("note: --profile profiles one GPU; this run on {} GPUs is not profiled", ordinals.len());
    }
    Ok((Engine::Many(ordinals), count_ms))
}

/// GPUs the driver sees.
fn gpu_count() -> kernel_suite::Result<u32> {
    use kernel_suite::Error;
    cust::init(cust::CudaFlags::empty()).map_err(|e| match e {
        cust::error::CudaError::NoDevice => Error::NoGpu("the CUDA driver found no GPU".into()),
        other => Error::NoDriver(format!("cuInit failed: {other}")),
    })?;
    let count = cust::device::Device::num_devices()
        .map_err(|source| Error::Cuda { call: "cuDeviceGetCount", source })?;
    if count == 0 {
        return Err(Error::NoGpu("the CUDA driver found no GPU".into()));
    }
    Ok(count)
}

/// What [`run_job`] returns.
struct JobRun {
    reports: Vec<ImageReport>,
    startup: Vec<StartupReport>,
    job_start: Instant,
}

/// Runs the engine(s) on `queue`, with encoder threads writing each finished image's outputs.
fn run_job(
    engine: &Engine,
    args: &Args,
    queue: &ImageQueue,
    options: &JobOptions,
    outputs: &Outputs,
    progress: &ProgressBar,
) -> anyhow::Result<JobRun> {
    let encoders = std::thread::available_parallelism().map_or(1, |n| n.get());
    // Bounded: when encoding falls behind, the engines wait instead of piling up reconstructions.
    let (sender, receiver) = sync_channel::<ImageResult>(encoders);
    let receiver = Mutex::new(receiver);
    let failure = Failure::default();
    let reports = Mutex::new(Vec::new());
    let startups = Mutex::new(Vec::new());
    let starts = Mutex::new(Vec::new());
    std::thread::scope(|scope| {
        for _ in 0..encoders {
            scope.spawn(|| {
                loop {
                    let next = receiver.lock().expect("no panics while holding the lock").recv();
                    let Ok(mut result) = next else { break };
                    if failure.failed() {
                        continue;
                    }
                    let start = Instant::now();
                    match outputs.write(&result) {
                        Ok(()) => {
                            result.times.encode_ms = start.elapsed().as_secs_f64() * 1e3;
                            reports
                                .lock()
                                .expect("no panics while holding the lock")
                                .push(ImageReport::from(result));
                            progress.inc(1);
                        }
                        Err(e) => failure.record(e.into()),
                    }
                }
            });
        }
        let failure = &failure;
        let send = move |mut result: ImageResult| -> kernel_suite::Result<()> {
            let stopped = || kernel_suite::Error::InvalidInput("stopped after an earlier error".into());
            if failure.failed() {
                return Err(stopped());
            }
            result.times.decode_ms = queue.take_decode_ms(result.index);
            sender.send(result).map_err(|_| stopped())
        };
        let sink: Sink = &send;
        let started = |gpu_startup: Option<StartupReport>| {
            starts.lock().expect("no panics while holding the lock").push(Instant::now());
            startups.lock().expect("no panics while holding the lock").extend(gpu_startup);
        };
        match engine {
            Engine::Cpu => {
                started(None);
                if let Err(e) = run_cpu(queue, options, sink) {
                    failure.record(e.into());
                }
            }
            Engine::One(device) => {
                started(device.startup().map(|startup| StartupReport { gpu: args.device.gpu, startup }));
                if let Err(e) = run_gpu(device, queue, options, sink) {
                    failure.record(e.into());
                }
            }
            Engine::Many(ordinals) => {
                let gpu_options =
                    GpuOptions { max_registers: args.device.max_registers, force_ptx: args.device.ptx };
                // The job starts once every GPU is open: contexts are created one after another by
                // the driver, and a GPU that opens late would otherwise find the work taken.
                let all_open = std::sync::Barrier::new(ordinals.len());
                std::thread::scope(|gpus| {
                    for &gpu in ordinals {
                        let (started, all_open) = (&started, &all_open);
                        gpus.spawn(move || {
                            let run = || -> anyhow::Result<()> {
                                // A device belongs to the thread that opened it.
                                let device = Device::gpu_with(gpu, gpu_options);
                                all_open.wait();
                                let device = device?;
                                println!("GPU {gpu}: {}", device.describe());
                                started(device.startup().map(|startup| StartupReport { gpu, startup }));
                                run_gpu(&device, queue, options, sink).with_context(|| format!("GPU {gpu}"))
                            };
                            if let Err(e) = run() {
                                failure.record(e);
                            }
                        });
                    }
                });
            }
        }
        // No more results: the encoders finish the queued ones and stop.
        drop(send);
    });
    failure.into_result()?;
    let job_start =
        starts.into_inner().expect("no poisoned lock").into_iter().min().unwrap_or_else(Instant::now);
    let mut startup = startups.into_inner().expect("no poisoned lock");
    startup.sort_by_key(|s| s.gpu);
    Ok(JobRun { reports: reports.into_inner().expect("no poisoned lock"), startup, job_start })
}

fn startup_total(s: &Startup) -> f64 {
    s.init_ms + s.context_ms + s.module_load_ms
}

/// Per image its table (a few images) or per rank a summary over the images (many).
fn print_results(results: &[ImageReport], options: &JobOptions, outputs: &Outputs) {
    if results.len() <= FEW {
        for r in results {
            let t = &r.times;
            println!(
                "\n{}: {}×{}, ‖A‖_F = {:.4}, σ₁ = {:.4}; ms: decode {:.1}, h2d {:.1}, svd {:.1}, reconstruct {:.1}, \
                 d2h {:.1}, encode {:.1}",
                r.name,
                r.rows,
                r.cols,
                r.frobenius_norm,
                r.singular_values.first().copied().unwrap_or(0.0),
                t.decode_ms,
                t.h2d_ms,
                t.svd_ms,
                t.reconstruct_ms,
                t.d2h_ms,
                t.encode_ms
            );
            println!(
                "{:>5} {:>12} {:>12}{}",
                "k",
                "rel. error",
                "E-Y bound",
                if options.check { "  check error" } else { "" }
            );
            for k in &r.ranks {
                let check = k.check_error.map_or(String::new(), |v| format!(" {v:>12.3e}"));
                println!("{:>5} {:>12.6} {:>12.6}{check}", k.k, k.relative_error, k.eckart_young_bound);
            }
            if outputs.mosaic {
                println!("mosaic: {}", outputs.mosaic_path(&r.name).display());
            }
        }
        println!();
    } else {
        println!("\n{} images; relative error per rank over the images:", results.len());
        println!("{:>5} {:>12} {:>12} {:>14}", "k", "mean", "max", "mean E-Y bound");
        for (i, k) in options.ranks.iter().enumerate() {
            let errors: Vec<f64> = results.iter().map(|r| r.ranks[i].relative_error).collect();
            let mean = errors.iter().sum::<f64>() / errors.len() as f64;
            let max = errors.iter().copied().fold(0.0, f64::max);
            let bound =
                results.iter().map(|r| r.ranks[i].eckart_young_bound).sum::<f64>() / results.len() as f64;
            println!("{k:>5} {mean:>12.6} {max:>12.6} {bound:>14.6}");
        }
    }
    if outputs.png || outputs.npy {
        let kinds = match (outputs.png, outputs.npy) {
            (true, true) => "<name>-k<k>.png and .npy",
            (true, false) => "<name>-k<k>.png",
            _ => "<name>-k<k>.npy",
        };
        println!("outputs: {} ({kinds})", outputs.dir.display());
    }
}

/// Peak resident set size of this process (Linux `VmHWM`), MiB.
fn peak_memory_mib() -> Option<f64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib / 1024.0)
}
