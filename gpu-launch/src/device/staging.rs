//! Page-locked staging: copies of ordinary host memory through two pinned chunks, filled and drained
//! by a crew of host threads while the copy engine moves the other chunk.

use super::memory::BufferInner;
use super::{Buffer, Device, Element, HostBuffer, Phase, Queue, mixed_devices};
use crate::error::{Error, Result, cuda, raw};
use crate::profile::Direction;
use cust::event::{Event, EventFlags};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

/// Bytes of each of the two pinned chunks of a [`Staging`].
pub const STAGING_CHUNK_BYTES: usize = 4 << 20;

/// Page-locked staging for copies between ordinary (pageable) host memory and the device: two
/// pinned chunks used in turn, so that the copy engine moves one chunk while the host copies the
/// other. Made once ([`Device::staging`]; page-locking costs milliseconds per hundred megabytes)
/// and reused for every copy, it gives pinned bandwidth for data of any size without pinning the
/// data itself. In the simulator the copies are direct.
pub struct Staging {
    chunks: Vec<HostBuffer<u8>>,
    done: Vec<Event>,
}

impl Device {
    /// A [`Staging`] of two [`STAGING_CHUNK_BYTES`] chunks for this device.
    pub fn staging(&self) -> Result<Staging> {
        if !self.is_gpu() {
            return Ok(Staging { chunks: Vec::new(), done: Vec::new() });
        }
        let event = || Event::new(EventFlags::DISABLE_TIMING).map_err(cuda("cuEventCreate"));
        Ok(Staging {
            chunks: vec![self.pinned(STAGING_CHUNK_BYTES)?, self.pinned(STAGING_CHUNK_BYTES)?],
            done: vec![event()?, event()?],
        })
    }
}

impl Staging {
    /// Copies `data` into `buffer[offset..offset + data.len()]` on `queue`. `data` may change as
    /// soon as this returns (the copies read the staging chunks, which the next use waits for).
    pub fn upload<T: Element>(
        &mut self,
        device: &Device,
        queue: &Queue,
        data: &[T],
        buffer: &mut Buffer<T>,
        offset: usize,
    ) -> Result<()> {
        self.upload_parts(device, queue, &[data], buffer, offset)
    }

    /// Copies `parts`, one after the other, into `buffer` from `offset` on `queue`, as one transfer:
    /// a batch's images in full chunks with one crew of copying threads, where a transfer per image
    /// would pay a crew and a half-empty chunk each. The parts may change as soon as this returns.
    pub fn upload_parts<T: Element>(
        &mut self,
        device: &Device,
        queue: &Queue,
        parts: &[&[T]],
        buffer: &mut Buffer<T>,
        offset: usize,
    ) -> Result<()> {
        in_range(offset, parts.iter().map(|p| p.len()).sum(), buffer.len())?;
        let stream = match (&mut buffer.inner, &queue.stream) {
            (BufferInner::Host(v), None) => {
                let mut at = offset;
                for part in parts {
                    v[at..at + part.len()].copy_from_slice(part);
                    at += part.len();
                }
                return Ok(());
            }
            (BufferInner::Gpu(_) | BufferInner::Ordered(_), Some(stream)) => {
                (stream, device_address(buffer, offset))
            }
            _ => return Err(mixed_devices()),
        };
        let (stream, base) = stream;
        let bytes = Concatenation::of(parts);
        let _phase = Phase::new("H2D (staged)");
        let chunks = bytes.len.div_ceil(STAGING_CHUNK_BYTES);
        let slots = [self.chunks[0].as_mut_ptr() as usize, self.chunks[1].as_mut_ptr() as usize];
        let share = |c: usize, range: std::ops::Range<usize>| {
            let at = c * STAGING_CHUNK_BYTES;
            // SAFETY: shares of a chunk are disjoint ranges inside it, written by one thread each
            // while the copy engine does not read that slot (the driver below orders both).
            let slot = unsafe {
                std::slice::from_raw_parts_mut((slots[c % 2] + range.start) as *mut u8, range.len())
            };
            bytes.copy_to(slot, at + range.start);
        };
        let chunk_len = |c: usize| STAGING_CHUNK_BYTES.min(bytes.len - c * STAGING_CHUNK_BYTES);
        Crew::run(chunks, bytes.len, &chunk_len, &share, |crew| {
            crew.upload(
                |slot| self.done[slot].synchronize().map_err(|source| device.kernel_error(source)),
                |c| {
                    let slot = c % 2;
                    let start = device.profiler.get().map(|p| p.start(stream)).transpose()?;
                    // SAFETY: the slot is pinned, owned by `self` and not written again before
                    // `done[slot]` has passed; the destination range lies inside `buffer` (checked
                    // above).
                    raw("cuMemcpyHtoDAsync", unsafe {
                        cust::sys::cuMemcpyHtoDAsync_v2(
                            base + (c * STAGING_CHUNK_BYTES) as u64,
                            slots[slot] as *const std::ffi::c_void,
                            chunk_len(c),
                            stream.as_inner(),
                        )
                    })?;
                    self.done[slot].record(stream).map_err(cuda("cuEventRecord"))?;
                    if let (Some(p), Some(start)) = (device.profiler.get(), start) {
                        p.copy(stream, start, Direction::HostToDevice, chunk_len(c) as u64)?;
                    }
                    Ok(())
                },
            )
        })
    }

