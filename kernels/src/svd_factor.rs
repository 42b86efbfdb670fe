//! SVD on the GPU: the leading singular triplets of a batch of images, by subspace iteration with
//! Rayleigh–Ritz on the f64 Gram matrix. The algorithm and its trade-offs are in
//! `docs/svd-gpu.md`; the host driver is `host/src/svd_factor.rs`; tests: `tests/svd_factor.rs`.
//!
//! Every kernel works on a batch: `blockIdx.z` (or `blockIdx.x` for the one-block-per-image
//! kernel) selects the image, and each operand's [`Layout`] gives its row, column and batch
//! strides in elements, so one launch serves every image of a batch and transposed views cost
//! nothing. f64 throughout, but for the f32 outputs the reconstruction reads.
//!
//! The helper bodies below are `unsafe fn`s whose contract is their kernel's: every pointer valid
//! for the elements the documented layout implies, and all threads of the block calling them.
#![allow(unsafe_op_in_unsafe_fn)]

use crate::{kernel, math, shared, thread};

/// Where element `(i, j)` of image `z` of a strided batch of matrices lives:
/// `z·batch + i·row + j·col` elements from the base pointer.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    /// Step between rows, elements.
    pub row: u32,
    /// Step between columns, elements.
    pub col: u32,
    /// Step between images, elements.
    pub batch: u32,
}

impl Layout {
    /// Row-major `rows × ld` storage (column `j` of row `i` at `i·ld + j`), images `batch` apart.
    pub const fn row_major(ld: u32, batch: u32) -> Layout {
        Layout { row: ld, col: 1, batch }
    }

    /// The transposed view of the same storage: element `(i, j)` of the view is `(j, i)` here.
    pub const fn transposed(self) -> Layout {
        Layout { row: self.col, col: self.row, batch: self.batch }
    }

    #[inline(always)]
    fn at(self, i: u32, j: u32) -> usize {
        i as usize * self.row as usize + j as usize * self.col as usize
    }
}

/// Output tile of [`gemm_f64`]: `GEMM_TILE × GEMM_TILE` elements per block.
pub const GEMM_TILE: u32 = 64;
/// Step along the inner dimension per shared-memory stage.
pub const GEMM_TILE_K: u32 = 16;
/// Threads per block of the GEMM kernels (1-D): each computes 4 × 4 outputs.
pub const GEMM_THREADS: u32 = 256;
/// Shared-memory row length (f64) of a stage: one more than the tile, so that the column-wise
/// stores of a transposed operand hit different banks.
const GEMM_LD: usize = GEMM_TILE as usize + 1;
/// Dynamic shared memory of the GEMM kernels, bytes: one stage of each operand.
pub const GEMM_SHARED_BYTES: u32 = 2 * GEMM_TILE_K * (GEMM_TILE + 1) * 8;

/// Output element types of the GEMM.
trait Store: Copy {
    fn from_f64(v: f64) -> Self;
}
impl Store for f64 {
    #[inline(always)]
    fn from_f64(v: f64) -> f64 {
        v
    }
}
impl Store for f32 {
    #[inline(always)]
    fn from_f64(v: f64) -> f32 {
        v as f32
    }
}

