//! Device memory: buffers and their views (kernel arguments), page-locked host buffers, and the
//! copies between them and ordinary host memory.

use super::{Device, Element, Inner, Phase, Queue, STAGING_CHUNK_BYTES, Staging, mixed_devices, same_len};
use crate::error::{Error, Result, cuda, raw};
use crate::profile::Direction;
use cust::error::CudaError;
use cust::memory::{DeviceBuffer, LockedBuffer};
use rayon::prelude::*;
use std::marker::PhantomData;
use std::ops::{Bound, RangeBounds};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

impl Device {
    /// For tests: when on, every buffer from [`Device::alloc`] starts filled with `0xff` bytes (NaN
    /// for floats), so an element a kernel never wrote cannot pass for a result. The fill has
    /// finished when `alloc` returns, so the buffer may go to any queue.
    pub fn set_poison_allocations(&self, on: bool) {
        self.poison.set(on);
    }

    /// A buffer of `len` elements whose contents are unspecified (or poisoned, see
    /// [`Device::set_poison_allocations`]) until a kernel or an upload writes them.
    /// A buffer larger than the free memory is [`Error::OutOfMemory`], with what was free.
    pub fn alloc<T: Element>(&self, len: usize) -> Result<Buffer<T>> {
        let wanted = len as u128 * std::mem::size_of::<T>() as u128;
        let out_of_memory = || Error::OutOfMemory { bytes: wanted, free: self.free_memory() };
        let bytes = usize::try_from(wanted).map_err(|_| out_of_memory())?;
        let charge = match (&self.inner, &self.memory) {
            (Inner::Simulator, Some(memory)) => Some(memory.charge(bytes).ok_or_else(out_of_memory)?),
            _ => None,
        };
        let inner = match &self.inner {
            Inner::Gpu(_) => {
                let t = Instant::now();
                let allocate = || {
                    // SAFETY: any bytes are a valid `Element`.
                    unsafe { DeviceBuffer::uninitialized(len) }
                };
                let buf = match allocate() {
                    Err(CudaError::OutOfMemory) if self.release_idle_memory()? => allocate(),
                    other => other,
                }
                .map_err(|e| match e {
                    CudaError::OutOfMemory => out_of_memory(),
                    other => Error::Cuda { call: "cuMemAlloc", source: other },
                })?;
                if let Some(p) = self.profiler.get() {
                    p.host_cost("cuMemAlloc", t.elapsed().as_secs_f64() * 1e3);
                }
                if self.poison.get() && bytes > 0 {
                    let stream = self.queue.stream.as_ref().map_or(std::ptr::null_mut(), |s| s.as_inner());
                    // SAFETY: the pointer and byte count describe the allocation just made.
                    raw("cuMemsetD8Async", unsafe {
                        cust::sys::cuMemsetD8Async(buf.as_device_ptr().as_raw(), 0xff, bytes, stream)
                    })?;
                    // Waited for here: a memset left queued would be ordered only before the device
                    // queue's later work, and could land after another queue's writes to the buffer.
                    self.sync_queue(&self.queue)?;
                }
                BufferInner::Gpu(buf)
            }
            Inner::Simulator => {
                let mut v = Vec::<T>::new();
                v.try_reserve_exact(len).map_err(|_| out_of_memory())?;
                // SAFETY: any bytes are a valid `Element`, so filling the bytes initialises them.
                unsafe {
                    std::ptr::write_bytes(v.as_mut_ptr() as *mut u8, 0xff, bytes);
                    v.set_len(len);
                }
                BufferInner::Host(v)
            }
        };
        Ok(Buffer { inner, _charge: charge })
    }

    /// The GPU's free and total memory, bytes (`cuMemGetInfo`), or the simulator's where it has a
    /// size it reports ([`Device::simulator_with_memory`]); `None` in another simulator, or where
    /// the driver does not say.
    /// The memory pool's idle bytes count as free ([`pool_keeps_bytes`](super::pool_keeps_bytes)).
    pub fn free_memory(&self) -> Option<(usize, usize)> {
        match &self.inner {
            Inner::Gpu(g) => {
                cust::memory::mem_get_info().ok().map(|(free, total)| (free + g.pool.idle_bytes(), total))
            }
            Inner::Simulator => self
                .memory
                .as_ref()
                .filter(|memory| memory.reports_free)
                .map(|memory| memory.free_and_total()),
        }
    }

    /// A buffer of `len` zeros (all bytes 0: `0.0` for floats), set on the device's queue before
    /// any later work on it.
    pub fn zeroed<T: Element>(&self, len: usize) -> Result<Buffer<T>> {
        let mut buffer = self.alloc(len)?;
        self.fill(&mut buffer, T::default())?;
        Ok(buffer)
    }

