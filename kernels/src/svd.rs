//! Rank-k reconstruction from a thin SVD: `out = (U[:, :k] · diag(s[:k])) · Vᵀ[:k, :]`.
//!
//! All matrices are f32, row-major. `u` is `m × k` with leading dimension `ldu ≥ k` (element
//! `U[i, p]` at `u[i·ldu + p]`), `s` holds `k` singular values, `vt` is `k × n` (element `Vᵀ[p, j]`
//! at `vt[p·n + j]`), and `out` is `m × n`. The scaling by `s` is fused into the loads of `U`
//! (of `Vᵀ` in [`svd_reconstruct_regtiled`]).
//! Any `m`, `n`, `k` work, multiples of the tile or not. On the 2-D grid, x is the column `j` and
//! y the row `i`; z the image of a batch ([`Batch`]).
//!
//! Host side: `host/src/svd.rs`; tests: `tests/svd.rs`; benchmark: `benches/svd.rs`.

use gpu_std::slice::{Slice, SliceMut};
use gpu_std::{global, kernel, math, mma, shared, thread};

/// Repeats `$body` with `$i` bound to each listed `usize` constant: loop unrolling by hand, so that
/// every index into the register arrays (accumulators, fragments) is a constant.
macro_rules! unroll {
    ($i:ident in [$($v:literal),*] $body:block) => {$({
        let $i: usize = $v;
        $body
    })*};
}

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
    /// The operands of image `z = blockIdx.z`: its `U` (`(m − 1)·ldu + k` elements), `s` (`k`),
    /// `Vᵀ` (`k·n`) and `out` (`m·n`), as views of the batch's slices. Unchecked on the GPU, like
    /// the kernels' accesses through them; the simulator checks the views and every access.
    ///
    /// # Safety
    /// The kernel's contract: every image of the batch lies inside the slices.
    #[inline(always)]
    #[track_caller]
    #[allow(clippy::too_many_arguments)]
    unsafe fn image(
        self,
        u: Slice<f32>,
        s: Slice<f32>,
        vt: Slice<f32>,
        out: SliceMut<f32>,
        m: u32,
        n: u32,
        k: u32,
        ldu: u32,
    ) -> (Slice<f32>, Slice<f32>, Slice<f32>, SliceMut<f32>) {
        let z = thread::block_idx_z() as usize;
        let (m, n, k, ldu) = (m as usize, n as usize, k as usize, ldu as usize);
        let u_len = if m == 0 { 0 } else { (m - 1) * ldu + k };
        // SAFETY: the caller's promise.
        unsafe {
            (
                u.sub_unchecked(z * self.u as usize, u_len),
                s.sub_unchecked(z * self.s as usize, k),
                vt.sub_unchecked(z * self.vt as usize, k * n),
                out.sub_unchecked(z * self.out as usize, m * n),
            )
        }
    }
}

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

/// Rows (of `out`) per block of the tensor-core kernels.
pub const MMA_TILE_M: u32 = 128;
/// Columns per block of the tensor-core kernels.
pub const MMA_TILE_N: u32 = 128;
/// Step along `k` per shared-memory stage of the tensor-core kernels (four m16n8k8 steps).
pub const MMA_TILE_K: u32 = 32;
/// Shared-memory stages of the tensor-core kernels' `cp.async` pipeline.
pub const MMA_STAGES: u32 = 3;
/// m16n8 fragments along `n` per warp of [`svd_reconstruct_tf32`]: its warps compute 64 × 32 parts.
/// One pass keeps more warps busy with 4 (8 warps at 128 registers); three passes gain more from
/// reusing each loaded `A` fragment over 8 (4 warps of 64 × 64 at up to 255 registers).
const TF32_FRAGS_N: usize = 4;
/// m16n8 fragments along `n` per warp of [`svd_reconstruct_tf32x3`].
const TF32X3_FRAGS_N: usize = 8;
/// Threads per block of a tensor-core kernel whose warps hold `frags_n` fragments along `n`: two
/// warps along `m` (64 rows each) times `MMA_TILE_N / (8·frags_n)` along `n`.
const fn mma_threads(frags_n: usize) -> u32 {
    32 * 2 * MMA_TILE_N / (8 * frags_n as u32)
}
/// Threads per block of [`svd_reconstruct_tf32`] (its launch bounds say the same).
pub const MMA_TF32_THREADS: u32 = mma_threads(TF32_FRAGS_N);
/// Threads per block of [`svd_reconstruct_tf32x3`] (its launch bounds say the same).
pub const MMA_TF32X3_THREADS: u32 = mma_threads(TF32X3_FRAGS_N);
/// Floats per row of a stage's `U` tile: 32 of `k` plus 4 of padding, so that the 8 rows of 16
/// bytes of an `ldmatrix` matrix hit 32 different banks.
const MMA_A_STRIDE: usize = 36;
/// Floats per row (one `p`) of a stage's `Vᵀ` tile, 128 columns plus 8 of padding (conflict-free
/// `B` fragments).
const MMA_B_STRIDE: usize = 136;
const MMA_A_FLOATS: usize = MMA_TILE_M as usize * MMA_A_STRIDE;
const MMA_B_FLOATS: usize = MMA_TILE_K as usize * MMA_B_STRIDE;
/// Floats of one stage: the `U` tile (`MMA_TILE_M × MMA_A_STRIDE`), then the `Vᵀ` tile
/// (`MMA_TILE_K × MMA_B_STRIDE`).
const MMA_STAGE_FLOATS: usize = MMA_A_FLOATS + MMA_B_FLOATS;
/// Dynamic shared memory of the tensor-core kernels, bytes: [`MMA_STAGES`] stages (105 KiB).
pub const MMA_SHARED_BYTES: u32 = MMA_STAGES * (MMA_STAGE_FLOATS * 4) as u32;

/// An f32 as the sum of two tf32 operands, `big = tf32(x)` ([`mma::round_tf32`]: to nearest,
/// ties away) and `small = x − big` (exact). `small` is passed to the tensor cores as it is: they
/// read its tf32 bits, i.e. truncate it, an error below 2⁻¹⁰·|small| ≤ 2⁻²¹·|x|. Three integer/f32
/// instructions, no conversion.
#[inline(always)]
fn split_tf32(x: f32) -> (f32, f32) {
    let big = mma::round_tf32(x);
    (big, x - big)
}

/// One warp's operands for one m16n8k8 step: four `A` fragments (rows `16·mi`) and `NI` `B`
/// fragments (columns `8·ni`).
type Fragments<const NI: usize> = ([[f32; 4]; 4], [[f32; 2]; NI]);

/// One warp's accumulators: `[mi][ni]` is the m16n8 tile of rows `16·mi`, columns `8·ni` of its part.
type Accumulators<const NI: usize> = [[[f32; 4]; NI]; 4];

/// One m16n8k8 step of a warp: `acc[mi][ni] += A[mi]·B[ni]` for its 4 × `NI` fragments, as one tf32 MMA each or, for `SPLIT`, three (the 3xTF32 split of both operands).
/// A function rather than a closure so that it is always inlined: the accumulators must stay in
/// registers.
#[inline(always)]
fn multiply<const SPLIT: bool, const NI: usize>(acc: &mut Accumulators<NI>, (a, b): Fragments<NI>) {
    if SPLIT {
        let b = b.map(|b| b.map(split_tf32));
        unroll!(mi in [0, 1, 2, 3] {
            let a = a[mi].map(split_tf32);
            let (a_big, a_small) = (a.map(|x| x.0), a.map(|x| x.1));
            for ni in 0..NI {
                let (b_big, b_small) = (b[ni].map(|x| x.0), b[ni].map(|x| x.1));
                // The small cross terms first, the big product last.
                acc[mi][ni] = mma::mma_tf32_m16n8k8(a_small, b_big, acc[mi][ni]);
                acc[mi][ni] = mma::mma_tf32_m16n8k8(a_big, b_small, acc[mi][ni]);
                acc[mi][ni] = mma::mma_tf32_m16n8k8(a_big, b_big, acc[mi][ni]);
            }
        });
    } else {
        unroll!(mi in [0, 1, 2, 3] {
            for ni in 0..NI {
                acc[mi][ni] = mma::mma_tf32_m16n8k8(a[mi], b[ni], acc[mi][ni]);
            }
        });
    }
}

