//! One block's symmetric eigensolver by tridiagonalisation, as LAPACK's `sytrd` + `stedc` +
//! `ormtr` (and cuSolverDx's `heev`): one thread block per image (`blockIdx.x`), f64.
//!
//! 1. Householder tridiagonalisation of `T` (`b × b`, symmetric): its lower triangle, packed, in
//!    shared memory where the launch gives [`tridiagonal_shared_bytes`]`(b)`, else in the image's
//!    global scratch (same code). Per column: the norm (each warp computes it, no barrier), the
//!    vector `v` (stored in the column it annihilates, for the back-transformation), `p = τ·T·v`
//!    (two threads per row, each half of the row's columns, joined by a shuffle),
//!    `w = p − (τ/2)(pᵀv)v` and the rank-2 update of the trailing triangle (a warp per row): three
//!    barriers per column.
//! 2. The tridiagonal eigenproblem `(d, e)` by divide and conquer in the same block
//!    ([`divide_and_conquer`](super::divide_and_conquer)): every eigenvalue and eigenvector, the
//!    vectors orthogonal to working precision without reorthogonalisation.
//! 3. The back-transformation `z ← Q·z`, applying the reflectors in reverse order
//!    ([`tridiagonal_back_transform`], a launch of its own: two eigenvectors in each warp's
//!    registers, the reflectors staged in shared memory eight at a time); the first kernel leaves
//!    the reflectors, `τ` and the eigenvalues in the image's scratch for it.
//! 4. The pairs through [`sorted_ritz_pairs`](super::ritz_pairs::sorted_ritz_pairs) (decreasing,
//!    `σ`, `1/σ`), as the other solvers.

use gpu_std::math;
use gpu_std::{SliceMut, kernel, shared, thread, warp};

/// Vectors of `b` f64 the reduction keeps in shared memory in every launch: `d`, `e`, `τ`, and
/// the Householder step's `v`, `p` and `p∘v`.
const VECTORS: u32 = 6;
/// Largest `b` the solver takes: the largest it is tested at on the GPU (the one-block
/// reduction's packed matrix in global memory past `b = 234`; the divide and conquer's vectors
/// fill 181 KiB of shared memory at 1024).
pub const TRIDIAGONAL_MAX_B: u32 = 1024;

/// Elements of the packed lower triangle of a `b × b` matrix.
pub(super) const fn packed(b: u32) -> u32 {
    b * (b + 1) / 2
}

/// Dynamic shared memory, bytes, with which [`tridiagonal_reduce`] keeps the matrix (its packed
/// lower triangle) in shared memory: `8·(6b + b(b+1)/2)`; 226,432 bytes at `b = 232`, and 234 the
/// largest `b` that fits an H100's 227 KiB.
pub const fn tridiagonal_shared_bytes(b: u32) -> u32 {
    8 * (VECTORS * b + packed(b))
}

/// The least dynamic shared memory of [`tridiagonal_reduce`], bytes (its vectors; the matrix then
/// lies in the global scratch): `48·b`.
pub const fn tridiagonal_small_bytes(b: u32) -> u32 {
    8 * VECTORS * b
}

/// f64 scratch per image of the tridiagonal solver's kernels: the eigenvectors `W` (`b × b`, a
/// row each), the eigenvalues, `τ`, `d` and `e` (`b` each), the divide and conquer's work (two
/// `b × b` buffers), the packed matrix, whose columns end as the reflectors, and the divide and
/// conquer's roots ([`tridiagonal_scratch_parts`]).
pub const fn tridiagonal_scratch(b: u32) -> u32 {
    let parts = tridiagonal_scratch_parts(b);
    parts.roots + b
}

