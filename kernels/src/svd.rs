//! Rank-k reconstruction from a thin SVD: `out = (U[:, :k] · diag(s[:k])) · Vᵀ[:k, :]`.
//!
//! All matrices are f32, row-major. `u` is `m × k` with leading dimension `ldu ≥ k` (element
//! `U[i, p]` at `u[i·ldu + p]`), `s` holds `k` singular values, `vt` is `k × n` (element `Vᵀ[p, j]`
//! at `vt[p·n + j]`), and `out` is `m × n`. The scaling by `s` is fused into the loads of `U`.
//! Any `m`, `n`, `k` work, multiples of the tile or not. On the 2-D grid, x is the column `j` and
//! y the row `i`; z the image of a batch ([`Batch`]).
//!
//! Host side: `host/src/svd.rs`; tests: `tests/svd.rs`; benchmark: `benches/svd.rs`.

use crate::{kernel, math, mma, shared, thread};

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

/// Rows (of `out`) per block of the tensor-core kernels.
pub const MMA_TILE_M: u32 = 128;
/// Columns per block of the tensor-core kernels.
pub const MMA_TILE_N: u32 = 128;
/// Step along `k` per shared-memory stage of the tensor-core kernels (four m16n8k8 steps).
pub const MMA_TILE_K: u32 = 32;
/// Shared-memory stages of the tensor-core kernels' `cp.async` pipeline.
pub const MMA_STAGES: u32 = 3;
/// Threads per block of the tensor-core kernels: 8 warps, 2 × 4 over the tile, 64 × 32 each.
pub const MMA_THREADS: u32 = 256;
/// Floats per row of a stage's `U` tile: 32 of `k` plus 4 of padding, so that the 8 rows of 16
/// bytes of an `ldmatrix` matrix hit 32 different banks.
const MMA_A_STRIDE: usize = 36;
/// Floats per row (one `p`) of a stage's `Vᵀ` tile, 128 columns plus 8 of padding (conflict-free
/// `B` fragments); also the row stride of the output tile in the epilogue.
const MMA_B_STRIDE: usize = 136;
const MMA_A_FLOATS: usize = MMA_TILE_M as usize * MMA_A_STRIDE;
const MMA_B_FLOATS: usize = MMA_TILE_K as usize * MMA_B_STRIDE;
/// Floats of one stage: the `U` tile (`MMA_TILE_M × MMA_A_STRIDE`), then the `Vᵀ` tile
/// (`MMA_TILE_K × MMA_B_STRIDE`).
const MMA_STAGE_FLOATS: usize = MMA_A_FLOATS + MMA_B_FLOATS;
/// Dynamic shared memory of the tensor-core kernels, bytes: [`MMA_STAGES`] stages (105 KiB; the
/// epilogue reuses it for the 128 × 128 output tile).
pub const MMA_SHARED_BYTES: u32 = MMA_STAGES * (MMA_STAGE_FLOATS * 4) as u32;

/// Repeats `$body` with `$i` bound to each listed `usize` constant: loop unrolling by hand, so that
/// every index into the register arrays (accumulators, fragments) is a constant.
macro_rules! unroll {
    ($i:ident in [$($v:literal),*] $body:block) => {$({
        let $i: usize = $v;
        $body
    })*};
}

/// Two floats stored to shared memory as one 8-byte access.
#[derive(Clone, Copy)]
#[repr(C, align(8))]
struct Float2([f32; 2]);

/// An f32 as the sum of two tf32 operands, `big = tf32(x)` (rounded to nearest, ties away, by
/// integer arithmetic on the bits: `x` finite or infinite) and `small = x − big` (exact). `small`
/// is passed to the tensor cores as it is: they read its tf32 bits, i.e. truncate it, an error below
/// 2⁻¹⁰·|small| ≤ 2⁻²¹·|x|. Three integer/f32 instructions, no conversion.
#[inline(always)]
fn split_tf32(x: f32) -> (f32, f32) {
    let big = f32::from_bits(x.to_bits().wrapping_add(0x1000) & !0x1fff);
    (big, x - big)
}

