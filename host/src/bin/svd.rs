//! `svd`: rank-k image reconstruction from a thin SVD, the project's main job.
//!
//! Takes PNG/JPEG files and folders of them (or, with none, a Shepp–Logan phantom), factors every
//! image and writes, per image and rank k, the reconstruction `<out>/<name>-k<k>.png` (optionally
//! `.npy`), a CSV report of the errors and, with `--json`, a full report with per-stage times.
//! Images are decoded on all cores into a bounded queue, computed by the engine (the GPU pipeline,
//! one thread per GPU, or the CPU in parallel across images) and encoded on other threads; that
//! pipeline is the library's `svd_engine`, and this file parses the command line and reports.

use anyhow::{Context, ensure};
use clap::Parser;
use indicatif::{ProgressBar, ProgressStyle};
use kernel_suite::Startup;
use kernel_suite::cli::{self, DeviceArgs, Target};
use kernel_suite::image_io;
use kernel_suite::svd::Variant;
use kernel_suite::svd_batch;
use kernel_suite::svd_engine::{Engine, GpuList, PHANTOM, Shard, Source, StartupReport};
use kernel_suite::svd_job::{JobOptions, Keep, Screen, StageTimes, check_size};
use kernel_suite::svd_outputs::{ImageEntry, Journal, Outputs, Totals, job_options, resumable};
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

An image that cannot be read, decoded or factored for the ranks does not stop the job: it is named on \
stderr and in the report (status failed), and every other image is done.