/// `C = A·B·diag(scale)` for every image of the batch, f64 accumulation. `A` is `m × k`, `B` is
/// `k × n`, `C` is `m × n`, each through its [`Layout`]; `scale` (`n` values per image,
/// `scale_batch` apart) may be null for no scaling. With `symmetric ≠ 0` the product is known to
/// be symmetric (`m = n`, e.g. a Gram matrix `AᵀA`): blocks below the diagonal return at once and
/// the others also write the mirrored element.
///
/// The 2-D grid covers `C` in 64 × 64 tiles (x: columns, y: rows), z the images; each of the 256
/// threads holds 4 × 4 outputs, rows `ty + 16·r` and columns `tx + 16·c` so that the shared reads
/// of a warp are conflict-free. Stages of 16 along `k` go through shared memory, loaded along
/// whichever dimension of the operand is contiguous.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn gemm_body<T: Store>(
    a: *const f64,
    la: Layout,
    b: *const f64,
    lb: Layout,
    c: *mut T,
    lc: Layout,
    scale: *const f64,
    scale_batch: u32,
    (m, n, k): (u32, u32, u32),
    symmetric: u32,
) {
    const TILE: u32 = GEMM_TILE;
    const TK: u32 = GEMM_TILE_K;
    let (bi, bj) = (thread::block_idx_y(), thread::block_idx_x());
    if symmetric != 0 && bi > bj {
        return;
    }
    let z = thread::block_idx_z() as usize;
    let a = a.add(z * la.batch as usize);
    let b = b.add(z * lb.batch as usize);
    let c = c.add(z * lc.batch as usize);
    let tid = thread::thread_idx_x();
    let (tx, ty) = (tid % 16, tid / 16);
    let (row0, col0) = (bi * TILE, bj * TILE);
    let a_tile = shared::region::<f64>(0, TK as usize * GEMM_LD);
    let b_tile = shared::region::<f64>(TK as usize * GEMM_LD * 8, TK as usize * GEMM_LD);

    let mut acc = [[0.0f64; 4]; 4];
    let mut p0 = 0;
    while p0 < k {
        for q in 0..(TILE * TK / GEMM_THREADS) {
            let idx = tid + GEMM_THREADS * q;
            // A's stage: TILE rows × TK columns, stored transposed ([p][i]).
            let (ii, pp) = if la.col == 1 { (idx / TK, idx % TK) } else { (idx % TILE, idx / TILE) };
            let (gi, gp) = (row0 + ii, p0 + pp);
            let v = if gi < m && gp < k { *a.add(la.at(gi, gp)) } else { 0.0 };
            a_tile.write(pp as usize * GEMM_LD + ii as usize, v);
            // B's stage: TK rows × TILE columns ([p][j]).
            let (pp, jj) = if lb.col == 1 { (idx / TILE, idx % TILE) } else { (idx % TK, idx / TK) };
            let (gp, gj) = (p0 + pp, col0 + jj);
            let v = if gp < k && gj < n { *b.add(lb.at(gp, gj)) } else { 0.0 };
            b_tile.write(pp as usize * GEMM_LD + jj as usize, v);
        }
        thread::sync_threads();
        for p in 0..TK as usize {
            let mut av = [0.0f64; 4];
            let mut bv = [0.0f64; 4];
            for r in 0..4 {
                av[r] = a_tile.read(p * GEMM_LD + ty as usize + 16 * r);
                bv[r] = b_tile.read(p * GEMM_LD + tx as usize + 16 * r);
            }
            for r in 0..4 {
                for s in 0..4 {
                    acc[r][s] = math::fma(av[r], bv[s], acc[r][s]);
                }
            }
        }
        thread::sync_threads();
        p0 += TK;
    }

    let scale = if scale.is_null() { scale } else { scale.add(z * scale_batch as usize) };
    for (r, row) in acc.iter().enumerate() {
        let i = row0 + ty + 16 * r as u32;
        for (s, &value) in row.iter().enumerate() {
            let j = col0 + tx + 16 * s as u32;
            if i < m && j < n {
                let value = if scale.is_null() { value } else { value * *scale.add(j as usize) };
                *c.add(lc.at(i, j)) = T::from_f64(value);
                if symmetric != 0 && bi != bj {
                    *c.add(lc.at(j, i)) = T::from_f64(value);
                }
            }
        }
    }
}

/// [`gemm_body`] with an f64 result. Launch: block `GEMM_THREADS`, grid
/// `⌈n/64⌉ × ⌈m/64⌉ × images`, `GEMM_SHARED_BYTES` of dynamic shared memory.
#[kernel]
pub unsafe fn gemm_f64(
    a: *const f64,
    la: Layout,
    b: *const f64,
    lb: Layout,
    c: *mut f64,
    lc: Layout,
    scale: *const f64,
    scale_batch: u32,
    m: u32,
    n: u32,
    k: u32,
    symmetric: u32,
) {
    gemm_body(a, la, b, lb, c, lc, scale, scale_batch, (m, n, k), symmetric);
}

