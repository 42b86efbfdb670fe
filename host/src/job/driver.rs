//! What runs the `svd` job: its images ([`Source`], from the phantom or files and folders, sharded
//! with [`Shard`]), the engine ([`Engine`]: the CPU, one GPU or the simulator, or several GPUs
//! with one thread each, opened as [`EngineOptions`] say) and [`Engine::run`], which feeds the
//! engine from the decoding queue and writes each finished image's outputs on encoder threads.
//! The `svd` binary parses the command line (and builds the [`EngineOptions`] from it) and
//! reports; everything between is here.

use super::cpu_engine::run_cpu;
use super::gpu_engine::{BatchSpan, Faults, TooLarge, is_device_failure, run_gpu_staged};
use super::images::{ImageResult, JobImage, JobOptions, Pixels};
use super::input_queue::{ImageQueue, decode_file, decode_into_queue, image_name};
use super::lock::{into_inner, lock, wait};
use super::outputs::{ImageReport, Outputs};
use crate::families::svd::phantom::shepp_logan;
use crate::launch::device::{Device, GpuOptions, Staging, Startup, gpu_count};
use crate::launch::error;
use crate::launch::profile::Report;
use anyhow::{Context, anyhow, bail, ensure};
use ndarray::Array2;
use serde::Serialize;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, sync_channel};
use std::sync::{Barrier, Condvar, Mutex};
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
            return Ok((Source::Phantom(shepp_logan(size)), 1));
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
            if let Some(other) = names.insert(image_name(file), file) {
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
            Source::Files(files) => files.iter().map(|f| image_name(f)).collect(),
        }
    }

    /// Keeps the images whose name `keep` accepts (`--resume` drops those done), and returns
    /// where each kept image was: the [`super::outputs::Journal`]'s positions. The images
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
    pub fn original(&self, index: usize) -> error::Result<Array2<f32>> {
        match self {
            Source::Phantom(image) => Ok(image.clone()),
            Source::Files(files) => Ok(decode_file(&files[index])?.to_f32()),
        }
    }

    /// The queue of the job's images: decoded on a background pool for files, so the first
    /// images are ready when the device is open. The job screens it ([`ImageQueue::screened`])
    /// once its report is started.
    pub fn queue(&self) -> error::Result<ImageQueue> {
        Ok(match self {
            Source::Phantom(image) => ImageQueue::from_images(vec![JobImage {
                index: 0,
                name: PHANTOM.into(),
                pixels: Pixels::Float(image.clone()),
            }]),
            Source::Files(files) => decode_into_queue(files.clone())?,
        })
    }
}

/// Where the job runs (the command line's `--device`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EngineDevice {
    /// A GPU if one is usable, else the CPU engine (saying so on stderr).
    Auto,
    /// A GPU; an error without one.
    Gpu,
    /// The GPU engine in the CPU simulator.
    Simulator,
    /// The CPU engine.
    Cpu,
}

/// How the job's engine opens and runs, as the command line asked (`--device`, `--gpu`,
/// `--gpus`, `--max-registers`, `--ptx`, `--profile`); the `svd` binary builds it.
#[derive(Debug, Clone)]
pub struct EngineOptions {
    /// Where.
    pub device: EngineDevice,
    /// The GPU (or simulator) of a one-device engine.
    pub gpu: u32,
    /// Several GPUs instead (`Some` needs [`EngineDevice::Gpu`] or [`EngineDevice::Auto`], or
    /// indices with [`EngineDevice::Simulator`]: a simulated device each, for tests).
    pub gpus: Option<GpuList>,
    /// How each GPU opens.
    pub gpu_options: GpuOptions,
    /// Record every kernel for a profile (GPU only).
    pub profile: bool,
}

