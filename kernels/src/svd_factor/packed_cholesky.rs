//! Cholesky QR's small step in one thread block per image, the matrix's triangle packed in shared
//! memory (up to `b = 239` on an H100), factored and inverted there in place. One image's step is
//! bound by its dependent steps, not its work, so each stage keeps its chain of dependent steps in
//! registers and one warp, and the block meets at a barrier only between stages:
//!
//! - the factorisation by panels of 32 columns: the panel's diagonal block by one warp (a lane per
//!   row, eight columns at a time in registers, values passed by shuffles), the rows below it a
//!   thread per row ([`SOLVE`] columns at a time in registers), the trailing matrix in 4 × 4
//!   register tiles: three barriers per panel;
//! - the inverse `L⁻¹` in place by block columns from the last (LAPACK's `trtri`): per block
//!   column the diagonal block's inverse (a warp per column, shuffles), then
//!   `L⁻¹(below) = −L⁻¹(trailing)·L(below)·L⁻¹(diagonal)` in register tiles.
//!
//! A Gram matrix already near the identity (`b·max|W − I| ≤ near_identity`, the argument:
//! [`NEAR_IDENTITY`](super::NEAR_IDENTITY) from the plan), as Cholesky QR's
//! second pass usually meets) skips both: `R⁻¹ = I − U` to first order, `U` the upper triangle of
//! `W − I` halved on its diagonal, its error `(b·max|W − I|)²` at most 1e-14.
//!
//! Before, a block barrier per column's step of the factorisation and an inverse read back from
//! global memory made this kernel slower than the blocked kernels over many blocks (0.47 ms at
//! `b = 200` on an H200) and the element-wise one-block kernel ([`cholesky_inverse`](super::cholesky_inverse))
//! slower still (0.58 ms at `b = 104`).
//!
//! With `W = L·Lᵀ` (`L` lower triangular, `R = Lᵀ`), `L` is held packed by rows: `(i, j)`, `i ≥ j`,
//! at `i(i+1)/2 + j` ([`Packed`]), so a row's panel part is contiguous. `R⁻¹ = (L⁻¹)ᵀ`: element
//! `(i, c)` of `L⁻¹` is written to `rinv[c·b + i]`.

use super::constants::PIVOT_FLOOR;
use super::tridiagonal::{Packed, Vector};
use gpu_std::{block, kernel, math, shared, thread, warp};

/// Columns per panel of the factorisation and of a block column of the inverse.
const PANEL: usize = 32;
/// Rows and columns of each thread's register tile in the products.
const TILE: usize = 4;
/// Columns of a row solved together in registers (the unrolled loops stay this short).
const SOLVE: usize = 8;
const _: () = assert!(SOLVE == 8, "factor_diagonal_block's unrolled! lists 0..8");

/// `$body` once for each of the listed values of `$a` (literals, so that registers indexed by
/// `$a` stay registers), in order.
macro_rules! unrolled {
    ($a:ident in [$($value:literal),*] $body:block) => {
        $({
            let $a: usize = $value;
            $body
        })*
    };
}

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
/// pivots' floors (then their reciprocals), `8·(b(b+1)/2 + b)`.
pub const fn cholesky_packed_shared_bytes(b: u32) -> u32 {
    8 * (b * (b + 1) / 2 + b)
}

/// `1/√x` for a normal `x > 0` to about an ulp: the hardware's approximation refined by two Newton
/// steps, `y ← y + y·(1 − x·y²)/2`, much shorter than `1.0 / math::sqrt(x)`, which each pivot of
/// the factorisation waited on.
#[inline(always)]
fn reciprocal_sqrt(x: f64) -> f64 {
    let mut y = math::fast::rsqrt_f64(x);
    for _ in 0..2 {
        let residual = math::fma(-(x * y), y, 1.0);
        y = math::fma(0.5 * y, residual, y);
    }
    y
}

