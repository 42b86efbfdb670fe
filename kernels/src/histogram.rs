//! 256-bin histogram of 8-bit data (an image's pixel values): each block counts its grid-stride
//! share in shared memory, then adds its counts to the global histogram.
//!
//! The example of the device library's atomics: `red.shared.add` for the block's counts (spread
//! over [`REPLICAS`] copies, so that warps do not contend for one counter; safe
//! [`shared::Counters`], zeroed by their owners and read as totals after the barrier),
//! `red.global.add` for the merge. Host side: `host/src/families/histogram.rs`; tests: `tests/histogram.rs`; benchmark:
//! `benches/histogram.rs`.

use gpu_std::{kernel, shared, thread, warp};

/// Bins: one per byte value.
pub const BINS: u32 = 256;

/// Copies of the block's counters in shared memory; warp `w` counts into copy `w % REPLICAS`.
pub const REPLICAS: u32 = 8;

/// Threads per block of [`histogram_u8`] (1-D blocks).
pub const BLOCK: u32 = 512;

/// Dynamic shared memory of [`histogram_u8`]: `REPLICAS × BINS` u32 counters.
pub const fn shared_layout() -> shared::Layout {
    shared::Layout::new().array::<u32>((REPLICAS * BINS) as usize)
}

/// Adds the histogram of the first `n` bytes of `words` (four bytes per u32, little-endian:
/// byte `4w + j` is bits `8j..8j + 8` of word `w`) to `hist` (256 counters).
///
/// Launch with 1-D blocks of [`BLOCK`] threads (checked: another shape stops the kernel), any grid
/// (a grid-stride loop; about four blocks per SM saturates memory) and [`shared_layout`]`()` bytes
/// of dynamic shared memory.
#[kernel]
pub fn histogram_u8(words: &[u32], n: u32, hist: &mut [u32]) {
    // A constant block: the counters' zeroing and the merge below are loops of known trip counts,
    // and a thread's rank (its warp's replica) is `threadIdx.x`.
    let threads = shared::Threads::exactly::<BLOCK, 1>();
    let counts = shared::Allocator::new().counters::<u32>((REPLICAS * BINS) as usize, threads);
    let counts = shared::sync_threads(counts);

    let replica = (warp::warp_id() % REPLICAS) * BINS;
    let count_word = |word: u32, bytes: u32| {
        for j in 0..bytes {
            let bin = (word >> (8 * j)) & 0xff;
            counts.add((replica + bin) as usize, 1);
        }
    };
    let full_words = n / 4;
    let words_len = (words.len_u32()).min(full_words);
    let stride = thread::grid_stride_1d();
    let mut w = thread::index_1d();
    // Four independent loads in flight per thread, each coalesced across the warp.
    while w + 3 * stride < words_len {
        // SAFETY: `w + 3·stride < words_len ≤ words.len()`.
        let v = unsafe {
            [
                words.get_unchecked(w as usize),
                words.get_unchecked((w + stride) as usize),
                words.get_unchecked((w + 2 * stride) as usize),
                words.get_unchecked((w + 3 * stride) as usize),
            ]
        };
        // Word by word, not `for word in v`: an array's by-value iterator keeps the four words in
        // local memory and picks each through a chain of selects (a loop of ~45 instructions per
        // word around its four atomics).
        let [a, b, c, d] = v;
        count_word(a, 4);
        count_word(b, 4);
        count_word(c, 4);
        count_word(d, 4);
        w += 4 * stride;
    }
    while w < words_len {
        count_word(words[w as usize], 4);
        w += stride;
    }
    // The last, partial word: bytes `4·full_words..n`.
    if thread::index_1d() == 0 && !n.is_multiple_of(4) {
        count_word(words[full_words as usize], n % 4);
    }
    let counts = shared::sync_threads(counts);

    let mut b = threads.rank();
    while b < BINS {
        let mut total = 0u32;
        for r in 0..REPLICAS {
            total += counts[(r * BINS + b) as usize];
        }
        if total > 0 {
            hist.atomic(b as usize).add(total);
        }
        b += threads.count();
    }
}
