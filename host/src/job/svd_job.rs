//! The `svd` job over many images: what goes in ([`JobImage`] from an [`ImageQueue`]), what comes
//! out ([`ImageResult`] to a sink), and the engines that turn one into the other: the GPU pipeline
//! (`svd_batch::run_gpu`) and the CPU path ([`run_cpu`], faer, in parallel across images).
//!
//! Images are row-major `(rows, cols)` = `(height, width)`, values in `[0, 1]`.
//!
//! Feeding a job: [`decode_into_queue`] decodes files on a background thread pool into a bounded
//! channel (memory stays bounded however large the folder); [`ImageQueue::from_images`] queues
//! images already in memory. A job's queue is [`ImageQueue::screened`]: images that cannot be
//! taken ([`FailedImage`]) are reported and never reach an engine, and the queue can be stopped.
//! Tests: `tests/svd_job.rs`.

use crate::error::{Error, Result, ensure};
use faer::diag::Diag;
use faer::dyn_stack::{MemBuffer, MemStack};
use faer::linalg::svd::{ComputeSvdVectors, svd, svd_scratch};
use faer::{Accum, Mat, MatRef, Par};
use ndarray::Array2;
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, sync_channel};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Instant;

/// Decoded pixels of one image.
#[derive(Debug, Clone)]
pub enum Pixels {
    /// 8-bit gray, row-major `rows × cols`; value `v` means `v / 255`. Uploaded as bytes and
    /// converted on the device.
    Gray8 {
        /// Height.
        rows: usize,
        /// Width.
        cols: usize,
        /// `rows · cols` bytes.
        data: Vec<u8>,
    },
    /// Any other source (16-bit files, generated images), already in `[0, 1]`.
    Float(Array2<f32>),
}

impl Pixels {
    /// `(rows, cols)`.
    pub fn dim(&self) -> (usize, usize) {
        match self {
            Pixels::Gray8 { rows, cols, .. } => (*rows, *cols),
            Pixels::Float(a) => a.dim(),
        }
    }

    /// The image as f32 in `[0, 1]`.
    pub fn to_f32(&self) -> Array2<f32> {
        match self {
            Pixels::Gray8 { rows, cols, data } => {
                Array2::from_shape_fn((*rows, *cols), |(i, j)| data[i * cols + j] as f32 / 255.0)
            }
            Pixels::Float(a) => a.clone(),
        }
    }
}

/// One image of the job.
#[derive(Debug, Clone)]
pub struct JobImage {
    /// Position in the job's (sharded) input list; results carry it back.
    pub index: usize,
    /// Name used for output files (the file stem).
    pub name: String,
    /// The pixels.
    pub pixels: Pixels,
}

/// An image the job cannot take: its file unreadable or not a decodable image, or the image unfit
/// for the job's ranks.
#[derive(Debug)]
pub struct FailedImage {
    /// [`JobImage::index`] it would have had.
    pub index: usize,
    /// [`JobImage::name`] it would have had.
    pub name: String,
    /// Why (naming the file or the image).
    pub error: Error,
}

/// What the producers of a queue send: an image, or why the image of that index failed. Both
/// carry the index, so the queue keeps its order either way.
pub type Decoded = std::result::Result<JobImage, FailedImage>;

/// What the job's queue does with images it cannot take, and when it stops
/// ([`ImageQueue::screened`]).
pub struct Screen {
    /// The job's largest rank: an image with fewer rows or columns fails in the queue
    /// ([`check_size`]), before any engine sees it.
    pub max_rank: usize,
    /// Hand out nothing more after the first failure (`--fail-fast`).
    pub fail_fast: bool,
    /// Once set (by a signal handler), hand out nothing more: the engines finish what they have
    /// and return.
    pub stop: Arc<AtomicBool>,
    /// Told of each failed image once, in index order, from the engine thread that met it. An
    /// error it returns (the failure could not be recorded) is handed to that engine instead, and
    /// the queue stops.
    pub failed: FailureHook,
}

/// [`Screen::failed`].
pub type FailureHook = Box<dyn Fn(FailedImage) -> Result<()> + Send + Sync>;

