//! Cholesky QR's small step in one thread block per image, the matrix's triangle packed in shared
//! memory (up to `b = 239` on an H100): the factorisation by panels of 32 columns, the trailing
//! update in register tiles, then the inverse by block rows, its triangular parts a warp per
//! column with the values broadcast by shuffles. One image's factorisation is bound by its `b`
//! dependent steps, not its work: here a step of the factorisation costs two block barriers and
//! the inverse none, where the element-wise one-block kernel
//! ([`cholesky_inverse`](super::cholesky_inverse)) and the blocked kernels over many blocks (a
//! launch per panel stage) took about 0.55 ms at `b = 104 … 200` on an H100.
//!
//! With `W = L·Lᵀ` (`L` lower triangular, `R = Lᵀ`), `L` is held packed by rows: `(i, j)`, `i ≥ j`,
//! at `i(i+1)/2 + j` ([`Packed`]), so a row's panel part is contiguous. `R⁻¹ = (L⁻¹)ᵀ`: element
//! `(i, c)` of `L⁻¹` is written to `rinv[c·b + i]`.

use super::constants::PIVOT_FLOOR;
use super::tridiagonal::{Packed, Vector};
use gpu_std::{kernel, math, shared, thread, warp};

/// Columns per panel of the factorisation and rows per block row of the inverse.
const PANEL: usize = 32;
/// Rows and columns of each thread's register tile in the products.
const TILE: usize = 4;

/// Largest `b` of [`cholesky_inverse_packed`] on a device whose blocks have `max_shared_bytes` of
/// shared memory: the largest with [`cholesky_packed_shared_bytes`] within it.
pub const fn cholesky_packed_max_b(max_shared_bytes: u32) -> u32 {
    let mut b = 0;
    while cholesky_packed_shared_bytes(b + 1) <= max_shared_bytes {
        b += 1;
    }
    b
}

/// Dynamic shared memory of [`cholesky_inverse_packed`], bytes: the packed triangle and the
/// pivots' floors, `8·(b(b+1)/2 + b)`.
pub const fn cholesky_packed_shared_bytes(b: u32) -> u32 {
    8 * (b * (b + 1) / 2 + b)
}

