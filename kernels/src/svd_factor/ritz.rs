//! The Rayleigh–Ritz step and the next basis, one block per image: the Ritz pairs, their residuals
//! and weights, the column combinations, and the Cholesky factor of the basis's Gram matrix.

use super::constants::{NULL_THRESHOLD, PIVOT_FLOOR};
use super::eigensolver::{JacobiSpace, MAX_SWEEPS, image_scratch, jacobi};
use super::ritz_pairs::write_ritz_pairs;
use gpu_std::math;
use gpu_std::{kernel, shared, thread};

/// Rayleigh–Ritz, first half, one block per image (`blockIdx.x`), any 1-D block size; dynamic
/// shared memory 8 bytes, or [`jacobi_shared_bytes`](super::eigensolver::jacobi_shared_bytes)`(b)`
/// to work in shared memory.
///
/// In: `t` (`b × b` per image, row-major) `= QᵀY = QᵀGQ` with `Y = G·Q`. Solves
/// `T = Z·diag(θ)·Zᵀ` by cyclic Jacobi and writes, per image, the Ritz values `theta` (`b`,
/// non-increasing), `sigma = √θ`, `inv_sigma` (`1/σ`, or 0 for numerically zero θ) and the
/// matching eigenvectors `ritz` (`b × b`, column `r` for `θ_r`).
///
/// # Safety
/// The launch gives at least 8 bytes of dynamic shared memory (the Jacobi solver's flag), and
/// each image's parts lie inside the slices: `b × b` of `t`,
/// [`eigen_scratch`](super::eigensolver::eigen_scratch)`(b)` of `scratch`, `b` of `theta`,
/// `sigma`, `inv_sigma` and `b × b` of `ritz`. Unchecked on the GPU, like the Jacobi work space
/// (checks cost instructions in the solver's loops); the simulator checks every access.
#[kernel]
pub unsafe fn ritz_eigen(
    t: &[f64],
    b: u32,
    scratch: &mut [f64],
    theta: &mut [f64],
    sigma: &mut [f64],
    inv_sigma: &mut [f64],
    ritz: &mut [f64],
) {
    let img = thread::block_idx_x() as usize;
    let bu = b as usize;
    let bb = bu * bu;
    // SAFETY (whole body): the kernel's contract: the image's parts lie inside the slices, its
    // scratch part's two vectors after the Jacobi work space, and the launch gives the solver's
    // flag; the work space is in shared memory when the launch gives `jacobi_shared_bytes(b)`,
    // else in the scratch part. Every thread runs all of it (the solver's barriers), and each
    // element is written by one thread between barriers.
    unsafe {
        let t_in = t.sub_unchecked(img * bb, bb);
        let (mut scratch, work) = image_scratch(scratch, b);
        let space = JacobiSpace::new(scratch.as_mut_ptr(), bu);
        let (vals, perm) = (scratch.sub_unchecked(work, bu), scratch.sub_unchecked(work + bu, bu));
        let theta = theta.sub_unchecked(img * bu, bu);
        let sigma = sigma.sub_unchecked(img * bu, bu);
        let inv_sigma = inv_sigma.sub_unchecked(img * bu, bu);
        let ritz = ritz.sub_unchecked(img * bb, bb);
        let (tid, nt) = (thread::thread_idx_x() as usize, thread::block_dim_x() as usize);

        // X = (T + Tᵀ)/2, Z = I.
        let mut i = tid;
        while i < bb {
            let (r, c) = (i / bu, i % bu);
            space.set_x(r, c, 0.5 * (t_in.get_unchecked(i) + t_in.get_unchecked(c * bu + r)));
            space.set_z(r, c, if r == c { 1.0 } else { 0.0 });
            i += nt;
        }
        thread::sync_threads();
        let mut scale = 0.0f64;
        for l in 0..bu {
            scale = scale.max(math::abs(space.x(l, l)));
        }
        jacobi(space, bu, scale, MAX_SWEEPS);
        let value = |i: usize| space.x(i, i);
        let vector = |row: usize, col: usize| space.z(row, col);
        write_ritz_pairs((bu, 0..bu, true), value, vector, (vals, perm), (theta, sigma, inv_sigma, ritz));
    }
}

