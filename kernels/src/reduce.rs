//! One-pass reductions of f32 arrays — the sum, and the minimum with the maximum — in one launch:
//! each block reduces its grid-stride share, and the last block to finish reduces the blocks'
//! partial results.
//!
//! The example of the device library's block collectives and ordered atomics: `block::reduce`
//! within a block; a release `fetch_add` on a counter tells the last block that every partial is
//! written, and its acquire makes them visible (CUDA's "threadfence reduction"). The partials are
//! combined in block order, so the result does not depend on which block finishes last. Host side:
//! `host/src/families/reduce.rs`; tests: `tests/reduce.rs`; benchmark: `benches/reduce.rs`.

use gpu_std::atomic::Ordering;
use gpu_std::warp::Shuffle;
use gpu_std::{Slice, SliceMut, block, kernel, shared, thread};

/// What a one-pass reduction computes: an accumulator per thread, combined associatively, stored
/// as [`Reduction::WIDTH`] f32 per partial result.
pub trait Reduction {
    /// The running value.
    type Acc: Shuffle;
    /// f32 per stored value.
    const WIDTH: usize;
    /// The value of no element.
    fn identity() -> Self::Acc;
    /// The value of one element.
    fn lift(x: f32) -> Self::Acc;
    /// Two values combined.
    fn combine(a: Self::Acc, b: Self::Acc) -> Self::Acc;
    /// Writes `acc` at `out[WIDTH·i..]`.
    fn store(acc: Self::Acc, out: &mut SliceMut<f32>, i: usize);
    /// Reads what [`Reduction::store`] wrote at `i` (relaxed atomic loads: written by other blocks).
    fn load(from: &SliceMut<f32>, i: usize) -> Self::Acc;
}

/// The sum.
pub struct Sum;

impl Reduction for Sum {
    type Acc = f32;
    const WIDTH: usize = 1;
    #[inline(always)]
    fn identity() -> f32 {
        0.0
    }
    #[inline(always)]
    fn lift(x: f32) -> f32 {
        x
    }
    #[inline(always)]
    fn combine(a: f32, b: f32) -> f32 {
        a + b
    }
    #[inline(always)]
    fn store(acc: f32, out: &mut SliceMut<f32>, i: usize) {
        out[i] = acc;
    }
    #[inline(always)]
    fn load(from: &SliceMut<f32>, i: usize) -> f32 {
        from.atomic(i).load()
    }
}

/// The minimum and the maximum (NaNs ignored, as `f32::min` and `f32::max` do), as one value.
#[derive(Clone, Copy)]
pub struct MinMax {
    /// The smallest element.
    pub min: f32,
    /// The largest element.
    pub max: f32,
}

impl Shuffle for MinMax {
    #[inline(always)]
    fn to_bits(self) -> u64 {
        self.min.to_bits() as u64 | (self.max.to_bits() as u64) << 32
    }
    #[inline(always)]
    fn from_bits(bits: u64) -> Self {
        MinMax { min: f32::from_bits(bits as u32), max: f32::from_bits((bits >> 32) as u32) }
    }
    const WIDE: bool = true;
}

impl Reduction for MinMax {
    type Acc = MinMax;
    const WIDTH: usize = 2;
    #[inline(always)]
    fn identity() -> MinMax {
        MinMax { min: f32::INFINITY, max: f32::NEG_INFINITY }
    }
    #[inline(always)]
    fn lift(x: f32) -> MinMax {
        MinMax { min: x, max: x }
    }
    #[inline(always)]
    fn combine(a: MinMax, b: MinMax) -> MinMax {
        MinMax { min: a.min.min(b.min), max: a.max.max(b.max) }
    }
    #[inline(always)]
    fn store(acc: MinMax, out: &mut SliceMut<f32>, i: usize) {
        out[2 * i] = acc.min;
        out[2 * i + 1] = acc.max;
    }
    #[inline(always)]
    fn load(from: &SliceMut<f32>, i: usize) -> MinMax {
        MinMax { min: from.atomic(2 * i).load(), max: from.atomic(2 * i + 1).load() }
    }
}

/// Threads per block of the reductions.
pub const BLOCK: u32 = 512;