/// What to compute for every image.
#[derive(Debug, Clone)]
pub struct JobOptions {
    /// Ranks to reconstruct, ascending, without repeats, each ≥ 1. An image whose `min(rows, cols)`
    /// is smaller than the largest rank is an error naming the image.
    pub ranks: Vec<usize>,
    /// Also compute the f64 CPU reference reconstruction and report its difference (`--check`).
    pub check: bool,
    /// GPU only: the reconstruction kernel.
    pub variant: crate::svd::Variant,
    /// GPU only: most images factored together in one batch (batches are also bounded by
    /// [`crate::svd_batch::BATCH_PIXELS`]). With several GPUs each takes the next batch when it
    /// is free; a smaller cap spreads a small folder over them.
    pub batch_images: usize,
    /// What of each reconstruction the host needs: only that crosses PCIe.
    pub keep: Keep,
}

/// What of each reconstruction comes back to the host ([`RankResult::reconstruction`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Keep {
    /// Nothing: only the errors are reported (`--no-images`).
    Nothing,
    /// The 8-bit pixels a PNG stores (quantised on the device: a quarter of the bytes).
    Gray8,
    /// The f32 values (`--npy`).
    Float,
}

/// A reconstruction as it came back to the host, per [`Keep`].
#[derive(Debug, Clone)]
pub enum Reconstruction {
    /// Not brought back.
    Dropped,
    /// `round(clamp(v, 0, 1)·255)` of every value, `rows × cols`: the bytes of its PNG.
    Gray8(Array2<u8>),
    /// The f32 values, `rows × cols`.
    Float(Array2<f32>),
}

impl Reconstruction {
    /// `values` kept as `keep` asks.
    pub fn keep(values: Array2<f32>, keep: Keep) -> Self {
        match keep {
            Keep::Nothing => Reconstruction::Dropped,
            Keep::Gray8 => {
                let dim = values.dim();
                let bytes = crate::image_io::to_gray8(values.view(), crate::image_io::Scaling::Clamp);
                Reconstruction::Gray8(Array2::from_shape_vec(dim, bytes).expect("one byte per value"))
            }
            Keep::Float => Reconstruction::Float(values),
        }
    }

    /// The f32 values, if kept.
    pub fn float(&self) -> Option<&Array2<f32>> {
        match self {
            Reconstruction::Float(values) => Some(values),
            _ => None,
        }
    }

    /// The 8-bit pixels a PNG of it stores (`round(clamp(v, 0, 1)·255)`, row-major), if kept:
    /// [`Reconstruction::Gray8`]'s own bytes.
    pub fn to_gray8(&self) -> Option<std::borrow::Cow<'_, [u8]>> {
        match self {
            Reconstruction::Dropped => None,
            Reconstruction::Gray8(bytes) => {
                Some(std::borrow::Cow::Borrowed(bytes.as_slice().expect("standard layout")))
            }
            Reconstruction::Float(values) => Some(std::borrow::Cow::Owned(crate::image_io::to_gray8(
                values.view(),
                crate::image_io::Scaling::Clamp,
            ))),
        }
    }
}

/// One rank of one image.
#[derive(Debug, Clone)]
pub struct RankResult {
    /// The rank.
    pub k: usize,
    /// `‖A − A_k‖_F / ‖A‖_F` of the f32 reconstruction actually returned (0 for the zero image).
    pub relative_error: f64,
    /// `sqrt(Σ_{i≥k} σ_i²) / ‖A‖_F`, from the computed singular values and `‖A‖_F`.
    pub eckart_young_bound: f64,
    /// The rank-k reconstruction `U_k·diag(s_k)·V_kᵀ` (`rows × cols`), as [`JobOptions::keep`]
    /// asked.
    pub reconstruction: Reconstruction,
    /// With `check`: `‖A_k − A_k^ref‖_F / ‖A_k^ref‖_F` against the f64 CPU reference.
    pub check_error: Option<f64>,
}

