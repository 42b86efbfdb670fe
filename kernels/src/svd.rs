//! Rank-k reconstruction from a thin SVD: `out = (U[:, :k] · diag(s[:k])) · Vᵀ[:k, :]`.
//!
//! All matrices are f32, row-major. `u` is `m × k` with leading dimension `ldu ≥ k` (element
//! `U[i, p]` at `u[i·ldu + p]`), `s` holds `k` singular values, `vt` is `k × n` (element `Vᵀ[p, j]`
//! at `vt[p·n + j]`), and `out` is `m × n`. The scaling by `s` is fused into the loads of `U`.
//! Any `m`, `n`, `k` work, multiples of the tile or not. On the 2-D grid, x is the column `j` and
//! y the row `i`; z the image of a batch ([`Batch`]).
//!
//! Host side: `host/src/svd.rs`; tests: `tests/svd.rs`; benchmark: `benches/svd.rs`.

use crate::{kernel, math, shared, thread};

/// Strides between the images of a batch, elements: image `z = blockIdx.z` reads `u + z·u`,
/// `s + z·s`, `vt + z·vt` and writes `out + z·out`. All zero for a single image.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Batch {
    /// Between the `U` matrices.
    pub u: u32,
    /// Between the singular value vectors.
    pub s: u32,
    /// Between the `Vᵀ` matrices.
    pub vt: u32,
    /// Between the outputs.
    pub out: u32,
}

impl Batch {
    #[inline(always)]
    unsafe fn offset(
        self,
        u: *const f32,
        s: *const f32,
        vt: *const f32,
        out: *mut f32,
    ) -> (*const f32, *const f32, *const f32, *mut f32) {
        let z = thread::block_idx_z() as usize;
        // SAFETY: the kernel's contract: every image of the batch is in bounds.
        unsafe {
            (
                u.add(z * self.u as usize),
                s.add(z * self.s as usize),
                vt.add(z * self.vt as usize),
                out.add(z * self.out as usize),
            )
        }
    }
}

/// One thread per output element; every operand comes from global memory (through the caches).
/// Any 2-D block shape.
#[kernel]
pub unsafe fn svd_reconstruct_naive(
    u: *const f32,
    s: *const f32,
    vt: *const f32,
    out: *mut f32,
    m: u32,
    n: u32,
    k: u32,
    ldu: u32,
    batch: Batch,
) {
    let (u, s, vt, out) = batch.offset(u, s, vt, out);
    let (j, i) = thread::index_2d();
    if i < m && j < n {
        let (i, j, n, ldu) = (i as usize, j as usize, n as usize, ldu as usize);
        let mut acc = 0.0f32;
        for p in 0..k as usize {
            acc = math::fma(*u.add(i * ldu + p) * *s.add(p), *vt.add(p * n + j), acc);
        }
        *out.add(i * n + j) = acc;
    }
}

/// Shared-memory tiling: a square block of `T × T` threads (`T = blockDim.x = blockDim.y`, e.g.
/// 8, 16 or 32) stages a `T × T` tile of `U·s` and one of `Vᵀ` per step of `T` along `k`, so each
/// global element is read once per block instead of once per thread.
///
/// Dynamic shared memory: `2·T²·4` bytes.
#[kernel]
pub unsafe fn svd_reconstruct_tiled(
    u: *const f32,
    s: *const f32,
    vt: *const f32,
    out: *mut f32,
    m: u32,
    n: u32,
    k: u32,
    ldu: u32,
    batch: Batch,
) {
    let (u, s, vt, out) = batch.offset(u, s, vt, out);
    let t = thread::block_dim_x();
    let (tx, ty) = (thread::thread_idx_x(), thread::thread_idx_y());
    let row = thread::block_idx_y() * t + ty;
    let col = thread::block_idx_x() * t + tx;
    let tt = (t * t) as usize;
    let us_tile = shared::region::<f32>(0, tt);
    let vt_tile = shared::region::<f32>(tt * 4, tt);
    let (ti, tj) = ((ty * t) as usize, tx as usize);

    let mut acc = 0.0f32;
    let mut p0 = 0;
    while p0 < k {
        let pa = p0 + tx;
        let a = if row < m && pa < k { *u.add((row * ldu + pa) as usize) * *s.add(pa as usize) } else { 0.0 };
        let pb = p0 + ty;
        let b = if pb < k && col < n { *vt.add((pb * n + col) as usize) } else { 0.0 };
        us_tile.write(ti + tj, a);
        vt_tile.write(ti + tj, b);
        thread::sync_threads();
        for q in 0..t as usize {
            acc = math::fma(us_tile.read(ti + q), vt_tile.read(q * t as usize + tj), acc);
        }
        thread::sync_threads();
        p0 += t;
    }
    if row < m && col < n {
        *out.add((row * n + col) as usize) = acc;
    }
}