/// What runs the job.
pub enum Engine {
    /// The CPU engine, parallel across images.
    Cpu,
    /// The GPU engine on one device (a GPU or the simulator), on the calling thread, with the
    /// page-locked staging it copies through, made as the device opens (milliseconds of the
    /// driver's page-locking, done while the first images decode).
    One(Device, Staging),
    /// The GPU engine on several GPUs (or simulated devices), one thread each, all taking images
    /// from one queue.
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
    /// Each GPU's part of the job, by GPU index (none on the CPU); a GPU that failed has none.
    pub gpus: Vec<GpuRun>,
    /// The GPUs that failed while other GPUs went on with the job (they took its unfinished
    /// images), by GPU index.
    pub failed_gpus: Vec<GpuFailure>,
}

/// A GPU of several that failed during the job: its unfinished batch went back to the queue, and
/// the others did it.
#[derive(Debug, Clone)]
pub struct GpuFailure {
    /// The GPU's index.
    pub gpu: u32,
    /// What failed, in one line.
    pub error: String,
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
        // Each distinct plan its batches ran by: which Ritz solver, Cholesky variant and launch
        // shapes the factorisation chose.
        let mut plans: Vec<String> = Vec::new();
        for plan in self.batches.iter().map(|b| b.steps.plan.to_string()) {
            if !plans.contains(&plan) {
                plans.push(plan);
            }
        }
        for plan in plans {
            text += &format!("\n{plan}");
        }
        text
    }
}

impl Engine {
    /// Opens what runs the job: [`EngineDevice::Cpu`] the CPU engine; `Simulator` the simulator
    /// (with the memory of [`SIM_MEMORY_ENV`] where set; one per index of `gpus`); `Gpu`/`Auto`
    /// the GPU of [`EngineOptions::gpu`], or those of [`EngineOptions::gpus`] (with `Auto`,
    /// falling back to the CPU when there is none, or one GPU's memory is too full to start it). A
    /// GPU too full to start is an error that says so. Also returns the time spent counting the
    /// GPUs for `gpus` (it starts the driver), ms.
    pub fn open(options: &EngineOptions) -> anyhow::Result<(Engine, f64)> {
        let choice = options.device;
        match (&options.gpus, choice) {
            (Some(_), EngineDevice::Cpu) => bail!("--gpus needs --device gpu or auto"),
            (Some(GpuList::All), EngineDevice::Simulator) => {
                bail!("--device sim takes --gpus as indices (a simulated device each), e.g. --gpus 0,1")
            }
            _ => {}
        }
        let start = Instant::now();
        let ordinals = match &options.gpus {
            None => vec![options.gpu],
            Some(GpuList::Some(ordinals)) if choice == EngineDevice::Simulator => ordinals.clone(),
            Some(list) => {
                let count = match gpu_count() {
                    Ok(count) => count,
                    Err(e) if choice == EngineDevice::Auto && e.is_no_gpu() => {
                        eprintln!("note: {e}; falling back to the CPU reference (--device cpu)");
                        return Ok((Engine::Cpu, 0.0));
                    }
                    Err(e) => return Err(e.into()),
                };
                let ordinals = match list {
                    GpuList::All => (0..count).collect(),
                    GpuList::Some(ordinals) => ordinals.clone(),
                };
                if let Some(bad) = ordinals.iter().find(|&&i| i >= count) {
                    bail!("--gpus: GPU index {bad} requested, {count} GPU(s) present");
                }
                ordinals
            }
        };
        let count_ms = start.elapsed().as_secs_f64() * 1e3;
        if let [ordinal] = ordinals[..] {
            return Ok(match Engine::open_one(options, ordinal)? {
                engine @ Engine::One(..) => (engine, count_ms),
                engine => (engine, 0.0),
            });
        }
        Ok((Engine::Many(ordinals), count_ms))
    }