    /// Waits for the work queued on `queue` so far, then copies `buffer[offset..offset + out.len()]`
    /// into `out`.
    pub fn download<T: Element>(
        &mut self,
        device: &Device,
        queue: &Queue,
        buffer: &Buffer<T>,
        offset: usize,
        out: &mut [T],
    ) -> Result<()> {
        self.download_parts(device, queue, buffer, offset, &mut [out])
    }

    /// Waits for the work queued on `queue` so far, then copies `buffer` from `offset` into `parts`,
    /// one after the other, as one transfer: a batch's images straight into their own arrays, where
    /// a transfer per image would pay a crew and a wait each, and one array split afterwards a
    /// second copy.
    pub fn download_parts<T: Element>(
        &mut self,
        device: &Device,
        queue: &Queue,
        buffer: &Buffer<T>,
        offset: usize,
        parts: &mut [&mut [T]],
    ) -> Result<()> {
        in_range(offset, parts.iter().map(|p| p.len()).sum(), buffer.len())?;
        let stream = match (&buffer.inner, &queue.stream) {
            (BufferInner::Host(v), None) => {
                let mut at = offset;
                for part in parts.iter_mut() {
                    part.copy_from_slice(&v[at..at + part.len()]);
                    at += part.len();
                }
                return Ok(());
            }
            (BufferInner::Gpu(_) | BufferInner::Ordered(_), Some(stream)) => {
                (stream, device_address(buffer, offset))
            }
            _ => return Err(mixed_devices()),
        };
        let (stream, base) = stream;
        let out = Scatter::of(parts);
        let _phase = Phase::new("D2H (staged)");
        let total = out.len;
        let chunks = total.div_ceil(STAGING_CHUNK_BYTES);
        let slots = [self.chunks[0].as_mut_ptr() as usize, self.chunks[1].as_mut_ptr() as usize];
        let share = |c: usize, range: std::ops::Range<usize>| {
            // SAFETY: the slot holds chunk `c`, complete (the driver releases a chunk after its
            // copy's event has passed), and is not refilled before every share of it is copied.
            let src =
                unsafe { std::slice::from_raw_parts((slots[c % 2] + range.start) as *const u8, range.len()) };
            // SAFETY: shares are disjoint byte ranges of the parts, written by one thread each while
            // the parts are borrowed by this call.
            unsafe { out.copy_from(src, c * STAGING_CHUNK_BYTES + range.start) };
        };
        let chunk_len = |c: usize| STAGING_CHUNK_BYTES.min(total - c * STAGING_CHUNK_BYTES);
        Crew::run(chunks, total, &chunk_len, &share, |crew| {
            crew.download(
                |c| {
                    let slot = c % 2;
                    let start = device.profiler.get().map(|p| p.start(stream)).transpose()?;
                    // SAFETY: the slot is pinned and owned by `self`; the host reads it only after
                    // `done[slot]` has passed; the source range lies inside `buffer` (checked above).
                    raw("cuMemcpyDtoHAsync", unsafe {
                        cust::sys::cuMemcpyDtoHAsync_v2(
                            slots[slot] as *mut std::ffi::c_void,
                            base + (c * STAGING_CHUNK_BYTES) as u64,
                            chunk_len(c),
                            stream.as_inner(),
                        )
                    })?;
                    self.done[slot].record(stream).map_err(cuda("cuEventRecord"))?;
                    if let (Some(p), Some(start)) = (device.profiler.get(), start) {
                        p.copy(stream, start, Direction::DeviceToHost, chunk_len(c) as u64)?;
                    }
                    Ok(())
                },
                |slot| self.done[slot].synchronize().map_err(|source| device.kernel_error(source)),
            )
        })
    }
}

