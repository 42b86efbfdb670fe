//! Cholesky QR's small step for subspaces of any size, over many blocks: `R⁻¹` for `W = RᵀR`
//! (`b × b` per image) by panels of `nb` rows, so that no step needs the whole matrix in one
//! block's shared memory and the host never takes part.
//!
//! Per panel `p` (rows and columns `p·nb .. p·nb + len`), right-looking, in `W`'s own upper
//! triangle (row panel `p` of `W` is read for the last time where row panel `p` of `R` is
//! written):
//! 1. [`cholesky_diagonal_block`], one block per image: the Cholesky factor `R_pp` of the updated
//!    diagonal block (pivots floored against `W`'s own diagonal as in
//!    [`cholesky_inverse`](super::ritz::cholesky_inverse)) and `R_pp⁻¹`, which is the diagonal
//!    block of `R⁻¹`;
//! 2. [`cholesky_row_panel`], a block per 64 columns right of the panel and image:
//!    `R_pj = R_pp⁻ᵀ·W_pj`;
//! 3. [`cholesky_trailing_update`], a block per 64 × 64 tile of the trailing upper triangle and
//!    image: `W_jl −= R_pjᵀ·R_pl`, a product only `len` deep.
//!
//! Then `X = R⁻¹` by recursive doubling over the diagonal blocks: at level `l` (blocks of
//! `s = nb·2^l`), each pair of neighbouring blocks `A` (rows `2s·p …`) and `C` (the up to `s` after
//! it), whose inverses `X_AA` and `X_CC` the earlier levels made, gets its off-diagonal block
//! `X_AC = −X_AA·R_AC·X_CC` in two products: [`triangular_inverse_product`] `T = R_AC·X_CC` (into
//! `W`'s free lower triangle; zeros below `R⁻¹`'s diagonal) and [`triangular_inverse_block`]
//! `X_AC = −X_AA·T`, a block per 64 × 64 tile, pair and image. `⌈log₂ panels⌉` levels, where a
//! column-by-column inverse took one dependent step per panel, each a product as deep as the
//! panels left of it.
//!
//! First of all, [`cholesky_distance_to_identity`] and [`cholesky_near_identity`] flag each image
//! whose `W` is near the identity (as Cholesky QR's second pass usually finds it) and write its
//! `R⁻¹ = I − U` to first order ([`first_order_inverse`]); every later kernel returns at once for a
//! flagged image.
//!
//! `b = 512` in panels of 64 takes 8 + 7 + 7 + 2·3 launches; every one serves all images. Each
//! block's products go through the 64 × 64 output tile of the batched GEMM (256 threads, 4 × 4
//! outputs each, stages of 16 along the inner dimension in shared memory).

use super::constants::PIVOT_FLOOR;
use super::gemm::{GEMM_LD, GEMM_THREADS, GEMM_TILE, GEMM_TILE_K, Stages};
use super::packed_cholesky::first_order_inverse;
use gpu_std::math;
use gpu_std::shared::{self, DynamicShared};
use gpu_std::slice::{Slice, SliceMut};
use gpu_std::{kernel, thread, warp};

/// Largest panel: one output tile.
pub const CHOLESKY_PANEL_MAX: u32 = GEMM_TILE;

/// Threads per block of the blocked Cholesky kernels.
pub const BLOCKED_CHOLESKY_THREADS: u32 = GEMM_THREADS;

/// Row length (f64) of the 64 × 64 tile a block keeps in shared memory: odd, as the GEMM's.
const TILE_LD: usize = GEMM_LD;

/// Dynamic shared memory of the blocked Cholesky kernels, bytes: the two GEMM stages, two 64 × 64
/// tiles and 64 values (the kernels allocate them in this order).
pub const BLOCKED_CHOLESKY_SHARED_BYTES: u32 = shared::Layout::new()
    .array::<f64>(GEMM_TILE_K as usize * GEMM_LD)
    .array::<f64>(GEMM_TILE_K as usize * GEMM_LD)
    .array::<f64>(GEMM_TILE as usize * TILE_LD)
    .array::<f64>(GEMM_TILE as usize * TILE_LD)
    .array::<f64>(GEMM_TILE as usize)
    .bytes_u32();

/// The shared memory of one block: the GEMM's two stages, a tile, a second one for the diagonal
/// block's inverse, and a vector.
struct Space {
    stages: Stages,
    tile: Tile,
    inverse: Tile,
    vector: DynamicShared<f64>,
}

