//! The exact truncated SVD's device work after the factorisation: its factors' sign convention,
//! applied where the factors are, so that a GPU caller's `U` and `Vᵀ` never cross to the host.

use gpu_std::{kernel, math, shared, thread};

/// Applies the sign convention to each matrix's factors and measures them. Per column `j` of `U`
/// (`m × k`, row-major, matrices `m·k` apart): the entry of largest magnitude, the first of equal
/// ones in row order (scikit-learn's `svd_flip`); where it is negative, column `j` of `U` and row
/// `j` of `Vᵀ` (`k × n`, row-major, matrices `k·n` apart) are negated. Writes `‖uⱼ‖²` to
/// `norms[2·(z·k + j)]` and `‖vⱼ‖²` to the element after it, so that the host finds the vectors
/// that the accurate pass left zero (a zero column keeps its sign).
///
/// Grid `(k, 1, matrices)`; a 1-D block of a power of two threads; `(4·blockDim.x + 1) × 8` bytes
/// of dynamic shared memory.
#[kernel]
pub fn sign_convention(u: &mut [f64], vt: &mut [f64], m: u32, n: u32, k: u32, norms: &mut [f64]) {
    let (j, z) = (thread::block_idx_x() as usize, thread::block_idx_z() as usize);
    let (m, n, k) = (m as usize, n as usize, k as usize);
    let mut u = u.sub(z * m * k, m * k);
    let mut v = vt.sub((z * k + j) * n, n);
    let (tid, threads) = (thread::thread_idx_x() as usize, thread::block_dim_x() as usize);

    // Each thread's rows in order: its first entry of largest magnitude, and the sums of squares.
    let (mut largest, mut row, mut u_squares, mut v_squares) = (-1.0f64, m, 0.0f64, 0.0f64);
    let mut i = tid;
    while i < m {
        let x = u[i * k + j];
        if math::abs(x) > largest {
            (largest, row) = (math::abs(x), i);
        }
        u_squares = math::fma(x, x, u_squares);
        i += threads;
    }
    let mut i = tid;
    while i < n {
        v_squares = math::fma(v[i], v[i], v_squares);
        i += threads;
    }

    let part = |p: usize| shared::region::<f64>(8 * p * threads, threads);
    let (largests, rows, u_sums, v_sums) = (part(0), part(1), part(2), part(3));
    let negate = shared::region::<f64>(32 * threads, 1);
    // SAFETY (the shared accesses): indices below blockDim.x in regions of blockDim.x elements (and
    // the one flag), the launch's shared memory; each element is written by one thread between
    // barriers and read after the next one.
    unsafe {
        largests.write(tid, largest);
        rows.write(tid, row as f64);
        u_sums.write(tid, u_squares);
        v_sums.write(tid, v_squares);
    }
    thread::sync_threads();
    // The tree keeps the larger magnitude, and of equal ones the earlier row.
    let mut active = threads / 2;
    while active > 0 {
        if tid < active {
            // SAFETY: as above.
            unsafe {
                let other = tid + active;
                let (mine, theirs) = (largests.read(tid), largests.read(other));
                if theirs > mine || (theirs == mine && rows.read(other) < rows.read(tid)) {
                    largests.write(tid, theirs);
                    rows.write(tid, rows.read(other));
                }
                u_sums.write(tid, u_sums.read(tid) + u_sums.read(other));
                v_sums.write(tid, v_sums.read(tid) + v_sums.read(other));
            }
        }
        thread::sync_threads();
        active /= 2;
    }
    if tid == 0 {
        // SAFETY: as above.
        unsafe {
            let row = rows.read(0) as usize;
            negate.write(0, if row < m && u[row * k + j] < 0.0 { 1.0 } else { 0.0 });
            norms[2 * (z * k + j)] = u_sums.read(0);
            norms[2 * (z * k + j) + 1] = v_sums.read(0);
        }
    }
    thread::sync_threads();
    // SAFETY: as above.
    if unsafe { negate.read(0) } == 1.0 {
        let mut i = tid;
        while i < m {
            u[i * k + j] = -u[i * k + j];
            i += threads;
        }
        let mut i = tid;
        while i < n {
            v[i] = -v[i];
            i += threads;
        }
    }
}
