//! The one-pass kernels: the conversions of the input pixels to f64, the seeded random starting
//! subspace (or the identity), the per-image sums of squares of the reconstruction's error, and
//! the Gram matrices' traces.

use super::layout::Layout;
use gpu_std::math;
use gpu_std::{kernel, shared, thread};

/// `dst[i] = src[i] / 255` for every `i < dst.len()` (8-bit pixels to f64 in `[0, 1]`; `src` at
/// least as long). Any 1-D launch (grid-stride loop).
#[kernel]
pub fn gray8_to_f64(src: &[u8], dst: &mut [f64]) {
    let src = src.sub(0, dst.len());
    let mut i = thread::index_1d() as usize;
    while i < dst.len() {
        dst[i] = src[i] as f64 / 255.0;
        i += thread::grid_stride_1d() as usize;
    }
}

/// `dst[i] = src[i]` widened to f64, for every `i < dst.len()` (`src` at least as long). Any 1-D
/// launch.
#[kernel]
pub fn f32_to_f64(src: &[f32], dst: &mut [f64]) {
    let src = src.sub(0, dst.len());
    let mut i = thread::index_1d() as usize;
    while i < dst.len() {
        dst[i] = src[i] as f64;
        i += thread::grid_stride_1d() as usize;
    }
}

/// Starts every image's subspace: writes the seeded pseudo-random `r × b` matrix (entries
/// uniform in `±√(3/r)`, so that each column's expected squared norm is 1 and any two columns are
/// about `1/√r` from orthogonal; the same for every image and run: a hash of the seed and the
/// element's index) into the left half of each image's `r × 2b` work matrix in `qy` (row-major,
/// images `batch` apart). Grid `(x, 1, images)`, any 1-D block.
#[kernel]
pub fn random_subspace(qy: &mut [f64], r: u32, b: u32, batch: u32, seed: u32) {
    let mut qy = qy.sub(thread::block_idx_z() as usize * batch as usize, (r * 2 * b) as usize);
    let scale = math::sqrt(3.0 / r as f64);
    let mut i = thread::index_1d();
    while i < r * b {
        qy[((i / b) * 2 * b + i % b) as usize] = scale * uniform_pm1(seed, i);
        i += thread::grid_stride_1d();
    }
}

/// Writes the `r × r` identity into the left half of each image's `r × 2r` work matrix in `qy`
/// (row-major, images `batch` apart): the basis of the whole space, for the factorisations that
/// take every eigenpair of the Gram matrix instead of iterating. Grid `(x, 1, images)`, any 1-D
/// block.
#[kernel]
pub fn identity_subspace(qy: &mut [f64], r: u32, batch: u32) {
    let mut qy = qy.sub(thread::block_idx_z() as usize * batch as usize, (r * 2 * r) as usize);
    let mut i = thread::index_1d();
    while i < r * r {
        let (row, col) = (i / r, i % r);
        qy[(row * 2 * r + col) as usize] = if row == col { 1.0 } else { 0.0 };
        i += thread::grid_stride_1d();
    }
}

/// A value uniform in `[−1, 1)` from `seed` and `index`: the 53 high bits of SplitMix64's
/// output for the pair (a bijective mix, so distinct indices give independent-looking values).
#[inline(always)]
pub fn uniform_pm1(seed: u32, index: u32) -> f64 {
    let mut x = ((seed as u64) << 32 | index as u64).wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^= x >> 31;
    (x >> 11) as f64 * (2.0 / (1u64 << 53) as f64) - 1.0
}

/// Per image, block partial sums of `Σ (a − x)²` (or `Σ a²` when `x` is empty) over `count`
/// elements: `a` f64 (images `a_batch` apart), `x` f32 (`x_batch` apart). Block `bx` of image `z`
/// writes `partial[z·gridDim.x + bx]`. Grid `(blocks, 1, images)`; 1-D block of a power of two
/// ≥ 32 threads; `blockDim.x × 8` bytes of dynamic shared memory.
#[kernel]
pub fn squared_difference_sums(
    a: &[f64],
    a_batch: u32,
    x: &[f32],
    x_batch: u32,
    count: u32,
    partial: &mut [f64],
) {
    let z = thread::block_idx_z() as usize;
    let a = a.sub(z * a_batch as usize, count as usize);
    let x = (!x.is_empty()).then(|| x.sub(z * x_batch as usize, count as usize));
    let tid = thread::thread_idx_x();
    let mut acc = 0.0f64;
    let mut i = thread::index_1d();
    while i < count {
        let d = match x {
            Some(x) => a[i as usize] - x[i as usize] as f64,
            None => a[i as usize],
        };
        acc = math::fma(d, d, acc);
        i += thread::grid_stride_1d();
    }
    let total = block_sum(acc);
    if tid == 0 {
        partial[z * thread::grid_dim_x() as usize + thread::block_idx_x() as usize] = total;
    }
}

/// Per image, the trace of its Gram matrix `G = AᵀA` (`r × r` through `lg`, images `lg.batch`
/// apart) into `traces[z]`: `‖A‖_F²`, a sum of squares, so it is finite exactly when every entry
/// of `A` is and no square overflows; the iteration checks it before it solves anything on `G`.
/// The diagonal is added per thread in order, then by a tree. Grid `(1, 1, images)`; 1-D block of
/// a power of two threads; `blockDim.x × 8` bytes of dynamic shared memory.
#[kernel]
pub fn gram_traces(g: &[f64], lg: Layout, r: u32, traces: &mut [f64]) {
    let z = thread::block_idx_z() as usize;
    let g = g.tail(z * lg.batch as usize);
    let tid = thread::thread_idx_x();
    let mut acc = 0.0f64;
    let mut i = tid;
    while i < r {
        acc += g[lg.at(i, i)];
        i += thread::block_dim_x();
    }
    let total = block_sum(acc);
    if tid == 0 {
        traces[z] = total;
    }
}

/// The sum of every thread's `value` over a 1-D block of a power of two threads, by a tree through
/// `blockDim.x` f64 of dynamic shared memory (a fixed order); thread 0 gets it (the others a part).
/// Every thread of the block calls it.
#[inline(always)]
fn block_sum(value: f64) -> f64 {
    let tid = thread::thread_idx_x() as usize;
    let sums = shared::dynamic::<f64>();
    // SAFETY (the shared accesses): indices below blockDim.x, the launch's shared f64 count; each
    // element is written by one thread between barriers and read after the next one.
    unsafe { sums.write(tid, value) };
    thread::sync_threads();
    let mut active = thread::block_dim_x() as usize / 2;
    while active > 0 {
        if tid < active {
            unsafe {
                let other = sums.read(tid + active);
                sums.write(tid, sums.read(tid) + other);
            }
        }
        thread::sync_threads();
        active /= 2;
    }
    unsafe { sums.read(tid) }
}
