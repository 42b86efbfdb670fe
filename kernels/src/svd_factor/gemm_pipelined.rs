//! The pipelined f64 tensor-core GEMMs for large products: `C = A·B·diag(scale)` as
//! [`gemm_f64_mma_to`](super::gemm_f64_mma_to) computes it (same operands through [`Layout`]s,
//! f64 or f32 result, optional column scale, optional symmetric half), with 128 × 64 output tiles
//! per block of 4 warps ([`gemm_f64_pipelined_to`]) or 128 × 128 per block of 8 warps
//! ([`gemm_f64_pipelined_wide_to`]), a [`PGEMM_STAGES`]-deep `cp.async` pipeline through dynamic
//! shared memory, `mma.sync.m16n8k4` f64 products and an optional split of the inner dimension
//! across blocks ([`gemm_f64_split_sum_to`] adds the parts). The host picks the width
//! ([`pgemm_wide`]) and the split ([`pgemm_splits`]).
//!
//! **Tiles.** Block `(x, y, z)` computes rows `128·y ..` and columns `BN·x ..` of `C` (`BN` = 64
//! or 128). Warp `w` holds the 64 × 32 part at rows `64·(w % 2)`, columns `32·(w / 2)`: 4 × 4
//! accumulators of 16 × 8 (m16n8k4), four f64 per lane each (64 registers of f64). The narrow
//! kernel runs two blocks per multiprocessor (registers, 102,400 bytes of shared memory each), the
//! wide one one (135,168 bytes), so 8 warps per multiprocessor either way; the wide tile stages
//! 2/3 of the bytes per flop.
//!
//! **Stages.** Each stage holds `A`'s 128 × 16 slice stored `[p][i]` (rows of `LDA` = 132) and
//! `B`'s 16 × BN slice stored `[p][j]` (rows of `ldb(BN)` = BN + 4), copied by 8-byte `cp.async`
//! per element (so any strides work, and edge elements are zero-filled), the threads walking
//! whichever dimension of each operand is contiguous: along it in one row of the stage when it is
//! the stage's row dimension (no conflicts), else 4 along it by 8 across (groups of 32 bytes,
//! conflict-free in shared memory with the padded rows). Each thread's source addresses are
//! computed once (per row or column it copies) and stepped along the inner dimension. One barrier
//! per stage: the copy of stage `s + STAGES − 1` starts after the barrier that ends the reads of
//! the buffer it overwrites.
//!
//! **Fragments.** The rows of an m16n8k4 product are mapped to the tile so that a lane's two `A`
//! values are adjacent: logical row `g` (`g = lane / 4`) is tile row `2g`, logical row `g + 8` is
//! `2g + 1`, so one `ld.shared.v2.f64` loads both (16-byte aligned; the 8 lanes of each quarter
//! warp hit 8 different 16-byte bank groups since `LDA/2 ≡ 2 mod 8`). `B`'s value `(t, g)` is one
//! 8-byte load per n-tile (a half warp's 16 loads in 16 banks: `ldb ≡ 4 mod 16`). The
//! accumulators' rows follow the same map in the epilogue, which goes through shared memory
//! (16-byte stores of a lane's two adjacent columns, then one element per thread along `C`'s
//! contiguous dimension, coalesced).
//!
//! **Split-K.** With `splits > 1`, `z = image·splits + s` and block `s` covers the inner range
//! `[s·per, (s + 1)·per)` (`per` = ⌈k / splits⌉ rounded up to 16); it writes its f64 partial
//! product unscaled to `c` (the partial buffer, through `lc`, part `z` at `z·lc.batch`), the upper
//! triangle only when `symmetric`; [`gemm_f64_split_sum_to`] adds the parts in a fixed order,
//! scales, converts and mirrors.
//!
//! **Symmetric.** Blocks entirely below the diagonal (`128·y > BN·x + BN − 1`) return at once;
//! the others store only elements with `i ≤ j` and, without a split, their mirror `(j, i)` too, so
//! the result is exactly symmetric.

use super::layout::Layout;
use gpu_std::math::Float;
use gpu_std::{kernel, mma, shared, thread};