    /// Sets every element of `buffer` to `value`, on the device's queue before any later work on
    /// it (`cuMemsetD8/D16/D32Async` where the value's bytes allow; an 8-byte value whose halves
    /// differ, like `1.0f64`, is uploaded).
    pub fn fill<T: Element>(&self, buffer: &mut Buffer<T>, value: T) -> Result<()> {
        if let BufferInner::Host(v) = &mut buffer.inner {
            v.fill(value);
            return Ok(());
        }
        let len = buffer.len();
        if len == 0 {
            return Ok(());
        }
        let address = buffer.as_kernel_ptr() as cust::sys::CUdeviceptr;
        let bytes: &[u8] = as_byte_slice(&value);
        let stream = self.queue.stream.as_ref().map_or(std::ptr::null_mut(), |s| s.as_inner());
        let repeated =
            |width: usize| width <= bytes.len() && bytes.chunks(width).all(|c| c == &bytes[..width]);
        let (units, width) = (len * bytes.len(), bytes.len());
        // SAFETY (each memset): `address` and the count describe the buffer's memory; the memset is
        // ordered on the device's queue before any later work there.
        let set = if repeated(1) {
            unsafe { cust::sys::cuMemsetD8Async(address, bytes[0], units, stream) }
        } else if repeated(2) {
            let pattern = u16::from_ne_bytes([bytes[0], bytes[1]]);
            unsafe { cust::sys::cuMemsetD16Async(address, pattern, units / 2, stream) }
        } else if repeated(4) {
            let pattern = u32::from_ne_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]);
            unsafe { cust::sys::cuMemsetD32Async(address, pattern, units / 4, stream) }
        } else {
            debug_assert_eq!(width, 8);
            return self.upload_into(buffer, &vec![value; len]);
        };
        raw("cuMemsetAsync", set)
    }

    /// Queues the zeroing of `view` (all bytes 0: `0.0` for floats) on `queue`, before the work
    /// queued there after it (`cuMemsetD8Async`; in the simulator, done when it returns): a zeroed
    /// output on a caller's queue ([`Device::caller_queue`]) for a kernel that accumulates, where
    /// [`Device::fill`] works only on the device's own queue and on whole buffers.
    pub fn zero_on<T: Element>(&self, queue: &Queue, view: BufferViewMut<'_, T>) -> Result<()> {
        let bytes = view.len * std::mem::size_of::<T>();
        if bytes == 0 {
            return Ok(());
        }
        match (&self.inner, &queue.stream) {
            // SAFETY: the view is valid for writes of `len` elements of this device (its
            // constructors' contracts), and the memset is ordered on `queue` before later work there.
            (Inner::Gpu(_), Some(stream)) => raw("cuMemsetD8Async", unsafe {
                cust::sys::cuMemsetD8Async(view.ptr as u64, 0, bytes, stream.as_inner())
            }),
            (Inner::Simulator, None) => {
                // SAFETY: as above, host memory in the simulator; all-zero bytes are a valid `Element`.
                unsafe { std::ptr::write_bytes(view.ptr, 0, view.len) };
                Ok(())
            }
            _ => Err(mixed_devices()),
        }
    }

    /// `len` uninitialised elements for temporaries of the work on `queue`, allocated and later
    /// freed in the queue's order (`cuMemAllocFromPoolAsync`/`cuMemFreeAsync` from the device's own
    /// memory pool): unlike [`Device::alloc`] neither synchronizes the device, and after the first
    /// use the pool hands the same memory back (it keeps up to
    /// [`pool_keeps_bytes`](super::pool_keeps_bytes) of it), so a launcher can take scratch space
    /// on every call. Use it only on `queue`, and drop it before `queue`.
    pub fn alloc_temporary<T: Element>(&self, queue: &Queue, len: usize) -> Result<Buffer<T>> {
        match (&self.inner, &queue.stream) {
            (Inner::Gpu(g), Some(stream)) => {
                let wanted = len as u128 * std::mem::size_of::<T>() as u128;
                let bytes = usize::try_from(wanted)
                    .map_err(|_| Error::OutOfMemory { bytes: wanted, free: self.free_memory() })?
                    .max(1);
                let mut ptr: cust::sys::CUdeviceptr = 0;
                let allocate = |ptr: &mut cust::sys::CUdeviceptr| {
                    // SAFETY: a valid pool and stream; the pointer is written by the call.
                    self.time_host("cuMemAllocFromPoolAsync", || unsafe {
                        cust::sys::cuMemAllocFromPoolAsync(ptr, bytes, g.pool.handle(), stream.as_inner())
                    })
                };
                let mut result = allocate(&mut ptr);
                if result == cust::sys::cudaError_enum::CUDA_ERROR_OUT_OF_MEMORY
                    && self.release_idle_memory()?
                {
                    result = allocate(&mut ptr);
                }
                if result == cust::sys::cudaError_enum::CUDA_ERROR_OUT_OF_MEMORY {
                    return Err(Error::OutOfMemory { bytes: wanted, free: self.free_memory() });
                }
                raw("cuMemAllocFromPoolAsync", result)?;
                if self.poison.get() {
                    // SAFETY: the allocation just made, on the queue that will use it.
                    raw("cuMemsetD8Async", unsafe {
                        cust::sys::cuMemsetD8Async(ptr, 0xff, bytes, stream.as_inner())
                    })?;
                }
                let inner =
                    Ordered { ptr, len, stream: stream.as_inner(), element: std::marker::PhantomData };
                Ok(Buffer { inner: BufferInner::Ordered(inner), _charge: None })
            }
            (Inner::Simulator, None) => self.alloc(len),
            _ => Err(mixed_devices()),
        }
    }

    /// Gives the memory pool's idle memory back to the GPU, after every queued free has completed
    /// (the whole context waits): before a second try at an allocation that found no room, and for
    /// other libraries or processes that need the memory the pool keeps between calls (as
    /// `torch.cuda.empty_cache()` gives back PyTorch's). Whether there was any to give.
    pub fn release_idle_memory(&self) -> Result<bool> {
        let Inner::Gpu(g) = &self.inner else { return Ok(false) };
        cust::context::CurrentContext::synchronize().map_err(|source| self.kernel_error(source))?;
        if g.pool.idle_bytes() == 0 {
            return Ok(false);
        }
        g.pool.trim()?;
        Ok(true)
    }

    /// A buffer holding a copy of `data`. The copy is queued on the device's queue and has
    /// finished when this returns.
    pub fn upload<T: Element>(&self, data: &[T]) -> Result<Buffer<T>> {
        let mut buffer = self.alloc(data.len())?;
        self.upload_into(&mut buffer, data)?;
        Ok(buffer)
    }

    /// Copies `data` into `buffer` (same length) on the device's queue; finished when this returns.
    /// On a GPU, ordinary memory of at least [`STAGING_CHUNK_BYTES`] goes through the device's own
    /// [`Staging`] (see [`Device::copy_totals`]); page-locked memory is copied directly.
    pub fn upload_into<T: Element>(&self, buffer: &mut Buffer<T>, data: &[T]) -> Result<()> {
        same_len(buffer.len(), data.len())?;
        let t = Instant::now();
        let setup_ms = if self.stages(data) {
            self.with_staging(|staging| staging.upload(self, &self.queue, data, buffer, 0))?
        } else {
            // SAFETY: the copy has finished before `data` can change: the queue is synchronised below.
            unsafe { self.upload_async(&self.queue, data, buffer)? };
            0.0
        };
        self.sync_queue(&self.queue)?;
        self.count_copy(Direction::HostToDevice, t, std::mem::size_of_val(data), setup_ms);
        Ok(())
    }

    /// Queues a copy of `src` into `dst` (same length) on `queue`, device to device (`cuMemcpyAsync`;
    /// in the simulator, done when it returns): results into another library's array.
    pub fn copy_view<T: Element>(
        &self,
        queue: &Queue,
        src: BufferView<'_, T>,
        dst: BufferViewMut<'_, T>,
    ) -> Result<()> {
        same_len(src.len, dst.len)?;
        let bytes = src.len * std::mem::size_of::<T>();
        match (&self.inner, &queue.stream) {
            // SAFETY: both views are valid for `len` elements of this device (their constructors'
            // contracts), and a view of a buffer never overlaps a mutable view of the same buffer.
            (Inner::Gpu(_), Some(stream)) => raw("cuMemcpyAsync", unsafe {
                cust::sys::cuMemcpyAsync(dst.ptr as u64, src.ptr as u64, bytes, stream.as_inner())
            }),
            (Inner::Simulator, None) => {
                // SAFETY: as above, host memory in the simulator.
                unsafe { std::ptr::copy_nonoverlapping(src.ptr, dst.ptr, src.len) };
                Ok(())
            }
            _ => Err(mixed_devices()),
        }
    }

    /// Waits for the work queued so far, then copies `buffer` into `out` (same length); staged as
    /// in [`Device::upload_into`].
    pub fn download_into<T: Element>(&self, buffer: &Buffer<T>, out: &mut [T]) -> Result<()> {
        same_len(buffer.len(), out.len())?;
        if self.stages(out) {
            // The kernels first, so that the copy's time is the copy's.
            self.sync_queue(&self.queue)?;
            let t = Instant::now();
            let setup_ms =
                self.with_staging(|staging| staging.download(self, &self.queue, buffer, 0, out))?;
            self.count_copy(Direction::DeviceToHost, t, std::mem::size_of_val(out), setup_ms);
        } else {
            self.sync_queue(&self.queue)?;
            let t = Instant::now();
            // SAFETY: `out` is not touched until the queue is synchronised below.
            unsafe { self.download_async(&self.queue, buffer, out)? };
            self.sync_queue(&self.queue)?;
            self.count_copy(Direction::DeviceToHost, t, std::mem::size_of_val(out), 0.0);
        }
        Ok(())
    }

    /// Host wall time and bytes of the copies made through [`Device::upload_into`],
    /// [`Device::download_into`] and the functions built on them ([`Device::upload`],
    /// [`Device::download`]), and what making the staging cost.
    pub fn copy_totals(&self) -> CopyTotals {
        self.copies.get()
    }

    /// Whether a synchronous copy of `data` goes through the staging: on a GPU, at least one
    /// staging chunk of ordinary (not page-locked) memory.
    fn stages<T>(&self, data: &[T]) -> bool {
        if !self.is_gpu() || std::mem::size_of_val(data) < STAGING_CHUNK_BYTES {
            return false;
        }
        !is_page_locked(data.as_ptr() as *const std::ffi::c_void)
    }

    /// Runs `copy` with the device's staging, made at its first use.
    /// Returns the milliseconds spent making the staging (0 once made).
    fn with_staging(&self, copy: impl FnOnce(&mut Staging) -> Result<()>) -> Result<f64> {
        let mut slot = self.staging.borrow_mut();
        let mut setup_ms = 0.0;
        let staging = match &mut *slot {
            Some(staging) => staging,
            None => {
                let t = Instant::now();
                let staging = slot.insert(Box::new(self.staging()?));
                setup_ms = t.elapsed().as_secs_f64() * 1e3;
                let mut totals = self.copies.get();
                totals.staging_setup_ms += setup_ms;
                self.copies.set(totals);
                staging
            }
        };
        copy(staging)?;
        Ok(setup_ms)
    }

    /// Counts a copy that started at `start`, less `setup_ms` spent making the staging.
    fn count_copy(&self, direction: Direction, start: Instant, bytes: usize, setup_ms: f64) {
        let ms = start.elapsed().as_secs_f64() * 1e3 - setup_ms;
        let mut totals = self.copies.get();
        match direction {
            Direction::HostToDevice => {
                totals.h2d_ms += ms;
                totals.h2d_bytes += bytes as u64;
            }
            Direction::DeviceToHost => {
                totals.d2h_ms += ms;
                totals.d2h_bytes += bytes as u64;
            }
        }
        self.copies.set(totals);
    }

    /// Waits for the work queued so far, then returns a copy of `buffer`. A large result's fresh
    /// memory is first made resident on all cores (2 MiB pages where Linux grants them), which is
    /// counted in the copy's time.
    pub fn download<T: Element>(&self, buffer: &Buffer<T>) -> Result<Vec<T>> {
        let mut out = vec![T::default(); buffer.len()];
        if self.stages(&out) {
            let t = Instant::now();
            touch_in_parallel(&mut out);
            // Part of the copy's cost: counted with it (no bytes of its own).
            self.count_copy(Direction::DeviceToHost, t, 0, 0.0);
        }
        self.download_into(buffer, &mut out)?;
        Ok(out)
    }

    /// Queues a host-to-device copy of `data` into `buffer` on `queue`. From page-locked memory
    /// ([`HostBuffer`]) the copy runs asynchronously on a copy engine.
    ///
    /// # Safety
    /// `data` must stay alive and unmodified until `queue` has been synchronised.
    pub unsafe fn upload_async<T: Element>(
        &self,
        queue: &Queue,
        data: &[T],
        buffer: &mut Buffer<T>,
    ) -> Result<()> {
        same_len(buffer.len(), data.len())?;
        match (&mut buffer.inner, &queue.stream) {
            (BufferInner::Gpu(_) | BufferInner::Ordered(_), Some(stream)) => {
                let _phase = Phase::new("H2D");
                let start = self.profiler.get().map(|p| p.start(stream)).transpose()?;
                let (address, bytes) = (buffer.as_kernel_ptr() as u64, std::mem::size_of_val(data));
                // SAFETY: forwarded from the caller; lengths checked.
                raw("cuMemcpyHtoDAsync", unsafe {
                    cust::sys::cuMemcpyHtoDAsync_v2(address, data.as_ptr().cast(), bytes, stream.as_inner())
                })?;
                if let (Some(p), Some(start)) = (self.profiler.get(), start) {
                    p.copy(stream, start, Direction::HostToDevice, std::mem::size_of_val(data) as u64)?;
                }
                Ok(())
            }
            (BufferInner::Host(v), None) => {
                v.copy_from_slice(data);
                Ok(())
            }
            _ => Err(mixed_devices()),
        }
    }

    /// Queues a device-to-host copy of `buffer` into `out` on `queue`.
    ///
    /// # Safety
    /// `out` must stay alive and must not be read or written until `queue` has been synchronised.
    pub unsafe fn download_async<T: Element>(
        &self,
        queue: &Queue,
        buffer: &Buffer<T>,
        out: &mut [T],
    ) -> Result<()> {
        same_len(buffer.len(), out.len())?;
        match (&buffer.inner, &queue.stream) {
            (BufferInner::Gpu(_) | BufferInner::Ordered(_), Some(stream)) => {
                let _phase = Phase::new("D2H");
                let start = self.profiler.get().map(|p| p.start(stream)).transpose()?;
                let (address, bytes) = (buffer.as_kernel_ptr() as u64, std::mem::size_of_val(out));
                // SAFETY: forwarded from the caller; lengths checked.
                raw("cuMemcpyDtoHAsync", unsafe {
                    cust::sys::cuMemcpyDtoHAsync_v2(
                        out.as_mut_ptr().cast(),
                        address,
                        bytes,
                        stream.as_inner(),
                    )
                })?;
                if let (Some(p), Some(start)) = (self.profiler.get(), start) {
                    p.copy(stream, start, Direction::DeviceToHost, std::mem::size_of_val(out) as u64)?;
                }
                Ok(())
            }
            (BufferInner::Host(v), None) => {
                out.copy_from_slice(v);
                Ok(())
            }
            _ => Err(mixed_devices()),
        }
    }

    /// A page-locked ("pinned") host buffer of `len` elements: copies from and to it run
    /// asynchronously and at full PCIe bandwidth. In the simulator, ordinary memory.
    pub fn pinned<T: Element>(&self, len: usize) -> Result<HostBuffer<T>> {
        let inner = if self.is_gpu() {
            let t = Instant::now();
            let buffer = LockedBuffer::new(&T::default(), len).map_err(cuda("cuMemAllocHost"))?;
            if let Some(p) = self.profiler.get() {
                p.host_cost("cuMemAllocHost (pinned)", t.elapsed().as_secs_f64() * 1e3);
            }
            HostInner::Pinned(buffer)
        } else {
            HostInner::Pageable(vec![T::default(); len])
        };
        Ok(HostBuffer { inner })
    }
}

