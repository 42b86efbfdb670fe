//! One block's symmetric eigensolver by tridiagonalisation, as LAPACK's `sytrd` + `stebz`/`stein`
//! + `ormtr` (and cuSolverDx's `heev`): one thread block per image (`blockIdx.x`), f64.
//!
//! 1. Householder tridiagonalisation of `T` (`b × b`, symmetric): its lower triangle, packed, in
//!    shared memory where the launch gives [`tridiagonal_shared_bytes`]`(b)`, else in the image's
//!    global scratch (same code). Per column: the norm (each warp computes it, no barrier), the
//!    vector `v` (stored in the column it annihilates, for the back-transformation), `p = τ·T·v`
//!    (a warp per row), `w = p − (τ/2)(pᵀv)v` and the rank-2 update of the trailing triangle (a
//!    warp per row): three barriers per column.
//! 2. The tridiagonal eigenproblem `(d, e)`: `e_i` is dropped where
//!    `|e_i| ≤ ε·(|d_i| + |d_{i+1}|)`, which splits the matrix into unreduced blocks; each
//!    eigenvalue by bisection with Sturm counts on its block, one thread per eigenvalue; the
//!    eigenvectors by inverse iteration on their blocks (tridiagonal LU with partial pivoting, a
//!    seeded pseudo-random start, three solves), all vectors at once, a thread each; after every
//!    solve the vectors of each cluster (eigenvalues closer than `1e-3·‖T_block‖₁`, as LAPACK's
//!    `dstein`) are reorthogonalised by modified Gram–Schmidt in rank order, every cluster's
//!    round `r` at once (two barriers per round, as many rounds as the largest cluster).
//! 3. The back-transformation `z ← Q·z`, applying the reflectors in reverse order, a warp per
//!    eigenvector over the whole GPU ([`tridiagonal_back_transform`], a launch of its own: in the
//!    one block it took 2.1 of 5.6 ms at `b = 200` and 52 of 93 ms at `b = 512` on an H100); the
//!    first kernel leaves the reflectors, `τ` and the eigenvalues in the image's scratch for it.
//! 4. The pairs through [`sorted_ritz_pairs`](super::ritz_pairs::sorted_ritz_pairs) (decreasing,
//!    `σ`, `1/σ`), as the other solvers.

use gpu_std::math;
use gpu_std::{kernel, shared, thread, warp};

/// Vectors of `b` f64 the solver keeps in shared memory in every launch: `d`, `e`, the split `e`,
/// `τ`, the eigenvalues, and the Householder step's `v`, `p` and `p∘v`.
const VECTORS: u32 = 8;
/// Values per row of an eigenvector's tridiagonal LU (`U`'s three diagonals), interleaved; each
/// eigenvector has `b` rows of them in the scratch.
const LU: usize = 3;
/// Solves per eigenvector of the inverse iteration.
const INVERSE_ITERATIONS: u32 = 3;
/// Eigenvalues closer than this fraction of their block's 1-norm form a cluster, whose vectors are
/// reorthogonalised against each other (LAPACK's `dstein`).
const CLUSTER: f64 = 1e-3;
/// Largest `b` the solver takes: at `b = 1024` its inverse iteration left `|ZᵀZ − I|` at 5e-12 on a
/// clustered spectrum (H100), above the 1e-12 every solver must meet.
pub const TRIDIAGONAL_MAX_B: u32 = 512;
/// Cap on bisection steps (52 suffice from the Gershgorin interval to `4ε·‖T‖`).
const MAX_BISECTIONS: u32 = 128;

/// Elements of the packed lower triangle of a `b × b` matrix.
const fn packed(b: u32) -> u32 {
    b * (b + 1) / 2
}

/// Dynamic shared memory, bytes, with which [`tridiagonal_eigen`] keeps the matrix (its packed
/// lower triangle) in shared memory: `8·(8b + b(b+1)/2)`; 231,072 bytes at `b = 232`, the
/// largest that fits an H100's 227 KiB.
pub const fn tridiagonal_shared_bytes(b: u32) -> u32 {
    8 * (VECTORS * b + packed(b))
}

/// The least dynamic shared memory of [`tridiagonal_eigen`], bytes (its vectors; the matrix then
/// lies in the global scratch): `64·b`.
pub const fn tridiagonal_small_bytes(b: u32) -> u32 {
    8 * VECTORS * b
}