/// The body of [`svd_reconstruct_tf32`] (`SPLIT = false`) and [`svd_reconstruct_tf32x3`]
/// (`SPLIT = true`), with warps of 64 × `8·NI` (`NI` fragments along `n`).
///
/// # Layouts
///
/// A stage holds `U[row0 + r, p0 + c]` at `r·MMA_A_STRIDE + c` and `Vᵀ[p0 + r, col0 + c]` at
/// `MMA_A_FLOATS + r·MMA_B_STRIDE + c`, exactly as copied. After its copies have landed, each
/// thread rewrites the elements it copied itself (its own `cp.async` writes are visible to it
/// after the wait; the barrier that follows publishes them): `U` times `s` (the scaling of
/// `diag(s)`), and for one pass both operands rounded to tf32. The MMAs then read operands
/// as they are, with no per-fragment work beyond the 3xTF32 split.
///
/// Per step of 8 along `k` a warp loads each of its four `A` fragments (16 × 8 of `U·diag(s)`) with
/// one [`mma::ldmatrix_x4`] and each of its `B` fragments (8 × 8 of `Vᵀ`) with two 4-byte loads;
/// the next step's fragments are loaded before this step's MMAs are issued, so that shared-memory
/// latency hides behind them.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn reconstruct_mma<const SPLIT: bool, const NI: usize>(
    u: Slice<f32>,
    s: Slice<f32>,
    vt: Slice<f32>,
    out: SliceMut<f32>,
    m: u32,
    n: u32,
    k: u32,
    ldu: u32,
    batch: Batch,
) {
    const BK: u32 = MMA_TILE_K;
    const STAGE_BYTES: u32 = (MMA_STAGE_FLOATS * 4) as u32;
    // SAFETY (whole body): the kernel's contract — `u`, `s`, `vt` and `out` hold the batch's
    // images; every global access below is guarded by `m`, `n` and `k`, every shared one stays in
    // the launch's `MMA_SHARED_BYTES`.
    unsafe {
        let (u, s, vt, mut out) = batch.image(u, s, vt, out, m, n, k, ldu);
        let smem = shared::region::<f32>(0, MMA_STAGES as usize * MMA_STAGE_FLOATS);
        let base = mma::shared_address(smem.as_ptr());
        let tid = thread::thread_idx_x();
        let (warp, lane) = (tid / 32, tid % 32);
        let (g, t) = ((lane / 4) as usize, (lane % 4) as usize);
        let row0 = thread::block_idx_y() * MMA_TILE_M;
        let col0 = thread::block_idx_x() * MMA_TILE_N;
        // The block's shape (constants once NI is known) and this warp's 64 × 8·NI part of the tile.
        let threads = mma_threads(NI);
        let warps = threads / 32;
        // 16-byte groups of one stage's U tile (and of its Vᵀ tile) each thread copies.
        let groups_per_thread = MMA_TILE_M * MMA_TILE_K / 4 / threads;
        let (warps_n, warp_n) = (warps / 2, 8 * NI);
        let (wm, wn) = ((warp / warps_n) as usize * 64, (warp % warps_n) as usize * warp_n);
        // 16-byte copies where rows start on 16-byte boundaries, else 4-byte ones.
        let u_vec = ldu.is_multiple_of(4) && global::is_aligned_16(u.as_ptr());
        let vt_vec = n.is_multiple_of(4) && global::is_aligned_16(vt.as_ptr());
        let ktiles = k.div_ceil(BK);
        let (full_rows, full_cols) = (row0 + MMA_TILE_M <= m, col0 + MMA_TILE_N <= n);
        // The elements a thread copies (and later rewrites): with 16-byte copies, the groups of 4
        // at (row (tid + THREADS·q) / 8, column tid % 8 · 4) of U and (row (tid + THREADS·q) / 32,
        // column tid % 32 · 4) of Vᵀ, q = 0..groups_per_thread; with 4-byte copies, (row
        // tid / 32 + WARPS·q, column tid % 32) of U and (row tid / 128 + THREADS/128·q, column
        // tid % 128) of Vᵀ.
        let u_group = |q: u32| ((tid + threads * q) / 8, (tid + threads * q) % 8 * 4);
        let vt_group = |q: u32| ((tid + threads * q) / 32, (tid + threads * q) % 32 * 4);
        // Group 0's source at p0 = 0 and its byte offset in a stage, for the copies inside the
        // matrix (computed only where they are used).
        let (u_first, u_first_dst) = {
            let (r, c) = u_group(0);
            (u.as_ptr().wrapping_add(((row0 + r) * ldu + c) as usize), (r * MMA_A_STRIDE as u32 + c) * 4)
        };
        let (vt_first, vt_first_dst) = {
            let (r, c) = vt_group(0);
            (vt.as_ptr().wrapping_add((r * n + col0 + c) as usize), (r * MMA_B_STRIDE as u32 + c) * 4)
        };

        // Starts the copies of k-tile `kt` into `stage`, zero-filling whatever lies past m, n or k.
        let load_tile = #[inline(always)]
        |kt: u32, stage: u32| {
            let p0 = kt * BK;
            let sa = base + stage * STAGE_BYTES;
            let sb = sa + (MMA_A_FLOATS * 4) as u32;
            let u_at = |r: u32, c: u32| -> (*const f32, u32) {
                let (i, p) = (row0 + r, p0 + c);
                if i < m && p < k { (u.as_ptr().add((i * ldu + p) as usize), k - p) } else { (u.as_ptr(), 0) }
            };
            let vt_at = |r: u32, c: u32| -> (*const f32, u32) {
                let (p, j) = (p0 + r, col0 + c);
                if p < k && j < n { (vt.as_ptr().add((p * n + j) as usize), n - j) } else { (vt.as_ptr(), 0) }
            };
            if u_vec && full_rows && p0 + BK <= k {
                // Inside the matrix (the usual case) the copies need no bounds and no zero fill:
                // this thread's groups are threads / 8 rows apart.
                let src = u_first.add(p0 as usize);
                let dst = sa + u_first_dst;
                for q in 0..groups_per_thread {
                    let rows = q * (threads / 8);
                    mma::cp_async_16(
                        dst + rows * MMA_A_STRIDE as u32 * 4,
                        src.add((rows * ldu) as usize),
                        16,
                    );
                }
            } else if u_vec {
                for q in 0..groups_per_thread {
                    let (r, c) = u_group(q);
                    let (src, left) = u_at(r, c);
                    mma::cp_async_16(sa + (r * MMA_A_STRIDE as u32 + c) * 4, src, left.min(4) * 4);
                }
            } else {
                // A loop whose trip count depends on the thread, so that it is not unrolled: all
                // copies' addresses at once would not fit in the registers left beside the
                // accumulators.
                let (mut r, c) = (tid / 32, tid % 32);
                while r < MMA_TILE_M {
                    let (src, left) = u_at(r, c);
                    mma::cp_async_4(sa + (r * MMA_A_STRIDE as u32 + c) * 4, src, left.min(1) * 4);
                    r += warps;
                }
            }
            if vt_vec && full_cols && p0 + BK <= k {
                // As for U: this thread's groups are threads / 32 rows of Vᵀ apart.
                let src = vt_first.add((p0 * n) as usize);
                let dst = sb + vt_first_dst;
                for q in 0..groups_per_thread {
                    let rows = q * (threads / 32);
                    mma::cp_async_16(dst + rows * MMA_B_STRIDE as u32 * 4, src.add((rows * n) as usize), 16);
                }
            } else if vt_vec {
                for q in 0..groups_per_thread {
                    let (r, c) = vt_group(q);
                    let (src, left) = vt_at(r, c);
                    mma::cp_async_16(sb + (r * MMA_B_STRIDE as u32 + c) * 4, src, left.min(4) * 4);
                }
            } else {
                // Rolled, as above.
                let (mut r, c) = (tid / MMA_TILE_N, tid % MMA_TILE_N);
                while r < MMA_TILE_K {
                    let (src, left) = vt_at(r, c);
                    mma::cp_async_4(sb + (r * MMA_B_STRIDE as u32 + c) * 4, src, left.min(1) * 4);
                    r += threads / MMA_TILE_N;
                }
            }
        };

        // The singular values this thread scales its copied part of U by in k-tile `kt`: four
        // from column tid % 8 · 4 with 16-byte copies, else one (the first) at column tid % 32.
        // Read from global memory one tile ahead, so that their latency hides behind the MMAs.
        let s_column = if u_vec { tid % 8 * 4 } else { tid % 32 };
        let scales = #[inline(always)]
        |kt: u32| -> [f32; 4] {
            core::array::from_fn(|e| {
                let p = kt * BK + s_column + e as u32;
                if (u_vec || e == 0) && p < k { s.get_unchecked(p as usize) } else { 0.0 }
            })
        };

        // Rewrites this thread's copied elements of k-tile `kt` in `stage` (see Layouts): U scaled
        // by `sc` (from `scales(kt)`), and rounded to tf32 for one pass. Elements past k are zero
        // and stay zero.
        let prepare_tile = #[inline(always)]
        |stage: usize, sc: [f32; 4]| {
            let sa = stage * MMA_STAGE_FLOATS;
            let sb = sa + MMA_A_FLOATS;
            let round = |x: f32| if SPLIT { x } else { mma::round_tf32(x) };
            if u_vec {
                let c = s_column;
                for q in 0..groups_per_thread {
                    let (r, _) = u_group(q);
                    let at = sa + r as usize * MMA_A_STRIDE + c as usize;
                    let v = smem.read_f32x4(at);
                    smem.write_f32x4(at, core::array::from_fn(|e| round(v[e] * sc[e])));
                }
            } else {
                let (mut r, c) = (tid / 32, s_column);
                while r < MMA_TILE_M {
                    let at = sa + r as usize * MMA_A_STRIDE + c as usize;
                    smem.write(at, round(smem.read(at) * sc[0]));
                    r += warps;
                }
            }
            if !SPLIT {
                if vt_vec {
                    for q in 0..groups_per_thread {
                        let (r, c) = vt_group(q);
                        let at = sb + r as usize * MMA_B_STRIDE + c as usize;
                        smem.write_f32x4(at, smem.read_f32x4(at).map(mma::round_tf32));
                    }
                } else {
                    let (mut r, c) = (tid / MMA_TILE_N, tid % MMA_TILE_N);
                    while r < MMA_TILE_K {
                        let at = sb + r as usize * MMA_B_STRIDE + c as usize;
                        smem.write(at, mma::round_tf32(smem.read(at)));
                        r += threads / MMA_TILE_N;
                    }
                }
            }
        };

        // acc[mi][ni]: the m16n8 accumulator of rows wm + 16·mi, columns wn + 8·ni.
        let mut acc: Accumulators<NI> = [[[0.0; 4]; NI]; 4];
        // This lane's ldmatrix row: row lane % 8 (+ 8 for matrices 1 and 3) of the fragment,
        // columns 0..4 (+ 4 for matrices 2 and 3), as a byte offset in the stage.
        let a_row = ((wm as u32 + lane % 8 + 8 * (lane / 8 % 2)) * MMA_A_STRIDE as u32 + 4 * (lane / 16)) * 4;
        // The fragments of step `kk` (0..4) of the tile in `stage`.
        let fragments = #[inline(always)]
        |stage: usize, kk: usize| -> Fragments<NI> {
            let sa = stage * MMA_STAGE_FLOATS;
            let sb = sa + MMA_A_FLOATS;
            let a_at = base + sa as u32 * 4 + a_row;
            let a = core::array::from_fn(|mi| {
                mma::ldmatrix_x4(a_at + ((mi * 16 * MMA_A_STRIDE + kk * 8) * 4) as u32).map(f32::from_bits)
            });
            let p = kk * 8 + t;
            let b = core::array::from_fn(|ni| {
                let j = wn + ni * 8 + g;
                [smem.read(sb + p * MMA_B_STRIDE + j), smem.read(sb + (p + 4) * MMA_B_STRIDE + j)]
            });
            (a, b)
        };
        // The pipeline, with three stages: while the warps compute on tile kt, each thread
        // prepares its part of tile kt + 1 (landed) and tile kt + 2 is in flight. One barrier per
        // tile: it publishes the prepared tile kt + 1 to every warp and tells that the stage of
        // tile kt, refilled with tile kt + 3 next, is no longer read.
        const _: () = assert!(MMA_STAGES == 3);
        load_tile(0, 0);
        mma::cp_async_commit_group();
        if ktiles > 1 {
            load_tile(1, 1);
        }
        mma::cp_async_commit_group();
        mma::cp_async_wait_group::<1>();
        prepare_tile(0, scales(0));
        let mut sc = scales(1);
        thread::sync_threads();
        let mut stage = 0usize;
        for kt in 0..ktiles {
            let (next, after) = ((stage + 1) % 3, (stage + 2) % 3);
            if kt + 2 < ktiles {
                load_tile(kt + 2, after as u32);
            }
            mma::cp_async_commit_group();
            // Tile kt + 1 has landed (only tile kt + 2's group may still be in flight).
            mma::cp_async_wait_group::<1>();
            if kt + 1 < ktiles {
                prepare_tile(next, sc);
                sc = scales(kt + 2);
            }
            // The tile's four steps, each step's fragments loaded while the previous step's MMAs
            // run.
            let step0 = fragments(stage, 0);
            let step1 = fragments(stage, 1);
            multiply::<SPLIT, NI>(&mut acc, step0);
            let step2 = fragments(stage, 2);
            multiply::<SPLIT, NI>(&mut acc, step1);
            let step3 = fragments(stage, 3);
            multiply::<SPLIT, NI>(&mut acc, step2);
            multiply::<SPLIT, NI>(&mut acc, step3);
            thread::sync_threads();
            stage = next;
        }
        // Epilogue: straight from the accumulators, each lane's two adjacent columns of a fragment
        // row as one 8-byte store (a warp instruction fills eight whole 32-byte sectors). Plain stores:
        // with the clipped streaming store here (one A/B on the H100) tf32 did not change and
        // tf32x3 was up to 7% slower.
        let out_vec = n.is_multiple_of(2) && global::is_aligned_8(out.as_ptr());
        unroll!(mi in [0, 1, 2, 3] {
            unroll!(half in [0, 1] {
                let (i, j0) = mma::m16n8_c_coords(lane, 2 * half as u32);
                let i = row0 + (wm + mi * 16) as u32 + i;
                if i < m {
                    let row = (i * n) as usize;
                    for (ni, d) in acc[mi].iter().enumerate() {
                        let j = col0 + (wn + ni * 8) as u32 + j0;
                        let pair = [d[2 * half], d[2 * half + 1]];
                        if out_vec && j + 2 <= n {
                            out.store_f32x2_unchecked(row + j as usize, pair);
                        } else {
                            if j < n {
                                out.set_unchecked(row + j as usize, pair[0]);
                            }
                            if j + 1 < n {
                                out.set_unchecked(row + j as usize + 1, pair[1]);
                            }
                        }
                    }
                }
            });
        });
    }
}

