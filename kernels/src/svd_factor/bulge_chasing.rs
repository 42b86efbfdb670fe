//! The second stage of the two-stage tridiagonalisation (LAPACK's `sytrd_sb2st`, MAGMA's `sb2st`):
//! the band of half-bandwidth [`BAND`] that [`band_reduce`](super::band_reduce) leaves, to
//! tridiagonal form by bulge chasing in one block per image, and the back-transformation of its
//! reflectors.
//!
//! Sweep `s` annihilates column `s` below the subdiagonal: its task 0 by a reflector on rows
//! `s + 1 … s + BAND` (applied on both sides to the diagonal block), each task `t ≥ 1` applies the
//! previous reflector from the right to the block below (`BAND` rows, the bulge), annihilates that
//! block's first column by a new reflector on its rows, applies it from the left to the block's
//! other columns and on both sides to the next diagonal block. Task `(s, t)` touches rows and
//! columns `s + 1 + (t − 1)·BAND … s + (t + 1)·BAND` only, so it may run once `(s − 1, t + 1)` has:
//! at step `τ` sweep `s` runs its task `τ − 2s`, a warp per sweep in flight, a block barrier per
//! step, `2b` steps in all. Each task is a warp's: lane `(h, i)` takes row (or column) `i` of
//! the task's blocks and half `h` of the other index.

use super::band_reduction::{BAND, BAND_LD, band_chase_tasks, band_scratch_parts, copy_in_flight, reflector};
use super::tridiagonal::{Vector, tridiagonal_scratch, tridiagonal_scratch_parts};
use gpu_std::{kernel, math, shared, thread, warp};

const NB: usize = BAND as usize;
/// Lanes per half warp: a task's rows (or columns), one each.
const HALF_WARP: usize = 16;
/// A reflector's elements per half warp.
const HALF: usize = NB / 2;
const LD: usize = BAND_LD as usize;
/// Eigenvectors a block of [`band_back_transform`] transforms: a warp each.
pub const BAND_BACK_TRANSFORM_VECTORS: u32 = 8;
/// Sweeps whose reflectors [`band_back_transform`] stages in shared memory at a time.
const STAGED_SWEEPS: usize = 8;
/// Stride of a staged reflector in shared memory: `BAND + 1` (lanes reading a reflector each meet
/// no bank conflict).
const STAGE_STRIDE: usize = NB + 1;

/// Largest `b` of the bulge chasing: its block's 16 warps keep 32 tasks' sweeps in flight.
pub const BAND_CHASE_MAX_B: u32 = 2 * 16 * BAND + 1;

/// Warps of [`band_chase`]'s block: one per sweep in flight, `⌈tasks/2⌉`
/// ([`band_chase_tasks`]).
pub const fn band_chase_warps(b: u32) -> u32 {
    band_chase_tasks(b).div_ceil(2)
}

/// Dynamic shared memory with which [`band_chase`] keeps the band in shared memory, bytes:
/// `8·b·BAND_LD` (128 KiB at `b = 512`); with none it works on the band scratch.
pub const fn band_chase_shared_bytes(b: u32) -> u32 {
    8 * b * BAND_LD
}

/// Where a vector's element `x` lies in [`band_back_transform`]'s shared copy: one pad per
/// `BAND`, so that lanes `BAND` rows apart meet no bank conflict.
const fn padded(x: usize) -> usize {
    x + x / NB
}

/// Dynamic shared memory of [`band_back_transform`], bytes: the block's vectors, padded, and the
/// staged reflectors with their `τ`.
pub const fn band_back_transform_shared_bytes(b: u32) -> u32 {
    let vectors = BAND_BACK_TRANSFORM_VECTORS * (padded(b as usize) as u32 + 1);
    let staged = STAGED_SWEEPS as u32 * band_chase_tasks(b) * (STAGE_STRIDE as u32 + 1);
    8 * (vectors + staged)
}

/// The band's element `(i, j)`, `i ≥ j`, `i − j < BAND_LD`.
#[inline(always)]
fn at(i: usize, j: usize) -> usize {
    j * LD + i - j
}

/// The element `(i, j)` of the symmetric band, either triangle.
#[inline(always)]
fn sym(i: usize, j: usize) -> usize {
    if i >= j { at(i, j) } else { at(j, i) }
}