/// f64 scratch per image of [`tridiagonal_eigen`]: the eigenvectors `W` (`b × b`, a row each), the
/// eigenvalues and `τ` (`b` each), each eigenvector's tridiagonal `U` (`3b` each) and the packed
/// matrix, whose columns end as the reflectors ([`tridiagonal_scratch_parts`]).
pub const fn tridiagonal_scratch(b: u32) -> u32 {
    b * b + 2 * b + LU as u32 * b * b + packed(b)
}

/// Offsets in an image's [`tridiagonal_scratch`], elements: `W` (`b × b`, eigenvector `j` in row
/// `j`, unordered), the eigenvalues (`b`, value `j` that of row `j`), `τ` (`b`), the `U`s and the
/// packed lower triangle (`b(b+1)/2`).
pub const fn tridiagonal_scratch_parts(b: u32) -> TridiagonalScratch {
    let bb = b * b;
    TridiagonalScratch { w: 0, values: bb, tau: bb + b, lu: bb + 2 * b, packed: bb + 2 * b + LU as u32 * bb }
}

/// Where [`tridiagonal_eigen`] keeps each part of an image's scratch ([`tridiagonal_scratch_parts`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TridiagonalScratch {
    /// The eigenvectors, a row each.
    pub w: u32,
    /// The eigenvalues.
    pub values: u32,
    /// The reflectors' `τ`.
    pub tau: u32,
    /// The inverse iteration's tridiagonal `U`s.
    pub lu: u32,
    /// The packed lower triangle, then the reflectors.
    pub packed: u32,
}

/// `len` f64 at a raw pointer (shared or global memory), unchecked on the GPU, checked in the
/// simulator.
#[derive(Clone, Copy)]
struct Vector {
    p: *mut f64,
    #[cfg_attr(target_arch = "nvptx64", allow(dead_code))]
    len: usize,
}

impl Vector {
    #[inline(always)]
    #[track_caller]
    unsafe fn get(self, i: usize) -> f64 {
        #[cfg(not(target_arch = "nvptx64"))]
        assert!(i < self.len, "element {i} of a vector of {}", self.len);
        // SAFETY: i < len (the caller's contract; checked in the simulator).
        unsafe { *self.p.add(i) }
    }

    #[inline(always)]
    #[track_caller]
    unsafe fn set(self, i: usize, value: f64) {
        #[cfg(not(target_arch = "nvptx64"))]
        assert!(i < self.len, "element {i} of a vector of {}", self.len);
        // SAFETY: i < len (the caller's contract; checked in the simulator).
        unsafe { *self.p.add(i) = value };
    }

    /// The `n` elements from `start`.
    #[inline(always)]
    unsafe fn sub(self, start: usize, n: usize) -> Vector {
        #[cfg(not(target_arch = "nvptx64"))]
        assert!(start + n <= self.len, "{start} + {n} elements of a vector of {}", self.len);
        // SAFETY: start + n ≤ len (the caller's contract; checked in the simulator).
        Vector { p: unsafe { self.p.add(start) }, len: n }
    }
}

/// The packed lower triangle of a symmetric `n × n` matrix: `(i, j)`, `i ≥ j`, at `i(i+1)/2 + j`.
#[derive(Clone, Copy)]
struct Packed(Vector);

impl Packed {
    #[inline(always)]
    #[track_caller]
    fn at(i: usize, j: usize) -> usize {
        i * (i + 1) / 2 + j
    }

    /// Element `(i, j)`, `i ≥ j`.
    #[inline(always)]
    #[track_caller]
    unsafe fn lower(self, i: usize, j: usize) -> f64 {
        // SAFETY: inside the triangle for i, j < n (the caller's contract).
        unsafe { self.0.get(Self::at(i, j)) }
    }

    /// Element `(i, j)` of the symmetric matrix, either side of the diagonal.
    #[inline(always)]
    #[track_caller]
    unsafe fn sym(self, i: usize, j: usize) -> f64 {
        // SAFETY: as for `lower`.
        unsafe { if i >= j { self.lower(i, j) } else { self.lower(j, i) } }
    }

    #[inline(always)]
    #[track_caller]
    unsafe fn set(self, i: usize, j: usize, value: f64) {
        // SAFETY: as for `lower`.
        unsafe { self.0.set(Self::at(i, j), value) }
    }
}

