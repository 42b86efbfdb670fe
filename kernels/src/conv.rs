//! 2-D convolution of a grayscale image with a small mask, zero outside the image.
//!
//! Images and masks are row-major: element `(row, col)` of an image with `cols` columns is at
//! `row·cols + col`. For a mask of `mh × mw` (both odd) with half sizes `dr = mh/2`, `dc = mw/2`,
//! every kernel computes SciPy's `ndimage.convolve(image, mask, mode='constant', cval=0)`:
//!
//! ```text
//! out[i, j] = Σ_{k<mh, l<mw} mask[k, l] · image[i − k + dr, j − l + dc]   (image = 0 outside)
//! ```
//!
//! i.e. a correlation with the mask flipped in both directions.
//!
//! * [`conv2d_naive`] (entries `conv2d_naive_f32`, `conv2d_naive_f64`): one thread per output
//!   pixel, everything read from global memory; in f64 for reference-precision runs.
//! * [`conv2d_tiled`] (f32): a block stages its input tile plus halo and the (flipped) mask in
//!   shared memory once, then each thread computes [`TILED_ROWS_PER_THREAD`] outputs of one column
//!   from registers. Its shared memory is safe: a [`shared::Tile2d`] with the halo and a
//!   [`shared::Tile`] filled by their owners, read after `shared::sync_threads` through the thread's
//!   halo window, whose bounds checks the loops prove.
//!
//! Host side: `host/src/families/conv.rs`; tests: `tests/conv.rs`; benchmark: `benches/conv.rs`.

use gpu_std::math::{self, Float};
use gpu_std::{Slice, SliceMut, kernel, shared, thread};

/// Largest mask height or width the kernels accept.
pub const MAX_MASK_SIDE: u32 = 31;

/// Block width (threads along x = columns) of every kernel.
pub const BLOCK_X: u32 = 32;
/// Block height (threads along y = rows) of the naive kernels.
pub const BLOCK_Y: u32 = 8;

/// Block height of [`conv2d_tiled`].
pub const TILED_BLOCK_Y: u32 = 8;
/// Output rows each thread of [`conv2d_tiled`] computes (consecutive rows of one column).
pub const TILED_ROWS_PER_THREAD: u32 = 8;
/// Output rows per block of [`conv2d_tiled`].
pub const TILED_TILE_ROWS: u32 = TILED_BLOCK_Y * TILED_ROWS_PER_THREAD;
/// Output columns per block of [`conv2d_tiled`].
pub const TILED_TILE_COLS: u32 = BLOCK_X;

const ROWS_PER_THREAD: usize = TILED_ROWS_PER_THREAD as usize;
/// Length of the unrolled index lists in `Tile::run`, and of the register arrays they index (the
/// unused tails fold away): output rows per thread, and the input window (rows per thread plus
/// the largest mask's halo, in whole groups of the 4 rows a 16-byte read brings).
const ROWS_CAPACITY: usize = 32;
const WINDOW_CAPACITY: usize = 64;
const _: () = assert!(
    ROWS_PER_THREAD <= ROWS_CAPACITY
        && WINDOW_CAPACITY >= ROWS_CAPACITY + MAX_MASK_SIDE as usize - 1
        && ROWS_PER_THREAD.is_multiple_of(4)
);

/// Repeats `body` once per listed index, with `i` bound to it: a loop unrolled in the source, so
/// that arrays indexed by `i` stay in registers whatever LLVM's unrolling thresholds decide.
macro_rules! unroll {
    ($i:ident in [$($n:literal)*] $body:block) => {
        $({
            let $i: usize = $n;
            $body
        })*
    };
}

/// Mask rows rounded up to a multiple of 4: the shared-memory mask is read 4 rows (16 bytes) at a
/// time.
const fn padded_mask_rows(mask_rows: usize) -> usize {
    mask_rows.div_ceil(4) * 4
}

/// Rows of the shared input tile: the block's output rows plus the mask's halo
/// (`TILED_TILE_ROWS + mask_rows − 1`), rounded up to a multiple of 4 so that a thread reads its
/// window four rows (16 bytes) at a time; the rows past the halo are staged but never read.
const fn tile_rows(mask_rows: usize) -> usize {
    (TILED_TILE_ROWS as usize + mask_rows - 1).next_multiple_of(4)
}