/// Element `(r, c)` of `R⁻¹` for a Gram matrix `W` near the identity, from `W(r, c)` (`r ≤ c`; any
/// value below the diagonal): `I − U` with `U` the upper triangle of `W − I` halved on its
/// diagonal, since `R = I + U + O(‖W − I‖²)`.
#[inline(always)]
pub fn first_order_inverse(r: usize, c: usize, w_rc: f64) -> f64 {
    match r.cmp(&c) {
        core::cmp::Ordering::Less => -w_rc,
        core::cmp::Ordering::Equal => 1.0 - 0.5 * (w_rc - 1.0),
        core::cmp::Ordering::Greater => 0.0,
    }
}

/// Cholesky QR's small step, one block per image (`blockIdx.x`), any whole number of warps up to
/// 512 threads, [`cholesky_packed_shared_bytes`]`(b)` of dynamic shared memory. In: the Gram
/// matrix `w = XᵀX` (`b × b` per image, row-major; only the upper triangle is read); `w` within
/// `near_identity/b` of the identity takes the first-order inverse ([`first_order_inverse`]). Out:
/// `rinv = R⁻¹` (`b × b`, row-major, zero below the diagonal) for `w = RᵀR`, pivots floored as
/// [`cholesky_inverse`](super::cholesky_inverse) floors them (at `PIVOT_FLOOR` of the original
/// diagonal element).
///
/// # Safety
/// The launch gives that shared memory, and each image's `b × b` of `w` and `rinv` lie inside
/// the slices. Unchecked on the GPU; the simulator checks every access.
#[kernel(launch_bounds(512, 1))]
pub unsafe fn cholesky_inverse_packed(w: &[f64], b: u32, near_identity: f64, rinv: &mut [f64]) {
    let img = thread::block_idx_x() as usize;
    let (bu, bb) = (b as usize, b as usize * b as usize);
    let (tid, nt) = (thread::thread_idx_x() as usize, thread::block_dim_x() as usize);
    // SAFETY (whole body): the kernel's contract: the image's parts lie inside the slices and the
    // launch gives the shared memory. Between barriers each element is written by one thread, and
    // read by others only after a barrier.
    unsafe {
        let w = w.sub_unchecked(img * bb, bb);
        let mut rinv = rinv.sub_unchecked(img * bb, bb);
        let n_packed = bu * (bu + 1) / 2;
        let l = Packed(Vector { p: shared::region::<f64>(0, n_packed).as_ptr(), len: n_packed });
        // The pivots' floors; each replaced by its pivot's reciprocal once factored.
        let pivots = Vector { p: shared::region::<f64>(8 * n_packed, bu).as_ptr(), len: bu };
        let row = |i: usize| i * (i + 1) / 2;

        // W's upper triangle as L's lower one, a warp per row of W, and its largest distance
        // from the identity's.
        let (lane, warp_id, warps) = (tid % 32, tid / 32, nt / 32);
        let mut distance = 0.0f64;
        let mut r = warp_id;
        while r < bu {
            let mut c = r + lane;
            while c < bu {
                let value = w.get_unchecked(r * bu + c);
                l.set(c, r, value);
                if r == c {
                    pivots.set(r, PIVOT_FLOOR * value);
                }
                distance = distance.max((value - if r == c { 1.0 } else { 0.0 }).abs());
                c += 32;
            }
            r += warps;
        }
        // Near the identity (a second pass): R⁻¹ = I − U to first order, no factorisation.
        if block::sync_threads_and(distance * bu as f64 <= near_identity) {
            let mut r = warp_id;
            while r < bu {
                let mut c = lane;
                while c < bu {
                    let value = if r <= c { w.get_unchecked(r * bu + c) } else { 0.0 };
                    rinv.set_unchecked(r * bu + c, first_order_inverse(r, c, value));
                    c += 32;
                }
                r += warps;
            }
            return;
        }

        let mut p0 = 0;
        while p0 < bu {
            let p1 = (p0 + PANEL).min(bu);
            if warp_id == 0 {
                factor_diagonal_block(l, pivots, (p0, p1), lane);
            }
            thread::sync_threads();
            solve_rows_below(l, pivots, bu, (p0, p1), (tid, nt));
            thread::sync_threads();
            update_trailing(l, bu, (p0, p1), (tid, nt));
            thread::sync_threads();
            p0 = p1;
        }

        // L⁻¹ in place, block column by block column from the last: the diagonal block's inverse
        // X, then T = L⁻¹(below, below)·L(below, block), then L⁻¹(below, block) = −T·X.
        let mut j0 = (bu - 1) / PANEL * PANEL;
        loop {
            let j1 = (j0 + PANEL).min(bu);
            invert_diagonal_block(l, pivots, (j0, j1), (lane, warp_id, warps));
            if j1 < bu {
                multiply_below_by_trailing_inverse(l, bu, (j0, j1), (tid, nt));
                multiply_below_by_diagonal_inverse(l, bu, (j0, j1), (tid, nt));
            }
            if j0 == 0 {
                break;
            }
            j0 -= PANEL;
        }

        // R⁻¹ = (L⁻¹)ᵀ, zero below the diagonal.
        let mut e = tid;
        while e < bb {
            let (c, i) = (e / bu, e % bu);
            rinv.set_unchecked(e, if i >= c { l.0.get(row(i) + c) } else { 0.0 });
            e += nt;
        }
    }
}

