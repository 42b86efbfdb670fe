//! Batched SVD reconstruction with several queues, so that copies and kernels of different images
//! overlap.
//!
//! ```text
//!  host producer ──fill──▶ pinned inputs[slot] ──H2D (copy engine)──▶ device U, s, Vᵀ [slot]
//!                                                                          │ kernel (SMs)
//!  caller's pinned output[i] ◀──────────────D2H (copy engine)────── device out [slot]
//! ```
//!
//! Each of the `slots` pipeline slots owns a queue, pinned input staging buffers and device
//! buffers, so device memory stays bounded whatever the number of images: image `i` goes to slot
//! `i % slots` once the slot's previous image has finished. Results are copied straight into the
//! caller's pinned output buffers (no staging copy on the host). With one slot the same code runs
//! the images strictly one after the other: the serial baseline. See
//! `docs/svd-batch-pipeline.md`.

use crate::error::{Error, Result, ensure};
use crate::svd::{
    BatchShape, PhaseTimes, RankK, Variant, launch_quantize_gray8, launch_reconstruct,
    launch_reconstruct_batch, reconstruct_reference, relative_error,
};
use crate::svd_factor::{
    self, finish_squared_sums, launch_f32_to_f64, launch_gray8_to_f64, queue_squared_sums,
};
use crate::svd_job::{
    ImageQueue, ImageResult, JobImage, JobOptions, Keep, Pixels, RankResult, Reconstruction, Sink,
    StageTimes, check_image, check_options,
};
use crate::{Buffer, Device, HostBuffer, Mark, Queue, Staging};
use ndarray::Array2;
use rayon::prelude::*;
use std::sync::{Condvar, Mutex};
use std::time::Instant;

/// What a batch run measured.
#[derive(Debug, Clone, Copy, serde::Serialize)]
pub struct BatchRun {
    /// Images reconstructed.
    pub images: usize,
    /// Pipeline slots (queues) used.
    pub slots: usize,
    /// Wall time of the whole batch, milliseconds (host clock, from the first input staged to the
    /// last result in host memory).
    pub wall_ms: f64,
    /// Bytes copied to the device.
    pub h2d_bytes: u64,
    /// Bytes copied back.
    pub d2h_bytes: u64,
}

impl BatchRun {
    /// Bytes moved over PCIe (both directions) per second of wall time, GB/s.
    pub fn copy_gbs(&self) -> f64 {
        (self.h2d_bytes + self.d2h_bytes) as f64 / (self.wall_ms * 1e-3) / 1e9
    }
}

struct Slot {
    queue: Queue,
    u: HostBuffer<f32>,
    s: HostBuffer<f32>,
    vt: HostBuffer<f32>,
    du: Buffer<f32>,
    ds: Buffer<f32>,
    dvt: Buffer<f32>,
    dout: Buffer<f32>,
}

/// Reconstructs every job (all of one shape) into `outputs[i]` (`m × n`, row-major, from
/// [`Device::pinned`]) with `slots` overlapping pipeline slots.
pub fn reconstruct_batch(
    device: &Device,
    jobs: &[RankK],
    outputs: &mut [HostBuffer<f32>],
    variant: Variant,
    block: u32,
    slots: usize,
) -> Result<BatchRun> {
    ensure(!jobs.is_empty(), || "empty batch".into())?;
    ensure(outputs.len() == jobs.len(), || format!("{} outputs for {} images", outputs.len(), jobs.len()))?;
    ensure(slots >= 1, || "at least one pipeline slot is needed".into())?;
    let (m, k) = jobs[0].u.dim();
    let n = jobs[0].vt.dim().1;
    for (i, job) in jobs.iter().enumerate() {
        ensure(job.u.dim() == (m, k) && job.vt.dim() == (k, n) && job.s.len() == k, || {
            format!(
                "batch image {i} is {}×{} with k = {}; the batch is {m}×{n} with k = {k}",
                job.u.dim().0,
                job.vt.dim().1,
                job.s.len()
            )
        })?;
    }
    ensure(outputs.iter().all(|o| o.len() == m * n), || format!("every output must hold {m}×{n} values"))?;
    let slots = slots.min(jobs.len());
    let mut pool = Vec::with_capacity(slots);
    for _ in 0..slots {
        pool.push(Slot {
            queue: device.new_queue()?,
            u: device.pinned(m * k)?,
            s: device.pinned(k)?,
            vt: device.pinned(k * n)?,
            du: device.alloc(m * k)?,
            ds: device.alloc(k)?,
            dvt: device.alloc(k * n)?,
            dout: device.alloc(m * n)?,
        });
    }

    let start = Instant::now();
    for (i, (job, output)) in jobs.iter().zip(outputs.iter_mut()).enumerate() {
        let slot = &mut pool[i % slots];
        // The slot's previous image must be done before its staging buffers are refilled.
        device.sync_queue(&slot.queue)?;
        slot.u.copy_from_slice(job.u.as_slice().expect("standard layout"));
        slot.s.copy_from_slice(&job.s);
        slot.vt.copy_from_slice(job.vt.as_slice().expect("standard layout"));
        // SAFETY: the staging buffers are not touched again before the slot's queue is synchronised
        // (next use of the slot, or the end); `outputs` stays mutably borrowed until then; the
        // device buffers have the sizes the kernel is given.
        unsafe {
            device.upload_async(&slot.queue, &slot.u, &mut slot.du)?;
            device.upload_async(&slot.queue, &slot.s, &mut slot.ds)?;
            device.upload_async(&slot.queue, &slot.vt, &mut slot.dvt)?;
            launch_reconstruct(
                device,
                &slot.queue,
                variant,
                block,
                (&slot.du, &slot.ds, &slot.dvt, &mut slot.dout),
                (m, n, k),
            )?;
            device.download_async(&slot.queue, &slot.dout, output)?;
        }
    }
    for slot in &pool {
        device.sync_queue(&slot.queue)?;
    }
    let wall_ms = start.elapsed().as_secs_f64() * 1e3;
    let images = jobs.len();
    let run = BatchRun {
        images,
        slots,
        wall_ms,
        h2d_bytes: (images * (m * k + k + k * n) * 4) as u64,
        d2h_bytes: (images * m * n * 4) as u64,
    };
    Ok(run)
}

