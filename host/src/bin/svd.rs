//! `svd`: rank-k image reconstruction from a thin SVD, the project's main job.
//!
//! Takes PNG/JPEG files and folders of them (or, with none, a Shepp–Logan phantom), factors every
//! image and writes, per image and rank k, the reconstruction `<out>/<name>-k<k>.png` (optionally
//! `.npy`), a CSV report of the errors and, with `--json`, a full report with per-stage times.
//! Images are decoded on all cores into a bounded queue, computed by the engine (the GPU pipeline,
//! one thread per GPU, or the CPU in parallel across images) and encoded on other threads; that
//! pipeline is the library's `job` (`job::driver`), and this file parses the command line and
//! reports.

use anyhow::{Context, ensure};
use clap::Parser;
use indicatif::{ProgressBar, ProgressStyle};
use kernel_suite::cli::{self, DeviceArgs, DeviceChoice, Target};
use kernel_suite::image_io;
use kernel_suite::job::driver::{
    Engine, EngineDevice, EngineOptions, GpuFailure, GpuList, JobRun, PHANTOM, Shard, Source, StartupReport,
};
use kernel_suite::job::gpu_engine::BATCH_IMAGES;
use kernel_suite::job::images::{JobOptions, Keep, StageTimes, check_size};
use kernel_suite::job::input_queue::Screen;
use kernel_suite::job::outputs::{ImageEntry, ImageReport, Journal, Outputs, Totals, job_options, resumable};
use kernel_suite::svd::Variant;
use kernel_suite::{GpuOptions, Startup};
use serde::Serialize;
use signal_hook::consts::{SIGINT, SIGTERM};
use signal_hook::flag;
use std::collections::HashSet;
use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
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
relative_error, eckart_young_bound, sigma_1, frobenius_norm, check_error, status (ok or failed), error.

An image that cannot be read, decoded or factored for the ranks, or that does not fit in the GPU's free \
memory even alone, does not stop the job: it is named on stderr and in the report (status failed), and \
every other image is done (with --device auto, an image too large for the GPU is done on the CPU). \
Batches fit the GPU's free memory: one that runs out of it all the same is run again in halves, with a note.

Exit status: 0 every image done; 1 the job could not run or a file could not be written (one error \
line); 3 some images failed (the others are done, as the report says); 4 a GPU of several (--gpus) \
failed during the job and the others did its images (the report lists every image done); 130 or 143 \
stopped by SIGINT (Ctrl-C) or SIGTERM: the images under way are finished, the report lists every \
complete image, and --resume does the rest (a second signal exits at once).

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
    /// Stop at the first image that fails (exit status 3): the images under way are finished and
    /// reported, no further one is started. Default: report it and go on.
    #[arg(long)]
    fail_fast: bool,
    /// Skip the images an earlier run of this job completed: those with `ok` rows for every rank
    /// in the report of --out-dir and every output file in place, when the report's options
    /// (report.options.json: ranks, --check, --variant, what is written) are these. A killed job
    /// run again with --resume costs only what was left.
    #[arg(long)]
    resume: bool,
    /// Take only every N-th image of the input list, starting at the I-th (0 ≤ I < N), e.g.
    /// --shard $SLURM_ARRAY_TASK_ID/$SLURM_ARRAY_TASK_COUNT.
    #[arg(long, value_name = "I/N")]
    shard: Option<String>,
    /// GPUs to spread the images over: `all` or indices such as 0,1 (one engine thread per GPU).
    /// Default: the one of --gpu.
    #[arg(long, value_name = "all|0,1,…")]
    gpus: Option<String>,
    /// Most images factored together on a GPU (default: as many as fit in a batch of 32 Mi pixels
    /// and in the GPU's free memory; with --gpus each GPU takes the next batch when it is free).
    /// Fewer bound device memory further, and spread a small folder over several GPUs.
    #[arg(long, value_name = "N")]
    batch_images: Option<usize>,
    #[command(flatten)]
    device: DeviceArgs,
}

/// The `--json` report.
#[derive(Serialize)]
struct JobReport<'a> {
    device: &'a str,
    variant: Variant,
    ranks: &'a [usize],
    shard: Option<Shard>,
    /// Images done.
    images: usize,
    /// Images that failed.
    failed: usize,
    /// Images skipped by `--resume`, done by an earlier run.
    resumed: usize,
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
    /// Every image in index order, with its `status` (`ok`, `failed`, or `resumed` with only its
    /// index and name: its values are in report.csv).
    results: &'a [ImageEntry],
}