/// A host array for asynchronous copies: page-locked on a GPU device (see [`Device::pinned`]).
pub struct HostBuffer<T: Element> {
    inner: HostInner<T>,
}

enum HostInner<T: Element> {
    Pinned(LockedBuffer<T>),
    Pageable(Vec<T>),
}

impl<T: Element> std::ops::Deref for HostBuffer<T> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        match &self.inner {
            HostInner::Pinned(b) => b.as_slice(),
            HostInner::Pageable(v) => v,
        }
    }
}

impl<T: Element> std::ops::DerefMut for HostBuffer<T> {
    fn deref_mut(&mut self) -> &mut [T] {
        match &mut self.inner {
            HostInner::Pinned(b) => b.as_mut_slice(),
            HostInner::Pageable(v) => v,
        }
    }
}

/// An array in device memory (or in host memory for the simulator), owned by the [`Device`] that
/// made it. Kernels take a buffer, or a view of a range of it, as a slice argument.
///
/// ```
/// use gpu_launch::Device;
/// # fn main() -> gpu_launch::Result<()> {
/// let device = Device::simulator();
/// let mut buffer = device.zeroed::<f64>(4)?;
/// device.upload_into(&mut buffer, &[1.0, 2.0, 3.0, 4.0])?;
/// // Elements 1 and 2, as a kernel argument or for a copy; a range past the end is an error.
/// assert_eq!(buffer.view(1..3)?.len(), 2);
/// assert!(buffer.view(2..5).is_err());
/// assert_eq!(device.download(&buffer)?, vec![1.0, 2.0, 3.0, 4.0]);
/// # Ok(()) }
/// ```
pub struct Buffer<T: Element> {
    pub(super) inner: BufferInner<T>,
    /// Its bytes of the simulator's sized memory, held for the drop that gives them back.
    _charge: Option<Charge>,
}