/// One image end to end from pinned host memory on the device's queue: H2D of the operands,
/// kernel, D2H of the result, each phase timed with events. The pinned buffers must already hold
/// the operands (`m × k`, `k`, `k × n`); the result lands in `out` (`m × n`).
pub fn reconstruct_pinned(
    device: &Device,
    inputs: (&HostBuffer<f32>, &HostBuffer<f32>, &HostBuffer<f32>),
    out: &mut HostBuffer<f32>,
    dims: (usize, usize, usize),
    variant: Variant,
    block: u32,
) -> Result<PhaseTimes> {
    let (m, n, k) = dims;
    let (u, s, vt) = inputs;
    ensure(u.len() == m * k && s.len() == k && vt.len() == k * n && out.len() == m * n, || {
        "pinned buffers do not match the dimensions".into()
    })?;
    let q = device.queue();
    let (mut du, mut ds, mut dvt, mut dout) =
        (device.alloc(m * k)?, device.alloc(k)?, device.alloc(k * n)?, device.alloc(m * n)?);
    let t0 = device.mark()?;
    // SAFETY: the host buffers outlive the synchronisation in `elapsed_ms` below and are not
    // modified meanwhile; device buffer sizes match the dimensions.
    unsafe {
        device.upload_async(q, u, &mut du)?;
        device.upload_async(q, s, &mut ds)?;
        device.upload_async(q, vt, &mut dvt)?;
    }
    let t1 = device.mark()?;
    // SAFETY: as above.
    unsafe { launch_reconstruct(device, q, variant, block, (&du, &ds, &dvt, &mut dout), (m, n, k))? };
    let t2 = device.mark()?;
    // SAFETY: `out` is not read before the queue is synchronised (by `elapsed_ms` / `sync_queue`).
    unsafe { device.download_async(q, &dout, out)? };
    let t3 = device.mark()?;
    let times = PhaseTimes {
        h2d_ms: device.elapsed_ms(&t0, &t1)?,
        kernel_ms: device.elapsed_ms(&t1, &t2)?,
        d2h_ms: device.elapsed_ms(&t2, &t3)?,
    };
    device.sync_queue(q)?;
    Ok(times)
}

/// Most pixels in one factorisation batch (32 Mi: eight 2048² images; device memory about
/// 90 bytes per pixel for the f64 image, the Gram matrix, the work matrices and the outputs).
pub const BATCH_PIXELS: usize = 32 << 20;

/// Most images in one batch.
pub const BATCH_IMAGES: usize = 256;

/// The GPU engine of the `svd` job: takes decoded images from `queue`, groups consecutive images
/// of one shape and pixel type into batches (at most [`BATCH_PIXELS`], [`BATCH_IMAGES`] and
/// [`JobOptions::batch_images`], so device memory stays bounded whatever the folder's size), and per
/// batch uploads the pixels as they came (bytes for 8-bit images) in one copy from page-locked
/// memory, converts them on the device, factors every image ([`svd_factor::factor`]), reconstructs
/// every rank of `options` and computes each reconstruction's error on the device, and copies back
/// only what [`JobOptions::keep`] asks for (8-bit pixels quantised on the device for PNGs, f32
/// values for `.npy` files, nothing for `--no-images`), every rank's whole batch into page-locked
/// memory. Decoding (the producers of `queue`) and encoding (behind `sink`) run on other threads
/// meanwhile. Device stage times are per batch, shared equally by its images; `d2h_ms` is each
/// image's share of the batch's copies back and of splitting them per image (host clock).
///
/// The calling thread (the engine, which alone makes device calls) runs a pipeline with two helper
/// threads that touch only host memory, so that the GPU is not idle while the host copies:
/// - a loader takes the next batch from `queue`, checks its images ([`check_image`], finite
///   pixels) and copies their pixels into one of two page-locked input buffers, one batch ahead of
///   the engine at most (it asks the queue only once the engine has taken the batch before, so a
///   busy engine of several GPUs holds no batch another GPU could run);
/// - the engine uploads a loaded batch in one asynchronous copy, gives the buffer back, factors,
///   reconstructs, copies what comes back into one of two page-locked landing buffers, and hands
///   the batch to
/// - a finisher, which splits the landing buffer per image, gives it back, builds the
///   [`ImageResult`]s and calls `sink` (which blocks while the encoders are behind) while the engine
///   goes on with the next batch.
///
/// The first error of any of the three threads stops the others and is returned. The device work,
/// and so every result, is that of running the batches one after the other.
///
/// Returns when each batch passed each step ([`BatchSpan`]): the GPU's timeline.
pub fn run_gpu(
    device: &Device,
    queue: &ImageQueue,
    options: &JobOptions,
    sink: Sink,
) -> Result<Vec<BatchSpan>> {
    run_gpu_staged(device, &mut device.staging()?, queue, options, sink)
}