/// Rows of `vw` each thread of [`ritz_residuals`] visits per step: the block is 32 columns ×
/// this many rows.
pub const RESIDUAL_ROWS: u32 = 8;

/// This block's run of the `rows` rows that the kernels summing over rows deal over `grid.y`
/// blocks (`ritz_residuals`, `basis_column_norms`, `deflation_overlaps`): `[first, end)`.
#[inline(always)]
fn row_run(rows: usize) -> (usize, usize) {
    let run = rows.div_ceil(thread::grid_dim_y() as usize);
    let first = thread::block_idx_y() as usize * run;
    (first.min(rows), (first + run).min(rows))
}

/// Rayleigh–Ritz, second half: per image and Ritz pair `i < b`, `stats[i] = ‖W_i‖²` and
/// `stats[b + i] = ‖W_i − θ_i·V_i‖²` (the residual), from `vw = [V W]` (`r × 2b` per image,
/// row-major, images `r·2b` apart; `V = Q·Z` the Ritz vectors, `W = G·V`), summed over the rows
/// directly (no cancellation: accurate for the smallest θ too). `stats` holds `2b` per image and
/// must hold zeros: the rows are dealt over `grid.y` blocks (each a run of about `r/grid.y` rows)
/// whose partial sums are added atomically.
///
/// Launch: grid `(⌈b/32⌉, row blocks, images)`, block `32 × RESIDUAL_ROWS` (x: a column, y: a row
/// lane), `32·RESIDUAL_ROWS·16` bytes of dynamic shared memory.
#[kernel]
pub fn ritz_residuals(vw: &[f64], theta: &[f64], r: u32, b: u32, stats: &mut [f64]) {
    let z = thread::block_idx_z() as usize;
    let (bu, ru) = (b as usize, r as usize);
    let vw = vw.sub(z * ru * 2 * bu, ru * 2 * bu);
    let theta = theta.sub(z * bu, bu);
    let mut stats = stats.sub(z * 2 * bu, 2 * bu);
    let (lane, row_lane) = (thread::thread_idx_x() as usize, thread::thread_idx_y() as usize);
    let col = thread::block_idx_x() as usize * 32 + lane;
    let (first, end) = row_run(ru);
    let (mut norm, mut residual) = (0.0f64, 0.0f64);
    if col < bu {
        let th = theta[col];
        let mut row = first + row_lane;
        while row < end {
            let (v, w) = (vw[row * 2 * bu + col], vw[row * 2 * bu + bu + col]);
            norm = math::fma(w, w, norm);
            let d = math::fma(-th, v, w);
            residual = math::fma(d, d, residual);
            row += RESIDUAL_ROWS as usize;
        }
    }
    let sums = shared::dynamic::<f64>();
    let slot = row_lane * 32 + lane;
    let half = (32 * RESIDUAL_ROWS) as usize;
    // SAFETY (the shared accesses): indices below 2·32·RESIDUAL_ROWS, the launch's f64 count; each
    // is written by one thread before the barrier and read after it.
    unsafe {
        sums.write(slot, norm);
        sums.write(half + slot, residual);
    }
    thread::sync_threads();
    if row_lane == 0 && col < bu {
        let (mut norm, mut residual) = (0.0, 0.0);
        for l in 0..RESIDUAL_ROWS as usize {
            unsafe {
                norm += sums.read(l * 32 + lane);
                residual += sums.read(half + l * 32 + lane);
            }
        }
        stats.atomic(col).add(norm);
        stats.atomic(bu + col).add(residual);
    }
}