/// Exit status when some images failed (the others done): distinct from 1, the job not run or
/// stopped by an error, as rsync's "partial transfer".
const PARTIAL: u8 = 3;

/// Exit status when a GPU of several failed during the job and the others did its images: the job
/// is done as the report says, but a GPU needs looking at.
const GPU_FAILED: u8 = 4;

fn main() -> ExitCode {
    let command_start = Instant::now();
    let mut status = None;
    let code = cli::run(|| {
        status = Some(run(command_start)?);
        Ok(())
    });
    status.unwrap_or(code)
}

/// Runs the job; returns the exit status when it ran to its end.
fn run(command_start: Instant) -> anyhow::Result<ExitCode> {
    let args = Args::parse();
    let options = job_options_of(&args)?;
    let shard = args.shard.as_deref().map(Shard::parse).transpose()?;
    let engine_options = engine_options_of(&args)?;
    let mut job = Job::collect(&args, &options, shard)?;
    // Decoding starts before the device opens, so the first images are ready when it is.
    let queue = job.source.queue()?;
    let (mut engine, count_ms) = Engine::open(&engine_options)?;
    let label = engine.describe();
    job.print_header(&args, &options, &label);
    // The report starts once the job can run: a job that cannot leaves the earlier report as it was.
    let report = Report::start(&args, &mut job)?;
    let signal = on_signals()?;
    let queue = queue.screened(report.screen(&args, &options, &signal));
    let original = |index| job.source.original(index);
    let outputs = outputs(&args, &original);
    let done = |entry| report.done(entry);
    let run = engine.run(&engine_options, (&queue, job.source.len()), &options, &outputs, &done)?;
    // The queue's screen holds the other reference to the journal.
    drop(queue);
    let (totals, entries) = report.finish()?;
    print_results(&job, (&totals, &entries), &options, &outputs);
    let timing = Timing::of(&run, count_ms, command_start);
    if let Some(path) = &args.json {
        write_json(path, JobReport::new(&job, &label, &options, &totals, &timing, run.startup, &entries))?;
    }
    print_timing(&totals, &timing);
    if args.device.profile {
        for gpu in &run.gpus {
            eprintln!("{}", gpu.timeline(run.job_start, run.job_end));
            if let Some(profile) = &gpu.profile {
                eprintln!("GPU {}: {profile}", gpu.gpu);
            }
        }
    }
    if let Engine::One(device, _) = engine {
        args.device.print_profile(&Target::Kernels(device))?;
    }
    Ok(exit_status(&args, &job, (&totals, &run.failed_gpus), &signal))
}

/// What to compute for every image, from `--ranks` (sorted, repeats dropped), `--check`,
/// `--variant`, `--batch-images` and what is written.
fn job_options_of(args: &Args) -> anyhow::Result<JobOptions> {
    ensure!(!args.ranks.contains(&0), "--ranks: rank 0 is not allowed (ranks start at 1)");
    let mut ranks = args.ranks.clone();
    ranks.sort_unstable();
    ranks.dedup();
    ensure!(!ranks.is_empty(), "--ranks: no ranks given");
    ensure!(args.batch_images != Some(0), "--batch-images must be at least 1");
    // Only what is written comes back from the GPU: f32 for .npy files, else the PNGs' bytes.
    let keep = if args.npy {
        Keep::Float
    } else if args.no_images {
        Keep::Nothing
    } else {
        Keep::Gray8
    };
    let batch_images = args.batch_images.unwrap_or(BATCH_IMAGES);
    Ok(JobOptions { ranks, check: args.check, variant: args.variant, batch_images, keep })
}

/// How the engine opens, from `--device`, `--gpu`, `--gpus`, `--max-registers`, `--ptx` and
/// `--profile`.
fn engine_options_of(args: &Args) -> anyhow::Result<EngineOptions> {
    let DeviceArgs { device, gpu, max_registers, ptx, profile } = args.device.clone();
    Ok(EngineOptions {
        device: match device {
            DeviceChoice::Auto => EngineDevice::Auto,
            DeviceChoice::Gpu => EngineDevice::Gpu,
            DeviceChoice::Sim => EngineDevice::Simulator,
            DeviceChoice::Cpu => EngineDevice::Cpu,
        },
        gpu,
        gpus: args.gpus.as_deref().map(GpuList::parse).transpose()?,
        gpu_options: GpuOptions { max_registers, force_ptx: ptx, measure_context: profile },
        profile,
    })
}

