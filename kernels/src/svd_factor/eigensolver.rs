//! One block's cyclic Jacobi eigensolver in shared memory: the work space of an image's `b × b`
//! problem, its sizes, and the sweeps.

use gpu_std::math;
use gpu_std::slice::SliceMut;
use gpu_std::{shared, thread};

/// Cap on Jacobi sweeps; converged matrices need far fewer (quadratic convergence).
pub(super) const MAX_SWEEPS: u32 = 40;

/// Off-diagonal elements at or below this fraction of the largest diagonal one are rounding noise
/// to the Jacobi solver (they move eigenvalues by no more than that fraction of the largest).
const JACOBI_NOISE: f64 = 1e-13;

/// Row stride of the Jacobi matrices for size `b`: odd, so that a warp walking down a column
/// touches different shared-memory banks.
const fn jacobi_ld(b: u32) -> u32 {
    b | 1
}

/// f64 elements of one image's Jacobi work space: the matrix and the rotations' accumulator
/// (`b × ld` each) and the rotations of a round (c, s and the pair, per pair).
const fn jacobi_elements(b: u32) -> u32 {
    2 * b * jacobi_ld(b) + 2 * b + 2
}

/// Dynamic shared memory, bytes, with which [`ritz_eigen`](super::ritz::ritz_eigen) and
/// [`cholesky_inverse`](super::ritz::cholesky_inverse) keep their Jacobi work space in shared
/// memory instead of global scratch (a flag, then the space).
pub const fn jacobi_shared_bytes(b: u32) -> u32 {
    8 + 8 * jacobi_elements(b)
}

/// f64 scratch per image of [`ritz_eigen`](super::ritz::ritz_eigen) and
/// [`cholesky_inverse`](super::ritz::cholesky_inverse), elements: the Jacobi work space when it
/// does not fit in shared memory, and two vectors.
pub const fn eigen_scratch(b: u32) -> u32 {
    jacobi_elements(b) + 2 * b
}

/// Image `blockIdx.x`'s part of the `scratch` of [`ritz_eigen`](super::ritz::ritz_eigen) and
/// [`cholesky_inverse`](super::ritz::cholesky_inverse) ([`eigen_scratch`]`(b)` elements), and
/// where its two vectors start in it (after the Jacobi work space).
///
/// # Safety
/// The image's part lies inside `scratch` (checked only in the simulator).
#[inline(always)]
#[track_caller]
pub(super) unsafe fn image_scratch(scratch: SliceMut<f64>, b: u32) -> (SliceMut<f64>, usize) {
    let per_image = eigen_scratch(b) as usize;
    (
        // SAFETY: the image's part lies inside `scratch` (the caller's contract).
        unsafe { scratch.sub_unchecked(thread::block_idx_x() as usize * per_image, per_image) },
        jacobi_elements(b) as usize,
    )
}

/// One image's Jacobi work space: matrix `x` and accumulator `z` (`b × b`, row stride `ld`) and
/// the per-round rotations; in shared memory when the launch gave [`jacobi_shared_bytes`], else in
/// global scratch. Like shared memory's arrays, its accessors are unchecked on the GPU (the
/// solver's hot loops) and checked in the simulator.
#[derive(Clone, Copy)]
pub(super) struct JacobiSpace {
    x: *mut f64,
    z: *mut f64,
    rot: *mut f64,
    ld: usize,
    /// The matrices' size `b`, for the simulator's checks.
    size: usize,
}

