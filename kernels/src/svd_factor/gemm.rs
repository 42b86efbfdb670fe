//! The batched f64 GEMM `C = A·B·diag(scale)`: its tile and stage constants, the FMA kernel and the
//! tensor-core (`mma.sync`) kernel, and the shared-memory stages and epilogue they share (the
//! stages also serve the blocked Cholesky's tile products).

use super::layout::Layout;
use gpu_std::math::{self, Float};
use gpu_std::{kernel, mma, shared, thread};

/// Output tile of [`gemm_f64_to`]: `GEMM_TILE × GEMM_TILE` elements per block.
pub const GEMM_TILE: u32 = 64;
/// Step along the inner dimension per shared-memory stage.
pub const GEMM_TILE_K: u32 = 16;
/// Threads per block of the GEMM kernels (1-D): each computes 4 × 4 outputs.
pub const GEMM_THREADS: u32 = 256;
/// Shared-memory row length (f64) of a stage: one more than the tile, so that the column-wise
/// stores of a transposed operand hit different banks.
pub(crate) const GEMM_LD: usize = GEMM_TILE as usize + 1;
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
    let (bi, bj) = (thread::block_idx_y(), thread::block_idx_x());
    if symmetric != 0 && bi > bj {
        return;
    }
    let z = thread::block_idx_z() as usize;
    let a = a.tail(z * la.batch as usize);
    let b = b.tail(z * lb.batch as usize);
    let c = c.tail(z * lc.batch as usize);
    let tid = thread::thread_idx_x();
    let (tx, ty) = (tid % 16, tid / 16);
    let (row0, col0) = (bi * GEMM_TILE, bj * GEMM_TILE);
    let stages = Stages::new(&mut shared::Allocator::new());

    let mut acc = [[0.0f64; 4]; 4];
    let mut p0 = 0;
    while p0 < k {
        stages.load((a, la, row0, m), (b, lb, col0, n), p0, k);
        thread::sync_threads();
        for p in 0..GEMM_TILE_K as usize {
            let mut av = [0.0f64; 4];
            let mut bv = [0.0f64; 4];
            for r in 0..4 {
                // SAFETY: indices below TK·GEMM_LD, written before the barrier.
                unsafe {
                    av[r] = stages.a.read(p * GEMM_LD + ty as usize + 16 * r);
                    bv[r] = stages.b.read(p * GEMM_LD + tx as usize + 16 * r);
                }
            }
            for r in 0..4 {
                for s in 0..4 {
                    acc[r][s] = math::fma(av[r], bv[s], acc[r][s]);
                }
            }
        }
        thread::sync_threads();
        p0 += GEMM_TILE_K;
    }
    let out = Epilogue::new(c, lc, scale, scale_batch, (m, n), symmetric != 0 && bi != bj);
    for (r, row) in acc.iter().enumerate() {
        for (s, &value) in row.iter().enumerate() {
            out.store(row0 + ty + 16 * r as u32, col0 + tx + 16 * s as u32, value);
        }
    }
}

/// [`gemm_f64_to`] on the f64 tensor cores (`mma.sync … m8n8k4 .f64`, sm_80 and newer): the same
/// arguments, launch, tiles, stages and result, each product of 8 × 4 by 4 × 8 done by a warp in
/// one instruction. Warp `w` of the 8 holds the 16 × 32 part of the 64 × 64 tile at rows
/// `16·(w / 2)`, columns `32·(w % 2)`: 2 × 4 accumulators of 8 × 8, two values per lane each.
/// Sums are in f64 with every product exact, in another order than the FMA kernel's, so results
/// agree with it to rounding (about 1e-16 of the terms' magnitude), not bit for bit.
#[kernel(f64, f32)]
pub fn gemm_f64_mma_to<T: Float>(
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
    let (bi, bj) = (thread::block_idx_y(), thread::block_idx_x());
    if symmetric != 0 && bi > bj {
        return;
    }
    let z = thread::block_idx_z() as usize;
    let a = a.tail(z * la.batch as usize);
    let b = b.tail(z * lb.batch as usize);
    let c = c.tail(z * lc.batch as usize);
    let warp = thread::thread_idx_x() / 32;
    let lane = thread::thread_idx_x() % 32;
    let (warp_row, warp_col) = (16 * (warp / 2), 32 * (warp % 2));
    let (row0, col0) = (thread::block_idx_y() * GEMM_TILE, thread::block_idx_x() * GEMM_TILE);
    let stages = Stages::new(&mut shared::Allocator::new());
    let (a_row, a_p) = mma::f64_a_coords(lane);
    let (b_p, b_col) = mma::f64_b_coords(lane);

    let mut acc = [[[0.0f64; 2]; 4]; 2];
    let mut p0 = 0;
    while p0 < k {
        stages.load((a, la, row0, m), (b, lb, col0, n), p0, k);
        thread::sync_threads();
        for kk in (0..GEMM_TILE_K).step_by(4) {
            // SAFETY: indices below TK·GEMM_LD, written before the barrier.
            let (av, bv): ([f64; 2], [f64; 4]) = unsafe {
                (
                    core::array::from_fn(|mi| {
                        stages.a.read(
                            ((kk + a_p) as usize) * GEMM_LD + (warp_row + 8 * mi as u32 + a_row) as usize,
                        )
                    }),
                    core::array::from_fn(|nj| {
                        stages.b.read(
                            ((kk + b_p) as usize) * GEMM_LD + (warp_col + 8 * nj as u32 + b_col) as usize,
                        )
                    }),
                )
            };
            for (mi, row) in acc.iter_mut().enumerate() {
                for (nj, tile) in row.iter_mut().enumerate() {
                    *tile = mma::mma_f64_m8n8k4(av[mi], bv[nj], *tile);
                }
            }
        }
        thread::sync_threads();
        p0 += GEMM_TILE_K;
    }
    let out = Epilogue::new(c, lc, scale, scale_batch, (m, n), symmetric != 0 && bi != bj);
    for (mi, row) in acc.iter().enumerate() {
        for (nj, tile) in row.iter().enumerate() {
            for (r, &value) in tile.iter().enumerate() {
                let (i, j) = mma::f64_c_coords(lane, r as u32);
                out.store(row0 + warp_row + 8 * mi as u32 + i, col0 + warp_col + 8 * nj as u32 + j, value);
            }
        }
    }
}