/// [`gemm_f64`] rounding the result to f32 (the reconstruction's operands).
#[kernel]
pub unsafe fn gemm_f64_to_f32(
    a: *const f64,
    la: Layout,
    b: *const f64,
    lb: Layout,
    c: *mut f32,
    lc: Layout,
    scale: *const f64,
    scale_batch: u32,
    m: u32,
    n: u32,
    k: u32,
    symmetric: u32,
) {
    gemm_body(a, la, b, lb, c, lc, scale, scale_batch, (m, n, k), symmetric);
}

/// `dst[i] = src[i] / 255` for `count` bytes (8-bit pixels to f64 in `[0, 1]`). Any 1-D launch
/// (grid-stride loop).
#[kernel]
pub unsafe fn gray8_to_f64(src: *const u8, dst: *mut f64, count: u32) {
    let mut i = thread::index_1d();
    while i < count {
        *dst.add(i as usize) = *src.add(i as usize) as f64 / 255.0;
        i += thread::grid_stride_1d();
    }
}

/// `dst[i] = src[i]` widened to f64, for `count` values. Any 1-D launch.
#[kernel]
pub unsafe fn f32_to_f64(src: *const f32, dst: *mut f64, count: u32) {
    let mut i = thread::index_1d();
    while i < count {
        *dst.add(i as usize) = *src.add(i as usize) as f64;
        i += thread::grid_stride_1d();
    }
}

/// Starts every image's subspace: copies the orthonormal `r × b` basis `q0` (row-major) into the
/// left half of each image's `r × 2b` work matrix `qy` (row-major, images `batch` apart). Grid
/// `(x, 1, images)`, any 1-D block.
#[kernel]
pub unsafe fn init_subspace(q0: *const f64, qy: *mut f64, r: u32, b: u32, batch: u32) {
    let qy = qy.add(thread::block_idx_z() as usize * batch as usize);
    let mut i = thread::index_1d();
    while i < r * b {
        *qy.add(((i / b) * 2 * b + i % b) as usize) = *q0.add(i as usize);
        i += thread::grid_stride_1d();
    }
}

/// Per image, block partial sums of `Σ (a − x)²` (or `Σ a²` when `x` is null) over `count`
/// elements: `a` f64 (images `a_batch` apart), `x` f32 (`x_batch` apart). Block `bx` of image `z`
/// writes `partial[z·gridDim.x + bx]`. Grid `(blocks, 1, images)`; 1-D block of a power of two
/// ≥ 32 threads; `blockDim.x × 8` bytes of dynamic shared memory.
#[kernel]
pub unsafe fn squared_difference_sums(
    a: *const f64,
    a_batch: u32,
    x: *const f32,
    x_batch: u32,
    count: u32,
    partial: *mut f64,
) {
    let z = thread::block_idx_z() as usize;
    let a = a.add(z * a_batch as usize);
    let x = if x.is_null() { x } else { x.add(z * x_batch as usize) };
    let tid = thread::thread_idx_x();
    let mut acc = 0.0f64;
    let mut i = thread::index_1d();
    while i < count {
        let d = if x.is_null() { *a.add(i as usize) } else { *a.add(i as usize) - *x.add(i as usize) as f64 };
        acc = math::fma(d, d, acc);
        i += thread::grid_stride_1d();
    }
    let sums = shared::dynamic::<f64>();
    sums.write(tid as usize, acc);
    thread::sync_threads();
    let mut active = thread::block_dim_x() / 2;
    while active > 0 {
        if tid < active {
            let other = sums.read((tid + active) as usize);
            sums.write(tid as usize, sums.read(tid as usize) + other);
        }
        thread::sync_threads();
        active /= 2;
    }
    if tid == 0 {
        *partial.add(z * thread::grid_dim_x() as usize + thread::block_idx_x() as usize) = sums.read(0);
    }
}

/// f64 scratch per image of [`rayleigh_ritz`], elements, for block size `b`.
pub const fn rayleigh_ritz_scratch(b: u32) -> u32 {
    3 * b * b + 6 * b + 2
}

/// Ritz values at or below this fraction of the largest are numerically zero (singular values
/// ≤ 1e-6·σ₁): their vectors are kept as they are instead of being multiplied by the Gram matrix.
pub const NULL_THRESHOLD: f64 = 1e-12;