/// Cholesky QR's small step, one block per image (`blockIdx.x`), any whole number of warps up to
/// 512 threads, [`cholesky_packed_shared_bytes`]`(b)` of dynamic shared memory. In: the Gram
/// matrix `w = XᵀX` (`b × b` per image, row-major; only the upper triangle is read). Out:
/// `rinv = R⁻¹` (`b × b`, row-major, zero below the diagonal) for `w = RᵀR`, pivots floored as
/// [`cholesky_inverse`](super::cholesky_inverse) floors them (at `PIVOT_FLOOR` of the original
/// diagonal element).
///
/// # Safety
/// The launch gives that shared memory, and each image's `b × b` of `w` and `rinv` lie inside
/// the slices. Unchecked on the GPU; the simulator checks every access.
// Loops over the register tiles index them by constant bounds: iterators left `acc` in local
// memory (a 128-byte stack frame).
#[allow(clippy::needless_range_loop)]
#[kernel(launch_bounds(512, 1))]
pub unsafe fn cholesky_inverse_packed(w: &[f64], b: u32, rinv: &mut [f64]) {
    let img = thread::block_idx_x() as usize;
    let (bu, bb) = (b as usize, b as usize * b as usize);
    let (tid, nt) = (thread::thread_idx_x() as usize, thread::block_dim_x() as usize);
    // SAFETY (whole body): the kernel's contract: the image's parts lie inside the slices and the
    // launch gives the shared memory. Between barriers each element is written by one thread, and
    // read by others only after a barrier (global memory too: a block barrier orders the block's
    // own global writes).
    unsafe {
        let w = w.sub_unchecked(img * bb, bb);
        let mut rinv = rinv.sub_unchecked(img * bb, bb);
        let n_packed = bu * (bu + 1) / 2;
        let l = Packed(Vector { p: shared::region::<f64>(0, n_packed).as_ptr(), len: n_packed });
        let floors = Vector { p: shared::region::<f64>(8 * n_packed, bu).as_ptr(), len: bu };
        let row = |i: usize| i * (i + 1) / 2;

        // W's upper triangle as L's lower one, a warp per row of W; R⁻¹'s lower triangle zero.
        let (lane, warp_id, warps) = (tid % 32, tid / 32, nt / 32);
        let mut r = warp_id;
        while r < bu {
            let mut c = lane;
            while c < bu {
                if r <= c {
                    let value = w.get_unchecked(r * bu + c);
                    l.set(c, r, value);
                    if r == c {
                        floors.set(r, PIVOT_FLOOR * value);
                    }
                } else {
                    rinv.set_unchecked(r * bu + c, 0.0);
                }
                c += 32;
            }
            r += warps;
        }
        thread::sync_threads();

        let mut p0 = 0;
        while p0 < bu {
            let p1 = (p0 + PANEL).min(bu);
            factor_panel(l, floors, bu, (p0, p1), (tid, nt));
            // The trailing matrix: L(i, c) −= Σ_q L(i, q)·L(c, q) over the panel's columns q, for
            // p1 ≤ c ≤ i, a TILE × TILE tile of (i, c) per thread.
            let tiles = (bu - p1).div_ceil(TILE) as u32;
            let mut t = tid as u32;
            while t < tiles * tiles {
                let (ti, tc) = ((t / tiles) as usize, (t % tiles) as usize);
                if ti >= tc {
                    let (i0, c0) = (p1 + ti * TILE, p1 + tc * TILE);
                    let mut acc = [0.0f64; TILE * TILE];
                    let rows_i: [usize; TILE] = core::array::from_fn(|x| row((i0 + x).min(bu - 1)));
                    let rows_c: [usize; TILE] = core::array::from_fn(|y| row((c0 + y).min(bu - 1)));
                    for q in p0..p1 {
                        let a: [f64; TILE] = core::array::from_fn(|x| l.0.get(rows_i[x] + q));
                        let v: [f64; TILE] = core::array::from_fn(|y| l.0.get(rows_c[y] + q));
                        for e in 0..TILE * TILE {
                            acc[e] = math::fma(a[e / TILE], v[e % TILE], acc[e]);
                        }
                    }
                    for e in 0..TILE * TILE {
                        let (i, c) = (i0 + e / TILE, c0 + e % TILE);
                        if i < bu && c <= i {
                            l.0.set(row(i) + c, l.0.get(row(i) + c) - acc[e]);
                        }
                    }
                }
                t += nt as u32;
            }
            thread::sync_threads();
            p0 = p1;
        }

        // L⁻¹'s diagonal blocks into R⁻¹'s rows, a warp per column c, a lane per row of c's block:
        // forward substitution down the column, each value broadcast from the lane that finishes
        // it, the sums in registers (reading back global memory just written serialised each step
        // on its latency).
        let mut c = warp_id;
        while c < bu {
            let (q0, q1) = (c / PANEL * PANEL, (c / PANEL * PANEL + PANEL).min(bu));
            let i = q0 + lane;
            let mine = i < q1 && i >= c;
            // Σ L(i, m)·L⁻¹(m, c) over the rows m finished so far, and L⁻¹(i, c) once finished.
            let (mut sum, mut value) = (0.0f64, 0.0f64);
            for step in 0..PANEL {
                let m = q0 + step;
                let mut finished = 0.0;
                if lane == step && mine {
                    value = ((if m == c { 1.0 } else { 0.0 }) - sum) / l.0.get(row(m) + m);
                    finished = value;
                }
                let finished = warp::shfl_sync(u32::MAX, finished, step as u32);
                if mine && i > m && m >= c {
                    sum = math::fma(l.0.get(row(i) + m), finished, sum);
                }
            }
            if mine {
                rinv.set_unchecked(c * bu + i, value);
            }
            c += warps;
        }
        thread::sync_threads();

        // Block row by block row: L⁻¹(q, 0..q0) = −L⁻¹(q, q)·L(q, 0..q0)·L⁻¹(0..q0, 0..q0).
        let mut q0 = PANEL;
        while q0 < bu {
            let q1 = (q0 + PANEL).min(bu);
            // First T = L(q, 0..q0)·L⁻¹(0..q0, 0..q0), a tile of (i, c) per thread, into the
            // places its result will take (R⁻¹'s rows c < q0, columns q0..q1). L⁻¹(m, c) is zero
            // for m < c (R⁻¹'s zero lower triangle), so each sum may start at the tile's first c.
            let (tiles_i, tiles_c) = ((q1 - q0).div_ceil(TILE) as u32, q0.div_ceil(TILE) as u32);
            let mut t = tid as u32;
            while t < tiles_i * tiles_c {
                let (i0, c0) = (q0 + (t / tiles_c) as usize * TILE, (t % tiles_c) as usize * TILE);
                let rows_i: [usize; TILE] = core::array::from_fn(|x| row((i0 + x).min(q1 - 1)));
                let mut acc = [0.0f64; TILE * TILE];
                for m in c0..q0 {
                    let a: [f64; TILE] = core::array::from_fn(|x| l.0.get(rows_i[x] + m));
                    let v: [f64; TILE] =
                        core::array::from_fn(|y| rinv.get_unchecked((c0 + y).min(q0 - 1) * bu + m));
                    for e in 0..TILE * TILE {
                        acc[e] = math::fma(a[e / TILE], v[e % TILE], acc[e]);
                    }
                }
                for e in 0..TILE * TILE {
                    let (i, c) = (i0 + e / TILE, c0 + e % TILE);
                    if i < q1 && c < q0 {
                        rinv.set_unchecked(c * bu + i, acc[e]);
                    }
                }
                t += nt as u32;
            }
            thread::sync_threads();
            // Then each column c < q0, a warp per column, a lane per row i of the block row:
            // L⁻¹(i, c) = −Σ_{m ≤ i} L⁻¹(i, m)·T(m, c), the T(m, c) broadcast from their lanes.
            let mut c = warp_id;
            while c < q0 {
                let i = q0 + lane;
                let t = if i < q1 { rinv.get_unchecked(c * bu + i) } else { 0.0 };
                let mut sum = 0.0f64;
                for step in 0..PANEL {
                    let t_m = warp::shfl_sync(u32::MAX, t, step as u32);
                    if i < q1 && step <= lane {
                        sum = math::fma(rinv.get_unchecked((q0 + step) * bu + i), t_m, sum);
                    }
                }
                if i < q1 {
                    rinv.set_unchecked(c * bu + i, -sum);
                }
                c += warps;
            }
            thread::sync_threads();
            q0 = q1;
        }
    }
}