impl Space {
    #[inline(always)]
    fn new() -> Space {
        let mut smem = shared::Allocator::new();
        Space {
            stages: Stages::new(&mut smem),
            tile: Tile(smem.array::<f64>(GEMM_TILE as usize * TILE_LD)),
            inverse: Tile(smem.array::<f64>(GEMM_TILE as usize * TILE_LD)),
            vector: smem.array::<f64>(GEMM_TILE as usize),
        }
    }
}

/// A 64 × 64 f64 matrix in shared memory, rows [`TILE_LD`] apart.
#[derive(Clone, Copy)]
struct Tile(DynamicShared<f64>);

impl Tile {
    /// Element `(i, j)` (`i, j < 64`; no other thread writes it meanwhile).
    #[inline(always)]
    unsafe fn at(self, i: u32, j: u32) -> f64 {
        // SAFETY: i, j < 64, inside the tile's 64 rows; no write races (the caller's contract).
        unsafe { self.0.read(i as usize * TILE_LD + j as usize) }
    }

    /// Writes element `(i, j)` (`i, j < 64`; no other thread accesses it meanwhile).
    #[inline(always)]
    unsafe fn set(self, i: u32, j: u32, value: f64) {
        // SAFETY: i, j < 64, inside the tile's 64 rows; no other access races (the caller's
        // contract).
        unsafe { self.0.write(i as usize * TILE_LD + j as usize, value) }
    }
}

/// This thread's 4 × 4 outputs of a 64 × 64 tile: rows `ty + 16·r`, columns `tx + 16·s`.
#[inline(always)]
fn outputs() -> (u32, u32) {
    let tid = thread::thread_idx_x();
    (tid % 16, tid / 16)
}

/// Calls `store(i, j, value)` for each of this thread's 4 × 4 outputs `acc` of a 64 × 64 tile
/// ([`outputs`]) that lies in its `rows × cols` corner.
#[inline(always)]
fn for_each_output(acc: &[[f64; 4]; 4], (rows, cols): (u32, u32), mut store: impl FnMut(u32, u32, f64)) {
    let (tx, ty) = outputs();
    for (r, row) in acc.iter().enumerate() {
        let i = ty + 16 * r as u32;
        for (s, &value) in row.iter().enumerate() {
            let j = tx + 16 * s as u32;
            if i < rows && j < cols {
                store(i, j, value);
            }
        }
    }
}

/// Which index of an operand consecutive threads take when [`tile_product`] loads it: the one
/// along which the operand lies contiguous in memory, so that the loads coalesce.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Along {
    /// The tile's index (`i` of `a`, `j` of `b`).
    Tile,
    /// The depth `p`.
    Depth,
}

/// Element `idx` of a stage's load (`64·16` per stage) as (tile index, depth index) when
/// consecutive threads go `along`.
#[inline(always)]
fn stage_element(idx: u32, along: Along) -> (u32, u32) {
    match along {
        Along::Tile => (idx % GEMM_TILE, idx / GEMM_TILE),
        Along::Depth => (idx / GEMM_TILE_K, idx % GEMM_TILE_K),
    }
}