/// The memory of a simulator with a size ([`Device::simulator_with_memory`]): its buffers'
/// bytes are counted against it.
pub(super) struct SimulatedMemory {
    total: usize,
    used: AtomicUsize,
    /// Whether [`Device::free_memory`] says what is left.
    reports_free: bool,
}

impl SimulatedMemory {
    pub(super) fn new(total: usize, reports_free: bool) -> Arc<SimulatedMemory> {
        Arc::new(SimulatedMemory { total, used: AtomicUsize::new(0), reports_free })
    }

    /// `bytes` more in use, or `None` where they are not left.
    fn charge(self: &Arc<Self>, bytes: usize) -> Option<Charge> {
        self.used
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |used| {
                used.checked_add(bytes).filter(|&after| after <= self.total)
            })
            .ok()?;
        Some(Charge { memory: Arc::clone(self), bytes })
    }

    /// Free and total bytes, as `cuMemGetInfo` says them.
    fn free_and_total(&self) -> (usize, usize) {
        (self.total - self.used.load(Ordering::SeqCst), self.total)
    }
}

/// A buffer's bytes of a [`SimulatedMemory`].
struct Charge {
    memory: Arc<SimulatedMemory>,
    bytes: usize,
}

impl Drop for Charge {
    fn drop(&mut self) {
        self.memory.used.fetch_sub(self.bytes, Ordering::SeqCst);
    }
}