/// A pseudo-random value in `[-1, 1)` for element `row` of start vector `col` (SplitMix64).
#[inline(always)]
fn start_value(col: usize, row: usize) -> f64 {
    let mut z = ((col as u64) << 32 | row as u64).wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^= z >> 31;
    (z >> 11) as f64 * (2.0 / (1u64 << 53) as f64) - 1.0
}

/// The unreduced block `[s, t)` of the split tridiagonal matrix that holds row `j` (`es` the
/// split off-diagonal, `es[i]` coupling rows `i` and `i + 1`, 0 where split).
#[inline(always)]
unsafe fn block_of(es: Vector, bu: usize, j: usize) -> (usize, usize) {
    let mut s = j;
    // SAFETY: s - 1 and t - 1 are below b.
    unsafe {
        while s > 0 && es.get(s - 1) != 0.0 {
            s -= 1;
        }
        let mut t = j + 1;
        while t < bu && es.get(t - 1) != 0.0 {
            t += 1;
        }
        (s, t)
    }
}

/// The Gershgorin interval `(lo, hi)` and the 1-norm of block `[s, t)`.
#[inline(always)]
unsafe fn gershgorin(d: Vector, es: Vector, s: usize, t: usize) -> (f64, f64, f64) {
    let (mut lo, mut hi, mut norm) = (f64::INFINITY, f64::NEG_INFINITY, 0.0f64);
    for i in s..t {
        // SAFETY: i < t ≤ b, and i - 1 ≥ s ≥ 0 where read.
        unsafe {
            let r = if i > s { math::abs(es.get(i - 1)) } else { 0.0 }
                + if i + 1 < t { math::abs(es.get(i)) } else { 0.0 };
            let di = d.get(i);
            lo = lo.min(di - r);
            hi = hi.max(di + r);
            norm = norm.max(math::abs(di) + r);
        }
    }
    (lo, hi, norm)
}

/// Eigenvalues `< x` of block `[s, t)` (Sturm count of `T − xI`'s pivots, `pivmin` guarding
/// tiny ones).
#[inline(always)]
unsafe fn sturm_count(d: Vector, es: Vector, s: usize, t: usize, x: f64, pivmin: f64) -> usize {
    let mut count = 0;
    let mut q = 1.0f64;
    for i in s..t {
        // SAFETY: i < t ≤ b, and i - 1 ≥ s where read.
        unsafe {
            let e2 = if i > s {
                let e = es.get(i - 1);
                e * e
            } else {
                0.0
            };
            q = d.get(i) - x - e2 / q;
        }
        if math::abs(q) < pivmin {
            q = -pivmin;
        }
        if q < 0.0 {
            count += 1;
        }
    }
    count
}

/// One step of inverse iteration on block `[s, t)` (`t − s ≥ 2`) of the split tridiagonal matrix
/// `(d, es)`: solves `(T − λI)·x = ‖T‖·y` in place in `y` (`t − s` long) by LU with partial
/// pivoting (`U` with two superdiagonals, into `u`, `LU` values per row; the right side eliminated
/// with it), pivots of `U` below `tiny` raised to it. One thread.
///
/// # Safety
/// `u` holds `LU·(t − s)` values and `y` `t − s`; `d` and `es` hold at least `t`.
#[inline(never)]
unsafe fn inverse_step(
    u: Vector,
    (d, es): (Vector, Vector),
    (s, t): (usize, usize),
    shift: f64,
    y: Vector,
    (norm, tiny): (f64, f64),
) {
    let n = t - s;
    // SAFETY: every index is below t (d, es), n (y) or LU·n (u), the contract.
    unsafe {
        // The active row [x0, x1] (columns k, k + 1) and its right side r0.
        let (mut x0, mut x1) = (d.get(s) - shift, es.get(s));
        let mut r0 = y.get(0) * norm;
        for k in 0..n - 1 {
            let g = s + k;
            let sub = es.get(g);
            let next_d = d.get(g + 1) - shift;
            let next_e = if g + 2 < t { es.get(g + 1) } else { 0.0 };
            let r1 = y.get(k + 1) * norm;
            if math::abs(x0) >= math::abs(sub) {
                // The active row is the pivot.
                let l = if x0 == 0.0 { 0.0 } else { sub / x0 };
                u.set(LU * k, x0);
                u.set(LU * k + 1, x1);
                u.set(LU * k + 2, 0.0);
                y.set(k, r0);
                x0 = next_d - l * x1;
                x1 = next_e;
                r0 = r1 - l * r0;
            } else {
                // Row k + 1 is the pivot; the active row keeps what it leaves.
                let l = x0 / sub;
                u.set(LU * k, sub);
                u.set(LU * k + 1, next_d);
                u.set(LU * k + 2, next_e);
                y.set(k, r1);
                x0 = x1 - l * next_d;
                x1 = -l * next_e;
                r0 -= l * r1;
            }
        }
        u.set(LU * (n - 1), x0);
        u.set(LU * (n - 1) + 1, 0.0);
        u.set(LU * (n - 1) + 2, 0.0);
        y.set(n - 1, r0);
        // U⁻¹, tiny pivots raised to `tiny`.
        let (mut x1, mut x2) = (0.0f64, 0.0f64);
        for k in (0..n).rev() {
            let pivot = u.get(LU * k);
            let pivot = if math::abs(pivot) >= tiny {
                pivot
            } else if pivot < 0.0 {
                -tiny
            } else {
                tiny
            };
            let x = (y.get(k) - u.get(LU * k + 1) * x1 - u.get(LU * k + 2) * x2) / pivot;
            y.set(k, x);
            x2 = x1;
            x1 = x;
        }
    }
}