/// [`run_gpu`] with the device's staging made beforehand (page-locking it takes milliseconds, which
/// several GPUs' engines spend before the job starts, while their contexts open). On a GPU, a batch
/// of at most one staging chunk ([`crate::device::STAGING_CHUNK_BYTES`]) of pixels goes up through
/// the staging instead of a page-locked input buffer: a job of small images then pins nothing for
/// its inputs. In the simulator, where nothing is pinned, every batch takes the input buffers, so
/// the tests run the loader's copies.
pub fn run_gpu_staged(
    device: &Device,
    staging: &mut Staging,
    queue: &ImageQueue,
    options: &JobOptions,
    sink: Sink,
) -> Result<Vec<BatchSpan>> {
    check_options(options)?;
    let staged_up_to = if device.is_gpu() { crate::device::STAGING_CHUNK_BYTES } else { 0 };
    let pipe = Pipe::default();
    let spans = std::thread::scope(|scope| {
        let loader = scope.spawn(|| pipe.part(|| load(&pipe, queue, options, staged_up_to)));
        let finisher = scope.spawn(|| pipe.part(|| finish(&pipe, options, sink)));
        pipe.part(|| drive(device, staging, &pipe, options));
        let joined = loader.join().and(finisher.join());
        joined.unwrap_or_else(|panic| std::panic::resume_unwind(panic))
    });
    // The buffers left in the pipe are freed here, on the engine's thread (the context's own).
    let state = pipe.state.into_inner().expect("no panics while holding the lock");
    match state.error {
        Some(error) => Err(error),
        None => Ok(spans.unwrap_or_default()),
    }
}

/// When one batch of [`run_gpu`] passed each step, on the host clock: one row of a GPU's
/// timeline (`svd --profile`).
#[derive(Debug, Clone, Copy)]
pub struct BatchSpan {
    /// Images in the batch.
    pub images: usize,
    /// The engine, free, asked its loader for the next batch.
    pub asked: Instant,
    /// The engine had it, its pixels in page-locked memory (the wait between is for decoding, for
    /// another GPU's turn at the queue, or for the loader's copy).
    pub taken: Instant,
    /// When the work on the device passed each step.
    pub steps: BatchSteps,
    /// The finisher handed every image to the sink (it blocks while the encoders are behind); the
    /// engine is on the next batch meanwhile.
    pub handed: Instant,
}

/// [`BatchSpan::steps`]: the host's clock after each step that ends in a wait for the device.
#[derive(Debug, Clone, Copy)]
pub struct BatchSteps {
    /// The pixels are on the device, widened to f64.
    pub uploaded: Instant,
    /// The factorisation returned (its last wait was for the singular values).
    pub factored: Instant,
    /// The reconstructions' errors, and what of them the host keeps, are in host memory.
    pub copied: Instant,
}

/// Images batch together when they have the same shape and pixel type.
fn batch_key(pixels: &Pixels) -> (usize, usize, bool) {
    let (m, n) = pixels.dim();
    (m, n, matches!(pixels, Pixels::Gray8 { .. }))
}

/// Page-locked buffers of each kind (input, landing) per engine: the one in use and, when it is
/// too small for the next batch, another ([`take_buffer`]).
const BUFFERS: usize = 2;

/// Page-locked host memory of the pipeline, `None` until first needed. Held as f32 values, it
/// carries bytes too ([`as_bytes`]), so that one buffer serves either pixel type: at most
/// [`BUFFERS`] input and as many landing buffers per engine, whatever the batches hold.
type Pinned = Option<HostBuffer<f32>>;

/// What one engine's threads hand each other, under one lock. Every page-locked buffer is in here
/// when no thread holds it, and whatever is left when the pipeline ends is freed with it on the
/// engine's thread: the helpers never free one (freeing page-locked memory is a call to the
/// driver, for the context current on the engine's thread only).
struct Pipe {
    state: Mutex<PipeState>,
    changed: Condvar,
}

struct PipeState {
    /// The first error of any thread; once set, every wait returns at once.
    error: Option<Error>,
    /// Input buffers no thread holds ([`BUFFERS`] in all).
    inputs: Vec<Pinned>,
    /// The batch ready for the engine (one at most).
    loaded: Option<Loaded>,
    /// The loader found the queue done.
    loaded_all: bool,
    /// Landing buffers no thread holds ([`BUFFERS`] in all).
    landings: Vec<Pinned>,
    /// The batch ready for the finisher (one at most).
    finished: Option<Finished>,
    /// The engine ran its last batch.
    finished_all: bool,
}

impl Default for Pipe {
    fn default() -> Self {
        let state = PipeState {
            error: None,
            inputs: (0..BUFFERS).map(|_| None).collect(),
            loaded: None,
            loaded_all: false,
            landings: (0..BUFFERS).map(|_| None).collect(),
            finished: None,
            finished_all: false,
        };
        Pipe { state: Mutex::new(state), changed: Condvar::new() }
    }
}

