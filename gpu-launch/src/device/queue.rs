//! Queues (CUDA streams: the device's own, new ones, or the caller's) and marks in them (events), for
//! ordering and timing device work.

use super::{Device, Phase};
use crate::error::{Error, Result, cuda};
use cust::error::CudaError;
use cust::event::{Event, EventFlags};
use cust::stream::{Stream, StreamFlags, StreamWaitEventFlags};
use std::time::Instant;

/// An ordered queue of device work: a CUDA stream on a GPU. Work on different queues may overlap
/// (copies on the copy engines, kernels on the SMs). In the simulator, work runs when queued.
///
/// ```
/// use gpu_launch::Device;
/// # fn main() -> gpu_launch::Result<()> {
/// let device = Device::simulator();
/// let side = device.new_queue()?;
/// let mut counts = device.upload(&[7u32; 8])?;
/// // Zeroed on the side queue; the device's own queue waits for it before using `counts`.
/// device.zero_on(&side, counts.view_mut(..)?)?;
/// device.queue_wait(device.queue(), device.mark_on(&side)?)?;
/// assert_eq!(device.download(&counts)?, vec![0; 8]);
/// # Ok(()) }
/// ```
pub struct Queue {
    pub(super) stream: Option<QueueStream>,
}

/// A queue's CUDA stream: one the queue created (destroyed with it), or one that belongs to the
/// caller ([`Device::caller_queue`]: PyTorch's or CuPy's current stream), never destroyed here.
pub(super) struct QueueStream {
    stream: std::mem::ManuallyDrop<Stream>,
    owned: bool,
}

impl QueueStream {
    pub(super) fn owned(stream: Stream) -> Self {
        QueueStream { stream: std::mem::ManuallyDrop::new(stream), owned: true }
    }
}

impl std::ops::Deref for QueueStream {
    type Target = Stream;
    fn deref(&self) -> &Stream {
        &self.stream
    }
}

impl Drop for QueueStream {
    fn drop(&mut self) {
        if self.owned {
            // SAFETY: the queue created this stream and drops it once, here.
            unsafe { std::mem::ManuallyDrop::drop(&mut self.stream) }
        }
    }
}

// cust 0.3's `Stream` is a struct of one field, its `CUstream`, and has no constructor from a raw
// handle: with the sizes equal, that field spans the whole struct, so a handle is a `Stream`.
const _: () = assert!(std::mem::size_of::<Stream>() == std::mem::size_of::<cust::sys::CUstream>());

/// The caller's stream `raw` as a cust `Stream` that is never destroyed.
///
/// # Safety
/// `raw` is 0, 1, 2 or a live stream, for as long as the result is used.
unsafe fn borrowed_stream(raw: usize) -> std::mem::ManuallyDrop<Stream> {
    // SAFETY: a `Stream` is its handle (the size assertion above); `ManuallyDrop` keeps it from
    // being destroyed.
    std::mem::ManuallyDrop::new(unsafe { std::mem::transmute::<cust::sys::CUstream, Stream>(raw as _) })
}

pub(super) fn new_stream() -> Result<Stream> {
    Stream::new(StreamFlags::NON_BLOCKING, None).map_err(cuda("cuStreamCreate"))
}

impl Device {
    /// A new queue (CUDA stream) for work that should overlap with other queues' work.
    pub fn new_queue(&self) -> Result<Queue> {
        Ok(Queue { stream: self.is_gpu().then(new_stream).transpose()?.map(QueueStream::owned) })
    }

    /// A queue over the caller's CUDA stream `stream` (a raw `CUstream`: 0 or `CU_STREAM_LEGACY` (1)
    /// for the legacy default stream, `CU_STREAM_PER_THREAD` (2), or a stream's handle): what a
    /// binding launches on so that its kernels run in order with the caller's own work (PyTorch's
    /// or CuPy's current stream). The queue never destroys the stream. In the simulator, where
    /// work runs when queued, the stream is ignored.
    ///
    /// # Safety
    /// `stream` is 0, 1, 2 or a live stream of this device's primary context, and outlives the
    /// queue.
    pub unsafe fn caller_queue(&self, stream: usize) -> Queue {
        // SAFETY: forwarded from the caller.
        let stream =
            self.is_gpu().then(|| QueueStream { stream: unsafe { borrowed_stream(stream) }, owned: false });
        Queue { stream }
    }

    /// Makes the work queued on `queue` from now on wait for the work queued so far on the caller's
    /// stream `producer` (a raw `CUstream`, as in [`Device::caller_queue`]), without blocking the
    /// host: an array another library is still writing on its own stream. Nothing to do when
    /// `producer` is the queue's own stream, or in the simulator.
    ///
    /// # Safety
    /// `producer` is 0, 1, 2 or a live stream of this device's primary context.
    pub unsafe fn queue_wait_stream(&self, queue: &Queue, producer: usize) -> Result<()> {
        let Some(consumer) = &queue.stream else { return Ok(()) };
        if consumer.as_inner() as usize == producer {
            return Ok(());
        }
        let event = Event::new(EventFlags::DISABLE_TIMING).map_err(cuda("cuEventCreate"))?;
        // SAFETY: forwarded from the caller.
        let producer = unsafe { borrowed_stream(producer) };
        event.record(&producer).map_err(cuda("cuEventRecord"))?;
        consumer.wait_event(event, StreamWaitEventFlags::DEFAULT).map_err(cuda("cuStreamWaitEvent"))
    }

