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
//!
//! Only the benchmarks (`benches/svd.rs`) and the tests (`tests/svd.rs`) run it: the `svd` job's
//! GPU engine reconstructs a whole batch in one launch per rank instead
//! (`crate::job::gpu_engine`).

use super::reconstruct::{PhaseTimes, RankK, Variant, launch_reconstruct};
use crate::launch::device::{Buffer, Device, HostBuffer, Queue};
use crate::launch::error::{Result, ensure};
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