impl Pipe {
    /// Waits until `ready` returns something (it runs under the lock at each change), or `None`
    /// once the pipeline has stopped.
    fn wait_for<R>(&self, mut ready: impl FnMut(&mut PipeState) -> Option<R>) -> Option<R> {
        let mut state = self.state.lock().expect("no panics while holding the lock");
        loop {
            if state.error.is_some() {
                return None;
            }
            if let Some(found) = ready(&mut state) {
                self.changed.notify_all();
                return Some(found);
            }
            state = self.changed.wait(state).expect("no panics while holding the lock");
        }
    }

    /// Changes the state and wakes the waiting threads.
    fn update(&self, change: impl FnOnce(&mut PipeState)) {
        change(&mut self.state.lock().expect("no panics while holding the lock"));
        self.changed.notify_all();
    }

    /// Stops the pipeline with `error`, unless another error stopped it first.
    fn fail(&self, error: Error) {
        self.update(|state| {
            state.error.get_or_insert(error);
        });
    }

    /// Runs one thread's part: an error (or a panic) stops the pipeline, so that no thread waits
    /// for one that has quit.
    fn part<R>(&self, work: impl FnOnce() -> Result<R>) -> Option<R> {
        /// Stops the pipeline when dropped during a panic.
        struct OnPanic<'a>(&'a Pipe);
        impl Drop for OnPanic<'_> {
            fn drop(&mut self) {
                if std::thread::panicking() {
                    // The lock may be poisoned: take the state anyway, to wake the others.
                    let mut state = self.0.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                    state
                        .error
                        .get_or_insert(Error::InvalidInput("a thread of the GPU engine panicked".into()));
                    self.0.changed.notify_all();
                }
            }
        }
        let _guard = OnPanic(self);
        work().map_err(|error| self.fail(error)).ok()
    }
}

/// A batch from the loader.
enum Loaded {
    /// A batch of at most one staging chunk of pixels, to go up through the staging.
    Staged(Vec<JobImage>),
    /// A batch with one of the input buffers, its pixels in it when `filled` (else the buffer is
    /// too small, or not yet made, and the engine grows it and copies the pixels itself).
    Pinned { batch: Vec<JobImage>, input: Pinned, filled: bool },
}

/// What comes back for the host, by [`JobOptions`].
#[derive(Clone, Copy, PartialEq)]
enum Back {
    /// Nothing (`--no-images`).
    Nothing,
    /// The 8-bit pixels quantised on the device.
    Gray8,
    /// The f32 values (`.npy` files, or `--check`).
    Float,
}

/// A batch the engine is done with, for the finisher.
struct Finished {
    batch: Vec<JobImage>,
    /// Every rank's reconstructions of the batch, rank after rank, image after image (`Float`:
    /// f32 values; `Gray8`: bytes), or `None` when nothing comes back.
    landing: Pinned,
    back: Back,
    /// Per image, its leading singular values and `‖A‖_F`.
    singular_values: Vec<Vec<f64>>,
    frobenius_norms: Vec<f64>,
    /// Per rank, per image, the squared error `‖A − A_k‖_F²`.
    errors: Vec<Vec<f64>>,
    /// Each image's share of the batch's device times and of the engine's copies back.
    times: StageTimes,
    asked: Instant,
    taken: Instant,
    steps: BatchSteps,
}

/// The loader: per batch of `queue` (taken once the engine has taken the one before), checks its
/// images and copies their pixels into an input buffer on all cores ([`take_buffer`] says which).
/// A batch of at most `staged_up_to` bytes takes no buffer.
fn load(pipe: &Pipe, queue: &ImageQueue, options: &JobOptions, staged_up_to: usize) -> Result<()> {
    let most = BATCH_IMAGES.min(options.batch_images);
    loop {
        let Some(()) = pipe.wait_for(|state| state.loaded.is_none().then_some(())) else { return Ok(()) };
        let next = queue.next_batch(|image, batch| {
            let (m, n) = batch[0].pixels.dim();
            batch_key(&image.pixels) == batch_key(&batch[0].pixels)
                && batch.len() < most
                && (batch.len() + 1) * m * n <= BATCH_PIXELS
        });
        let Some(batch) = next else {
            pipe.update(|state| state.loaded_all = true);
            return Ok(());
        };
        let batch = check_batch(batch?, options)?;
        let bytes = batch_bytes(&batch);
        let loaded = if bytes <= staged_up_to {
            Loaded::Staged(batch)
        } else {
            let Some(mut input) = pipe.wait_for(|state| take_buffer(&mut state.inputs, bytes)) else {
                return Ok(());
            };
            let filled = match &mut input {
                Some(buffer) if std::mem::size_of_val(&buffer[..]) >= bytes => {
                    copy_pixels(&batch, buffer);
                    true
                }
                _ => false,
            };
            Loaded::Pinned { batch, input, filled }
        };
        // The slot is empty: only this thread fills it, and it waited for it to be.
        pipe.update(|state| state.loaded = Some(loaded));
    }
}

