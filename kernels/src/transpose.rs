//! Matrix transpose through shared memory: each block reads a 32 × 32 tile row by row and writes
//! it column by column, so that both the loads and the stores of a warp are coalesced.
//!
//! The example of shared memory as a staging buffer: the tile is 32 × 33 (one padding column), so
//! that a warp reading a tile column touches 32 different banks. Safe shared memory: a
//! [`shared::Tile2d`] filled by its owners, read after `shared::sync_threads`. Generic over the
//! element (`f32`, and `f64` for the exact SVD, which makes a wide matrix tall with it) and batched
//! over the grid's `z`. Host side: `host/src/families/transpose.rs`; tests: `tests/transpose.rs`;
//! benchmark: `benches/transpose.rs`.

use gpu_std::{Float, kernel, shared, thread};

/// Side of a tile.
pub const TILE: u32 = 32;
/// Rows of threads per block: a block is `TILE × ROWS` threads, each moving `TILE / ROWS`
/// elements.
pub const ROWS: u32 = 8;
/// Row length of the tile in shared memory: one padding element per row.
const STRIDE: u32 = TILE + 1;

/// Dynamic shared memory of [`transpose`] for elements of `T`.
pub const fn shared_layout<T>() -> shared::Layout {
    shared::Layout::new().array::<T>((TILE * STRIDE) as usize)
}

/// `output = inputᵀ` for each matrix of a batch: `input` holds `rows × cols` row-major matrices,
/// `output` their `cols × rows` transposes, both `rows·cols` apart.
///
/// Launch with `TILE × ROWS` blocks over a `ceil(cols / TILE) × ceil(rows / TILE) × matrices` grid
/// and [`shared_layout`]`::<T>()` bytes of dynamic shared memory.
#[kernel(f32, f64)]
pub fn transpose<T: Float + shared::Plain>(input: &[T], rows: u32, cols: u32, output: &mut [T]) {
    let threads = shared::Threads::exactly::<TILE, ROWS>();
    let t = TILE as usize;
    let mut tile = shared::Allocator::new().tile_rows::<T>(t, t, STRIDE as usize);
    let (col0, row0) = (thread::block_idx_x() * TILE, thread::block_idx_y() * TILE);
    let len = rows as usize * cols as usize;
    let first = thread::block_idx_z() as usize * len;
    let src = input.sub(first, len).matrix(rows, cols);
    // Element (j, i) of the tile is input (row0 + j, col0 + i); thread (x, y) loads rows
    // y, y + ROWS, … of column x.
    tile.fill_where(threads, |j: u32, i: u32| {
        let (r, c) = (row0 + j, col0 + i);
        (r < rows && c < cols).then(|| src[(r, c)])
    });
    let tile = shared::sync_threads(tile);
    let mut dst = output.sub(first, len).matrix(cols, rows);
    let tx = threads.x();
    let mut j = threads.y();
    while j < TILE {
        // Output row `col0 + j` is input column `col0 + j`.
        let (r, c) = (col0 + j, row0 + tx);
        if r < cols && c < rows {
            dst[(r, c)] = tile[(tx as usize, j as usize)];
        }
        j += ROWS;
    }
}
