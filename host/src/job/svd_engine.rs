//! What runs the `svd` job: its images ([`Source`], from the phantom or files and folders, sharded
//! with [`Shard`]), the engine ([`Engine`]: the CPU, one GPU or the simulator, or several GPUs
//! with one thread each) and [`Engine::run`], which feeds the engine from the decoding queue and
//! writes each finished image's outputs on encoder threads. The `svd` binary parses the command
//! line and reports; everything between is here.

use crate::cli::{DeviceArgs, DeviceChoice, Target};
use crate::profile::Report;
use crate::svd_batch::{BatchSpan, run_gpu, run_gpu_staged};
use crate::svd_job::{self, ImageQueue, ImageResult, JobImage, JobOptions, Pixels, run_cpu};
use crate::svd_outputs::{ImageReport, Outputs};
use crate::{Device, GpuOptions, Startup, device::gpu_count, svd};
use anyhow::{Context, anyhow, bail, ensure};
use ndarray::Array2;
use serde::Serialize;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{SyncSender, sync_channel};
use std::time::Instant;

/// `--shard I/N`: every `N`-th image of the job from the `I`-th (0-based) on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Shard {
    /// `I`, 0 ≤ `I` < `N`.
    pub index: usize,
    /// `N`.
    pub count: usize,
}

