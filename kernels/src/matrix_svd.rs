//! The exact truncated SVD's device work after the factorisation: its factors' sign convention,
//! applied where the factors are, so that a GPU caller's `U` and `Vᵀ` never cross to the host.

use gpu_std::{kernel, math, shared, thread};

/// Rows each block of [`sign_partials`] reads at a time: one per warp.
pub const SIGN_ROWS_PER_STEP: u32 = 8;
/// Columns of `U` per block of [`sign_partials`]: one per lane.
pub const SIGN_COLUMNS_PER_BLOCK: u32 = 32;
/// Threads per block of [`sign_partials`] (1-D).
pub const SIGN_PARTIALS_THREADS: u32 = SIGN_ROWS_PER_STEP * SIGN_COLUMNS_PER_BLOCK;
/// Dynamic shared memory of [`sign_partials`], bytes: three f64 per thread.
pub const SIGN_PARTIALS_SHARED_BYTES: u32 = 3 * SIGN_PARTIALS_THREADS * 8;

/// The first step of the sign convention (scikit-learn's `svd_flip`: each column of `U` has its
/// entry of largest magnitude, the first of equal ones in row order, positive): per matrix, chunk
/// of `rows_per_chunk` rows and column `j` of `U` (`m × k`, row-major, matrices `m·k` apart), the
/// chunk's entry of largest magnitude, its row, and the sum of squares, as three f64 at
/// `3·((z·chunks + chunk)·k + j)` of `partials` (`chunks` = the grid's `y`). Lane `l` reads column
/// `32·x + l` and warp `w` rows `w, w + 8, …` of the chunk, so that a warp reads along a row of
/// `U` (a column per block, as before, read `U` `k` elements apart: 0.21 ms at k = 10 and 0.48
/// at k = 50 for 100 000 rows on an H200). Grid `(⌈k/32⌉, chunks, matrices)`, 1-D block of
/// [`SIGN_PARTIALS_THREADS`], [`SIGN_PARTIALS_SHARED_BYTES`] of dynamic shared memory.
#[kernel]
pub fn sign_partials(u: &[f64], m: u32, k: u32, rows_per_chunk: u32, partials: &mut [f64]) {
    let (chunk, z) = (thread::block_idx_y() as usize, thread::block_idx_z() as usize);
    let (m, k, chunks) = (m as usize, k as usize, thread::grid_dim_y() as usize);
    let u = u.sub(z * m * k, m * k);
    let tid = thread::thread_idx_x() as usize;
    let (lane, warp) = (tid % SIGN_COLUMNS_PER_BLOCK as usize, tid / SIGN_COLUMNS_PER_BLOCK as usize);
    let j = thread::block_idx_x() as usize * SIGN_COLUMNS_PER_BLOCK as usize + lane;
    let first = chunk * rows_per_chunk as usize;
    let end = (first + rows_per_chunk as usize).min(m);

    // This thread's rows in order: its first entry of largest magnitude, and the sum of squares.
    let (mut largest, mut row, mut squares) = (-1.0f64, m, 0.0f64);
    if j < k {
        let mut i = first + warp;
        while i < end {
            let x = u[i * k + j];
            if math::abs(x) > largest {
                (largest, row) = (math::abs(x), i);
            }
            squares = math::fma(x, x, squares);
            i += SIGN_ROWS_PER_STEP as usize;
        }
    }
    let threads = SIGN_PARTIALS_THREADS as usize;
    let (largests, rows, sums) = (
        shared::region::<f64>(0, threads),
        shared::region::<f64>(8 * threads, threads),
        shared::region::<f64>(16 * threads, threads),
    );
    // SAFETY (the shared accesses): indices below blockDim.x in regions of blockDim.x elements, the
    // launch's shared memory; each written by its thread before the barrier, read after it.
    unsafe {
        largests.write(tid, largest);
        rows.write(tid, row as f64);
        sums.write(tid, squares);
    }
    thread::sync_threads();
    if warp == 0 && j < k {
        // The warps' results for column j in order of their first rows: the larger magnitude, and
        // of equal ones the earlier row.
        for w in 1..SIGN_ROWS_PER_STEP as usize {
            let at = w * SIGN_COLUMNS_PER_BLOCK as usize + lane;
            // SAFETY: as above.
            unsafe {
                let (theirs, their_row) = (largests.read(at), rows.read(at) as usize);
                if theirs > largest || (theirs == largest && their_row < row) {
                    (largest, row) = (theirs, their_row);
                }
                squares += sums.read(at);
            }
        }
        let at = 3 * ((z * chunks + chunk) * k + j);
        partials[at] = largest;
        partials[at + 1] = row as f64;
        partials[at + 2] = squares;
    }
}