/// Per image (one block each, `blockIdx.x`, any 1-D block size, 8 bytes of dynamic shared
/// memory): the convergence flag and the weights of the next basis, from `theta` (`b`,
/// non-increasing) and the `stats` of [`ritz_residuals`].
///
/// `converged[image]` = 1 when each of the first `k` Ritz pairs that is not numerically zero has
/// residual `‖G·v − θ·v‖ ≤ max(tol·√(θ₁·θ_i), floor·θ₁)` (so that `|σ_i − σ̃_i| ≤ tol·σ₁/2` where
/// the floor, the residual's own rounding for the accurate pass or 0, is below the first bound). The next basis,
/// before orthonormalisation, has the columns `e_i·V_i + f_i·W_i`: `G·v_i/‖G·v_i‖` (one power
/// step), or `v_i` itself where `θ_i` is numerically zero. `weights` holds `e`, `f`, then the
/// `g_i = 1/θ_i` (0 where `θ_i` is numerically zero) of the power steps that follow without
/// Rayleigh–Ritz ([`power_step_columns`]): `3b` per image.
#[kernel]
pub fn ritz_weights(
    stats: &[f64],
    theta: &[f64],
    b: u32,
    k: u32,
    tol: f64,
    floor: f64,
    weights: &mut [f64],
    converged: &mut [u32],
) {
    let img = thread::block_idx_x() as usize;
    let bu = b as usize;
    let stats = stats.sub(img * 2 * bu, 2 * bu);
    let theta = theta.sub(img * bu, bu);
    let mut weights = weights.sub(img * 3 * bu, 3 * bu);
    let (tid, nt) = (thread::thread_idx_x() as usize, thread::block_dim_x() as usize);
    let flag = shared::dynamic::<u32>();
    // SAFETY (the flag): one u32 of the launch's 8 bytes; set before the first barrier, cleared by
    // any thread (all write the same value) between the barriers, read after the second.
    if tid == 0 {
        unsafe { flag.write(0, 1) };
    }
    thread::sync_threads();
    let theta0 = theta[0].max(0.0);
    let mut i = tid;
    while i < bu {
        let (th, norm_sq) = (theta[i], stats[i]);
        let good = th > NULL_THRESHOLD * theta0 && norm_sq > 0.0;
        let bound = tol * math::sqrt(theta0 * th);
        let target = if bound > floor * theta0 { bound } else { floor * theta0 };
        if (i as u32) < k && good && math::sqrt(stats[bu + i]) > target {
            unsafe { flag.write(0, 0) };
        }
        weights[i] = if good { 0.0 } else { 1.0 };
        weights[bu + i] = if good { 1.0 / math::sqrt(norm_sq) } else { 0.0 };
        weights[2 * bu + i] = if good { 1.0 / th } else { 0.0 };
        i += nt;
    }
    thread::sync_threads();
    if tid == 0 {
        converged[img] = unsafe { flag.read(0) };
    }
}

/// The next basis before orthonormalisation: `x_i = e_i·V_i + f_i·W_i` for every row and column
/// `i < b`, with `vw = [V W]` (`r × 2b` per image) and the `weights` `[e f]` of [`ritz_weights`];
/// `x` is `r × b` per image with row stride `2b` and images `r·2b` apart (the left half of the
/// work matrix `[Q Y]`). Grid `(x, 1, images)`, any 1-D block (grid-stride over `r·b`).
#[kernel]
pub fn combine_columns(vw: &[f64], weights: &[f64], r: u32, b: u32, x: &mut [f64]) {
    let z = thread::block_idx_z() as usize;
    let (bu, ru) = (b as usize, r as usize);
    let vw = vw.sub(z * ru * 2 * bu, ru * 2 * bu);
    let weights = weights.sub(z * 3 * bu, 2 * bu);
    let mut x = x.sub(z * ru * 2 * bu, ru * 2 * bu);
    let mut i = thread::index_1d() as usize;
    while i < ru * bu {
        let (row, col) = (i / bu, i % bu);
        let at = row * 2 * bu + col;
        x[at] = weights[col] * vw[at] + weights[bu + col] * vw[at + bu];
        i += thread::grid_stride_1d() as usize;
    }
}