impl Shard {
    /// Parses `I/N`.
    pub fn parse(text: &str) -> anyhow::Result<Shard> {
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
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GpuList {
    /// `all`.
    All,
    /// Indices, sorted, without repeats.
    Some(Vec<u32>),
}

impl GpuList {
    /// Parses `all` or indices separated by commas.
    pub fn parse(text: &str) -> anyhow::Result<GpuList> {
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

/// The default image's name, that of its outputs.
pub const PHANTOM: &str = "shepp-logan";

/// Where the job's images come from.
pub enum Source {
    /// The default image.
    Phantom(Array2<f32>),
    /// Files; image `i` of the job is `files[i]`.
    Files(Vec<PathBuf>),
}

impl Source {
    /// The job's images: with no `inputs`, the `size` × `size` Shepp–Logan phantom; else the files
    /// of the inputs (directories listed in name order, their PNG and JPEG files), every one checked
    /// to exist and names unique (outputs are named after them), then sharded. Also returns the
    /// number of images before sharding.
    pub fn collect(inputs: &[PathBuf], size: usize, shard: Option<Shard>) -> anyhow::Result<(Source, usize)> {
        if inputs.is_empty() {
            ensure!(size >= 1, "--size must be at least 1");
            return Ok((Source::Phantom(svd::shepp_logan(size)), 1));
        }
        let mut files = Vec::new();
        for input in inputs {
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

    /// The number of images.
    pub fn len(&self) -> usize {
        match self {
            Source::Phantom(_) => 1,
            Source::Files(files) => files.len(),
        }
    }

    /// Whether there are none (a shard past the last file, or everything done by `--resume`).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The images' names (those of their outputs), in order.
    pub fn names(&self) -> Vec<String> {
        match self {
            Source::Phantom(_) => vec![PHANTOM.into()],
            Source::Files(files) => files.iter().map(|f| svd_job::image_name(f)).collect(),
        }
    }

    /// Keeps the images whose name `keep` accepts (`--resume` drops those done), and returns
    /// where each kept image was: the [`crate::svd_outputs::Journal`]'s positions. The images
    /// are numbered afresh from 0, so the queue's indices stay contiguous.
    pub fn retain(&mut self, keep: impl Fn(&str) -> bool) -> Vec<usize> {
        let kept: Vec<usize> =
            self.names().iter().enumerate().filter(|(_, n)| keep(n)).map(|(i, _)| i).collect();
        match self {
            Source::Phantom(_) if kept.is_empty() => *self = Source::Files(Vec::new()),
            Source::Phantom(_) => {}
            Source::Files(files) => *files = kept.iter().map(|&i| files[i].clone()).collect(),
        }
        kept
    }

    /// The original pixels of image `index` (decoded again from its file), for the mosaic.
    pub fn original(&self, index: usize) -> crate::Result<Array2<f32>> {
        match self {
            Source::Phantom(image) => Ok(image.clone()),
            Source::Files(files) => Ok(svd_job::decode_file(&files[index])?.to_f32()),
        }
    }

    /// The queue of the job's images: decoded on a background pool for files, so the first
    /// images are ready when the device is open. The job screens it ([`ImageQueue::screened`])
    /// once its report is started.
    pub fn queue(&self) -> crate::Result<ImageQueue> {
        Ok(match self {
            Source::Phantom(image) => ImageQueue::from_images(vec![JobImage {
                index: 0,
                name: PHANTOM.into(),
                pixels: Pixels::Float(image.clone()),
            }]),
            Source::Files(files) => svd_job::decode_into_queue(files.clone())?,
        })
    }
}

/// What runs the job.
pub enum Engine {
    /// The CPU engine, parallel across images.
    Cpu,
    /// The GPU engine on one device (a GPU or the simulator), on the calling thread.
    One(Device),
    /// The GPU engine on several GPUs, one thread each, all taking images from one queue.
    Many(Vec<u32>),
}

/// The start-up of one GPU, as reported.
#[derive(Debug, Serialize)]
pub struct StartupReport {
    /// The GPU's index.
    pub gpu: u32,
    /// Its driver, context and module times.
    #[serde(flatten)]
    pub startup: Startup,
}

/// Where [`Engine::run`] hands each image's report once its outputs are written (from an encoder
/// thread); an error it returns stops the job.
pub type Done<'a> = &'a (dyn Fn(ImageReport) -> anyhow::Result<()> + Sync);

/// What [`Engine::run`] returns.
pub struct JobRun {
    /// Each GPU's start-up, by GPU index.
    pub startup: Vec<StartupReport>,
    /// When the first engine started (after its device opened).
    pub job_start: Instant,
    /// When the last image's outputs were written and the last engine finished: before the
    /// devices of several GPUs are closed (a context's teardown, like its start-up, is no part
    /// of the job; one GPU's device outlives the run).
    pub job_end: Instant,
    /// Each GPU's part of the job, by GPU index (none on the CPU).
    pub gpus: Vec<GpuRun>,
}

/// One GPU's part of a job.
pub struct GpuRun {
    /// The GPU's index (`--gpu`, or its place in `--gpus`).
    pub gpu: u32,
    /// Its batches, in the order it ran them.
    pub batches: Vec<BatchSpan>,
    /// With `--profile` on several GPUs, its profile (one GPU's is the device's own, printed by
    /// the command).
    pub profile: Option<Report>,
}

impl GpuRun {
    /// The GPU's timeline in words: per batch when each step ended (ms from `origin`, the job's
    /// start), then where its time between `origin` and `end` (the job's end) went.
    pub fn timeline(&self, origin: Instant, end: Instant) -> String {
        let ms = |t: Instant| t.saturating_duration_since(origin).as_secs_f64() * 1e3;
        let span = |from: Instant, to: Instant| to.saturating_duration_since(from).as_secs_f64() * 1e3;
        let images: usize = self.batches.iter().map(|b| b.images).sum();
        let mut text = format!(
            "GPU {} timeline: {} batch(es), {images} image(s); ms from the job's start when the queue was asked, \
             the batch taken, uploaded, factored, copied back, handed to the encoders\n",
            self.gpu,
            self.batches.len()
        );
        let (mut waiting, mut upload, mut factor, mut back, mut handing) = (0.0, 0.0, 0.0, 0.0, 0.0);
        for (i, b) in self.batches.iter().enumerate() {
            let s = &b.steps;
            text += &format!(
                "  batch {i:>3}: {:>3} images  {:>9.1} {:>9.1} {:>9.1} {:>9.1} {:>9.1} {:>9.1}\n",
                b.images,
                ms(b.asked),
                ms(b.taken),
                ms(s.uploaded),
                ms(s.factored),
                ms(s.copied),
                ms(b.handed)
            );
            waiting += span(b.asked, b.taken);
            upload += span(b.taken, s.uploaded);
            factor += span(s.uploaded, s.factored);
            back += span(s.factored, s.copied);
            handing += span(s.copied, b.handed);
        }
        let last = self.batches.last().map_or(origin, |b| b.handed);
        text += &format!(
            "  sums (ms): waiting for images {waiting:.1}, upload {upload:.1}, factorisation {factor:.1}, \
             reconstruction and copies back {back:.1}, handing over {handing:.1}; idle after its last batch {:.1}",
            span(last, end)
        );
        text
    }
}

impl Engine {
    /// Opens what runs the job: `--device cpu` the CPU engine; `sim` the simulator; `gpu`/`auto`
    /// the GPU of `--gpu`, or those of `--gpus` (with `auto`, falling back to the CPU when there is
    /// none). Also returns the time spent counting the GPUs for `--gpus` (it starts the driver), ms.
    pub fn open(device: &DeviceArgs, gpus: Option<GpuList>) -> anyhow::Result<(Engine, f64)> {
        let choice = device.device;
        if gpus.is_some() && matches!(choice, DeviceChoice::Cpu | DeviceChoice::Sim) {
            bail!("--gpus needs --device gpu or auto");
        }
        let start = Instant::now();
        let ordinals = match gpus {
            None => vec![device.gpu],
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
            let one = DeviceArgs { gpu: ordinal, ..device.clone() };
            return Ok(match one.select_for_job()? {
                Target::Kernels(device) => (Engine::One(device), count_ms),
                Target::CpuReference => (Engine::Cpu, 0.0),
            });
        }
        Ok((Engine::Many(ordinals), count_ms))
    }

    /// What runs the job, in words.
    pub fn describe(&self) -> String {
        match self {
            Engine::Cpu => format!("CPU (faer, {} threads)", rayon::current_num_threads()),
            Engine::One(device) => device.describe(),
            Engine::Many(ordinals) => format!("{} GPUs ({ordinals:?})", ordinals.len()),
        }
    }

    /// Runs the job: the engine(s) take the images of `queue` (`images` of them), and encoder
    /// threads (one per core) write each finished image's `outputs`, then hand its report to
    /// `done`. `device` is what opened the engine (its `--gpu`, and for several GPUs the options
    /// each opens with, and `--profile`). On several GPUs, a folder too small to give every GPU
    /// a full batch is spread evenly: batches hold at most `images / GPUs` (rounded up). The
    /// first error of any thread (an engine's, a file that cannot be written, `done`'s) stops the
    /// others and is returned; images that fail in a screened queue are no error here.
    ///
    /// Engines hand results over a bounded channel and block while it is full; the CPU engine
    /// does so from rayon's global pool. The encoders therefore never use that pool: each image's
    /// files are written on a pool of the encoders' own, whose threads block on nothing but
    /// their own work, so the consumer of the channel always makes progress.
    pub fn run(
        &self,
        device: &DeviceArgs,
        (queue, images): (&ImageQueue, usize),
        options: &JobOptions,
        outputs: &Outputs,
        done: Done,
    ) -> anyhow::Result<JobRun> {
        let encoders = std::thread::available_parallelism().map_or(1, |n| n.get());
        let encoding = rayon::ThreadPoolBuilder::new()
            .num_threads(encoders)
            .thread_name(|i| format!("svd-encode-{i}"))
            .build()
            .context("cannot start the encoding threads")?;
        // Bounded: when encoding falls behind, the engines wait instead of piling up reconstructions.
        let (sender, receiver) = sync_channel::<ImageResult>(encoders);
        let receiver = Mutex::new(receiver);
        let failure = Failure::default();
        let startups = Mutex::new(Vec::new());
        let starts = Mutex::new(Vec::new());
        let ends = Mutex::new(Vec::new());
        let ended = |at: Instant| ends.lock().expect("no panics while holding the lock").push(at);
        let gpu_runs = Mutex::new(Vec::new());
        let record = |run: GpuRun| gpu_runs.lock().expect("no panics while holding the lock").push(run);
        // Encoders still running: several GPUs' engines close their devices only once none is, so
        // that the contexts' teardown (hundreds of milliseconds of driver work) does not compete
        // with the last images' encoding.
        let encoding_left = (Mutex::new(encoders), std::sync::Condvar::new());
        let encoding_done = || {
            let (left, changed) = &encoding_left;
            let mut left = left.lock().expect("no panics while holding the lock");
            while *left > 0 {
                left = changed.wait(left).expect("no panics while holding the lock");
            }
        };
        std::thread::scope(|scope| {
            for _ in 0..encoders {
                scope.spawn(|| {
                    // When this encoder finished its last image (it exits once every engine is done).
                    let mut last = None;
                    loop {
                        let next = receiver.lock().expect("no panics while holding the lock").recv();
                        let Ok(mut result) = next else { break };
                        if failure.failed() {
                            continue;
                        }
                        let start = Instant::now();
                        let written =
                            encoding.install(|| outputs.write(&result)).map_err(anyhow::Error::from);
                        let reported = written.and_then(|()| {
                            result.times.encode_ms = start.elapsed().as_secs_f64() * 1e3;
                            done(ImageReport::from(result))
                        });
                        if let Err(e) = reported {
                            failure.record(e);
                        }
                        last = Some(Instant::now());
                    }
                    last.map(ended);
                    let (left, changed) = &encoding_left;
                    *left.lock().expect("no panics while holding the lock") -= 1;
                    changed.notify_all();
                });
            }
            let failure = &failure;
            // An engine's sink: the channel closes, and the encoders stop, once every engine has
            // dropped its own.
            let sink_with = |sender: SyncSender<ImageResult>| {
                move |mut result: ImageResult| -> crate::Result<()> {
                    let stopped = || crate::Error::InvalidInput("stopped after an earlier error".into());
                    if failure.failed() {
                        return Err(stopped());
                    }
                    result.times.decode_ms = queue.take_decode_ms(result.index);
                    sender.send(result).map_err(|_| stopped())
                }
            };
            let started = |gpu_startup: Option<StartupReport>| {
                starts.lock().expect("no panics while holding the lock").push(Instant::now());
                startups.lock().expect("no panics while holding the lock").extend(gpu_startup);
            };
            match self {
                Engine::Cpu => {
                    started(None);
                    if let Err(e) = run_cpu(queue, options, &sink_with(sender)) {
                        failure.record(e.into());
                    }
                    ended(Instant::now());
                }
                Engine::One(one) => {
                    started(one.startup().map(|startup| StartupReport { gpu: device.gpu, startup }));
                    match run_gpu(one, queue, options, &sink_with(sender)) {
                        Ok(batches) => record(GpuRun { gpu: device.gpu, batches, profile: None }),
                        Err(e) => failure.record(e.into()),
                    }
                    ended(Instant::now());
                }
                Engine::Many(ordinals) => {
                    let gpu_options =
                        GpuOptions { max_registers: device.max_registers, force_ptx: device.ptx };
                    let spread = JobOptions {
                        batch_images: options.batch_images.min(images.div_ceil(ordinals.len()).max(1)),
                        ..options.clone()
                    };
                    // The job starts once every GPU is open: a GPU that opened late would find
                    // the work taken.
                    let all_open = std::sync::Barrier::new(ordinals.len());
                    let encoding_done = &encoding_done;
                    std::thread::scope(|gpus| {
                        for &gpu in ordinals {
                            let (started, all_open, record, spread) = (&started, &all_open, &record, &spread);
                            let sink = sink_with(sender.clone());
                            gpus.spawn(move || {
                                let run = || -> anyhow::Result<()> {
                                    // A device belongs to the thread that opened it.
                                    let opened = Device::gpu_with(gpu, gpu_options).and_then(|d| {
                                        if device.profile {
                                            d.enable_profiling()?;
                                        }
                                        let staging = d.staging()?;
                                        Ok((d, staging))
                                    });
                                    all_open.wait();
                                    let (opened, mut staging) = opened?;
                                    println!("GPU {gpu}: {}", opened.describe());
                                    started(opened.startup().map(|startup| StartupReport { gpu, startup }));
                                    let batches = run_gpu_staged(&opened, &mut staging, queue, spread, &sink)
                                        .with_context(|| format!("GPU {gpu}"))?;
                                    ended(Instant::now());
                                    drop(sink);
                                    encoding_done();
                                    let profile = opened.profile_report()?;
                                    record(GpuRun { gpu, batches, profile });
                                    Ok(())
                                };
                                if let Err(e) = run() {
                                    failure.record(e);
                                }
                            });
                        }
                        drop(sender);
                    });
                }
            }
        });
        failure.into_result()?;
        let job_start =
            starts.into_inner().expect("no poisoned lock").into_iter().min().unwrap_or_else(Instant::now);
        let job_end =
            ends.into_inner().expect("no poisoned lock").into_iter().max().unwrap_or_else(Instant::now);
        let mut startup = startups.into_inner().expect("no poisoned lock");
        startup.sort_by_key(|s| s.gpu);
        let mut gpus = gpu_runs.into_inner().expect("no poisoned lock");
        gpus.sort_by_key(|g| g.gpu);
        Ok(JobRun { startup, job_start, job_end, gpus })
    }
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