/// The bulge chasing of each image's band to tridiagonal form: grid `images`, block
/// `32·`[`band_chase_warps`]`(b)` threads; dynamic shared memory [`band_chase_shared_bytes`]`(b)`
/// keeps the band in shared memory, none leaves it in the band scratch. Writes `d` and `e` where
/// the divide and conquer reads them ([`tridiagonal_scratch_parts`]) and the reflectors in the
/// band scratch ([`band_scratch_parts`]) for [`band_back_transform`].
///
/// # Safety
/// That launch; `1 ≤ b ≤` [`BAND_CHASE_MAX_B`]; each image's parts lie inside the slices:
/// `tridiagonal_scratch(b)` of `scratch`, `band_scratch(b)` of `band_scratch`, the band written
/// by [`band_reduce`](super::band_reduce). Unchecked on the GPU; the simulator checks every access.
#[kernel(launch_bounds(512, 1))]
pub unsafe fn band_chase(b: u32, scratch: &mut [f64], band_scratch: &mut [f64]) {
    let img = thread::block_idx_x() as usize;
    let bu = b as usize;
    let parts = tridiagonal_scratch_parts(b);
    let bp = band_scratch_parts(b);
    let tasks_max = band_chase_tasks(b) as usize;
    let (tid, nt) = (thread::thread_idx_x() as usize, thread::block_dim_x() as usize);
    let (lane, warp_id, warps) = (tid % 32, tid / 32, nt / 32);
    let add = |x: f64, y: f64| x + y;
    // SAFETY (whole body): the kernel's contract. A task's elements are touched by its warp alone
    // during a step (the schedule of the module docs); within a warp, a lane's writes are read by
    // others only after a warp barrier; between steps, a block barrier.
    unsafe {
        let per_image = tridiagonal_scratch(b) as usize;
        let base = Vector::image_part(scratch, img, per_image);
        let (d_out, e_out) =
            (base.sub(parts.diagonal as usize, bu), base.sub(parts.off_diagonal as usize, bu));
        let band_len = bp.len as usize;
        let mut band_scratch = band_scratch.sub_unchecked(img * band_len, band_len);
        let bs = Vector { p: band_scratch.as_mut_ptr(), len: band_len };
        let band_global = bs.sub(bp.band as usize, bu * LD);
        let chase_v = bs.sub(bp.chase_v as usize, bu * tasks_max * NB);
        let chase_tau = bs.sub(bp.chase_tau as usize, bu * tasks_max);
        let in_shared = shared::dynamic_bytes() >= band_chase_shared_bytes(b) as usize;
        let band = if in_shared {
            let band = Vector { p: shared::region::<f64>(0, bu * LD).as_ptr(), len: bu * LD };
            copy_in_flight(bu * LD, |e| band_global.get(e), |e, x| band.set(e, x));
            band
        } else {
            band_global
        };
        thread::sync_threads();

        let sweeps = bu.saturating_sub(1);
        let steps = if sweeps == 0 { 0 } else { 2 * (sweeps - 1) + tasks_max };
        // Lane (h, i) = (lane / 16, lane % 16) works on row (or column) i of a task's blocks and
        // on their half h of the other index: `vh` holds that half of the warp's last reflector
        // (of its sweep's last task), `v_own` its element i.
        let (h, i) = (lane / HALF_WARP, lane % HALF_WARP);
        let mut vh = [0.0f64; HALF];
        let mut tau_prev = 0.0f64;
        for step in 0..steps {
            let half_step = step / 2;
            if half_step >= warp_id {
                let s = half_step - (half_step - warp_id) % warps;
                let t = step - 2 * s;
                if s < sweeps && t <= (bu - 2 - s) / NB {
                    let r0 = s + 1 + t * NB;
                    let c0 = if t > 0 { r0 - NB } else { s };
                    let m = NB.min(bu - r0);
                    if t > 0 && tau_prev != 0.0 {
                        // The previous reflector from the right on the block A(r₀.., c₀..): row i,
                        // columns of half h.
                        let mut row = [0.0f64; HALF];
                        if i < m {
                            for (k, x) in row.iter_mut().enumerate() {
                                *x = band.get(at(r0 + i, c0 + h * HALF + k));
                            }
                        }
                        let part = dot(&row, &vh);
                        let f = tau_prev * (part + warp::shfl_xor_sync(warp::FULL_MASK, part, 16));
                        if i < m {
                            for (k, x) in row.iter().enumerate() {
                                band.set(at(r0 + i, c0 + h * HALF + k), math::fma(-f, vh[k], *x));
                            }
                        }
                        warp::sync_warp(warp::FULL_MASK);
                    }
                    // The new reflector from column c₀'s elements in rows r₀.. (the bulge's first
                    // column; column s at task 0).
                    let x = if i < m { band.get(at(r0 + i, c0)) } else { 0.0 };
                    let square = if h == 0 && (1..m).contains(&i) { x * x } else { 0.0 };
                    let sigma2 = warp::reduce(square, add);
                    let alpha = warp::shfl_sync(warp::FULL_MASK, x, 0);
                    let (beta, tau, v0) = reflector(alpha, sigma2);
                    let v_own = if i == 0 { v0 } else { x };
                    for (k, v) in vh.iter_mut().enumerate() {
                        *v = warp::shfl_sync(warp::FULL_MASK, v_own, (h * HALF + k) as u32);
                    }
                    if h == 0 {
                        chase_v.set((s * tasks_max + t) * NB + i, if i < m { v_own } else { 0.0 });
                    }
                    if lane == 0 {
                        chase_tau.set(s * tasks_max + t, tau);
                        if t == 0 {
                            d_out.set(s, band.get(at(s, s)));
                            e_out.set(s, beta);
                        }
                    }
                    if t > 0 {
                        warp::sync_warp(warp::FULL_MASK);
                        if h == 0 && i < m {
                            band.set(at(r0 + i, c0), if i == 0 { beta } else { 0.0 });
                        }
                        // The reflector from the left on the block's other columns: column i, rows
                        // of half h.
                        if tau != 0.0 {
                            let mut column = [0.0f64; HALF];
                            if i >= 1 {
                                for (k, x) in column.iter_mut().enumerate() {
                                    if h * HALF + k < m {
                                        *x = band.get(at(r0 + h * HALF + k, c0 + i));
                                    }
                                }
                            }
                            let part = dot(&column, &vh);
                            let f = tau * (part + warp::shfl_xor_sync(warp::FULL_MASK, part, 16));
                            if i >= 1 {
                                for (k, x) in column.iter().enumerate() {
                                    if h * HALF + k < m {
                                        band.set(at(r0 + h * HALF + k, c0 + i), math::fma(-f, vh[k], *x));
                                    }
                                }
                            }
                        }
                    }
                    warp::sync_warp(warp::FULL_MASK);
                    if tau != 0.0 {
                        two_sided(band, r0, m, &vh, v_own, tau, lane);
                    }
                    tau_prev = tau;
                }
            }
            thread::sync_threads();
        }
        if tid == 0 {
            d_out.set(bu - 1, band.get(at(bu - 1, bu - 1)));
            e_out.set(bu - 1, 0.0);
        }
    }
}