/// Output rows per block of both pipelined kernels.
pub const PGEMM_TILE_M: u32 = 128;
/// Output columns per block of [`gemm_f64_pipelined_to`].
pub const PGEMM_TILE_N: u32 = 64;
/// Output columns per block of [`gemm_f64_pipelined_wide_to`].
pub const PGEMM_WIDE_TILE_N: u32 = 128;
/// Step along the inner dimension per stage.
pub const PGEMM_TILE_K: u32 = 16;
/// Stages of the `cp.async` pipeline.
pub const PGEMM_STAGES: u32 = 4;
/// Threads per block of [`gemm_f64_pipelined_to`] (4 warps, 1-D).
pub const PGEMM_THREADS: u32 = 128;
/// Threads per block of [`gemm_f64_pipelined_wide_to`] (8 warps, 1-D).
pub const PGEMM_WIDE_THREADS: u32 = 256;

const BM: u32 = PGEMM_TILE_M;
const BK: u32 = PGEMM_TILE_K;
const STAGES: u32 = PGEMM_STAGES;
/// Shared row length (f64) of `A`'s stage: `≡ 4 mod 16`, even.
const LDA: u32 = BM + 4;
const A_STAGE: u32 = BK * LDA;

/// Shared row length (f64) of `B`'s stage (and of the epilogue's C tile) for a tile `bn` wide:
/// `≡ 4 mod 16`, even.
const fn ldb(bn: u32) -> u32 {
    bn + 4
}

/// The f64 elements of the dynamic shared memory of a pipelined kernel with tiles `bn` wide: the
/// stages (the epilogue's `128 × ldb(bn)` C tile fits in them).
const fn smem_len(bn: u32) -> usize {
    (STAGES * (A_STAGE + BK * ldb(bn))) as usize
}

/// Dynamic shared memory of [`gemm_f64_pipelined_to`], bytes (102,400 with 4 stages: the host
/// opts in above 48 KiB).
pub const PGEMM_SHARED_BYTES: u32 = shared::Layout::new().array::<f64>(smem_len(PGEMM_TILE_N)).bytes_u32();
/// Dynamic shared memory of [`gemm_f64_pipelined_wide_to`], bytes (135,168 with 4 stages).
pub const PGEMM_WIDE_SHARED_BYTES: u32 =
    shared::Layout::new().array::<f64>(smem_len(PGEMM_WIDE_TILE_N)).bytes_u32();

/// Threads per block of [`gemm_f64_split_sum_to`] (1-D): [`SPLIT_SUM_WARPS`] warps.
pub const SPLIT_SUM_THREADS: u32 = 256;
/// Consecutive output elements a block of [`gemm_f64_split_sum_to`] sums at a time, one per lane.
pub const SPLIT_SUM_ELEMENTS: u32 = 32;
/// Warps per block of [`gemm_f64_split_sum_to`], each adding its share of the parts.
pub const SPLIT_SUM_WARPS: u32 = SPLIT_SUM_THREADS / SPLIT_SUM_ELEMENTS;
/// Dynamic shared memory of [`gemm_f64_split_sum_to`], bytes: one f64 per thread.
pub const SPLIT_SUM_SHARED_BYTES: u32 = SPLIT_SUM_THREADS * 8;

/// Blocks (grid `x`) of [`gemm_f64_split_sum_to`] for `m × n` results: one per
/// [`SPLIT_SUM_ELEMENTS`] elements, at most 4096 (the grid strides over the rest).
pub const fn split_sum_blocks(m: u32, n: u32) -> u32 {
    let blocks = (m * n).div_ceil(SPLIT_SUM_ELEMENTS);
    if blocks > 4096 { 4096 } else { blocks }
}

/// The inner length each part of a split covers: `⌈k / splits⌉` rounded up to a stage.
#[inline(always)]
pub const fn pgemm_split_length(k: u32, splits: u32) -> u32 {
    k.div_ceil(if splits == 0 { 1 } else { splits }).next_multiple_of(PGEMM_TILE_K)
}