/// The second step of the sign convention: per matrix and column `j`, the chunks' partials of
/// [`sign_partials`] (`chunks` of them) combined in chunk order; where `U`'s entry of largest
/// magnitude is negative, row `j` of `Vᵀ` (`k × n`, row-major, matrices `k·n` apart) is negated
/// and `signs[z·k + j]` is −1 (else 1), for [`negate_columns`] to negate column `j` of `U`. Writes
/// `‖uⱼ‖²` to `norms[2·(z·k + j)]` and `‖vⱼ‖²` (before any negation) to the element after it, so
/// that the host finds the vectors that the accurate pass left zero (a zero column keeps its
/// sign). Grid `(k, 1, matrices)`; a 1-D block of a power of two threads; `(4·blockDim.x + 1) × 8`
/// bytes of dynamic shared memory.
#[kernel]
#[allow(clippy::too_many_arguments)]
pub fn sign_choose(
    u: &[f64],
    vt: &mut [f64],
    m: u32,
    n: u32,
    k: u32,
    chunks: u32,
    partials: &[f64],
    signs: &mut [f64],
    norms: &mut [f64],
) {
    let (j, z) = (thread::block_idx_x() as usize, thread::block_idx_z() as usize);
    let (m, n, k, chunks) = (m as usize, n as usize, k as usize, chunks as usize);
    let u = u.sub(z * m * k, m * k);
    let mut v = vt.sub((z * k + j) * n, n);
    let (tid, threads) = (thread::thread_idx_x() as usize, thread::block_dim_x() as usize);

    // Each thread's chunks in order, then the tree over threads; chunks hold rows in order.
    let (mut largest, mut row, mut u_squares, mut v_squares) = (-1.0f64, m, 0.0f64, 0.0f64);
    let mut c = tid;
    while c < chunks {
        let at = 3 * ((z * chunks + c) * k + j);
        let (theirs, their_row) = (partials[at], partials[at + 1] as usize);
        if theirs > largest || (theirs == largest && their_row < row) {
            (largest, row) = (theirs, their_row);
        }
        u_squares += partials[at + 2];
        c += threads;
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
            let flip = row < m && u[row * k + j] < 0.0;
            negate.write(0, if flip { 1.0 } else { 0.0 });
            signs[z * k + j] = if flip { -1.0 } else { 1.0 };
            norms[2 * (z * k + j)] = u_sums.read(0);
            norms[2 * (z * k + j) + 1] = v_sums.read(0);
        }
    }
    thread::sync_threads();
    // SAFETY: as above.
    if unsafe { negate.read(0) } == 1.0 {
        let mut i = tid;
        while i < n {
            v[i] = -v[i];
            i += threads;
        }
    }
}

/// The last step of the sign convention: negates each column `j` of `U` (`m × k`, row-major,
/// matrices `m·k` apart) whose `signs[z·k + j]` ([`sign_choose`]) is negative, along `U`'s rows.
/// Grid `(x, 1, matrices)` (grid-strided), 1-D blocks.
#[kernel]
pub fn negate_columns(u: &mut [f64], m: u32, k: u32, signs: &[f64]) {
    let z = thread::block_idx_z() as usize;
    let (m, k) = (m as usize, k as usize);
    let mut u = u.sub(z * m * k, m * k);
    let signs = signs.sub(z * k, k);
    let mut e =
        thread::block_idx_x() as usize * thread::block_dim_x() as usize + thread::thread_idx_x() as usize;
    while e < m * k {
        if signs[e % k] < 0.0 {
            u[e] = -u[e];
        }
        e += thread::grid_dim_x() as usize * thread::block_dim_x() as usize;
    }
}
