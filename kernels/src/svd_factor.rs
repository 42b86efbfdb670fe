//! SVD on the GPU: the leading singular triplets of a batch of images, by subspace iteration with
//! Rayleigh–Ritz on the f64 Gram matrix. The algorithm and its trade-offs are in
//! `docs/svd-gpu.md`; the host driver is `host/src/families/svd_factor/`; tests: `tests/svd_factor.rs`.
//!
//! Every kernel works on a batch: `blockIdx.z` (or `blockIdx.x` for the one-block-per-image
//! kernel) selects the image, and each operand's [`Layout`] gives its row, column and batch
//! strides in elements, so one launch serves every image of a batch and transposed views cost
//! nothing. f64 throughout, but for the f32 outputs the reconstruction reads.
//!
//! Every kernel takes device slices. The two one-block-per-image Jacobi kernels ([`ritz_eigen`],
//! [`cholesky_inverse`]) take their image's parts of them by `sub_unchecked` and read them
//! unchecked on the GPU (checked in the simulator): bounds checks changed the register allocation
//! of the Jacobi solver inlined beside them. They keep their `b × b` work matrices in a
//! `JacobiSpace`: shared memory where the launch gives enough, else the image's part of the global
//! `scratch` slice, addressed like shared memory; the solver is an `unsafe fn` whose contract is
//! that all threads of the block call it.
#![allow(unsafe_op_in_unsafe_fn)]

use gpu_std::math::{self, Float};
use gpu_std::slice::SliceMut;
use gpu_std::{kernel, shared, thread};

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

/// Output tile of [`gemm_f64_to`]: `GEMM_TILE × GEMM_TILE` elements per block.
pub const GEMM_TILE: u32 = 64;
/// Step along the inner dimension per shared-memory stage.
pub const GEMM_TILE_K: u32 = 16;
/// Threads per block of the GEMM kernels (1-D): each computes 4 × 4 outputs.
pub const GEMM_THREADS: u32 = 256;
/// Shared-memory row length (f64) of a stage: one more than the tile, so that the column-wise
/// stores of a transposed operand hit different banks.
const GEMM_LD: usize = GEMM_TILE as usize + 1;
/// Dynamic shared memory of the GEMM kernels, bytes: one stage of each operand, f64 (the kernel
/// allocates them in this order).
pub const GEMM_SHARED_BYTES: u32 = shared::Layout::new()
    .array::<f64>(GEMM_TILE_K as usize * GEMM_LD)
    .array::<f64>(GEMM_TILE_K as usize * GEMM_LD)
    .bytes_u32();