/// Byte slices read as one: the source of [`Staging::upload_parts`].
struct Concatenation<'a> {
    parts: Vec<&'a [u8]>,
    /// Where each part starts.
    starts: Vec<usize>,
    /// Bytes in all.
    len: usize,
}

impl<'a> Concatenation<'a> {
    fn of<T: Element>(parts: &[&'a [T]]) -> Self {
        let parts: Vec<&[u8]> = parts.iter().map(|p| as_bytes(p)).collect();
        let (starts, len) = starts_of(parts.iter().map(|p| p.len()));
        Concatenation { parts, starts, len }
    }

    /// Copies the bytes `from..from + out.len()` (inside `0..len`) into `out`.
    fn copy_to(&self, out: &mut [u8], from: usize) {
        for (part, inside, done, n) in pieces(&self.starts, |i| self.parts[i].len(), from, out.len()) {
            out[done..done + n].copy_from_slice(&self.parts[part][inside..inside + n]);
        }
    }
}

/// Where each of parts of `lens` bytes starts when they are laid end to end, and the bytes in all.
fn starts_of(lens: impl Iterator<Item = usize>) -> (Vec<usize>, usize) {
    let mut len = 0;
    let starts = lens
        .map(|l| {
            len += l;
            len - l
        })
        .collect();
    (starts, len)
}

/// The bytes `at..at + count` of parts laid end to end (part `i` from `starts[i]`, `len(i)` bytes
/// long), piece by piece: `(part, offset in the part, offset in the range, bytes)`.
fn pieces(
    starts: &[usize],
    len: impl Fn(usize) -> usize,
    at: usize,
    count: usize,
) -> impl Iterator<Item = (usize, usize, usize, usize)> {
    let mut part = starts.partition_point(|&start| start <= at).saturating_sub(1);
    let mut done = 0;
    std::iter::from_fn(move || {
        (done < count).then(|| {
            let inside = at + done - starts[part];
            let n = (len(part) - inside).min(count - done);
            let piece = (part, inside, done, n);
            done += n;
            part += 1;
            piece
        })
    })
}

/// Mutable byte slices written as one: the destination of [`Staging::download_parts`]. Held as
/// addresses, so that the crew's threads can each write their own disjoint ranges.
struct Scatter {
    /// Each part's address and length in bytes.
    parts: Vec<(usize, usize)>,
    /// Where each part starts.
    starts: Vec<usize>,
    /// Bytes in all.
    len: usize,
}

impl Scatter {
    fn of<T: Element>(parts: &mut [&mut [T]]) -> Self {
        let parts: Vec<(usize, usize)> = parts
            .iter_mut()
            .map(|part| {
                let bytes = as_bytes_mut(part);
                (bytes.as_mut_ptr() as usize, bytes.len())
            })
            .collect();
        let (starts, len) = starts_of(parts.iter().map(|&(_, len)| len));
        Scatter { parts, starts, len }
    }

