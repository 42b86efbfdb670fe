//! Matrix transpose through shared memory: each block reads a 32 × 32 tile row by row and writes
//! it column by column, so that both the loads and the stores of a warp are coalesced.
//!
//! The example of shared memory as a staging buffer: the tile is 32 × 33 (one padding column), so
//! that a warp reading a tile column touches 32 different banks. Host side:
//! `host/src/families/transpose.rs`; tests: `tests/transpose.rs`; benchmark: `benches/transpose.rs`.

use gpu_std::{kernel, shared, thread};

/// Side of a tile.
pub const TILE: u32 = 32;
/// Rows of threads per block: a block is `TILE × ROWS` threads, each moving `TILE / ROWS`
/// elements.
pub const ROWS: u32 = 8;
/// Row length of the tile in shared memory: one padding element per row.
const STRIDE: u32 = TILE + 1;

/// Dynamic shared memory of [`transpose_f32`].
pub const fn shared_layout() -> shared::Layout {
    shared::Layout::new().array::<f32>((TILE * STRIDE) as usize)
}

/// `output = inputᵀ`: `input` is `rows × cols` row-major, `output` `cols × rows`.
///
/// Launch with `TILE × ROWS` blocks over a `ceil(cols / TILE) × ceil(rows / TILE)` grid and
/// [`shared_layout`]`()` bytes of dynamic shared memory.
#[kernel]
pub fn transpose_f32(input: &[f32], rows: u32, cols: u32, output: &mut [f32]) {
    let tile = shared::Allocator::new().array::<f32>((TILE * STRIDE) as usize);
    let (tx, ty) = (thread::thread_idx_x(), thread::thread_idx_y());
    let (col0, row0) = (thread::block_idx_x() * TILE, thread::block_idx_y() * TILE);
    let src = input.matrix(rows, cols);
    let mut j = ty;
    while j < TILE {
        let (r, c) = (row0 + j, col0 + tx);
        if r < rows && c < cols {
            // SAFETY: `j, tx < TILE`, inside the tile; each element written by one thread.
            unsafe { tile.write((j * STRIDE + tx) as usize, src[(r, c)]) };
        }
        j += ROWS;
    }
    thread::sync_threads();
    let mut dst = output.matrix(cols, rows);
    let mut j = ty;
    while j < TILE {
        // Output row `col0 + j` is input column `col0 + j`.
        let (r, c) = (col0 + j, row0 + tx);
        if r < cols && c < rows {
            // SAFETY: inside the tile; written before the barrier.
            dst[(r, c)] = unsafe { tile.read((tx * STRIDE + j) as usize) };
        }
        j += ROWS;
    }
}