/// One image's work space: the packed matrix, the eigenvectors `W` (a row each), their
/// tridiagonal `U`s and the vectors (each `b` long, in shared memory).
#[derive(Clone, Copy)]
struct Space {
    a: Packed,
    w: Vector,
    lu_all: Vector,
    d: Vector,
    e: Vector,
    es: Vector,
    tau: Vector,
    lam: Vector,
    vbuf: Vector,
    pbuf: Vector,
    pvbuf: Vector,
    bu: usize,
}

/// The lower triangle of `(T + Tᵀ)/2` into the packed matrix, and its Householder
/// tridiagonalisation: `d`, `e`, `τ` and the reflectors' vectors in the columns they annihilate.
/// All threads of the block call it.
///
/// # Safety
/// As for [`tridiagonal_eigen`]; the earlier phases ran, and a barrier followed them.
#[inline(always)]
unsafe fn tridiagonalise(sp: Space, t_in: gpu_std::slice::Slice<f64>) {
    let Space { a, d, e, tau, vbuf, pbuf, pvbuf, bu, .. } = sp;
    let (tid, nt) = (thread::thread_idx_x() as usize, thread::block_dim_x() as usize);
    let (lane, warp_id, warps) = (tid % 32, tid / 32, nt / 32);
    let add = |x: f64, y: f64| x + y;
    // SAFETY: as for the kernel's body (`Space`'s vectors hold `b` each, the matrices b × b).
    unsafe {
        // The lower triangle of (T + Tᵀ)/2, a warp per row.
        let mut i = warp_id;
        while i < bu {
            let mut j = lane;
            while j <= i {
                a.set(i, j, 0.5 * (t_in.get_unchecked(i * bu + j) + t_in.get_unchecked(j * bu + i)));
                j += 32;
            }
            i += warps;
        }
        let mut i = tid;
        while i < bu {
            e.set(i, 0.0);
            tau.set(i, 0.0);
            i += nt;
        }
        thread::sync_threads();

        // 1. Householder tridiagonalisation: step k annihilates column k below row k + 1.
        for k in 0..bu.saturating_sub(1) {
            let m = k + 1;
            // Every warp: ‖x[1..]‖² of x = A(m.., k), the same bits in each.
            let mut s = 0.0f64;
            let mut i = m + 1 + lane;
            while i < bu {
                let x = a.lower(i, k);
                s = math::fma(x, x, s);
                i += 32;
            }
            let sigma2 = warp::reduce(s, add);
            let alpha = a.lower(m, k);
            if sigma2 == 0.0 {
                // Already reduced: H = I.
                if tid == 0 {
                    d.set(k, a.lower(k, k));
                    e.set(k, alpha);
                }
                continue;
            }
            let r = math::sqrt(math::fma(alpha, alpha, sigma2));
            let beta = if alpha >= 0.0 { -r } else { r };
            let tau_k = 1.0 / (beta * (beta - alpha));
            let v0 = alpha - beta;
            let mut i = m + tid;
            while i < bu {
                vbuf.set(i, if i == m { v0 } else { a.lower(i, k) });
                i += nt;
            }
            thread::sync_threads();
            if tid == 0 {
                d.set(k, a.lower(k, k));
                e.set(k, beta);
                tau.set(k, tau_k);
                // v's first element where the reflector's column was (no one reads it this step).
                a.set(m, k, v0);
            }
            // p = τ·A'·v, a warp per row, and p∘v.
            let mut i = m + warp_id;
            while i < bu {
                let mut acc = 0.0f64;
                let mut j = m + lane;
                while j < bu {
                    acc = math::fma(a.sym(i, j), vbuf.get(j), acc);
                    j += 32;
                }
                let p = tau_k * warp::reduce(acc, add);
                if lane == 0 {
                    pbuf.set(i, p);
                    pvbuf.set(i, p * vbuf.get(i));
                }
                i += warps;
            }
            thread::sync_threads();
            // Every warp: K = (τ/2)·pᵀv; then w = p − K·v and A' −= v·wᵀ + w·vᵀ, a warp per
            // row.
            let mut s = 0.0f64;
            let mut j = m + lane;
            while j < bu {
                s += pvbuf.get(j);
                j += 32;
            }
            let half_k = 0.5 * tau_k * warp::reduce(s, add);
            let mut i = m + warp_id;
            while i < bu {
                let vi = vbuf.get(i);
                let wi = math::fma(-half_k, vi, pbuf.get(i));
                let mut j = m + lane;
                while j <= i {
                    let vj = vbuf.get(j);
                    let wj = math::fma(-half_k, vj, pbuf.get(j));
                    a.set(i, j, a.lower(i, j) - vi * wj - wi * vj);
                    j += 32;
                }
                i += warps;
            }
            thread::sync_threads();
        }
        if tid == 0 && bu > 0 {
            d.set(bu - 1, a.lower(bu - 1, bu - 1));
        }
        thread::sync_threads();
    }
}