/// Tensor cores, one pass of TF32 (10-bit mantissas, f32 accumulation): relative error about
/// 1e-4 of the largest output. A block of [`MMA_TF32_THREADS`] (256) threads computes a 128 × 128
/// tile of `out`, each of its 8 warps a 64 × 32 part as 4 × 4 m16n8k8 MMAs per step of 8 along `k`.
/// Tiles of `U` (128 × 32) and `Vᵀ` (32 × 128) go to shared memory through a 3-stage `cp.async`
/// pipeline (16-byte copies when rows are 16-byte aligned, else 4-byte; zero-filled past the
/// edges), padded so that fragment reads are free of bank conflicts. While the warps compute on
/// one staged tile, each thread prepares its copied part of the next: `U` scaled by `s` (read a
/// tile ahead) and both operands rounded to tf32 in place, so that the inner loop is fragment loads
/// (`ldmatrix` for `U`) and MMAs only. The epilogue stores the accumulators as they are, 8 bytes per
/// lane.
///
/// Launch: block [`MMA_TF32_THREADS`] × 1, grid `⌈n/128⌉ × ⌈m/128⌉ × images`,
/// [`MMA_SHARED_BYTES`] of dynamic shared memory. Needs sm_80. Launch bounds: 256 threads, 2 blocks
/// per SM (at most 128 registers per thread).
///
/// # Safety
/// Each image of the batch lies inside the slices ([`Batch`]), as for
/// [`svd_reconstruct_naive`]: the accesses are unchecked on the GPU.
#[kernel(launch_bounds(256, 2))]
pub unsafe fn svd_reconstruct_tf32(
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
    reconstruct_mma::<false, TF32_FRAGS_N>(u, s, vt, out, m, n, k, ldu, batch);
}

/// Tensor cores with error compensation ("3xTF32"): each operand is split into two tf32 values,
/// `x = big + small`, and `big·big + big·small + small·big` (three MMAs, f32 accumulation) recovers
/// f32-level accuracy (relative error about 1e-6). Same tiles, pipeline and shared memory as
/// [`svd_reconstruct_tf32`], but 4 warps of 64 × 64 (each loaded `A` fragment serves 24 MMAs).
///
/// Launch: block [`MMA_TF32X3_THREADS`] (128) × 1, grid and shared memory as for
/// [`svd_reconstruct_tf32`]. Launch bounds: 128 threads, 2 blocks per SM (at most 255 registers).
///
/// # Safety
/// Each image of the batch lies inside the slices ([`Batch`]), as for
/// [`svd_reconstruct_naive`]: the accesses are unchecked on the GPU.
#[kernel(launch_bounds(128, 2))]
pub unsafe fn svd_reconstruct_tf32x3(
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
    reconstruct_mma::<true, TF32X3_FRAGS_N>(u, s, vt, out, m, n, k, ldu, batch);
}