/// Stride in f32 elements between two columns of the shared input tile, which is stored
/// column-major: [`tile_rows`], or 4 more, so that it is 4 times an odd number. Columns start
/// 16-byte aligned, and the 8 threads of a quarter warp, reading 16 bytes each from 8 consecutive
/// columns, hit 8 different groups of 4 banks.
const fn tile_column_stride(mask_rows: usize) -> usize {
    let rows = tile_rows(mask_rows);
    if (rows / 4) % 2 == 1 { rows } else { rows + 4 }
}

/// f32 elements of the flipped mask in shared memory: `mask_cols × padded rows`. In `usize`, as
/// the kernel indexes: computed in `u32` and widened, LLVM loses what it knows of the products
/// and the kernel's staging loops compile differently (2.7% slower on the H100).
const fn tiled_mask_len(mask_rows: usize, mask_cols: usize) -> usize {
    mask_cols * padded_mask_rows(mask_rows)
}

/// f32 elements of the input tile with its halo in shared memory: `TILED_TILE_COLS + mask_cols − 1`
/// columns of [`tile_column_stride`] values.
const fn tiled_tile_len(mask_rows: usize, mask_cols: usize) -> usize {
    (TILED_TILE_COLS as usize + mask_cols - 1) * tile_column_stride(mask_rows)
}

/// The dynamic shared memory of [`conv2d_tiled`] for a `mask_rows × mask_cols` mask: the flipped
/// mask, then the input tile with its halo, both f32 (the kernel allocates them in this order).
pub const fn tiled_shared_layout(mask_rows: u32, mask_cols: u32) -> shared::Layout {
    shared::Layout::new()
        .array::<f32>(tiled_mask_len(mask_rows as usize, mask_cols as usize))
        .array::<f32>(tiled_tile_len(mask_rows as usize, mask_cols as usize))
}

/// Bytes of [`tiled_shared_layout`]: what a launch of [`conv2d_tiled`] must give.
pub const fn tiled_shared_bytes(mask_rows: u32, mask_cols: u32) -> u32 {
    tiled_shared_layout(mask_rows, mask_cols).bytes_u32()
}

/// One thread per output pixel: `out[y, x]` for the thread's global `(x, y)`, accumulated in `F`
/// with FMAs straight from global memory (`conv2d_naive_f32`, `conv2d_naive_f64`).
///
/// `image` and `out` hold `rows × cols` values (row-major), `mask` holds `mask_rows × mask_cols`,
/// both odd. Launch a 2-D grid covering `cols × rows` threads (x = column), e.g. blocks of
/// [`BLOCK_X`] × [`BLOCK_Y`]; threads outside the image do nothing. No shared memory.
#[kernel(f32, f64)]
pub fn conv2d_naive<F: Float>(
    image: &[F],
    rows: u32,
    cols: u32,
    mask: &[F],
    mask_rows: u32,
    mask_cols: u32,
    out: &mut [F],
) {
    // One check per launch each: every index below is compared with `rows`/`cols` or
    // `mask_rows`/`mask_cols` first, which proves the views' checks.
    let (image, mask, mut out) =
        (image.matrix(rows, cols), mask.matrix(mask_rows, mask_cols), out.matrix(rows, cols));
    let (x, y) = thread::index_2d();
    if x >= cols || y >= rows {
        return;
    }
    let (dr, dc) = (mask_rows / 2, mask_cols / 2);
    let mut acc = F::ZERO;
    for k in 0..mask_rows {
        // Image row y − k + dr; below zero it wraps to a huge value and fails the bound.
        let iy = (y + dr).wrapping_sub(k);
        if iy >= rows {
            continue;
        }
        let (image_row, mask_row) = (image.row(iy), mask.row(k));
        for l in 0..mask_cols {
            let ix = (x + dc).wrapping_sub(l);
            if ix < cols {
                acc = math::fma(mask_row[l as usize], image_row[ix as usize], acc);
            }
        }
    }
    out[(y, x)] = acc;
}