/// The split of the tridiagonal matrix and its eigenvalues by bisection, a thread each, into
/// `lam`. All threads of the block call it.
///
/// # Safety
/// As for [`tridiagonal_eigen`]; the earlier phases ran, and a barrier followed them.
#[inline(always)]
unsafe fn eigenvalues(sp: Space) {
    let Space { d, e, es, lam, bu, .. } = sp;
    let (tid, nt) = (thread::thread_idx_x() as usize, thread::block_dim_x() as usize);
    // SAFETY: as for the kernel's body (`Space`'s vectors hold `b` each, the matrices b × b).
    unsafe {
        // 2. Split where the coupling is negligible.
        let mut i = tid;
        while i < bu {
            let ei = e.get(i);
            let negligible = i + 1 >= bu
                || math::abs(ei) <= f64::EPSILON * (math::abs(d.get(i)) + math::abs(d.get(i + 1)));
            es.set(i, if negligible { 0.0 } else { ei });
            i += nt;
        }
        thread::sync_threads();
        // Eigenvalue j − s of j's block [s, t) by bisection, a thread each.
        let mut j = tid;
        while j < bu {
            let (s, t) = block_of(es, bu, j);
            let (gl, gu, norm) = gershgorin(d, es, s, t);
            let mut emax = 0.0f64;
            for i in s..t.saturating_sub(1) {
                emax = emax.max(math::abs(es.get(i)));
            }
            let pivmin = f64::MIN_POSITIVE * emax.max(1.0) * emax.max(1.0);
            let tol = 4.0 * f64::EPSILON * norm + 4.0 * pivmin;
            let (mut lo, mut hi) = (gl - tol, gu + tol);
            let index = j - s;
            if t - s == 1 {
                // A block of one row: its eigenvalue exactly (the zero matrix gives 0).
                lo = d.get(s);
                hi = lo;
            }
            let mut step = 0;
            while hi - lo > tol && step < MAX_BISECTIONS {
                let mid = 0.5 * (lo + hi);
                if sturm_count(d, es, s, t, mid, pivmin) > index {
                    hi = mid;
                } else {
                    lo = mid;
                }
                step += 1;
            }
            lam.set(j, 0.5 * (lo + hi));
            j += nt;
        }
        thread::sync_threads();
    }
}

