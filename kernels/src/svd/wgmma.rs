//! The Hopper reconstructions through asynchronous warpgroup MMA (`wgmma`, sm_90a): the operand
//! preparation (`tf32_prepare`), the streaming kernels, and the panel kernels that keep a block's
//! rows of `U` in shared memory or registers.

use super::{Batch, MMA_TILE_K, MMA_TILE_M, MMA_TILE_N, split_tf32};
use gpu_std::slice::{Slice, SliceMut};
use gpu_std::{global, kernel, mma, shared, thread};

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
/// operands in the kernel instead, as [`svd_reconstruct_tf32`](super::svd_reconstruct_tf32) does, kept the shared-memory pipe
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