/// A power step between Rayleigh–Ritz steps, in place: `Q_i ← e_i·Q_i + g_i·Y_i` for every row
/// and column `i < b` of `qy = [Q Y]` (`r × 2b` per image, images `r·2b` apart; `Y = G·Q`), with
/// the weights `e` and `g` of the last [`ritz_weights`]. Since Cholesky QR keeps the columns in
/// order, `Q_i` stays close to the `i`-th Ritz vector and `‖G·Q_i‖ ≈ θ_i`: the columns keep about
/// unit norm. Grid `(x, 1, images)`, any 1-D block (grid-stride over `r·b`).
#[kernel]
pub fn power_step_columns(qy: &mut [f64], weights: &[f64], r: u32, b: u32) {
    let z = thread::block_idx_z() as usize;
    let (bu, ru) = (b as usize, r as usize);
    let mut qy = qy.sub(z * ru * 2 * bu, ru * 2 * bu);
    let weights = weights.sub(z * 3 * bu, 3 * bu);
    let mut i = thread::index_1d() as usize;
    while i < ru * bu {
        let (row, col) = (i / bu, i % bu);
        let at = row * 2 * bu + col;
        qy[at] = weights[col] * qy[at] + weights[2 * bu + col] * qy[at + bu];
        i += thread::grid_stride_1d() as usize;
    }
}

/// After the first Cholesky QR pass of a plain subspace step (`Y = G·Q` orthonormalised into
/// `vw`'s left half, before the first Rayleigh–Ritz step), first half: per image and column
/// `i < b` of `vw`'s left half, `norms[i] += ‖column‖²` over a run of rows (`norms`, `b` per image,
/// must hold zeros; the runs' sums are added atomically). `vw` is `r × 2b` per image, row-major,
/// images `r·2b` apart.
///
/// Launch: grid `(⌈b/32⌉, row blocks, images)`, block `32 × RESIDUAL_ROWS` (x: a column, y: a row
/// lane), `32·RESIDUAL_ROWS·8` bytes of dynamic shared memory.
#[kernel]
pub fn basis_column_norms(vw: &[f64], r: u32, b: u32, norms: &mut [f64]) {
    let z = thread::block_idx_z() as usize;
    let (bu, ru) = (b as usize, r as usize);
    let vw = vw.sub(z * ru * 2 * bu, ru * 2 * bu);
    let mut norms = norms.sub(z * bu, bu);
    let (lane, row_lane) = (thread::thread_idx_x() as usize, thread::thread_idx_y() as usize);
    let col = thread::block_idx_x() as usize * 32 + lane;
    let (first, end) = row_run(ru);
    let mut norm = 0.0f64;
    if col < bu {
        let mut row = first + row_lane;
        while row < end {
            let v = vw[row * 2 * bu + col];
            norm = math::fma(v, v, norm);
            row += RESIDUAL_ROWS as usize;
        }
    }
    let sums = shared::dynamic::<f64>();
    // SAFETY (the shared accesses): indices below 32·RESIDUAL_ROWS, the launch's f64 count; each
    // is written by one thread before the barrier and read after it.
    unsafe { sums.write(row_lane * 32 + lane, norm) };
    thread::sync_threads();
    if row_lane == 0 && col < bu {
        let mut total = 0.0;
        for l in 0..RESIDUAL_ROWS as usize {
            total += unsafe { sums.read(l * 32 + lane) };
        }
        norms.atomic(col).add(total);
    }
}

/// Second half of [`basis_column_norms`]: each column of `vw`'s left half whose squared norm
/// (`norms`, `b` per image) is not within `[1/4, 4]` (not finite, or left near zero by a floored
/// pivot where `G` has fewer than `b` independent directions) takes back column `i` of Q (`qy`'s
/// left half, columns of about unit norm: the random start, or a basis after one or two passes),
/// so that the next pass or product again has `b` independent columns. `qy` and `vw` are `r × 2b`
/// per image, row-major, images `r·2b` apart. Grid `(x, 1, images)`, any 1-D block: a thread per
/// element of the `r × b` left half, grid-strided.
#[kernel]
pub fn restore_lost_columns(qy: &[f64], norms: &[f64], r: u32, b: u32, vw: &mut [f64]) {
    let z = thread::block_idx_z() as usize;
    let (bu, ru) = (b as usize, r as usize);
    let qy = qy.sub(z * ru * 2 * bu, ru * 2 * bu);
    let norms = norms.sub(z * bu, bu);
    let mut vw = vw.sub(z * ru * 2 * bu, ru * 2 * bu);
    let mut i = thread::index_1d() as usize;
    while i < ru * bu {
        let (row, col) = (i / bu, i % bu);
        if !(0.25..=4.0).contains(&norms[col]) {
            vw[row * 2 * bu + col] = qy[row * 2 * bu + col];
        }
        i += thread::grid_stride_1d() as usize;
    }
}