    /// One device: GPU `gpu` (or the simulator, or the CPU), recording its kernels when profiled.
    fn open_one(options: &EngineOptions, gpu: u32) -> anyhow::Result<Engine> {
        let device = match options.device {
            EngineDevice::Cpu => None,
            EngineDevice::Simulator => Some(simulator()?),
            EngineDevice::Gpu => Some(
                Device::gpu_with(gpu, &crate::KERNELS, options.gpu_options)
                    .map_err(|e| start_failure(gpu, e))?,
            ),
            EngineDevice::Auto => match Device::gpu_with(gpu, &crate::KERNELS, options.gpu_options) {
                Ok(device) => Some(device),
                Err(e) if e.is_no_gpu() => {
                    eprintln!("note: {e}; falling back to the CPU reference (--device cpu)");
                    None
                }
                Err(e) if e.is_out_of_memory() => {
                    eprintln!(
                        "note: GPU {gpu} has too little free memory to start ({e}); falling back to the CPU (--device cpu)"
                    );
                    None
                }
                Err(e) => return Err(e.into()),
            },
        };
        let recording = match &device {
            Some(device) if options.profile => device.enable_profiling()?,
            _ => false,
        };
        if options.profile && !recording {
            eprintln!("note: --profile needs a GPU; this run is not profiled");
        }
        Ok(match device {
            Some(device) => {
                let staging = device.staging().map_err(|e| start_failure(gpu, e))?;
                Engine::One(device, staging)
            }
            None => Engine::Cpu,
        })
    }

    /// What the GPU engine does with an image too large for the GPU: with `--device auto`, the
    /// CPU takes it.
    fn too_large(options: &EngineOptions) -> TooLarge {
        if options.device == EngineDevice::Auto { TooLarge::Cpu } else { TooLarge::Fail }
    }

    /// What runs the job, in words.
    pub fn describe(&self) -> String {
        match self {
            Engine::Cpu => format!("CPU (faer, {} threads)", rayon::current_num_threads()),
            Engine::One(device, _) => device.describe(),
            Engine::Many(ordinals) => format!("{} GPUs ({ordinals:?})", ordinals.len()),
        }
    }

    /// Runs the job: the engine(s) take the images of `queue` (`images` of them), and encoder
    /// threads (one per core) write each finished image's `outputs`, then hand its report to
    /// `done`. `options` are those the engine was opened with (its GPU, and for several GPUs the
    /// options each opens with, and the profile). On several GPUs, a folder too small to give
    /// every GPU a full batch is spread evenly: batches hold at most `images / GPUs` (rounded
    /// up). The first error of any thread (an engine's, a file that cannot be written, `done`'s)
    /// stops the others and is returned; images that fail in a screened queue are no error here.
    ///
    /// Engines hand results over a bounded channel and block while it is full; the CPU engine
    /// does so from rayon's global pool. The encoders therefore never use that pool: each image's
    /// files are written on a pool of the encoders' own, whose threads block on nothing but
    /// their own work, so the consumer of the channel always makes progress.
    pub fn run(
        &mut self,
        options: &EngineOptions,
        (queue, images): (&ImageQueue, usize),
        job: &JobOptions,
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
        let run = RunState::new(queue, encoders);
        let encoder = Encoder { receiver: Mutex::new(receiver), pool: encoding, outputs, done };
        std::thread::scope(|scope| {
            for _ in 0..encoders {
                scope.spawn(|| encoder.run(&run));
            }
            match self {
                Engine::Cpu => run.on_cpu(job, sender),
                Engine::One(device, staging) => run.on_device((device, staging), options, job, sender),
                Engine::Many(ordinals) => {
                    let spread = JobOptions {
                        batch_images: job.batch_images.min(images.div_ceil(ordinals.len()).max(1)),
                        ..job.clone()
                    };
                    run.on_gpus(ordinals, options, &spread, sender);
                }
            }
        });
        run.finish()
    }
}