/// The eigenvectors of the tridiagonal matrix by inverse iteration into the rows of `W`: per
/// iteration a solve per vector (a thread each, all vectors at once), then modified Gram–Schmidt
/// within each cluster, in rounds by rank in the cluster (round `r` removes every cluster's
/// `r`-th vector from the cluster's later vectors, a warp per vector, each lane's elements in
/// registers): one barrier per round, as many rounds as the largest cluster has vectors, then a
/// normalisation. Uses the Householder step's vectors for each eigenvalue's cluster leader and
/// block. All threads of the block call it.
///
/// # Safety
/// As for [`tridiagonal_eigen`]; the eigenvalues are in `lam`, and a barrier followed them.
#[inline(always)]
unsafe fn eigenvectors(sp: Space) {
    let Space { w, lu_all, d, es, lam, vbuf: leader, pbuf: first, pvbuf: last, bu, .. } = sp;
    let (tid, nt) = (thread::thread_idx_x() as usize, thread::block_dim_x() as usize);
    let (lane, warp_id, warps) = (tid % 32, tid / 32, nt / 32);
    let add = |x: f64, y: f64| x + y;
    // SAFETY: as for the kernel's body (`Space`'s vectors hold `b` each, `W` b × b, `lu_all`
    // `LU·b` per vector); each row of `W` is written by one thread (the solves) or one warp's
    // lanes, each its own elements (the rounds), between barriers.
    unsafe {
        // Each eigenvalue's block [s, t) and cluster leader (the cluster's first eigenvalue).
        let mut j = tid;
        while j < bu {
            let (s, t) = block_of(es, bu, j);
            let (_, _, norm) = gershgorin(d, es, s, t);
            let ortol = CLUSTER * norm;
            let mut l = j;
            while l > s && lam.get(l) - lam.get(l - 1) <= ortol {
                l -= 1;
            }
            leader.set(j, l as f64);
            first.set(j, s as f64);
            last.set(j, t as f64);
            j += nt;
        }
        thread::sync_threads();
        let mut rounds = 0usize;
        for j in 0..bu {
            rounds = rounds.max(j + 1 - leader.get(j) as usize);
        }
        for iteration in 0..INVERSE_ITERATIONS {
            // A thread per vector: (the start, then) one solve.
            let mut j = tid;
            while j < bu {
                let (s, t) = (first.get(j) as usize, last.get(j) as usize);
                let row = w.sub(j * bu, bu);
                if iteration == 0 {
                    // Zeros outside the block, a pseudo-random start inside (1 for a block of one).
                    for i in 0..bu {
                        let value = if i < s || i >= t {
                            0.0
                        } else if t - s == 1 {
                            1.0
                        } else {
                            start_value(j, i)
                        };
                        row.set(i, value);
                    }
                }
                if t - s > 1 {
                    let (_, _, norm) = gershgorin(d, es, s, t);
                    let tiny = (f64::EPSILON * norm).max(f64::MIN_POSITIVE);
                    let u = lu_all.sub(j * LU * bu, LU * (t - s));
                    inverse_step(u, (d, es), (s, t), lam.get(j), row.sub(s, t - s), (norm, tiny));
                }
                j += nt;
            }
            thread::sync_threads();
            // Modified Gram–Schmidt within the clusters: in round r every later vector of a
            // cluster loses its component along the cluster's vector of rank r (final after
            // round r − 1; unnormalised, so no round waits for a normalisation): one barrier
            // per round. Then every vector is normalised.
            for r in 0..rounds.saturating_sub(1) {
                let mut j = warp_id;
                while j < bu {
                    let l = leader.get(j) as usize;
                    if j - l > r {
                        let (s, t) = (first.get(j) as usize, last.get(j) as usize);
                        let (row, earlier) = (w.sub(j * bu, bu), w.sub((l + r) * bu, bu));
                        remove_component(row, earlier, (s, t), lane);
                    }
                    j += warps;
                }
                thread::sync_threads();
            }
            let mut j = warp_id;
            while j < bu {
                let (s, t) = (first.get(j) as usize, last.get(j) as usize);
                let row = w.sub(j * bu, bu);
                let x = lane_elements(row, (s, t), lane);
                let mut ss = 0.0f64;
                for value in x {
                    ss = math::fma(value, value, ss);
                }
                let ss = warp::reduce(ss, add);
                let inv = if ss > 0.0 { 1.0 / math::sqrt(ss) } else { 0.0 };
                for (m, value) in x.into_iter().enumerate() {
                    let i = s + lane + 32 * m;
                    if i < t {
                        row.set(i, value * inv);
                    }
                }
                j += warps;
            }
            thread::sync_threads();
        }
    }
}