/// Leading Ritz pairs per image that a Chebyshev filter may deflate: `G − Σ θ_l·v_l·v_lᵀ` in place of
/// `G`. A converged pair far above the rest (the mean of a noise image: `θ₁` hundreds of times
/// `θ₂`) would otherwise get a filter value so large that every other column's rounding-sized
/// part along it swamps the column, which caps the filter's degree at 2–7.
pub const DEFLATED_PAIRS: usize = 4;

/// For the deflated Chebyshev filter: per image, column `i < b` of the filter's current basis
/// (the columns of `vw` from `newer`, `r × 2b` per image, images `r·2b` apart) and locked pair `l`
/// ([`DEFLATED_PAIRS`] per image), `overlaps[l·b + i] += θ_l·(v_lᵀ·x_i)`, with the locked Ritz
/// vectors `locked` (`r × DEFLATED_PAIRS` per image, row-major) and their values `locked_theta`
/// (`DEFLATED_PAIRS` per image, 0 where a pair is not locked). `overlaps` must hold zeros: the
/// rows are dealt over `grid.y` blocks (each a run of about `r/grid.y` rows), whose partial sums
/// are added atomically, so that a tall `r` fills the GPU (one block per 32 columns took
/// 0.17 ms at `r = 4096`, `b = 512`).
///
/// Launch: grid `(⌈b/32⌉, row blocks, images)`, block `32 × RESIDUAL_ROWS` (x: a column, y: a row
/// lane), `32·RESIDUAL_ROWS·DEFLATED_PAIRS·8` bytes of dynamic shared memory.
#[kernel]
pub fn deflation_overlaps(
    vw: &[f64],
    locked: &[f64],
    locked_theta: &[f64],
    r: u32,
    b: u32,
    newer: u32,
    overlaps: &mut [f64],
) {
    const L: usize = DEFLATED_PAIRS;
    let z = thread::block_idx_z() as usize;
    let (bu, ru) = (b as usize, r as usize);
    let vw = vw.sub(z * ru * 2 * bu, ru * 2 * bu);
    let locked = locked.sub(z * ru * L, ru * L);
    let theta = locked_theta.sub(z * L, L);
    let mut overlaps = overlaps.sub(z * L * bu, L * bu);
    let (lane, row_lane) = (thread::thread_idx_x() as usize, thread::thread_idx_y() as usize);
    let col = thread::block_idx_x() as usize * 32 + lane;
    let (first, end) = row_run(ru);
    let mut sums = [0.0f64; L];
    if col < bu {
        let mut row = first + row_lane;
        while row < end {
            let x = vw[row * 2 * bu + newer as usize + col];
            for (l, sum) in sums.iter_mut().enumerate() {
                *sum = math::fma(locked[row * L + l], x, *sum);
            }
            row += RESIDUAL_ROWS as usize;
        }
    }
    let partial = shared::dynamic::<f64>();
    let lanes = (32 * RESIDUAL_ROWS) as usize;
    let slot = row_lane * 32 + lane;
    // SAFETY (the shared accesses): indices below L·32·RESIDUAL_ROWS, the launch's f64 count; each
    // is written by one thread before the barrier and read after it.
    for (l, &sum) in sums.iter().enumerate() {
        unsafe { partial.write(l * lanes + slot, sum) };
    }
    thread::sync_threads();
    if row_lane == 0 && col < bu {
        for l in 0..L {
            let mut total = 0.0;
            for lane_row in 0..RESIDUAL_ROWS as usize {
                total += unsafe { partial.read(l * lanes + lane_row * 32 + lane) };
            }
            overlaps.atomic(l * bu + col).add(theta[l] * total);
        }
    }
}