impl JacobiSpace {
    /// The work space for size `b`: in shared memory after the flag when the launch gave
    /// [`jacobi_shared_bytes`]`(b)`, else at `scratch`.
    ///
    /// # Safety
    /// `scratch` points to [`jacobi_elements`]`(b)` f64 that the block may use (or the launch
    /// gave enough shared memory).
    #[inline(always)]
    pub(super) unsafe fn new(scratch: *mut f64, b: usize) -> JacobiSpace {
        let ld = jacobi_ld(b as u32) as usize;
        let base = if shared::dynamic_bytes() >= jacobi_shared_bytes(b as u32) as usize {
            shared::region::<f64>(8, jacobi_elements(b as u32) as usize).as_ptr()
        } else {
            scratch
        };
        // SAFETY: both offsets lie inside the `jacobi_elements(b)` at `base` (the contract).
        let (z, rot) = unsafe { (base.add(b * ld), base.add(2 * b * ld)) };
        JacobiSpace { x: base, z, rot, ld, size: b }
    }

    /// The offset of element `(i, j)` of a matrix; in the simulator, checks `i, j < b`.
    #[inline(always)]
    #[track_caller]
    pub(super) fn offset(self, i: usize, j: usize) -> usize {
        #[cfg(target_arch = "nvptx64")]
        let _ = self.size;
        #[cfg(not(target_arch = "nvptx64"))]
        assert!(i < self.size && j < self.size, "Jacobi element ({i}, {j}) of a {0} × {0} matrix", self.size);
        i * self.ld + j
    }

    /// Element `(i, j)` of the matrix (`i, j < b`; no other thread writes it meanwhile).
    #[inline(always)]
    #[track_caller]
    pub(super) unsafe fn x(self, i: usize, j: usize) -> f64 {
        // SAFETY: i, j < b, inside the matrix; no write races (the caller's contract).
        unsafe { *self.x.add(self.offset(i, j)) }
    }

    /// Writes element `(i, j)` of the matrix (`i, j < b`; no other thread accesses it meanwhile).
    #[inline(always)]
    #[track_caller]
    pub(super) unsafe fn set_x(self, i: usize, j: usize, value: f64) {
        // SAFETY: i, j < b, inside the matrix; no other access races (the caller's contract).
        unsafe { *self.x.add(self.offset(i, j)) = value };
    }

    /// Element `(i, j)` of the accumulated rotations (as for [`JacobiSpace::x`]).
    #[inline(always)]
    #[track_caller]
    pub(super) unsafe fn z(self, i: usize, j: usize) -> f64 {
        // SAFETY: i, j < b, inside the accumulator; no write races (the caller's contract).
        unsafe { *self.z.add(self.offset(i, j)) }
    }

    /// Writes element `(i, j)` of the accumulated rotations (as for [`JacobiSpace::set_x`]).
    #[inline(always)]
    #[track_caller]
    pub(super) unsafe fn set_z(self, i: usize, j: usize, value: f64) {
        // SAFETY: i, j < b, inside the accumulator; no other access races (the caller's contract).
        unsafe { *self.z.add(self.offset(i, j)) = value };
    }

    /// Rotation `t` of the current round (`t < half`, the round's pair count): `(c, s, p, q)`.
    /// The `2·half` values c, s come first, then the pairs as u32.
    #[inline(always)]
    pub(super) unsafe fn rotation(self, half: usize, t: usize) -> (f64, f64, usize, usize) {
        // SAFETY: t < half ≤ ⌈b/2⌉: the 2·half f64 and 2·half u32 lie inside the `2b + 2` f64 of
        // the rotations; written before the caller's last barrier (the caller's contract).
        unsafe {
            let pq = self.rot.add(2 * half) as *const u32;
            (
                *self.rot.add(2 * t),
                *self.rot.add(2 * t + 1),
                *pq.add(2 * t) as usize,
                *pq.add(2 * t + 1) as usize,
            )
        }
    }

    /// Stores rotation `t` of the current round (see [`JacobiSpace::rotation`]).
    #[inline(always)]
    pub(super) unsafe fn set_rotation(self, half: usize, t: usize, (c, s, p, q): (f64, f64, usize, usize)) {
        // SAFETY: as for `rotation`; rotation t is written by one thread between barriers.
        unsafe {
            let pq = self.rot.add(2 * half) as *mut u32;
            *self.rot.add(2 * t) = c;
            *self.rot.add(2 * t + 1) = s;
            *pq.add(2 * t) = p as u32;
            *pq.add(2 * t + 1) = q as u32;
        }
    }
}