/// The job's images and its report, before it runs: what to do, and what an earlier run did.
struct Job {
    /// The images left to do.
    source: Source,
    /// Images in the whole job (before sharding and `--resume`).
    total: usize,
    /// Images of this shard (before `--resume`).
    images: usize,
    shard: Option<Shard>,
    report_path: PathBuf,
    /// [`job_options`] of this run: what `--resume` compares.
    fingerprint: serde_json::Value,
    /// The images an earlier run did ([`resumable`]), for the journal.
    earlier: Vec<ImageEntry>,
    /// The job position of each image left ([`Source::retain`]).
    positions: Vec<usize>,
    /// Images skipped by `--resume`.
    resumed: usize,
}

impl Job {
    /// Collects the images (checking the phantom's size and the output places) and, with
    /// `--resume`, drops those an earlier run did.
    fn collect(args: &Args, options: &JobOptions, shard: Option<Shard>) -> anyhow::Result<Job> {
        let (mut source, total) = Source::collect(&args.inputs, args.size, shard)?;
        if args.inputs.is_empty() {
            check_size(PHANTOM, (args.size, args.size), max_rank(options))?;
        }
        std::fs::create_dir_all(&args.out_dir)
            .with_context(|| format!("cannot create {}", args.out_dir.display()))?;
        // After --out-dir is made: `--json out/report.json` is the usual place.
        if let Some(dir) = args.json.as_deref().and_then(Path::parent).filter(|d| !d.as_os_str().is_empty()) {
            ensure!(dir.is_dir(), "--json: directory {} does not exist", dir.display());
        }
        let report_path = args.out_dir.join(match shard {
            Some(s) => format!("report-{}-of-{}.csv", s.index, s.count),
            None => "report.csv".into(),
        });
        let images = source.len();
        let (fingerprint, earlier) = {
            let original = |index| source.original(index);
            let outputs = outputs(args, &original);
            let fingerprint = job_options(options, &outputs);
            let earlier = if args.resume && report_path.exists() {
                resumable(&report_path, &fingerprint, &source.names(), &options.ranks, &outputs)
                    .unwrap_or_else(|why| {
                        eprintln!("note: --resume: {why}; every image is done again");
                        Vec::new()
                    })
            } else {
                Vec::new()
            };
            (fingerprint, earlier)
        };
        let skipped: HashSet<&str> = earlier
            .iter()
            .filter_map(|e| match e {
                ImageEntry::Resumed { name, .. } => Some(name.as_str()),
                _ => None,
            })
            .collect();
        let positions = source.retain(|name| !skipped.contains(name));
        let resumed = skipped.len();
        Ok(Job { source, total, images, shard, report_path, fingerprint, earlier, positions, resumed })
    }

    /// The line saying what runs, on how many images, at which ranks.
    fn print_header(&self, args: &Args, options: &JobOptions, label: &str) {
        let (job, total, resumed) = (self.images, self.total, self.resumed);
        let mut images = match self.shard {
            Some(Shard { index, count }) => format!("{job} image(s): shard {index}/{count} of {total}"),
            None => format!("{job} image(s)"),
        };
        if resumed > 0 {
            images += &format!(", {resumed} done by an earlier run (--resume)");
        }
        println!("device: {label}; variant: {}; {images}; ranks {:?}", args.variant.name(), options.ranks);
    }
}

/// The job's largest rank.
fn max_rank(options: &JobOptions) -> usize {
    *options.ranks.last().expect("ranks checked non-empty")
}

/// The report as the job runs: its journal (`report.csv`) and the progress bar.
struct Report {
    journal: Arc<Journal>,
    progress: ProgressBar,
}

impl Report {
    /// Starts `report.csv` with the images an earlier run did (taken from `job`). Every image's
    /// entry is kept only where it is printed or written whole.
    fn start(args: &Args, job: &mut Job) -> anyhow::Result<Report> {
        let keep = args.json.is_some() || job.source.len() <= FEW;
        let (earlier, positions) = (std::mem::take(&mut job.earlier), std::mem::take(&mut job.positions));
        let journal =
            Arc::new(Journal::create(&job.report_path, &job.fingerprint, earlier, positions, keep)?);
        let progress = if job.source.len() > FEW && std::io::stderr().is_terminal() {
            ProgressBar::new(job.source.len() as u64).with_style(
                ProgressStyle::with_template("{bar:30} {pos}/{len} images {elapsed} (eta {eta})")
                    .expect("template"),
            )
        } else {
            ProgressBar::hidden()
        };
        Ok(Report { journal, progress })
    }