/// Threads per block of the `wgmma` kernels ([`svd_reconstruct_tf32_wgmma`],
/// [`svd_reconstruct_tf32x3_wgmma`]): two warpgroups, each computing 64 rows × 128 columns of the
/// block's 128 × 128 tile.
pub const WGMMA_THREADS: u32 = 256;
/// Bytes of a stage's tile of either operand: 128 rows × 32 of `k`, K-major with 128-byte swizzle.
const WGMMA_TILE_BYTES: u32 = MMA_TILE_M * mma::WGMMA_ROW_BYTES;
/// Bytes of a stage: the `a` tile, then the `b` tile.
const WGMMA_STAGE_BYTES: u32 = 2 * WGMMA_TILE_BYTES;
/// Pipeline stages of [`svd_reconstruct_tf32_wgmma`].
const WGMMA_TF32_STAGES: u32 = 3;
/// Pipeline stages of [`svd_reconstruct_tf32x3_wgmma`].
const WGMMA_TF32X3_STAGES: u32 = 2;
/// Dynamic shared memory of a `wgmma` kernel with `stages` stages, bytes, plus for the 3xTF32 split
/// one tile of small parts of `b`, plus one swizzle atom so that the kernel can start its tiles on
/// a 1024-byte boundary.
const fn wgmma_shared_bytes(stages: u32, split: bool) -> u32 {
    stages * WGMMA_STAGE_BYTES + split as u32 * WGMMA_TILE_BYTES + mma::WGMMA_ATOM_BYTES
}
/// Dynamic shared memory of [`svd_reconstruct_tf32_wgmma`], bytes: 3 stages of 32 KiB and an
/// alignment atom (97 KiB: two blocks per SM).
pub const WGMMA_TF32_SHARED_BYTES: u32 = wgmma_shared_bytes(WGMMA_TF32_STAGES, false);
/// Dynamic shared memory of [`svd_reconstruct_tf32x3_wgmma`], bytes: 2 stages, the 16 KiB tile of
/// small parts and an alignment atom (81 KiB: two blocks per SM).
pub const WGMMA_TF32X3_SHARED_BYTES: u32 = wgmma_shared_bytes(WGMMA_TF32X3_STAGES, true);
/// Row length (elements) of the prepared operands of the `wgmma` kernels for rank `k`: `k`
/// rounded up to a multiple of 16, so that every row starts on 16 bytes and holds whole groups of
/// [`panel_position`].
pub const fn prepared_row(k: u32) -> u32 {
    k.div_ceil(16) * 16
}

/// Where element `p` of `k` goes in a row of `b` prepared for
/// [`svd_reconstruct_tf32_wgmma_register_panel`]: within each group of 16, `p = 16q + 4t + 2h + e`
/// goes to `16q + 8h + t + 4e`. That is the column of the `h`-th k8 step's `A` fragment in which thread
/// `t` of a quad holds element `e` of the 4 consecutive values `16q + 4t ..` it loads from `a` in
/// one 16-byte load ([`mma::tf32_a_coords`]: columns `t` and `t + 4`); the product sums over `k`
/// in any order, so `b` only has to follow the same order.
pub const fn panel_position(p: u32) -> u32 {
    let r = p % 16;
    p - r + 8 * (r % 4 / 2) + r / 4 + 4 * (r % 2)
}

/// Threads per block of [`tf32_prepare`].
pub const PREPARE_THREADS: u32 = 256;
/// 16-byte chunks of `a` per thread of [`tf32_prepare`]'s scaling blocks: each thread issues the
/// loads of all of them before its first store, so that one wave of blocks keeps enough reads in
/// flight (one chunk per thread took two waves of short, latency-bound blocks).
pub const SCALE_CHUNKS: u32 = 4;
/// Side of the square tiles in which [`tf32_prepare`] transposes `Vᵀ`.
const TRANSPOSE_TILE: u32 = 64;
/// Elements of a tile per thread of [`tf32_prepare`]: rows `ty, ty + 4, …` of column `tx`.
const TRANSPOSE_ROWS: u32 = TRANSPOSE_TILE * TRANSPOSE_TILE / PREPARE_THREADS;
/// Dynamic shared memory of [`tf32_prepare`], bytes: one 64 × 65 tile.
pub const PREPARE_SHARED_BYTES: u32 = TRANSPOSE_TILE * (TRANSPOSE_TILE + 1) * 4;

/// Blocks of [`tf32_prepare`] per image: first those that scale `U` ([`SCALE_CHUNKS`] × 4
/// elements per thread), then one per 64 × 64 tile of `Vᵀ`. Returns `(scale blocks, total)`.
pub const fn prepare_blocks(m: u32, n: u32, k: u32) -> (u32, u32) {
    let scale = (m * (prepared_row(k) / 4)).div_ceil(PREPARE_THREADS * SCALE_CHUNKS);
    (scale, scale + n.div_ceil(TRANSPOSE_TILE) * prepared_row(k).div_ceil(TRANSPOSE_TILE))
}

/// Prepares the operands of the `wgmma` kernels, which read both K-major:
/// `a[i, p] = U[i, p]·s[p]` (`m × kp`, `kp =` [`prepared_row`]`(k)`) and `b[j, p] = Vᵀ[p, j]`
/// (`n × kp`, `Vᵀ` transposed), columns `k..kp` zero; with `round_to_tf32 ≠ 0` (for
/// [`svd_reconstruct_tf32_wgmma`]) every value rounded with [`mma::round_tf32`], otherwise (for
/// [`svd_reconstruct_tf32x3_wgmma`], which splits them) left in f32; with `register_panel ≠ 0`
/// (for [`svd_reconstruct_tf32_wgmma_register_panel`]) each row of `b` in the order of
/// [`panel_position`] (`b[j, panel_position(p)] = Vᵀ[p, j]`). The first blocks
/// ([`prepare_blocks`]) scale `U`, each thread [`SCALE_CHUNKS`] × 4 elements, written by 16-byte
/// stores; the others move a 64 × 64 tile of `Vᵀ` through shared memory (padded rows: no bank
/// conflicts), reading and writing 256-byte rows. Every thread issues all its loads before its
/// first store. Image `z = blockIdx.z` reads `u + z·batch.u`,
/// `s + z·batch.s`, `vt + z·batch.vt` and writes `a + z·m·kp`, `b + z·n·kp`.
///
/// Launch: block [`PREPARE_THREADS`] × 1, grid `prepare_blocks(m, n, k).1 × 1 × images`,
/// [`PREPARE_SHARED_BYTES`] of dynamic shared memory; `a` and `b` 16-byte aligned.
///
/// # Safety
/// Image `z`'s `u`, `s` and `vt` lie inside the slices ([`Batch`]), `a` holds `images·m·kp` and
/// `b` `images·n·kp` elements: the accesses are unchecked on the GPU.
#[kernel]
#[allow(clippy::too_many_arguments)]
pub unsafe fn tf32_prepare(
    u: &[f32],
    s: &[f32],
    vt: &[f32],
    a: &mut [f32],
    b: &mut [f32],
    m: u32,
    n: u32,
    k: u32,
    ldu: u32,
    batch: Batch,
    round_to_tf32: u32,
    register_panel: u32,
) {
    // The product launched after this kernel may start its blocks as SMs free up; it waits for
    // this kernel's writes itself.
    thread::trigger_programmatic_launch_completion();
    const T: u32 = TRANSPOSE_TILE;
    let kp = prepared_row(k);
    let z = thread::block_idx_z() as usize;
    let tid = thread::thread_idx_x();
    let (scale_blocks, _) = prepare_blocks(m, n, k);
    let block = thread::block_idx_x();
    let round = |x: f32| if round_to_tf32 != 0 { mma::round_tf32(x) } else { x };
    // SAFETY: the kernel's contract: image z's `u` (m × ldu), `s` (k), `vt` (k × n), `a` (m × kp)
    // and `b` (n × kp); shared indices stay in the 32 × 33 tile.
    unsafe {
        if block < scale_blocks {
            let u_len = if m == 0 { 0 } else { ((m - 1) * ldu + k) as usize };
            let (u, s, mut a) = (
                u.sub_unchecked(z * batch.u as usize, u_len),
                s.sub_unchecked(z * batch.s as usize, k as usize),
                a.sub_unchecked(z * (m * kp) as usize, (m * kp) as usize),
            );
            let chunks = kp / 4;
            // Chunk `q` of this thread: consecutive threads take consecutive chunks of a row.
            let chunk = |q: u32| (block * SCALE_CHUNKS + q) * PREPARE_THREADS + tid;
            let mut values = [[0.0f32; 4]; SCALE_CHUNKS as usize];
            for (q, chunk_values) in values.iter_mut().enumerate() {
                let e = chunk(q as u32);
                let (i, p) = (e / chunks, 4 * (e % chunks));
                for (r, value) in chunk_values.iter_mut().enumerate() {
                    let p = p + r as u32;
                    if i < m && p < k {
                        *value = u.get_unchecked((i * ldu + p) as usize) * s.get_unchecked(p as usize);
                    }
                }
            }
            for (q, chunk_values) in values.iter().enumerate() {
                let e = chunk(q as u32);
                if e < m * chunks {
                    a.store_f32x4_unchecked((4 * e) as usize, chunk_values.map(round));
                }
            }
        } else {
            let (vt, mut b) = (
                vt.sub_unchecked(z * batch.vt as usize, (k * n) as usize),
                b.sub_unchecked(z * (n * kp) as usize, (n * kp) as usize),
            );
            let t = block - scale_blocks;
            let tiles_n = n.div_ceil(T);
            let (j0, p0) = (t % tiles_n * T, t / tiles_n * T);
            let (tx, ty) = (tid % T, tid / T);
            const STEP: u32 = PREPARE_THREADS / TRANSPOSE_TILE;
            let tile = shared::region::<f32>(0, (T * (T + 1)) as usize);
            // All loads first, then the shared-memory writes.
            let mut values = [0.0f32; TRANSPOSE_ROWS as usize];
            for (q, value) in values.iter_mut().enumerate() {
                let (p, j) = (p0 + ty + STEP * q as u32, j0 + tx);
                if p < k && j < n {
                    *value = vt.get_unchecked((p * n + j) as usize);
                }
            }
            for (q, value) in values.iter().enumerate() {
                tile.write(((ty + STEP * q as u32) * (T + 1) + tx) as usize, *value);
            }
            thread::sync_threads();
            for q in 0..TRANSPOSE_ROWS {
                let r = ty + STEP * q;
                let (j, p) = (j0 + r, p0 + tx);
                if j < n && p < kp {
                    let at = if register_panel != 0 { panel_position(p) } else { p };
                    b.set_unchecked((j * kp + at) as usize, round(tile.read((tx * (T + 1) + r) as usize)));
                }
            }
        }
    }
}