    /// The queue that [`Device::launch`], the copies and [`Device::mark`] use.
    pub fn queue(&self) -> &Queue {
        &self.queue
    }

    /// The CUDA stream of the device's queue (`None` in the simulator).
    pub(crate) fn queue_stream(&self) -> Option<&Stream> {
        self.queue.stream.as_deref()
    }

    /// Waits until every kernel launched so far has finished; reports one that failed.
    pub fn synchronize(&self) -> Result<()> {
        self.sync_queue(&self.queue)
    }

    /// A failure seen while waiting for the GPU, blamed on the last kernel launched.
    pub(super) fn kernel_error(&self, source: CudaError) -> Error {
        Error::Kernel { kernel: self.last_kernel.get(), source }
    }

    /// Waits until the work queued on `queue` has finished; reports a kernel that failed.
    pub fn sync_queue(&self, queue: &Queue) -> Result<()> {
        match &queue.stream {
            Some(stream) => {
                let _phase = Phase::new("wait for the GPU");
                stream
                    .synchronize()
                    .map_err(|source| Error::Kernel { kernel: self.last_kernel.get(), source })
            }
            None => Ok(()),
        }
    }
}

/// A point in a device's work queue, for timing phases: a recorded CUDA event on a GPU, the wall
/// clock in the simulator.
pub struct Mark {
    inner: MarkInner,
}

enum MarkInner {
    Event(Event),
    Instant(Instant),
}

impl Device {
    /// Records a [`Mark`] after the work queued so far on the device's queue.
    pub fn mark(&self) -> Result<Mark> {
        self.mark_on(&self.queue)
    }

    /// Records a [`Mark`] after the work queued so far on `queue`.
    pub fn mark_on(&self, queue: &Queue) -> Result<Mark> {
        let inner = match &queue.stream {
            Some(stream) => {
                let event = Event::new(EventFlags::DEFAULT).map_err(cuda("cuEventCreate"))?;
                event.record(stream).map_err(cuda("cuEventRecord"))?;
                MarkInner::Event(event)
            }
            None => MarkInner::Instant(Instant::now()),
        };
        Ok(Mark { inner })
    }

    /// Makes the work queued on `queue` from now on wait until the work before `mark` (recorded on
    /// another queue of this device) has finished, without blocking the host (`cuStreamWaitEvent`):
    /// one queue's kernel consuming what another queue's kernel produces. The mark is used up. In
    /// the simulator, where work has finished when it is queued, there is nothing to wait for.
    pub fn queue_wait(&self, queue: &Queue, mark: Mark) -> Result<()> {
        match (&queue.stream, mark.inner) {
            (Some(stream), MarkInner::Event(event)) => {
                stream.wait_event(event, StreamWaitEventFlags::DEFAULT).map_err(cuda("cuStreamWaitEvent"))
            }
            (None, MarkInner::Instant(_)) => Ok(()),
            _ => Err(Error::InvalidInput("a mark and a queue of different devices".into())),
        }
    }

    /// Milliseconds of device time between two marks (waits for `to`). On a GPU this is
    /// `cuEventElapsedTime`, resolution about 0.5 µs.
    pub fn elapsed_ms(&self, from: &Mark, to: &Mark) -> Result<f64> {
        match (&from.inner, &to.inner) {
            (MarkInner::Event(a), MarkInner::Event(b)) => {
                b.synchronize().map_err(|source| Error::Kernel { kernel: self.last_kernel.get(), source })?;
                Ok(b.elapsed_time_f32(a).map_err(cuda("cuEventElapsedTime"))? as f64)
            }
            (MarkInner::Instant(a), MarkInner::Instant(b)) => Ok((*b - *a).as_secs_f64() * 1e3),
            _ => Err(Error::InvalidInput("marks from different devices".into())),
        }
    }

    /// Times `work` (which queues device work, e.g. a launch): `warmup` untimed calls, then `runs`
    /// calls queued back to back with a mark between each, so that each interval is one call's
    /// device time. One more untimed call is queued first, so the GPU is already busy when the first
    /// mark is recorded and the host's launch latency does not leak into the intervals. Returns the
    /// per-call times in milliseconds.
    pub fn time_ms(
        &self,
        warmup: usize,
        runs: usize,
        mut work: impl FnMut() -> Result<()>,
    ) -> Result<Vec<f64>> {
        for _ in 0..warmup {
            work()?;
        }
        self.synchronize()?;
        work()?;
        let mut marks = vec![self.mark()?];
        for _ in 0..runs {
            work()?;
            marks.push(self.mark()?);
        }
        marks.windows(2).map(|w| self.elapsed_ms(&w[0], &w[1])).collect()
    }
}
