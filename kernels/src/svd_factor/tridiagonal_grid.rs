//! The tridiagonal solver's first stage for one matrix or a few, by a group of blocks per image:
//! the Householder tridiagonalisation of `T` with its rows spread over the `G` blocks of the group
//! (`blockIdx.x`; row `i` belongs to block `i mod G`), which meet at one grid barrier per column.
//! One block alone ([`tridiagonal_reduce`](super::tridiagonal_reduce)) is bound by its barriers
//! and, past `b = 234`, by reading the matrix from global memory; here the rows of a block fit
//! its shared memory up to much larger `b`, and a column costs one grid barrier.
//!
//! Step `k` (annihilating column `k` below row `k + 1`) in every block, with the previous step's
//! `v`, `τ` and the `p = τ·A·v` its blocks left in global memory:
//! 1. `p` and the pivot row `k` from global memory (where its owner left it) into shared memory,
//!    all loads at once; every warp: `K = (τ/2)·pᵀv`; then `w = p − K·v` and the pivot row of
//!    the updated matrix, `A(k, ·) − v_k·w − w_k·v`;
//! 2. every warp: the new reflector's `β`, `τ` from `‖A(k+2.., k)‖` (the same bits in each);
//! 3. a warp per held row `i > k`: the previous step's rank-2 update `A(i, ·) −= v_i·w + w_i·v`
//!    and `p_i = τ·A(i, ·)·v` in the same pass; the owner of row `k + 1` publishes it;
//! 4. the grid barrier.
//!
//! So each step's update of the trailing matrix is applied in the next step's pass, fused with its
//! product. Where a block's rows do not fit its shared memory (`b = 512` for 16 images, 8 blocks
//! each), they stay in global memory only until the part still to reduce fits, then move. Block 0 writes `d`, `e`, `τ` and the reflectors where the one-block reduction does
//! ([`tridiagonal_scratch_parts`]), for the divide and conquer and the back-transformation.

use super::band_reduction::reflector;
use super::tridiagonal::{Packed, Vector, packed, tridiagonal_scratch, tridiagonal_scratch_parts};
use gpu_std::grid::GridBarrier;
use gpu_std::{kernel, math, shared, thread, warp};

/// Vectors of `b` f64 in each block's shared memory: the previous step's `v`, `p` and `w`, this
/// step's `v`.
const GRID_VECTORS: u32 = 4;

/// Most rows a block of a group of `groups` holds of a `b × b` matrix: `⌈b / groups⌉`.
pub const fn tridiagonal_grid_rows(b: u32, groups: u32) -> u32 {
    b.div_ceil(groups)
}

/// Dynamic shared memory, bytes, with which [`tridiagonal_reduce_grid`] keeps each block's rows in
/// shared memory: `8·(4b + ⌈b / groups⌉·b)`.
pub const fn tridiagonal_grid_shared_bytes(b: u32, groups: u32) -> u32 {
    8 * (GRID_VECTORS * b + tridiagonal_grid_rows(b, groups) * b)
}

/// The least dynamic shared memory of [`tridiagonal_reduce_grid`], bytes (its vectors; the rows
/// then stay in the global scratch): `32·b`.
pub const fn tridiagonal_grid_small_bytes(b: u32) -> u32 {
    8 * GRID_VECTORS * b
}