/// Image `z = blockIdx.z` of a `wgmma` kernel's batch: `a + z·m·kp`, `b + z·n·kp`,
/// `out + z·out_stride`.
///
/// # Safety
/// The batch holds image `z`.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn wgmma_image(
    a: Slice<f32>,
    b: Slice<f32>,
    out: SliceMut<f32>,
    m: u32,
    n: u32,
    kp: u32,
    out_stride: u32,
) -> (Slice<f32>, Slice<f32>, SliceMut<f32>) {
    let z = thread::block_idx_z() as usize;
    let (a_len, b_len, out_len) = ((m * kp) as usize, (n * kp) as usize, (m * n) as usize);
    // SAFETY: guaranteed by the caller.
    unsafe {
        (
            a.sub_unchecked(z * a_len, a_len),
            b.sub_unchecked(z * b_len, b_len),
            out.sub_unchecked(z * out_stride as usize, out_len),
        )
    }
}

/// The dynamic shared memory of a `wgmma` kernel (`bytes`, the launch's): its shared-window
/// address, and the first swizzle-atom boundary in it, where the kernel's tiles start.
#[inline(always)]
fn wgmma_shared_base(bytes: u32) -> (u32, u32) {
    let raw = mma::shared_address(shared::region::<u8>(0, bytes as usize).as_ptr());
    (raw, raw + raw.wrapping_neg() % mma::WGMMA_ATOM_BYTES)
}

/// One thread's share of copying k-tile `p / 32` of 128 rows of `src` (`rows × kp`, row-major,
/// rows `first..first + 128`) into the K-major, 128-byte-swizzled tile at shared-window address
/// `tile`: the 16-byte chunk of elements `p..p + 4` of tile rows `row + 32·q`, q = 0..4, as
/// `cp.async`, zero-filled past `rows` and past `kp` (a multiple of 4: a chunk is wholly inside or
/// outside). Threads take `row = tid / 8` and `p = 32·kt + 4·(tid % 8)`: each 8 threads fill a
/// 128-byte row.
///
/// # Safety
/// `src` holds `rows × kp` elements, 16-byte aligned; `tile` is a tile of the block's shared memory.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn copy_tile_rows(tile: u32, src: Slice<f32>, first: u32, rows: u32, kp: u32, row: u32, p: u32) {
    for q in 0..4 {
        let i = first + row + 32 * q;
        let (from, bytes) = if i < rows && p < kp {
            // SAFETY: inside `src` (guarded above).
            (unsafe { src.as_ptr().add((i * kp + p) as usize) }, 16)
        } else {
            (src.as_ptr(), 0)
        };
        // SAFETY: guaranteed by the caller; 16 bytes read only inside `src`.
        unsafe { mma::cp_async_16(tile + mma::sw128_offset(row + 32 * q, p % MMA_TILE_K), from, bytes) };
    }
}

/// The body of the `wgmma` kernels: `out = a·bᵀ` on operands prepared by [`tf32_prepare`]
/// (`a`, `m × kp`; `b`, `n × kp`), through a `STAGES`-stage pipeline, one tf32 pass or, for
/// `SPLIT`, the 3xTF32 split of both operands.
///
/// A block computes a 128 × 128 tile of `out`; its two warpgroups each issue asynchronous
/// `m64n128k8` MMAs per step of 8 along `k`, reading both operands straight from shared memory.
/// The main loop is 16-byte `cp.async` copies into the 128-byte-swizzled layout
/// ([`mma::sw128_offset`]) and the MMAs. For `SPLIT` (`x = big + small`, [`split_tf32`]) the
/// tensor cores take `a` from registers ([`mma::wgmma_tf32_m64n128k8_rs`]): each thread loads its
/// fragments of the landed stage and splits them there; `b` is split by one pass over the landed
/// tile that replaces each value by `big` in place and writes `small` at the same offset of the
/// small parts' tile (the swizzle moves 16-byte chunks only, so the pass is element-wise and needs
/// no layout). Then three MMAs per step, as in [`svd_reconstruct_tf32x3`]. Only `b`'s split goes
/// through shared memory, which is what bounds this kernel.
/// Image `z = blockIdx.z` reads `a + z·m·kp`, `b + z·n·kp` and writes `out + z·out_stride`.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn reconstruct_wgmma<const SPLIT: bool, const STAGES: u32>(
    a: Slice<f32>,
    b: Slice<f32>,
    out: SliceMut<f32>,
    m: u32,
    n: u32,
    kp: u32,
    out_stride: u32,
) {
    const BK: u32 = MMA_TILE_K;
    // SAFETY (whole body): the kernel's contract — `a`, `b` and `out` hold the batch's images;
    // every global access below is guarded by `m`, `n` and `kp`, every shared one stays in the
    // launch's `wgmma_shared_bytes(STAGES, SPLIT)`.
    unsafe {
        let (a, b, out) = wgmma_image(a, b, out, m, n, kp, out_stride);
        let (raw, base) = wgmma_shared_base(wgmma_shared_bytes(STAGES, SPLIT));
        // The small parts of `b` (`SPLIT`) follow the stages.
        let small = base + STAGES * WGMMA_STAGE_BYTES;
        let tid = thread::thread_idx_x();
        let row0 = thread::block_idx_y() * MMA_TILE_M;
        let col0 = thread::block_idx_x() * MMA_TILE_N;
        let ktiles = kp.div_ceil(BK);
        let (row, chunk) = (tid / 8, tid % 8);

        // Starts the copies of k-tile `kt` of both operands into `stage` ([`copy_tile_rows`]).
        let load_tile = #[inline(always)]
        |kt: u32, stage: u32| {
            let p = kt * BK + 4 * chunk;
            let st = base + stage * WGMMA_STAGE_BYTES;
            copy_tile_rows(st, a, row0, m, kp, row, p);
            copy_tile_rows(st + WGMMA_TILE_BYTES, b, col0, n, kp, row, p);
        };

        // The 3xTF32 split of `stage`'s `b` tile (see above): thread `tid` takes 16-byte chunks
        // tid + 256·c, consecutive threads consecutive chunks (no bank conflicts).
        let split_b = #[inline(always)]
        |stage: u32| {
            const CHUNKS: u32 = WGMMA_TILE_BYTES / 16;
            let tile = base - raw + stage * WGMMA_STAGE_BYTES + WGMMA_TILE_BYTES;
            let values = shared::region::<f32>(tile as usize, 4 * CHUNKS as usize);
            let smalls = shared::region::<f32>((small - raw) as usize, 4 * CHUNKS as usize);
            for c in 0..CHUNKS / WGMMA_THREADS {
                let i = 4 * (tid + WGMMA_THREADS * c) as usize;
                let parts = values.read_f32x4(i).map(split_tf32);
                values.write_f32x4(i, parts.map(|p| p.0));
                smalls.write_f32x4(i, parts.map(|p| p.1));
            }
        };

        // Warpgroup tid / 128 computes rows 64·(tid / 128) .. +64 of the tile, all 128 columns.
        let warpgroup = tid / 128;
        let mut acc = [0.0f32; 64];
        let multiply_tile = #[inline(always)]
        |acc: &mut [f32; 64], stage: u32| {
            let st = base + stage * WGMMA_STAGE_BYTES;
            if SPLIT {
                // This thread's `a` fragments of the 4 steps, split, before the fence that orders
                // their registers before the MMAs.
                let tile = shared::region::<f32>((st - raw) as usize, (WGMMA_TILE_BYTES / 4) as usize);
                let a: [[(f32, f32); 4]; 4] = core::array::from_fn(|step| {
                    core::array::from_fn(|r| {
                        let (i, kk) = mma::wgmma_m64_a_coords(tid % 128, r as u32);
                        let at = mma::sw128_offset(64 * warpgroup + i, 8 * step as u32 + kk);
                        split_tf32(tile.read(at as usize / 4))
                    })
                });
                mma::wgmma_fence();
                unroll!(step in [0, 1, 2, 3] {
                    let b = mma::wgmma_descriptor_sw128(st + WGMMA_TILE_BYTES + 32 * step as u32);
                    let b_small = mma::wgmma_descriptor_sw128(small + 32 * step as u32);
                    let (a_big, a_small) = (a[step].map(|x| x.0), a[step].map(|x| x.1));
                    // The small cross terms first, the big product last.
                    mma::wgmma_tf32_m64n128k8_rs(acc, a_small, b);
                    mma::wgmma_tf32_m64n128k8_rs(acc, a_big, b_small);
                    mma::wgmma_tf32_m64n128k8_rs(acc, a_big, b);
                });
            } else {
                let a_row = warpgroup * 64 * mma::WGMMA_ROW_BYTES;
                mma::wgmma_fence();
                for step in 0..BK / 8 {
                    let a = mma::wgmma_descriptor_sw128(st + a_row + 32 * step);
                    let b = mma::wgmma_descriptor_sw128(st + WGMMA_TILE_BYTES + 32 * step);
                    mma::wgmma_tf32_m64n128k8(acc, a, b);
                }
            }
            mma::wgmma_commit_group();
        };

        // The pipeline: tiles kt + 1 .. kt + STAGES − 1 are in flight while the tensor cores work
        // on tile kt. The barrier of iteration kt publishes tile kt (each thread's copies waited
        // for and fenced for the async proxy) and tells that every warpgroup has finished with
        // tile kt − 1 (and its small parts), whose stage tile kt + STAGES − 1 then refills. The
        // split's writes are fenced and published by a second barrier.
        const { assert!(STAGES == 2 || STAGES == 3) };
        load_tile(0, 0);
        mma::cp_async_commit_group();
        if STAGES == 3 {
            if ktiles > 1 {
                load_tile(1, 1);
            }
            mma::cp_async_commit_group();
        }
        let mut stage = 0u32;
        for kt in 0..ktiles {
            if STAGES == 3 {
                mma::cp_async_wait_group::<1>();
            } else {
                mma::cp_async_wait_group::<0>();
            }
            if !SPLIT {
                mma::fence_proxy_async_shared();
            }
            thread::sync_threads();
            if kt + STAGES - 1 < ktiles {
                load_tile(kt + STAGES - 1, (stage + STAGES - 1) % STAGES);
            }
            mma::cp_async_commit_group();
            if SPLIT {
                split_b(stage);
                mma::fence_proxy_async_shared();
                thread::sync_threads();
            }
            multiply_tile(&mut acc, stage);
            mma::wgmma_wait_group::<0>();
            stage = (stage + 1) % STAGES;
        }

        store_wgmma_tile(&acc, out, m, n, row0 + 64 * warpgroup, col0, tid % 128);
    }
}