/// Rows (of `out`) per block of the register-tiled kernel.
pub const REG_TILE_M: u32 = 128;
/// Columns per block of the register-tiled kernel.
pub const REG_TILE_N: u32 = 128;
/// Step along `k` per shared-memory stage.
pub const REG_TILE_K: u32 = 8;
/// Threads per block of the register-tiled kernel (a 16 × 16 block).
pub const REG_THREADS: u32 = 256;
/// Bytes of one shared-memory stage: the `U·s` tile stored transposed (`REG_TILE_K × REG_TILE_M`)
/// and the `Vᵀ` tile (`REG_TILE_K × REG_TILE_N`).
const REG_STAGE_BYTES: u32 = (REG_TILE_K * (REG_TILE_M + REG_TILE_N)) * 4;
/// Dynamic shared memory of the register-tiled kernel, bytes: two stages (double buffering).
pub const REG_SHARED_BYTES: u32 = 2 * REG_STAGE_BYTES;

/// Four floats loaded from shared memory as one 16-byte access.
#[derive(Clone, Copy)]
#[repr(C, align(16))]
struct Float4([f32; 4]);

/// Register tiling (the "more data reuse" step): a 16 × 16 block computes a 128 × 128 tile of `out`,
/// each thread an 8 × 8 sub-tile held in registers — two 4 × 4 groups 64 rows/columns apart, so that
/// the warp's 16-byte shared-memory reads are conflict-free. Per step along `k`, each thread reads
/// 16 values from shared memory and does 64 FMAs. Shared memory holds two stages: while the block
/// computes on one, the next stage's global loads are in flight and then stored into the other, so
/// one barrier per stage suffices and memory latency hides behind the arithmetic.
///
/// Launch: block 16 × 16 (`REG_THREADS`), grid `⌈n/128⌉ × ⌈m/128⌉`, `REG_SHARED_BYTES` of dynamic
/// shared memory.
#[kernel]
pub unsafe fn svd_reconstruct_regtiled(
    u: *const f32,
    s: *const f32,
    vt: *const f32,
    out: *mut f32,
    m: u32,
    n: u32,
    k: u32,
    ldu: u32,
    batch: Batch,
) {
    let (u, s, vt, out) = batch.offset(u, s, vt, out);
    const BM: usize = REG_TILE_M as usize;
    const BN: usize = REG_TILE_N as usize;
    const BK: usize = REG_TILE_K as usize;
    // Stage `t` (0 or 1) holds the `U·s` tile at float offset `t·STAGE`, then the `Vᵀ` tile.
    const STAGE: usize = (REG_STAGE_BYTES / 4) as usize;
    let stages = shared::region::<f32>(0, 2 * STAGE);

    let tid = thread::thread_idx_y() * 16 + thread::thread_idx_x();
    let (tx, ty) = (thread::thread_idx_x() as usize, thread::thread_idx_y() as usize);
    let row0 = thread::block_idx_y() * REG_TILE_M;
    let col0 = thread::block_idx_x() * REG_TILE_N;

    // Which global elements this thread stages: 4 consecutive p of one row of U, and 4 consecutive
    // columns of one row of Vᵀ.
    let a_row = tid / 2;
    let a_p = (tid % 2) * 4;
    let b_p = tid / 32;
    let b_col = (tid % 32) * 4;

    let load_stage = |p0: u32| -> ([f32; 4], [f32; 4]) {
        let mut a = [0.0f32; 4];
        let mut b = [0.0f32; 4];
        let i = row0 + a_row;
        for q in 0..4 {
            let p = p0 + a_p + q as u32;
            if i < m && p < k {
                a[q] = *u.add((i * ldu + p) as usize) * *s.add(p as usize);
            }
            let pb = p0 + b_p;
            let j = col0 + b_col + q as u32;
            if pb < k && j < n {
                b[q] = *vt.add((pb * n + j) as usize);
            }
        }
        (a, b)
    };
    let store_stage = |stage: usize, a: [f32; 4], b: [f32; 4]| {
        for q in 0..4 {
            stages.write(stage * STAGE + (a_p as usize + q) * BM + a_row as usize, a[q]);
            stages.write(stage * STAGE + BK * BM + b_p as usize * BN + b_col as usize + q, b[q]);
        }
    };

    let mut acc = [[0.0f32; 8]; 8];
    // One step along k: 16 shared reads (four 16-byte vectors), 64 FMAs.
    let step = |acc: &mut [[f32; 8]; 8], stage: usize, p: usize| {
        let base = stages.as_ptr().add(stage * STAGE);
        let us_row = base.add(p * BM) as *const Float4;
        let vt_row = base.add(BK * BM + p * BN) as *const Float4;
        let (a_lo, a_hi) = (*us_row.add(ty), *us_row.add(ty + 16));
        let (b_lo, b_hi) = (*vt_row.add(tx), *vt_row.add(tx + 16));
        let a = [a_lo.0[0], a_lo.0[1], a_lo.0[2], a_lo.0[3], a_hi.0[0], a_hi.0[1], a_hi.0[2], a_hi.0[3]];
        let b = [b_lo.0[0], b_lo.0[1], b_lo.0[2], b_lo.0[3], b_hi.0[0], b_hi.0[1], b_hi.0[2], b_hi.0[3]];
        for r in 0..8 {
            for c in 0..8 {
                acc[r][c] = math::fma(a[r], b[c], acc[r][c]);
            }
        }
    };

    let (a0, b0) = load_stage(0);
    store_stage(0, a0, b0);
    thread::sync_threads();
    let mut stage = 0;
    let mut p0 = 0;
    while p0 < k {
        let more = p0 + REG_TILE_K < k;
        let (a_next, b_next) = if more { load_stage(p0 + REG_TILE_K) } else { ([0.0; 4], [0.0; 4]) };
        // Unrolled by hand (REG_TILE_K = 8) so the shared-memory reads can be scheduled early.
        step(&mut acc, stage, 0);
        step(&mut acc, stage, 1);
        step(&mut acc, stage, 2);
        step(&mut acc, stage, 3);
        step(&mut acc, stage, 4);
        step(&mut acc, stage, 5);
        step(&mut acc, stage, 6);
        step(&mut acc, stage, 7);
        if more {
            // The other stage was last read before the previous barrier: safe to overwrite.
            store_stage(1 - stage, a_next, b_next);
        }
        thread::sync_threads();
        stage = 1 - stage;
        p0 += REG_TILE_K;
    }

    // Written out row by row so that every index into `acc` is a constant and it stays in registers.
    let store_row = |r: usize, values: [f32; 8]| {
        let i = row0 + (ty * 4 + (r % 4) + (r / 4) * 64) as u32;
        for (c, value) in values.into_iter().enumerate() {
            let j = col0 + (tx * 4 + (c % 4) + (c / 4) * 64) as u32;
            if i < m && j < n {
                *out.add((i * n + j) as usize) = value;
            }
        }
    };
    store_row(0, acc[0]);
    store_row(1, acc[1]);
    store_row(2, acc[2]);
    store_row(3, acc[3]);
    store_row(4, acc[4]);
    store_row(5, acc[5]);
    store_row(6, acc[6]);
    store_row(7, acc[7]);
}

/// `dst[i] = round(clamp(src[i], 0, 1)·255)` (halves away from zero) for `count` values: the
/// bytes a PNG of the reconstruction stores, identical to the host's
/// `image_io::to_gray8(…, Scaling::Clamp)`, so that only a quarter of the bytes cross PCIe when
/// the job writes PNGs. The product is rounded in f32 as on the host; the rounding is done in
/// f64, where `x + 0.5` is exact. Any 1-D launch (grid-stride loop).
#[kernel]
pub unsafe fn quantize_gray8(src: *const f32, dst: *mut u8, count: u32) {
    let mut i = thread::index_1d();
    while i < count {
        // SAFETY: the kernel's contract: `src` and `dst` hold `count` elements.
        unsafe {
            let v = (*src.add(i as usize)).clamp(0.0, 1.0) * 255.0;
            *dst.add(i as usize) = math::floor(v as f64 + 0.5) as u8;
        }
        i += thread::grid_stride_1d();
    }
}
