//! The job's input queue: the images, decoded by producer threads ([`decode_into_queue`]: files on
//! a background pool, into a bounded channel, so memory stays bounded however large the folder)
//! or already in memory ([`ImageQueue::from_images`]), handed to the engines in index order. A
//! job's queue is [`ImageQueue::screened`]: images that cannot be taken ([`FailedImage`]) are
//! reported and never reach an engine, and the queue can be stopped. Tests: `tests/svd_job.rs`.

use super::images::{FailedImage, JobImage, Pixels, check_size};
use super::lock::{lock, wait};
use crate::commands::image_io;
use crate::launch::error::{Error, Result};
use ndarray::Array2;
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, sync_channel};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Instant;

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
    /// Told of each failed image once, from the engine thread that met it: the queue's own in
    /// index order, and those an engine could not do ([`ImageQueue::fail`]). An error it returns
    /// (the failure could not be recorded) is handed to that engine instead, and the queue stops.
    pub failed: FailureHook,
    /// Told, one line each, of what an engine did otherwise than asked ([`ImageQueue::note`]): a
    /// batch split because it did not fit in the GPU's memory, an image factored on the CPU.
    pub noted: NoteHook,
}

/// [`Screen::failed`].
pub type FailureHook = Box<dyn Fn(FailedImage) -> Result<()> + Send + Sync>;

/// [`Screen::noted`].
pub type NoteHook = Box<dyn Fn(&str) + Send + Sync>;

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
/// clock) in the queue before queueing the image; whoever receives the image's
/// [`ImageResult`](super::images::ImageResult) (the command's sink) moves it into
/// [`StageTimes::decode_ms`](super::images::StageTimes::decode_ms) with
/// [`ImageQueue::take_decode_ms`]. Engines leave `decode_ms` at 0.
pub struct ImageQueue {
    incoming: Mutex<InOrder>,
    decode_ms: DecodeTimes,
    screen: Option<Screen>,
    /// Set when a screened queue stops for good (`--fail-fast`, or a failure it could not report).
    closed: AtomicBool,
    /// Batches lent to engines ([`ImageQueue::lend_batch`]) and not yet returned, and the signal
    /// that one came back: an engine that finds the queue empty waits for them, since a failing
    /// engine may give its batch back ([`Lease::give_back`]).
    lent: (Mutex<usize>, Condvar),
}

/// The producers' channel, read back in image order.
struct InOrder {
    receiver: Receiver<Decoded>,
    /// The index handed out next.
    next: usize,
    /// Images (and failures) that arrived before their turn.
    early: BTreeMap<usize, Decoded>,
    /// Images handed out and returned ([`InOrder::put_back`]): before every image from `next` on.
    returned: BTreeMap<usize, JobImage>,
    /// With [`decode_into_queue`]'s producers: how far ahead of `next` they may decode.
    window: Option<Arc<Window>>,
}

