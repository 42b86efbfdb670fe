//! Block-wide collectives: barriers that count or vote, and reductions and scans over every thread
//! of a block.
//!
//! [`reduce`], [`inclusive_scan`] and [`exclusive_scan`] combine one value per thread with any
//! associative operation: a warp collective per warp, the warps' results through a small shared
//! [`Scratch`] (one value per warp, [`scratch_layout`] on the host), and the barriers around it.
//! Every thread of the block calls them (none returned before), the block is a whole number of
//! warps (checked where the scratch is made), and each thread gets the result.
//!
//! ```ignore
//! let scratch = shared::Allocator::new().scratch::<u32>(shared::Threads::block());
//! let (offset, total) = block::exclusive_scan(count, |a, b| a + b, 0, &scratch);
//! ```

use crate::shared::Layout;
use crate::warp::{self, Shuffle, WARP_SIZE};

/// `__syncthreads_count`: [`sync_threads`](crate::thread::sync_threads), returning how many threads
/// of the block passed a true `predicate` (`bar.red.popc`).
#[inline(always)]
#[cfg_attr(not(target_arch = "nvptx64"), track_caller)]
pub fn sync_threads_count(predicate: bool) -> u32 {
    #[cfg(target_arch = "nvptx64")]
    {
        let out: u32;
        // SAFETY: a barrier with a reduction has no memory-safety preconditions.
        unsafe {
            core::arch::asm!(
                "{{ .reg .pred p; setp.ne.u32 p, {pred}, 0; bar.red.popc.u32 {out}, 0, p; }}",
                pred = in(reg32) predicate as u32, out = out(reg32) out
            )
        };
        out
    }
    #[cfg(not(target_arch = "nvptx64"))]
    crate::sim::sync_threads(crate::sim::BarrierOp::Count, predicate)
}

/// `__syncthreads_and`: [`sync_threads`](crate::thread::sync_threads), returning whether every
/// thread of the block passed a true `predicate` (`bar.red.and`).
#[inline(always)]
#[cfg_attr(not(target_arch = "nvptx64"), track_caller)]
pub fn sync_threads_and(predicate: bool) -> bool {
    #[cfg(target_arch = "nvptx64")]
    {
        let out: u32;
        // SAFETY: as for `sync_threads_count`.
        unsafe {
            core::arch::asm!(
                "{{ .reg .pred p, q; setp.ne.u32 p, {pred}, 0; bar.red.and.pred q, 0, p; selp.u32 {out}, 1, 0, q; }}",
                pred = in(reg32) predicate as u32, out = out(reg32) out
            )
        };
        out != 0
    }
    #[cfg(not(target_arch = "nvptx64"))]
    (crate::sim::sync_threads(crate::sim::BarrierOp::And, predicate) != 0)
}

/// `__syncthreads_or`: [`sync_threads`](crate::thread::sync_threads), returning whether any thread
/// of the block passed a true `predicate` (`bar.red.or`).
#[inline(always)]
#[cfg_attr(not(target_arch = "nvptx64"), track_caller)]
pub fn sync_threads_or(predicate: bool) -> bool {
    #[cfg(target_arch = "nvptx64")]
    {
        let out: u32;
        // SAFETY: as for `sync_threads_count`.
        unsafe {
            core::arch::asm!(
                "{{ .reg .pred p, q; setp.ne.u32 p, {pred}, 0; bar.red.or.pred q, 0, p; selp.u32 {out}, 1, 0, q; }}",
                pred = in(reg32) predicate as u32, out = out(reg32) out
            )
        };
        out != 0
    }
    #[cfg(not(target_arch = "nvptx64"))]
    (crate::sim::sync_threads(crate::sim::BarrierOp::Or, predicate) != 0)
}

/// Elements of the shared scratch array that [`reduce`] and the scans need for blocks of
/// `threads` threads: one per warp.
pub const fn scratch_len(threads: u32) -> usize {
    threads.div_ceil(WARP_SIZE) as usize
}

/// [`scratch_len`] as a shared-memory layout of `T`, for the host's launch size.
pub const fn scratch_layout<T>(threads: u32) -> Layout {
    Layout::new().array::<T>(scratch_len(threads))
}

/// The shared scratch of [`reduce`] and the scans: one `T` per warp of the block, made by
/// [`Allocator::scratch`](crate::shared::Allocator::scratch) from the
/// [`Threads`](crate::shared::Threads) that describe the block (a whole number of warps, checked
/// there), so that it always holds a slot for every warp, and every warp has a lane 0 and a lane
/// 31 to write it. Only the collectives touch it: each warp's slot is written by one of its lanes
/// between their barriers, and read by everyone after, so it is safe to pass to any number of
/// them in turn.
pub struct Scratch<T> {
    pub(crate) ptr: *mut T,
    /// Slots: the block's warps (the simulator checks every access against it; on the GPU the
    /// collectives' loops are bounded by the block's warps, which it equals).
    #[cfg_attr(target_arch = "nvptx64", allow(dead_code))]
    pub(crate) len: usize,
}