/// Cap on Jacobi sweeps; converged matrices need far fewer (quadratic convergence).
const MAX_SWEEPS: u32 = 40;

/// The small dense step of one subspace iteration, one block per image (`blockIdx.x`), any 1-D
/// block size; 8 bytes of dynamic shared memory.
///
/// In: `p` (`2b × b`, row-major, images `2b²` apart) = `[Q Y]ᵀ·Y` with `Y = G·Q`, so its top half is
/// `T = QᵀGQ` and its bottom half `S = YᵀY`. It solves `T = Z·diag(θ)·Zᵀ` (cyclic Jacobi, θ
/// non-increasing), writes the Ritz values `theta` (`b` per image), `sigma = √θ` and `inv_sigma`
/// (`1/σ`, or 0 for numerically zero ones), the sorted eigenvectors `ritz` (`b × b`, row-major)
/// and `converged[image]` = 1 when each of the first `k` Ritz pairs has residual
/// `‖G·q − θ·q‖ ≤ tol·θ₁` (from `ZᵀSZ`: `‖r_i‖² = (ZᵀSZ)_ii − θ_i²`).
///
/// It also writes `m` (`2b × b`): the next basis is `[Q Y]·m` (used while other images of the
/// batch still iterate), the columns
/// `G·q_i/‖G·q_i‖` (or `q_i` for numerically zero θ_i) made orthonormal by Löwdin's symmetric
/// orthogonalisation `X ← X·(XᵀX)^(-1/2)`, which keeps them closest to the Ritz directions.
#[kernel]
pub unsafe fn rayleigh_ritz(
    p: *const f64,
    b: u32,
    k: u32,
    tol: f64,
    scratch: *mut f64,
    theta: *mut f64,
    sigma: *mut f64,
    inv_sigma: *mut f64,
    ritz: *mut f64,
    m: *mut f64,
    converged: *mut u32,
) {
    let img = thread::block_idx_x() as usize;
    let bu = b as usize;
    let bb = bu * bu;
    let p = p.add(img * 2 * bb);
    let (t_in, s_in) = (p, p.add(bb));
    let scratch = scratch.add(img * rayleigh_ritz_scratch(b) as usize);
    let x = scratch;
    let zm = scratch.add(bb);
    let tmp = scratch.add(2 * bb);
    let vals = scratch.add(3 * bb); // b: unsorted eigenvalues
    let perm = vals.add(bu); // b: perm[r] = index of the r-th largest
    let e = perm.add(bu); // b
    let f = e.add(bu); // b
    let rot = f.add(bu); // b + 2: (c, s) per pair
    let theta = theta.add(img * bu);
    let sigma = sigma.add(img * bu);
    let inv_sigma = inv_sigma.add(img * bu);
    let ritz = ritz.add(img * bb);
    let m = m.add(img * 2 * bb);
    let (tid, nt) = (thread::thread_idx_x() as usize, thread::block_dim_x() as usize);

    // X = (T + Tᵀ)/2, Z = I.
    let mut i = tid;
    while i < bb {
        let (r, c) = (i / bu, i % bu);
        *x.add(i) = 0.5 * (*t_in.add(i) + *t_in.add(c * bu + r));
        *zm.add(i) = if r == c { 1.0 } else { 0.0 };
        i += nt;
    }
    thread::sync_threads();
    jacobi(x, zm, rot, bu);

    // Sort the eigenvalues, largest first: perm[rank] = index.
    let mut i = tid;
    while i < bu {
        *vals.add(i) = *x.add(i * bu + i);
        i += nt;
    }
    thread::sync_threads();
    let mut i = tid;
    while i < bu {
        let v = *vals.add(i);
        let mut rank = 0;
        for j in 0..bu {
            let w = *vals.add(j);
            if w > v || (w == v && j < i) {
                rank += 1;
            }
        }
        *perm.add(rank) = i as f64;
        i += nt;
    }
    thread::sync_threads();
    // ritz[:, r] = Z[:, perm[r]]; theta, sigma.
    let mut i = tid;
    while i < bb {
        let (row, r) = (i / bu, i % bu);
        *ritz.add(i) = *zm.add(row * bu + *perm.add(r) as usize);
        i += nt;
    }
    let theta0 = (*vals.add(*perm as usize)).max(0.0);
    let mut i = tid;
    while i < bu {
        let th = *vals.add(*perm.add(i) as usize);
        *theta.add(i) = th;
        let s = math::sqrt(th.max(0.0));
        *sigma.add(i) = s;
        *inv_sigma.add(i) = if th > NULL_THRESHOLD * theta0 && s > 0.0 { 1.0 / s } else { 0.0 };
        i += nt;
    }
    thread::sync_threads();

    // D = ZᵀSZ (in x); d_i = D_ii = ‖G·q_i‖².
    block_matmul(tmp, s_in, false, ritz, bu, bu, bu);
    thread::sync_threads();
    block_matmul(x, ritz, true, tmp, bu, bu, bu);
    thread::sync_threads();
    let flag = shared::region::<u32>(0, 1);
    if tid == 0 {
        flag.write(0, 1);
    }
    thread::sync_threads();
    let mut i = tid;
    while i < bu {
        let th = *theta.add(i);
        let d = *x.add(i * bu + i);
        let residual = math::sqrt((d - th * th).max(0.0));
        if (i as u32) < k && theta0 > 0.0 && residual > tol * theta0 {
            flag.write(0, 0);
        }
        let good = th > NULL_THRESHOLD * theta0 && d > 0.0;
        let null = !good;
        *e.add(i) = if null { 1.0 } else { 0.0 };
        *f.add(i) = if null { 0.0 } else { 1.0 / math::sqrt(d) };
        i += nt;
    }
    thread::sync_threads();
    if tid == 0 {
        *converged.add(img) = flag.read(0);
    }

    // W = XᵀX of the new columns X = Q·Z·E + Y·Z·F: diag(e) + F·D·F (cross terms vanish).
    let mut i = tid;
    while i < bb {
        let (r, c) = (i / bu, i % bu);
        let w = *f.add(r) * *x.add(i) * *f.add(c) + if r == c { *e.add(r) } else { 0.0 };
        *x.add(i) = w;
        *zm.add(i) = if r == c { 1.0 } else { 0.0 };
        i += nt;
    }
    thread::sync_threads();
    jacobi(x, zm, rot, bu);
    // W^(-1/2) = Z·Λ^(-1/2)·Zᵀ into tmp, with Λ floored against breakdown.
    let mut lmax = 0.0f64;
    for l in 0..bu {
        lmax = lmax.max(*x.add(l * bu + l));
    }
    let mut i = tid;
    while i < bb {
        let (r, c) = (i / bu, i % bu);
        let mut acc = 0.0;
        for l in 0..bu {
            let lam = (*x.add(l * bu + l)).max(1e-14 * lmax).max(f64::MIN_POSITIVE);
            acc = math::fma(*zm.add(r * bu + l) * *zm.add(c * bu + l), 1.0 / math::sqrt(lam), acc);
        }
        *tmp.add(i) = acc;
        i += nt;
    }
    thread::sync_threads();
    // m = [ritz·E; ritz·F]·W^(-1/2).
    let winv = tmp;
    let mut i = tid;
    while i < 2 * bb {
        let (r, c) = (i / bu, i % bu);
        let (row, sel) = if r < bu { (r, e) } else { (r - bu, f) };
        let mut acc = 0.0;
        for l in 0..bu {
            acc = math::fma(*ritz.add(row * bu + l) * *sel.add(l), *winv.add(l * bu + c), acc);
        }
        *m.add(i) = acc;
        i += nt;
    }
}

