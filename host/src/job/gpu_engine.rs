//! The job's GPU engine: [`run_gpu`] takes the queue's images in batches of one shape, and per
//! batch uploads the pixels, factors every image (`svd_factor`), reconstructs every rank in one
//! launch per rank, computes the errors on the device and copies back only what the job keeps,
//! into landing buffers kept from batch to batch.

use super::cpu_engine::factor_cpu;
use super::footprint::{self, Footprint};
use super::images::{
    FailedImage, ImageResult, JobImage, JobOptions, Keep, Pixels, RankResult, Reconstruction, Sink,
    StageTimes, check_image, check_options,
};
use super::input_queue::{ImageQueue, Lease};
use crate::families::svd::finite::check_finite;
use crate::families::svd::metrics::{eckart_young_bound, relative, relative_error};
use crate::families::svd::reconstruct::{BatchShape, launch_quantize_gray8, launch_reconstruct_batch};
use crate::families::svd::reference::{reconstruct_reference, thin_svd};
use crate::families::svd_factor::{
    self, DeviceFactors, Plan, finish_squared_sums, launch_f32_to_f64, launch_gray8_to_f64,
    queue_squared_sums,
};
use crate::launch::device::{Buffer, Device, Element, HostBuffer, Mark, Queue, STAGING_CHUNK_BYTES, Staging};
use crate::launch::error::{Error, Result, ensure};
use faer::Par;
use ndarray::Array2;
use rayon::prelude::*;
use std::time::Instant;

/// Most pixels in one factorisation batch (32 Mi: eight 2048² images; device memory about
/// 90 bytes per pixel for the f64 image, the Gram matrix, the work matrices and the outputs).
pub const BATCH_PIXELS: usize = 32 << 20;

/// Most images in one batch.
pub const BATCH_IMAGES: usize = 256;

/// What the GPU engine does with an image that does not fit in the GPU's free memory even alone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TooLarge {
    /// Reports it failed, naming the memory it needs and what is free, and goes on with the other
    /// images (`--device gpu`, the simulator).
    Fail,
    /// Factors it on the CPU instead, with a note (`--device auto`: a GPU where it serves).
    Cpu,
}

/// For tests: `GPU:BATCH` makes the job's GPU (or simulated device) `GPU` fail at its `BATCH`-th
/// batch (counted from 1), after the batch's upload, as a kernel launch that fails does
/// ([`Faults::fail_at_batch`]).
pub const FAIL_GPU_ENV: &str = "KERNEL_SUITE_FAIL_GPU";

/// What [`run_gpu_staged`] does when something goes wrong.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Faults {
    /// What to do with an image that does not fit in the device's memory even alone.
    pub too_large: TooLarge,
    /// On a failure of the device (other than running out of memory, which halves the batch),
    /// give the batch's unfinished images back to the queue before returning the error, for the
    /// engines of other GPUs to take ([`ImageQueue::lend_batch`]).
    pub hand_back: bool,
    /// For tests ([`FAIL_GPU_ENV`]): the device fails at this batch of the engine, counted from 1,
    /// after uploading it.
    pub fail_at_batch: Option<usize>,
}

impl Faults {
    /// One device alone: a failure of the device ends the engine with nothing handed back.
    pub fn alone(too_large: TooLarge) -> Faults {
        Faults { too_large, hand_back: false, fail_at_batch: None }
    }

    /// The batch at which GPU `gpu` fails by [`FAIL_GPU_ENV`] (`GPU:BATCH`), if the variable names
    /// it; an error for a value that is not `GPU:BATCH` with `BATCH` ≥ 1.
    pub fn injected(gpu: u32) -> Result<Option<usize>> {
        let Ok(text) = std::env::var(FAIL_GPU_ENV) else { return Ok(None) };
        let bad = || Error::InvalidInput(format!("{FAIL_GPU_ENV}={text:?}: expected GPU:BATCH, e.g. 1:2"));
        let (target, batch) = text.split_once(':').ok_or_else(bad)?;
        let target: u32 = target.trim().parse().map_err(|_| bad())?;
        let batch: usize = batch.trim().parse().map_err(|_| bad())?;
        ensure(batch >= 1, || bad().to_string())?;
        Ok((target == gpu).then_some(batch))
    }
}