/// The body of [`svd_reconstruct_tf32`] (`SPLIT = false`) and [`svd_reconstruct_tf32x3`]
/// (`SPLIT = true`).
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
/// one [`mma::ldmatrix_x4`] and each of its four `B` fragments (8 × 8 of `Vᵀ`) with two 4-byte
/// loads: 12 shared loads for 16 MMAs (48 for 3xTF32).
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn reconstruct_mma<const SPLIT: bool>(
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
    const BK: u32 = MMA_TILE_K;
    const STAGE_BYTES: u32 = (MMA_STAGE_FLOATS * 4) as u32;
    // SAFETY (whole body): the kernel's contract — `u`, `s`, `vt` and `out` hold the batch's
    // images; every global access below is guarded by `m`, `n` and `k`, every shared one stays in
    // the launch's `MMA_SHARED_BYTES`.
    unsafe {
        let (u, s, vt, out) = batch.offset(u, s, vt, out);
        let smem = shared::region::<f32>(0, MMA_STAGES as usize * MMA_STAGE_FLOATS);
        let sp = smem.as_ptr();
        let base = mma::shared_address(sp);
        let tid = thread::thread_idx_x();
        let (warp, lane) = (tid / 32, tid % 32);
        let (g, t) = ((lane / 4) as usize, (lane % 4) as usize);
        let row0 = thread::block_idx_y() * MMA_TILE_M;
        let col0 = thread::block_idx_x() * MMA_TILE_N;
        // This warp's 64 × 32 part of the tile.
        let (wm, wn) = ((warp / 4) as usize * 64, (warp % 4) as usize * 32);
        // 16-byte copies where rows start on 16-byte boundaries, else 4-byte ones.
        let u_vec = ldu.is_multiple_of(4) && (u as usize).is_multiple_of(16);
        let vt_vec = n.is_multiple_of(4) && (vt as usize).is_multiple_of(16);
        let ktiles = k.div_ceil(BK);
        // The elements a thread copies (and later rewrites): with 16-byte copies, the groups of 4
        // at (row (tid + 256·q) / 8, column tid % 8 · 4) of U and (row (tid + 256·q) / 32, column
        // tid % 32 · 4) of Vᵀ, q = 0..4; with 4-byte copies, (row tid / 32 + 8·q, column tid % 32)
        // of U and (row tid / 128 + 2·q, column tid % 128) of Vᵀ, q = 0..16.
        let u_group = |q: u32| ((tid + 256 * q) / 8, (tid + 256 * q) % 8 * 4);
        let vt_group = |q: u32| ((tid + 256 * q) / 32, (tid + 256 * q) % 32 * 4);

        // Starts the copies of k-tile `kt` into `stage`, zero-filling whatever lies past m, n or k.
        let load_tile = |kt: u32, stage: u32| {
            let p0 = kt * BK;
            let sa = base + stage * STAGE_BYTES;
            let sb = sa + (MMA_A_FLOATS * 4) as u32;
            let u_at = |r: u32, c: u32| -> (*const f32, u32) {
                let (i, p) = (row0 + r, p0 + c);
                if i < m && p < k { (u.add((i * ldu + p) as usize), k - p) } else { (u, 0) }
            };
            let vt_at = |r: u32, c: u32| -> (*const f32, u32) {
                let (p, j) = (p0 + r, col0 + c);
                if p < k && j < n { (vt.add((p * n + j) as usize), n - j) } else { (vt, 0) }
            };
            if u_vec {
                for q in 0..4 {
                    let (r, c) = u_group(q);
                    let (src, left) = u_at(r, c);
                    mma::cp_async_16(sa + (r * MMA_A_STRIDE as u32 + c) * 4, src, left.min(4) * 4);
                }
            } else {
                // A loop whose trip count depends on the thread, so that it is not unrolled: 16
                // copies' addresses at once would not fit in the registers left beside the
                // accumulators.
                let (mut r, c) = (tid / 32, tid % 32);
                while r < MMA_TILE_M {
                    let (src, left) = u_at(r, c);
                    mma::cp_async_4(sa + (r * MMA_A_STRIDE as u32 + c) * 4, src, left.min(1) * 4);
                    r += MMA_THREADS / 32;
                }
            }
            if vt_vec {
                for q in 0..4 {
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
                    r += MMA_THREADS / MMA_TILE_N;
                }
            }
        };

        // Rewrites this thread's copied elements of k-tile `kt` in `stage` (see Layouts): U scaled
        // by s, and rounded to tf32 for one pass. Elements past k are zero and stay zero.
        let prepare_tile = |kt: u32, stage: usize| {
            let p0 = kt * BK;
            let sa = sp.add(stage * MMA_STAGE_FLOATS);
            let sb = sa.add(MMA_A_FLOATS);
            let s_at = |c: u32| if p0 + c < k { *s.add((p0 + c) as usize) } else { 0.0 };
            let round = |x: f32| if SPLIT { x } else { mma::to_tf32(x) };
            if u_vec {
                let c = tid % 8 * 4;
                let sc = [s_at(c), s_at(c + 1), s_at(c + 2), s_at(c + 3)];
                for q in 0..4 {
                    let (r, _) = u_group(q);
                    let at = sa.add(r as usize * MMA_A_STRIDE + c as usize) as *mut Float4;
                    let v = (*at).0;
                    *at = Float4(core::array::from_fn(|e| round(v[e] * sc[e])));
                }
            } else {
                let (mut r, c) = (tid / 32, tid % 32);
                let sc = s_at(c);
                while r < MMA_TILE_M {
                    let at = sa.add(r as usize * MMA_A_STRIDE + c as usize);
                    *at = round(*at * sc);
                    r += MMA_THREADS / 32;
                }
            }
            if !SPLIT {
                if vt_vec {
                    for q in 0..4 {
                        let (r, c) = vt_group(q);
                        let at = sb.add(r as usize * MMA_B_STRIDE + c as usize) as *mut Float4;
                        *at = Float4((*at).0.map(mma::to_tf32));
                    }
                } else {
                    let (mut r, c) = (tid / MMA_TILE_N, tid % MMA_TILE_N);
                    while r < MMA_TILE_K {
                        let at = sb.add(r as usize * MMA_B_STRIDE + c as usize);
                        *at = mma::to_tf32(*at);
                        r += MMA_THREADS / MMA_TILE_N;
                    }
                }
            }
        };

        // acc[mi][ni]: the m16n8 accumulator of rows wm + 16·mi, columns wn + 8·ni.
        let mut acc = [[[0.0f32; 4]; 4]; 4];
        // This lane's ldmatrix row: row lane % 8 (+ 8 for matrices 1 and 3) of the fragment,
        // columns 0..4 (+ 4 for matrices 2 and 3), as a byte offset in the stage.
        let a_row = ((wm as u32 + lane % 8 + 8 * (lane / 8 % 2)) * MMA_A_STRIDE as u32 + 4 * (lane / 16)) * 4;
        let compute = |acc: &mut [[[f32; 4]; 4]; 4], stage: usize| {
            let sa = stage * MMA_STAGE_FLOATS;
            let sb = sp.add(sa + MMA_A_FLOATS);
            let a_at = base + sa as u32 * 4 + a_row;
            // A loop, not unrolled: ptxas then keeps one step's fragments live, not four.
            for kk in 0..(BK / 8) as usize {
                let p = kk * 8 + t;
                let mut b_big = [[0.0f32; 2]; 4];
                let mut b_small = [[0.0f32; 2]; 4];
                unroll!(ni in [0, 1, 2, 3] {
                    let j = wn + ni * 8 + g;
                    let b = [*sb.add(p * MMA_B_STRIDE + j), *sb.add((p + 4) * MMA_B_STRIDE + j)];
                    unroll!(r in [0, 1] {
                        (b_big[ni][r], b_small[ni][r]) = if SPLIT { split_tf32(b[r]) } else { (b[r], 0.0) };
                    });
                });
                unroll!(mi in [0, 1, 2, 3] {
                    let a = mma::ldmatrix_x4(a_at + ((mi * 16 * MMA_A_STRIDE + kk * 8) * 4) as u32)
                        .map(f32::from_bits);
                    let mut a_big = [0.0f32; 4];
                    let mut a_small = [0.0f32; 4];
                    unroll!(r in [0, 1, 2, 3] {
                        (a_big[r], a_small[r]) = if SPLIT { split_tf32(a[r]) } else { (a[r], 0.0) };
                    });
                    unroll!(ni in [0, 1, 2, 3] {
                        if SPLIT {
                            // The small cross terms first, the big product last.
                            acc[mi][ni] = mma::mma_tf32_m16n8k8(a_small, b_big[ni], acc[mi][ni]);
                            acc[mi][ni] = mma::mma_tf32_m16n8k8(a_big, b_small[ni], acc[mi][ni]);
                        }
                        acc[mi][ni] = mma::mma_tf32_m16n8k8(a_big, b_big[ni], acc[mi][ni]);
                    });
                });
            }
        };

        // The pipeline: MMA_STAGES − 1 tiles in flight while one is computed on. One barrier per
        // tile: it publishes tile kt (prepared by the threads that copied it) to every warp and
        // tells that the stage about to be refilled (computed on in the previous iteration) is free.
        for kt in 0..MMA_STAGES - 1 {
            if kt < ktiles {
                load_tile(kt, kt);
            }
            mma::cp_async_commit_group();
        }
        let (mut read_stage, mut write_stage) = (0u32, MMA_STAGES - 1);
        for kt in 0..ktiles {
            mma::cp_async_wait_group::<{ MMA_STAGES - 2 }>();
            prepare_tile(kt, read_stage as usize);
            thread::sync_threads();
            if kt + MMA_STAGES - 1 < ktiles {
                load_tile(kt + MMA_STAGES - 1, write_stage);
            }
            mma::cp_async_commit_group();
            compute(&mut acc, read_stage as usize);
            read_stage = if read_stage + 1 == MMA_STAGES { 0 } else { read_stage + 1 };
            write_stage = if write_stage + 1 == MMA_STAGES { 0 } else { write_stage + 1 };
        }
        mma::cp_async_wait_group::<0>();
        thread::sync_threads();

        // Epilogue: the accumulators go to shared memory as the 128 × 128 tile (8-byte stores, no
        // bank conflicts), then each warp writes whole rows of 128 floats: 16-byte stores, one
        // 512-byte row per warp instruction.
        unroll!(mi in [0, 1, 2, 3] {
            unroll!(ni in [0, 1, 2, 3] {
                unroll!(half in [0, 1] {
                    let (i, j) = mma::m16n8_c_coords(lane, 2 * half as u32);
                    let at = (wm + mi * 16 + i as usize) * MMA_B_STRIDE + wn + ni * 8 + j as usize;
                    let d = acc[mi][ni];
                    *(sp.add(at) as *mut Float2) = Float2([d[2 * half], d[2 * half + 1]]);
                });
            });
        });
        thread::sync_threads();
        let out_vec = n.is_multiple_of(4) && (out as usize).is_multiple_of(16);
        let c = lane * 4;
        let j = col0 + c;
        for q in 0..16 {
            let r = warp * 16 + q;
            let i = row0 + r;
            if i >= m || j >= n {
                break;
            }
            let v = (*(sp.add(r as usize * MMA_B_STRIDE + c as usize) as *const Float4)).0;
            let dst = out.add((i * n + j) as usize);
            if out_vec && j + 4 <= n {
                *(dst as *mut Float4) = Float4(v);
            } else {
                unroll!(e in [0, 1, 2, 3] {
                    if j + (e as u32) < n {
                        *dst.add(e) = v[e];
                    }
                });
            }
        }
    }
}