/// The buffer for a batch of `bytes` from the `free` ones of a kind: the smallest that holds it;
/// else, when every buffer of the kind is free (none will come back grown), the largest, to be
/// grown; else `None`, to wait for one in use. Buffers in use come back soon whatever the other
/// threads wait for (the engine gives an input buffer back as soon as its copy to the device is
/// done, the finisher a landing buffer as soon as it has split it), so in the steady state one
/// buffer of each kind serves every batch, and a second is page-locked only when the first is too
/// small: page-locking costs about 0.5 ms per MiB, and a landing buffer holds every rank's batch.
fn take_buffer(free: &mut Vec<Pinned>, bytes: usize) -> Option<Pinned> {
    let capacity = |buffer: &Pinned| buffer.as_ref().map_or(0, |buffer| std::mem::size_of_val(&buffer[..]));
    let fitting =
        (0..free.len()).filter(|&i| capacity(&free[i]) >= bytes).min_by_key(|&i| capacity(&free[i]));
    let chosen = match fitting {
        Some(i) => Some(i),
        None if free.len() == BUFFERS => (0..free.len()).max_by_key(|&i| capacity(&free[i])),
        None => None,
    };
    chosen.map(|i| free.swap_remove(i))
}

/// `batch` if every image can be factored for `options` ([`check_image`]) and float pixels are
/// finite; else the first image's error that is not. The pixels are scanned on all cores (a batch
/// of 32 Mi floats takes tens of milliseconds on one), the bad one's place found only when there is
/// one.
fn check_batch(batch: Vec<JobImage>, options: &JobOptions) -> Result<Vec<JobImage>> {
    for image in &batch {
        check_image(image, options)?;
        let Pixels::Float(pixels) = &image.pixels else { continue };
        if pixels.as_slice().is_some_and(|values| values.par_iter().all(|v| v.is_finite())) {
            continue;
        }
        if let Some(((y, x), v)) = pixels.indexed_iter().find(|(_, v)| !v.is_finite()) {
            return Err(Error::InvalidInput(format!(
                "{}: pixel ({y}, {x}) is {v}: the image must be finite",
                image.name
            )));
        }
    }
    Ok(batch)
}

/// Bytes of the batch's pixels as they go up (one per 8-bit pixel, four per float).
fn batch_bytes(batch: &[JobImage]) -> usize {
    let (m, n) = batch[0].pixels.dim();
    let size = if matches!(batch[0].pixels, Pixels::Gray8 { .. }) { 1 } else { 4 };
    batch.len() * m * n * size
}

/// Copies the batch's pixels, image after image, into the start of `into` (bytes for 8-bit images,
/// f32 values otherwise) in blocks of 1 MiB on all cores: one core moves about 10 GB/s into
/// page-locked memory, a fifth of the copy engine's rate.
fn copy_pixels(batch: &[JobImage], into: &mut [f32]) {
    const BLOCK_BYTES: usize = 1 << 20;
    let (m, n) = batch[0].pixels.dim();
    let mn = m * n;
    match &batch[0].pixels {
        Pixels::Gray8 { .. } => {
            let into = &mut as_bytes_mut(into)[..batch.len() * mn];
            into.par_chunks_mut(mn).zip(batch).for_each(|(to, image)| {
                let Pixels::Gray8 { data, .. } = &image.pixels else {
                    unreachable!("a batch holds one pixel type")
                };
                to.par_chunks_mut(BLOCK_BYTES)
                    .zip(data.par_chunks(BLOCK_BYTES))
                    .for_each(|(t, f)| t.copy_from_slice(f));
            });
        }
        Pixels::Float(_) => {
            let block = BLOCK_BYTES / 4;
            into[..batch.len() * mn].par_chunks_mut(mn).zip(batch).for_each(|(to, image)| {
                let Pixels::Float(pixels) = &image.pixels else {
                    unreachable!("a batch holds one pixel type")
                };
                match pixels.as_slice() {
                    Some(from) => to
                        .par_chunks_mut(block)
                        .zip(from.par_chunks(block))
                        .for_each(|(t, f)| t.copy_from_slice(f)),
                    None => to.iter_mut().zip(pixels.iter()).for_each(|(t, &f)| *t = f),
                }
            });
        }
    }
}

/// `values` as their bytes: how a [`Pinned`] buffer carries 8-bit pixels.
fn as_bytes(values: &[f32]) -> &[u8] {
    // SAFETY: the same memory, of `4·len` initialised bytes; u8 has no alignment to keep.
    unsafe { std::slice::from_raw_parts(values.as_ptr().cast::<u8>(), std::mem::size_of_val(values)) }
}

/// `values` as their bytes, writable.
fn as_bytes_mut(values: &mut [f32]) -> &mut [u8] {
    // SAFETY: as for `as_bytes`; any bytes written make valid f32 values.
    unsafe { std::slice::from_raw_parts_mut(values.as_mut_ptr().cast::<u8>(), std::mem::size_of_val(values)) }
}

/// `buffer` if it holds at least `bytes`, else a new page-locked one that does (the old one freed
/// first, so that at most two of each kind are pinned). Engine thread only.
fn grown(device: &Device, buffer: Pinned, bytes: usize) -> Result<HostBuffer<f32>> {
    match buffer {
        Some(buffer) if std::mem::size_of_val(&buffer[..]) >= bytes => Ok(buffer),
        old => {
            drop(old);
            device.pinned(bytes.div_ceil(4).max(1))
        }
    }
}