/// The GPU engine of the `svd` job: takes decoded images from `queue`, groups consecutive images
/// of one shape and pixel type into batches, and per batch uploads the pixels as they came (bytes
/// for 8-bit images) through pinned staging, converts them on the device, factors every image
/// ([`svd_factor::factor`]), reconstructs every rank of `options` and computes each
/// reconstruction's error on the device, and copies back only what [`JobOptions::keep`] asks for
/// (8-bit pixels quantised on the device for PNGs, f32 values for `.npy` files, nothing for
/// `--no-images`), each rank's whole batch in one transfer (`Landing`). Decoding (the producers
/// of `queue`) and encoding (behind `sink`) run on other threads meanwhile. Device stage times are
/// per batch, shared equally by its images; `d2h_ms` is each image's share of the batch's copies
/// (host clock).
///
/// Device memory: a batch holds at most [`BATCH_PIXELS`], [`BATCH_IMAGES`] and
/// [`JobOptions::batch_images`], and no more images than fit in what the device has free before
/// the batch ([`footprint::room`], [`Footprint`]), so memory stays bounded whatever the folder's
/// size and the GPU may be shared. A batch that runs out of memory all the same (another process
/// took memory meanwhile) is freed and run again as two halves, and no later batch of the job is
/// larger; an image that does not fit even alone is handed to the queue as failed
/// ([`ImageQueue::fail`]) with the memory it needs and what is free, or with [`TooLarge::Cpu`]
/// factored on the CPU. Both are told to the user through [`ImageQueue::note`]. Images already
/// handed to `sink` are never computed again.
///
/// Returns when each batch passed each step ([`BatchSpan`]): the GPU's timeline.
pub fn run_gpu(
    device: &Device,
    queue: &ImageQueue,
    options: &JobOptions,
    sink: Sink,
) -> Result<Vec<BatchSpan>> {
    run_gpu_staged(device, &mut device.staging()?, queue, (options, Faults::alone(TooLarge::Fail)), sink)
}

/// [`run_gpu`] with the device's staging made beforehand (page-locking it takes milliseconds, which
/// several GPUs' engines spend before the job starts, while their contexts open), and what to do
/// when something goes wrong ([`Faults`]): with [`Faults::hand_back`], a device that fails gives
/// the images of its batch that were not handed to `sink` back to the queue, whose other engines
/// take them, and returns its error.
pub fn run_gpu_staged(
    device: &Device,
    staging: &mut Staging,
    queue: &ImageQueue,
    (options, faults): (&JobOptions, Faults),
    sink: Sink,
) -> Result<Vec<BatchSpan>> {
    check_options(options)?;
    let mut engine = GpuEngine {
        device,
        queue,
        options,
        too_large: faults.too_large,
        sink,
        staging,
        landing: Landing::default(),
        most: BATCH_IMAGES.min(options.batch_images),
        spans: Vec::new(),
        fail_now: false,
    };
    for taken_batches in 1.. {
        let asked = Instant::now();
        let Some(batch) = engine.next_batch() else { break };
        let (batch, lease) = batch?;
        let taken = Instant::now();
        for image in &batch {
            check_image(image, options)?;
        }
        engine.fail_now = faults.fail_at_batch == Some(taken_batches);
        if let Err(unfinished) = engine.run_fitting(batch, (asked, taken)) {
            let Unfinished { error, images } = *unfinished;
            if faults.hand_back && !images.is_empty() {
                lease.give_back(images);
            }
            return Err(error);
        }
    }
    Ok(engine.spans)
}

/// Why [`GpuEngine::run_fitting`] stopped, and the images of its batch it had not finished when
/// the device failed (none when what failed was not the device: the sink, the queue's report).
struct Unfinished {
    error: Error,
    images: Vec<JobImage>,
}

impl From<Error> for Box<Unfinished> {
    fn from(error: Error) -> Self {
        Box::new(Unfinished { error, images: Vec::new() })
    }
}