impl<T: Copy> Scratch<T> {
    /// Writes warp `w`'s slot.
    ///
    /// # Safety
    /// `w < len`, and no other thread accesses slot `w` until the next barrier.
    #[inline(always)]
    #[cfg_attr(not(target_arch = "nvptx64"), track_caller)]
    unsafe fn write(&self, w: usize, value: T) {
        #[cfg(not(target_arch = "nvptx64"))]
        if w >= self.len {
            crate::sim::shared_out_of_range(w, self.len);
        }
        // SAFETY: guaranteed by the caller.
        let at = unsafe { self.ptr.add(w) };
        crate::shared::note(at, crate::shared::Access::Write);
        // SAFETY: as above.
        unsafe { at.write(value) }
    }

    /// `op` folded over the first `warps` slots, in order.
    ///
    /// # Safety
    /// `warps ≤ len`, every one of those slots written before the barrier that precedes this call,
    /// and none written again until the next.
    #[inline(always)]
    #[cfg_attr(not(target_arch = "nvptx64"), track_caller)]
    unsafe fn fold(&self, warps: u32, op: &impl Fn(T, T) -> T) -> Option<T> {
        let mut acc: Option<T> = None;
        for w in 0..warps {
            #[cfg(not(target_arch = "nvptx64"))]
            if w as usize >= self.len {
                crate::sim::shared_out_of_range(w as usize, self.len);
            }
            // SAFETY: guaranteed by the caller.
            let at = unsafe { self.ptr.add(w as usize) };
            crate::shared::note(at, crate::shared::Access::Read);
            // SAFETY: as above.
            let v = unsafe { at.read() };
            acc = Some(match acc {
                None => v,
                Some(a) => op(a, v),
            });
        }
        acc
    }

    /// The block's warps: `len`, since the scratch was sized for this block's
    /// [`Threads`](crate::shared::Threads), whose count is the block's.
    #[inline(always)]
    fn warps(&self) -> u32 {
        crate::thread::block_threads().div_ceil(WARP_SIZE)
    }
}

/// `op` folded over `value` of every thread of the block; every thread gets the result. `scratch`
/// may be passed again when this returns.
#[inline(always)]
#[cfg_attr(not(target_arch = "nvptx64"), track_caller)]
pub fn reduce<T: Shuffle>(value: T, op: impl Fn(T, T) -> T, scratch: &Scratch<T>) -> T {
    let in_warp = warp::reduce(value, &op);
    if warp::lane_id() == 0 {
        // SAFETY: the scratch has a slot per warp of the block (`Scratch`), written here by the
        // warp's lane 0 alone.
        unsafe { scratch.write(warp::warp_id() as usize, in_warp) };
    }
    crate::thread::sync_threads();
    // SAFETY: every warp wrote its slot before the barrier (every thread of the block calls this),
    // and none writes again before the next.
    let total = unsafe { scratch.fold(scratch.warps(), &op) }.unwrap_or(in_warp);
    crate::thread::sync_threads();
    total
}

/// Thread `t` (in [`thread_rank_in_block`](crate::thread::thread_rank_in_block) order) gets `op`
/// folded over `value` of threads `0..=t`, and every thread the block's total. `scratch` as for
/// [`reduce`].
#[inline(always)]
#[cfg_attr(not(target_arch = "nvptx64"), track_caller)]
pub fn inclusive_scan<T: Shuffle>(value: T, op: impl Fn(T, T) -> T, scratch: &Scratch<T>) -> (T, T) {
    let in_warp = warp::inclusive_scan(value, &op);
    let (prefix, total) = warp_prefix(in_warp, &op, scratch);
    (prefix.map_or(in_warp, |p| op(p, in_warp)), total)
}

/// Thread `t` gets `op` folded over `value` of threads `0..t` (thread 0: `identity`, which `op`
/// must leave unchanged), and every thread the block's total. `scratch` as for [`reduce`].
#[inline(always)]
#[cfg_attr(not(target_arch = "nvptx64"), track_caller)]
pub fn exclusive_scan<T: Shuffle>(
    value: T,
    op: impl Fn(T, T) -> T,
    identity: T,
    scratch: &Scratch<T>,
) -> (T, T) {
    let inclusive = warp::inclusive_scan(value, &op);
    let before = warp::shfl_up_sync(warp::FULL_MASK, inclusive, 1);
    let in_warp = if warp::lane_id() == 0 { identity } else { before };
    let (prefix, total) = warp_prefix(inclusive, &op, scratch);
    (prefix.map_or(in_warp, |p| op(p, in_warp)), total)
}

/// The fold of the warps before this one and of all warps, from each warp's inclusive scan
/// (`in_warp`, whose last lane holds the warp's total).
#[inline(always)]
#[cfg_attr(not(target_arch = "nvptx64"), track_caller)]
fn warp_prefix<T: Shuffle>(in_warp: T, op: &impl Fn(T, T) -> T, scratch: &Scratch<T>) -> (Option<T>, T) {
    let warp = warp::warp_id();
    if warp::lane_id() == WARP_SIZE - 1 {
        // SAFETY: the scratch has a slot per warp of the block, whole warps (`Scratch`), written
        // here by the warp's last lane alone.
        unsafe { scratch.write(warp as usize, in_warp) };
    }
    crate::thread::sync_threads();
    // SAFETY: every warp wrote its slot before the barrier (every thread of the block calls this),
    // none writes again before the next, and `warp` is below the warp count.
    let (prefix, total) = unsafe { (scratch.fold(warp, op), scratch.fold(scratch.warps(), op)) };
    crate::thread::sync_threads();
    (prefix, total.unwrap_or(in_warp))
}