/// What the threads of one [`Engine::run`] share: the queue, the first failure, and what each
/// engine and encoder reports of its start and end.
struct RunState<'a> {
    queue: &'a ImageQueue,
    failure: Failure,
    startups: Mutex<Vec<StartupReport>>,
    /// When each engine started.
    starts: Mutex<Vec<Instant>>,
    /// When each engine, and each encoder that wrote an image, finished.
    ends: Mutex<Vec<Instant>>,
    gpu_runs: Mutex<Vec<GpuRun>>,
    /// GPUs of several still running the job.
    running: Mutex<usize>,
    /// GPUs of several that failed while others went on.
    failed_gpus: Mutex<Vec<GpuFailure>>,
    /// Encoders still running: several GPUs' engines close their devices only once none is, so
    /// that the contexts' teardown (hundreds of milliseconds of driver work) does not compete
    /// with the last images' encoding.
    encoding_left: (Mutex<usize>, Condvar),
}

impl<'a> RunState<'a> {
    fn new(queue: &'a ImageQueue, encoders: usize) -> Self {
        RunState {
            queue,
            failure: Failure::default(),
            startups: Mutex::new(Vec::new()),
            starts: Mutex::new(Vec::new()),
            ends: Mutex::new(Vec::new()),
            gpu_runs: Mutex::new(Vec::new()),
            running: Mutex::new(0),
            failed_gpus: Mutex::new(Vec::new()),
            encoding_left: (Mutex::new(encoders), Condvar::new()),
        }
    }

    /// An engine started now (after its device opened).
    fn started(&self, startup: Option<StartupReport>) {
        lock(&self.starts).push(Instant::now());
        lock(&self.startups).extend(startup);
    }

    fn ended(&self, at: Instant) {
        lock(&self.ends).push(at);
    }

    /// An encoder is done (it exits once every engine is).
    fn encoder_done(&self) {
        let (left, changed) = &self.encoding_left;
        *lock(left) -= 1;
        changed.notify_all();
    }

    /// Waits until every encoder is done.
    fn encoding_done(&self) {
        let (left, changed) = &self.encoding_left;
        let mut left = lock(left);
        while *left > 0 {
            left = wait(changed, left);
        }
    }