/// Factors the diagonal block of the panel `p0..p1` in place, by one warp (`lane` of 32; the
/// lanes past the panel take part in the shuffles only): a lane per row, the row's columns
/// [`SOLVE`] at a time in registers, the pivot and each finished value passed by shuffles, the
/// block's later columns updated by each group. Each pivot is floored at its `pivots` entry,
/// which then takes the pivot's reciprocal.
///
/// # Safety
/// `l` and `pivots` as in [`cholesky_inverse_packed`], in shared memory; the 32 lanes of one warp
/// call it together.
// The registers of a row's columns are indexed by constant bounds (iterators, or a whole panel's
// columns at once, put them in local memory).
#[allow(clippy::needless_range_loop)]
#[inline(always)]
unsafe fn factor_diagonal_block(l: Packed, pivots: Vector, (p0, p1): (usize, usize), lane: usize) {
    let row = |i: usize| i * (i + 1) / 2;
    let width = p1 - p0;
    let mine = lane < width;
    let at = row(p0 + lane.min(width - 1)) + p0;
    // SAFETY: the function's contract; (i, c) with c ≤ i < p1 lies in the triangle. Each element
    // is written by its row's lane, and read by others after a warp barrier or by shuffles.
    unsafe {
        let mut s0 = 0;
        while s0 < width {
            let s1 = (s0 + SOLVE).min(width);
            let mut x = [0.0f64; SOLVE];
            for a in 0..SOLVE {
                if mine && s0 + a < s1 && s0 + a <= lane {
                    x[a] = l.0.get(at + s0 + a);
                }
            }
            let mut reciprocal = 0.0;
            // Unrolled by hand: LLVM keeps a loop with shuffles rolled, and `x` then in local memory.
            unrolled!(a in [0, 1, 2, 3, 4, 5, 6, 7] {
                let j = s0 + a;
                if j < s1 {
                    let diagonal = warp::shfl_sync(u32::MAX, x[a], j as u32);
                    let diagonal = diagonal.max(pivots.get(p0 + j)).max(f64::MIN_POSITIVE);
                    let inverse = reciprocal_sqrt(diagonal);
                    let pivot = diagonal * inverse;
                    if lane == j {
                        x[a] = pivot;
                        reciprocal = inverse;
                    } else {
                        x[a] *= inverse;
                    }
                    for c in 0..SOLVE {
                        if c > a && s0 + c < s1 {
                            let l_cj = warp::shfl_sync(u32::MAX, x[a], (s0 + c) as u32);
                            if lane >= s0 + c {
                                x[c] = math::fma(-x[a], l_cj, x[c]);
                            }
                        }
                    }
                }
            });
            warp::sync_warp(u32::MAX);
            for a in 0..SOLVE {
                if mine && s0 + a < s1 && s0 + a <= lane {
                    l.0.set(at + s0 + a, x[a]);
                }
            }
            if lane >= s0 && lane < s1 {
                pivots.set(p0 + lane, reciprocal);
            }
            warp::sync_warp(u32::MAX);
            // The block's later columns of this lane's row.
            for c in s1..width {
                if mine && c <= lane {
                    let from = row(p0 + c) + p0 + s0;
                    let mut sum = l.0.get(at + c);
                    for a in 0..SOLVE {
                        if s0 + a < s1 {
                            sum = math::fma(-x[a], l.0.get(from + a), sum);
                        }
                    }
                    l.0.set(at + c, sum);
                }
            }
            warp::sync_warp(u32::MAX);
            s0 = s1;
        }
    }
}