/// Wall or device time per stage of one image, milliseconds (0 where a stage does not apply).
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize)]
pub struct StageTimes {
    /// File read and decode (host, one core).
    pub decode_ms: f64,
    /// Copies to the device (device time).
    pub h2d_ms: f64,
    /// Factorisation (device time on the GPU, wall time on the CPU).
    pub svd_ms: f64,
    /// Reconstruction of every rank and the errors.
    pub reconstruct_ms: f64,
    /// Copies back.
    pub d2h_ms: f64,
    /// PNG/NPY encode and write (host, one core).
    pub encode_ms: f64,
}

impl StageTimes {
    /// Adds `other`'s times stage by stage (a job's totals).
    pub fn add(&mut self, other: &StageTimes) {
        self.decode_ms += other.decode_ms;
        self.h2d_ms += other.h2d_ms;
        self.svd_ms += other.svd_ms;
        self.reconstruct_ms += other.reconstruct_ms;
        self.d2h_ms += other.d2h_ms;
        self.encode_ms += other.encode_ms;
    }
}

/// Everything computed for one image.
#[derive(Debug, Clone)]
pub struct ImageResult {
    /// [`JobImage::index`].
    pub index: usize,
    /// [`JobImage::name`].
    pub name: String,
    /// Height.
    pub rows: usize,
    /// Width.
    pub cols: usize,
    /// The leading `max(ranks)` singular values, non-increasing.
    pub singular_values: Vec<f64>,
    /// `‖A‖_F`.
    pub frobenius_norm: f64,
    /// One entry per requested rank, in the order of [`JobOptions::ranks`].
    pub ranks: Vec<RankResult>,
    /// Times of this image's stages.
    pub times: StageTimes,
}

/// The job's images, decoded by producer threads and taken by one or more engines (one per GPU).
/// Thread-safe; yields `None` once every image has been taken, or once it is stopped.
///
/// Images come out in the order of their [`JobImage::index`], whatever order the decoders finish
/// in, and [`ImageQueue::next_batch`] forms each batch whole: batches are then the same in every
/// run and on any number of GPUs, and so are the results (the GPU engine iterates a batch until
/// all its images have converged, so an image's last bits depend on its batch).
///
/// Failures: a plain queue hands a failed image to the engine as its error, which ends the job; a
/// [`ImageQueue::screened`] one reports it to its [`Screen`] and goes on with the next image, so
/// engines only ever see images they can factor.
///
/// Dropping the queue closes the channel: producers blocked on a full channel, or waiting for the
/// queue to move on ([`decode_into_queue`]), then stop.
///
/// Decode times: [`decode_into_queue`] records each image's decode time (milliseconds, host wall
/// clock) in the queue before queueing the image; whoever receives the image's [`ImageResult`] (the
/// command's sink) moves it into [`StageTimes::decode_ms`] with [`ImageQueue::take_decode_ms`].
/// Engines leave `decode_ms` at 0.
pub struct ImageQueue {
    incoming: Mutex<InOrder>,
    decode_ms: DecodeTimes,
    screen: Option<Screen>,
    /// Set when a screened queue stops for good (`--fail-fast`, or a failure it could not report).
    closed: AtomicBool,
}

/// The producers' channel, read back in image order.
struct InOrder {
    receiver: Receiver<Decoded>,
    /// The index handed out next.
    next: usize,
    /// Images (and failures) that arrived before their turn.
    early: BTreeMap<usize, Decoded>,
    /// With [`decode_into_queue`]'s producers: how far ahead of `next` they may decode.
    window: Option<Arc<Window>>,
}

impl InOrder {
    fn next(&mut self) -> Option<Decoded> {
        loop {
            if let Some(item) = self.early.remove(&self.next) {
                self.advance(self.next + 1);
                return Some(item);
            }
            match self.receiver.recv() {
                Ok(item) if index_of(&item) == self.next => {
                    self.advance(self.next + 1);
                    return Some(item);
                }
                Ok(item) => {
                    self.early.insert(index_of(&item), item);
                }
                // The producers are done: what is left, in order (indices need not be contiguous).
                Err(_) => {
                    let (index, item) = self.early.pop_first()?;
                    self.advance(index + 1);
                    return Some(item);
                }
            }
        }
    }

    /// Returns `image` to the front of the queue.
    fn put_back(&mut self, image: JobImage) {
        self.advance(self.next.min(image.index));
        self.early.insert(image.index, Ok(image));
    }