pub(super) enum BufferInner<T: Element> {
    Gpu(DeviceBuffer<T>),
    Ordered(Ordered<T>),
    Host(Vec<T>),
}

/// Memory from [`Device::alloc_temporary`], given back to the pool in its queue's order when
/// dropped.
pub(super) struct Ordered<T> {
    ptr: cust::sys::CUdeviceptr,
    len: usize,
    stream: cust::sys::CUstream,
    element: std::marker::PhantomData<T>,
}

impl<T> Drop for Ordered<T> {
    fn drop(&mut self) {
        // SAFETY: the allocation of `cuMemAllocFromPoolAsync` on this stream, freed once.
        let result = unsafe { cust::sys::cuMemFreeAsync(self.ptr, self.stream) };
        if result != cust::sys::cudaError_enum::CUDA_SUCCESS {
            // Drop cannot return the error; the memory stays allocated until the context goes.
            eprintln!("warning: cuMemFreeAsync failed ({result:?}): a temporary buffer leaked");
        }
    }
}

impl<T: Element> Buffer<T> {
    /// Number of elements.
    pub fn len(&self) -> usize {
        match &self.inner {
            BufferInner::Gpu(b) => b.len(),
            BufferInner::Ordered(b) => b.len,
            BufferInner::Host(v) => v.len(),
        }
    }