/// Elements of a vector per lane of a warp: `b / 32` for the largest `b`.
const PER_LANE: usize = TRIDIAGONAL_MAX_B as usize / 32;

/// This lane's elements `s + lane + 32·m < t` of `v` (0 beyond `t`), read at once into registers.
///
/// # Safety
/// `v` holds at least `t` elements, and `t − s ≤ TRIDIAGONAL_MAX_B`.
#[inline(always)]
unsafe fn lane_elements(v: Vector, (s, t): (usize, usize), lane: usize) -> [f64; PER_LANE] {
    let mut x = [0.0f64; PER_LANE];
    for (m, value) in x.iter_mut().enumerate() {
        let i = s + lane + 32 * m;
        if i < t {
            // SAFETY: i < t, within `v` (the contract).
            *value = unsafe { v.get(i) };
        }
    }
    x
}

/// `v ← v − (q·v / q·q)·q` over elements `[s, t)`, by one warp (each lane its elements
/// `≡ s + lane (mod 32)`), both vectors read once into registers.
///
/// # Safety
/// `v` and `q` hold at least `t` elements, `t − s ≤ TRIDIAGONAL_MAX_B`; no other lane writes them.
#[inline(always)]
unsafe fn remove_component(v: Vector, q: Vector, (s, t): (usize, usize), lane: usize) {
    let add = |x: f64, y: f64| x + y;
    // SAFETY: forwarded from the caller.
    let (qx, vx) = unsafe { (lane_elements(q, (s, t), lane), lane_elements(v, (s, t), lane)) };
    let (mut qq, mut qv) = (0.0f64, 0.0f64);
    for (a, x) in qx.iter().zip(&vx) {
        qq = math::fma(*a, *a, qq);
        qv = math::fma(*a, *x, qv);
    }
    let (qq, qv) = (warp::reduce(qq, add), warp::reduce(qv, add));
    if qq > 0.0 {
        let c = qv / qq;
        for (m, (a, x)) in qx.iter().zip(&vx).enumerate() {
            let i = s + lane + 32 * m;
            if i < t {
                // SAFETY: i < t, within `v` (the contract).
                unsafe { v.set(i, math::fma(-c, *a, *x)) };
            }
        }
    }
}

/// The back-transformation `z ← Q·z = H_0·(H_1·(… H_{b−2}·z))` of [`tridiagonal_eigen`]'s
/// eigenvectors, in place in each image's scratch, a warp per eigenvector: grid
/// `(⌈b / warps⌉, images)`, any whole number of warps per block. Each lane owns the rows
/// `≡ lane (mod 32)`, so that no lane reads another's writes.
///
/// # Safety
/// [`tridiagonal_eigen`] ran on `scratch` (`tridiagonal_scratch(b)` per image, the grid's images
/// inside it). Unchecked on the GPU; the simulator checks every access.
#[kernel]
pub unsafe fn tridiagonal_back_transform(b: u32, scratch: &mut [f64]) {
    let (img, bu) = (thread::block_idx_y() as usize, b as usize);
    let (lane, warp_id) = (thread::thread_idx_x() as usize % 32, thread::thread_idx_x() as usize / 32);
    let j = thread::block_idx_x() as usize * (thread::block_dim_x() as usize / 32) + warp_id;
    if j >= bu {
        return;
    }
    let add = |x: f64, y: f64| x + y;
    let per_image = tridiagonal_scratch(b) as usize;
    let parts = tridiagonal_scratch_parts(b);
    // SAFETY: the kernel's contract: the image's scratch lies inside `scratch`; the parts below
    // lie inside it (`tridiagonal_scratch_parts`), and j < b.
    unsafe {
        let mut scratch = scratch.sub_unchecked(img * per_image, per_image);
        let base = Vector { p: scratch.as_mut_ptr(), len: per_image };
        let row = base.sub(parts.w as usize + j * bu, bu);
        let tau = base.sub(parts.tau as usize, bu);
        let a = Packed(base.sub(parts.packed as usize, packed(b) as usize));
        for k in (0..bu.saturating_sub(1)).rev() {
            let tk = tau.get(k);
            if tk == 0.0 {
                continue;
            }
            let first = k + 1 + (lane + 32 - (k + 1) % 32) % 32;
            let mut dot = 0.0f64;
            let mut i = first;
            while i < bu {
                dot = math::fma(a.lower(i, k), row.get(i), dot);
                i += 32;
            }
            let f = tk * warp::reduce(dot, add);
            let mut i = first;
            while i < bu {
                row.set(i, math::fma(-f, a.lower(i, k), row.get(i)));
                i += 32;
            }
        }
    }
}