Exit status: 0 every image done; 1 the job could not run or a file could not be written (one error \
line); 3 some images failed (the others are done, as the report says); 130 or 143 stopped by SIGINT \
(Ctrl-C) or SIGTERM: the images under way are finished, the report lists every complete image, and \
--resume does the rest (a second signal exits at once).

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
    /// Most images factored together on a GPU (default: as many as fit in a batch of 32 Mi pixels;
    /// with --gpus each GPU takes the next batch when it is free). Fewer bound device memory
    /// further, and spread a small folder over several GPUs.
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
    let shard = args.shard.as_deref().map(Shard::parse).transpose()?;
    let gpus = args.gpus.as_deref().map(GpuList::parse).transpose()?;
    let (mut source, total) = Source::collect(&args.inputs, args.size, shard)?;
    let max_rank = *ranks.last().expect("ranks checked non-empty");
    if args.inputs.is_empty() {
        check_size(PHANTOM, (args.size, args.size), max_rank)?;
    }
    std::fs::create_dir_all(&args.out_dir)
        .with_context(|| format!("cannot create {}", args.out_dir.display()))?;
    // After --out-dir is made: `--json out/report.json` is the usual place.
    if let Some(dir) = args.json.as_deref().and_then(Path::parent).filter(|d| !d.as_os_str().is_empty()) {
        ensure!(dir.is_dir(), "--json: directory {} does not exist", dir.display());
    }
    let batch_images = args.batch_images.unwrap_or(svd_batch::BATCH_IMAGES);
    let options = JobOptions { ranks, check: args.check, variant: args.variant, batch_images, keep };
    let report_path = args.out_dir.join(match shard {
        Some(s) => format!("report-{}-of-{}.csv", s.index, s.count),
        None => "report.csv".into(),
    });
    let job = source.len();
    let (fingerprint, earlier) = {
        let original = |index| source.original(index);
        let outputs = outputs(&args, &original);
        let fingerprint = job_options(&options, &outputs);
        let earlier = if args.resume && report_path.exists() {
            resumable(&report_path, &fingerprint, &source.names(), &options.ranks, &outputs).unwrap_or_else(
                |why| {
                    eprintln!("note: --resume: {why}; every image is done again");
                    Vec::new()
                },
            )
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
    // Decoding starts before the device opens, so the first images are ready when it is.
    let queue = source.queue()?;
    let (engine, count_ms) = Engine::open(&args.device, gpus)?;
    let label = engine.describe();
    let mut images = match shard {
        Some(Shard { index, count }) => format!("{job} image(s): shard {index}/{count} of {total}"),
        None => format!("{job} image(s)"),
    };
    if resumed > 0 {
        images += &format!(", {resumed} done by an earlier run (--resume)");
    }
    println!("device: {label}; variant: {}; {images}; ranks {:?}", args.variant.name(), options.ranks);
    // The report starts once the job can run: a job that cannot leaves the earlier report as it was.
    // Every image's entry is kept only where it is printed or written whole.
    let keep = args.json.is_some() || source.len() <= FEW;
    let journal = Arc::new(Journal::create(&report_path, &fingerprint, earlier, positions, keep)?);
    let progress = if source.len() > FEW && std::io::stderr().is_terminal() {
        ProgressBar::new(source.len() as u64).with_style(
            ProgressStyle::with_template("{bar:30} {pos}/{len} images {elapsed} (eta {eta})")
                .expect("template"),
        )
    } else {
        ProgressBar::hidden()
    };
    let signal = on_signals()?;
    let queue = queue.screened(Screen {
        max_rank,
        fail_fast: args.fail_fast,
        stop: Arc::clone(&signal.stop),
        failed: Box::new({
            let (journal, progress) = (Arc::clone(&journal), progress.clone());
            move |failed| {
                progress.suspend(|| eprintln!("error: {}", failed.error));
                progress.inc(1);
                journal.failed(&failed)
            }
        }),
    });
    let original = |index| source.original(index);
    let outputs = outputs(&args, &original);
    let done = |report| {
        journal.done(report)?;
        progress.inc(1);
        Ok(())
    };
    let run = engine.run(&args.device, (&queue, source.len()), &options, &outputs, &done)?;
    progress.finish_and_clear();
    // The queue's screen holds the other reference to the journal.
    drop(queue);
    let journal = Arc::into_inner(journal).expect("the queue, and with it its screen, is dropped");
    let (totals, entries) = journal.finish()?;
    let job_ms = (run.job_end - run.job_start).as_secs_f64() * 1e3;
    let Totals { done: computed, failed, pixels, stages, max_check_error, .. } = totals;

    if source.len() <= FEW {
        print_images(&entries, &options, &outputs);
    } else {
        print_ranks(&totals);
    }
    if outputs.png || outputs.npy {
        let kinds = match (outputs.png, outputs.npy) {
            (true, true) => "<name>-k<k>.png and .npy",
            (true, false) => "<name>-k<k>.png",
            _ => "<name>-k<k>.npy",
        };
        println!("outputs: {} ({kinds})", outputs.dir.display());
    }
    println!("report: {}", report_path.display());
    if let Some(max) = max_check_error {
        println!("check: largest relative difference from the f64 CPU reference {max:.3e}");
    }
    let startup_ms = count_ms + run.startup.iter().map(|s| startup_total(&s.startup)).fold(0.0, f64::max);
    let wall_ms = command_start.elapsed().as_secs_f64() * 1e3;
    if let Some(path) = &args.json {
        let report = JobReport {
            device: &label,
            variant: args.variant,
            ranks: &options.ranks,
            shard,
            images: computed,
            failed,
            resumed,
            pixels,
            job_ms,
            startup_ms,
            wall_ms,
            stages,
            max_check_error,
            startup: run.startup,
            results: &entries,
        };
        // Streamed: the text of a large job's report never sits in memory whole.
        image_io::write_atomically(path, |file| {
            serde_json::to_writer_pretty(file, &report).map_err(std::io::Error::from)
        })
        .with_context(|| format!("cannot write {}", path.display()))?;
        println!("report: {}", path.display());
    }
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
    if args.device.profile {
        for gpu in &run.gpus {
            eprintln!("{}", gpu.timeline(run.job_start, run.job_end));
            if let Some(profile) = &gpu.profile {
                eprintln!("GPU {}: {profile}", gpu.gpu);
            }
        }
    }
    if let Engine::One(device) = engine {
        args.device.print_profile(&Target::Kernels(device))?;
    }
    let done = computed + resumed;
    let earlier = if resumed > 0 { format!(" ({resumed} by an earlier run)") } else { String::new() };
    println!("summary: {done} of {job} image(s) done{earlier}, {failed} failed");
    let received = signal.received.load(Ordering::SeqCst);
    if received != 0 && computed + failed < source.len() {
        let name = if received == SIGTERM as usize { "SIGTERM" } else { "SIGINT" };
        eprintln!(
            "stopped by {name}: {done} of {job} image(s) done, listed in {}; run again with --resume for the rest",
            report_path.display()
        );
        return Ok(ExitCode::from(128 + received as u8));
    }
    if failed == 0 {
        return Ok(ExitCode::SUCCESS);
    }
    let stopped = if args.fail_fast && computed + failed < source.len() {
        "; stopped at the first failure (--fail-fast)"
    } else {
        ""
    };
    eprintln!(
        "error: {failed} of {job} image(s) failed{stopped}; the {done} done are in {}",
        report_path.display()
    );
    Ok(ExitCode::from(PARTIAL))
}

/// What SIGINT and SIGTERM have done ([`on_signals`]).
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