/// One device's engine as [`run_gpu_staged`] runs it: what it was given, and what it learned of
/// the device's memory.
struct GpuEngine<'a> {
    device: &'a Device,
    queue: &'a ImageQueue,
    options: &'a JobOptions,
    too_large: TooLarge,
    sink: Sink<'a>,
    staging: &'a mut Staging,
    landing: Landing,
    /// Most images of a batch: [`BATCH_IMAGES`] and [`JobOptions::batch_images`], lowered to the
    /// half of a batch that ran out of memory.
    most: usize,
    spans: Vec<BatchSpan>,
    /// The next part run fails after its upload ([`Faults::fail_at_batch`]).
    fail_now: bool,
}

impl<'a> GpuEngine<'a> {
    /// The queue's next images of one shape and pixel type, as many as the limits allow and the
    /// device's free memory holds now (always at least one: an image whose footprint exceeds the
    /// free memory is still tried, in case the footprint overstates it).
    fn next_batch(&self) -> Option<Result<(Vec<JobImage>, Lease<'a>)>> {
        let room = footprint::room(self.device);
        // The most images of the batch's shape: found at its first image, within the limits and
        // the room (unbounded by memory where the free memory is unknown, or the plan refuses the
        // shape, which the batch then reports).
        let mut most: Option<usize> = None;
        self.queue.lend_batch(|image, batch| {
            let most = *most.get_or_insert_with(|| {
                let (m, n) = batch[0].pixels.dim();
                let most = self.most.min(BATCH_PIXELS / (m * n)).max(1);
                let fitting = room.and_then(|room| {
                    Footprint::of(self.device, &batch[0], self.options)
                        .ok()
                        .map(|f| f.images_within(room, most))
                });
                fitting.unwrap_or(most)
            });
            batch_key(&image.pixels) == batch_key(&batch[0].pixels) && batch.len() < most
        })
    }

    /// Runs `batch`, and where it runs out of the device's memory, runs it again in halves (and
    /// their halves), each freed before the next is tried; one image that does not fit alone goes
    /// to [`GpuEngine::too_large`]. Each part run is one row of the timeline, all of them with the
    /// batch's `asked` and `taken` times.
    /// A failure of the device returns the images not yet handed to the sink with its error.
    fn run_fitting(
        &mut self,
        batch: Vec<JobImage>,
        (asked, taken): (Instant, Instant),
    ) -> std::result::Result<(), Box<Unfinished>> {
        // The parts still to run, the next last.
        let mut parts = vec![batch];
        while let Some(mut part) = parts.pop() {
            let free = self.device.free_memory();
            let result = if std::mem::take(&mut self.fail_now) {
                upload_batch(self.device, &part, self.staging).and_then(|_| Err(injected_failure()))
            } else {
                run_batch(
                    self.device,
                    &part,
                    self.options,
                    (&mut *self.staging, &mut self.landing),
                    self.sink,
                )
            };
            let error = match result {
                Ok(steps) => {
                    self.spans.push(BatchSpan {
                        images: part.len(),
                        asked,
                        taken,
                        steps,
                        handed: Instant::now(),
                    });
                    continue;
                }
                Err(e) if e.is_out_of_memory() => e,
                Err(error) if is_device_failure(&error) => {
                    parts.push(part);
                    let images = parts.into_iter().rev().flatten().collect();
                    return Err(Box::new(Unfinished { error, images }));
                }
                Err(e) => return Err(e.into()),
            };
            if part.len() == 1 {
                let image = part.pop().expect("one image");
                self.too_large(image, &error, free)?;
                continue;
            }
            let second = part.split_off(part.len().div_ceil(2));
            self.most = self.most.min(part.len());
            let (m, n) = part[0].pixels.dim();
            let images = part.len() + second.len();
            let help = format!(
                "it runs as batches of {} and {}, and later batches take at most {} (--batch-images {} \
                 starts there)",
                part.len(),
                second.len(),
                self.most,
                self.most
            );
            let what = format!("a batch of {images} images of {m}×{n}");
            let needed = self.needed(&part[0], images, &error, free)?;
            self.queue.note(&Error::DoesNotFit { what, needed, free, help }.to_string());
            parts.push(second);
            parts.push(part);
        }
        Ok(())
    }