impl InOrder {
    fn next(&mut self) -> Option<Decoded> {
        if let Some((_, image)) = self.returned.pop_first() {
            return Some(Ok(image));
        }
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

    /// Returns `image`, handed out earlier, to the front of the queue (images returned come out
    /// again in index order, before the images not yet handed out; the decoders' window stays
    /// where it is).
    fn put_back(&mut self, image: JobImage) {
        self.returned.insert(image.index, image);
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
        let mut state = lock(&self.state);
        while !state.1 && index >= state.0 + self.width {
            state = wait(&self.moved, state);
        }
        !state.1
    }

    fn move_to(&self, next: usize) {
        lock(&self.state).0 = next;
        self.moved.notify_all();
    }

    fn close(&self) {
        lock(&self.state).1 = true;
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
        let incoming =
            InOrder { receiver, next: 0, early: BTreeMap::new(), returned: BTreeMap::new(), window: None };
        ImageQueue {
            incoming: Mutex::new(incoming),
            decode_ms: DecodeTimes::default(),
            screen: None,
            closed: AtomicBool::new(false),
            lent: (Mutex::new(0), Condvar::new()),
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
        self.take(&mut lock(&self.incoming))
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
        let mut incoming = lock(&self.incoming);
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

    /// [`ImageQueue::next_batch`] for an engine that may fail and give the batch back (one GPU of
    /// several): the batch comes with a [`Lease`], and while any lease is out, an engine that finds
    /// the queue empty waits for it to end instead of returning `None`, so that images given back
    /// are taken by an engine still running. `None` once the queue is empty and no batch is lent,
    /// or it has stopped.
    pub fn lend_batch(
        &self,
        mut joins: impl FnMut(&JobImage, &[JobImage]) -> bool,
    ) -> Option<Result<(Vec<JobImage>, Lease<'_>)>> {
        let (lent, returned) = &self.lent;
        loop {
            if let Some(batch) = self.next_batch(&mut joins) {
                return Some(batch.map(|images| {
                    *lock(lent) += 1;
                    (images, Lease { queue: self })
                }));
            }
            let count = lock(lent);
            if *count == 0 || self.stopped() {
                return None;
            }
            // A stop (a signal handler's flag) notifies nobody: look again now and then.
            let _ = returned.wait_timeout(count, std::time::Duration::from_millis(50));
        }
    }

    fn stopped(&self) -> bool {
        self.closed.load(Ordering::SeqCst)
            || self.screen.as_ref().is_some_and(|s| s.stop.load(Ordering::SeqCst))
    }

    /// A lease ends: its batch is done, or given back.
    fn returned(&self) {
        let (lent, returned) = &self.lent;
        *lock(lent) -= 1;
        returned.notify_all();
    }

    /// The next image for an engine: failures go to the screen (or to the engine, unscreened),
    /// and nothing once stopped.
    fn take(&self, incoming: &mut InOrder) -> Option<Result<JobImage>> {
        loop {
            if self.stopped() {
                return None;
            }
            let failed = match (incoming.next()?, &self.screen) {
                (Err(failed), _) => failed,
                (Ok(image), Some(screen)) => {
                    match check_size(&image.name, image.pixels.dim(), screen.max_rank) {
                        Ok(()) => return Some(Ok(image)),
                        Err(error) => FailedImage { index: image.index, name: image.name, error },
                    }
                }
                (Ok(image), None) => return Some(Ok(image)),
            };
            if let Err(e) = self.fail(failed) {
                return Some(Err(e));
            }
        }
    }

    /// Reports an image an engine took but could not do (it does not fit in the GPU's memory even
    /// alone) as the queue reports those it screens out: to the screen, which records it and, with
    /// `fail_fast`, stops the queue; unscreened, as the error returned, which ends the engine.
    pub fn fail(&self, failed: FailedImage) -> Result<()> {
        let Some(screen) = &self.screen else { return Err(failed.error) };
        let recorded = (screen.failed)(failed);
        if screen.fail_fast || recorded.is_err() {
            self.closed.store(true, Ordering::SeqCst);
        }
        recorded
    }

    /// Tells the user what an engine did otherwise than asked: through the screen (the command
    /// prints it past its progress bar), or on stderr unscreened.
    pub fn note(&self, text: &str) {
        match &self.screen {
            Some(screen) => (screen.noted)(text),
            None => eprintln!("note: {text}"),
        }
    }

    /// The decode time of image `index` recorded by the producer, removed from the queue's
    /// record; 0 if none was recorded.
    pub fn take_decode_ms(&self, index: usize) -> f64 {
        lock(&self.decode_ms).remove(&index).unwrap_or(0.0)
    }
}

/// A batch lent by [`ImageQueue::lend_batch`]: dropped when the batch is done (or the engine gives
/// up on the job), or [`Lease::give_back`] with the images the engine did not finish.
pub struct Lease<'q> {
    queue: &'q ImageQueue,
}

impl Lease<'_> {
    /// Returns `images` (taken with this lease, none of them handed to a sink) to the front of the
    /// queue, in index order, for another engine to take.
    pub fn give_back(self, images: Vec<JobImage>) {
        let mut incoming = lock(&self.queue.incoming);
        for image in images {
            incoming.put_back(image);
        }
    }
}

impl Drop for Lease<'_> {
    fn drop(&mut self) {
        self.queue.returned();
    }
}

/// Reads and decodes one PNG/JPEG file as grayscale (color is converted to luma with the `image`
/// crate's Rec. 709 weights): 8-bit files become [`Pixels::Gray8`] (no float conversion on the
/// host), deeper ones [`Pixels::Float`] in `[0, 1]`. Errors ([`Error::File`]) name the file.
pub fn decode_file(path: &Path) -> Result<Pixels> {
    let image = image_io::decode(path)?;
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
    lock(&queue.incoming).window = Some(Arc::clone(&window));
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
                        lock(&decode_ms).insert(index, ms);
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
