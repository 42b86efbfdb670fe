//! The tensor-core reconstructions through `mma.sync` (sm_80 and later): one TF32 pass, or three
//! (3xTF32, f32-level accuracy), 128 × 128 tiles fed by a 3-stage `cp.async` pipeline, with their
//! fragment and tile helpers.

use super::{Batch, MMA_TILE_K, MMA_TILE_M, MMA_TILE_N, split_tf32};
use gpu_std::slice::{Slice, SliceMut};
use gpu_std::{global, kernel, mma, shared, thread};

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
/// [`svd_reconstruct_naive`](super::svd_reconstruct_naive): the accesses are unchecked on the GPU.
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
/// [`svd_reconstruct_naive`](super::svd_reconstruct_naive): the accesses are unchecked on the GPU.
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
