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
use crate::{Buffer, Device, Element, HostBuffer, Mark, Queue, Staging};
use ndarray::Array2;
use rayon::prelude::*;
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
/// [`JobOptions::batch_images`], so device memory stays bounded whatever the folder's size), and per batch uploads the pixels as
/// they came (bytes for 8-bit images) through pinned staging, converts them on the device,
/// factors every image ([`svd_factor::factor`]), reconstructs every rank of `options` and
/// computes each reconstruction's error on the device, and copies back only what
/// [`JobOptions::keep`] asks for (8-bit pixels quantised on the device for PNGs, f32 values for
/// `.npy` files, nothing for `--no-images`), each rank's whole batch in one transfer (`Landing`).
/// Decoding (the producers of `queue`) and encoding
/// (behind `sink`) run on other threads meanwhile. Device stage times are per batch, shared
/// equally by its images; `d2h_ms` is each image's share of the batch's copies (host clock).
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
/// several GPUs' engines spend before the job starts, while their contexts open).
pub fn run_gpu_staged(
    device: &Device,
    staging: &mut Staging,
    queue: &ImageQueue,
    options: &JobOptions,
    sink: Sink,
) -> Result<Vec<BatchSpan>> {
    check_options(options)?;
    let mut landing = Landing::default();
    let most = BATCH_IMAGES.min(options.batch_images);
    let mut spans = Vec::new();
    loop {
        let asked = Instant::now();
        let batch = match queue.next_batch(|image, batch| {
            let (m, n) = batch[0].pixels.dim();
            batch_key(&image.pixels) == batch_key(&batch[0].pixels)
                && batch.len() < most
                && (batch.len() + 1) * m * n <= BATCH_PIXELS
        }) {
            Some(batch) => batch?,
            None => return Ok(spans),
        };
        let taken = Instant::now();
        for image in &batch {
            check_image(image, options)?;
        }
        let steps = run_batch(device, &batch, options, (&mut *staging, &mut landing), sink)?;
        spans.push(BatchSpan { images: batch.len(), asked, taken, steps, handed: Instant::now() });
    }
}

/// When one batch of [`run_gpu`] passed each step, on the host clock: one row of a GPU's
/// timeline (`svd --profile`).
#[derive(Debug, Clone, Copy)]
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
                if let Some(((y, x), v)) = pixels.indexed_iter().find(|(_, v)| !v.is_finite()) {
                    return Err(Error::InvalidInput(format!(
                        "{}: pixel ({y}, {x}) is {v}: the image must be finite",
                        image.name
                    )));
                }
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

fn run_batch(
    device: &Device,
    batch: &[JobImage],
    options: &JobOptions,
    (staging, landing): (&mut Staging, &mut Landing),
    sink: Sink,
) -> Result<BatchSteps> {
    let (m, n) = batch[0].pixels.dim();
    let (images, mn) = (batch.len(), m * n);
    let kmax = *options.ranks.iter().max().expect("ranks checked non-empty");
    ensure(kmax <= m.min(n), || {
        format!(
            "{}: rank k = {kmax} is larger than min(rows, cols) = {} of this {m}×{n} image",
            batch[0].name,
            m.min(n)
        )
    })?;
    let q = device.queue();
    let t_start = device.mark()?;
    let a = upload_batch(device, batch, staging)?;
    let uploaded = Instant::now();
    let t_uploaded = device.mark()?;
    let factors = svd_factor::factor(device, &a, (m, n), images, kmax)?;
    let factored = Instant::now();
    let t_factored = device.mark()?;

    // Every rank of every image: reconstruction, its squared error against the image, and the
    // 8-bit pixels when those are what comes back.
    let ranks = &options.ranks;
    let float_back = options.keep == Keep::Float || options.check;
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
            if options.keep == Keep::Gray8 && !float_back {
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

    // Each rank's reconstructions of the whole batch come back in one copy.
    let copy_start = Instant::now();
    let mut kept_by_rank = Vec::with_capacity(ranks.len());
    for r in 0..ranks.len() {
        let kept: Vec<Reconstruction> = if float_back {
            let images = landing.floats.download_per_image(device, (q, &mut *staging), &outputs[r], mn)?;
            images
                .into_iter()
                .map(|values| Reconstruction::Float(Array2::from_shape_vec((m, n), values).expect("m·n")))
                .collect()
        } else if options.keep == Keep::Gray8 {
            let images = landing.bytes.download_per_image(device, (q, &mut *staging), &bytes[r], mn)?;
            images
                .into_iter()
                .map(|values| Reconstruction::Gray8(Array2::from_shape_vec((m, n), values).expect("m·n")))
                .collect()
        } else {
            (0..images).map(|_| Reconstruction::Dropped).collect()
        };
        kept_by_rank.push(kept.into_iter());
    }
    let copied = Instant::now();
    let times =
        StageTimes { d2h_ms: (copied - copy_start).as_secs_f64() * 1e3 / images as f64, ..device_times };
    for (i, image) in batch.iter().enumerate() {
        let kept: Vec<Reconstruction> =
            kept_by_rank.iter_mut().map(|rank| rank.next().expect("one per image")).collect();
        let sigma = &factors.singular_values[i];
        let norm = factors.frobenius_norms[i];
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
    Ok(BatchSteps { uploaded, factored, copied })
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
        let small = len * std::mem::size_of::<T>() <= crate::device::STAGING_CHUNK_BYTES;
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