/// Tensor cores, one pass of TF32 (10-bit mantissas, f32 accumulation): relative error about
/// 1e-4 of the largest output. A block of 256 threads computes a 128 × 128 tile of `out`, each of
/// its 8 warps a 64 × 32 part as 4 × 4 m16n8k8 MMAs per step of 8 along `k`. Tiles of `U`
/// (128 × 32), `Vᵀ` (32 × 128) and `s` (32) go to shared memory through a 3-stage `cp.async`
/// pipeline (16-byte copies when rows are 16-byte aligned, else 4-byte; zero-filled past the
/// edges), padded so that fragment reads are free of bank conflicts. Once per staged tile each
/// thread scales its copied part of `U` by `s` and rounds its parts of `U` and `Vᵀ` to tf32 in
/// place, so that the inner loop is fragment loads (`ldmatrix` for `U`) and MMAs only. The epilogue
/// stages the tile in shared memory and writes whole rows.
///
/// Launch: block 256 × 1 ([`MMA_THREADS`]), grid `⌈n/128⌉ × ⌈m/128⌉ × images`,
/// [`MMA_SHARED_BYTES`] of dynamic shared memory. Needs sm_80. Launch bounds: 256 threads, 2 blocks
/// per SM (at most 128 registers per thread).
#[kernel(launch_bounds(256, 2))]
pub unsafe fn svd_reconstruct_tf32(
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
    reconstruct_mma::<false>(u, s, vt, out, m, n, k, ldu, batch);
}

/// Tensor cores with error compensation ("3xTF32"): each operand is split into two tf32 values,
/// `x = big + small`, and `big·big + big·small + small·big` (three MMAs, f32 accumulation) recovers
/// f32-level accuracy (relative error about 1e-6). Same tiles, pipeline, launch and shared memory
/// as [`svd_reconstruct_tf32`].
#[kernel(launch_bounds(256, 2))]
pub unsafe fn svd_reconstruct_tf32x3(
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
    reconstruct_mma::<true>(u, s, vt, out, m, n, k, ldu, batch);
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