/// The epilogue of the `wgmma` kernels: a warpgroup's 64 × 128 accumulators (thread `thread` of
/// it holds `acc`, [`mma::wgmma_m64_c_coords`]) into `out` (`m × n`, row-major) at rows
/// `row0..`, columns `col0..`, clipped to the matrix. Each thread's two adjacent columns of a row
/// go as one 8-byte store where `n` is even and `out` 8-byte aligned (unrolled, so that the
/// accumulators stay in registers), marked streaming ([`global::store_f32x2_streaming`]): the
/// output is written once, the operands are read by many blocks and should stay in L2.
///
/// # Safety
/// `out` holds `m × n` elements.
#[inline(always)]
unsafe fn store_wgmma_tile(
    acc: &[f32; 64],
    out: SliceMut<f32>,
    m: u32,
    n: u32,
    row0: u32,
    col0: u32,
    thread: u32,
) {
    let out_vec = n.is_multiple_of(2) && global::is_aligned_8(out.as_ptr());
    unroll!(block in [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15] {
        unroll!(half in [0, 1] {
            let r = 4 * block + 2 * half;
            let (i, j) = mma::wgmma_m64_c_coords(thread, r as u32);
            let (i, j) = (row0 + i, col0 + j);
            if i < m {
                // SAFETY: (i, j) clipped to the matrix, as the caller's contract needs.
                unsafe {
                    let mut row = out.sub_unchecked((i * n) as usize, n as usize);
                    row.store_f32x2_clipped_streaming(j as usize, j, n, [acc[r], acc[r + 1]], out_vec);
                }
            }
        });
    });
}

/// Largest prepared rank `kp` that [`svd_reconstruct_tf32_wgmma_panel`] keeps whole in shared
/// memory (its `a` panel: 128 rows × 256 × 4 bytes = 128 KiB).
pub const PANEL_MAX_K: u32 = 256;
/// SM cycles (about 2 µs on an H100) by which half the blocks of
/// [`svd_reconstruct_tf32_wgmma_panel`] start late when the panel is full (`kp > 224`: 8 k-tiles
/// per tile) and a block walks at least [`PANEL_STAGGER_MIN_TILES`] tiles. Every block otherwise
/// runs in step, and all of them write their 64 KiB tiles at the same moments, which the memory
/// system takes more slowly than two half-size bursts while the other half computes. On the H100
/// at 4096², k = 256, this took the call from 0.0495 to 0.0473 ms (8192²: −1.3%); at k = 128 (a
/// tile half as long) every delay from 3000 to 5000 cycles lost 1.5–5.4%, hence the condition.
pub const PANEL_STAGGER_CYCLES: u64 = 4000;
/// Tiles per block from which [`svd_reconstruct_tf32_wgmma_panel`] staggers its blocks' starts:
/// with fewer, the delay is a larger share of the call.
pub const PANEL_STAGGER_MIN_TILES: u32 = 4;
/// Largest prepared rank `kp` that [`svd_reconstruct_tf32_wgmma_register_panel`] takes: its `a`
/// panel in registers costs `kp / 2` registers per thread (186 in all at 128, no spills), and at
/// small ranks a tile's MMAs are short enough for the epilogue to dominate, which its bulk copies
/// overlap (on the H100 against the shared-memory panel, k = 64: 10–20% less time; k = 128:
/// 11% less at 4096², 20% at 8192², but 22% more at 1024², where each block has one tile; k = 256:
/// 3% more, 21% more at 2048²). The host picks it by rank and size.
pub const REGISTER_PANEL_MAX_K: u32 = 128;
/// Steps (k-tiles of `b`) that the copies of the panel kernels run ahead of the MMAs: with one
/// block per SM, 64 KiB in flight per SM to cover the latency of L2.
const PANEL_AHEAD: u32 = 4;
/// Stages of `b` tiles in the panel kernels: [`PANEL_AHEAD`] in flight, the one being multiplied,
/// and the one whose MMAs may still be reading while the next are issued.
const PANEL_STAGES: u32 = PANEL_AHEAD + 2;
/// Dynamic shared memory of [`svd_reconstruct_tf32_wgmma_panel`] for prepared rank `kp`, bytes:
/// the `a` panel (one 16 KiB swizzled tile per 32 of `kp`), 6 stages of `b` tiles, an alignment
/// atom (225 KiB at `kp = 256`).
pub const fn panel_shared_bytes(kp: u32) -> u32 {
    (kp.div_ceil(MMA_TILE_K) + PANEL_STAGES) * WGMMA_TILE_BYTES + mma::WGMMA_ATOM_BYTES
}
/// Bytes between two rows of the output tile that [`svd_reconstruct_tf32_wgmma_register_panel`]
/// stages in shared memory: 128 f32 and 32 bytes of padding, so that rows start 8 banks apart and
/// a warp's 8-byte stores of its accumulators (8 rows × 4 threads) hit every bank once per
/// half-warp.
const STAGING_ROW_BYTES: u32 = 4 * MMA_TILE_N + 32;
/// Dynamic shared memory of [`svd_reconstruct_tf32_wgmma_register_panel`], bytes: 6 stages of `b`
/// tiles, the staged 128 × 128 output tile and an alignment atom (165 KiB).
pub const REGISTER_PANEL_SHARED_BYTES: u32 =
    PANEL_STAGES * WGMMA_TILE_BYTES + MMA_TILE_M * STAGING_ROW_BYTES + mma::WGMMA_ATOM_BYTES;