/// The panel `p0..p1`'s rows below its factored diagonal block, a thread per row (`(tid, nt)`):
/// `L(i, panel) = W(i, panel)·L(panel, panel)⁻ᵀ`, [`SOLVE`] columns at a time in registers, each
/// group then updating the row's later panel columns. `pivots` holds the reciprocal pivots.
///
/// # Safety
/// As [`factor_diagonal_block`]; every thread of the block calls it.
#[allow(clippy::needless_range_loop)]
#[inline(always)]
unsafe fn solve_rows_below(
    l: Packed,
    pivots: Vector,
    bu: usize,
    (p0, p1): (usize, usize),
    (tid, nt): (usize, usize),
) {
    let row = |i: usize| i * (i + 1) / 2;
    let width = p1 - p0;
    // SAFETY: the function's contract; each thread writes only its own rows.
    unsafe {
        let mut i = p1 + tid;
        while i < bu {
            let at = row(i) + p0;
            let mut q0 = 0;
            while q0 < width {
                let q1 = (q0 + SOLVE).min(width);
                let mut x = [0.0f64; SOLVE];
                for a in 0..SOLVE {
                    if q0 + a < q1 {
                        x[a] = l.0.get(at + q0 + a);
                    }
                }
                for a in 0..SOLVE {
                    if q0 + a < q1 {
                        x[a] *= pivots.get(p0 + q0 + a);
                        for c in 0..SOLVE {
                            if c > a && q0 + c < q1 {
                                x[c] = math::fma(-x[a], l.0.get(row(p0 + q0 + c) + p0 + q0 + a), x[c]);
                            }
                        }
                    }
                }
                for a in 0..SOLVE {
                    if q0 + a < q1 {
                        l.0.set(at + q0 + a, x[a]);
                    }
                }
                for c in q1..width {
                    let from = row(p0 + c) + p0 + q0;
                    let mut sum = l.0.get(at + c);
                    for a in 0..SOLVE {
                        if q0 + a < q1 {
                            sum = math::fma(-x[a], l.0.get(from + a), sum);
                        }
                    }
                    l.0.set(at + c, sum);
                }
                q0 = q1;
            }
            i += nt;
        }
    }
}