    /// The queue's screen: a failed image is named on stderr and recorded; the queue stops at
    /// the first with `--fail-fast`, and at a signal; the engines' notes go to stderr.
    fn screen(&self, args: &Args, options: &JobOptions, signal: &Signals) -> Screen {
        let (journal, progress) = (Arc::clone(&self.journal), self.progress.clone());
        let noting = self.progress.clone();
        Screen {
            max_rank: max_rank(options),
            fail_fast: args.fail_fast,
            stop: Arc::clone(&signal.stop),
            failed: Box::new(move |failed| {
                progress.suspend(|| eprintln!("error: {}", failed.error));
                progress.inc(1);
                journal.failed(&failed)
            }),
            noted: Box::new(move |note| noting.suspend(|| eprintln!("note: {note}"))),
        }
    }

    /// Records an image whose outputs are written.
    fn done(&self, report: ImageReport) -> anyhow::Result<()> {
        self.journal.done(report)?;
        self.progress.inc(1);
        Ok(())
    }

    /// Ends the report once the queue (whose screen holds the journal too) is dropped: its totals
    /// and, where kept, every image's entry.
    fn finish(self) -> anyhow::Result<(Totals, Vec<ImageEntry>)> {
        self.progress.finish_and_clear();
        let journal = Arc::into_inner(self.journal).expect("the queue, and with it its screen, is dropped");
        Ok(journal.finish()?)
    }
}

/// Per image (a few) or per rank (many), then where the outputs and the report are.
fn print_results(
    job: &Job,
    (totals, entries): (&Totals, &[ImageEntry]),
    options: &JobOptions,
    outputs: &Outputs,
) {
    if job.source.len() <= FEW {
        print_images(entries, options, outputs);
    } else {
        print_ranks(totals);
    }
    if outputs.png || outputs.npy {
        let kinds = match (outputs.png, outputs.npy) {
            (true, true) => "<name>-k<k>.png and .npy",
            (true, false) => "<name>-k<k>.png",
            _ => "<name>-k<k>.npy",
        };
        println!("outputs: {} ({kinds})", outputs.dir.display());
    }
    println!("report: {}", job.report_path.display());
    if let Some(max) = totals.max_check_error {
        println!("check: largest relative difference from the f64 CPU reference {max:.3e}");
    }
}

/// Where the command's time went, ms.
struct Timing {
    /// From the engines' start to the last output written.
    job_ms: f64,
    /// Opening the device(s): the slowest GPU's, plus counting the GPUs for `--gpus`.
    startup_ms: f64,
    /// The whole command.
    wall_ms: f64,
}

impl Timing {
    fn of(run: &JobRun, count_ms: f64, command_start: Instant) -> Timing {
        Timing {
            job_ms: (run.job_end - run.job_start).as_secs_f64() * 1e3,
            startup_ms: count_ms + run.startup.iter().map(|s| startup_total(&s.startup)).fold(0.0, f64::max),
            wall_ms: command_start.elapsed().as_secs_f64() * 1e3,
        }
    }
}

impl<'a> JobReport<'a> {
    fn new(
        job: &Job,
        device: &'a str,
        options: &'a JobOptions,
        totals: &Totals,
        timing: &Timing,
        startup: Vec<StartupReport>,
        results: &'a [ImageEntry],
    ) -> Self {
        JobReport {
            device,
            variant: options.variant,
            ranks: &options.ranks,
            shard: job.shard,
            images: totals.done,
            failed: totals.failed,
            resumed: job.resumed,
            pixels: totals.pixels,
            job_ms: timing.job_ms,
            startup_ms: timing.startup_ms,
            wall_ms: timing.wall_ms,
            stages: totals.stages,
            max_check_error: totals.max_check_error,
            startup,
            results,
        }
    }
}

/// Writes the `--json` report, streamed: the text of a large job's report never sits in memory
/// whole.
fn write_json(path: &Path, report: JobReport) -> anyhow::Result<()> {
    image_io::write_atomically(path, |file| {
        serde_json::to_writer_pretty(file, &report).map_err(std::io::Error::from)
    })
    .with_context(|| format!("cannot write {}", path.display()))?;
    println!("report: {}", path.display());
    Ok(())
}

