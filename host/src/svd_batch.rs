//! Batched SVD reconstruction with several queues, so that copies and kernels of different images
//! overlap.
//!
//! ```text
//!  host producer ──fill──▶ pinned inputs[slot] ──H2D (copy engine)──▶ device U, s, Vᵀ [slot]
//!                                                                          │ kernel (SMs)
//!  host consumer ◀─copy── pinned output[slot] ◀──D2H (copy engine)── device out [slot]
//! ```
//!
//! Each of the `slots` pipeline slots owns a queue, pinned staging buffers and device buffers, so
//! memory stays bounded whatever the number of images: image `i` goes to slot `i % slots`, after the
//! slot's previous image has been collected. With one slot the same code runs the images strictly
//! one after the other: the serial baseline. See `docs/svd-batch-pipeline.md`.

use crate::error::{Result, ensure};
use crate::svd::{PhaseTimes, RankK, Variant, launch_reconstruct};
use crate::{Buffer, Device, HostBuffer, Queue};
use ndarray::Array2;
use std::time::Instant;

/// What a batch run measured.
#[derive(Debug, Clone, Copy, serde::Serialize)]
pub struct BatchRun {
    /// Images reconstructed.
    pub images: usize,
    /// Pipeline slots (queues) used.
    pub slots: usize,
    /// Wall time of the whole batch, milliseconds (host clock, from the first copy to the last
    /// result collected).
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
    out: HostBuffer<f32>,
    du: Buffer<f32>,
    ds: Buffer<f32>,
    dvt: Buffer<f32>,
    dout: Buffer<f32>,
    /// Index of the image whose result is in flight in this slot.
    pending: Option<usize>,
}

/// Reconstructs every job (all of one shape) with `slots` overlapping pipeline slots; results in
/// job order.
pub fn reconstruct_batch(
    device: &Device,
    jobs: &[RankK],
    variant: Variant,
    block: u32,
    slots: usize,
) -> Result<(Vec<Array2<f32>>, BatchRun)> {
    ensure(!jobs.is_empty(), || "empty batch".into())?;
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
    let slots = slots.min(jobs.len());
    let mut pool = Vec::with_capacity(slots);
    for _ in 0..slots {
        pool.push(Slot {
            queue: device.new_queue()?,
            u: device.pinned(m * k)?,
            s: device.pinned(k)?,
            vt: device.pinned(k * n)?,
            out: device.pinned(m * n)?,
            du: device.alloc(m * k)?,
            ds: device.alloc(k)?,
            dvt: device.alloc(k * n)?,
            dout: device.alloc(m * n)?,
            pending: None,
        });
    }
    let mut results: Vec<Option<Array2<f32>>> = vec![None; jobs.len()];

    let collect = |slot: &mut Slot, results: &mut Vec<Option<Array2<f32>>>| -> Result<()> {
        if let Some(i) = slot.pending.take() {
            device.sync_queue(&slot.queue)?;
            results[i] = Some(Array2::from_shape_vec((m, n), slot.out.to_vec()).expect("m·n"));
        }
        Ok(())
    };

    let start = Instant::now();
    for (i, job) in jobs.iter().enumerate() {
        let slot = &mut pool[i % slots];
        collect(slot, &mut results)?;
        slot.u.copy_from_slice(job.u.as_slice().expect("standard layout"));
        slot.s.copy_from_slice(&job.s);
        slot.vt.copy_from_slice(job.vt.as_slice().expect("standard layout"));
        // SAFETY: the pinned buffers are not touched again before `collect` synchronises the queue;
        // the device buffers have the sizes the kernel is given.
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
            device.download_async(&slot.queue, &slot.dout, &mut slot.out)?;
        }
        slot.pending = Some(i);
    }
    for slot in &mut pool {
        collect(slot, &mut results)?;
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
    Ok((results.into_iter().map(|r| r.expect("every image collected")).collect(), run))
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