    fn advance(&mut self, next: usize) {
        self.next = next;
        if let Some(window) = &self.window {
            window.move_to(next);
        }
    }
}

impl Drop for InOrder {
    /// Producers waiting for the window to move stop: nobody takes images any more.
    fn drop(&mut self) {
        if let Some(window) = &self.window {
            window.close();
        }
    }
}

/// How far [`decode_into_queue`]'s producers may run ahead of the queue: they decode image `i`
/// only once `i < next + width`, `next` being the index the queue hands out next. The channel
/// alone does not bound them: while the queue waits for a slow image, it moves every later one
/// that arrives out of the channel (into [`InOrder::early`]), so without the window a folder with
/// one large image first would be decoded whole into memory meanwhile.
struct Window {
    width: usize,
    /// The queue's next index, and whether the queue is gone.
    state: Mutex<(usize, bool)>,
    moved: Condvar,
}

impl Window {
    fn new(width: usize) -> Self {
        Window { width, state: Mutex::new((0, false)), moved: Condvar::new() }
    }

    /// Waits until image `index` is inside the window; `false` if the queue is gone.
    fn wait_for(&self, index: usize) -> bool {
        let mut state = self.state.lock().expect("no panics while holding the lock");
        while !state.1 && index >= state.0 + self.width {
            state = self.moved.wait(state).expect("no panics while holding the lock");
        }
        !state.1
    }

    fn move_to(&self, next: usize) {
        self.state.lock().expect("no panics while holding the lock").0 = next;
        self.moved.notify_all();
    }

    fn close(&self) {
        self.state.lock().expect("no panics while holding the lock").1 = true;
        self.moved.notify_all();
    }
}

fn index_of(item: &Decoded) -> usize {
    match item {
        Ok(image) => image.index,
        Err(failed) => failed.index,
    }
}

/// Decode times by image index, shared by a queue and its producers.
type DecodeTimes = Arc<Mutex<HashMap<usize, f64>>>;

impl ImageQueue {
    /// Wraps the receiving end of the producers' channel.
    pub fn new(receiver: Receiver<Decoded>) -> Self {
        let incoming = InOrder { receiver, next: 0, early: BTreeMap::new(), window: None };
        ImageQueue {
            incoming: Mutex::new(incoming),
            decode_ms: DecodeTimes::default(),
            screen: None,
            closed: AtomicBool::new(false),
        }
    }

    /// This queue, handing failed images to `screen` instead of the engines, and stopping as it
    /// says.
    pub fn screened(self, screen: Screen) -> Self {
        ImageQueue { screen: Some(screen), ..self }
    }

    /// A queue holding `images` (already in memory: generated images, tests), in order.
    pub fn from_images(images: Vec<JobImage>) -> Self {
        let (sender, receiver) = sync_channel(images.len());
        for image in images {
            sender.send(Ok(image)).expect("the receiver is alive and the channel has room");
        }
        Self::new(receiver)
    }

    /// The next decoded image in index order (or a failed one's error, unscreened), `None` when
    /// the producers are done or the queue has stopped.
    pub fn next(&self) -> Option<Result<JobImage>> {
        self.take(&mut self.incoming.lock().expect("no panics while holding the lock"))
    }

    /// The next images in index order that `joins(image, batch so far)` accepts after the first,
    /// taken at once (another engine's batch cannot interleave); the first image refused stays at
    /// the front of the queue. `None` when the producers are done or the queue has stopped; a
    /// failed image's error (unscreened) ends the batch and is returned. A screened queue drops
    /// failed images from the batch, and a stop ends the batch with the images taken so far.
    pub fn next_batch(
        &self,
        mut joins: impl FnMut(&JobImage, &[JobImage]) -> bool,
    ) -> Option<Result<Vec<JobImage>>> {
        let mut incoming = self.incoming.lock().expect("no panics while holding the lock");
        let mut batch = match self.take(&mut incoming)? {
            Ok(first) => vec![first],
            Err(e) => return Some(Err(e)),
        };
        while let Some(image) = self.take(&mut incoming) {
            match image {
                Ok(image) if joins(&image, &batch) => batch.push(image),
                Ok(image) => {
                    incoming.put_back(image);
                    break;
                }
                Err(e) => return Some(Err(e)),
            }
        }
        Some(Ok(batch))
    }