    /// An image that ran out of memory alone (`error`; `free`: the device's free memory before it
    /// was tried): factored on the CPU with a note ([`TooLarge::Cpu`]), or handed to the queue as
    /// failed with the memory it needs and what was free.
    fn too_large(&self, image: JobImage, error: &Error, free: Option<(usize, usize)>) -> Result<()> {
        let (m, n) = image.pixels.dim();
        let what = format!("{} ({m}×{n})", image.name);
        let needed = self.needed(&image, 1, error, free)?;
        match self.too_large {
            TooLarge::Cpu => {
                let help = "factored on the CPU instead (--device auto)".to_string();
                self.queue.note(&Error::DoesNotFit { what, needed, free, help }.to_string());
                (self.sink)(factor_cpu(&image, self.options, Par::rayon(0))?)
            }
            TooLarge::Fail => {
                let help = "free memory on this GPU, or run the image on another (--gpu N) or on the CPU \
                            (--device cpu; --device auto falls back to the CPU by itself)"
                    .to_string();
                let error = Error::DoesNotFit { what, needed, free, help };
                self.queue.fail(FailedImage { index: image.index, name: image.name, error })
            }
        }
    }

    /// About what a batch of `images` images like `image` needs, bytes, having run out of memory
    /// with `error` (`free`: the device's free memory before): the larger of its footprint and
    /// what it had taken when a buffer failed, with that buffer.
    fn needed(
        &self,
        image: &JobImage,
        images: usize,
        error: &Error,
        free: Option<(usize, usize)>,
    ) -> Result<u128> {
        let estimate = Footprint::of(self.device, image, self.options)?.bytes(images)?;
        let taken = match (error, free) {
            (Error::OutOfMemory { bytes, free: Some((left, _)) }, Some((before, _))) => {
                before.saturating_sub(*left) as u128 + bytes
            }
            _ => 0,
        };
        Ok(estimate.max(taken))
    }
}

/// When one batch of [`run_gpu`] passed each step, on the host clock: one row of a GPU's
/// timeline (`svd --profile`).
#[derive(Debug, Clone)]
pub struct BatchSpan {
    /// Images in the batch.
    pub images: usize,
    /// The engine asked the queue for its next batch.
    pub asked: Instant,
    /// The queue handed it over (the wait between is for decoding, or for another GPU's turn).
    pub taken: Instant,
    /// When the work on the device passed each step.
    pub steps: BatchSteps,
    /// Every image handed to the sink (it blocks while the encoders are behind).
    pub handed: Instant,
}

/// [`BatchSpan::steps`]: the host's clock after each step that ends in a wait for the device.
#[derive(Debug, Clone)]
pub struct BatchSteps {
    /// The pixels are on the device, widened to f64.
    pub uploaded: Instant,
    /// The factorisation returned (its last wait was for the singular values).
    pub factored: Instant,
    /// The reconstructions' errors, and what of them the host keeps, are in host memory.
    pub copied: Instant,
    /// The plan the factorisation ran by (`--profile` prints each GPU's).
    pub plan: Plan,
}

/// Whether `error` is a failure of the device itself (a driver call, a kernel launch or run), which
/// another device may not meet, rather than of the job's data, its outputs or a shortage of memory.
pub fn is_device_failure(error: &Error) -> bool {
    !error.is_out_of_memory()
        && matches!(
            error,
            Error::Cuda { .. }
                | Error::CudaCode { .. }
                | Error::Kernel { .. }
                | Error::SimulatedKernel { .. }
        )
}

/// The failure [`FAIL_GPU_ENV`] injects: a kernel launch that failed.
fn injected_failure() -> Error {
    Error::CudaCode {
        call: "a kernel launch (injected by KERNEL_SUITE_FAIL_GPU)",
        code: 719,
        name: "CUDA_ERROR_LAUNCH_FAILED".into(),
    }
}

/// Images batch together when they have the same shape and pixel type.
fn batch_key(pixels: &Pixels) -> (usize, usize, bool) {
    let (m, n) = pixels.dim();
    (m, n, matches!(pixels, Pixels::Gray8 { .. }))
}