/// Symmetric eigensolver by tridiagonalisation, one block per image (`blockIdx.x`), block
/// `32·w` threads (`w ≤ 16`); dynamic shared memory [`tridiagonal_shared_bytes`]`(b)` to keep the
/// matrix in shared memory, else at least [`tridiagonal_small_bytes`]`(b)` (the matrix in the
/// scratch). See the module doc for the method: this kernel does steps 1 and 2, and leaves in the
/// scratch ([`tridiagonal_scratch_parts`]) the eigenvectors of the tridiagonal matrix, the
/// eigenvalues, and the reflectors and `τ` for [`tridiagonal_back_transform`].
///
/// In: `t` (`b × b` per image, row-major, symmetric; `(T + Tᵀ)/2` is used).
///
/// # Safety
/// The launch gives at least [`tridiagonal_small_bytes`]`(b)` of dynamic shared memory and a
/// whole number of warps, at most 512 threads (its launch bounds); `b ≤` [`TRIDIAGONAL_MAX_B`];
/// each image's parts lie inside the slices: `b × b` of `t`, [`tridiagonal_scratch`]`(b)` of
/// `scratch`. Unchecked on the GPU; the simulator checks every access.
#[kernel(launch_bounds(512, 1))]
pub unsafe fn tridiagonal_eigen(t: &[f64], b: u32, scratch: &mut [f64]) {
    let img = thread::block_idx_x() as usize;
    let bu = b as usize;
    let bb = bu * bu;
    let parts = tridiagonal_scratch_parts(b);
    // SAFETY (whole body): the kernel's contract: the image's parts lie inside the slices, the
    // launch gives the vectors' shared memory (and the matrix's where it is used from there).
    // Every thread runs every barrier; between barriers each element is written by one thread
    // (or one warp's lane, read by the same lane or after a warp barrier) and read only after.
    unsafe {
        let t_in = t.sub_unchecked(img * bb, bb);
        let per_image = tridiagonal_scratch(b) as usize;
        let mut scratch = scratch.sub_unchecked(img * per_image, per_image);
        let base = Vector { p: scratch.as_mut_ptr(), len: per_image };
        let w = base.sub(parts.w as usize, bb);
        let lu_all = base.sub(parts.lu as usize, LU * bb);
        let vectors = Vector {
            p: shared::region::<f64>(0, VECTORS as usize * bu).as_ptr(),
            len: VECTORS as usize * bu,
        };
        let packed_len = packed(b) as usize;
        let in_scratch = base.sub(parts.packed as usize, packed_len);
        let in_shared = shared::dynamic_bytes() >= tridiagonal_shared_bytes(b) as usize;
        let a = Packed(if in_shared {
            Vector {
                p: shared::region::<f64>(8 * VECTORS as usize * bu, packed_len).as_ptr(),
                len: packed_len,
            }
        } else {
            in_scratch
        });
        let d = vectors.sub(0, bu);
        let e = vectors.sub(bu, bu);
        let es = vectors.sub(2 * bu, bu);
        let tau = vectors.sub(3 * bu, bu);
        let lam = vectors.sub(4 * bu, bu);
        let vbuf = vectors.sub(5 * bu, bu);
        let pbuf = vectors.sub(6 * bu, bu);
        let pvbuf = vectors.sub(7 * bu, bu);

        let sp = Space { a, w, lu_all, d, e, es, tau, lam, vbuf, pbuf, pvbuf, bu };
        tridiagonalise(sp, t_in);
        eigenvalues(sp);
        eigenvectors(sp);

        // For the back-transformation: the reflectors (where they are in shared memory), τ and
        // the eigenvalues into the scratch.
        if in_shared {
            let mut i = thread::thread_idx_x() as usize;
            while i < packed_len {
                in_scratch.set(i, a.0.get(i));
                i += thread::block_dim_x() as usize;
            }
        }
        let (tau_out, values_out) = (base.sub(parts.tau as usize, bu), base.sub(parts.values as usize, bu));
        let mut i = thread::thread_idx_x() as usize;
        while i < bu {
            tau_out.set(i, tau.get(i));
            values_out.set(i, lam.get(i));
            i += thread::block_dim_x() as usize;
        }
    }
}