    /// The next image for an engine: failures go to the screen (or to the engine, unscreened),
    /// and nothing once stopped.
    fn take(&self, incoming: &mut InOrder) -> Option<Result<JobImage>> {
        loop {
            let stopped = self.screen.as_ref().is_some_and(|s| s.stop.load(Ordering::SeqCst));
            if stopped || self.closed.load(Ordering::SeqCst) {
                return None;
            }
            let failed = match (incoming.next()?, &self.screen) {
                (Err(failed), None) => return Some(Err(failed.error)),
                (Err(failed), Some(_)) => failed,
                (Ok(image), Some(screen)) => {
                    match check_size(&image.name, image.pixels.dim(), screen.max_rank) {
                        Ok(()) => return Some(Ok(image)),
                        Err(error) => FailedImage { index: image.index, name: image.name, error },
                    }
                }
                (Ok(image), None) => return Some(Ok(image)),
            };
            let screen = self.screen.as_ref().expect("failures reach here only when screened");
            let recorded = (screen.failed)(failed);
            if screen.fail_fast || recorded.is_err() {
                self.closed.store(true, Ordering::SeqCst);
            }
            if let Err(e) = recorded {
                return Some(Err(e));
            }
        }
    }

    /// The decode time of image `index` recorded by the producer, removed from the queue's
    /// record; 0 if none was recorded.
    pub fn take_decode_ms(&self, index: usize) -> f64 {
        self.decode_ms.lock().expect("no panics while holding the lock").remove(&index).unwrap_or(0.0)
    }
}

/// Where engines hand finished images (called from engine threads; should return quickly, e.g. by
/// passing the result to encoder threads).
pub type Sink<'a> = &'a (dyn Fn(ImageResult) -> Result<()> + Sync);

/// Reads and decodes one PNG/JPEG file as grayscale (color is converted to luma with the `image`
/// crate's Rec. 709 weights): 8-bit files become [`Pixels::Gray8`] (no float conversion on the
/// host), deeper ones [`Pixels::Float`] in `[0, 1]`. Errors ([`Error::File`]) name the file.
pub fn decode_file(path: &Path) -> Result<Pixels> {
    let image = crate::image_io::decode(path)?;
    let (cols, rows) = (image.width() as usize, image.height() as usize);
    let color = image.color();
    let bits_per_channel = color.bits_per_pixel() / u16::from(color.channel_count());
    let pixels = match bits_per_channel {
        8 => Pixels::Gray8 { rows, cols, data: image.into_luma8().into_raw() },
        16 => {
            let data = image.into_luma16().into_raw().into_iter().map(|v| f32::from(v) / 65535.0).collect();
            Pixels::Float(Array2::from_shape_vec((rows, cols), data).expect("rows·cols pixels"))
        }
        _ => {
            let data = image.to_luma32f().into_raw();
            Pixels::Float(Array2::from_shape_vec((rows, cols), data).expect("rows·cols pixels"))
        }
    };
    Ok(pixels)
}

/// The name a file's outputs are written under: its stem (`scans/slice 7.png` → `slice 7`).
pub fn image_name(path: &Path) -> String {
    path.file_stem().map_or_else(|| "image".into(), |s| s.to_string_lossy().into_owned())
}