    /// An engine's sink: hands each result to the encoders with its decode time. The channel
    /// closes, and the encoders stop, once every engine has dropped its own.
    fn sink(&self, sender: SyncSender<ImageResult>) -> impl Fn(ImageResult) -> error::Result<()> + Sync + '_ {
        move |mut result: ImageResult| {
            let stopped = || error::Error::InvalidInput("stopped after an earlier error".into());
            if self.failure.failed() {
                return Err(stopped());
            }
            result.times.decode_ms = self.queue.take_decode_ms(result.index);
            sender.send(result).map_err(|_| stopped())
        }
    }

    /// The CPU engine, on the calling thread (and rayon's pool).
    fn on_cpu(&self, job: &JobOptions, sender: SyncSender<ImageResult>) {
        self.started(None);
        if let Err(e) = run_cpu(self.queue, job, &self.sink(sender)) {
            self.failure.record(e.into());
        }
        self.ended(Instant::now());
    }

    /// The GPU engine on one device (GPU [`EngineOptions::gpu`], or the simulator), on the calling
    /// thread.
    fn on_device(
        &self,
        (device, staging): (&Device, &mut Staging),
        options: &EngineOptions,
        job: &JobOptions,
        sender: SyncSender<ImageResult>,
    ) {
        let gpu = options.gpu;
        self.started(device.startup().map(|startup| StartupReport { gpu, startup }));
        let faults = Faults::injected(gpu)
            .map(|fail_at_batch| Faults { fail_at_batch, ..Faults::alone(Engine::too_large(options)) });
        let batches = faults.and_then(|faults| {
            run_gpu_staged(device, staging, self.queue, (job, faults), &self.sink(sender))
        });
        match batches {
            Ok(batches) => lock(&self.gpu_runs).push(GpuRun { gpu, batches, profile: None }),
            Err(e) => self.failure.record(e.into()),
        }
        self.ended(Instant::now());
    }

    /// The GPU engine on several GPUs, one thread each, all taking images from one queue. The
    /// job starts once every GPU is open: a GPU that opened late would find the work taken. A GPU
    /// that fails during the job gives its unfinished batch back to the queue and stops, and the
    /// others go on ([`RunState::gpu_failed`]).
    fn on_gpus(
        &self,
        ordinals: &[u32],
        options: &EngineOptions,
        job: &JobOptions,
        sender: SyncSender<ImageResult>,
    ) {
        let all_open = Barrier::new(ordinals.len());
        *lock(&self.running) = ordinals.len();
        std::thread::scope(|gpus| {
            for &gpu in ordinals {
                let (all_open, sink) = (&all_open, self.sink(sender.clone()));
                gpus.spawn(move || match self.on_gpu(gpu, options, job, all_open, sink) {
                    Ok(()) => *lock(&self.running) -= 1,
                    Err(Stop::Gpu(e)) => self.gpu_failed(gpu, e),
                    Err(Stop::Job(e)) => {
                        *lock(&self.running) -= 1;
                        self.failure.record(e);
                    }
                });
            }
            drop(sender);
        });
    }

    /// A GPU of [`RunState::on_gpus`] failed with `error` after giving its unfinished batch back:
    /// the other GPUs still running take it, with a note; the last GPU's failure ends the job.
    fn gpu_failed(&self, gpu: u32, error: error::Error) {
        let mut running = lock(&self.running);
        *running -= 1;
        if *running == 0 {
            self.failure.record(anyhow!("GPU {gpu}: {error}"));
            return;
        }
        drop(running);
        self.queue.note(&format!(
            "GPU {gpu} failed ({error}); its unfinished images went back to the queue, and the other GPUs do them"
        ));
        lock(&self.failed_gpus).push(GpuFailure { gpu, error: error.to_string() });
    }

    /// One GPU's thread of [`RunState::on_gpus`]: opens the GPU (a device belongs to the thread
    /// that opened it; a simulated device with `--device sim`), waits for the others, runs the
    /// engine, and once the encoders are done too closes the device. A failure of the device during
    /// the job is [`Stop::Gpu`], its unfinished batch given back to the queue.
    fn on_gpu(
        &self,
        gpu: u32,
        options: &EngineOptions,
        job: &JobOptions,
        all_open: &Barrier,
        sink: impl Fn(ImageResult) -> error::Result<()> + Sync,
    ) -> Result<(), Stop> {
        let opened = open_device(gpu, options).and_then(|d| {
            if options.profile {
                d.enable_profiling()?;
            }
            let staging = d.staging()?;
            Ok((d, staging))
        });
        all_open.wait();
        let (opened, mut staging) = opened.map_err(|e| Stop::Job(start_failure(gpu, e)))?;
        println!("GPU {gpu}: {}", opened.describe());
        self.started(opened.startup().map(|startup| StartupReport { gpu, startup }));
        let faults = Faults {
            too_large: Engine::too_large(options),
            hand_back: true,
            fail_at_batch: Faults::injected(gpu).map_err(|e| Stop::Job(e.into()))?,
        };
        let batches = match run_gpu_staged(&opened, &mut staging, self.queue, (job, faults), &sink) {
            Ok(batches) => batches,
            Err(e) if is_device_failure(&e) => return Err(Stop::Gpu(e)),
            Err(e) => return Err(Stop::Job(anyhow::Error::from(e).context(format!("GPU {gpu}")))),
        };
        self.ended(Instant::now());
        drop(sink);
        self.encoding_done();
        let profile = opened.profile_report().map_err(|e| Stop::Job(e.into()))?;
        lock(&self.gpu_runs).push(GpuRun { gpu, batches, profile });
        Ok(())
    }

    /// The run's result once every thread is done: its first error, or what it reports.
    fn finish(self) -> anyhow::Result<JobRun> {
        self.failure.into_result()?;
        let job_start = into_inner(self.starts).into_iter().min().unwrap_or_else(Instant::now);
        let job_end = into_inner(self.ends).into_iter().max().unwrap_or_else(Instant::now);
        let mut startup = into_inner(self.startups);
        startup.sort_by_key(|s| s.gpu);
        let mut gpus = into_inner(self.gpu_runs);
        gpus.sort_by_key(|g| g.gpu);
        let mut failed_gpus = into_inner(self.failed_gpus);
        failed_gpus.sort_by_key(|g| g.gpu);
        Ok(JobRun { startup, job_start, job_end, gpus, failed_gpus })
    }
}