    /// Whether the buffer has no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Elements `range` as a read-only kernel argument (`&[T]` in the kernel): one image of a
    /// batch, or a matrix that starts inside a larger one. A range past the end is an error.
    pub fn view(&self, range: impl RangeBounds<usize>) -> Result<BufferView<'_, T>> {
        let range = view_range(range, self.len())?;
        Ok(BufferView {
            ptr: self.as_kernel_ptr().wrapping_add(range.start),
            len: range.len(),
            buffer: PhantomData,
        })
    }

    /// Elements `range` as a writable kernel argument (`&mut [T]` in the kernel).
    pub fn view_mut(&mut self, range: impl RangeBounds<usize>) -> Result<BufferViewMut<'_, T>> {
        let range = view_range(range, self.len())?;
        Ok(BufferViewMut {
            ptr: self.as_kernel_mut_ptr().wrapping_add(range.start),
            len: range.len(),
            buffer: PhantomData,
        })
    }

    /// The address a kernel reads through: a device address on a GPU, a host address in the
    /// simulator. Kernels over slices take the buffer itself (or a [`Buffer::view`]); this is
    /// for a kernel with raw-pointer arguments.
    pub fn as_kernel_ptr(&self) -> *const T {
        match &self.inner {
            BufferInner::Gpu(b) => b.as_device_ptr().as_raw() as *const T,
            BufferInner::Ordered(b) => b.ptr as *const T,
            BufferInner::Host(v) => v.as_ptr(),
        }
    }

    /// The address a kernel writes through.
    pub fn as_kernel_mut_ptr(&mut self) -> *mut T {
        match &mut self.inner {
            BufferInner::Gpu(b) => b.as_device_ptr().as_raw() as *mut T,
            BufferInner::Ordered(b) => b.ptr as *mut T,
            BufferInner::Host(v) => v.as_mut_ptr(),
        }
    }
}