/// The trailing matrix after the panel `p0..p1`: `L(i, c) −= Σ_q L(i, q)·L(c, q)` over the
/// panel's columns `q`, for `p1 ≤ c ≤ i`, a [`TILE`] × [`TILE`] tile of `(i, c)` per thread, only
/// the tiles on and below the diagonal numbered (so no thread idles over one above it).
///
/// # Safety
/// As [`factor_diagonal_block`]; every thread of the block calls it.
#[allow(clippy::needless_range_loop)]
#[inline(always)]
unsafe fn update_trailing(l: Packed, bu: usize, (p0, p1): (usize, usize), (tid, nt): (usize, usize)) {
    let row = |i: usize| i * (i + 1) / 2;
    let tiles = (bu - p1).div_ceil(TILE) as u32;
    // SAFETY: the function's contract; each tile's elements are written by its thread only.
    unsafe {
        // The tiles on and below the diagonal only, numbered by rows: tile t is (ti, tc) with
        // t = ti(ti+1)/2 + tc, tc ≤ ti (the float root corrected by one either way).
        let mut t = tid as u32;
        while t < tiles * (tiles + 1) / 2 {
            let mut ti = ((math::sqrt(8.0 * t as f32 + 1.0) - 1.0) * 0.5) as u32;
            if ti * (ti + 1) / 2 > t {
                ti -= 1;
            } else if (ti + 1) * (ti + 2) / 2 <= t {
                ti += 1;
            }
            let (ti, tc) = (ti as usize, (t - ti * (ti + 1) / 2) as usize);
            {
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
    }
}

/// The diagonal block `j0..j1` of `L` replaced by its inverse `X`, a warp per column `c` and a
/// lane per row `i`: forward substitution down the column, `X(i, c) = −(Σ_{c ≤ m < i} L(i, m)·X(m, c))/L(i, i)`,
/// each finished value broadcast by a shuffle from its lane (`pivots`: the reciprocal pivots).
/// Columns go in rounds of one per warp from the left, each round's values written after a
/// barrier: a later round's columns read only `L`'s columns right of the earlier rounds'.
/// Ends with a barrier.
///
/// # Safety
/// As [`factor_diagonal_block`]; every thread of the block calls it.
#[inline(always)]
unsafe fn invert_diagonal_block(
    l: Packed,
    pivots: Vector,
    (j0, j1): (usize, usize),
    (lane, warp_id, warps): (usize, usize, usize),
) {
    let row = |i: usize| i * (i + 1) / 2;
    let width = j1 - j0;
    // SAFETY: the function's contract; (i, c) with c ≤ i < j1 lies in the triangle.
    unsafe {
        let mut round = 0;
        while round < width {
            let c = round + warp_id;
            let i = lane;
            let mine = c < width && i < width && i >= c;
            // Σ L(i, m)·X(m, c) over the rows m finished so far, and X(i, c) once finished.
            let (mut sum, mut value) = (0.0f64, 0.0f64);
            if c < width {
                let reciprocal = if mine { pivots.get(j0 + i) } else { 0.0 };
                for m in 0..PANEL {
                    let mut finished = 0.0;
                    if lane == m && mine {
                        value = ((if m == c { 1.0 } else { 0.0 }) - sum) * reciprocal;
                        finished = value;
                    }
                    let finished = warp::shfl_sync(u32::MAX, finished, m as u32);
                    if mine && i > m && m >= c {
                        sum = math::fma(l.0.get(row(j0 + i) + j0 + m), finished, sum);
                    }
                }
            }
            thread::sync_threads();
            if mine {
                l.0.set(row(j0 + i) + j0 + c, value);
            }
            thread::sync_threads();
            round += warps;
        }
    }
}

/// `T = L⁻¹(j1.., j1..)·L(j1.., j0..j1)` in place of `L(j1.., j0..j1)` (the trailing part is
/// already inverted), a [`TILE`] × [`TILE`] tile of `(i, c)` per thread. Tiles go in rounds of one
/// per thread from the bottom rows up, each round's values written after a barrier: a row's sum
/// reads `L(m, ·)` only for `m ≤ i`, rows the earlier rounds did not write. Ends with a barrier.
///
/// # Safety
/// As [`factor_diagonal_block`]; every thread of the block calls it.
#[allow(clippy::needless_range_loop)]
#[inline(always)]
unsafe fn multiply_below_by_trailing_inverse(
    l: Packed,
    bu: usize,
    (j0, j1): (usize, usize),
    (tid, nt): (usize, usize),
) {
    let row = |i: usize| i * (i + 1) / 2;
    let (tiles_i, tiles_c) = ((bu - j1).div_ceil(TILE), (j1 - j0).div_ceil(TILE));
    let tiles = tiles_i * tiles_c;
    // SAFETY: the function's contract; each tile's elements are written by its thread only.
    unsafe {
        let mut round = 0;
        while round < tiles {
            let t = round + tid;
            let (i0, c0) = (j1 + (tiles_i - 1 - t.min(tiles - 1) / tiles_c) * TILE, j0 + t % tiles_c * TILE);
            let mut acc = [0.0f64; TILE * TILE];
            if t < tiles {
                let rows_i: [usize; TILE] = core::array::from_fn(|x| row((i0 + x).min(bu - 1)));
                let last = (i0 + TILE).min(bu);
                for m in j1..last {
                    let a: [f64; TILE] =
                        core::array::from_fn(|x| if m <= i0 + x { l.0.get(rows_i[x] + m) } else { 0.0 });
                    let v: [f64; TILE] = core::array::from_fn(|y| l.0.get(row(m) + (c0 + y).min(j1 - 1)));
                    for e in 0..TILE * TILE {
                        acc[e] = math::fma(a[e / TILE], v[e % TILE], acc[e]);
                    }
                }
            }
            thread::sync_threads();
            if t < tiles {
                for e in 0..TILE * TILE {
                    let (i, c) = (i0 + e / TILE, c0 + e % TILE);
                    if i < bu && c < j1 {
                        l.0.set(row(i) + c, acc[e]);
                    }
                }
            }
            thread::sync_threads();
            round += nt;
        }
    }
}

/// `L⁻¹(j1.., j0..j1) = −T·X` in place of `T` (`X` the diagonal block's inverse), a [`TILE`] ×
/// [`TILE`] tile of `(i, c)` per thread: `−Σ_{c ≤ m} T(i, m)·X(m, c)`. Tiles go in rounds of one per
/// thread, each round's values written after a barrier (a tile reads its rows' other columns).
/// Ends with a barrier.
///
/// # Safety
/// As [`factor_diagonal_block`]; every thread of the block calls it.
#[allow(clippy::needless_range_loop)]
#[inline(always)]
unsafe fn multiply_below_by_diagonal_inverse(
    l: Packed,
    bu: usize,
    (j0, j1): (usize, usize),
    (tid, nt): (usize, usize),
) {
    let row = |i: usize| i * (i + 1) / 2;
    let (tiles_i, tiles_c) = ((bu - j1).div_ceil(TILE), (j1 - j0).div_ceil(TILE));
    let tiles = tiles_i * tiles_c;
    // SAFETY: the function's contract; each tile's elements are written by its thread only, and
    // a round's tiles cover whole rows (`nt` is a multiple of 32, `tiles_c` at most 8).
    unsafe {
        let mut round = 0;
        while round < tiles {
            let t = round + tid;
            let (i0, c0) = (j1 + t.min(tiles - 1) / tiles_c * TILE, j0 + t % tiles_c * TILE);
            let mut acc = [0.0f64; TILE * TILE];
            if t < tiles {
                let rows_i: [usize; TILE] = core::array::from_fn(|x| row((i0 + x).min(bu - 1)));
                for m in c0..j1 {
                    let a: [f64; TILE] = core::array::from_fn(|x| l.0.get(rows_i[x] + m));
                    let v: [f64; TILE] =
                        core::array::from_fn(|y| if c0 + y <= m { l.0.get(row(m) + c0 + y) } else { 0.0 });
                    for e in 0..TILE * TILE {
                        acc[e] = math::fma(a[e / TILE], v[e % TILE], acc[e]);
                    }
                }
            }
            thread::sync_threads();
            if t < tiles {
                for e in 0..TILE * TILE {
                    let (i, c) = (i0 + e / TILE, c0 + e % TILE);
                    if i < bu && c < j1 {
                        l.0.set(row(i) + c, -acc[e]);
                    }
                }
            }
            thread::sync_threads();
            round += nt;
        }
    }
}