/// Decodes `paths` (image `i` is `paths[i]`) on all cores, roughly in order, into a bounded
/// channel, and returns the queue the engines take them from.
///
/// A background thread runs a dedicated rayon pool (one thread per core, so it never waits on
/// engines that block the global pool). The decoders stay at most three images per thread ahead
/// of the image the queue hands out next (a window that moves with the queue), so a huge folder
/// never sits in memory at once, whatever its images' sizes. A file that cannot be read or decoded is queued as a
/// [`FailedImage`] whose error names the file ([`decode_file`]). Each image's decode time is
/// recorded in the queue ([`ImageQueue::take_decode_ms`]). Dropping the queue stops the
/// producers. Fails only if the decoding threads cannot start.
pub fn decode_into_queue(paths: Vec<PathBuf>) -> Result<ImageQueue> {
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get()).min(paths.len().max(1));
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .thread_name(|i| format!("svd-decode-{i}"))
        .build()
        .map_err(|e| Error::InvalidInput(format!("cannot start the decoding threads: {e}")))?;
    let (sender, receiver) = sync_channel(2 * threads);
    let queue = ImageQueue::new(receiver);
    let window = Arc::new(Window::new(3 * threads));
    queue.incoming.lock().expect("no other user yet").window = Some(Arc::clone(&window));
    let decode_ms = Arc::clone(&queue.decode_ms);
    std::thread::spawn(move || {
        let next = AtomicUsize::new(0);
        let stop = AtomicBool::new(false);
        pool.scope(|scope| {
            for _ in 0..threads {
                scope.spawn(|_| {
                    while !stop.load(Ordering::Relaxed) {
                        let index = next.fetch_add(1, Ordering::Relaxed);
                        let Some(path) = paths.get(index) else { break };
                        if !window.wait_for(index) {
                            break;
                        }
                        let start = Instant::now();
                        let name = image_name(path);
                        let item = match decode_file(path) {
                            Ok(pixels) => Ok(JobImage { index, name, pixels }),
                            Err(error) => Err(FailedImage { index, name, error }),
                        };
                        let ms = start.elapsed().as_secs_f64() * 1e3;
                        decode_ms.lock().expect("no panics while holding the lock").insert(index, ms);
                        if sender.send(item).is_err() {
                            // The queue was dropped: nobody takes images any more.
                            stop.store(true, Ordering::Relaxed);
                        }
                    }
                });
            }
        });
    });
    Ok(queue)
}

/// Checks `options` as every engine needs them: at least one rank, ascending without repeats,
/// each ≥ 1, and at least one image in flight.
pub fn check_options(options: &JobOptions) -> Result<()> {
    ensure(!options.ranks.is_empty(), || "no ranks to reconstruct".into())?;
    ensure(options.ranks[0] >= 1, || "rank k = 0 is not allowed: ranks start at 1".into())?;
    ensure(options.ranks.windows(2).all(|w| w[0] < w[1]), || {
        format!("ranks {:?} must be ascending without repeats", options.ranks)
    })?;
    ensure(options.batch_images >= 1, || "a batch needs at least one image".into())
}

/// Checks that `image` can be factored for `options` (not empty, `max(ranks) ≤ min(rows, cols)`);
/// the error names the image. Engines call it before any work on the image.
pub fn check_image(image: &JobImage, options: &JobOptions) -> Result<()> {
    check_size(&image.name, image.pixels.dim(), options.ranks.last().copied().unwrap_or(0))
}

/// Checks that image `name` of `(rows, cols)` pixels can be factored up to rank `max_rank`: not
/// empty, and `max_rank ≤ min(rows, cols)`. [`check_image`] for an image not yet (or never)
/// decoded: the queue's screen, the default phantom before the job starts.
pub fn check_size(name: &str, (rows, cols): (usize, usize), max_rank: usize) -> Result<()> {
    ensure(rows > 0 && cols > 0, || format!("{name}: cannot factor an empty {rows} × {cols} image"))?;
    let r = rows.min(cols);
    ensure(max_rank <= r, || {
        format!(
            "{name} ({rows}×{cols}): rank k = {max_rank} is outside 1..={r} (min(rows, cols) of the image)"
        )
    })
}

