//! The FP32 (CUDA-core) reconstructions: one thread per output (`naive`), square shared-memory
//! tiles (`tiled`), and 128 × 128 tiles with 8 × 8 outputs per thread in registers (`regtiled`).

use super::Batch;
use gpu_std::{global, kernel, math, shared, thread};

/// One thread per output element; every operand comes from global memory (through the caches).
/// Any 2-D block shape.
///
/// # Safety
/// Each image of the batch lies inside the slices ([`Batch`]): the accesses are unchecked on the
/// GPU (the simulator checks every access).
#[kernel]
pub unsafe fn svd_reconstruct_naive(
    u: &[f32],
    s: &[f32],
    vt: &[f32],
    out: &mut [f32],
    m: u32,
    n: u32,
    k: u32,
    ldu: u32,
    batch: Batch,
) {
    let (u, s, vt, mut out) = batch.image(u, s, vt, out, m, n, k, ldu);
    let (j, i) = thread::index_2d();
    if i < m && j < n {
        let (i, j, n, ldu) = (i as usize, j as usize, n as usize, ldu as usize);
        let mut acc = 0.0f32;
        for p in 0..k as usize {
            acc = math::fma(
                u.get_unchecked(i * ldu + p) * s.get_unchecked(p),
                vt.get_unchecked(p * n + j),
                acc,
            );
        }
        out.set_unchecked(i * n + j, acc);
    }
}