impl<'a, T: Element> From<&'a Buffer<T>> for BufferView<'a, T> {
    /// The whole buffer as a view.
    fn from(buffer: &'a Buffer<T>) -> Self {
        BufferView { ptr: buffer.as_kernel_ptr(), len: buffer.len(), buffer: PhantomData }
    }
}

impl<'a, T: Element> From<&'a mut Buffer<T>> for BufferViewMut<'a, T> {
    /// The whole buffer as a writable view.
    fn from(buffer: &'a mut Buffer<T>) -> Self {
        BufferViewMut { ptr: buffer.as_kernel_mut_ptr(), len: buffer.len(), buffer: PhantomData }
    }
}

/// `range` of a buffer of `len` elements as a half-open range, or why it is not one.
fn view_range(range: impl RangeBounds<usize>, len: usize) -> Result<std::ops::Range<usize>> {
    let start = match range.start_bound() {
        Bound::Included(&s) => s,
        Bound::Excluded(&s) => s.saturating_add(1),
        Bound::Unbounded => 0,
    };
    let end = match range.end_bound() {
        Bound::Included(&e) => e.saturating_add(1),
        Bound::Excluded(&e) => e,
        Bound::Unbounded => len,
    };
    if start > end || end > len {
        return Err(Error::InvalidInput(format!(
            "a view of elements {start}..{end} of a buffer of {len} elements"
        )));
    }
    Ok(start..end)
}

/// Part of a [`Buffer`] passed where a kernel takes `&[T]`, borrowing the buffer as `&buffer`
/// does: from [`Buffer::view`].
pub struct BufferView<'a, T: Element> {
    pub(super) ptr: *const T,
    pub(super) len: usize,
    buffer: PhantomData<&'a Buffer<T>>,
}

impl<T: Element> Clone for BufferView<'_, T> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<T: Element> Copy for BufferView<'_, T> {}

/// Part of a [`Buffer`] passed where a kernel takes `&mut [T]`, borrowing the buffer as
/// `&mut buffer` does: from [`Buffer::view_mut`].
pub struct BufferViewMut<'a, T: Element> {
    pub(super) ptr: *mut T,
    pub(super) len: usize,
    buffer: PhantomData<&'a mut Buffer<T>>,
}

impl<'a, T: Element> BufferView<'a, T> {
    /// A view of `len` elements at `ptr` in memory no [`Buffer`] owns: an array of another library
    /// (PyTorch, CuPy, Numba), handed over through DLPack or `__cuda_array_interface__`.
    ///
    /// # Safety
    /// `ptr` is aligned for `T` and valid for reads of `len` elements for `'a`, in the memory the
    /// kernels of the device it is launched on read (device memory of that GPU's primary context,
    /// host memory for the simulator), and nothing writes those elements while a kernel reads them.
    pub unsafe fn from_raw_parts(ptr: *const T, len: usize) -> Self {
        BufferView { ptr, len, buffer: PhantomData }
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the view has no elements.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Elements `range` of this view.
    pub fn view(&self, range: impl RangeBounds<usize>) -> Result<BufferView<'a, T>> {
        let range = view_range(range, self.len)?;
        Ok(BufferView { ptr: self.ptr.wrapping_add(range.start), len: range.len(), buffer: PhantomData })
    }
}

impl<'a, T: Element> BufferViewMut<'a, T> {
    /// A writable view of `len` elements at `ptr` in memory no [`Buffer`] owns (see
    /// [`BufferView::from_raw_parts`]).
    ///
    /// # Safety
    /// As for [`BufferView::from_raw_parts`], for writes too; nothing else reads or writes those
    /// elements while a kernel writes them.
    pub unsafe fn from_raw_parts(ptr: *mut T, len: usize) -> Self {
        BufferViewMut { ptr, len, buffer: PhantomData }
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the view has no elements.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Elements `range` of this view, read-only (for a kernel that only reads them).
    pub fn view(&self, range: impl RangeBounds<usize>) -> Result<BufferView<'_, T>> {
        let range = view_range(range, self.len)?;
        Ok(BufferView { ptr: self.ptr.wrapping_add(range.start), len: range.len(), buffer: PhantomData })
    }