/// Offsets in an image's [`tridiagonal_scratch`], elements: `W` (`b × b`, eigenvector `j` in row
/// `j`), the eigenvalues (`b`, value `j` that of row `j`), `τ`, `d`, `e` (`b` each), the divide and
/// conquer's two `b × b` buffers, the packed lower triangle (`b(b+1)/2`) and the roots (`b`).
pub const fn tridiagonal_scratch_parts(b: u32) -> TridiagonalScratch {
    let bb = b * b;
    let work = bb + 4 * b;
    TridiagonalScratch {
        w: 0,
        values: bb,
        tau: bb + b,
        diagonal: bb + 2 * b,
        off_diagonal: bb + 3 * b,
        work,
        packed: work + 2 * bb,
        roots: work + 2 * bb + packed(b),
    }
}

/// Where the tridiagonal solver's kernels keep each part of an image's scratch
/// ([`tridiagonal_scratch_parts`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TridiagonalScratch {
    /// The eigenvectors, a row each.
    pub w: u32,
    /// The eigenvalues.
    pub values: u32,
    /// The reflectors' `τ`.
    pub tau: u32,
    /// The tridiagonal matrix's diagonal `d`.
    pub diagonal: u32,
    /// Its off-diagonal `e` (`e[i]` couples rows `i` and `i + 1`).
    pub off_diagonal: u32,
    /// The divide and conquer's second eigenvector buffer and its secular vectors.
    pub work: u32,
    /// The packed lower triangle, then the reflectors.
    pub packed: u32,
    /// The roots of a divide and conquer level, where a group of blocks solves the image.
    pub roots: u32,
}

/// `len` f64 at a raw pointer (shared or global memory), unchecked on the GPU, checked in the
/// simulator.
#[derive(Clone, Copy)]
pub(super) struct Vector {
    pub(super) p: *mut f64,
    pub(super) len: usize,
}

impl Vector {
    /// Image `img`'s part of a kernel's scratch of `len` f64 per image.
    ///
    /// # Safety
    /// `(img + 1)·len ≤ scratch.len()` (checked in the simulator).
    #[inline(always)]
    #[track_caller]
    pub(super) unsafe fn image_part(scratch: SliceMut<f64>, img: usize, len: usize) -> Vector {
        // SAFETY: the caller's promise.
        let mut part = unsafe { scratch.sub_unchecked(img * len, len) };
        Vector { p: part.as_mut_ptr(), len }
    }

    #[inline(always)]
    #[track_caller]
    pub(super) unsafe fn get(self, i: usize) -> f64 {
        #[cfg(not(target_arch = "nvptx64"))]
        assert!(i < self.len, "element {i} of a vector of {}", self.len);
        // SAFETY: i < len (the caller's contract; checked in the simulator).
        unsafe { *self.p.add(i) }
    }

    #[inline(always)]
    #[track_caller]
    pub(super) unsafe fn set(self, i: usize, value: f64) {
        #[cfg(not(target_arch = "nvptx64"))]
        assert!(i < self.len, "element {i} of a vector of {}", self.len);
        // SAFETY: i < len (the caller's contract; checked in the simulator).
        unsafe { *self.p.add(i) = value };
    }

    /// The `n` elements from `start`.
    #[inline(always)]
    pub(super) unsafe fn sub(self, start: usize, n: usize) -> Vector {
        #[cfg(not(target_arch = "nvptx64"))]
        assert!(start + n <= self.len, "{start} + {n} elements of a vector of {}", self.len);
        // SAFETY: start + n ≤ len (the caller's contract; checked in the simulator).
        Vector { p: unsafe { self.p.add(start) }, len: n }
    }
}

/// The packed lower triangle of a symmetric `n × n` matrix: `(i, j)`, `i ≥ j`, at `i(i+1)/2 + j`.
#[derive(Clone, Copy)]
pub(super) struct Packed(pub(super) Vector);

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

    #[inline(always)]
    #[track_caller]
    pub(super) unsafe fn set(self, i: usize, j: usize, value: f64) {
        // SAFETY: as for `lower`.
        unsafe { self.0.set(Self::at(i, j), value) }
    }
}