/// What each encoder thread of [`Engine::run`] runs: takes finished images from the engines'
/// channel, writes their outputs on its own pool, and hands their reports to `done`.
struct Encoder<'a> {
    receiver: Mutex<Receiver<ImageResult>>,
    pool: rayon::ThreadPool,
    outputs: &'a Outputs<'a>,
    done: Done<'a>,
}

impl Encoder<'_> {
    /// One encoder thread, until every engine is done (after a failure it only drains the
    /// channel).
    fn run(&self, run: &RunState) {
        // When this encoder finished its last image.
        let mut last = None;
        loop {
            let next = lock(&self.receiver).recv();
            let Ok(mut result) = next else { break };
            if run.failure.failed() {
                continue;
            }
            let start = Instant::now();
            let written = self.pool.install(|| self.outputs.write(&result)).map_err(anyhow::Error::from);
            let reported = written.and_then(|()| {
                result.times.encode_ms = start.elapsed().as_secs_f64() * 1e3;
                (self.done)(ImageReport::from(result))
            });
            if let Err(e) = reported {
                run.failure.record(e);
            }
            last = Some(Instant::now());
        }
        if let Some(at) = last {
            run.ended(at);
        }
        run.encoder_done();
    }
}

/// For tests: the simulator's device memory, bytes. With it, `--device sim` sizes its batches by
/// what is left of it and runs out of it as a GPU with that much memory free does.
pub const SIM_MEMORY_ENV: &str = "KERNEL_SUITE_SIM_MEMORY";

/// Why one GPU's thread of several stopped before its end.
enum Stop {
    /// The device failed during the job, after giving its unfinished batch back to the queue.
    Gpu(error::Error),
    /// The job cannot go on (the GPU did not open, an output could not be written, …).
    Job(anyhow::Error),
}

/// GPU `gpu` of several, or with `--device sim` a simulated device in its place.
fn open_device(gpu: u32, options: &EngineOptions) -> error::Result<Device> {
    if options.device == EngineDevice::Simulator {
        return simulator();
    }
    Device::gpu_with(gpu, &crate::KERNELS, options.gpu_options)
}

/// The simulator, with the memory of [`SIM_MEMORY_ENV`] where it is set.
fn simulator() -> error::Result<Device> {
    match std::env::var(SIM_MEMORY_ENV) {
        Ok(text) => {
            let bytes = text.trim().parse().map_err(|_| {
                error::Error::InvalidInput(format!("{SIM_MEMORY_ENV}={text:?}: expected a number of bytes"))
            })?;
            Ok(Device::simulator_with_memory(bytes, true))
        }
        Err(_) => Ok(Device::simulator()),
    }
}

/// GPU `gpu`'s failure to open, saying what helps where its memory is too full for the context or
/// the kernels (another process holds it).
fn start_failure(gpu: u32, error: error::Error) -> anyhow::Error {
    if error.is_out_of_memory() {
        anyhow!(
            "GPU {gpu} has too little free memory to start ({error}): free memory on it, or run on another \
             GPU (--gpu N) or on the CPU (--device cpu; --device auto falls back by itself)"
        )
    } else {
        error.into()
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
        lock(&self.first).get_or_insert(error);
        self.failed.store(true, Ordering::SeqCst);
    }

    fn failed(&self) -> bool {
        self.failed.load(Ordering::SeqCst)
    }

    fn into_result(self) -> anyhow::Result<()> {
        match into_inner(self.first) {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}