/// Factors the panel of columns `p0..p1` of the packed `L` in place, every thread of the block
/// taking part (`(tid, nt)`): per column `j`, the floored pivot, column `j` below it divided by
/// it, and the panel's later columns updated by column `j`'s outer product. Two barriers per
/// column; the trailing matrix right of the panel is left to the caller.
///
/// # Safety
/// `l` holds `bu(bu+1)/2` values and `floors` `bu`, in shared memory; all threads of the block
/// call it.
#[inline(always)]
unsafe fn factor_panel(
    l: Packed,
    floors: Vector,
    bu: usize,
    (p0, p1): (usize, usize),
    (tid, nt): (usize, usize),
) {
    let row = |i: usize| i * (i + 1) / 2;
    // SAFETY: the function's contract; (i, c) with c ≤ i < bu lies in the triangle.
    unsafe {
        for j in p0..p1 {
            let pivot = math::sqrt(l.0.get(row(j) + j).max(floors.get(j)).max(f64::MIN_POSITIVE));
            let inv = 1.0 / pivot;
            let mut i = j + 1 + tid;
            while i < bu {
                l.0.set(row(i) + j, l.0.get(row(i) + j) * inv);
                i += nt;
            }
            thread::sync_threads();
            if tid == 0 {
                l.0.set(row(j) + j, pivot);
            }
            // A warp per row i > j, a lane per panel column c ≤ i after j (at most 31).
            let c = j + 1 + tid % 32;
            let mut i = j + 1 + tid / 32;
            while i < bu {
                if c < p1 && c <= i {
                    l.0.set(row(i) + c, l.0.get(row(i) + c) - l.0.get(row(i) + j) * l.0.get(row(c) + j));
                }
                i += nt / 32;
            }
            thread::sync_threads();
        }
    }
}