/// The body of the panel kernels: `out = a·bᵀ` on operands prepared by [`tf32_prepare`], a block
/// keeping its 128-row panel of `a` while it walks `tiles_per_block` consecutive 128-column tiles
/// of it (grid `x`): only `b` streams, through a 6-stage `cp.async` pipeline that runs 4 steps
/// ahead and on across tile boundaries, so that the next tile's first copies are in flight during
/// a tile's epilogue. Each step's MMAs stay in flight while the next step's are issued (waited for
/// one step later, before their stage is refilled, or before the epilogue reads the
/// accumulators), and each tile's first MMA overwrites the accumulators.
///
/// With `REGISTERS` each warpgroup holds its 64 rows of the panel as `A` fragments
/// ([`mma::wgmma_tf32_m64n128k8_rs_into`]), loaded once (`b` in the order of [`panel_position`],
/// so that a thread's fragments of two k8 steps in a row are 4 consecutive elements of `a`: one
/// 16-byte load), and a finished tile goes to shared memory and from there to global memory by
/// bulk copies (one 512-byte row per thread of the first half of each warpgroup,
/// [`mma::cp_async_bulk_store_streaming`]) that run while the warpgroup computes its next tile;
/// where `n` is not a multiple of 4 or `out` not 16-byte aligned (bulk copies move 16-byte units)
/// the accumulators are stored directly ([`store_wgmma_tile`]). Without, the panel is a swizzled
/// tile of shared memory per k-tile, brought in by the first tile's steps, and the epilogue stores
/// directly.
///
/// # Safety
/// As for the kernels.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn reconstruct_panel<const REGISTERS: bool>(
    a: Slice<f32>,
    b: Slice<f32>,
    out: SliceMut<f32>,
    m: u32,
    n: u32,
    kp: u32,
    out_stride: u32,
    tiles_per_block: u32,
) {
    const BK: u32 = MMA_TILE_K;
    // SAFETY (whole body): the kernel's contract — `a`, `b` and `out` hold the batch's images;
    // every global access below is guarded by `m`, `n` and `kp`, every shared one stays in the
    // launch's dynamic shared memory.
    unsafe {
        // `a` and `b` come from `tf32_prepare`, which this kernel may overlap (a programmatic
        // dependent launch): everything below reads them.
        thread::grid_dependency_synchronize();
        let (a, b, mut out) = wgmma_image(a, b, out, m, n, kp, out_stride);
        let ktiles = kp.div_ceil(BK);
        let shared_bytes = if REGISTERS { REGISTER_PANEL_SHARED_BYTES } else { panel_shared_bytes(kp) };
        let (raw, base) = wgmma_shared_base(shared_bytes);
        // Shared memory: the stages, then the staged output tile (REGISTERS); or the `a` panel,
        // then the stages.
        let panel = base;
        let stages = if REGISTERS { base } else { base + ktiles * WGMMA_TILE_BYTES };
        let tid = thread::thread_idx_x();
        let (warpgroup, thread) = (tid / 128, tid % 128);
        let row0 = thread::block_idx_y() * MMA_TILE_M;
        let first = thread::block_idx_x() * tiles_per_block;
        let tiles = tiles_per_block.min(n.div_ceil(MMA_TILE_N) - first);
        let (row, chunk) = (tid / 8, tid % 8);

        // A step of the walk: k-tile `kt` of tile `t`. Without REGISTERS the first tile's steps
        // also bring the panel's k-tile kt, so that the first MMAs wait for their own part of the
        // panel only.
        let load_step = #[inline(always)]
        |(t, kt): (u32, u32), stage: u32| {
            let p = kt * BK + 4 * chunk;
            copy_tile_rows(stages + stage * WGMMA_TILE_BYTES, b, (first + t) * MMA_TILE_N, n, kp, row, p);
            if !REGISTERS && t == 0 {
                copy_tile_rows(panel + kt * WGMMA_TILE_BYTES, a, row0, m, kp, row, p);
            }
        };
        let next = |(t, kt): (u32, u32)| if kt + 1 < ktiles { (t, kt + 1) } else { (t + 1, 0) };
        let steps = tiles * ktiles;
        // Half the blocks (a checkerboard of the grid) start late, so that the two halves' epilogues
        // — each block writes 64 KiB at once — do not coincide (see PANEL_STAGGER_CYCLES).
        let odd = (thread::block_idx_x() + thread::block_idx_y()) % 2 == 1;
        if !REGISTERS && ktiles == PANEL_MAX_K / BK && tiles >= PANEL_STAGGER_MIN_TILES && odd {
            thread::spin_cycles(PANEL_STAGGER_CYCLES);
        }
        // Copies run PANEL_AHEAD steps ahead (one group per step). Step `it` refills the stage of
        // step it − 2, whose MMAs each warpgroup waited for at the end of step it − 1 (before the
        // barrier).
        const { assert!(PANEL_AHEAD == 4 && PANEL_STAGES == PANEL_AHEAD + 2) };
        let mut ahead = (0u32, 0u32);
        for it in 0..PANEL_AHEAD {
            if it < steps {
                load_step(ahead, it);
                ahead = next(ahead);
            }
            mma::cp_async_commit_group();
        }

        // REGISTERS: this warpgroup's 64 rows of the panel as the `A` fragments of every k8 step
        // (k-tile by k-tile), zero past `m` and `kp`. A thread's fragments of steps 2q and 2q + 1
        // in a row are the elements 16q + 4t .. 16q + 4t + 4 of that row of `a`.
        const { assert!(REGISTER_PANEL_MAX_K == 4 * MMA_TILE_K) };
        let mut frags = [[[0.0f32; 4]; 4]; 4];
        if REGISTERS {
            let (i, _) = mma::wgmma_m64_a_coords(thread, 0);
            let (i, t4) = (row0 + 64 * warpgroup + i, 4 * (thread % 4));
            let load = |i: u32, p: u32| {
                if i < m { global::load_f32x4(a.as_ptr().add((i * kp + p) as usize)) } else { [0.0; 4] }
            };
            unroll!(q in [0, 1, 2, 3, 4, 5, 6, 7] {
                let p = 16 * q as u32 + t4;
                if p < kp {
                    let (x, y) = (load(i, p), load(i + 8, p));
                    frags[q / 2][2 * (q % 2)] = [x[0], y[0], x[1], y[1]];
                    frags[q / 2][2 * (q % 2) + 1] = [x[2], y[2], x[3], y[3]];
                }
            });
        }
        // REGISTERS: the staged output tile, this warpgroup's 64 rows.
        let staging = stages + PANEL_STAGES * WGMMA_TILE_BYTES + warpgroup * 64 * STAGING_ROW_BYTES;
        let bulk = REGISTERS && n.is_multiple_of(4) && global::is_aligned_16(out.as_ptr());
        let copier = REGISTERS && thread < 64;

        let mut acc = [0.0f32; 64];
        let (mut stage, mut it) = (0u32, 0u32);
        for t in 0..tiles {
            // Step `kt` of this tile; `a` holds its `A` fragments (REGISTERS).
            let mut step = #[inline(always)]
            |kt: u32, a: &[[f32; 4]; 4]| {
                mma::cp_async_wait_group::<{ PANEL_AHEAD - 1 }>();
                mma::fence_proxy_async_shared();
                thread::sync_threads();
                if it + PANEL_AHEAD < steps {
                    load_step(ahead, (stage + PANEL_AHEAD) % PANEL_STAGES);
                    ahead = next(ahead);
                }
                mma::cp_async_commit_group();
                let a_tile = panel + kt * WGMMA_TILE_BYTES + warpgroup * 64 * mma::WGMMA_ROW_BYTES;
                let b_tile = stages + stage * WGMMA_TILE_BYTES;
                mma::wgmma_fence();
                unroll!(step in [0, 1, 2, 3] {
                    let b = mma::wgmma_descriptor_sw128(b_tile + 32 * step as u32);
                    // A tile's first MMA overwrites the previous tile's accumulators (written by no
                    // other instruction: ptxas would then wait for every MMA).
                    let add = kt > 0 || step > 0;
                    if REGISTERS {
                        mma::wgmma_tf32_m64n128k8_rs_into(&mut acc, a[step], b, add);
                    } else {
                        let a = mma::wgmma_descriptor_sw128(a_tile + 32 * step as u32);
                        mma::wgmma_tf32_m64n128k8_into(&mut acc, a, b, add);
                    }
                });
                mma::wgmma_commit_group();
                mma::wgmma_wait_group::<1>();
                stage = (stage + 1) % PANEL_STAGES;
                it += 1;
            };
            if REGISTERS {
                // Unrolled, so that the fragments stay in registers.
                unroll!(kt in [0, 1, 2, 3] {
                    if (kt as u32) < ktiles {
                        step(kt as u32, &frags[kt]);
                    }
                });
            } else {
                for kt in 0..ktiles {
                    step(kt, &[[0.0; 4]; 4]);
                }
            }
            // The epilogue cannot overlap this warpgroup's next MMAs: ptxas serialises every MMA
            // of a kernel in which other instructions read accumulators of a pending group.
            mma::wgmma_wait_group::<0>();
            let col0 = (first + t) * MMA_TILE_N;
            if !bulk {
                store_wgmma_tile(&acc, out, m, n, row0 + 64 * warpgroup, col0, thread);
                continue;
            }
            // The previous tile's copies must have read the staging rows before they are rewritten.
            if copier {
                mma::cp_async_bulk_wait_group_read::<0>();
            }
            thread::barrier_sync(1 + warpgroup, 128);
            let staged =
                shared::region::<f32>((staging - raw) as usize, (64 * STAGING_ROW_BYTES / 4) as usize);
            unroll!(r in [0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30, 32, 34, 36, 38, 40, 42, 44, 46, 48, 50, 52, 54, 56, 58, 60, 62] {
                let (i, j) = mma::wgmma_m64_c_coords(thread, r as u32);
                staged.write_f32x2((i * STAGING_ROW_BYTES / 4 + j) as usize, [acc[r], acc[r + 1]]);
            });
            mma::fence_proxy_async_shared();
            thread::barrier_sync(1 + warpgroup, 128);
            let i = row0 + 64 * warpgroup + thread;
            if copier && i < m {
                let bytes = 4 * (n - col0).min(MMA_TILE_N);
                let dst = out.as_mut_ptr().add((i * n + col0) as usize);
                mma::cp_async_bulk_store_streaming(dst, staging + thread * STAGING_ROW_BYTES, bytes);
            }
            if copier {
                mma::cp_async_bulk_commit_group();
            }
        }
        // Shared memory must outlive the copies' reads of it.
        if copier {
            mma::cp_async_bulk_wait_group_read::<0>();
        }
    }
}