/// `out = op(a)·bm` for `n × n` matrices in global memory (row-major), `op` the transpose when
/// `transpose_a`; `rows × cols` of the result with inner dimension `inner`. The whole block shares
/// the outputs.
#[inline(always)]
unsafe fn block_matmul(
    out: *mut f64,
    a: *const f64,
    transpose_a: bool,
    bm: *const f64,
    rows: usize,
    cols: usize,
    inner: usize,
) {
    let (tid, nt) = (thread::thread_idx_x() as usize, thread::block_dim_x() as usize);
    let mut i = tid;
    while i < rows * cols {
        let (r, c) = (i / cols, i % cols);
        let mut acc = 0.0;
        for l in 0..inner {
            let av = if transpose_a { *a.add(l * rows + r) } else { *a.add(r * inner + l) };
            acc = math::fma(av, *bm.add(l * cols + c), acc);
        }
        *out.add(i) = acc;
        i += nt;
    }
}

/// Cyclic parallel Jacobi on the symmetric `n × n` matrix `a` (row-major, global memory), with
/// the rotations accumulated into `z` (`a ← JᵀaJ`, `z ← zJ`): on return `a` is diagonal to working
/// precision. Each round rotates `⌈n/2⌉` disjoint pairs at once (round-robin ordering); a pair is
/// skipped when `|a_pq| ≤ ε·√|a_pp·a_qq|`. Sweeps stop when one rotates nothing. `rot` holds
/// `n + 2` values. Uses the first u32 of dynamic shared memory. All threads of the block call it.
#[inline(always)]
unsafe fn jacobi(a: *mut f64, z: *mut f64, rot: *mut f64, n: usize) {
    let (tid, nt) = (thread::thread_idx_x() as usize, thread::block_dim_x() as usize);
    let players = n + n % 2;
    let half = players / 2;
    let flag = shared::region::<u32>(0, 1);
    if players < 2 {
        thread::sync_threads();
        return;
    }
    // Pair `t` of round `round`: the circle method, player 0 fixed.
    let pair = |t: usize, round: usize| -> (usize, usize) {
        let player = |pos: usize| if pos == 0 { 0 } else { (pos - 1 + round) % (players - 1) + 1 };
        (player(t), player(players - 1 - t))
    };
    for _sweep in 0..MAX_SWEEPS {
        if tid == 0 {
            flag.write(0, 0);
        }
        thread::sync_threads();
        for round in 0..players - 1 {
            let mut t = tid;
            while t < half {
                let (p, q) = pair(t, round);
                let (mut c, mut s) = (1.0, 0.0);
                if p < n && q < n {
                    let apq = *a.add(p * n + q);
                    let (app, aqq) = (*a.add(p * n + p), *a.add(q * n + q));
                    if apq != 0.0 && math::abs(apq) > f64::EPSILON * math::sqrt(math::abs(app * aqq)) {
                        let tau = (aqq - app) / (2.0 * apq);
                        let tt = if tau >= 0.0 { 1.0 } else { -1.0 }
                            / (math::abs(tau) + math::sqrt(math::fma(tau, tau, 1.0)));
                        c = 1.0 / math::sqrt(math::fma(tt, tt, 1.0));
                        s = tt * c;
                        flag.write(0, 1);
                    }
                }
                *rot.add(2 * t) = c;
                *rot.add(2 * t + 1) = s;
                t += nt;
            }
            thread::sync_threads();
            // Columns p, q of a and z.
            let mut i = tid;
            while i < n * half {
                let (row, t) = (i / half, i % half);
                let (c, s) = (*rot.add(2 * t), *rot.add(2 * t + 1));
                if s != 0.0 {
                    let (p, q) = pair(t, round);
                    let (x, y) = (*a.add(row * n + p), *a.add(row * n + q));
                    *a.add(row * n + p) = c * x - s * y;
                    *a.add(row * n + q) = s * x + c * y;
                    let (x, y) = (*z.add(row * n + p), *z.add(row * n + q));
                    *z.add(row * n + p) = c * x - s * y;
                    *z.add(row * n + q) = s * x + c * y;
                }
                i += nt;
            }
            thread::sync_threads();
            // Rows p, q of a.
            let mut i = tid;
            while i < n * half {
                let (t, col) = (i / n, i % n);
                let (c, s) = (*rot.add(2 * t), *rot.add(2 * t + 1));
                if s != 0.0 {
                    let (p, q) = pair(t, round);
                    let (x, y) = (*a.add(p * n + col), *a.add(q * n + col));
                    *a.add(p * n + col) = c * x - s * y;
                    *a.add(q * n + col) = s * x + c * y;
                }
                i += nt;
            }
            thread::sync_threads();
        }
        let rotated = flag.read(0);
        thread::sync_threads();
        if rotated == 0 {
            break;
        }
    }
}