/// The engine: runs the loader's batches on the device one after the other and hands each to the
/// finisher. Returns when the loader is done (or the pipeline has stopped).
fn drive(device: &Device, staging: &mut Staging, pipe: &Pipe, options: &JobOptions) -> Result<()> {
    loop {
        let asked = Instant::now();
        let next = |state: &mut PipeState| match state.loaded.take() {
            Some(loaded) => Some(Some(loaded)),
            None => state.loaded_all.then_some(None),
        };
        let Some(next) = pipe.wait_for(next) else { return Ok(()) };
        let Some(loaded) = next else { break };
        let taken = Instant::now();
        let Some(finished) = run_batch(device, (staging, pipe), loaded, options, (asked, taken))? else {
            return Ok(());
        };
        let mut finished = Some(finished);
        let handed = pipe.wait_for(|state| {
            if state.finished.is_some() {
                return None;
            }
            state.finished = finished.take();
            Some(())
        });
        if handed.is_none() {
            return Ok(());
        }
    }
    pipe.update(|state| state.finished_all = true);
    Ok(())
}

/// Uploads the batch's pixels (as they came: bytes or f32) in one asynchronous copy from the
/// page-locked `input` and widens them to f64 on the device: `images` row-major images, `m·n`
/// apart. Waits for the device before returning, error or not, so `input` is free again.
fn upload_pinned(device: &Device, batch: &[JobImage], input: &[f32]) -> Result<Buffer<f64>> {
    let q = device.queue();
    let (m, n) = batch[0].pixels.dim();
    let len = batch.len() * m * n;
    let mut a = device.alloc::<f64>(len)?;
    let queued = if matches!(batch[0].pixels, Pixels::Gray8 { .. }) {
        let mut raw = device.alloc::<u8>(len)?;
        // SAFETY: `input` and both device buffers live, unchanged, until the queue is synchronised
        // below.
        let queued = unsafe {
            device
                .upload_async(q, &as_bytes(input)[..len], &mut raw)
                .and_then(|()| launch_gray8_to_f64(device, q, &raw, &mut a))
        };
        (queued, device.sync_queue(q))
    } else {
        let mut raw = device.alloc::<f32>(len)?;
        // SAFETY: as above.
        let queued = unsafe {
            device.upload_async(q, &input[..len], &mut raw).and_then(|()| {
                let (from, to) = (raw.view(..)?, a.view_mut(..)?);
                launch_f32_to_f64(device, q, from, to)
            })
        };
        (queued, device.sync_queue(q))
    };
    queued.0?;
    queued.1?;
    Ok(a)
}

/// Uploads the batch's pixels through `staging` (bytes or f32, as they came) and widens them to
/// f64 on the device: a batch too small to be worth page-locking an input buffer for.
fn upload_staged(device: &Device, batch: &[JobImage], staging: &mut Staging) -> Result<Buffer<f64>> {
    let q = device.queue();
    let (m, n) = batch[0].pixels.dim();
    let len = batch.len() * m * n;
    let mut a = device.alloc::<f64>(len)?;
    match &batch[0].pixels {
        Pixels::Gray8 { .. } => {
            let mut raw = device.alloc::<u8>(len)?;
            let parts: Vec<&[u8]> = batch
                .iter()
                .map(|image| match &image.pixels {
                    Pixels::Gray8 { data, .. } => data.as_slice(),
                    Pixels::Float(_) => unreachable!("a batch holds one pixel type"),
                })
                .collect();
            staging.upload_parts(device, q, &parts, &mut raw, 0)?;
            // SAFETY: both buffers live until the queue is synchronised below.
            unsafe { launch_gray8_to_f64(device, q, &raw, &mut a)? };
            device.sync_queue(q)?;
        }
        Pixels::Float(_) => {
            let mut raw = device.alloc::<f32>(len)?;
            let standard: Vec<_> = batch
                .iter()
                .map(|image| match &image.pixels {
                    Pixels::Float(pixels) => pixels.as_standard_layout(),
                    Pixels::Gray8 { .. } => unreachable!("a batch holds one pixel type"),
                })
                .collect();
            let parts: Vec<&[f32]> =
                standard.iter().map(|pixels| pixels.as_slice().expect("standard layout")).collect();
            staging.upload_parts(device, q, &parts, &mut raw, 0)?;
            // SAFETY: both buffers live until the queue is synchronised below.
            unsafe { launch_f32_to_f64(device, q, raw.view(..)?, a.view_mut(..)?)? };
            device.sync_queue(q)?;
        }
    }
    Ok(a)
}