/// The last argument of [`gemm_f64_pipelined_to`]: whether the product is symmetric (bit 0) and
/// the number of parts of the inner dimension (the bits above; 0 and 1 both mean one).
#[inline(always)]
pub const fn pgemm_mode(symmetric: bool, splits: u32) -> u32 {
    symmetric as u32 | splits << 1
}

/// The blocks of one part of a pipelined launch for one image: the `128 × bn` tiles (`bn` = 64 or
/// 128) of an `m × n` result, only those not entirely below the diagonal when `symmetric` (tile
/// row `y` keeps the tile columns from `y · 128 / bn`).
pub const fn pgemm_tiles(m: u32, n: u32, symmetric: bool, bn: u32) -> u32 {
    let (rows, cols) = (m.div_ceil(PGEMM_TILE_M), n.div_ceil(bn));
    let per_row = PGEMM_TILE_M / bn;
    if !symmetric {
        return rows * cols;
    }
    let mut tiles = 0;
    let mut y = 0;
    while y < rows {
        if cols > per_row * y {
            tiles += cols - per_row * y;
        }
        y += 1;
    }
    tiles
}

/// Most parts of a split inner dimension: a one-tile Gram matrix of a tall basis (`32 × 32` over
/// 100 000 rows) fills the GPU with 256 parts of about 400 rows each; at 32 parts of 3 125 its
/// blocks walked the rows for 187 µs (H200).
pub const PGEMM_MAX_SPLITS: u32 = 256;

/// How many parts a pipelined kernel with tiles `bn` wide splits the inner dimension `k` into on
/// a GPU of `sms` multiprocessors: 1 where the tiles of all images fill the blocks the
/// multiprocessors hold at once (two of [`gemm_f64_pipelined_to`], one of the wide kernel), else
/// as many parts as fit that one wave (no second, mostly idle wave), each at least 128 long (8
/// stages, twice the pipeline's depth), at most [`PGEMM_MAX_SPLITS`].
pub const fn pgemm_splits(m: u32, n: u32, k: u32, images: u32, symmetric: bool, sms: u32, bn: u32) -> u32 {
    let blocks = pgemm_tiles(m, n, symmetric, bn) * images;
    let slots = if bn == PGEMM_TILE_N { 2 * sms } else { sms };
    if blocks == 0 || blocks * 2 > slots {
        return 1;
    }
    let by_k = k / 128;
    let mut splits = slots / blocks;
    if splits > by_k {
        splits = by_k;
    }
    if splits > PGEMM_MAX_SPLITS {
        splits = PGEMM_MAX_SPLITS;
    }
    if splits < 1 { 1 } else { splits }
}

/// Whether an `m × n` product runs on [`gemm_f64_pipelined_wide_to`] (128 × 128 tiles, 2/3 of the
/// staged bytes per flop of the 128 × 64 tiles) rather than on [`gemm_f64_pipelined_to`] (128 × 64,
/// two blocks per multiprocessor): for the tall results (`m ≠ n`: `G·Q`, `Q·Z`) where the wider
/// tiles compute at most 1/8 more columns past `n` than the narrower ones; square results (the Gram
/// matrices, `QᵀY`) measured as fast or faster on the narrower tiles (`docs/benchmarks/gemm.md`).
pub const fn pgemm_wide(m: u32, n: u32) -> bool {
    m != n
        && n.div_ceil(PGEMM_WIDE_TILE_N) * PGEMM_WIDE_TILE_N * 8
            <= n.div_ceil(PGEMM_TILE_N) * PGEMM_TILE_N * 9
}

/// Two f64 as one 16-byte shared-memory access.
#[derive(Clone, Copy)]
#[repr(C, align(16))]
struct F64x2([f64; 2]);