/// [`svd_reconstruct_tf32_wgmma`] for small ranks (`kp ≤` [`PANEL_MAX_K`]), with the block's
/// 128-row panel of `a` loaded once and kept in shared memory while the block walks
/// `tiles_per_block` consecutive 128-column tiles of its panel (grid `x`): only `b` streams,
/// through a 6-stage pipeline that runs 4 steps ahead and on across tile boundaries; each step's
/// MMAs stay in flight while the next step's are issued, and each tile's first MMA overwrites the
/// accumulators. Per 128 × 128 tile the block reads 128 KiB of `b` from L2 instead of 256 KiB of
/// `a` and `b` — what bounds the streaming kernel.
///
/// Launch: block [`WGMMA_THREADS`] × 1, grid `⌈⌈n/128⌉ / tiles_per_block⌉ × ⌈m/128⌉ × images`,
/// [`panel_shared_bytes`]`(kp)` of dynamic shared memory; `a` and `b` 16-byte aligned. Only in
/// the sm_90a module. Launch bounds: 256 threads, 1 block per SM. It may be launched as a
/// programmatic dependent of the [`tf32_prepare`] that makes `a` and `b`: it waits for them
/// ([`thread::grid_dependency_synchronize`]) before anything else.
///
/// # Safety
/// `a` holds `images·m·kp` and `b` `images·n·kp` elements, `out` image `z`'s `m·n` from
/// `z·out_stride`: the accesses are unchecked on the GPU.
#[cfg(any(not(target_arch = "nvptx64"), target_feature = "sm_90a"))]
#[kernel(launch_bounds(256, 1))]
#[allow(clippy::too_many_arguments)]
pub unsafe fn svd_reconstruct_tf32_wgmma_panel(
    a: &[f32],
    b: &[f32],
    out: &mut [f32],
    m: u32,
    n: u32,
    kp: u32,
    out_stride: u32,
    tiles_per_block: u32,
) {
    // SAFETY: forwarded contract.
    unsafe { reconstruct_panel::<false>(a, b, out, m, n, kp, out_stride, tiles_per_block) }
}

/// [`svd_reconstruct_tf32_wgmma_panel`] for the smallest ranks (`kp ≤` [`REGISTER_PANEL_MAX_K`]):
/// each warpgroup holds its 64 rows of the panel as `A` fragments
/// ([`mma::wgmma_tf32_m64n128k8_rs_into`]), loaded once with 16-byte loads (`b` prepared by
/// [`tf32_prepare`] in the order of [`panel_position`]), and a finished tile goes to shared memory
/// and from there to global memory by bulk copies (one 512-byte row per thread of the first half
/// of each warpgroup, [`mma::cp_async_bulk_store_streaming`]) that run while the warpgroup
/// computes its next tile. Where `n` is not a multiple of 4 or `out` not 16-byte aligned, the
/// accumulators are stored directly.
///
/// Launch: as [`svd_reconstruct_tf32_wgmma_panel`], with [`REGISTER_PANEL_SHARED_BYTES`] of
/// dynamic shared memory and `kp` a multiple of 16 ([`prepared_row`]).
///
/// # Safety
/// As for [`svd_reconstruct_tf32_wgmma_panel`].
#[cfg(any(not(target_arch = "nvptx64"), target_feature = "sm_90a"))]
#[kernel(launch_bounds(256, 1))]
#[allow(clippy::too_many_arguments)]
pub unsafe fn svd_reconstruct_tf32_wgmma_register_panel(
    a: &[f32],
    b: &[f32],
    out: &mut [f32],
    m: u32,
    n: u32,
    kp: u32,
    out_stride: u32,
    tiles_per_block: u32,
) {
    // SAFETY: forwarded contract.
    unsafe { reconstruct_panel::<true>(a, b, out, m, n, kp, out_stride, tiles_per_block) }
}

/// Tensor cores through Hopper's warpgroup MMA (`wgmma`, sm_90a), one pass of TF32, on operands
/// prepared (rounded) by [`tf32_prepare`]: `out = a·bᵀ`. A block computes a 128 × 128 tile; its two
/// warpgroups each issue one asynchronous `m64n128k8` MMA per step of 8 along `k`, reading both
/// operands straight from shared memory, filled by 16-byte `cp.async` copies into the
/// 128-byte-swizzled layout ([`mma::sw128_offset`]) through a 3-stage pipeline. No fragment loads
/// and no per-element work in the main loop. (Preparing the
/// operands in the kernel instead, as [`svd_reconstruct_tf32`] does, kept the shared-memory pipe
/// the bottleneck: 75% busy with the tensor cores mostly idle.)
///
/// Launch: block [`WGMMA_THREADS`] × 1, grid `⌈n/128⌉ × ⌈m/128⌉ × images`,
/// [`WGMMA_TF32_SHARED_BYTES`] of dynamic shared memory; `a` and `b` 16-byte aligned. Only in the
/// sm_90a module (H100, H200). Launch bounds: 256 threads, 2 blocks per SM.
///
/// # Safety
/// `a` holds `images·m·kp` and `b` `images·n·kp` elements, `out` image `z`'s `m·n` from
/// `z·out_stride`: the accesses are unchecked on the GPU.
#[cfg(any(not(target_arch = "nvptx64"), target_feature = "sm_90a"))]
#[kernel(launch_bounds(256, 2))]
pub unsafe fn svd_reconstruct_tf32_wgmma(
    a: &[f32],
    b: &[f32],
    out: &mut [f32],
    m: u32,
    n: u32,
    kp: u32,
    out_stride: u32,
) {
    // SAFETY: forwarded from the caller.
    unsafe { reconstruct_wgmma::<false, WGMMA_TF32_STAGES>(a, b, out, m, n, kp, out_stride) }
}

/// As [`svd_reconstruct_tf32_wgmma`] with 3xTF32 error compensation (f32-level accuracy), on
/// operands prepared unrounded by [`tf32_prepare`]: each thread splits its `a` fragments of a
/// landed stage into big + small in registers (the MMAs take `a` from registers,
/// [`mma::wgmma_tf32_m64n128k8_rs`]), one pass splits the stage's `b` tile in shared memory, and
/// every step issues three MMAs. 2-stage pipeline.
///
/// Launch: as [`svd_reconstruct_tf32_wgmma`] with [`WGMMA_TF32X3_SHARED_BYTES`]. Launch bounds:
/// 256 threads, 2 blocks per SM.
///
/// # Safety
/// `a` holds `images·m·kp` and `b` `images·n·kp` elements, `out` image `z`'s `m·n` from
/// `z·out_stride`: the accesses are unchecked on the GPU.
#[cfg(any(not(target_arch = "nvptx64"), target_feature = "sm_90a"))]
#[kernel(launch_bounds(256, 2))]
pub unsafe fn svd_reconstruct_tf32x3_wgmma(
    a: &[f32],
    b: &[f32],
    out: &mut [f32],
    m: u32,
    n: u32,
    kp: u32,
    out_stride: u32,
) {
    // SAFETY: forwarded from the caller.
    unsafe { reconstruct_wgmma::<true, WGMMA_TF32X3_STAGES>(a, b, out, m, n, kp, out_stride) }
}

/// `dst[i] = round(clamp(src[i], 0, 1)·255)` (halves away from zero) for every `i < dst.len()`
/// (`src` at least as long): the bytes a PNG of the reconstruction stores, identical to the host's
/// `image_io::to_gray8(…, Scaling::Clamp)`, so that only a quarter of the bytes cross PCIe when
/// the job writes PNGs. The product is rounded in f32 as on the host; the rounding is done in
/// f64, where `x + 0.5` is exact. Any 1-D launch (grid-stride loop).
#[kernel]
pub fn quantize_gray8(src: &[f32], dst: &mut [u8]) {
    let src = src.sub(0, dst.len());
    let mut i = thread::index_1d() as usize;
    while i < dst.len() {
        let v = src[i].clamp(0.0, 1.0) * 255.0;
        dst[i] = math::floor(v as f64 + 0.5) as u8;
        i += thread::grid_stride_1d() as usize;
    }
}