/// `D ← H·D·H` for the diagonal block `D = A(r₀..r₀ + m, r₀..r₀ + m)` of the band and the reflector
/// `H = I − τ·v·vᵀ`: `p = τ·D·v`, `w = p − (τ/2)(pᵀv)·v`, `D − v·wᵀ − w·vᵀ` on the lower
/// triangle. Lane `(h, i)` takes row `i`'s columns of half `h` (`vh`: that half of `v`; `v_own`:
/// `vᵢ`). The whole warp calls it.
///
/// # Safety
/// The block lies in the band (`r₀ + m ≤ b`), touched by this warp alone.
#[inline(always)]
unsafe fn two_sided(band: Vector, r0: usize, m: usize, vh: &[f64; HALF], v_own: f64, tau: f64, lane: usize) {
    let add = |x: f64, y: f64| x + y;
    let (h, i) = (lane / HALF_WARP, lane % HALF_WARP);
    // SAFETY: the caller's contract.
    unsafe {
        // Lane (h, i)'s part of row i of D in registers: read once, its lower part written back.
        let mut row = [0.0f64; HALF];
        if i < m {
            for (k, x) in row.iter_mut().enumerate() {
                if h * HALF + k < m {
                    *x = band.get(sym(r0 + i, r0 + h * HALF + k));
                }
            }
        }
        let part = dot(&row, vh);
        let p = tau * (part + warp::shfl_xor_sync(warp::FULL_MASK, part, 16));
        let k = 0.5 * tau * warp::reduce(if h == 0 && i < m { p * v_own } else { 0.0 }, add);
        let w = math::fma(-k, v_own, p);
        let mut wh = [0.0f64; HALF];
        for (j, wj) in wh.iter_mut().enumerate() {
            *wj = warp::shfl_sync(warp::FULL_MASK, w, (h * HALF + j) as u32);
        }
        warp::sync_warp(warp::FULL_MASK);
        if i < m {
            for j in 0..HALF {
                if h * HALF + j <= i {
                    band.set(at(r0 + i, r0 + h * HALF + j), row[j] - v_own * wh[j] - w * vh[j]);
                }
            }
        }
        warp::sync_warp(warp::FULL_MASK);
    }
}

/// `xᵀy` of two half-reflectors, two sums in flight.
#[inline(always)]
fn dot(x: &[f64; HALF], y: &[f64; HALF]) -> f64 {
    let mut sums = [0.0f64; 2];
    for k in 0..HALF {
        sums[k % 2] = math::fma(x[k], y[k], sums[k % 2]);
    }
    sums[0] + sums[1]
}