/// `C = A·B·diag(scale)` for every image of a batch on the f64 tensor cores, pipelined (see the
/// module): `A` `m × k`, `B` `k × n`, `C` `m × n` through their layouts; `scale` `n` values per
/// image `scale_batch` apart, or empty; `mode` = [`pgemm_mode`]`(symmetric, splits)` (kernel
/// arguments are at most 12), `symmetric` for a product known to be symmetric (`m = n`), `splits`
/// ≥ 1 parts of the inner dimension (grid z = images · splits); with more than one, `T` is f64,
/// `scale` is empty and `c` is the partial buffer (see the module).
///
/// Launch: block [`PGEMM_THREADS`], grid `⌈n/64⌉ × ⌈m/128⌉ × (images · splits)`,
/// [`PGEMM_SHARED_BYTES`] of dynamic shared memory.
#[kernel(f64, f32)]
pub fn gemm_f64_pipelined_to<T: Float>(
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
    mode: u32,
) {
    pipelined::<T, PGEMM_TILE_N, PGEMM_THREADS>(
        (a, la),
        (b, lb),
        (c, lc),
        (scale, scale_batch),
        (m, n, k),
        mode,
    );
}

/// [`gemm_f64_pipelined_to`] with 128 × 128 tiles and 8 warps (2 × 4, each 64 × 32): the same
/// arguments and result, 1.5 times the arithmetic per byte staged, one block per multiprocessor.
///
/// Launch: block [`PGEMM_WIDE_THREADS`], grid `⌈n/128⌉ × ⌈m/128⌉ × (images · splits)`,
/// [`PGEMM_WIDE_SHARED_BYTES`] of dynamic shared memory.
#[kernel(f64, f32)]
pub fn gemm_f64_pipelined_wide_to<T: Float>(
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
    mode: u32,
) {
    pipelined::<T, PGEMM_WIDE_TILE_N, PGEMM_WIDE_THREADS>(
        (a, la),
        (b, lb),
        (c, lc),
        (scale, scale_batch),
        (m, n, k),
        mode,
    );
}

