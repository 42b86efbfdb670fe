//! Block sums: a tree reduction in shared memory finished by warp shuffles.
//!
//! This is the device layer's barrier, shared-memory and shuffle example; its result is wrong
//! unless `sync_threads` really waits for the whole block. Host side: `host/src/reduce.rs`;
//! tests: `tests/reduce.rs`.

use gpu_std::{kernel, shared, thread, warp};

/// Dynamic shared memory of [`block_sum`] for blocks of `block` threads: one f32 per thread.
pub const fn block_sum_shared(block: u32) -> shared::Layout {
    shared::Layout::new().array::<f32>(block as usize)
}

/// Sums `x` block by block: block `b` writes the sum of its grid-stride share to `partial[b]`.
/// Sum the `gridDim.x` partials on the host (or with a second one-block launch).
///
/// Launch with a 1-D block of a power-of-two size between 32 and 1024 threads, at most
/// `partial.len()` blocks and [`block_sum_shared`]`(blockDim.x)` bytes of dynamic shared memory.
#[kernel]
pub fn block_sum(x: &[f32], partial: &mut [f32]) {
    let tid = thread::thread_idx_x();
    let mut acc = 0.0f32;
    let mut i = thread::index_1d() as usize;
    while i < x.len() {
        acc += x[i];
        i += thread::grid_stride_1d() as usize;
    }

    // Halve the active threads each step until one warp is left.
    let mut smem = shared::Allocator::new();
    let sums = smem.array::<f32>(thread::block_dim_x() as usize);
    // SAFETY (every access below): indices are below blockDim.x, the array's length; each element
    // is written by one thread between barriers and read after the barrier that follows.
    unsafe { sums.write(tid as usize, acc) };
    thread::sync_threads();
    let mut active = thread::block_dim_x() / 2;
    while active >= warp::WARP_SIZE {
        if tid < active {
            unsafe {
                let other = sums.read((tid + active) as usize);
                sums.write(tid as usize, sums.read(tid as usize) + other);
            }
        }
        thread::sync_threads();
        active /= 2;
    }

    // The first warp finishes with shuffles: no shared memory, no barrier.
    if tid < warp::WARP_SIZE {
        let mut v = unsafe { sums.read(tid as usize) };
        let mut offset = warp::WARP_SIZE / 2;
        while offset > 0 {
            v += warp::shfl_down_sync(warp::FULL_MASK, v, offset);
            offset /= 2;
        }
        if tid == 0 {
            partial[thread::block_idx_x() as usize] = v;
        }
    }
}