/// The bulge chasing's reflectors applied to each image's eigenvectors, `z ← Q₂·z`: grid
/// `(⌈b / 8⌉, images)`, block of `32·`[`BAND_BACK_TRANSFORM_VECTORS`] threads (a warp per
/// eigenvector, held in shared memory), dynamic shared memory
/// [`band_back_transform_shared_bytes`]`(b)`. The sweeps last first; a sweep's reflectors act on
/// disjoint rows, a lane each. In and out: the scratch's `W` (eigenvector `j` in row `j`).
///
/// # Safety
/// That launch; `1 ≤ b ≤` [`BAND_CHASE_MAX_B`]; each image's parts lie inside the slices, [`band_chase`] and the
/// divide and conquer having run on them.
#[kernel(launch_bounds(256, 1))]
pub unsafe fn band_back_transform(b: u32, scratch: &mut [f64], band_scratch: &[f64]) {
    let img = thread::block_idx_y() as usize;
    let bu = b as usize;
    let parts = tridiagonal_scratch_parts(b);
    let bp = band_scratch_parts(b);
    let tasks_max = band_chase_tasks(b) as usize;
    let tid = thread::thread_idx_x() as usize;
    let (lane, warp_id) = (tid % 32, tid / 32);
    let vector = thread::block_idx_x() as usize * BAND_BACK_TRANSFORM_VECTORS as usize + warp_id;
    // SAFETY (whole body): the kernel's contract; a warp's vector is its own, a sweep's lanes
    // touch disjoint rows and a warp barrier separates the sweeps; block barriers around staging.
    unsafe {
        let per_image = tridiagonal_scratch(b) as usize;
        let base = Vector::image_part(scratch, img, per_image);
        let band_len = bp.len as usize;
        let band_scratch = band_scratch.sub_unchecked(img * band_len, band_len);
        let bs = Vector { p: band_scratch.as_ptr() as *mut f64, len: band_len };
        let chase_v = bs.sub(bp.chase_v as usize, bu * tasks_max * NB);
        let chase_tau = bs.sub(bp.chase_tau as usize, bu * tasks_max);
        let z_len = padded(bu) + 1;
        let vectors = BAND_BACK_TRANSFORM_VECTORS as usize * z_len;
        let z = Vector { p: shared::region::<f64>(8 * warp_id * z_len, z_len).as_ptr(), len: z_len };
        let staged_len = STAGED_SWEEPS * tasks_max * STAGE_STRIDE;
        let stage = Vector { p: shared::region::<f64>(8 * vectors, staged_len).as_ptr(), len: staged_len };
        let taus = Vector {
            p: shared::region::<f64>(8 * (vectors + staged_len), STAGED_SWEEPS * tasks_max).as_ptr(),
            len: STAGED_SWEEPS * tasks_max,
        };
        let w_row = parts.w as usize + vector * bu;
        let mine = vector < bu;
        if mine {
            let mut x = lane;
            while x < bu {
                z.set(padded(x), base.get(w_row + x));
                x += 32;
            }
        }
        let mut hi = bu.saturating_sub(1);
        while hi > 0 {
            let lo = hi.saturating_sub(STAGED_SWEEPS);
            thread::sync_threads();
            copy_in_flight(
                (hi - lo) * tasks_max * NB,
                |e| chase_v.get(lo * tasks_max * NB + e),
                |e, x| stage.set(e / NB * STAGE_STRIDE + e % NB, x),
            );
            copy_in_flight(
                (hi - lo) * tasks_max,
                |e| chase_tau.get(lo * tasks_max + e),
                |e, x| taus.set(e, x),
            );
            thread::sync_threads();
            if mine {
                for s in (lo..hi).rev() {
                    let mut t = lane;
                    while t <= (bu - 2 - s) / NB {
                        let task = (s - lo) * tasks_max + t;
                        let tau = taus.get(task);
                        if tau != 0.0 {
                            let r0 = s + 1 + t * NB;
                            let m = NB.min(bu - r0);
                            let v = stage.sub(task * STAGE_STRIDE, NB);
                            // Loops of m (not 16) steps: unrolled, they took the kernel past 255
                            // registers.
                            let mut dot = 0.0f64;
                            for i in 0..m {
                                dot = math::fma(v.get(i), z.get(padded(r0 + i)), dot);
                            }
                            let f = tau * dot;
                            for i in 0..m {
                                let e = padded(r0 + i);
                                z.set(e, math::fma(-f, v.get(i), z.get(e)));
                            }
                        }
                        t += 32;
                    }
                    warp::sync_warp(warp::FULL_MASK);
                }
            }
            hi = lo;
        }
        if mine {
            let mut x = lane;
            while x < bu {
                base.set(w_row + x, z.get(padded(x)));
                x += 32;
            }
        }
    }
}