/// The body of the pipelined kernels: `128 × BN` tiles (`BN` 64 or 128), `THREADS` = 2·BN
/// threads in warps of 64 × 32.
#[inline(always)]
fn pipelined<T: Float, const BN: u32, const THREADS: u32>(
    (a, la): (gpu_std::slice::Slice<f64>, Layout),
    (b, lb): (gpu_std::slice::Slice<f64>, Layout),
    (c, lc): (gpu_std::slice::SliceMut<T>, Layout),
    (scale, scale_batch): (gpu_std::slice::Slice<f64>, u32),
    (m, n, k): (u32, u32, u32),
    mode: u32,
) {
    const { assert!(THREADS == 2 * BN && (BN == 64 || BN == 128)) };
    let ldb_: u32 = ldb(BN);
    let b_stage: u32 = BK * ldb_;
    let (row0, col0) = (thread::block_idx_y() * BM, thread::block_idx_x() * BN);
    let symmetric = mode & 1 != 0;
    if symmetric && row0 > col0 + (BN - 1) {
        return;
    }
    let splits = (mode >> 1).max(1);
    let zc = thread::block_idx_z();
    let (image, split) = ((zc / splits) as usize, zc % splits);
    let per = pgemm_split_length(k, splits);
    let p_begin = split * per;
    let p_end = k.min(p_begin.saturating_add(per));
    let a = a.tail(image * la.batch as usize);
    let b = b.tail(image * lb.batch as usize);
    let c = c.tail(zc as usize * lc.batch as usize);
    let (a_ptr, b_ptr) = (a.as_ptr(), b.as_ptr());

    let tid = thread::thread_idx_x();
    let (warp, lane) = (tid / 32, tid % 32);
    let (g, t) = (lane / 4, lane % 4);
    let (warp_row, warp_col) = (64 * (warp % 2), 32 * (warp / 2));

    let smem = shared::Allocator::new().array::<f64>(smem_len(BN));
    let base = smem.as_ptr();
    let base_addr = mma::shared_address(base);
    let a_rows_contiguous = la.row == 1;
    let b_cols_contiguous = lb.col == 1;

    // Which elements of a stage this thread copies: of an operand whose stage is 16 × L (L = 128
    // for A, BN for B), 4·R with R = 4L / THREADS, element (r, h) (r < R, h < 4) at stage row
    // `p + r·p_step + 4h`, tile row (A) or column (B) `l + r·l_step`. Along a contiguous
    // dimension that is the stage's row (A's rows, B's columns) the 32 lanes of a warp take 32
    // neighbours; else 4 neighbours along the inner dimension times 8 across.
    const fn pattern(tid: u32, long: u32, threads: u32, long_contiguous: bool) -> (u32, u32, u32, u32) {
        if long_contiguous {
            (tid % long, tid / long, 0, threads / long)
        } else {
            (tid / 4, tid % 4, threads / 4, 0)
        }
    }
    let (ai, ap, ai_step, ap_step) = pattern(tid, BM, THREADS, a_rows_contiguous);
    let (bj, bp, bj_step, bp_step) = pattern(tid, BN, THREADS, b_cols_contiguous);
    // Per r: whether the row (column) is inside, the element's address at p0 = 0 (only
    // dereferenced inside), and its offset in the stage, bytes.
    let a_rows: [(bool, *const f64, u32); 4] = core::array::from_fn(|r| {
        let (i, pp) = (ai + r as u32 * ai_step, ap + r as u32 * ap_step);
        (row0 + i < m, a_ptr.wrapping_add(la.at(row0 + i, pp)), 8 * (pp * LDA + i))
    });
    let b_cols: [(bool, *const f64, u32); 2] = core::array::from_fn(|r| {
        let (pp, j) = (bp + r as u32 * bp_step, bj + r as u32 * bj_step);
        (col0 + j < n, b_ptr.wrapping_add(lb.at(pp, col0 + j)), 8 * (pp * ldb_ + j))
    });
    let (a_p_step, b_p_step) = (la.col as usize, lb.row as usize);

    // Starts the copies of the stage at `p0` into buffer `slot` (the caller commits the group).
    // Elements outside `m × [p_begin, p_end) × n` read nothing (0 source bytes) and are zero-filled.
    let load = |slot: u32, p0: u32| {
        let sa = base_addr + 8 * slot * A_STAGE;
        let sb = base_addr + 8 * (STAGES * A_STAGE + slot * b_stage);
        let left = p_end - p0;
        // One element: A's (r = q % 4, h = q / 4), written out per r so that the arrays above
        // stay in registers.
        let copy_a = |(row_inside, at, dst): (bool, *const f64, u32), r: u32, h: u32| {
            let pp = ap + r * ap_step + 4 * h;
            let inside = row_inside && pp < left;
            // SAFETY: inside `m × k` the element lies in `A`'s image (the host checks the span);
            // outside nothing is read. The destination lies in the stage's buffer, 8-byte
            // aligned; it is read only after the wait and barrier of its iteration.
            unsafe {
                // Outside, the image's first element: no address past the operand reaches the
                // copy, even unread (memcheck).
                let src = if inside { at.wrapping_add((p0 + 4 * h) as usize * a_p_step) } else { a_ptr };
                mma::cp_async_8(sa + dst + 8 * 4 * h * LDA, src, if inside { 8 } else { 0 });
            }
        };
        let copy_b = |(col_inside, at, dst): (bool, *const f64, u32), r: u32, h: u32| {
            let pp = bp + r * bp_step + 4 * h;
            let inside = col_inside && pp < left;
            // SAFETY: as for `A`.
            unsafe {
                let src = if inside { at.wrapping_add((p0 + 4 * h) as usize * b_p_step) } else { b_ptr };
                mma::cp_async_8(sb + dst + 8 * 4 * h * ldb_, src, if inside { 8 } else { 0 });
            }
        };
        for h in 0..4 {
            copy_a(a_rows[0], 0, h);
            copy_a(a_rows[1], 1, h);
            if 4 * BM / THREADS > 2 {
                copy_a(a_rows[2], 2, h);
                copy_a(a_rows[3], 3, h);
            }
            copy_b(b_cols[0], 0, h);
            copy_b(b_cols[1], 1, h);
        }
    };

    let mut acc = [[[0.0f64; 4]; 4]; 4];
    let tiles = if p_end > p_begin { (p_end - p_begin).div_ceil(BK) } else { 0 };
    for s in 0..STAGES - 1 {
        if s < tiles {
            load(s, p_begin + s * BK);
        }
        mma::cp_async_commit_group();
    }
    let mut slot = 0;
    for kt in 0..tiles {
        // The stage `kt` has landed (at most STAGES − 2 younger groups in flight) for this
        // thread; the barrier publishes every thread's copies and ends the reads of the buffer
        // that the next copy overwrites (read in iteration kt − 1).
        mma::cp_async_wait_group::<{ PGEMM_STAGES - 2 }>();
        thread::sync_threads();
        let next = kt + STAGES - 1;
        if next < tiles {
            let next_slot = if slot == 0 { STAGES - 1 } else { slot - 1 };
            load(next_slot, p_begin + next * BK);
        }
        mma::cp_async_commit_group();
        // SAFETY (the reads below): inside the stage's buffers (rows below BK, columns below the
        // tile), written by copies completed and published above, not overwritten before the
        // next barrier; the A reads are 16-byte aligned (even column, LDA even, 16-byte aligned
        // buffers).
        let sa = unsafe { base.add((slot * A_STAGE) as usize) };
        let sb = unsafe { base.add((STAGES * A_STAGE + slot * b_stage) as usize) };
        for kk in (0..BK).step_by(4) {
            let arow = (kk + t) * LDA + warp_row + 2 * g;
            let brow = (kk + t) * ldb_ + warp_col + g;
            let av: [[f64; 2]; 4] = core::array::from_fn(|mi| unsafe {
                (sa.add((arow + 16 * mi as u32) as usize) as *const F64x2).read().0
            });
            let bv: [f64; 4] =
                core::array::from_fn(|nj| unsafe { sb.add((brow + 8 * nj as u32) as usize).read() });
            for (mi, row) in acc.iter_mut().enumerate() {
                for (nj, tile) in row.iter_mut().enumerate() {
                    *tile = mma::mma_f64_m16n8k4(av[mi], bv[nj], *tile);
                }
            }
        }
        slot = if slot == STAGES - 1 { 0 } else { slot + 1 };
    }
    mma::cp_async_wait_group::<0>();
    // Every warp is done reading the stages (and no copy is in flight): the accumulators go
    // through shared memory, `[i][j]` with rows of ldb(BN) (the 8 lanes of a quarter warp store their
    // 16-byte pairs in 8 different bank groups), and out along C's contiguous dimension.
    thread::sync_threads();
    for (mi, row) in acc.iter().enumerate() {
        for (nj, tile) in row.iter().enumerate() {
            for h in 0..2 {
                let at = (warp_row + 16 * mi as u32 + 2 * g + h) * ldb_ + warp_col + 8 * nj as u32 + 2 * t;
                // SAFETY: row below 128, column below BN: inside the stages' region (the C tile,
                // 128 · ldb(BN) f64, is smaller), 16-byte aligned (even index, even ldb); each
                // element written by one lane, read after the barrier below.
                unsafe {
                    (base.add(at as usize) as *mut F64x2)
                        .write(F64x2([tile[2 * h as usize], tile[2 * h as usize + 1]]))
                };
            }
        }
    }
    thread::sync_threads();

    // Epilogue: C's last element checked once; every stored (i, j) lies below it.
    let partial = splits > 1;
    let scale = (!scale.is_empty() && !partial).then(|| scale.sub(image * scale_batch as usize, n as usize));
    if m > 0 && n > 0 {
        let _ = c[lc.at(m - 1, n - 1)];
    }
    let mirror = symmetric && !partial;
    let c_cols_contiguous = lc.col == 1;
    let mut c = c;
    for q in 0..(BM * BN / THREADS) {
        let e = tid + THREADS * q;
        let (ii, jj) = if c_cols_contiguous { (e / BN, e % BN) } else { (e % BM, e / BM) };
        let (i, j) = (row0 + ii, col0 + jj);
        if i < m && j < n && !(symmetric && i > j) {
            // SAFETY: inside the tile written before the barrier above.
            let value = unsafe { base.add((ii * ldb_ + jj) as usize).read() };
            let value = match scale {
                Some(scale) => value * scale[j as usize],
                None => value,
            };
            // SAFETY: i < m, j < n (and m = n when mirrored): at most C's last index, checked
            // above.
            unsafe {
                c.set_unchecked(lc.at(i, j), T::from_f64(value));
                if mirror && i != j {
                    c.set_unchecked(lc.at(j, i), T::from_f64(value));
                }
            }
        }
    }
}