/// The Householder tridiagonalisation of each image's `T` by a group of blocks: grid
/// `(groups, images)`, launched cooperatively (every block resident at once: the blocks of a group
/// wait for each other once per column), blocks of whole warps up to 512 threads. Dynamic shared
/// memory [`tridiagonal_grid_shared_bytes`]`(b, groups)` keeps the rows in shared memory, at least
/// [`tridiagonal_grid_small_bytes`]`(b)` leaves them in the scratch, and between the two a block
/// keeps its rows in the scratch until their trailing part (the columns still to reduce) fits its
/// shared memory, then there. Leaves `d`, `e`, `τ` and the
/// reflectors as [`tridiagonal_reduce`](super::tridiagonal_reduce) does; the scratch's
/// eigenvector buffers are its work space (the matrix, and `p` of two steps).
///
/// In: `t` (`b × b` per image, row-major, symmetric; `(T + Tᵀ)/2` is used); `barriers`: a `u32`
/// per image, zero when the launch starts.
///
/// # Safety
/// A cooperative launch of that shape, `1 ≤ b ≤` [`TRIDIAGONAL_MAX_B`](super::TRIDIAGONAL_MAX_B);
/// each image's parts lie inside the slices: `b × b` of `t`, `tridiagonal_scratch(b)` of
/// `scratch`, one of `barriers`, which no other kernel uses meanwhile. Unchecked on the GPU; the
/// simulator checks every access.
#[kernel(launch_bounds(512, 1))]
pub unsafe fn tridiagonal_reduce_grid(t: &[f64], b: u32, scratch: &mut [f64], barriers: &mut [u32]) {
    let (g, img) = (thread::block_idx_x() as usize, thread::block_idx_y() as usize);
    let groups = thread::grid_dim_x() as usize;
    let (bu, bb) = (b as usize, b as usize * b as usize);
    let parts = tridiagonal_scratch_parts(b);
    let (tid, nt) = (thread::thread_idx_x() as usize, thread::block_dim_x() as usize);
    let (lane, warp_id, warps) = (tid % 32, tid / 32, nt / 32);
    let add = |x: f64, y: f64| x + y;
    // SAFETY (whole body): the kernel's contract: the image's parts lie inside the slices, the
    // launch is cooperative with the shared memory of the vectors (and of the rows where they are
    // used from there). Between barriers each element is written by one thread and read by it
    // alone, or read by others only after a barrier (a block's, or the group's for global memory).
    unsafe {
        let t_in = t.sub_unchecked(img * bb, bb);
        let per_image = tridiagonal_scratch(b) as usize;
        let base = Vector::image_part(scratch, img, per_image);
        // The matrix, both triangles, row-major: the pivot row of each step is read from here.
        let a = base.sub(parts.work as usize, bb);
        // p = τ·A·v of even and odd steps: a step writes one while the blocks still read the other.
        let p_steps = base.sub(parts.work as usize + bb, 2 * bu);
        let reflectors = Packed(base.sub(parts.packed as usize, packed(b) as usize));
        let out = |offset: u32| base.sub(offset as usize, bu);
        let (d_out, e_out, tau_out) = (out(parts.diagonal), out(parts.off_diagonal), out(parts.tau));
        let barrier = GridBarrier::new(barriers.sub_unchecked(img, 1).as_mut_ptr(), groups as u32);

        let n_vectors = GRID_VECTORS as usize * bu;
        let vectors = Vector { p: shared::region::<f64>(0, n_vectors).as_ptr(), len: n_vectors };
        let v = |i: usize| vectors.sub(i * bu, bu);
        let (mut v_prev, p_shared, w_prev, mut v_here) = (v(0), v(1), v(2), v(3));
        // The block's rows stay in global memory until their trailing part (columns m.. of its rows
        // i ≥ m) fits its shared memory; from row `switch` on they are there, slot (i − first)/G
        // with columns switch.. (`switch` = 0: from the start).
        let capacity = (shared::dynamic_bytes() / 8).saturating_sub(n_vectors);
        let first_held = |m: usize| m + (g + groups - m % groups) % groups;
        let held_from =
            |m: usize| if first_held(m) >= bu { 0 } else { (bu - 1 - first_held(m)) / groups + 1 };
        let mut switch = 0;
        while held_from(switch) * (bu - switch) > capacity {
            switch += 1;
        }
        let (first, width) = (first_held(switch), bu - switch);
        let local = Vector { p: shared::region::<f64>(8 * n_vectors, capacity).as_ptr(), len: capacity };
        // Row `i` of this block (`i ≡ g mod groups`) from column `m` on: its elements from column
        // `.1` on, in shared memory from row `switch` on.
        let row = |i: usize, m: usize| {
            if m >= switch {
                (local.sub((i - first) / groups * width, width), switch)
            } else {
                (a.sub(i * bu, bu), 0)
            }
        };

        // This block's rows of (T + Tᵀ)/2, a warp per row: into the scratch, and into shared memory
        // where they are kept.
        let mut i = g + groups * warp_id;
        while i < bu {
            let (r, _) = row(i, 0);
            let mut c = lane;
            while c < bu {
                let x = 0.5 * (t_in.get_unchecked(i * bu + c) + t_in.get_unchecked(c * bu + i));
                a.set(i * bu + c, x);
                if switch == 0 {
                    r.set(c, x);
                }
                c += 32;
            }
            i += groups * warps;
        }
        barrier.sync();

        // The previous step's τ and the first element of its v (v_prev holds α there).
        let (mut tau_prev, mut v0_prev) = (0.0f64, 0.0f64);
        for k in 0..bu.saturating_sub(1) {
            let m = k + 1;
            let p_prev = p_steps.sub((k + 1) % 2 * bu, bu);
            let p_here = p_steps.sub(k % 2 * bu, bu);
            let (vp, v0p) = (v_prev, v0_prev);
            let vprev = move |c: usize| if c == k { v0p } else { vp.get(c) };
            // The previous step's p and the pivot row k into shared memory, every load of the
            // block in flight at once (each thread its own elements).
            let p_k = if k > 0 { p_prev.get(k) } else { 0.0 };
            let mut c = k + tid;
            while c < bu {
                if k > 0 {
                    p_shared.set(c, p_prev.get(c));
                }
                v_here.set(c, a.get(k * bu + c));
                c += nt;
            }
            thread::sync_threads();
            if k > 0 {
                // Every warp: K = (τ/2)·pᵀv of the previous step, the same bits in each.
                let mut s = 0.0f64;
                let mut c = k + lane;
                while c < bu {
                    s = math::fma(p_shared.get(c), vprev(c), s);
                    c += 32;
                }
                let half_k = 0.5 * tau_prev * warp::reduce(s, add);
                // w = p − K·v and the pivot row of the updated matrix, the same elements per
                // thread as above (w's element k from every thread alike).
                let wk = math::fma(-half_k, v0p, p_k);
                let mut c = k + tid;
                while c < bu {
                    let vc = vprev(c);
                    let w = math::fma(-half_k, vc, p_shared.get(c));
                    w_prev.set(c, w);
                    v_here.set(c, v_here.get(c) - v0p * w - wk * vc);
                    c += nt;
                }
            }
            thread::sync_threads();
            // Every warp: the reflector of x = A(m.., k) from ‖x[1..]‖², the same bits in each.
            let mut s = 0.0f64;
            let mut c = m + 1 + lane;
            while c < bu {
                let x = v_here.get(c);
                s = math::fma(x, x, s);
                c += 32;
            }
            let sigma2 = warp::reduce(s, add);
            let (dk, alpha) = (v_here.get(k), v_here.get(m));
            let (beta, tau_k, v0) = reflector(alpha, sigma2);
            let vh = v_here;
            let vnew = move |c: usize| if c == m { v0 } else { vh.get(c) };
            if g == 0 {
                if tid == 0 {
                    d_out.set(k, dk);
                    e_out.set(k, beta);
                    tau_out.set(k, tau_k);
                }
                let mut i = m + tid;
                while i < bu {
                    reflectors.set(i, k, vnew(i));
                    i += nt;
                }
            }
            if switch > 0 && m == switch {
                // The trailing part of the block's rows now fits: into shared memory, as they are
                // in global memory (the previous step's update still to come, in the pass below).
                let mut i = first + warp_id * groups;
                while i < bu {
                    let (r, _) = row(i, m);
                    let mut c = m + lane;
                    while c < bu {
                        r.set(c - switch, a.get(i * bu + c));
                        c += 32;
                    }
                    i += warps * groups;
                }
                thread::sync_threads();
            }
            // A warp per held row i ≥ m: the previous step's rank-2 update and p_i = τ·A(i, ·)·v
            // in one pass; row m's owner publishes it for the next step.
            let mut i = m + (g + groups - m % groups) % groups + warp_id * groups;
            while i < bu {
                let (r, offset) = row(i, m);
                let (vi, wi) = if k > 0 { (vprev(i), w_prev.get(i)) } else { (0.0, 0.0) };
                let publish = m >= switch && i == m;
                let mut acc = 0.0f64;
                let mut c = m + lane;
                while c < bu {
                    let mut x = r.get(c - offset);
                    if k > 0 {
                        x = x - vi * w_prev.get(c) - wi * vprev(c);
                        r.set(c - offset, x);
                        if publish {
                            a.set(i * bu + c, x);
                        }
                    }
                    acc = math::fma(x, vnew(c), acc);
                    c += 32;
                }
                let sum = warp::reduce(acc, add);
                if lane == 0 {
                    p_here.set(i, tau_k * sum);
                }
                i += warps * groups;
            }
            core::mem::swap(&mut v_prev, &mut v_here);
            (tau_prev, v0_prev) = (tau_k, v0);
            barrier.sync();
        }
        if g == 0 && tid == 0 && bu == 1 {
            d_out.set(0, a.get(0));
            e_out.set(0, 0.0);
            tau_out.set(0, 0.0);
        } else if g == 0 && tid == 0 {
            // The last step's update of A(b−1, b−1): w = p − K·v at its one element.
            let last = bu - 1;
            let p = p_steps.get((bu - 2) % 2 * bu + last);
            let w = math::fma(-0.5 * tau_prev * p * v0_prev, v0_prev, p);
            d_out.set(last, a.get(last * bu + last) - 2.0 * v0_prev * w);
            e_out.set(last, 0.0);
            tau_out.set(last, 0.0);
        }
    }
}