/// `Σ_{p ∈ depth} a(i, p)·b(p, j)` for the `rows × cols` corner of a 64 × 64 tile, this thread's
/// 4 × 4 part ([`outputs`]); zero outside `rows × cols`. Called by every thread of the block (it
/// waits at barriers). Consecutive threads read `a` and `b` along the given indices.
///
/// # Safety
/// Every thread of the block calls it, with the same `(rows, cols)` and `(start, end)`; no thread
/// writes the stages meanwhile.
#[inline(always)]
unsafe fn tile_product(
    space: &Space,
    (a, a_along): (impl Fn(u32, u32) -> f64, Along),
    (b, b_along): (impl Fn(u32, u32) -> f64, Along),
    (rows, cols): (u32, u32),
    (start, end): (u32, u32),
) -> [[f64; 4]; 4] {
    const TILE: u32 = GEMM_TILE;
    const TK: u32 = GEMM_TILE_K;
    let tid = thread::thread_idx_x();
    let (tx, ty) = outputs();
    let mut acc = [[0.0f64; 4]; 4];
    let mut p0 = start;
    while p0 < end {
        for q in 0..(TILE * TK / GEMM_THREADS) {
            let idx = tid + GEMM_THREADS * q;
            let (i, p) = stage_element(idx, a_along);
            let v = if i < rows && p0 + p < end { a(i, p0 + p) } else { 0.0 };
            // SAFETY (this write and the next): indices below TK·GEMM_LD, the stages' length;
            // each element is written by one thread between the barriers and read after them.
            unsafe { space.stages.a.write(p as usize * GEMM_LD + i as usize, v) };
            let (j, p) = stage_element(idx, b_along);
            let v = if j < cols && p0 + p < end { b(p0 + p, j) } else { 0.0 };
            // SAFETY: as above.
            unsafe { space.stages.b.write(p as usize * GEMM_LD + j as usize, v) };
        }
        thread::sync_threads();
        for p in 0..TK as usize {
            let mut av = [0.0f64; 4];
            let mut bv = [0.0f64; 4];
            for r in 0..4 {
                // SAFETY: indices below TK·GEMM_LD, written before the barrier.
                unsafe {
                    av[r] = space.stages.a.read(p * GEMM_LD + ty as usize + 16 * r);
                    bv[r] = space.stages.b.read(p * GEMM_LD + tx as usize + 16 * r);
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
    acc
}

/// Panel `panel`'s first row and its length (`nb`, or what is left of `b`).
#[inline(always)]
fn panel_span(b: u32, nb: u32, panel: u32) -> (u32, u32) {
    let start = panel * nb;
    (start, nb.min(b - start))
}

/// Whether [`cholesky_near_identity`] flagged this block's image (`blockIdx.z`, of `gridDim.z`).
#[inline(always)]
fn near_identity(diagonal: Slice<f64>, b: u32) -> bool {
    near_identity_image(diagonal, b, (thread::block_idx_z(), thread::grid_dim_z()))
}

/// Whether [`cholesky_near_identity`] flagged `image` of `images`: its flag is
/// `diagonal[images·b + image]`, after every image's `b` diagonal values.
#[inline(always)]
fn near_identity_image(diagonal: Slice<f64>, b: u32, (image, images): (u32, u32)) -> bool {
    diagonal[(images * b + image) as usize] != 0.0
}

/// Rows of `W` per block of [`cholesky_distance_to_identity`] and [`cholesky_near_identity`]: a
/// warp each (one block of 1024 threads per image read the whole matrix in 40–90 µs at `b = 512`).
pub const NEAR_IDENTITY_ROWS: u32 = 8;

/// Step 0, first half (module docs): per image (`blockIdx.z`), `diagonal[z·b]` becomes the largest
/// `|W − I|` over `W`'s upper triangle (it must hold 0: each block's largest is added by an atomic
/// max). Grid `(⌈b/NEAR_IDENTITY_ROWS⌉, 1, images)`, `NEAR_IDENTITY_ROWS` warps per block, a row
/// each, its lanes along the row. Layouts as [`cholesky_diagonal_block`].
#[kernel]
pub fn cholesky_distance_to_identity(w: &[f64], diagonal: &mut [f64], b: u32) {
    let z = thread::block_idx_z() as usize;
    let bu = b as usize;
    let w = w.sub(z * bu * bu, bu * bu);
    let (lane, row) = (warp::lane_id() as usize, warp::warp_id() as usize);
    let r = thread::block_idx_x() as usize * NEAR_IDENTITY_ROWS as usize + row;
    let mut distance = 0.0f64;
    if r < bu {
        let mut c = r + lane;
        while c < bu {
            distance = distance.max((w[r * bu + c] - if r == c { 1.0 } else { 0.0 }).abs());
            c += 32;
        }
    }
    let distance = warp::reduce(distance, f64::max);
    if lane == 0 && distance > 0.0 {
        diagonal.atomic(z * bu).fetch_max(distance);
    }
}

/// Step 0, second half (module docs), after [`cholesky_distance_to_identity`]: whether the
/// image's `W` is near the identity (`b·max|W − I| ≤ near_identity`), as `diagonal[images·b + z]`
/// (1 or 0; `diagonal` holds `images·(b + 1)` values), and where it is, `R⁻¹ = I − U`
/// ([`first_order_inverse`]) into `rinv`. Launch as [`cholesky_distance_to_identity`].
#[kernel]
pub fn cholesky_near_identity(w: &[f64], rinv: &mut [f64], diagonal: &mut [f64], b: u32, near_identity: f64) {
    let (z, images) = (thread::block_idx_z() as usize, thread::grid_dim_z() as usize);
    let bu = b as usize;
    let near = diagonal[z * bu] * bu as f64 <= near_identity;
    let (lane, row) = (warp::lane_id() as usize, warp::warp_id() as usize);
    let r = thread::block_idx_x() as usize * NEAR_IDENTITY_ROWS as usize + row;
    if near && r < bu {
        let w = w.sub(z * bu * bu, bu * bu);
        let mut rinv = rinv.sub(z * bu * bu, bu * bu);
        let mut c = lane;
        while c < bu {
            rinv[r * bu + c] = first_order_inverse(r, c, if r <= c { w[r * bu + c] } else { 0.0 });
            c += 32;
        }
    }
    if thread::block_idx_x() == 0 && thread::thread_idx_x() == 0 {
        diagonal[images * bu + z] = if near { 1.0 } else { 0.0 };
    }
}

/// Step 1 of panel `panel` (module docs), one block per image (`blockIdx.z`), 256 threads,
/// [`BLOCKED_CHOLESKY_SHARED_BYTES`]. `w` and `rinv` are `b × b` row-major per image, `b²`
/// apart; `nb ≤ 64`. Reads rows `< panel·nb` of `R` and the panel's diagonal block of `W` from
/// `w`; writes `R_pp` there (upper triangle) and `R_pp⁻¹` into `rinv`'s diagonal block (zeros
/// below its diagonal).
#[kernel]
pub fn cholesky_diagonal_block(
    w: &mut [f64],
    rinv: &mut [f64],
    diagonal: &mut [f64],
    b: u32,
    nb: u32,
    panel: u32,
) {
    if near_identity(diagonal.as_slice(), b) {
        return;
    }
    let z = thread::block_idx_z() as usize;
    let bu = b as usize;
    let w = w.sub(z * bu * bu, bu * bu);
    let mut rinv = rinv.sub(z * bu * bu, bu * bu);
    let diagonal = diagonal.sub(z * bu, bu);
    let (start, len) = panel_span(b, nb, panel);
    let space = Space::new();
    let tid = thread::thread_idx_x();
    let at = |i: u32, j: u32| i as usize * bu + j as usize;
    // SAFETY: nb ≤ 64 (the launch's contract), so len ≤ 64; every thread of the block runs each
    // step.
    unsafe {
        load_diagonal_block(&space, w, diagonal, at, (b, start, len), panel);
        factor_tile(&space, len);
        write_factor(&space, w, at, start, len);
        invert_factor(&space, len);
    }
    let (c, first_row) = (tid % GEMM_TILE, tid / GEMM_TILE);
    let mut r = first_row;
    while r < len {
        if c < len {
            // SAFETY: r, c < 64, written before the barrier.
            rinv[at(start + r, start + c)] = unsafe { space.inverse.at(r, c) };
        }
        r += GEMM_THREADS / GEMM_TILE;
    }
}

/// Step 1, first part: `S = W_pp` (already the Schur complement: every earlier panel's trailing
/// update has been subtracted) into the tile (upper triangle), and the pivots' floors, `W`'s own
/// diagonal, into the vector. The first panel keeps that diagonal in `diagonal`, before any
/// update. Ends at a barrier.
///
/// # Safety
/// `len ≤ 64`; every thread of the block calls it.
#[inline(always)]
unsafe fn load_diagonal_block(
    space: &Space,
    w: SliceMut<f64>,
    mut diagonal: SliceMut<f64>,
    at: impl Fn(u32, u32) -> usize,
    (b, start, len): (u32, u32, u32),
    panel: u32,
) {
    let tid = thread::thread_idx_x();
    let mut e = tid;
    while e < len * len {
        let (i, j) = (e / len, e % len);
        if i <= j {
            // SAFETY: i, j < 64; one thread per element.
            unsafe { space.tile.set(i, j, w[at(start + i, start + j)]) };
        }
        e += GEMM_THREADS;
    }
    if panel == 0 {
        let mut j = tid;
        while j < b {
            diagonal[j as usize] = w[at(j, j)];
            j += GEMM_THREADS;
        }
        thread::sync_threads();
    }
    if tid < len {
        // SAFETY: tid < 64; one thread per element.
        unsafe { space.vector.write(tid as usize, diagonal[(start + tid) as usize]) };
    }
    thread::sync_threads();
}

/// Pivot `j` of the tile's factorisation: its diagonal element, floored at [`PIVOT_FLOOR`] times
/// the vector's element `j`.
///
/// # Safety
/// `j < 64`; both elements were written before the last barrier.
#[inline(always)]
unsafe fn pivot(space: &Space, j: u32) -> f64 {
    // SAFETY: j < 64 (the contract), written before the last barrier.
    unsafe { space.tile.at(j, j).max(PIVOT_FLOOR * space.vector.read(j as usize)).max(f64::MIN_POSITIVE) }
}

/// Rows of the tile each thread of [`factor_tile`] keeps in registers: 256 threads, a column and
/// every fourth row each.
const FACTOR_ROWS: usize = GEMM_TILE as usize * GEMM_TILE as usize / GEMM_THREADS as usize;

/// Step 1, second part: right-looking Cholesky of the tile's `len × len` upper triangle in place,
/// as [`cholesky_inverse`](super::ritz::cholesky_inverse): step `j` subtracts row `j`'s outer
/// product divided by the (floored) pivot from the trailing triangle. Each thread keeps its
/// elements (column `tid % 64`, rows `tid / 64 + 4·i`) in registers, and writes each to the tile
/// once final (row `j + 1` after step `j`), so a step reads only row `j` from shared memory and
/// ends at one barrier; every element's update is a select, not a branch (a step's instructions,
/// not its work, bound it: 87 k → 52 k cycles for 64 pivots, H200). Ends at a barrier.
///
/// # Safety
/// `len ≤ 64`; every thread of the block calls it, after [`load_diagonal_block`].
#[inline(always)]
unsafe fn factor_tile(space: &Space, len: u32) {
    let tid = thread::thread_idx_x();
    let (c, first_row) = (tid % GEMM_TILE, tid / GEMM_TILE);
    let row = |i: usize| first_row + (GEMM_THREADS / GEMM_TILE) * i as u32;
    let mut mine = [0.0f64; FACTOR_ROWS];
    // Every index of `mine` a constant, so that it lives in registers.
    macro_rules! each_row {
        ($f:ident) => {
            $f(0);
            $f(1);
            $f(2);
            $f(3);
            $f(4);
            $f(5);
            $f(6);
            $f(7);
            $f(8);
            $f(9);
            $f(10);
            $f(11);
            $f(12);
            $f(13);
            $f(14);
            $f(15);
        };
    }
    const _: () = assert!(FACTOR_ROWS == 16);
    let mut load = |i: usize| {
        let r = row(i);
        if r <= c && c < len {
            // SAFETY: r ≤ c < 64, written before the last barrier.
            mine[i] = unsafe { space.tile.at(r, c) };
        }
    };
    each_row!(load);
    for j in 0..len {
        // SAFETY: j < len ≤ 64; row j is final and in the tile since the last barrier.
        let (inv, row_c) = unsafe { (1.0 / pivot(space, j), space.tile.at(j, c.min(len - 1))) };
        let scale = inv * row_c;
        let mut update = |i: usize| {
            let r = row(i);
            let active = r > j && r <= c && c < len;
            // SAFETY: r < 64; row j is read-only during this step. Read by every thread, used by
            // the active ones (a select, not a branch per element).
            let t = unsafe { space.tile.at(j, r) };
            mine[i] = math::fma(-t, if active { scale } else { 0.0 }, mine[i]);
            if active && r == j + 1 {
                // SAFETY: r, c < 64; only this thread writes element (r, c), and no thread reads
                // row j + 1 before the barrier below.
                unsafe { space.tile.set(r, c, mine[i]) };
            }
        };
        each_row!(update);
        thread::sync_threads();
    }
}

/// Step 1, third part: the pivots' square roots replace the floors in the vector; `R_pp` = the
/// tile's rows scaled by them, into the tile and `w`. Ends at a barrier.
///
/// # Safety
/// `len ≤ 64`; every thread of the block calls it, after [`factor_tile`].
#[inline(always)]
unsafe fn write_factor(
    space: &Space,
    mut w: SliceMut<f64>,
    at: impl Fn(u32, u32) -> usize,
    start: u32,
    len: u32,
) {
    let tid = thread::thread_idx_x();
    if tid < len {
        // SAFETY: tid < len ≤ 64, written before the last barrier.
        let root = math::sqrt(unsafe { pivot(space, tid) });
        // SAFETY: tid < 64; only this thread reads or writes the element now.
        unsafe { space.vector.write(tid as usize, root) };
    }
    thread::sync_threads();
    let mut e = tid;
    while e < len * len {
        let (r, c) = (e / len, e % len);
        if r <= c {
            // SAFETY: r, c < 64; one thread per element, the vector read-only now.
            unsafe {
                let root = space.vector.read(r as usize);
                let value = if r == c { root } else { space.tile.at(r, c) / root };
                space.tile.set(r, c, value);
                w[at(start + r, start + c)] = value;
            }
        }
        e += GEMM_THREADS;
    }
    thread::sync_threads();
}

/// Step 1, last part: `R_pp⁻¹` into the inverse tile by back substitution in shared memory, four
/// threads per column (`tid / 4`) each summing every fourth term, combined by shuffles: rows from
/// the last up, the same steps in every thread, so each shuffle has the whole warp. The diagonal's
/// reciprocals go to the vector first, and each thread's terms are a fixed number of predicated
/// ones in two sums, so that a row's step is one short chain. Ends at a barrier.
///
/// # Safety
/// `len ≤ 64`; every thread of the block calls it, after [`write_factor`].
#[inline(always)]
unsafe fn invert_factor(space: &Space, len: u32) {
    let tid = thread::thread_idx_x();
    if tid < len {
        // SAFETY: tid < 64; the vector is read only after the barrier below.
        unsafe { space.vector.write(tid as usize, 1.0 / space.tile.at(tid, tid)) };
    }
    thread::sync_threads();
    let (c, part) = (tid / 4, tid % 4);
    let mut r = len;
    while r > 0 {
        r -= 1;
        let (mut even, mut odd) = (0.0, 0.0);
        if c < len && r < c {
            for t in 0..GEMM_TILE / 8 {
                let l = r + 1 + part + 8 * t;
                // SAFETY: r < l ≤ c < 64; X(l, c) for l > r was written by this column's first
                // thread before the warp barrier of an earlier step, R is read-only now.
                unsafe {
                    if l <= c {
                        even = math::fma(space.tile.at(r, l), space.inverse.at(l, c), even);
                    }
                    if l + 4 <= c {
                        odd = math::fma(space.tile.at(r, l + 4), space.inverse.at(l + 4, c), odd);
                    }
                }
            }
        }
        let mut sum = even + odd;
        sum += warp::shfl_xor_sync(u32::MAX, sum, 1);
        sum += warp::shfl_xor_sync(u32::MAX, sum, 2);
        if c < len && part == 0 {
            let identity = if r == c { 1.0 } else { 0.0 };
            // SAFETY: r, c < 64; only this thread writes X(r, c); the vector is read-only.
            unsafe {
                space.inverse.set(
                    r,
                    c,
                    if r > c { 0.0 } else { (identity - sum) * space.vector.read(r as usize) },
                )
            };
        }
        warp::sync_warp(u32::MAX);
    }
    thread::sync_threads();
}

/// Step 2 of panel `panel` (module docs): a block per 64 columns right of the panel
/// (`blockIdx.x`) and image (`blockIdx.z`), 256 threads, [`BLOCKED_CHOLESKY_SHARED_BYTES`];
/// layouts as [`cholesky_diagonal_block`], which must have run for this panel.
#[kernel]
pub fn cholesky_row_panel(w: &mut [f64], rinv: &[f64], diagonal: &[f64], b: u32, nb: u32, panel: u32) {
    if near_identity(diagonal, b) {
        return;
    }
    let z = thread::block_idx_z() as usize;
    let bu = b as usize;
    let mut w = w.sub(z * bu * bu, bu * bu);
    let rinv = rinv.sub(z * bu * bu, bu * bu);
    let (start, len) = panel_span(b, nb, panel);
    let first = start + len + thread::block_idx_x() * GEMM_TILE;
    if first >= b {
        return;
    }
    let cols = GEMM_TILE.min(b - first);
    let space = Space::new();
    let at = |i: u32, j: u32| i as usize * bu + j as usize;
    // T = W_pj (every earlier panel's update subtracted) into the tile.
    let mut e = thread::thread_idx_x();
    while e < len * cols {
        let (i, j) = (e / cols, e % cols);
        // SAFETY: i, j < 64; one thread per element.
        unsafe { space.tile.set(i, j, w[at(start + i, first + j)]) };
        e += GEMM_THREADS;
    }
    thread::sync_threads();
    // R_pj = R_pp⁻ᵀ·T: (R_pp⁻ᵀ)(i, l) = rinv(start + l, start + i), zero for l > i.
    // SAFETY: every thread calls it; the tile is only read in it (its elements below 64 and
    // written before the barrier above).
    let acc = unsafe {
        tile_product(
            &space,
            (
                #[inline(always)]
                |i, l| if l <= i { rinv[at(start + l, start + i)] } else { 0.0 },
                Along::Tile,
            ),
            // The tile: l, j < 64, written before the barrier above.
            (
                #[inline(always)]
                |l, j| space.tile.at(l, j),
                Along::Tile,
            ),
            (len, cols),
            (0, len),
        )
    };
    for_each_output(&acc, (len, cols), |i, j, value| w[at(start + i, first + j)] = value);
}

/// Step 3 of panel `panel` (module docs): the trailing update `W_jl −= R_pjᵀ·R_pl` of the upper
/// triangle right of and below the panel, a block per 64 × 64 tile on or above the diagonal
/// (`blockIdx.y` rows, `blockIdx.x` columns of the trailing part) and image (`blockIdx.z`), 256
/// threads, [`BLOCKED_CHOLESKY_SHARED_BYTES`]; after [`cholesky_row_panel`] for this panel.
#[kernel]
pub fn cholesky_trailing_update(w: &mut [f64], diagonal: &[f64], b: u32, nb: u32, panel: u32) {
    let (bi, bj) = (thread::block_idx_y(), thread::block_idx_x());
    let (start, len) = panel_span(b, nb, panel);
    let (row0, col0) = (start + len + bi * GEMM_TILE, start + len + bj * GEMM_TILE);
    if bi > bj || col0 >= b || near_identity(diagonal, b) {
        return;
    }
    let z = thread::block_idx_z() as usize;
    let bu = b as usize;
    let mut w = w.sub(z * bu * bu, bu * bu);
    let (rows, cols) = (GEMM_TILE.min(b - row0), GEMM_TILE.min(b - col0));
    let space = Space::new();
    let at = |i: u32, j: u32| i as usize * bu + j as usize;
    let acc = {
        let r = w.as_slice();
        // SAFETY: every thread of the block calls it (the early return is per block).
        unsafe {
            tile_product(
                &space,
                (
                    #[inline(always)]
                    |i, q| r[at(q, row0 + i)],
                    Along::Tile,
                ),
                (
                    #[inline(always)]
                    |q, j| r[at(q, col0 + j)],
                    Along::Tile,
                ),
                (rows, cols),
                (start, start + len),
            )
        }
    };
    for_each_output(&acc, (rows, cols), |i, j, product| {
        if row0 + i <= col0 + j {
            w[at(row0 + i, col0 + j)] -= product;
        }
    });
}

/// The 64 × 64 tile a block of a level of the recursive doubling computes, of the `s × |C|`
/// off-diagonal block of one pair `(A, C)` of neighbouring diagonal blocks, for one image.
struct LevelTile {
    image: usize,
    /// `A`'s first row, and its length `s`.
    a0: u32,
    span: u32,
    /// `C`'s first row (its length is at most `s`).
    c0: u32,
    /// The tile's first row and column in the pair's block, and its rows and columns.
    row0: u32,
    col0: u32,
    rows: u32,
    cols: u32,
}

/// The tile of level `level` that this block computes (`blockIdx.y` rows, `blockIdx.x` columns,
/// `blockIdx.z = image·pairs + pair`): `A` the `s = nb·2^level` rows and columns from `2s·pair`,
/// `C` the up to `s` after them; `None` where `C` lies past `b`, the tile past the block, or the
/// image is near the identity.
#[inline(always)]
fn level_tile(diagonal: Slice<f64>, b: u32, nb: u32, level: u32) -> Option<LevelTile> {
    let span = nb << level;
    let pairs = level_pairs(b, span).max(1);
    let z = thread::block_idx_z();
    let (image, pair) = (z / pairs, z % pairs);
    let (a0, c0) = (2 * span * pair, 2 * span * pair + span);
    let (row0, col0) = (thread::block_idx_y() * GEMM_TILE, thread::block_idx_x() * GEMM_TILE);
    if c0 >= b || row0 >= span || col0 >= span.min(b - c0) {
        return None;
    }
    if near_identity_image(diagonal, b, (image, thread::grid_dim_z() / pairs)) {
        return None;
    }
    let (rows, cols) = (GEMM_TILE.min(span - row0), GEMM_TILE.min(span.min(b - c0) - col0));
    Some(LevelTile { image: image as usize, a0, span, c0, row0, col0, rows, cols })
}

/// Pairs `(A, C)` of the recursive doubling's level whose blocks are `span` long, for `b` rows:
/// those whose `C` starts before `b`.
pub const fn level_pairs(b: u32, span: u32) -> u32 {
    if span >= b { 0 } else { (b - span).div_ceil(2 * span) }
}

/// Level `level`, first half, of `X = R⁻¹` by recursive doubling (module docs): for each pair
/// `(A, C)` of the level, `T = R_AC·X_CC` into `w`'s strict lower triangle, transposed (`T(i, j)`
/// at `w(C + j, A + i)`), and zeros into `rinv`'s block `(C, A)` below the diagonal. A block per
/// 64 × 64 tile of `T` (`blockIdx.y` rows, `blockIdx.x` columns) and per image and pair
/// (`blockIdx.z = image·pairs + pair`), 256 threads, [`BLOCKED_CHOLESKY_SHARED_BYTES`]. `w` holds
/// `R` (upper triangle), `rinv` the blocks of `X` inside `A` and inside `C` (earlier levels).
#[kernel]
pub fn triangular_inverse_product(
    w: &mut [f64],
    rinv: &mut [f64],
    diagonal: &[f64],
    b: u32,
    nb: u32,
    level: u32,
) {
    let Some(LevelTile { image, a0, c0, row0, col0, rows, cols, .. }) = level_tile(diagonal, b, nb, level)
    else {
        return;
    };
    let bu = b as usize;
    let mut w = w.sub(image * bu * bu, bu * bu);
    let mut rinv = rinv.sub(image * bu * bu, bu * bu);
    let space = Space::new();
    let at = |i: u32, j: u32| i as usize * bu + j as usize;
    let acc = {
        let (r, x) = (w.as_slice(), rinv.as_slice());
        // SAFETY: every thread of the block calls it (the early returns are per block). X_CC is
        // upper triangular: the depth ends at this tile's last column.
        unsafe {
            tile_product(
                &space,
                (
                    #[inline(always)]
                    |i, q| r[at(a0 + row0 + i, c0 + q)],
                    Along::Depth,
                ),
                (
                    #[inline(always)]
                    |q, j| if q <= col0 + j { x[at(c0 + q, c0 + col0 + j)] } else { 0.0 },
                    Along::Tile,
                ),
                (rows, cols),
                (0, col0 + cols),
            )
        }
    };
    for_each_output(&acc, (rows, cols), |i, j, value| {
        let (row, col) = (c0 + col0 + j, a0 + row0 + i);
        w[at(row, col)] = value;
        rinv[at(row, col)] = 0.0;
    });
}

/// Level `level`, second half: `X_AC = −X_AA·T` into `rinv` for each pair `(A, C)`, `T` as
/// [`triangular_inverse_product`] left it in `w`'s lower triangle. Launched as it.
#[kernel]
pub fn triangular_inverse_block(w: &[f64], rinv: &mut [f64], diagonal: &[f64], b: u32, nb: u32, level: u32) {
    let Some(LevelTile { image, a0, span, c0, row0, col0, rows, cols }) = level_tile(diagonal, b, nb, level)
    else {
        return;
    };
    let bu = b as usize;
    let w = w.sub(image * bu * bu, bu * bu);
    let mut rinv = rinv.sub(image * bu * bu, bu * bu);
    let space = Space::new();
    let at = |i: u32, j: u32| i as usize * bu + j as usize;
    let acc = {
        let x = rinv.as_slice();
        // SAFETY: every thread of the block calls it (the early returns are per block). X_AA is
        // upper triangular: the depth starts at this tile's first row.
        unsafe {
            tile_product(
                &space,
                (
                    #[inline(always)]
                    |i, q| if q >= row0 + i { x[at(a0 + row0 + i, a0 + q)] } else { 0.0 },
                    Along::Depth,
                ),
                (
                    #[inline(always)]
                    |q, j| w[at(c0 + col0 + j, a0 + q)],
                    Along::Depth,
                ),
                (rows, cols),
                (row0, span),
            )
        }
    };
    for_each_output(&acc, (rows, cols), |i, j, value| rinv[at(a0 + row0 + i, c0 + col0 + j)] = -value);
}