/// One step of the Chebyshev filter between Rayleigh–Ritz steps, in place in `vw` (`r × 2b` per
/// image, images `r·2b` apart), whose halves hold the filter's last two bases `X_{j−1}` (the
/// columns from `newer`, 0 or `b`) and `X_{j−2}` (the other half), which this overwrites with
/// `X_j = a·Z + p·X_{j−1} + q·X_{j−2}` for every row and column `i < b`. `Z = G'·X_{j−1}`, with
/// `G·X_{j−1}` the right half of `qy = [Q Y]` (same layout), read only where `a ≠ 0`, and `G'` the
/// deflated `G − Σ θ_l·v_l·v_lᵀ` where an image locked pairs (`locked_theta`, [`DEFLATED_PAIRS`]
/// per image, not 0): `Z = G·X_{j−1} − locked·overlaps` ([`deflation_overlaps`]).
/// `coefficients` holds `[a, p, q]` per step and image, `3·images` per step; this launch reads
/// step `step`'s. The Chebyshev three-term recurrence takes `a = 2σ_j/e`, `p = −c·a`,
/// `q = −σ_{j−1}σ_j`; its first step, from `[V W]` with `W = G·V` already known, `a = 0`
/// (`newer` = 0: `X_1 = p·V + q·W`); an image whose filter has ended holds its basis with
/// `[0, 1, 0]`.
///
/// The first step (`step` = 0) also saves `V`'s first [`DEFLATED_PAIRS`] columns into `locked`
/// (`r × DEFLATED_PAIRS` per image, row-major), and the last (`step = last`) puts the locked
/// ones back in their columns of the basis it writes, unfiltered. Grid `(x, 1, images)`, any 1-D
/// block (grid-stride over `r·b`).
#[kernel]
pub fn chebyshev_step(
    qy: &[f64],
    coefficients: &[f64],
    r: u32,
    b: u32,
    step: u32,
    last: u32,
    newer: u32,
    locked_theta: &[f64],
    overlaps: &[f64],
    locked: &mut [f64],
    vw: &mut [f64],
) {
    const L: usize = DEFLATED_PAIRS;
    let (z, images) = (thread::block_idx_z() as usize, thread::grid_dim_z() as usize);
    let (bu, ru) = (b as usize, r as usize);
    let qy = qy.sub(z * ru * 2 * bu, ru * 2 * bu);
    let mut vw = vw.sub(z * ru * 2 * bu, ru * 2 * bu);
    let mut locked = locked.sub(z * ru * L, ru * L);
    let theta = locked_theta.sub(z * L, L);
    let overlaps = overlaps.sub(z * L * bu, L * bu);
    let c = coefficients.sub((step as usize * images + z) * 3, 3);
    let (a, p, q) = (c[0], c[1], c[2]);
    let deflating = a != 0.0 && (0..L).any(|l| theta[l] != 0.0);
    let (newer, older) = (newer as usize, bu - newer as usize);
    let mut i = thread::index_1d() as usize;
    while i < ru * bu {
        let (row, col) = (i / bu, i % bu);
        let at = row * 2 * bu + col;
        if step == 0 && col < L {
            locked[row * L + col] = vw[at];
        }
        let product = if a != 0.0 {
            let mut gx = qy[at + bu];
            if deflating {
                for l in 0..L {
                    gx = math::fma(-locked[row * L + l], overlaps[l * bu + col], gx);
                }
            }
            a * gx
        } else {
            0.0
        };
        vw[at + older] = if step == last && col < L && theta[col] != 0.0 {
            locked[row * L + col]
        } else {
            product + p * vw[at + newer] + q * vw[at + older]
        };
        i += thread::grid_stride_1d() as usize;
    }
}