/// The engine's part of one batch: upload (the loader's buffer given back as soon as the copy is
/// done), factorisation, every rank's reconstruction and error, and the copies back into a landing
/// buffer. `None` when the pipeline stopped while the engine waited for a landing buffer.
fn run_batch(
    device: &Device,
    (staging, pipe): (&mut Staging, &Pipe),
    loaded: Loaded,
    options: &JobOptions,
    (asked, taken): (Instant, Instant),
) -> Result<Option<Finished>> {
    let t_start = device.mark()?;
    let (batch, a) = match loaded {
        Loaded::Staged(batch) => {
            let a = upload_staged(device, &batch, staging)?;
            (batch, a)
        }
        Loaded::Pinned { batch, input, filled } => {
            // Too small a buffer: grown here (page-locking is a device call), and filled here once.
            let mut input = grown(device, input, batch_bytes(&batch))?;
            if !filled {
                copy_pixels(&batch, &mut input);
            }
            let a = upload_pinned(device, &batch, &input);
            pipe.update(|state| state.inputs.push(Some(input)));
            (batch, a?)
        }
    };
    let (m, n) = batch[0].pixels.dim();
    let (images, mn) = (batch.len(), m * n);
    let kmax = *options.ranks.last().expect("ranks checked non-empty and ascending");
    let q = device.queue();
    let uploaded = Instant::now();
    let t_uploaded = device.mark()?;
    let mut factors = svd_factor::factor(device, &a, (m, n), images, kmax)?;
    let factored = Instant::now();
    let t_factored = device.mark()?;

    // Every rank of every image: reconstruction, its squared error against the image, and the
    // 8-bit pixels when those are what comes back.
    let ranks = &options.ranks;
    let back = match options.keep {
        _ if options.check => Back::Float,
        Keep::Float => Back::Float,
        Keep::Gray8 => Back::Gray8,
        Keep::Nothing => Back::Nothing,
    };
    let mut outputs = Vec::with_capacity(ranks.len());
    let mut bytes = Vec::with_capacity(ranks.len());
    let mut error_sums = Vec::with_capacity(ranks.len());
    for &k in ranks {
        let mut out = device.alloc::<f32>(images * mn)?;
        let shape = BatchShape {
            images,
            ldu: kmax,
            strides: kernels::svd::Batch {
                u: (m * kmax) as u32,
                s: kmax as u32,
                vt: (kmax * n) as u32,
                out: mn as u32,
            },
        };
        // SAFETY: every buffer lives until the queue is synchronised below, and `out` is read only
        // by work queued after the reconstruction; the reconstruction checks its buffers' lengths,
        // and `a` and `out` hold the `images·mn` values the squared sums read.
        unsafe {
            let bufs = (&factors.u, &factors.s, &factors.vt, &mut out);
            launch_reconstruct_batch(device, q, options.variant, 16, bufs, (m, n, k), shape)?;
            error_sums.push(queue_squared_sums(device, q, &a, Some(&out), mn, images)?);
            if back == Back::Gray8 {
                let mut gray = device.alloc::<u8>(images * mn)?;
                launch_quantize_gray8(device, q, &out, &mut gray)?;
                bytes.push(gray);
            }
        }
        outputs.push(out);
    }
    let t_reconstructed = device.mark()?;
    let per_image =
        |from: &Mark, to: &Mark| -> Result<f64> { Ok(device.elapsed_ms(from, to)? / images as f64) };
    let device_times = StageTimes {
        decode_ms: 0.0,
        h2d_ms: per_image(&t_start, &t_uploaded)?,
        svd_ms: per_image(&t_uploaded, &t_factored)?,
        reconstruct_ms: per_image(&t_factored, &t_reconstructed)?,
        d2h_ms: 0.0,
        encode_ms: 0.0,
    };
    let errors: Vec<Vec<f64>> = error_sums
        .iter()
        .map(|(partial, blocks)| finish_squared_sums(device, partial, *blocks))
        .collect::<Result<_>>()?;

    // Every rank's reconstructions of the whole batch come back in one copy each, into a landing
    // buffer the finisher has given back ([`take_buffer`]).
    let copy_start = Instant::now();
    let per_rank = images * mn;
    let landing = match back {
        Back::Nothing => None,
        Back::Gray8 | Back::Float => {
            let size = if back == Back::Gray8 { 1 } else { 4 };
            let landing_bytes = ranks.len() * per_rank * size;
            let Some(landing) = pipe.wait_for(|state| take_buffer(&mut state.landings, landing_bytes)) else {
                return Ok(None);
            };
            let mut landing = grown(device, landing, landing_bytes)?;
            // SAFETY: `landing` is neither read nor written, nor freed, before the queue is
            // synchronised just below, whatever the copies return.
            let queued = (0..ranks.len()).try_for_each(|r| unsafe {
                let at = r * per_rank..(r + 1) * per_rank;
                match back {
                    Back::Float => device.download_async(q, &outputs[r], &mut landing[at]),
                    _ => device.download_async(q, &bytes[r], &mut as_bytes_mut(&mut landing)[at]),
                }
            });
            let synced = device.sync_queue(q);
            queued?;
            synced?;
            Some(landing)
        }
    };
    let copied = Instant::now();
    let times =
        StageTimes { d2h_ms: (copied - copy_start).as_secs_f64() * 1e3 / images as f64, ..device_times };
    Ok(Some(Finished {
        batch,
        landing,
        back,
        singular_values: std::mem::take(&mut factors.singular_values),
        frobenius_norms: std::mem::take(&mut factors.frobenius_norms),
        errors,
        times,
        asked,
        taken,
        steps: BatchSteps { uploaded, factored, copied },
    }))
}