/// The shared-memory stages of the GEMM kernels: `A`'s `64 × 16` and `B`'s `16 × 64`, each stored
/// `[p][i]` with rows of [`GEMM_LD`].
pub(crate) struct Stages {
    pub(crate) a: shared::DynamicShared<f64>,
    pub(crate) b: shared::DynamicShared<f64>,
}

impl Stages {
    /// The stages, the next allocations of `smem` (first in a GEMM kernel's shared memory).
    #[inline(always)]
    pub(crate) fn new(smem: &mut shared::Allocator) -> Stages {
        Stages {
            a: smem.array::<f64>(GEMM_TILE_K as usize * GEMM_LD),
            b: smem.array::<f64>(GEMM_TILE_K as usize * GEMM_LD),
        }
    }

    /// Loads the stage at `p0` along the inner dimension (`k` long) of `A`'s rows from `row0` (`m`
    /// in all) and `B`'s columns from `col0` (`n` in all), zero outside, each operand along
    /// whichever of its dimensions is contiguous. Every thread of the block calls it, between
    /// barriers.
    #[inline(always)]
    fn load(
        &self,
        (a, la, row0, m): (gpu_std::slice::Slice<f64>, Layout, u32, u32),
        (b, lb, col0, n): (gpu_std::slice::Slice<f64>, Layout, u32, u32),
        p0: u32,
        k: u32,
    ) {
        const TILE: u32 = GEMM_TILE;
        const TK: u32 = GEMM_TILE_K;
        let tid = thread::thread_idx_x();
        for q in 0..(TILE * TK / GEMM_THREADS) {
            let idx = tid + GEMM_THREADS * q;
            // A's stage: TILE rows × TK columns, stored transposed ([p][i]).
            let (ii, pp) = if la.col == 1 { (idx / TK, idx % TK) } else { (idx % TILE, idx / TILE) };
            let (gi, gp) = (row0 + ii, p0 + pp);
            let v = if gi < m && gp < k { a[la.at(gi, gp)] } else { 0.0 };
            // SAFETY (the shared accesses): indices below TK·GEMM_LD, the arrays' length; each
            // element is written by one thread between the barriers and read after them.
            unsafe { self.a.write(pp as usize * GEMM_LD + ii as usize, v) };
            // B's stage: TK rows × TILE columns ([p][j]).
            let (pp, jj) = if lb.col == 1 { (idx / TILE, idx % TILE) } else { (idx % TK, idx / TK) };
            let (gp, gj) = (p0 + pp, col0 + jj);
            let v = if gp < k && gj < n { b[lb.at(gp, gj)] } else { 0.0 };
            unsafe { self.b.write(pp as usize * GEMM_LD + jj as usize, v) };
        }
    }
}

/// Where the GEMM kernels store their results: `C` through its layout, each value scaled by its
/// column's `scale` (if any) and, for a block above the diagonal of a symmetric product, mirrored.
struct Epilogue<T: Copy> {
    c: gpu_std::slice::SliceMut<T>,
    lc: Layout,
    scale: Option<gpu_std::slice::Slice<f64>>,
    m: u32,
    n: u32,
    mirror: bool,
}

impl<T: Float> Epilogue<T> {
    /// Checks `C`'s last element once: every `(i, j)` stored has `i < m`, `j < n`, so an index no
    /// larger. (A check per store keeps the accumulators out of registers: 128 bytes of stack.)
    #[inline(always)]
    fn new(
        c: gpu_std::slice::SliceMut<T>,
        lc: Layout,
        scale: gpu_std::slice::Slice<f64>,
        scale_batch: u32,
        (m, n): (u32, u32),
        mirror: bool,
    ) -> Self {
        let z = thread::block_idx_z() as usize;
        let scale = (!scale.is_empty()).then(|| scale.sub(z * scale_batch as usize, n as usize));
        if m > 0 && n > 0 {
            let _ = c[lc.at(m - 1, n - 1)];
        }
        Epilogue { c, lc, scale, m, n, mirror }
    }

    /// Stores `C(i, j) = value` (scaled; mirrored), nothing outside `m × n`.
    #[inline(always)]
    fn store(&self, i: u32, j: u32, value: f64) {
        if i < self.m && j < self.n {
            let value = match self.scale {
                Some(scale) => value * scale[j as usize],
                None => value,
            };
            let mut c = self.c;
            // SAFETY: i < m, j < n (and m = n when mirrored), so both indices are at most C's
            // last, checked in `new`.
            unsafe {
                c.set_unchecked(self.lc.at(i, j), T::from_f64(value));
                if self.mirror {
                    c.set_unchecked(self.lc.at(j, i), T::from_f64(value));
                }
            }
        }
    }
}