/// Cyclic parallel Jacobi on the symmetric `n × n` matrix `space.x`, with the rotations
/// accumulated into `space.z` (`x ← JᵀxJ`, `z ← zJ`): on return `x` is diagonal to working
/// precision. Each round rotates `⌈n/2⌉` disjoint pairs at once (the circle method); a pair is
/// skipped when `|x_pq| ≤ max(ε·√|x_pp·x_qq|, JACOBI_NOISE·scale)`, `scale` being the size of the
/// matrix the caller cares about (its largest diagonal element, or the whole matrix's when this
/// is a block of a larger one). A sweep starts with one pass over the off-diagonal elements that
/// decides whether any pair needs a rotation at all (after the first iteration of the subspace
/// iteration the matrix is nearly diagonal, and most calls end after a few sweeps). A round takes
/// two barriers: the rotations are chosen, then both sides of `x` are rotated at once, one 2 × 2
/// block (rows of one pair, columns of another) per thread and step, only the blocks on and above
/// the diagonal computed and mirrored, while other threads rotate the columns of `z`. Work is
/// split by warp (one pair per warp and step) and lane (columns or rows), so each thread's loop
/// needs no division and a warp's pair is uniform. At most `sweeps` sweeps. Returns whether any
/// pair was rotated. Uses the first u32 of dynamic shared memory as a flag.
///
/// # Safety
/// All threads of the block call it; the block is a whole number of warps; `space` holds
/// matrices of size at least `n`, written before the caller's last barrier; the launch gives at
/// least 4 bytes of dynamic shared memory (the flag).
#[inline(always)]
pub(super) unsafe fn jacobi(space: JacobiSpace, n: usize, scale: f64, sweeps: u32) -> bool {
    let (tid, nt) = (thread::thread_idx_x() as usize, thread::block_dim_x() as usize);
    let (lane, warp, warps) = (tid % 32, tid / 32, nt.div_ceil(32));
    let players = n + n % 2;
    let half = players / 2;
    let flag = shared::region::<u32>(0, 1);
    if players < 2 {
        thread::sync_threads();
        return false;
    }
    let noise = JACOBI_NOISE * scale;
    let mut rotated = false;
    // The skip threshold of the pair (p, q).
    let threshold = |p: usize, q: usize| -> f64 {
        // SAFETY: p, q < n; the diagonal is written only after the barrier that follows the reads.
        (f64::EPSILON * math::sqrt(math::abs(unsafe { space.x(p, p) * space.x(q, q) }))).max(noise)
    };
    // Element (i, j) of x, 0 outside the matrix (the odd size's dummy player).
    let get = |i: usize, j: usize| -> f64 {
        // SAFETY (`get`, `put`): i, j < n; each element of a round's 2 × 2 blocks is read and
        // written by the one thread of its block (the pairs are disjoint).
        if i < n && j < n { unsafe { space.x(i, j) } } else { 0.0 }
    };
    let put = |i: usize, j: usize, v: f64| {
        if i < n && j < n {
            // SAFETY: as for `get`.
            unsafe { space.set_x(i, j, v) };
        }
    };
    // SAFETY: t < half, written before the round's first barrier.
    let pair = |t: usize| unsafe { space.rotation(half, t) };
    for _sweep in 0..sweeps {
        if tid == 0 {
            // SAFETY: the flag, the launch's first u32 (the contract); read only after barriers.
            unsafe { flag.write(0, 0) };
        }
        thread::sync_threads();
        let mut p = warp;
        while p < n {
            let mut q = p + 1 + lane;
            while q < n {
                // SAFETY: p, q < n; x is only read until the barrier. The flag: every writer
                // writes the same value, read after the barrier.
                unsafe {
                    if math::abs(space.x(p, q)) > threshold(p, q) {
                        flag.write(0, 1);
                    }
                }
                q += 32;
            }
            p += warps;
        }
        thread::sync_threads();
        // SAFETY: written before the barrier; rewritten only after the next one.
        let more = unsafe { flag.read(0) };
        thread::sync_threads();
        if more == 0 {
            break;
        }
        rotated = true;
        for round in 0..players - 1 {
            // Pair t of this round (player 0 fixed, the others rotating).
            let mut t = tid;
            while t < half {
                let player = |pos: usize| if pos == 0 { 0 } else { (pos - 1 + round) % (players - 1) + 1 };
                let (p, q) = (player(t), player(players - 1 - t));
                let (p, q) = (p.min(q), p.max(q));
                let (mut c, mut s) = (1.0, 0.0);
                if q < n {
                    // SAFETY: p < q < n; x is only read until the barrier.
                    let apq = unsafe { space.x(p, q) };
                    if math::abs(apq) > threshold(p, q) {
                        // SAFETY: as above.
                        let tau = unsafe { space.x(q, q) - space.x(p, p) } / (2.0 * apq);
                        let tt = if tau >= 0.0 { 1.0 } else { -1.0 }
                            / (math::abs(tau) + math::sqrt(math::fma(tau, tau, 1.0)));
                        c = 1.0 / math::sqrt(math::fma(tt, tt, 1.0));
                        s = tt * c;
                    }
                }
                // SAFETY: t < half; rotation t is written by this thread alone, read after the
                // barrier.
                unsafe { space.set_rotation(half, t, (c, s, p, q)) };
                t += nt;
            }
            thread::sync_threads();
            // x ← JᵀxJ: warp w takes the row pairs a = w, w + warps, …; its lanes the column
            // pairs b ≥ a.
            let mut ta = warp;
            while ta < half {
                let (ca, sa, pa, qa) = pair(ta);
                let mut tb = ta + lane;
                while tb < half {
                    let (cb, sb, pb, qb) = pair(tb);
                    if sa != 0.0 || sb != 0.0 {
                        let (b00, b01, b10, b11) = (get(pa, pb), get(pa, qb), get(qa, pb), get(qa, qb));
                        let (y00, y01) = (cb * b00 - sb * b01, sb * b00 + cb * b01);
                        let (y10, y11) = (cb * b10 - sb * b11, sb * b10 + cb * b11);
                        let (z00, z10) = (ca * y00 - sa * y10, sa * y00 + ca * y10);
                        let (z01, z11) = (ca * y01 - sa * y11, sa * y01 + ca * y11);
                        if ta == tb {
                            // The rotated pair's own element is zero by construction.
                            put(pa, pa, z00);
                            put(qa, qa, z11);
                            put(pa, qa, 0.0);
                            put(qa, pa, 0.0);
                        } else {
                            put(pa, pb, z00);
                            put(pa, qb, z01);
                            put(qa, pb, z10);
                            put(qa, qb, z11);
                            put(pb, pa, z00);
                            put(qb, pa, z01);
                            put(pb, qa, z10);
                            put(qb, qa, z11);
                        }
                    }
                    tb += 32;
                }
                ta += warps;
            }
            // z ← zJ: warp w takes the pairs t = w, w + warps, …; its lanes the rows.
            let mut t = warp;
            while t < half {
                let (c, s, p, q) = pair(t);
                if s != 0.0 {
                    let mut row = lane;
                    while row < n {
                        // SAFETY: row, p, q < n (a pair with s ≠ 0 has q < n); columns p and q of
                        // z belong to this warp in this round, each row to one lane.
                        unsafe {
                            let (x, y) = (space.z(row, p), space.z(row, q));
                            space.set_z(row, p, c * x - s * y);
                            space.set_z(row, q, s * x + c * y);
                        }
                        row += 32;
                    }
                }
                t += warps;
            }
            thread::sync_threads();
        }
    }
    rotated
}