    /// Elements `range` of this view, writable, for as long as this view is borrowed.
    pub fn view_mut(&mut self, range: impl RangeBounds<usize>) -> Result<BufferViewMut<'_, T>> {
        let range = view_range(range, self.len)?;
        Ok(BufferViewMut { ptr: self.ptr.wrapping_add(range.start), len: range.len(), buffer: PhantomData })
    }

    /// Elements `range` of this view, still writable.
    pub fn into_view_mut(self, range: impl RangeBounds<usize>) -> Result<BufferViewMut<'a, T>> {
        let range = view_range(range, self.len)?;
        Ok(BufferViewMut { ptr: self.ptr.wrapping_add(range.start), len: range.len(), buffer: PhantomData })
    }

    /// A read-only view of the same elements that lives as long as the buffer's borrow, for a
    /// launch that reads some elements of a buffer while writing others that no split separates
    /// (interleaved column blocks of one matrix).
    ///
    /// # Safety
    /// No launch may read an element through the returned view (or one made from it) while
    /// another view writes it, nor write one it reads.
    pub unsafe fn aliased_view(&self) -> BufferView<'a, T> {
        BufferView { ptr: self.ptr, len: self.len, buffer: PhantomData }
    }
}

/// Host wall time and bytes of a device's synchronous copies ([`Device::copy_totals`]).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct CopyTotals {
    /// Host-to-device milliseconds (from the call to the copy's end, host-side staging included).
    pub h2d_ms: f64,
    /// Host-to-device bytes.
    pub h2d_bytes: u64,
    /// Device-to-host milliseconds (after the queued kernels have finished).
    pub d2h_ms: f64,
    /// Device-to-host bytes.
    pub d2h_bytes: u64,
    /// Page-locking the device's staging chunks, once, at the first staged copy.
    pub staging_setup_ms: f64,
}

impl CopyTotals {
    /// All copy time, staging set-up included.
    pub fn total_ms(&self) -> f64 {
        self.h2d_ms + self.d2h_ms + self.staging_setup_ms
    }
}

/// Makes `data`'s fresh (not yet touched) memory resident on all cores: asks Linux for 2 MiB
/// pages (`madvise(MADV_HUGEPAGE)`, advice only: nothing changes where transparent huge pages are
/// off), then writes its default value at every 4 KiB, each thread in its own 2 MiB blocks. The
/// first touch zeroes the page in the kernel; left to the staged copy, whose threads share each
/// 4 MiB chunk and so meet in the same huge pages, that zeroing ran nearly serially (a fresh
/// 64 MiB result cost 6–7.5 ms to download against 2.6 ms into touched memory on the H100's host).
fn touch_in_parallel<T: Element>(data: &mut [T]) {
    const HUGE_PAGE: usize = 2 << 20;
    const PAGE: usize = 4 << 10;
    let begin = data.as_mut_ptr() as usize;
    let (start, end) =
        (begin.next_multiple_of(HUGE_PAGE), (begin + std::mem::size_of_val(data)) & !(HUGE_PAGE - 1));
    if end > start {
        // SAFETY: the range lies inside `data`'s allocation; MADV_HUGEPAGE changes no contents.
        unsafe { libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_HUGEPAGE) };
    }
    let size = std::mem::size_of::<T>().max(1);
    data.par_chunks_mut(HUGE_PAGE / size).for_each(|block| {
        for value in block.iter_mut().step_by((PAGE / size).max(1)) {
            // SAFETY: a valid, aligned element of `block`; volatile so the store is not elided
            // (the memory already holds that value).
            unsafe { std::ptr::write_volatile(value, T::default()) };
        }
    });
}

/// Whether `ptr` lies in page-locked host memory the driver knows (from [`Device::pinned`] or
/// registered). `cuPointerGetAttributes`, unlike `cuPointerGetAttribute` and `cuMemHostGetFlags`,
/// answers "unknown memory" (type 0) for ordinary memory instead of failing, so error checkers
/// such as compute-sanitizer see no failed call.
fn is_page_locked(ptr: *const std::ffi::c_void) -> bool {
    let mut memory_type = 0u32;
    let mut attribute = cust::sys::CUpointer_attribute::CU_POINTER_ATTRIBUTE_MEMORY_TYPE;
    let mut data = [&mut memory_type as *mut u32 as *mut std::ffi::c_void];
    // SAFETY: one attribute, whose value (a CUmemorytype, 32 bits) is written to `memory_type`.
    let status =
        unsafe { cust::sys::cuPointerGetAttributes(1, &mut attribute, data.as_mut_ptr(), ptr as u64) };
    status == cust::sys::cudaError_enum::CUDA_SUCCESS
        && memory_type == cust::sys::CUmemorytype_enum::CU_MEMORYTYPE_HOST as u32
}

/// The bytes of one element.
fn as_byte_slice<T: Element>(value: &T) -> &[u8] {
    // SAFETY: an `Element` is a plain number: all its bytes are initialised.
    unsafe { std::slice::from_raw_parts((value as *const T).cast::<u8>(), std::mem::size_of::<T>()) }
}