/// The CPU engine, parallel across images: takes images from `queue` as long as one of rayon's
/// global threads is free for it, computes each on rayon's pool with [`factor_cpu`] and hands the
/// result to `sink` (from the pool's threads). The first error (a failed image from an unscreened
/// queue, a bad image, or the sink's) stops taking images and is returned once the running ones are
/// done; a screened queue's failures never reach it, and a stopped queue ends it likewise.
///
/// At most one image per thread is in progress, so memory stays bounded. An image that takes the
/// last free thread is factored sequentially (`Par::Seq`: with many images, cores go to images);
/// one started while other threads stay idle (few images, or the job's start) uses faer's rayon
/// parallelism, so the idle threads help. Measured on 16 cores (`svd --device cpu`, PNGs written):
/// 8 images of 2048² in 4.5 s (7.2 s with `Par::Seq` for every image, 4.8 s with rayon for every
/// image), 16 of 1024² in 1.23 s (1.17 s, 1.17 s), 64 of 256² in 0.18 s (0.16 s, 0.29 s).
pub fn run_cpu(queue: &ImageQueue, options: &JobOptions, sink: Sink) -> Result<()> {
    check_options(options)?;
    let threads = rayon::current_num_threads();
    let busy = Mutex::new(0usize);
    let freed = Condvar::new();
    let stop = AtomicBool::new(false);
    let first_error = Mutex::new(None);
    let fail = |e: Error| {
        stop.store(true, Ordering::SeqCst);
        first_error.lock().expect("no panics while holding the lock").get_or_insert(e);
    };
    // In place: this thread takes images; the pool's threads compute them.
    rayon::in_place_scope(|scope| {
        while !stop.load(Ordering::SeqCst) {
            let mut running = lock(&busy);
            while *running >= threads {
                running = freed.wait(running).expect("no panics while holding the lock");
            }
            drop(running);
            let image = match queue.next() {
                None => break,
                Some(Err(e)) => {
                    fail(e);
                    break;
                }
                Some(Ok(image)) => image,
            };
            // A running image may have failed meanwhile.
            if stop.load(Ordering::SeqCst) {
                break;
            }
            let par = {
                let mut running = lock(&busy);
                *running += 1;
                if *running < threads { Par::rayon(0) } else { Par::Seq }
            };
            let (busy, freed, fail) = (&busy, &freed, &fail);
            scope.spawn(move |_| {
                if let Err(e) = factor_cpu(&image, options, par).and_then(sink) {
                    fail(e);
                }
                *lock(busy) -= 1;
                freed.notify_one();
            });
        }
    });
    match first_error.into_inner().expect("no panics while holding the lock") {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

/// One image on the CPU with faer's parallelism `par` (`Par::Seq`: on the calling thread only):
/// faer's thin SVD (f64), then for each
/// rank the f64 reconstruction `U_k·diag(s_k)·V_kᵀ` (built up rank by rank, so all ranks cost as
/// much as the largest), rounded to f32, with its errors. `check_error` (with
/// [`JobOptions::check`]) is the f32 rounding error against that f64 reconstruction. Times:
/// `svd_ms` and `reconstruct_ms` (wall clock); the other stages are 0.
pub fn factor_cpu(image: &JobImage, options: &JobOptions, par: Par) -> Result<ImageResult> {
    check_options(options)?;
    check_image(image, options)?;
    let (rows, cols) = image.pixels.dim();
    let name = &image.name;
    let start = Instant::now();
    // Row-major pixels in f64; read column-major this is Aᵀ (cols × rows), whose SVD
    // Aᵀ = V·diag(s)·Uᵀ gives A's factors with the roles of U and V swapped.
    let a: Vec<f64> = match &image.pixels {
        Pixels::Gray8 { data, .. } => {
            let table: Vec<f64> = (0..=255u8).map(|v| f64::from(f32::from(v) / 255.0)).collect();
            data.iter().map(|&v| table[v as usize]).collect()
        }
        Pixels::Float(pixels) => {
            if let Some(((i, j), v)) = pixels.indexed_iter().find(|(_, v)| !v.is_finite()) {
                return Err(Error::InvalidInput(format!(
                    "{name}: pixel ({i}, {j}) is {v}: the image must be finite"
                )));
            }
            pixels.iter().map(|&v| f64::from(v)).collect()
        }
    };
    let at = MatRef::from_column_major_slice(&a, cols, rows);
    let r = rows.min(cols);
    let mut s = Diag::<f64>::zeros(r);
    let mut v = Mat::<f64>::zeros(cols, r);
    let mut u = Mat::<f64>::zeros(rows, r);
    let thin = ComputeSvdVectors::Thin;
    let scratch = svd_scratch::<f64>(cols, rows, thin, thin, par, Default::default());
    svd(
        at,
        s.as_mut(),
        Some(v.as_mut()),
        Some(u.as_mut()),
        par,
        MemStack::new(&mut MemBuffer::new(scratch)),
        Default::default(),
    )
    .map_err(|e| Error::Numerical(format!("{name}: the CPU SVD did not converge: {e:?}")))?;
    let raw: Vec<f64> = s.column_vector().iter().copied().collect();
    let norm_sq: f64 = a.iter().map(|v| v * v).sum();
    let canonical = crate::svd::CanonicalSpectrum::of(&raw, norm_sq).map_err(|e| match e {
        Error::Numerical(what) => Error::Numerical(format!("{name}: {what}")),
        e => e,
    })?;
    let s = canonical.values();
    // Aᵀ = V·diag(s)·Uᵀ: the sign of a triplet goes with `u` (U's columns), as in `thin_svd`.
    if !canonical.is_identity() {
        let source = &canonical.source;
        v = Mat::from_fn(cols, r, |i, p| v[(i, source[p].index)]);
        u = Mat::from_fn(rows, r, |i, p| source[p].sign * u[(i, source[p].index)]);
    }
    let svd_ms = start.elapsed().as_secs_f64() * 1e3;

    let start = Instant::now();
    // Only the singular values are needed for the bound.
    let spectrum = crate::svd::Factors { u: Array2::zeros((0, 0)), s, vt: Array2::zeros((0, 0)) };
    let mut reference = Mat::<f64>::zeros(cols, rows);
    let mut done = 0;
    let mut ranks = Vec::with_capacity(options.ranks.len());
    for &k in &options.ranks {
        // reference += (V[:, done..k]·diag(s[done..k]))·U[:, done..k]ᵀ  (that is, Aᵀ_k).
        let mut vs = v.subcols(done, k - done).to_owned();
        for (p, sigma) in spectrum.s[done..k].iter().enumerate() {
            vs.col_mut(p).iter_mut().for_each(|x| *x *= sigma);
        }
        faer::linalg::matmul::matmul(
            reference.as_mut(),
            Accum::Add,
            vs.as_ref(),
            u.subcols(done, k - done).transpose(),
            1.0,
            par,
        );
        done = k;
        let mut out = Vec::with_capacity(rows * cols);
        let (mut diff_sq, mut rounding_sq, mut reference_sq) = (0.0f64, 0.0f64, 0.0f64);
        for i in 0..rows {
            let row = reference.col_as_slice(i);
            for (&x, &orig) in row.iter().zip(&a[i * cols..(i + 1) * cols]) {
                let y = x as f32;
                let y64 = f64::from(y);
                diff_sq += (y64 - orig) * (y64 - orig);
                rounding_sq += (y64 - x) * (y64 - x);
                reference_sq += x * x;
                out.push(y);
            }
        }
        ranks.push(RankResult {
            k,
            relative_error: relative(diff_sq, norm_sq),
            eckart_young_bound: spectrum.eckart_young_bound(k),
            reconstruction: Reconstruction::keep(
                Array2::from_shape_vec((rows, cols), out).expect("rows·cols values"),
                options.keep,
            ),
            check_error: options.check.then(|| relative(rounding_sq, reference_sq)),
        });
    }
    let reconstruct_ms = start.elapsed().as_secs_f64() * 1e3;
    let kmax = options.ranks.last().copied().unwrap_or(0);
    Ok(ImageResult {
        index: image.index,
        name: name.clone(),
        rows,
        cols,
        singular_values: spectrum.s[..kmax].to_vec(),
        frobenius_norm: norm_sq.sqrt(),
        ranks,
        times: StageTimes { svd_ms, reconstruct_ms, ..StageTimes::default() },
    })
}

/// Locks a counter (no thread panics while holding it).
fn lock(counter: &Mutex<usize>) -> std::sync::MutexGuard<'_, usize> {
    counter.lock().expect("no panics while holding the lock")
}

/// `sqrt(diff_sq / norm_sq)`, or `sqrt(diff_sq)` when the norm is 0 (as [`crate::svd::relative_error`]).
fn relative(diff_sq: f64, norm_sq: f64) -> f64 {
    if norm_sq == 0.0 { diff_sq.sqrt() } else { (diff_sq / norm_sq).sqrt() }
}