/// Uploads the batch's pixels (as they came: bytes or f32) through `staging` and widens them to
/// f64 on the device: `images` row-major images, `m·n` apart.
fn upload_batch(device: &Device, batch: &[JobImage], staging: &mut Staging) -> Result<Buffer<f64>> {
    let q = device.queue();
    let (m, n) = batch[0].pixels.dim();
    let (images, mn) = (batch.len(), m * n);
    let mut a = device.alloc::<f64>(images * mn)?;
    match &batch[0].pixels {
        Pixels::Gray8 { .. } => {
            let mut raw = device.alloc::<u8>(images * mn)?;
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
            let mut raw = device.alloc::<f32>(images * mn)?;
            let mut standard = Vec::with_capacity(images);
            for image in batch {
                let Pixels::Float(pixels) = &image.pixels else {
                    unreachable!("a batch holds one pixel type")
                };
                check_finite(pixels.view(), Some(&image.name))?;
                standard.push(pixels.as_standard_layout());
            }
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

/// One batch on the device: upload, factorisation, every rank's reconstruction and errors, the
/// copies back, and each image's result handed to `sink`.
fn run_batch(
    device: &Device,
    batch: &[JobImage],
    options: &JobOptions,
    (staging, landing): (&mut Staging, &mut Landing),
    sink: Sink,
) -> Result<BatchSteps> {
    let (m, n) = batch[0].pixels.dim();
    let images = batch.len();
    let kmax = *options.ranks.iter().max().expect("ranks checked non-empty");
    ensure(kmax <= m.min(n), || {
        format!(
            "{}: rank k = {kmax} is larger than min(rows, cols) = {} of this {m}×{n} image",
            batch[0].name,
            m.min(n)
        )
    })?;
    let t_start = device.mark()?;
    let a = upload_batch(device, batch, staging)?;
    let uploaded = Instant::now();
    let t_uploaded = device.mark()?;
    let factors = svd_factor::factor(device, &a, (m, n), images, kmax)?;
    let plan = factors.plan.clone();
    let factored = Instant::now();
    let t_factored = device.mark()?;
    let ranks = reconstruct_ranks(device, &a, &factors, options)?;
    let t_reconstructed = device.mark()?;
    let per_image =
        |from: &Mark, to: &Mark| -> Result<f64> { Ok(device.elapsed_ms(from, to)? / images as f64) };
    let device_times = StageTimes {
        h2d_ms: per_image(&t_start, &t_uploaded)?,
        svd_ms: per_image(&t_uploaded, &t_factored)?,
        reconstruct_ms: per_image(&t_factored, &t_reconstructed)?,
        ..StageTimes::default()
    };
    let errors: Vec<Vec<f64>> = ranks
        .error_sums
        .iter()
        .map(|(partial, blocks)| finish_squared_sums(device, partial, *blocks))
        .collect::<Result<_>>()?;
    let copy_start = Instant::now();
    let kept = copy_back(device, &ranks, (m, n, images), options, (staging, landing))?;
    let copied = Instant::now();
    let times =
        StageTimes { d2h_ms: (copied - copy_start).as_secs_f64() * 1e3 / images as f64, ..device_times };
    hand_over(batch, &factors, (&errors, kept), times, options, sink)?;
    Ok(BatchSteps { uploaded, factored, copied, plan })
}

/// Every rank of a batch on the device ([`reconstruct_ranks`]).
struct BatchRanks {
    /// Per rank, the f32 reconstructions of every image, consecutive.
    outputs: Vec<Buffer<f32>>,
    /// Per rank, their 8-bit pixels, when those are what comes back.
    bytes: Vec<Buffer<u8>>,
    /// Per rank, the partial squared sums of `A − A_k` per image ([`queue_squared_sums`]).
    error_sums: Vec<(Buffer<f64>, usize)>,
}

/// Every rank of every image of the batch: reconstruction, its squared error against the image
/// `a`, and the 8-bit pixels when those are what comes back (queued, not waited for).
fn reconstruct_ranks(
    device: &Device,
    a: &Buffer<f64>,
    factors: &DeviceFactors,
    options: &JobOptions,
) -> Result<BatchRanks> {
    let q = device.queue();
    let ((m, n), images, kmax) = (factors.dims, factors.images, factors.k);
    let mn = m * n;
    let gray_back = quantised_on_device(options);
    let count = options.ranks.len();
    let mut ranks = BatchRanks {
        outputs: Vec::with_capacity(count),
        bytes: Vec::new(),
        error_sums: Vec::with_capacity(count),
    };
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
    for &k in &options.ranks {
        let mut out = device.alloc::<f32>(images * mn)?;
        // SAFETY: every buffer lives until the queue is synchronised (the errors' download), and
        // `out` is read only by work queued after the reconstruction; the reconstruction checks
        // its buffers' lengths, and `a` and `out` hold the `images·mn` values the squared sums read.
        unsafe {
            let bufs = (&factors.u, &factors.s, &factors.vt, &mut out);
            launch_reconstruct_batch(device, q, options.variant, 16, bufs, (m, n, k), shape)?;
            ranks.error_sums.push(queue_squared_sums(device, q, a, Some(&out), mn, images)?);
            if gray_back {
                let mut gray = device.alloc::<u8>(images * mn)?;
                launch_quantize_gray8(device, q, &out, &mut gray)?;
                ranks.bytes.push(gray);
            }
        }
        ranks.outputs.push(out);
    }
    Ok(ranks)
}

/// Whether the f32 reconstructions come back: for `.npy` files, or for `--check` (compared on the
/// host with the CPU reference).
fn float_back(options: &JobOptions) -> bool {
    options.keep == Keep::Float || options.check
}

/// Whether the reconstructions are quantised to 8-bit pixels on the device, as what comes back
/// for PNGs (a quarter of the f32 bytes).
pub(super) fn quantised_on_device(options: &JobOptions) -> bool {
    options.keep == Keep::Gray8 && !float_back(options)
}

/// Each rank's reconstructions of the whole batch, copied back in one transfer as `options` asks
/// (f32 values, 8-bit pixels or nothing): per rank, an iterator over the batch's images.
fn copy_back(
    device: &Device,
    ranks: &BatchRanks,
    (m, n, images): (usize, usize, usize),
    options: &JobOptions,
    (staging, landing): (&mut Staging, &mut Landing),
) -> Result<Vec<std::vec::IntoIter<Reconstruction>>> {
    let q = device.queue();
    let mn = m * n;
    let mut kept_by_rank = Vec::with_capacity(options.ranks.len());
    for r in 0..options.ranks.len() {
        let kept: Vec<Reconstruction> = if float_back(options) {
            let images =
                landing.floats.download_per_image(device, (q, &mut *staging), &ranks.outputs[r], mn)?;
            images
                .into_iter()
                .map(|values| Reconstruction::Float(Array2::from_shape_vec((m, n), values).expect("m·n")))
                .collect()
        } else if options.keep == Keep::Gray8 {
            let images = landing.bytes.download_per_image(device, (q, &mut *staging), &ranks.bytes[r], mn)?;
            images
                .into_iter()
                .map(|values| Reconstruction::Gray8(Array2::from_shape_vec((m, n), values).expect("m·n")))
                .collect()
        } else {
            (0..images).map(|_| Reconstruction::Dropped).collect()
        };
        kept_by_rank.push(kept.into_iter());
    }
    Ok(kept_by_rank)
}

/// Each image's result to `sink`, in batch order: its spectrum and norm from `factors`, per rank
/// its error (`errors[rank][image]`, squared), bound, kept reconstruction and, with `--check`,
/// its difference from the CPU reference.
fn hand_over(
    batch: &[JobImage],
    factors: &DeviceFactors,
    (errors, mut kept_by_rank): (&[Vec<f64>], Vec<std::vec::IntoIter<Reconstruction>>),
    times: StageTimes,
    options: &JobOptions,
    sink: Sink,
) -> Result<()> {
    let (rows, cols) = factors.dims;
    for (i, image) in batch.iter().enumerate() {
        let kept: Vec<Reconstruction> =
            kept_by_rank.iter_mut().map(|rank| rank.next().expect("one per image")).collect();
        let sigma = &factors.singular_values[i];
        let norm = factors.frobenius_norms[i];
        let reference = if options.check { Some(thin_svd(image.pixels.to_f32().view())?) } else { None };
        let mut ranks = Vec::with_capacity(options.ranks.len());
        for ((r, &k), reconstruction) in options.ranks.iter().enumerate().zip(kept) {
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
            ranks.push(RankResult {
                k,
                relative_error: relative(errors[r][i], norm * norm),
                eckart_young_bound: eckart_young_bound(sigma, k, norm * norm),
                reconstruction,
                check_error,
            });
        }
        let (index, name, singular_values) = (image.index, image.name.clone(), sigma.clone());
        let frobenius_norm = norm;
        sink(ImageResult { index, name, rows, cols, singular_values, frobenius_norm, ranks, times })?;
    }
    Ok(())
}

/// Where a batch's reconstructions are copied to: through the staging, or, once a job has copied
/// enough ([`STAGED_BEFORE_PINNING`]), page-locked host memory kept from batch to batch and grown
/// when a batch needs more.
#[derive(Default)]
struct Landing {
    floats: LandingBuffer<f32>,
    bytes: LandingBuffer<u8>,
}

/// Staged downloads larger than a staging chunk before a [`LandingBuffer`] is page-locked:
/// page-locking costs about 0.5 ms per MiB (8 ms for a batch of 16 8-bit 1024² images), more than
/// a single-batch job's staged copy, so a job of one large copy never pays it; every later copy
/// goes to page-locked memory at the copy engine's full rate, since the staging's crew of copying
/// threads is slow beside busy decoders and encoders (on 2 × H100 with PNGs, eight staged 32-MiB
/// batches per GPU spent 117–146 ms copying back where page-locked ones spent 51).
const STAGED_BEFORE_PINNING: usize = 1;

/// One element type's part of a [`Landing`]: the page-locked buffer, once made, and how many
/// downloads went through the staging before it.
struct LandingBuffer<T: Element> {
    pinned: Option<HostBuffer<T>>,
    staged: usize,
}

impl<T: Element> Default for LandingBuffer<T> {
    fn default() -> Self {
        LandingBuffer { pinned: None, staged: 0 }
    }
}

impl<T: Element> LandingBuffer<T> {
    /// Every image's part of `buffer` (consecutive images of `mn` elements), after the work queued
    /// on `queue`, in one transfer: through the staging straight into each image's array (what
    /// fits one staging chunk, and the first [`STAGED_BEFORE_PINNING`] larger downloads), or in
    /// one asynchronous copy at the copy engine's full rate into the page-locked buffer and one
    /// wait, then the images copied out on all cores. Copied image by image instead, each image
    /// cost a wait and a staged copy with the GPU idle between them (0.47 ms per 1024² image;
    /// 16 ms per batch of 32).
    fn download_per_image(
        &mut self,
        device: &Device,
        (queue, staging): (&Queue, &mut Staging),
        buffer: &Buffer<T>,
        mn: usize,
    ) -> Result<Vec<Vec<T>>> {
        let len = buffer.len();
        let small = len * std::mem::size_of::<T>() <= STAGING_CHUNK_BYTES;
        let pinned_fits = self.pinned.as_ref().is_some_and(|host| host.len() >= len);
        if small || (!pinned_fits && self.staged < STAGED_BEFORE_PINNING) {
            self.staged += usize::from(!small);
            let mut images: Vec<Vec<T>> = (0..len / mn).map(|_| vec![T::default(); mn]).collect();
            let mut parts: Vec<&mut [T]> = images.iter_mut().map(Vec::as_mut_slice).collect();
            staging.download_parts(device, queue, buffer, 0, &mut parts)?;
            return Ok(images);
        }
        if !pinned_fits {
            self.pinned = None;
            self.pinned = Some(device.pinned(len)?);
        }
        let host = &mut self.pinned.as_mut().expect("allocated above")[..len];
        // SAFETY: `host` is not touched until the queue has been synchronised just below.
        unsafe { device.download_async(queue, buffer, host)? };
        device.sync_queue(queue)?;
        Ok(host.par_chunks(mn).map(<[T]>::to_vec).collect())
    }
}