/// The finisher: per batch from the engine, splits the landing buffer into each image's
/// reconstructions on all cores, gives the buffer back, then builds each image's [`ImageResult`]
/// and hands it to `sink`. Returns the batches' spans, in order.
fn finish(pipe: &Pipe, options: &JobOptions, sink: Sink) -> Result<Vec<BatchSpan>> {
    let mut spans = Vec::new();
    loop {
        let next = |state: &mut PipeState| match state.finished.take() {
            Some(finished) => Some(Some(finished)),
            None => state.finished_all.then_some(None),
        };
        let Some(Some(finished)) = pipe.wait_for(next) else { return Ok(spans) };
        let split_start = Instant::now();
        let Finished {
            batch,
            landing,
            back,
            singular_values,
            frobenius_norms,
            errors,
            times,
            asked,
            taken,
            steps,
        } = finished;
        let (m, n) = batch[0].pixels.dim();
        let (images, mn) = (batch.len(), m * n);
        let ranks = &options.ranks;
        let count = ranks.len() * images;
        let reconstructions: Vec<Reconstruction> = match (&landing, back) {
            (Some(values), Back::Float) => values[..count * mn]
                .par_chunks(mn)
                .map(|v| Reconstruction::Float(Array2::from_shape_vec((m, n), v.to_vec()).expect("m·n")))
                .collect(),
            (Some(values), Back::Gray8) => as_bytes(values)[..count * mn]
                .par_chunks(mn)
                .map(|v| Reconstruction::Gray8(Array2::from_shape_vec((m, n), v.to_vec()).expect("m·n")))
                .collect(),
            _ => (0..count).map(|_| Reconstruction::Dropped).collect(),
        };
        if let Some(landing) = landing {
            pipe.update(|state| state.landings.push(Some(landing)));
        }
        let times = StageTimes {
            d2h_ms: times.d2h_ms + split_start.elapsed().as_secs_f64() * 1e3 / images as f64,
            ..times
        };
        // Rank after rank, image after image: image `i`'s rank `r` is at `r·images + i`.
        let mut by_rank: Vec<_> = {
            let mut rest = reconstructions.into_iter();
            (0..ranks.len()).map(|_| rest.by_ref().take(images).collect::<Vec<_>>().into_iter()).collect()
        };
        for (i, image) in batch.iter().enumerate() {
            let kept: Vec<Reconstruction> =
                by_rank.iter_mut().map(|rank| rank.next().expect("one per image")).collect();
            let sigma = &singular_values[i];
            let norm = frobenius_norms[i];
            let reference =
                if options.check { Some(crate::svd::thin_svd(image.pixels.to_f32().view())?) } else { None };
            let mut rank_results = Vec::with_capacity(ranks.len());
            for ((r, &k), reconstruction) in ranks.iter().enumerate().zip(kept) {
                let check_error = match (&reference, reconstruction.float()) {
                    (Some(f), Some(values)) => {
                        Some(relative_error(values.view(), reconstruct_reference(f, k)?.view()))
                    }
                    _ => None,
                };
                let reconstruction = match reconstruction {
                    Reconstruction::Float(values) if options.keep != Keep::Float => {
                        Reconstruction::keep(values, options.keep)
                    }
                    other => other,
                };
                rank_results.push(RankResult {
                    k,
                    relative_error: ratio(errors[r][i].sqrt(), norm),
                    eckart_young_bound: eckart_young(sigma, k, norm),
                    reconstruction,
                    check_error,
                });
            }
            sink(ImageResult {
                index: image.index,
                name: image.name.clone(),
                rows: m,
                cols: n,
                singular_values: sigma.clone(),
                frobenius_norm: norm,
                ranks: rank_results,
                times,
            })?;
        }
        spans.push(BatchSpan { images, asked, taken, steps, handed: Instant::now() });
    }
}

/// `a / b`, 0 when both are 0 (the zero image is reconstructed exactly).
fn ratio(a: f64, b: f64) -> f64 {
    if b == 0.0 { if a == 0.0 { 0.0 } else { f64::INFINITY } } else { a / b }
}

/// `sqrt(‖A‖² − Σ_{i<k} σ_i²) / ‖A‖`: the Eckart–Young bound from the leading singular values and
/// the Frobenius norm (the tail's energy is what the leading values leave of `‖A‖²`).
pub fn eckart_young(sigma: &[f64], k: usize, norm: f64) -> f64 {
    let head: f64 = sigma[..k.min(sigma.len())].iter().map(|s| s * s).sum();
    ratio((norm * norm - head).max(0.0).sqrt(), norm)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The pipeline's buffer policy: the smallest free buffer that holds the batch; a buffer to
    /// grow (the largest) only when every buffer of the kind is free; else a wait for the one in use.
    #[test]
    fn a_batch_takes_the_smallest_fitting_buffer_and_grows_one_only_when_all_are_free() {
        let device = Device::simulator();
        let sized = |floats: usize| -> Pinned { Some(device.pinned(floats).unwrap()) };
        let capacity = |buffer: &Pinned| buffer.as_ref().map_or(0, |b| b.len() * 4);

        // Both free, neither made yet: one of them, to grow.
        let mut free: Vec<Pinned> = (0..BUFFERS).map(|_| None).collect();
        assert_eq!(take_buffer(&mut free, 100).map(|b| capacity(&b)), Some(0));
        // The other is in use and this one too small: wait.
        assert!(take_buffer(&mut free, 100).is_none());
        assert_eq!(free.len(), 1);

        // The smallest that holds the batch (bytes; the buffers hold f32 values), then the other.
        let mut free = vec![sized(1000), sized(50)];
        assert_eq!(take_buffer(&mut free, 120).map(|b| capacity(&b)), Some(200));
        assert_eq!(take_buffer(&mut free, 120).map(|b| capacity(&b)), Some(4000));

        // Both free and both too small: the largest, to grow.
        let mut free = vec![sized(10), sized(20)];
        assert_eq!(take_buffer(&mut free, 1000).map(|b| capacity(&b)), Some(80));
    }
}