/// The job's time and the stages' sums.
fn print_timing(totals: &Totals, timing: &Timing) {
    let Totals { done: computed, pixels, stages, .. } = totals;
    let Timing { job_ms, startup_ms, wall_ms } = timing;
    println!(
        "job: {} images ({pixels} pixels) in {job_ms:.1} ms after start-up; start-up {startup_ms:.1} ms (driver, \
         context, module); whole command {wall_ms:.1} ms",
        computed
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
}

/// The summary line, and the exit status: stopped by a signal (128 + the signal), a GPU of several
/// failed during the job ([`GPU_FAILED`]), some images failed ([`PARTIAL`]), or every image done.
fn exit_status(
    args: &Args,
    job: &Job,
    (totals, failed_gpus): (&Totals, &[GpuFailure]),
    signal: &Signals,
) -> ExitCode {
    let (computed, failed, resumed, images) = (totals.done, totals.failed, job.resumed, job.images);
    let done = computed + resumed;
    let earlier = if resumed > 0 { format!(" ({resumed} by an earlier run)") } else { String::new() };
    println!("summary: {done} of {images} image(s) done{earlier}, {failed} failed");
    let received = signal.received.load(Ordering::SeqCst);
    let report_path = job.report_path.display();
    if received != 0 && computed + failed < job.source.len() {
        let name = if received == SIGTERM as usize { "SIGTERM" } else { "SIGINT" };
        eprintln!(
            "stopped by {name}: {done} of {images} image(s) done, listed in {report_path}; run again with --resume \
             for the rest"
        );
        return ExitCode::from(128 + received as u8);
    }
    for GpuFailure { gpu, error } in failed_gpus {
        eprintln!("error: GPU {gpu} failed during the job ({error}); the other GPUs did its images");
    }
    if failed == 0 && failed_gpus.is_empty() {
        return ExitCode::SUCCESS;
    }
    let stopped = if args.fail_fast && computed + failed < job.source.len() {
        "; stopped at the first failure (--fail-fast)"
    } else {
        ""
    };
    if failed > 0 {
        eprintln!(
            "error: {failed} of {images} image(s) failed{stopped}; the {done} done are in {report_path}"
        );
    }
    ExitCode::from(if failed_gpus.is_empty() { PARTIAL } else { GPU_FAILED })
}

struct Signals {
    /// Set by the first: the queue hands out no more images.
    stop: Arc<AtomicBool>,
    /// The last one received, 0 before any.
    received: Arc<AtomicUsize>,
}

/// SIGINT (Ctrl-C) and SIGTERM (a scheduler's stop) stop the job gracefully: the first sets the
/// flags, so no image is started after it, the images under way are finished and written, the
/// report is completed and the command exits with 128 + the signal (130, 143) — within about an
/// image's (on the GPU, a batch's) time. A second signal, the first being set, exits at once
/// with that status: its handler, registered before the flag's, sees the flag already set.
fn on_signals() -> anyhow::Result<Signals> {
    let signals = Signals { stop: Arc::default(), received: Arc::default() };
    for signal in [SIGINT, SIGTERM] {
        flag::register_conditional_shutdown(signal, 128 + signal, Arc::clone(&signals.stop))?;
        flag::register_usize(signal, Arc::clone(&signals.received), signal as usize)?;
        flag::register(signal, Arc::clone(&signals.stop))?;
    }
    Ok(signals)
}

/// What the job writes for each image, by the command line; `original` gives the mosaic's originals.
fn outputs<'a>(args: &'a Args, original: &'a Original<'a>) -> Outputs<'a> {
    Outputs {
        dir: &args.out_dir,
        png: !args.no_images,
        npy: args.npy,
        mosaic: (args.mosaic || args.inputs.is_empty()) && !args.no_images,
        original,
    }
}

/// [`Outputs::original`].
type Original<'a> = dyn Fn(usize) -> kernel_suite::Result<ndarray::Array2<f32>> + Sync + 'a;

fn startup_total(s: &Startup) -> f64 {
    s.init_ms + s.context_ms + s.module_load_ms
}

/// Per image done, its table (a job of a few images).
fn print_images(entries: &[ImageEntry], options: &JobOptions, outputs: &Outputs) {
    for entry in entries {
        let ImageEntry::Ok(r) = entry else { continue };
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
}

/// Per rank, a summary over the images done (a job of many images).
fn print_ranks(totals: &Totals) {
    if totals.done == 0 {
        return;
    }
    println!("\n{} images; relative error per rank over the images:", totals.done);
    println!("{:>5} {:>12} {:>12} {:>14}", "k", "mean", "max", "mean E-Y bound");
    let n = totals.done as f64;
    for k in &totals.ranks {
        println!("{:>5} {:>12.6} {:>12.6} {:>14.6}", k.k, k.error_sum / n, k.error_max, k.bound_sum / n);
    }
}

/// Peak resident set size of this process (Linux `VmHWM`), MiB.
fn peak_memory_mib() -> Option<f64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib / 1024.0)
}