/// Tiled convolution: each block computes a [`TILED_TILE_COLS`] × [`TILED_TILE_ROWS`] tile of the
/// output, each thread [`TILED_ROWS_PER_THREAD`] consecutive rows of one column, accumulated in f32
/// with FMAs.
///
/// The block first copies the mask (flipped, so the sum becomes a correlation) and its input tile
/// with a halo of `mask − 1` rows and columns (zeros outside the image) into shared memory; every
/// image pixel and mask value is then read from global memory once per block. Per mask column a
/// thread loads its `rows per thread + mask_rows − 1` input values into registers and reuses each
/// for up to `mask_rows` outputs.
///
/// Arguments as for [`conv2d_naive`], in f32; `mask_rows` and `mask_cols` odd and at most
/// [`MAX_MASK_SIDE`] (another `mask_rows` writes nothing: the host wrapper validates). Launch with [`BLOCK_X`] × [`TILED_BLOCK_Y`] threads, a
/// grid of `⌈cols / TILED_TILE_COLS⌉ × ⌈rows / TILED_TILE_ROWS⌉` blocks and
/// [`tiled_shared_bytes`]`(mask_rows, mask_cols)` bytes of dynamic shared memory.
///
/// # Safety
/// `image` and `out` hold at least `rows·cols` values and `mask` `mask_rows·mask_cols`: the
/// kernel's global accesses are unchecked on the GPU (the checks cost 3%; the simulator keeps
/// them).
#[kernel]
pub unsafe fn conv2d_tiled(
    image: &[f32],
    rows: u32,
    cols: u32,
    mask: &[f32],
    mask_rows: u32,
    mask_cols: u32,
    out: &mut [f32],
) {
    // The mask height is a compile-time constant inside `tiled`, so that the per-column input
    // window and the loops over mask rows and output rows unroll into registers.
    let tile = Tile { image, rows, cols, mask, mask_cols, out };
    // The block's shape checked once, before the mask heights' copies of the kernel.
    let threads = shared::Threads::exactly::<BLOCK_X, TILED_BLOCK_Y>();
    // SAFETY: forwarded from the kernel's contract.
    unsafe {
        match mask_rows {
            1 => tile.run::<1>(threads),
            3 => tile.run::<3>(threads),
            5 => tile.run::<5>(threads),
            7 => tile.run::<7>(threads),
            9 => tile.run::<9>(threads),
            11 => tile.run::<11>(threads),
            13 => tile.run::<13>(threads),
            15 => tile.run::<15>(threads),
            17 => tile.run::<17>(threads),
            19 => tile.run::<19>(threads),
            21 => tile.run::<21>(threads),
            23 => tile.run::<23>(threads),
            25 => tile.run::<25>(threads),
            27 => tile.run::<27>(threads),
            29 => tile.run::<29>(threads),
            31 => tile.run::<31>(threads),
            _ => {}
        }
    }
}

/// The arguments of [`conv2d_tiled`], less the mask height; `image` and `out` hold exactly
/// `rows·cols` values.
#[derive(Clone, Copy)]
struct Tile {
    image: Slice<f32>,
    rows: u32,
    cols: u32,
    mask: Slice<f32>,
    mask_cols: u32,
    out: SliceMut<f32>,
}