/// Shared-memory tiling: a square block of `T × T` threads (`T = blockDim.x = blockDim.y`, e.g.
/// 8, 16 or 32) stages a `T × T` tile of `U·s` and one of `Vᵀ` per step of `T` along `k`, so each
/// global element is read once per block instead of once per thread.
///
/// Launch: block `T × T`, grid `⌈n/T⌉ × ⌈m/T⌉` (× images along z), dynamic shared memory
/// `2·T²·4` bytes.
///
/// # Safety
/// From each image's offset ([`Batch`]), `u` holds `(m − 1)·ldu + k` elements (`k ≤ ldu`), `s`
/// `k`, `vt` `k·n` and `out` `m·n`: the accesses are unchecked on the GPU (checking views per
/// thread cost 2–3% of this kernel; the simulator checks every access).
#[kernel]
pub unsafe fn svd_reconstruct_tiled(
    u: &[f32],
    s: &[f32],
    vt: &[f32],
    out: &mut [f32],
    m: u32,
    n: u32,
    k: u32,
    ldu: u32,
    batch: Batch,
) {
    let (u, s, vt, mut out) = batch.image(u, s, vt, out, m, n, k, ldu);
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
        let a = if row < m && pa < k {
            u.get_unchecked((row * ldu + pa) as usize) * s.get_unchecked(pa as usize)
        } else {
            0.0
        };
        let pb = p0 + ty;
        let b = if pb < k && col < n { vt.get_unchecked((pb * n + col) as usize) } else { 0.0 };
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
        out.set_unchecked((row * n + col) as usize, acc);
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

/// Register tiling (the "more data reuse" step): a 16 × 16 block computes a 128 × 128 tile of `out`,
/// each thread an 8 × 8 sub-tile held in registers — two 4 × 4 groups 64 rows/columns apart, so that
/// the warp's 16-byte shared-memory reads are conflict-free. Per step along `k`, each thread reads
/// 16 values from shared memory and does 64 FMAs. Shared memory holds two stages: while the block
/// computes on one, the next stage's global loads are in flight and then stored into the other, so
/// one barrier per stage suffices and memory latency hides behind the arithmetic. Launch bounds hold
/// it to 128 registers, so two blocks share an SM.
///
/// Launch: block 16 × 16 (`REG_THREADS`), grid `⌈n/128⌉ × ⌈m/128⌉`, `REG_SHARED_BYTES` of dynamic
/// shared memory.
///
/// # Safety
/// Each image of the batch lies inside the slices ([`Batch`]), as for
/// [`svd_reconstruct_naive`]: the accesses are unchecked on the GPU.
#[kernel(launch_bounds(256, 2))]
pub unsafe fn svd_reconstruct_regtiled(
    u: &[f32],
    s: &[f32],
    vt: &[f32],
    out: &mut [f32],
    m: u32,
    n: u32,
    k: u32,
    ldu: u32,
    batch: Batch,
) {
    let (u, s, vt, mut out) = batch.image(u, s, vt, out, m, n, k, ldu);
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

    // The scaling by `s` goes to the `Vᵀ` row (`s[p]·Vᵀ[p, j]`: one singular value per thread and
    // stage). The loads return unmultiplied and the product is taken when the stage is stored, after
    // the step's arithmetic: warps issue in order, and a multiply right after the loads stalled each
    // warp for the whole memory latency. Blocks whose tiles lie inside `U` and `Vᵀ` load 16 bytes
    // at once where rows are 16-byte aligned (fewer load and address instructions per stage).
    let vector_loads = ldu.is_multiple_of(4)
        && n.is_multiple_of(4)
        && global::is_aligned_16(u.as_ptr())
        && global::is_aligned_16(vt.as_ptr())
        && row0 + REG_TILE_M <= m
        && col0 + REG_TILE_N <= n;
    // `move`: the closure keeps its own copies of the slices. Capturing them by reference gave
    // LLVM a different shape of the same loads, after which ptxas re-read the thread indices inside
    // the main loop (register pressure at the 128-register cap).
    let load_stage = move |p0: u32| -> ([f32; 4], [f32; 4], f32) {
        let i = row0 + a_row;
        let pb = p0 + b_p;
        if vector_loads && p0 + REG_TILE_K <= k {
            return (
                u.load_f32x4_unchecked((i * ldu + p0 + a_p) as usize),
                vt.load_f32x4_unchecked((pb * n + col0 + b_col) as usize),
                s.get_unchecked(pb as usize),
            );
        }
        let mut a = [0.0f32; 4];
        let mut b = [0.0f32; 4];
        let scale = if pb < k { s.get_unchecked(pb as usize) } else { 0.0 };
        for q in 0..4 {
            let p = p0 + a_p + q as u32;
            if i < m && p < k {
                a[q] = u.get_unchecked((i * ldu + p) as usize);
            }
            let j = col0 + b_col + q as u32;
            if pb < k && j < n {
                b[q] = vt.get_unchecked((pb * n + j) as usize);
            }
        }
        (a, b, scale)
    };
    let store_stage = |stage: usize, (a, b, scale): ([f32; 4], [f32; 4], f32)| {
        for q in 0..4 {
            stages.write(stage * STAGE + (a_p as usize + q) * BM + a_row as usize, a[q]);
            stages.write(stage * STAGE + BK * BM + b_p as usize * BN + b_col as usize + q, b[q] * scale);
        }
    };

    let mut acc = [[0.0f32; 8]; 8];
    // One step along k: 16 shared reads (four 16-byte vectors), 64 FMAs.
    let step = |acc: &mut [[f32; 8]; 8], stage: usize, p: usize| {
        // Through a pointer to the stage, not `stages.read_f32x4(index)`: the index form gave the
        // same instructions in another order (ptxas folds the stage into a uniform register), and
        // this loop is tuned.
        #[derive(Clone, Copy)]
        #[repr(C, align(16))]
        struct Float4([f32; 4]);
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

    store_stage(0, load_stage(0));
    thread::sync_threads();
    let mut stage = 0;
    let mut p0 = 0;
    while p0 < k {
        let more = p0 + REG_TILE_K < k;
        let next = if more { load_stage(p0 + REG_TILE_K) } else { ([0.0; 4], [0.0; 4], 0.0) };
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
            store_stage(1 - stage, next);
        }
        thread::sync_threads();
        stage = 1 - stage;
        p0 += REG_TILE_K;
    }

    // Written out row by row so that every index into `acc` is a constant and it stays in registers;
    // each row as two 16-byte streaming stores (a warp writes two 256-byte runs per store) where
    // aligned.
    let out_vec = n.is_multiple_of(4) && global::is_aligned_16(out.as_ptr());
    let mut store_row = |r: usize, values: [f32; 8]| {
        let i = row0 + (ty * 4 + (r % 4) + (r / 4) * 64) as u32;
        if i >= m {
            return;
        }
        unroll!(half in [0, 1] {
            let j = col0 + (tx * 4 + half * 64) as u32;
            let v = [values[4 * half], values[4 * half + 1], values[4 * half + 2], values[4 * half + 3]];
            out.store_f32x4_clipped_streaming((i * n + j) as usize, j, n, v, out_vec);
        });
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