/// Dynamic shared memory of [`sum_f32`] and [`min_max_f32`] for blocks of `threads` threads.
pub const fn shared_layout(threads: u32) -> shared::Layout {
    block::scratch_layout::<u64>(threads)
}

/// The reduction `R` of `x`: per thread over a grid-stride loop (four independent accumulators
/// and 16-byte loads where `x` is 16-byte aligned), per block with `block::reduce`, and by the
/// last block over the blocks' `partials`.
#[inline(always)]
fn one_pass<R: Reduction>(
    x: Slice<f32>,
    mut partials: SliceMut<f32>,
    done: SliceMut<u32>,
    mut out: SliceMut<f32>,
) {
    let scratch = shared::Allocator::new().scratch::<R::Acc>(shared::Threads::block());
    let n = x.len();
    let stride = thread::grid_stride_1d() as usize;
    let mut acc = [R::identity(); 4];
    let mut i = thread::index_1d() as usize;
    if (x.as_ptr() as usize).is_multiple_of(16) {
        let mut v = 4 * i;
        while v + 4 <= n {
            // SAFETY: `v + 4 ≤ n`, `v` a multiple of 4 from a 16-byte aligned start, and `x` is
            // read-only.
            let four = unsafe { x.load_f32x4_unchecked(v) };
            for (a, &e) in acc.iter_mut().zip(&four) {
                *a = R::combine(*a, R::lift(e));
            }
            v += 4 * stride;
        }
        // The last `n % 4` elements, one thread each.
        i = n - n % 4 + thread::index_1d() as usize;
        if i < n {
            acc[0] = R::combine(acc[0], R::lift(x[i]));
        }
    } else {
        while i < n {
            acc[i / stride % 4] = R::combine(acc[i / stride % 4], R::lift(x[i]));
            i += stride;
        }
    }
    let mine = R::combine(R::combine(acc[0], acc[1]), R::combine(acc[2], acc[3]));
    let block_value = block::reduce(mine, R::combine, &scratch);

    let blocks = thread::grid_dim_x();
    let b = thread::block_idx_x() as usize;
    let first = thread::thread_idx_x() == 0;
    let mut ticket = 0;
    if first {
        R::store(block_value, &mut partials, b);
        // Release: the partial is written before the count says so.
        ticket = done.atomic(0).with_ordering(Ordering::AcqRel).fetch_add(1);
    }
    if !block::sync_threads_or(first && ticket == blocks - 1) {
        return;
    }
    // The last block: every partial is written (the acquire above, then this block's barrier).
    let mut total = R::identity();
    let mut p = thread::thread_idx_x() as usize;
    while p < blocks as usize {
        total = R::combine(total, R::load(&partials, p));
        p += thread::block_dim_x() as usize;
    }
    let total = block::reduce(total, R::combine, &scratch);
    if first {
        R::store(total, &mut out, 0);
        // Ready for the next launch.
        done.atomic(0).store(0);
    }
}

/// The argument tuple of [`sum_f32`] and [`min_max_f32`] (host side).
#[cfg(not(target_arch = "nvptx64"))]
pub type ReductionArgs = (Slice<f32>, SliceMut<f32>, SliceMut<u32>, SliceMut<f32>);

/// The sum of `x` in `out[0]`, in one launch.
///
/// Launch with 1-D blocks of whole warps, at most `partials.len()` blocks, and
/// [`shared_layout`]`(blockDim.x)` bytes of dynamic shared memory; `done[0]` must be 0 (it is again
/// when the kernel ends).
#[kernel]
pub fn sum_f32(x: &[f32], partials: &mut [f32], done: &mut [u32], out: &mut [f32]) {
    one_pass::<Sum>(x, partials, done, out);
}

/// The minimum of `x` in `out[0]` and its maximum in `out[1]` (NaNs ignored; ±∞ for an `x` of
/// NaNs only), in one launch. Launch as [`sum_f32`], with two partials per block.
#[kernel]
pub fn min_max_f32(x: &[f32], partials: &mut [f32], done: &mut [u32], out: &mut [f32]) {
    one_pass::<MinMax>(x, partials, done, out);
}