/// `C = A·B·diag(scale)` for every image of a batch, accumulated in f64 and stored as `T`
/// (entries `gemm_f64_to_f64`, and `gemm_f64_to_f32` for the reconstruction's operands). `A` is
/// `m × k`, `B` is `k × n`, `C` is `m × n`, each through its [`Layout`] from the start of its
/// slice; `scale` holds `n` values per image, `scale_batch` apart, or is empty for no scaling.
/// With `symmetric ≠ 0` the product is known to be symmetric (`m = n`, e.g. a Gram matrix `AᵀA`):
/// blocks below the diagonal return at once and the others also write the mirrored element.
///
/// Launch: block [`GEMM_THREADS`], grid `⌈n/64⌉ × ⌈m/64⌉ × images` (x: columns, y: rows, z: the
/// images), [`GEMM_SHARED_BYTES`] of dynamic shared memory. Each of the 256 threads holds 4 × 4
/// outputs, rows `ty + 16·r` and columns `tx + 16·c` so that the shared reads of a warp are
/// conflict-free. Stages of 16 along `k` go through shared memory, loaded along whichever
/// dimension of the operand is contiguous.
#[kernel(f64, f32)]
pub fn gemm_f64_to<T: Float>(
    a: &[f64],
    la: Layout,
    b: &[f64],
    lb: Layout,
    c: &mut [T],
    lc: Layout,
    scale: &[f64],
    scale_batch: u32,
    m: u32,
    n: u32,
    k: u32,
    symmetric: u32,
) {
    const TILE: u32 = GEMM_TILE;
    const TK: u32 = GEMM_TILE_K;
    let (bi, bj) = (thread::block_idx_y(), thread::block_idx_x());
    if symmetric != 0 && bi > bj {
        return;
    }
    let z = thread::block_idx_z() as usize;
    let a = a.tail(z * la.batch as usize);
    let b = b.tail(z * lb.batch as usize);
    let mut c = c.tail(z * lc.batch as usize);
    let tid = thread::thread_idx_x();
    let (tx, ty) = (tid % 16, tid / 16);
    let (row0, col0) = (bi * TILE, bj * TILE);
    let mut smem = shared::Allocator::new();
    let a_tile = smem.array::<f64>(TK as usize * GEMM_LD);
    let b_tile = smem.array::<f64>(TK as usize * GEMM_LD);

    let mut acc = [[0.0f64; 4]; 4];
    let mut p0 = 0;
    while p0 < k {
        for q in 0..(TILE * TK / GEMM_THREADS) {
            let idx = tid + GEMM_THREADS * q;
            // A's stage: TILE rows × TK columns, stored transposed ([p][i]).
            let (ii, pp) = if la.col == 1 { (idx / TK, idx % TK) } else { (idx % TILE, idx / TILE) };
            let (gi, gp) = (row0 + ii, p0 + pp);
            let v = if gi < m && gp < k { a[la.at(gi, gp)] } else { 0.0 };
            // SAFETY (the shared accesses): indices below TK·GEMM_LD, the arrays' length; each
            // element is written by one thread between the barriers and read after them.
            unsafe { a_tile.write(pp as usize * GEMM_LD + ii as usize, v) };
            // B's stage: TK rows × TILE columns ([p][j]).
            let (pp, jj) = if lb.col == 1 { (idx / TILE, idx % TILE) } else { (idx % TK, idx / TK) };
            let (gp, gj) = (p0 + pp, col0 + jj);
            let v = if gp < k && gj < n { b[lb.at(gp, gj)] } else { 0.0 };
            unsafe { b_tile.write(pp as usize * GEMM_LD + jj as usize, v) };
        }
        thread::sync_threads();
        for p in 0..TK as usize {
            let mut av = [0.0f64; 4];
            let mut bv = [0.0f64; 4];
            for r in 0..4 {
                unsafe {
                    av[r] = a_tile.read(p * GEMM_LD + ty as usize + 16 * r);
                    bv[r] = b_tile.read(p * GEMM_LD + tx as usize + 16 * r);
                }
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

    let scale = (!scale.is_empty()).then(|| scale.sub(z * scale_batch as usize, n as usize));
    // C's last element, checked once: every (i, j) below has i < m, j < n, so an index no larger.
    // (A check per store keeps `acc` out of registers: 128 bytes of stack.)
    if m > 0 && n > 0 {
        let _ = c[lc.at(m - 1, n - 1)];
    }
    for (r, row) in acc.iter().enumerate() {
        let i = row0 + ty + 16 * r as u32;
        for (s, &value) in row.iter().enumerate() {
            let j = col0 + tx + 16 * s as u32;
            if i < m && j < n {
                let value = match scale {
                    Some(scale) => value * scale[j as usize],
                    None => value,
                };
                // SAFETY: i, j < m = n (symmetric), so both indices are at most C's last, checked.
                unsafe {
                    c.set_unchecked(lc.at(i, j), T::from_f64(value));
                    if symmetric != 0 && bi != bj {
                        c.set_unchecked(lc.at(j, i), T::from_f64(value));
                    }
                }
            }
        }
    }
}

/// `dst[i] = src[i] / 255` for every `i < dst.len()` (8-bit pixels to f64 in `[0, 1]`; `src` at
/// least as long). Any 1-D launch (grid-stride loop).
#[kernel]
pub fn gray8_to_f64(src: &[u8], dst: &mut [f64]) {
    let src = src.sub(0, dst.len());
    let mut i = thread::index_1d() as usize;
    while i < dst.len() {
        dst[i] = src[i] as f64 / 255.0;
        i += thread::grid_stride_1d() as usize;
    }
}

/// `dst[i] = src[i]` widened to f64, for every `i < dst.len()` (`src` at least as long). Any 1-D
/// launch.
#[kernel]
pub fn f32_to_f64(src: &[f32], dst: &mut [f64]) {
    let src = src.sub(0, dst.len());
    let mut i = thread::index_1d() as usize;
    while i < dst.len() {
        dst[i] = src[i] as f64;
        i += thread::grid_stride_1d() as usize;
    }
}

/// Starts every image's subspace: copies the orthonormal `r × b` basis `q0` (row-major) into the
/// left half of each image's `r × 2b` work matrix in `qy` (row-major, images `batch` apart). Grid
/// `(x, 1, images)`, any 1-D block.
#[kernel]
pub fn init_subspace(q0: &[f64], qy: &mut [f64], r: u32, b: u32, batch: u32) {
    let mut qy = qy.sub(thread::block_idx_z() as usize * batch as usize, (r * 2 * b) as usize);
    let mut i = thread::index_1d();
    while i < r * b {
        qy[((i / b) * 2 * b + i % b) as usize] = q0[i as usize];
        i += thread::grid_stride_1d();
    }
}

/// Per image, block partial sums of `Σ (a − x)²` (or `Σ a²` when `x` is empty) over `count`
/// elements: `a` f64 (images `a_batch` apart), `x` f32 (`x_batch` apart). Block `bx` of image `z`
/// writes `partial[z·gridDim.x + bx]`. Grid `(blocks, 1, images)`; 1-D block of a power of two
/// ≥ 32 threads; `blockDim.x × 8` bytes of dynamic shared memory.
#[kernel]
pub fn squared_difference_sums(
    a: &[f64],
    a_batch: u32,
    x: &[f32],
    x_batch: u32,
    count: u32,
    partial: &mut [f64],
) {
    let z = thread::block_idx_z() as usize;
    let a = a.sub(z * a_batch as usize, count as usize);
    let x = (!x.is_empty()).then(|| x.sub(z * x_batch as usize, count as usize));
    let tid = thread::thread_idx_x();
    let mut acc = 0.0f64;
    let mut i = thread::index_1d();
    while i < count {
        let d = match x {
            Some(x) => a[i as usize] - x[i as usize] as f64,
            None => a[i as usize],
        };
        acc = math::fma(d, d, acc);
        i += thread::grid_stride_1d();
    }
    let sums = shared::dynamic::<f64>();
    // SAFETY (the shared accesses): indices below blockDim.x, the launch's shared f64 count; each
    // element is written by one thread between barriers and read after the next one.
    unsafe { sums.write(tid as usize, acc) };
    thread::sync_threads();
    let mut active = thread::block_dim_x() / 2;
    while active > 0 {
        if tid < active {
            unsafe {
                let other = sums.read((tid + active) as usize);
                sums.write(tid as usize, sums.read(tid as usize) + other);
            }
        }
        thread::sync_threads();
        active /= 2;
    }
    if tid == 0 {
        partial[z * thread::grid_dim_x() as usize + thread::block_idx_x() as usize] = unsafe { sums.read(0) };
    }
}

/// Ritz values at or below this fraction of the largest are numerically zero (singular values
/// ≤ 1e-6·σ₁): their vectors are kept as they are instead of being multiplied by the Gram matrix.
pub const NULL_THRESHOLD: f64 = 1e-12;

/// [`cholesky_inverse`] floors a pivot that fell below this fraction of its diagonal element of
/// the Gram matrix (a numerically dependent column) there.
pub const PIVOT_FLOOR: f64 = 1e-12;

/// Cap on Jacobi sweeps; converged matrices need far fewer (quadratic convergence).
const MAX_SWEEPS: u32 = 40;

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

/// Dynamic shared memory, bytes, with which [`ritz_eigen`] and [`cholesky_inverse`] keep their
/// Jacobi work space in shared memory instead of global scratch (a flag, then the space).
pub const fn jacobi_shared_bytes(b: u32) -> u32 {
    8 + 8 * jacobi_elements(b)
}

/// f64 scratch per image of [`ritz_eigen`] and [`cholesky_inverse`], elements: the Jacobi work
/// space when it does not fit in shared memory, and two vectors.
pub const fn eigen_scratch(b: u32) -> u32 {
    jacobi_elements(b) + 2 * b
}

/// Image `blockIdx.x`'s part of the `scratch` of [`ritz_eigen`] and [`cholesky_inverse`]
/// ([`eigen_scratch`]`(b)` elements), and where its two vectors start in it (after the Jacobi work
/// space).
///
/// # Safety
/// The image's part lies inside `scratch` (checked only in the simulator).
#[inline(always)]
#[track_caller]
unsafe fn image_scratch(scratch: SliceMut<f64>, b: u32) -> (SliceMut<f64>, usize) {
    let per_image = eigen_scratch(b) as usize;
    (
        scratch.sub_unchecked(thread::block_idx_x() as usize * per_image, per_image),
        jacobi_elements(b) as usize,
    )
}

/// One image's Jacobi work space: matrix `x` and accumulator `z` (`b × b`, row stride `ld`) and
/// the per-round rotations; in shared memory when the launch gave [`jacobi_shared_bytes`], else in
/// global scratch. Like shared memory's arrays, its accessors are unchecked on the GPU (the
/// solver's hot loops) and checked in the simulator.
#[derive(Clone, Copy)]
struct JacobiSpace {
    x: *mut f64,
    z: *mut f64,
    rot: *mut f64,
    ld: usize,
    /// The matrices' size `b`, for the simulator's checks.
    size: usize,
}

impl JacobiSpace {
    #[inline(always)]
    unsafe fn new(scratch: *mut f64, b: usize) -> JacobiSpace {
        let ld = jacobi_ld(b as u32) as usize;
        let base = if shared::dynamic_bytes() >= jacobi_shared_bytes(b as u32) as usize {
            shared::region::<f64>(8, jacobi_elements(b as u32) as usize).as_ptr()
        } else {
            scratch
        };
        JacobiSpace { x: base, z: base.add(b * ld), rot: base.add(2 * b * ld), ld, size: b }
    }

    /// The offset of element `(i, j)` of a matrix; in the simulator, checks `i, j < b`.
    #[inline(always)]
    #[track_caller]
    fn offset(self, i: usize, j: usize) -> usize {
        #[cfg(target_arch = "nvptx64")]
        let _ = self.size;
        #[cfg(not(target_arch = "nvptx64"))]
        assert!(i < self.size && j < self.size, "Jacobi element ({i}, {j}) of a {0} × {0} matrix", self.size);
        i * self.ld + j
    }

    /// Element `(i, j)` of the matrix (`i, j < b`; no other thread writes it meanwhile).
    #[inline(always)]
    #[track_caller]
    unsafe fn x(self, i: usize, j: usize) -> f64 {
        *self.x.add(self.offset(i, j))
    }

    /// Writes element `(i, j)` of the matrix (`i, j < b`; no other thread accesses it meanwhile).
    #[inline(always)]
    #[track_caller]
    unsafe fn set_x(self, i: usize, j: usize, value: f64) {
        *self.x.add(self.offset(i, j)) = value;
    }

    /// Element `(i, j)` of the accumulated rotations (as for [`JacobiSpace::x`]).
    #[inline(always)]
    #[track_caller]
    unsafe fn z(self, i: usize, j: usize) -> f64 {
        *self.z.add(self.offset(i, j))
    }

    /// Writes element `(i, j)` of the accumulated rotations (as for [`JacobiSpace::set_x`]).
    #[inline(always)]
    #[track_caller]
    unsafe fn set_z(self, i: usize, j: usize, value: f64) {
        *self.z.add(self.offset(i, j)) = value;
    }

    /// Rotation `t` of the current round (`t < half`, the round's pair count): `(c, s, p, q)`.
    /// The `2·half` values c, s come first, then the pairs as u32.
    #[inline(always)]
    unsafe fn rotation(self, half: usize, t: usize) -> (f64, f64, usize, usize) {
        let pq = self.rot.add(2 * half) as *const u32;
        (*self.rot.add(2 * t), *self.rot.add(2 * t + 1), *pq.add(2 * t) as usize, *pq.add(2 * t + 1) as usize)
    }

    /// Stores rotation `t` of the current round (see [`JacobiSpace::rotation`]).
    #[inline(always)]
    unsafe fn set_rotation(self, half: usize, t: usize, (c, s, p, q): (f64, f64, usize, usize)) {
        let pq = self.rot.add(2 * half) as *mut u32;
        *self.rot.add(2 * t) = c;
        *self.rot.add(2 * t + 1) = s;
        *pq.add(2 * t) = p as u32;
        *pq.add(2 * t + 1) = q as u32;
    }
}

/// Rayleigh–Ritz, first half, one block per image (`blockIdx.x`), any 1-D block size; dynamic
/// shared memory 8 bytes, or [`jacobi_shared_bytes`]`(b)` to work in shared memory.
///
/// In: `t` (`b × b` per image, row-major) `= QᵀY = QᵀGQ` with `Y = G·Q`. Solves `T = Z·diag(θ)·Zᵀ` by cyclic Jacobi and writes, per image, the Ritz values
/// `theta` (`b`, non-increasing), `sigma = √θ`, `inv_sigma` (`1/σ`, or 0 for numerically zero θ)
/// and the matching eigenvectors `ritz` (`b × b`, column `r` for `θ_r`).
///
/// # Safety
/// The launch gives at least 8 bytes of dynamic shared memory (the Jacobi solver's flag), and
/// each image's parts lie inside the slices: `b × b` of `t`, [`eigen_scratch`]`(b)` of
/// `scratch`, `b` of `theta`, `sigma`, `inv_sigma` and `b × b` of `ritz`. Unchecked on the GPU,
/// like the Jacobi work space (checks cost instructions in the solver's loops); the simulator
/// checks every access.
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
    write_ritz_pairs(bu, value, vector, (vals, perm), (theta, sigma, inv_sigma, ritz));
}

/// The Ritz pairs in order of decreasing value, from an eigendecomposition given as `value(i)`
/// and `vector(row, i)` (`i, row < b`): `theta`, `sigma = √θ`, `inv_sigma` (`1/σ`, or 0 for
/// numerically zero θ) and `ritz` (`b × b`, column `r` the vector of `θ_r`). `vals` and `perm`
/// (`b` each) are work space. All threads of the block call it.
#[inline(always)]
unsafe fn write_ritz_pairs(
    bu: usize,
    value: impl Fn(usize) -> f64,
    vector: impl Fn(usize, usize) -> f64,
    (mut vals, mut perm): (SliceMut<f64>, SliceMut<f64>),
    (mut theta, mut sigma, mut inv_sigma, mut ritz): (
        SliceMut<f64>,
        SliceMut<f64>,
        SliceMut<f64>,
        SliceMut<f64>,
    ),
) {
    let (tid, nt) = (thread::thread_idx_x() as usize, thread::block_dim_x() as usize);
    let bb = bu * bu;
    // Largest first: perm[rank] = index.
    let mut i = tid;
    while i < bu {
        vals.set_unchecked(i, value(i));
        i += nt;
    }
    thread::sync_threads();
    let mut i = tid;
    while i < bu {
        let v = vals.get_unchecked(i);
        let mut rank = 0;
        for j in 0..bu {
            let w = vals.get_unchecked(j);
            if w > v || (w == v && j < i) {
                rank += 1;
            }
        }
        perm.set_unchecked(rank, i as f64);
        i += nt;
    }
    thread::sync_threads();
    let mut i = tid;
    while i < bb {
        let (row, r) = (i / bu, i % bu);
        ritz.set_unchecked(i, vector(row, perm.get_unchecked(r) as usize));
        i += nt;
    }
    let theta0 = vals.get_unchecked(perm.get_unchecked(0) as usize).max(0.0);
    let mut i = tid;
    while i < bu {
        let th = vals.get_unchecked(perm.get_unchecked(i) as usize);
        theta.set_unchecked(i, th);
        let s = math::sqrt(th.max(0.0));
        sigma.set_unchecked(i, s);
        inv_sigma.set_unchecked(i, if th > NULL_THRESHOLD * theta0 && s > 0.0 { 1.0 / s } else { 0.0 });
        i += nt;
    }
}

/// Rows of `vw` each thread of [`ritz_residuals`] visits per step: the block is 32 columns ×
/// this many rows.
pub const RESIDUAL_ROWS: u32 = 8;

/// Rayleigh–Ritz, second half: per image and Ritz pair `i < b`, `stats[i] = ‖W_i‖²` and
/// `stats[b + i] = ‖W_i − θ_i·V_i‖²` (the residual), from `vw = [V W]` (`r × 2b` per image,
/// row-major, images `r·2b` apart; `V = Q·Z` the Ritz vectors, `W = G·V`), summed over the rows
/// directly (no cancellation: accurate for the smallest θ too). `stats` holds `2b` per image.
///
/// Launch: grid `(⌈b/32⌉, 1, images)`, block `32 × RESIDUAL_ROWS` (x: a column, y: a row lane),
/// `32·RESIDUAL_ROWS·16` bytes of dynamic shared memory.
#[kernel]
pub fn ritz_residuals(vw: &[f64], theta: &[f64], r: u32, b: u32, stats: &mut [f64]) {
    let z = thread::block_idx_z() as usize;
    let (bu, ru) = (b as usize, r as usize);
    let vw = vw.sub(z * ru * 2 * bu, ru * 2 * bu);
    let theta = theta.sub(z * bu, bu);
    let mut stats = stats.sub(z * 2 * bu, 2 * bu);
    let (lane, row_lane) = (thread::thread_idx_x() as usize, thread::thread_idx_y() as usize);
    let col = thread::block_idx_x() as usize * 32 + lane;
    let (mut norm, mut residual) = (0.0f64, 0.0f64);
    if col < bu {
        let th = theta[col];
        let mut row = row_lane;
        while row < ru {
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
        stats[col] = norm;
        stats[bu + col] = residual;
    }
}

/// Per image (one block each, `blockIdx.x`, any 1-D block size, 8 bytes of dynamic shared
/// memory): the convergence flag and the weights of the next basis, from `theta` (`b`,
/// non-increasing) and the `stats` of [`ritz_residuals`].
///
/// `converged[image]` = 1 when each of the first `k` Ritz pairs that is not numerically zero has
/// residual `‖G·v − θ·v‖ ≤ tol·√(θ₁·θ_i)` (so that `|σ_i − σ̃_i| ≤ tol·σ₁/2`). The next basis,
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
        if (i as u32) < k && good && math::sqrt(stats[bu + i]) > tol * math::sqrt(theta0 * th) {
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

/// Cholesky QR's small step, one block per image (`blockIdx.x`), any 1-D block size; dynamic
/// shared memory as for [`ritz_eigen`]. In: the Gram matrix `w = XᵀX` (`b × b` per image,
/// row-major; only the upper triangle is read). Out: `rinv = R⁻¹` (`b × b`, upper triangular)
/// for `w = RᵀR`, so that `X·R⁻¹` has orthonormal columns. A pivot that lost all but 12 digits of
/// its diagonal element (a numerically dependent column) is floored there, so the column is
/// scaled by at most 1e6 instead of dividing by rounding noise.
///
/// # Safety
/// The launch gives at least 8 bytes of dynamic shared memory, and each image's parts lie inside
/// the slices: `b × b` of `w` and `rinv`, [`eigen_scratch`]`(b)` of `scratch`. Unchecked on the
/// GPU, like the Jacobi work space; the simulator checks every access.
#[kernel]
pub unsafe fn cholesky_inverse(w: &[f64], b: u32, scratch: &mut [f64], rinv: &mut [f64]) {
    let img = thread::block_idx_x() as usize;
    let bu = b as usize;
    let bb = bu * bu;
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
        space.set_z(0, j, math::sqrt(space.x(j, j).max(PIVOT_FLOOR * space.z(0, j)).max(f64::MIN_POSITIVE)));
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

/// The two blocks of pair `t` in round `round` of the circle method over `players` blocks
/// (block 0 fixed, the others rotating), smaller first.
#[inline(always)]
fn block_pair(t: u32, round: u32, players: u32) -> (u32, u32) {
    let player = |pos: u32| if pos == 0 { 0 } else { (pos - 1 + round) % (players - 1) + 1 };
    let (p, q) = (player(t), player(players - 1 - t));
    (p.min(q), p.max(q))
}

/// Row (or column) `i < 2·nb` of the submatrix of the block pair `(a, b)`: block `a`'s rows, then
/// block `b`'s.
#[inline(always)]
fn pair_index((a, b): (u32, u32), nb: u32, i: u32) -> usize {
    (if i < nb { a * nb + i } else { b * nb + i - nb }) as usize
}

/// Dynamic shared memory of [`block_jacobi_rotations`], bytes, for blocks of `nb` rows.
pub const fn block_jacobi_rotations_bytes(nb: u32) -> u32 {
    jacobi_shared_bytes(2 * nb)
}

/// Dynamic shared memory of [`block_jacobi_apply`], bytes, for blocks of `nb` rows: four
/// `2nb × 2nb` f64 matrices.
pub const fn block_jacobi_apply_bytes(nb: u32) -> u32 {
    4 * 8 * (2 * nb) * (2 * nb)
}

/// Block Jacobi for symmetric matrices too large for one block's shared memory, first half of a
/// round: the symmetric `n × n` matrix `x` of each image (row-major, images `n²` apart,
/// `n = 2·nb·pairs`, zero past the problem's own size) is split into `2·pairs` blocks of `nb`
/// rows; round `round` of the circle method pairs them, and block `blockIdx.x` of the launch
/// runs one sweep of [`ritz_eigen`]'s Jacobi on its pair's `2nb × 2nb` submatrix in shared
/// memory (the outer sweeps iterate anyway: solving each submatrix exactly costs several times
/// more), writing the
/// accumulated rotation to `rot` (`2nb × 2nb` per pair, `pairs` per image) and setting
/// `rotated[image]` to 1 if it rotated anything. Rotations are skipped below `JACOBI_NOISE` times
/// the whole matrix's largest diagonal element, so a sweep in which no pair rotates means the
/// matrix is diagonal to that precision.
///
/// Launch: grid `(pairs, 1, images)`, a 1-D block of whole warps,
/// [`block_jacobi_rotations_bytes`]`(nb)` of dynamic shared memory.
///
/// # Safety
/// The launch gives that much shared memory (the work space is not checked on the GPU).
#[kernel]
pub unsafe fn block_jacobi_rotations(
    x: &[f64],
    n: u32,
    nb: u32,
    round: u32,
    rot: &mut [f64],
    rotated: &mut [u32],
) {
    let (t, img) = (thread::block_idx_x(), thread::block_idx_z() as usize);
    let (nu, m) = (n as usize, (2 * nb) as usize);
    let pairs = thread::grid_dim_x() as usize;
    let x = x.sub(img * nu * nu, nu * nu);
    let mut rot = rot.sub((img * pairs + t as usize) * m * m, m * m);
    let pair = block_pair(t, round, n / nb);
    let space = JacobiSpace::new(core::ptr::null_mut(), m);
    let (tid, nt) = (thread::thread_idx_x() as usize, thread::block_dim_x() as usize);
    let mut i = tid;
    while i < m * m {
        let (r, c) = (i / m, i % m);
        space.set_x(r, c, x[pair_index(pair, nb, r as u32) * nu + pair_index(pair, nb, c as u32)]);
        space.set_z(r, c, if r == c { 1.0 } else { 0.0 });
        i += nt;
    }
    let mut scale = 0.0f64;
    for l in 0..nu {
        scale = scale.max(math::abs(x[l * nu + l]));
    }
    thread::sync_threads();
    let any = jacobi(space, m, scale, 1);
    let mut i = tid;
    while i < m * m {
        rot[i] = space.z(i / m, i % m);
        i += nt;
    }
    if any && tid == 0 {
        rotated[img] = 1;
    }
}

/// Block Jacobi, second half of a round: applies the rotations of [`block_jacobi_rotations`]
/// (`rot`, same `n`, `nb` and `round`) to `src`, writing `dst` (both `n × n` per image, row-major,
/// images `n²` apart). With `two_sided ≠ 0` it computes `dst = JᵀsrcJ` (the matrix being
/// diagonalised), else `dst = src·J` (the accumulated eigenvectors). Block `(q, p)` writes the
/// `2nb × 2nb` tile of pair `q`'s columns and, two-sided, pair `p`'s rows (one-sided: rows
/// `p·2nb …`): `rot_pᵀ·src[rows, cols]·rot_q`.
///
/// Launch: grid `(pairs, pairs, images)`, any 1-D block, [`block_jacobi_apply_bytes`]`(nb)` of
/// dynamic shared memory.
#[kernel]
pub fn block_jacobi_apply(
    src: &[f64],
    n: u32,
    nb: u32,
    round: u32,
    rot: &[f64],
    two_sided: u32,
    dst: &mut [f64],
) {
    let (q, p, img) = (thread::block_idx_x(), thread::block_idx_y(), thread::block_idx_z() as usize);
    let (nu, m) = (n as usize, (2 * nb) as usize);
    let (pairs, players) = (thread::grid_dim_x() as usize, n / nb);
    let src = src.sub(img * nu * nu, nu * nu);
    let mut dst = dst.sub(img * nu * nu, nu * nu);
    let rot_of = |pair: u32| rot.sub((img * pairs + pair as usize) * m * m, m * m);
    let (rot_q, rot_p) = (rot_of(q), rot_of(p));
    let cols = block_pair(q, round, players);
    let row = |i: usize| {
        if two_sided != 0 {
            pair_index(block_pair(p, round, players), nb, i as u32)
        } else {
            p as usize * m + i
        }
    };
    let mut smem = shared::Allocator::new();
    let (sub, right, left, tmp) = (
        smem.array::<f64>(m * m),
        smem.array::<f64>(m * m),
        smem.array::<f64>(m * m),
        smem.array::<f64>(m * m),
    );
    let (tid, nt) = (thread::thread_idx_x() as usize, thread::block_dim_x() as usize);
    // SAFETY (every shared access below): indices below m², the arrays' length; each element is
    // written by one thread before a barrier and read only after it.
    let mut i = tid;
    while i < m * m {
        let (r, c) = (i / m, i % m);
        unsafe {
            sub.write(i, src[row(r) * nu + pair_index(cols, nb, c as u32)]);
            right.write(i, rot_q[i]);
            left.write(i, if two_sided != 0 { rot_p[i] } else { 0.0 });
        }
        i += nt;
    }
    thread::sync_threads();
    // tmp = sub·rot_q.
    let mut i = tid;
    while i < m * m {
        let (r, c) = (i / m, i % m);
        let mut acc = 0.0f64;
        for l in 0..m {
            acc = unsafe { math::fma(sub.read(r * m + l), right.read(l * m + c), acc) };
        }
        unsafe { tmp.write(i, acc) };
        i += nt;
    }
    thread::sync_threads();
    // dst = rot_pᵀ·tmp (two-sided) or tmp.
    let mut i = tid;
    while i < m * m {
        let (r, c) = (i / m, i % m);
        let value = if two_sided != 0 {
            let mut acc = 0.0f64;
            for l in 0..m {
                acc = unsafe { math::fma(left.read(l * m + r), tmp.read(l * m + c), acc) };
            }
            acc
        } else {
            unsafe { tmp.read(i) }
        };
        dst[row(r) * nu + pair_index(cols, nb, c as u32)] = value;
        i += nt;
    }
}

/// Block Jacobi, the end: per image (one block each, `blockIdx.x`, any 1-D block), the Ritz pairs
/// of the diagonalised `x` and accumulated `z` (`n × n`, as in [`block_jacobi_apply`]) for the
/// leading `b` rows and columns (the rest is padding), written as [`ritz_eigen`] writes them;
/// `scratch` holds `2b` per image.
#[kernel]
pub fn block_jacobi_finish(
    x: &[f64],
    z: &[f64],
    n: u32,
    b: u32,
    scratch: &mut [f64],
    theta: &mut [f64],
    sigma: &mut [f64],
    inv_sigma: &mut [f64],
    ritz: &mut [f64],
) {
    let img = thread::block_idx_x() as usize;
    let (nu, bu) = (n as usize, b as usize);
    let x = x.sub(img * nu * nu, nu * nu);
    let z = z.sub(img * nu * nu, nu * nu);
    let scratch = scratch.sub(img * 2 * bu, 2 * bu);
    let value = |i: usize| x[i * nu + i];
    let vector = |row: usize, col: usize| z[row * nu + col];
    // SAFETY: each image's parts are taken by checked `sub` above; `write_ritz_pairs` indexes
    // below b and b² within them.
    unsafe {
        write_ritz_pairs(
            bu,
            value,
            vector,
            (scratch.sub(0, bu), scratch.sub(bu, bu)),
            (
                theta.sub(img * bu, bu),
                sigma.sub(img * bu, bu),
                inv_sigma.sub(img * bu, bu),
                ritz.sub(img * bu * bu, bu * bu),
            ),
        )
    };
}

/// `x = I` for each image's `n × n` matrix (row-major, images `n²` apart). Grid `(x, 1, images)`,
/// any 1-D block (grid-stride).
#[kernel]
pub fn set_identity(x: &mut [f64], n: u32) {
    let nu = n as usize;
    let mut x = x.sub(thread::block_idx_z() as usize * nu * nu, nu * nu);
    let mut i = thread::index_1d() as usize;
    while i < nu * nu {
        x[i] = if i / nu == i % nu { 1.0 } else { 0.0 };
        i += thread::grid_stride_1d() as usize;
    }
}

/// Cyclic parallel Jacobi on the symmetric `n × n` matrix `space.x`, with the rotations
/// accumulated into `space.z` (`x ← JᵀxJ`, `z ← zJ`): on return `x` is diagonal to working
/// precision. Each round rotates `⌈n/2⌉` disjoint pairs at once (the circle method); a pair is
/// skipped when `|x_pq| ≤ max(ε·√|x_pp·x_qq|, JACOBI_NOISE·scale)`, `scale` being the size of the
/// matrix the caller cares about (its largest diagonal element, or the whole matrix's when this
/// is a block of a larger one). A sweep starts with one
/// pass over the off-diagonal elements that decides whether any pair needs a rotation at all
/// (after the first iteration of the subspace iteration the matrix is nearly diagonal, and most
/// calls end after a few sweeps). A round takes two barriers: the rotations are chosen, then both
/// sides of `x` are rotated at once, one 2 × 2 block (rows of one pair, columns of another) per
/// thread and step, only the blocks on and above the diagonal computed and mirrored, while other
/// threads rotate the columns of `z`. Work is split by warp (one pair per warp and step) and lane
/// (columns or rows), so each thread's loop needs no division and a warp's pair is uniform.
/// At most `sweeps` sweeps. Returns whether any pair was rotated. Uses the first u32 of dynamic shared memory as a flag.
/// All threads of the block call it; the block is a whole number of warps.
#[inline(always)]
unsafe fn jacobi(space: JacobiSpace, n: usize, scale: f64, sweeps: u32) -> bool {
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
        (f64::EPSILON * math::sqrt(math::abs(space.x(p, p) * space.x(q, q)))).max(noise)
    };
    // Element (i, j) of x, 0 outside the matrix (the odd size's dummy player).
    let get = |i: usize, j: usize| -> f64 { if i < n && j < n { space.x(i, j) } else { 0.0 } };
    let put = |i: usize, j: usize, v: f64| {
        if i < n && j < n {
            space.set_x(i, j, v);
        }
    };
    let pair = |t: usize| space.rotation(half, t);
    for _sweep in 0..sweeps {
        if tid == 0 {
            flag.write(0, 0);
        }
        thread::sync_threads();
        let mut p = warp;
        while p < n {
            let mut q = p + 1 + lane;
            while q < n {
                if math::abs(space.x(p, q)) > threshold(p, q) {
                    flag.write(0, 1);
                }
                q += 32;
            }
            p += warps;
        }
        thread::sync_threads();
        let more = flag.read(0);
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
                    let apq = space.x(p, q);
                    if math::abs(apq) > threshold(p, q) {
                        let tau = (space.x(q, q) - space.x(p, p)) / (2.0 * apq);
                        let tt = if tau >= 0.0 { 1.0 } else { -1.0 }
                            / (math::abs(tau) + math::sqrt(math::fma(tau, tau, 1.0)));
                        c = 1.0 / math::sqrt(math::fma(tt, tt, 1.0));
                        s = tt * c;
                    }
                }
                space.set_rotation(half, t, (c, s, p, q));
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
                        let (x, y) = (space.z(row, p), space.z(row, q));
                        space.set_z(row, p, c * x - s * y);
                        space.set_z(row, q, s * x + c * y);
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
