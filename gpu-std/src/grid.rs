//! Grid-wide barriers: the blocks of a group wait for each other and see each other's earlier
//! writes to global memory, as CUDA's `grid.sync()` of cooperative groups.
//!
//! The blocks must all be resident at once, or the first to wait waits forever: launch the kernel
//! with the host's `Device::launch_cooperative` (CUDA's cooperative launch, which refuses a grid
//! that does not fit the GPU; in the simulator every block runs on an OS thread of its own).
//!
//! ```ignore
//! let barrier = unsafe { GridBarrier::new(counters.as_mut_ptr().add(group), blocks_in_group) };
//! partial.set(g, my_sum);     // write for the other blocks …
//! barrier.sync();             // … which read it after the barrier
//! ```

use crate::atomic::{AtomicRef, Ordering};
use crate::thread;

/// A barrier of `blocks` blocks over one `u32` counter in global memory, zero when the launch
/// starts (the host zeroes it before each launch): each wait adds one per block, and the count a
/// block's addition returns tells which wait it is, so the barrier keeps no state of its own
/// (`Copy`, like a pointer). The last block to arrive goes on at once; the others poll the count.
#[derive(Clone, Copy, Debug)]
pub struct GridBarrier {
    arrivals: AtomicRef<u32>,
    blocks: u32,
}

impl GridBarrier {
    /// The barrier of `blocks` blocks whose counter is `*counter`.
    ///
    /// # Safety
    /// `counter` points at a `u32` of global memory, zero when the launch starts and touched only
    /// through this barrier; exactly `blocks` blocks, all resident at once, wait at it, each the
    /// same number of times, fewer than `2³²/blocks` in all.
    #[inline(always)]
    pub unsafe fn new(counter: *mut u32, blocks: u32) -> Self {
        // SAFETY: a valid u32 (the caller's contract).
        let arrivals = unsafe { AtomicRef::from_ptr(counter) };
        Self { arrivals, blocks }
    }

    /// Waits until every thread of all the barrier's blocks has called it; each block then sees
    /// the global-memory writes the others made before they called it. Every thread of each block
    /// calls it (it contains two [`sync_threads`](thread::sync_threads)).
    ///
    /// # Panics
    /// In the simulator, when another block of the launch has failed (it would never arrive).
    #[inline(always)]
    #[cfg_attr(not(target_arch = "nvptx64"), track_caller)]
    pub fn sync(self) {
        // The block's barrier orders its threads' writes before thread 0's release, and the
        // acquire and the barrier after it order the others' writes before every thread's reads
        // (the pattern of CUTLASS's `GenericBarrier`): no fence is needed.
        thread::sync_threads();
        if thread::thread_rank_in_block() == 0 {
            // No block arrives at a wait before every block has arrived at the one before, so
            // the count before this arrival lies in this wait's span of `blocks`.
            let before = self.arrivals.with_ordering(Ordering::AcqRel).fetch_add(1);
            let target = (before / self.blocks + 1) * self.blocks;
            if before + 1 < target {
                while self.arrivals.with_ordering(Ordering::Acquire).load() < target {
                    #[cfg(not(target_arch = "nvptx64"))]
                    {
                        assert!(!crate::sim::launch_stopped(), "another block of the launch failed");
                        std::thread::yield_now();
                    }
                }
            }
        }
        thread::sync_threads();
    }
}