/// The sum of the parts of a split pipelined GEMM: `C(i, j) = scale[j] · Σ_s P_s(i, j)` for every
/// image, the parts `P_s` of image `z` at `(z·splits + s)·m·n` in `partial`, each `m × n`
/// row-major; with `symmetric ≠ 0` only their upper triangles hold values and `C(i, j)` for
/// `i > j` is `scale[j] · Σ_s P_s(j, i)` (the thread of an upper element `(i, j)` also writes
/// `(j, i)`). A block takes [`SPLIT_SUM_ELEMENTS`] consecutive elements at a time, one per lane;
/// warp `w` adds the parts `w, w + W, w + 2W, …` (`W` = [`SPLIT_SUM_WARPS`]) in order, four loads
/// in flight, and the first warp adds the warps' sums in order: a fixed order, and a few hundred
/// parts (a tall basis's Gram matrix) summed in parallel rather than one after another per
/// element (256 parts of a 32 × 32 product took 100 µs that way, H200). Grid `(x, 1, images)`
/// ([`split_sum_blocks`], grid-strided), 1-D block of [`SPLIT_SUM_THREADS`],
/// [`SPLIT_SUM_SHARED_BYTES`] of dynamic shared memory.
#[kernel(f64, f32)]
pub fn gemm_f64_split_sum_to<T: Float>(
    partial: &[f64],
    splits: u32,
    c: &mut [T],
    lc: Layout,
    scale: &[f64],
    scale_batch: u32,
    m: u32,
    n: u32,
    symmetric: u32,
) {
    let z = thread::block_idx_z() as usize;
    let (mn, n, splits) = (m as usize * n as usize, n as usize, splits as usize);
    let parts = partial.sub(z * splits * mn, splits * mn);
    let mut c = c.tail(z * lc.batch as usize);
    let scale = (!scale.is_empty()).then(|| scale.sub(z * scale_batch as usize, n));
    let symmetric = symmetric != 0;
    let tid = thread::thread_idx_x() as usize;
    let (lane, warp) = (tid % SPLIT_SUM_ELEMENTS as usize, tid / SPLIT_SUM_ELEMENTS as usize);
    let warps = SPLIT_SUM_WARPS as usize;
    let sums = shared::region::<f64>(0, SPLIT_SUM_THREADS as usize);
    let mut first = thread::block_idx_x() as usize * SPLIT_SUM_ELEMENTS as usize;
    // `first` is the same for every thread of the block, so every thread reaches each barrier.
    while first < mn {
        let e = first + lane;
        let (i, j) = (e / n, e % n);
        let wanted = e < mn && !(symmetric && i > j);
        let mut sum = 0.0f64;
        if wanted {
            let mut s = warp;
            while s + 3 * warps < splits {
                let (p0, p1) = (parts[s * mn + e], parts[(s + warps) * mn + e]);
                let (p2, p3) = (parts[(s + 2 * warps) * mn + e], parts[(s + 3 * warps) * mn + e]);
                sum = sum + p0 + p1 + p2 + p3;
                s += 4 * warps;
            }
            while s < splits {
                sum += parts[s * mn + e];
                s += warps;
            }
        }
        // SAFETY: index `tid` < blockDim.x of the region of blockDim.x elements; each element is
        // written by its thread before the barrier and read by warp 0 after it.
        unsafe { sums.write(tid, sum) };
        thread::sync_threads();
        if warp == 0 && wanted {
            let mut total = 0.0f64;
            for w in 0..warps {
                // SAFETY: as above.
                total += unsafe { sums.read(w * SPLIT_SUM_ELEMENTS as usize + lane) };
            }
            let scaled = |col: usize| match scale {
                Some(scale) => total * scale[col],
                None => total,
            };
            c[lc.at(i as u32, j as u32)] = T::from_f64(scaled(j));
            if symmetric && i != j {
                c[lc.at(j as u32, i as u32)] = T::from_f64(scaled(i));
            }
        }
        // The next elements' sums overwrite the region only after warp 0 has read it.
        thread::sync_threads();
        first += thread::grid_dim_x() as usize * SPLIT_SUM_ELEMENTS as usize;
    }
}