impl Tile {
    #[inline(always)]
    /// # Safety
    /// As for [`conv2d_tiled`].
    unsafe fn run<const MH: usize>(self, threads: shared::Threads) {
        let Tile { image, rows, cols, mask, mask_cols, mut out } = self;
        let mw = mask_cols as usize;
        let mh_padded = padded_mask_rows(MH);
        let tile_cols = TILED_TILE_COLS as usize + mw - 1;
        let tile_rows = tile_rows(MH);

        // Shared layout: flipped[l·mh_padded + k] = mask[MH−1−k, mw−1−l] (0 for k ≥ MH), then the
        // tile, column-major: tile[(r, c)] = image[y0 − dr + r, x0 − dc + c].
        let mut smem = shared::Allocator::new();
        let mut flipped = smem.tile::<f32>(tiled_mask_len(MH, mw));
        let mut tile = smem.tile_columns::<f32>(tile_rows, tile_cols, tile_column_stride(MH));
        // Global indices are in range by the caller's contract (`image` and `out` hold rows·cols
        // values, `mask` mask_rows·mask_cols) and the comparisons before each access; unchecked on
        // the GPU because the checks cost 3% here (docs/benchmarks/kernel-forms.md), checked in the
        // simulator.
        flipped.fill(threads, |i: usize| {
            let (l, k) = (i / mh_padded, i % mh_padded);
            // SAFETY: `k < MH` and `l < mw`: inside the mask (see above).
            if k < MH { unsafe { mask.get_unchecked((MH - 1 - k) * mw + (mw - 1 - l)) } } else { 0.0 }
        });
        let x0 = thread::block_idx_x() * TILED_TILE_COLS;
        let y0 = thread::block_idx_y() * TILED_TILE_ROWS;
        let (dr, dc) = (MH as u32 / 2, mask_cols / 2);
        tile.fill(threads, |r: usize, c: usize| {
            // Below zero the subtraction wraps to a huge value and fails the bound. `&`, not `&&`:
            // one branch, which ptxas unrolls (with `&&`, two, and the staging loop stays rolled).
            let (gy, gx) = ((y0 + r as u32).wrapping_sub(dr), (x0 + c as u32).wrapping_sub(dc));
            if (gy < rows) & (gx < cols) {
                // SAFETY: `gy < rows` and `gx < cols`: inside the image (see above).
                unsafe { image.get_unchecked(gy as usize * cols as usize + gx as usize) }
            } else {
                0.0
            }
        });
        let (flipped, tile) = shared::sync_threads((flipped, tile));
        // flipped[(l, k / 4)]: mask rows k..k + 4 of column l in one 16-byte load.
        let flipped = flipped.into_f32x4().into_matrix(mw, mh_padded / 4);
        // tile_window[(g, l)] = tile[(first_row + 4g..first_row + 4g + 4, tx + l)], for
        // 4g < ROWS_PER_THREAD + MH − 1 and l < mw, the loops' bounds: 16 bytes a read.
        let tile_window = tile.window_f32x4(threads, ROWS_PER_THREAD, 1);

        // out[first_row + r] = Σ_{l, k} flipped[l, k] · tile[first_row + r + k, tx + l]. The loops
        // over the window, the mask rows and the output rows are unrolled, so `window`, `acc` and
        // `m4` live in registers; the conditions on `MH` fold away at compile time.
        let first_row = threads.y() as usize * ROWS_PER_THREAD;
        let mut acc = [0.0f32; ROWS_CAPACITY];
        // A 32-bit loop counter: with `0..mw` (usize) every iteration of the hot loop also carried
        // its high word (an add with carry and a 64-bit compare).
        for l in 0..mask_cols {
            let l = l as usize;
            let mut window = [0.0f32; WINDOW_CAPACITY];
            unroll!(g in [0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15] {
                if 4 * g < ROWS_PER_THREAD + MH - 1 {
                    let v = tile_window[(g, l)].0;
                    window[4 * g] = v[0];
                    window[4 * g + 1] = v[1];
                    window[4 * g + 2] = v[2];
                    window[4 * g + 3] = v[3];
                }
            });
            let mut m4 = [0.0f32; 4];
            unroll!(k in [0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 22 23 24 25 26 27 28 29
                          30] {
                if k < MH {
                    if k.is_multiple_of(4) {
                        m4 = flipped[(l, k / 4)].0;
                    }
                    unroll!(r in [0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 22 23 24 25 26 27 28
                                  29 30 31] {
                        if r < ROWS_PER_THREAD {
                            acc[r] = math::fma(m4[k % 4], window[r + k], acc[r]);
                        }
                    });
                }
            });
        }

        let x = x0 + threads.x();
        if x < cols {
            unroll!(r in [0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 22 23 24 25 26 27 28 29 30 31] {
                let y = y0 + (first_row + r) as u32;
                if r < ROWS_PER_THREAD && y < rows {
                    // SAFETY: `y < rows` and `x < cols`: inside the output (see above).
                    unsafe { out.set_unchecked(y as usize * cols as usize + x as usize, acc[r]) };
                }
            });
        }
    }
}