/// Cholesky QR's small step, one block per image (`blockIdx.x`), any 1-D block size; dynamic
/// shared memory as for [`ritz_eigen`]. In: the Gram matrix `w = XᵀX` (`b × b` per image,
/// row-major; only the upper triangle is read). Out: `rinv = R⁻¹` (`b × b`, upper triangular)
/// for `w = RᵀR`, so that `X·R⁻¹` has orthonormal columns. A pivot that lost all but 12 digits of
/// its diagonal element (a numerically dependent column) is floored there, so the column is
/// scaled by at most 1e6 instead of dividing by rounding noise.
///
/// # Safety
/// The launch gives at least 8 bytes of dynamic shared memory, and each image's parts lie inside
/// the slices: `b × b` of `w` and `rinv`, [`eigen_scratch`](super::eigensolver::eigen_scratch)`(b)`
/// of `scratch`. Unchecked on the GPU, like the Jacobi work space; the simulator checks every
/// access.
#[kernel]
pub unsafe fn cholesky_inverse(w: &[f64], b: u32, scratch: &mut [f64], rinv: &mut [f64]) {
    let img = thread::block_idx_x() as usize;
    let bu = b as usize;
    let bb = bu * bu;
    // SAFETY (whole body): the kernel's contract: the image's parts lie inside the slices and the
    // launch gives the solver's flag; the work space is in shared memory when the launch gives
    // `jacobi_shared_bytes(b)`, else in the image's scratch part. Every thread runs all of it, each
    // element is written by one thread between barriers (a row's trailing columns by a warp's
    // lanes, a column of `R⁻¹` by one thread) and read only after them.
    unsafe {
        let w = w.sub_unchecked(img * bb, bb);
        let (mut scratch, _) = image_scratch(scratch, b);
        let space = JacobiSpace::new(scratch.as_mut_ptr(), bu);
        let mut rinv = rinv.sub_unchecked(img * bb, bb);
        let (tid, nt) = (thread::thread_idx_x() as usize, thread::block_dim_x() as usize);
        // W (upper triangle) into x; its diagonal also into z's first row, for the pivot floors.
        let mut i = tid;
        while i < bb {
            let (r, c) = (i / bu, i % bu);
            if r <= c {
                let value = w.get_unchecked(i);
                space.set_x(r, c, value);
                if r == c {
                    space.set_z(0, c, value);
                }
            }
            i += nt;
        }
        thread::sync_threads();
        // Right-looking Cholesky, in place, one barrier per step: step j subtracts row j's outer
        // product divided by the pivot (floored) from the trailing upper triangle; row j itself is
        // final from then on and is scaled into row j of R at the end.
        for j in 0..bu {
            let inv = 1.0 / space.x(j, j).max(PIVOT_FLOOR * space.z(0, j)).max(f64::MIN_POSITIVE);
            // Warp per row, lanes along the row.
            let mut r = j + 1 + tid / 32;
            while r < bu {
                let xjr = space.x(j, r) * inv;
                let mut c = r + tid % 32;
                while c < bu {
                    space.set_x(r, c, space.x(r, c) - xjr * space.x(j, c));
                    c += 32;
                }
                r += nt.div_ceil(32);
            }
            thread::sync_threads();
        }
        // The pivots √max(x_jj, floor) replace the floors in z's first row; then the rows are scaled.
        let mut j = tid;
        while j < bu {
            space.set_z(
                0,
                j,
                math::sqrt(space.x(j, j).max(PIVOT_FLOOR * space.z(0, j)).max(f64::MIN_POSITIVE)),
            );
            j += nt;
        }
        thread::sync_threads();
        let mut i = tid;
        while i < bb {
            let (r, c) = (i / bu, i % bu);
            if r < c {
                space.set_x(r, c, space.x(r, c) / space.z(0, r));
            }
            i += nt;
        }
        thread::sync_threads();
        let mut j = tid;
        while j < bu {
            space.set_x(j, j, space.z(0, j));
            j += nt;
        }
        thread::sync_threads();
        // R⁻¹ into z (free again), one column per thread by back substitution; then out to rinv.
        let mut c = tid;
        while c < bu {
            for r in (0..bu).rev() {
                let value = if r > c {
                    0.0
                } else {
                    let mut acc = if r == c { 1.0 } else { 0.0 };
                    for l in r + 1..=c {
                        acc -= space.x(r, l) * space.z(l, c);
                    }
                    acc / space.x(r, r)
                };
                space.set_z(r, c, value);
            }
            c += nt;
        }
        thread::sync_threads();
        let mut i = tid;
        while i < bb {
            rinv.set_unchecked(i, space.z(i / bu, i % bu));
            i += nt;
        }
    }
}