/// The tridiagonalisation's work space: the packed matrix and the vectors (each `b` long, in
/// shared memory).
#[derive(Clone, Copy)]
struct Space {
    a: Packed,
    d: Vector,
    e: Vector,
    tau: Vector,
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
/// As for [`tridiagonal_reduce`]; the earlier phases ran, and a barrier followed them.
#[inline(always)]
unsafe fn tridiagonalise(sp: Space, t_in: gpu_std::slice::Slice<f64>) {
    let Space { a, d, e, tau, vbuf, pbuf, pvbuf, bu } = sp;
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
            // p = τ·A'·v and p∘v: two threads per row (a lane pair), each summing half of the
            // row's columns — left of the diagonal along the packed row, right of it down
            // column i — joined by one shuffle: no per-row warp reduction.
            let n = bu - m;
            let half = n.div_ceil(2);
            let mut first = 0;
            while first < n {
                let r = first + tid / 2;
                let mut acc = 0.0f64;
                if r < n {
                    let i = m + r;
                    let (lo, hi) = if tid % 2 == 0 { (m, m + half) } else { (m + half, bu) };
                    let row = Packed::at(i, 0);
                    let mut column = Packed::at(lo, 0);
                    for j in lo..hi {
                        let at = if j <= i { row + j } else { column + i };
                        acc = math::fma(a.0.get(at), vbuf.get(j), acc);
                        column += j + 1;
                    }
                }
                let sum = acc + warp::shfl_xor_sync(u32::MAX, acc, 1);
                if r < n && tid % 2 == 0 {
                    let p = tau_k * sum;
                    pbuf.set(m + r, p);
                    pvbuf.set(m + r, p * vbuf.get(m + r));
                }
                first += nt / 2;
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

/// Warps per block of [`tridiagonal_back_transform`].
pub const BACK_TRANSFORM_WARPS: u32 = 8;
/// Reflectors staged in shared memory at a time by [`tridiagonal_back_transform`].
const BACK_TRANSFORM_CHUNK: usize = 16;
/// Loads each thread of [`tridiagonal_back_transform`] issues before storing them in the stage.
const STAGE_LOADS: usize = 8;
/// Elements per lane of each of a warp's two register arrays: 512 elements over 32 lanes.
const LANE_ELEMENTS: usize = 16;
/// Largest `b` whose eigenvectors a warp of [`tridiagonal_back_transform`] holds two of (one
/// above it, in both arrays).
const BACK_TRANSFORM_NARROW_B: u32 = 32 * LANE_ELEMENTS as u32;

/// Eigenvectors per block of [`tridiagonal_back_transform`] at `b`: two per warp up to `b = 512`,
/// one above.
pub const fn back_transform_vectors(b: u32) -> u32 {
    if b <= BACK_TRANSFORM_NARROW_B { 2 * BACK_TRANSFORM_WARPS } else { BACK_TRANSFORM_WARPS }
}

/// Dynamic shared memory of [`tridiagonal_back_transform`], bytes: a chunk of reflectors, each
/// `b` long, and their `τ`.
pub const fn back_transform_shared_bytes(b: u32) -> u32 {
    8 * BACK_TRANSFORM_CHUNK as u32 * (back_transform_row(b) as u32 + 1)
}

/// A staged reflector's length in [`tridiagonal_back_transform`]: `b` padded with zeros to the
/// rows a warp's arrays hold (512, or 1024 above), so that no element's read needs a bound check.
const fn back_transform_row(b: u32) -> usize {
    if b <= BACK_TRANSFORM_NARROW_B {
        BACK_TRANSFORM_NARROW_B as usize
    } else {
        2 * BACK_TRANSFORM_NARROW_B as usize
    }
}

/// The back-transformation `z ← Q·z = H_0·(H_1·(… H_{b−2}·z))` of the tridiagonal matrix's
/// eigenvectors (from [`tridiagonal_divide_and_conquer`](super::tridiagonal_divide_and_conquer)),
/// in place in each image's scratch: grid `(⌈b / back_transform_vectors(b)⌉, images)`, blocks of
/// `32·BACK_TRANSFORM_WARPS` threads, [`back_transform_shared_bytes`]`(b)`. Each warp holds its
/// eigenvectors in two register arrays (lane `l` the elements `≡ l mod 32`): two vectors up to
/// `b = 512`, one vector's two halves above; the block stages the reflectors in shared memory,
/// sixteen at a time, each read from the scratch once per block.
///
/// # Safety
/// [`tridiagonal_reduce`] (or [`tridiagonal_reduce_grid`](super::tridiagonal_reduce_grid)) and
/// the divide and conquer ran on `scratch` (`tridiagonal_scratch(b)` per image, the grid's images
/// inside it), `b ≤ TRIDIAGONAL_MAX_B`, the launch as above. Unchecked on the GPU; the simulator
/// checks every access.
#[kernel(launch_bounds(256, 1))]
pub unsafe fn tridiagonal_back_transform(b: u32, scratch: &mut [f64]) {
    let per_image = tridiagonal_scratch(b) as usize;
    let img = thread::block_idx_y() as usize;
    // SAFETY: the kernel's contract: the image's scratch lies inside `scratch`, its `W` inside it.
    unsafe {
        let base = Vector::image_part(scratch, img, per_image);
        let w = base.sub(tridiagonal_scratch_parts(b).w as usize, b as usize * b as usize);
        apply_reflectors(b, base, Some(w), w);
    }
}

/// `Qᵀ` of each image's tridiagonalisation, `Q = H_0·H_1·…·H_{b−2}`: row `j` of `q` (`b × b` per
/// image, row-major) is `Q·e_j`, the back-transformation of the unit vectors. It reads only the
/// reflectors and `τ` of the scratch, so it may run beside the divide and conquer (on another
/// queue); the eigenvectors are then the rows of `W·Qᵀ`, one GEMM. Launch as for
/// [`tridiagonal_back_transform`].
///
/// # Safety
/// The reduction ran on `scratch` (`tridiagonal_scratch(b)` per image), and nothing writes its
/// reflectors or `τ` meanwhile; `q` holds `b × b` per image of the grid; `b ≤ TRIDIAGONAL_MAX_B`,
/// the launch as above. Unchecked on the GPU; the simulator checks every access.
#[kernel(launch_bounds(256, 1))]
pub unsafe fn tridiagonal_form_q(b: u32, scratch: &[f64], q: &mut [f64]) {
    let (per_image, bb) = (tridiagonal_scratch(b) as usize, b as usize * b as usize);
    let img = thread::block_idx_y() as usize;
    // SAFETY: the kernel's contract: the image's scratch and `Qᵀ` lie inside the slices; the
    // scratch is only read (its pointer is mutable only for `Vector`'s sake).
    unsafe {
        let scratch = scratch.sub_unchecked(img * per_image, per_image);
        let base = Vector { p: scratch.as_ptr().cast_mut(), len: per_image };
        let mut q = q.sub_unchecked(img * bb, bb);
        apply_reflectors(b, base, None, Vector { p: q.as_mut_ptr(), len: bb });
    }
}

/// The body of [`tridiagonal_back_transform`] and [`tridiagonal_form_q`] for one image's
/// `scratch`: vectors `z_j` (row `j` of `from`, or `e_j` where `from` is `None`) into row `j` of
/// `out` as `Q·z_j`, the warps' vectors by the grid's `x` (see the kernels).
///
/// # Safety
/// The reduction ran on `scratch`; `from` and `out` hold `b × b`; the launch as for the kernels.
#[inline(always)]
unsafe fn apply_reflectors(b: u32, base: Vector, from: Option<Vector>, out: Vector) {
    let bu = b as usize;
    let (tid, nt) = (thread::thread_idx_x() as usize, thread::block_dim_x() as usize);
    let (lane, warp_id) = (tid % 32, tid / 32);
    let narrow = b <= BACK_TRANSFORM_NARROW_B;
    let per_warp = if narrow { 2 } else { 1 };
    let first = (thread::block_idx_x() as usize * (nt / 32) + warp_id) * per_warp;
    let add = |x: f64, y: f64| x + y;
    let parts = tridiagonal_scratch_parts(b);
    // SAFETY: the caller's contract: the parts below lie inside the image's scratch
    // (`tridiagonal_scratch_parts`); every index is below b, every staged one below the chunk's;
    // between the block's barriers the stage is written, then only read.
    unsafe {
        let tau = base.sub(parts.tau as usize, bu);
        let a = Packed(base.sub(parts.packed as usize, packed(b) as usize));
        let row = back_transform_row(b);
        let staged = BACK_TRANSFORM_CHUNK * (row + 1);
        let stage = Vector { p: shared::region::<f64>(0, staged).as_ptr(), len: staged };
        let taus = stage.sub(BACK_TRANSFORM_CHUNK * row, BACK_TRANSFORM_CHUNK);
        // Where element `t` of each array lives: (vector, row), narrow: vectors `first` and
        // `first + 1`; wide: rows `lane + 32t` and `512 + lane + 32t` of vector `first`.
        let at = |array: usize, t: usize| {
            let i = lane + 32 * t;
            if narrow { (first + array, i) } else { (first, i + array * BACK_TRANSFORM_NARROW_B as usize) }
        };
        // Index loops of constant bounds, so that the arrays stay in registers.
        let mut z0 = [0.0f64; LANE_ELEMENTS];
        let mut z1 = [0.0f64; LANE_ELEMENTS];
        for t in 0..LANE_ELEMENTS {
            let ((j0, i0), (j1, i1)) = (at(0, t), at(1, t));
            let start = |j: usize, i: usize| match from {
                Some(from) => from.get(j * bu + i),
                None => f64::from(u8::from(i == j)),
            };
            if j0 < bu && i0 < bu {
                z0[t] = start(j0, i0);
            }
            if j1 < bu && i1 < bu {
                z1[t] = start(j1, i1);
            }
        }
        // Chunks of reflectors, last first: [lo, hi).
        let mut hi = bu.saturating_sub(1);
        while hi > 0 {
            let lo = hi.saturating_sub(BACK_TRANSFORM_CHUNK);
            thread::sync_threads();
            // STAGE_LOADS loads in flight per thread before their stores: one at a time, each
            // waited for, the staging took most of the kernel's time. Zeros above the diagonal
            // and past b.
            let count = (hi - lo) * row;
            let mut e0 = tid;
            while e0 < count {
                let mut loaded = [0.0f64; STAGE_LOADS];
                for (u, value) in loaded.iter_mut().enumerate() {
                    let e = e0 + u * nt;
                    let (k, i) = (lo + e / row, e % row);
                    if e < count && i > k && i < bu {
                        *value = a.lower(i, k);
                    }
                }
                for (u, value) in loaded.iter().enumerate() {
                    let e = e0 + u * nt;
                    if e < count {
                        stage.set(e, *value);
                    }
                }
                e0 += STAGE_LOADS * nt;
            }
            if tid < hi - lo {
                taus.set(tid, tau.get(lo + tid));
            }
            thread::sync_threads();
            for k in (lo..hi).rev() {
                let tk = taus.get(k - lo);
                if tk == 0.0 {
                    continue;
                }
                let v = stage.sub((k - lo) * row, row);
                // The reflector's elements of the first array kept in registers for the update,
                // read from shared memory once (and used for both arrays up to b = 512, whose
                // rows are the same): the warps' shared-memory reads bounded the kernel.
                let mut v0 = [0.0f64; LANE_ELEMENTS];
                let second = |t: usize, first_array: f64| {
                    if narrow { first_array } else { v.get(lane + 32 * t + BACK_TRANSFORM_NARROW_B as usize) }
                };
                let (mut dot0, mut dot1) = (0.0f64, 0.0f64);
                for t in 0..LANE_ELEMENTS {
                    v0[t] = v.get(lane + 32 * t);
                    dot0 = math::fma(v0[t], z0[t], dot0);
                    dot1 = math::fma(second(t, v0[t]), z1[t], dot1);
                }
                let (f0, f1) = if narrow {
                    (tk * warp::reduce(dot0, add), tk * warp::reduce(dot1, add))
                } else {
                    let f = tk * warp::reduce(dot0 + dot1, add);
                    (f, f)
                };
                for t in 0..LANE_ELEMENTS {
                    z0[t] = math::fma(-f0, v0[t], z0[t]);
                    z1[t] = math::fma(-f1, second(t, v0[t]), z1[t]);
                }
            }
            hi = lo;
        }
        for t in 0..LANE_ELEMENTS {
            let ((j0, i0), (j1, i1)) = (at(0, t), at(1, t));
            if j0 < bu && i0 < bu {
                out.set(j0 * bu + i0, z0[t]);
            }
            if j1 < bu && i1 < bu {
                out.set(j1 * bu + i1, z1[t]);
            }
        }
    }
}

/// The first stage of the symmetric eigensolver: the Householder tridiagonalisation of each
/// image's `T`, one block per image (`blockIdx.x`), block `32·w` threads (`w ≤ 16`); dynamic
/// shared memory [`tridiagonal_shared_bytes`]`(b)` to keep the matrix in shared memory, else at
/// least [`tridiagonal_small_bytes`]`(b)` (the matrix in the scratch). Leaves in the scratch
/// ([`tridiagonal_scratch_parts`]) `d`, `e`, `τ` and the reflectors, for
/// [`tridiagonal_divide_and_conquer`](super::tridiagonal_divide_and_conquer) and
/// [`tridiagonal_back_transform`].
///
/// In: `t` (`b × b` per image, row-major, symmetric; `(T + Tᵀ)/2` is used).
///
/// # Safety
/// The launch gives at least [`tridiagonal_small_bytes`]`(b)` of dynamic shared memory and a
/// whole number of warps, at most 512 threads (its launch bounds); `b ≤` [`TRIDIAGONAL_MAX_B`];
/// each image's parts lie inside the slices: `b × b` of `t`, [`tridiagonal_scratch`]`(b)` of
/// `scratch`. Unchecked on the GPU; the simulator checks every access.
#[kernel(launch_bounds(512, 1))]
pub unsafe fn tridiagonal_reduce(t: &[f64], b: u32, scratch: &mut [f64]) {
    let img = thread::block_idx_x() as usize;
    let bu = b as usize;
    let bb = bu * bu;
    let parts = tridiagonal_scratch_parts(b);
    let (tid, nt) = (thread::thread_idx_x() as usize, thread::block_dim_x() as usize);
    // SAFETY (whole body): the kernel's contract: the image's parts lie inside the slices, the
    // launch gives the vectors' shared memory (and the matrix's where it is used from there).
    // Every thread runs every barrier; between barriers each element is written by one thread
    // (or one warp's lane, read by the same lane or after a warp barrier) and read only after.
    unsafe {
        let t_in = t.sub_unchecked(img * bb, bb);
        let per_image = tridiagonal_scratch(b) as usize;
        let base = Vector::image_part(scratch, img, per_image);
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
        let v = |i: usize| vectors.sub(i * bu, bu);
        let (d, e, tau) = (v(0), v(1), v(2));
        let (vbuf, pbuf, pvbuf) = (v(3), v(4), v(5));
        tridiagonalise(Space { a, d, e, tau, vbuf, pbuf, pvbuf, bu }, t_in);
        // The reflectors (where they are in shared memory), d, e and τ into the scratch.
        if in_shared {
            let mut i = tid;
            while i < packed_len {
                in_scratch.set(i, a.0.get(i));
                i += nt;
            }
        }
        let out = |offset: u32| base.sub(offset as usize, bu);
        let (d_out, e_out, tau_out) = (out(parts.diagonal), out(parts.off_diagonal), out(parts.tau));
        let mut i = tid;
        while i < bu {
            d_out.set(i, d.get(i));
            e_out.set(i, e.get(i));
            tau_out.set(i, tau.get(i));
            i += nt;
        }
    }
}