    /// Copies `src` into the bytes `to..to + src.len()` (inside `0..len`).
    ///
    /// # Safety
    /// The parts are still borrowed (alive, and written by nobody else), and no other thread
    /// writes these bytes meanwhile.
    unsafe fn copy_from(&self, src: &[u8], to: usize) {
        for (part, inside, done, n) in pieces(&self.starts, |i| self.parts[i].1, to, src.len()) {
            // SAFETY: `inside + n` lies inside the part (its length bounds `n`); the caller
            // guarantees the part is alive and these bytes are this thread's.
            unsafe { std::slice::from_raw_parts_mut((self.parts[part].0 + inside) as *mut u8, n) }
                .copy_from_slice(&src[done..done + n]);
        }
    }
}

/// The host side of a staged copy, shared by several threads. The calling thread drives the device
/// side (waits for events, queues the copies between the pinned slots and the device) and copies one
/// share of each chunk; scoped helper threads copy the other shares. One core moves about 10 GB/s
/// between ordinary and page-locked memory, a fifth of the copy engine's 55 GB/s; a thread pool woken
/// for every chunk pays its wake-up (tens of microseconds) each time, so the helpers stay awake,
/// spinning, for the whole transfer, and a chunk is released to them the moment its slot is free.
struct Crew<'a> {
    parts: usize,
    chunk_len: &'a (dyn Fn(usize) -> usize + Sync),
    share: &'a (dyn Fn(usize, std::ops::Range<usize>) + Sync),
    /// Chunks `0..released` may be copied.
    released: AtomicUsize,
    /// Shares copied, per chunk.
    copied: Vec<AtomicUsize>,
    /// Set when the driver fails: the helpers stop.
    abort: AtomicBool,
}

/// Bytes per thread below which a staged copy uses fewer threads.
const BYTES_PER_COPY_THREAD: usize = 1 << 20;
/// Most threads copying a staged transfer.
const MAX_COPY_THREADS: usize = 8;

