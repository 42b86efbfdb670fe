//! Block sums: a tree reduction in shared memory finished by warp shuffles.
//!
//! This is the device layer's barrier, shared-memory and shuffle example; its result is wrong
//! unless `sync_threads` really waits for the whole block. Host side: `host/src/reduce.rs`;
//! tests: `tests/reduce.rs`.

use crate::{kernel, shared, thread, warp};

/// Sums `x[0..n]` block by block: block `b` writes the sum of its grid-stride share to
/// `partial[b]`. Sum the `gridDim.x` partials on the host (or with a second one-block launch).
///
/// Launch with a 1-D block of a power-of-two size between 32 and 1024 threads and
/// `blockDim.x × 4` bytes of dynamic shared memory.
#[kernel]
pub unsafe fn block_sum(x: *const f32, n: u32, partial: *mut f32) {
    let tid = thread::thread_idx_x();
    let mut acc = 0.0f32;
    let mut i = thread::index_1d();
    while i < n {
        acc += *x.add(i as usize);
        i += thread::grid_stride_1d();
    }

    // Halve the active threads each step until one warp is left.
    let sums = shared::dynamic::<f32>();
    sums.write(tid as usize, acc);
    thread::sync_threads();
    let mut active = thread::block_dim_x() / 2;
    while active >= warp::WARP_SIZE {
        if tid < active {
            let other = sums.read((tid + active) as usize);
            sums.write(tid as usize, sums.read(tid as usize) + other);
        }
        thread::sync_threads();
        active /= 2;
    }

    // The first warp finishes with shuffles: no shared memory, no barrier.
    if tid < warp::WARP_SIZE {
        let mut v = sums.read(tid as usize);
        let mut offset = warp::WARP_SIZE / 2;
        while offset > 0 {
            v += warp::shfl_down_sync(warp::FULL_MASK, v, offset);
            offset /= 2;
        }
        if tid == 0 {
            *partial.add(thread::block_idx_x() as usize) = v;
        }
    }
}