impl<'a> Crew<'a> {
    /// Runs `drive` with a crew for `chunks` chunks of `total` bytes; `share(c, range)` copies the
    /// byte `range` of chunk `c` (of `chunk_len(c)` bytes).
    fn run(
        chunks: usize,
        total: usize,
        chunk_len: &'a (dyn Fn(usize) -> usize + Sync),
        share: &'a (dyn Fn(usize, std::ops::Range<usize>) + Sync),
        drive: impl FnOnce(&Crew<'a>) -> Result<()>,
    ) -> Result<()> {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let parts = cores.min(MAX_COPY_THREADS).min(total.div_ceil(BYTES_PER_COPY_THREAD)).max(1);
        let crew = Crew {
            parts,
            chunk_len,
            share,
            released: AtomicUsize::new(0),
            copied: (0..chunks).map(|_| AtomicUsize::new(0)).collect(),
            abort: AtomicBool::new(false),
        };
        std::thread::scope(|scope| {
            for part in 1..parts {
                let crew = &crew;
                scope.spawn(move || {
                    for c in 0..chunks {
                        if !spin_until(|| crew.released.load(Ordering::Acquire) > c, &crew.abort) {
                            return;
                        }
                        crew.copy_share(c, part);
                    }
                });
            }
            let result = drive(&crew);
            if result.is_err() {
                crew.abort.store(true, Ordering::Release);
            }
            result
        })
    }

    /// The byte range of share `part` of chunk `c` (64-byte aligned boundaries).
    fn copy_share(&self, c: usize, part: usize) {
        let len = (self.chunk_len)(c);
        let per = len.div_ceil(self.parts).next_multiple_of(64);
        let start = (part * per).min(len);
        let end = (start + per).min(len);
        if start < end {
            (self.share)(c, start..end);
        }
        self.copied[c].fetch_add(1, Ordering::AcqRel);
    }

    /// The upload order: for each chunk, `wait_slot(slot)` until the device has read the slot's
    /// previous chunk, fill the slot on every thread, then `send(c)` it from slot `c % 2`.
    fn upload(
        &self,
        mut wait_slot: impl FnMut(usize) -> Result<()>,
        mut send: impl FnMut(usize) -> Result<()>,
    ) -> Result<()> {
        for c in 0..self.copied.len() {
            wait_slot(c % 2)?;
            self.release(c);
            self.copy_own_share(c);
            self.wait_copied(c);
            send(c)?;
        }
        Ok(())
    }

    /// The download order: `fetch(c)` queues chunk `c` into slot `c % 2` once the host has moved
    /// the slot's previous chunk out; meanwhile every thread moves the chunk before it out, after
    /// `wait_slot(slot)` says it has arrived.
    fn download(
        &self,
        mut fetch: impl FnMut(usize) -> Result<()>,
        mut wait_slot: impl FnMut(usize) -> Result<()>,
    ) -> Result<()> {
        let chunks = self.copied.len();
        for c in 0..=chunks {
            if c < chunks {
                if c >= 2 {
                    self.wait_copied(c - 2);
                }
                fetch(c)?;
            }
            if c >= 1 {
                wait_slot((c - 1) % 2)?;
                self.release(c - 1);
                self.copy_own_share(c - 1);
            }
        }
        if chunks > 0 {
            // Each thread copies its shares in chunk order: the last chunk done means all are.
            self.wait_copied(chunks - 1);
        }
        Ok(())
    }

    /// Lets the helpers copy chunk `c` (and every earlier one).
    fn release(&self, c: usize) {
        self.released.store(c + 1, Ordering::Release);
    }

    /// The driver's own share of chunk `c`.
    fn copy_own_share(&self, c: usize) {
        self.copy_share(c, 0);
    }

    /// Waits until every share of chunk `c` has been copied.
    fn wait_copied(&self, c: usize) {
        let never = AtomicBool::new(false);
        spin_until(|| self.copied[c].load(Ordering::Acquire) == self.parts, &never);
    }
}

/// Spins (yielding now and then) until `ready()`; `false` if `abort` was set first.
fn spin_until(ready: impl Fn() -> bool, abort: &AtomicBool) -> bool {
    let mut spins = 0u32;
    while !ready() {
        if abort.load(Ordering::Acquire) {
            return false;
        }
        spins += 1;
        if spins.is_multiple_of(256) {
            std::thread::yield_now();
        } else {
            std::hint::spin_loop();
        }
    }
    true
}

impl Drop for Staging {
    fn drop(&mut self) {
        // Copies may still read or write the chunks: wait for them before the memory goes.
        for event in &self.done {
            let _ = event.synchronize();
        }
    }
}

fn in_range(offset: usize, len: usize, capacity: usize) -> Result<()> {
    if offset.checked_add(len).is_some_and(|end| end <= capacity) {
        Ok(())
    } else {
        Err(Error::InvalidInput(format!("copy of {len} elements at {offset} into a buffer of {capacity}")))
    }
}

/// The device address of element `offset` of a GPU allocation.
fn device_address<T: Element>(buffer: &Buffer<T>, offset: usize) -> u64 {
    buffer.as_kernel_ptr() as u64 + (offset * std::mem::size_of::<T>()) as u64
}

fn as_bytes<T: Element>(data: &[T]) -> &[u8] {
    // SAFETY: an `Element` is plain data without padding; any initialised value is valid bytes.
    unsafe { std::slice::from_raw_parts(data.as_ptr() as *const u8, std::mem::size_of_val(data)) }
}

fn as_bytes_mut<T: Element>(data: &mut [T]) -> &mut [u8] {
    // SAFETY: as for `as_bytes`; every bit pattern is a valid `Element`, so any bytes written are.
    unsafe { std::slice::from_raw_parts_mut(data.as_mut_ptr() as *mut u8, std::mem::size_of_val(data)) }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The crew's two orders with a host stand-in for the copy engine (synchronous copies between
    /// the slots and a "device" vector): every byte arrives, for transfers from one byte to several
    /// odd-sized chunks, with as many threads as the transfer and the machine allow.
    #[test]
    fn crew_moves_every_byte_both_ways() {
        const CHUNK: usize = 1_500_007;
        for total in [1usize, 1000, CHUNK, 3 * CHUNK + 12_345, 9 << 20] {
            let data: Vec<u8> = (0..total).map(|i| (i * 131 % 251) as u8).collect();
            let chunks = total.div_ceil(CHUNK);
            let chunk_len = |c: usize| CHUNK.min(total - c * CHUNK);
            let mut slots = [vec![0u8; CHUNK], vec![0u8; CHUNK]];
            let slot_at = [slots[0].as_mut_ptr() as usize, slots[1].as_mut_ptr() as usize];

            // Up: data → slots (crew) → device (driver).
            let mut device = vec![0u8; total];
            let fill = |c: usize, range: std::ops::Range<usize>| {
                // SAFETY: disjoint ranges of the slot, one thread each.
                let slot = unsafe {
                    std::slice::from_raw_parts_mut((slot_at[c % 2] + range.start) as *mut u8, range.len())
                };
                slot.copy_from_slice(&data[c * CHUNK + range.start..c * CHUNK + range.end]);
            };
            Crew::run(chunks, total, &chunk_len, &fill, |crew| {
                crew.upload(
                    |_| Ok(()),
                    |c| {
                        // SAFETY: the crew has finished writing the slot (the order under test).
                        let slot =
                            unsafe { std::slice::from_raw_parts(slot_at[c % 2] as *const u8, chunk_len(c)) };
                        device[c * CHUNK..c * CHUNK + chunk_len(c)].copy_from_slice(slot);
                        Ok(())
                    },
                )
            })
            .unwrap();
            assert!(device == data, "upload of {total} bytes");

            // Down: device (driver) → slots → out (crew).
            let mut out = vec![0u8; total];
            let out_at = out.as_mut_ptr() as usize;
            let drain = |c: usize, range: std::ops::Range<usize>| {
                // SAFETY: disjoint ranges of `out`, one thread each; the slot holds chunk `c`.
                unsafe {
                    let dst = std::slice::from_raw_parts_mut(
                        (out_at + c * CHUNK + range.start) as *mut u8,
                        range.len(),
                    );
                    dst.copy_from_slice(std::slice::from_raw_parts(
                        (slot_at[c % 2] + range.start) as *const u8,
                        range.len(),
                    ));
                }
            };
            Crew::run(chunks, total, &chunk_len, &drain, |crew| {
                crew.download(
                    |c| {
                        // SAFETY: the crew has moved the slot's previous chunk out (the order under test).
                        let slot = unsafe {
                            std::slice::from_raw_parts_mut(slot_at[c % 2] as *mut u8, chunk_len(c))
                        };
                        slot.copy_from_slice(&device[c * CHUNK..c * CHUNK + chunk_len(c)]);
                        Ok(())
                    },
                    |_| Ok(()),
                )
            })
            .unwrap();
            assert!(out == data, "download of {total} bytes");
        }
    }

    /// A failing driver stops the helpers instead of leaving them spinning.
    #[test]
    fn crew_stops_when_the_driver_fails() {
        let total = 8 << 20;
        let chunk_len = |_| 1 << 20;
        let share = |_: usize, _: std::ops::Range<usize>| {};
        let result = Crew::run(8, total, &chunk_len, &share, |crew| {
            crew.upload(
                |slot| if slot == 1 { Err(Error::InvalidInput("stop".into())) } else { Ok(()) },
                |_| Ok(()),
            )
        });
        assert_eq!(result.unwrap_err().to_string(), "invalid input: stop");
    }

    /// Parts of odd sizes, empty ones among them (first, between, last), read and written as one
    /// run of bytes from every offset and in every length that fits: the same bytes as joining them.
    #[test]
    fn parts_read_and_write_as_one() {
        let lens = [0usize, 3, 0, 1, 7, 0, 2, 0];
        let parts: Vec<Vec<u8>> = lens
            .iter()
            .scan(0u8, |next, &len| {
                let part = (0..len).map(|_| {
                    *next += 1;
                    *next
                });
                Some(part.collect())
            })
            .collect();
        let joined = parts.concat();
        let sources: Vec<&[u8]> = parts.iter().map(Vec::as_slice).collect();
        let concatenation = Concatenation::of(&sources);
        assert_eq!(concatenation.len, joined.len());
        for at in 0..joined.len() {
            for count in 0..=joined.len() - at {
                let mut out = vec![0u8; count];
                concatenation.copy_to(&mut out, at);
                assert_eq!(out, joined[at..at + count], "read {count} from {at}");

                let mut written: Vec<Vec<u8>> = lens.iter().map(|&len| vec![0u8; len]).collect();
                let mut targets: Vec<&mut [u8]> = written.iter_mut().map(Vec::as_mut_slice).collect();
                let scatter = Scatter::of(&mut targets);
                // SAFETY: the parts are borrowed until the end of this iteration, by this thread alone.
                unsafe { scatter.copy_from(&joined[at..at + count], at) };
                let mut want = vec![0u8; joined.len()];
                want[at..at + count].copy_from_slice(&joined[at..at + count]);
                assert_eq!(written.concat(), want, "write {count} at {at}");
            }
        }
    }
}
