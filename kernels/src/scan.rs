//! Inclusive prefix sum (scan) of u32 arrays in one pass: decoupled look-back (Merrill & Garland,
//! as in CUB). Each block scans one tile of [`TILE`] elements; to learn the sum of everything
//! before its tile it reads the tiles before it, which publish their own sum as soon as they have
//! it and their inclusive prefix as soon as they know it, so a block rarely waits for more than the
//! tile just before.
//!
//! The example of the device library's ordered atomics and warp and block collectives: tiles are
//! numbered by an atomic counter in the order blocks start (so a block only ever waits for blocks
//! already running), a tile's status is one 64-bit word written and read atomically, and warp 0
//! looks back 32 tiles at a time with `ballot` and `reduce`. Host side: `host/src/families/scan.rs`; tests:
//! `tests/scan.rs`; benchmark: `benches/scan.rs`.

use gpu_std::{Slice, SliceMut, block, kernel, shared, thread, warp};

/// Threads per block.
pub const BLOCK: u32 = 256;
/// Rows of a warp's share: in row `q`, lane `l` holds the 4 consecutive elements at `128q + 4l`,
/// so that each row is one fully coalesced 16-byte load (and store) of the warp.
const ROWS: usize = 4;
/// Elements per warp.
const WARP_ITEMS: usize = ROWS * 128;
/// Elements per tile (one block's share).
pub const TILE: usize = (BLOCK / warp::WARP_SIZE) as usize * WARP_ITEMS;

/// Pause between two polls of a tile status that is not yet published.
const SPIN_PAUSE_NS: u32 = 100;

/// A tile's status word: high half `epoch << 2 | flag`, low half the value. A word from another
/// launch (another epoch) reads as "not yet".
const AGGREGATE: u32 = 1;
/// The value is the tile's inclusive prefix.
const PREFIX: u32 = 2;

/// Dynamic shared memory of [`inclusive_scan_u32`]: the block scan's scratch, the tile number and
/// the tile's exclusive prefix.
pub const fn shared_layout() -> shared::Layout {
    block::scratch_layout::<u32>(BLOCK).array::<u32>(1).array::<u32>(1)
}

#[inline(always)]
fn status(epoch: u32, flag: u32, value: u32) -> u64 {
    ((epoch << 2 | flag) as u64) << 32 | value as u64
}

/// `(flag, value)` of a status word; flag 0 for a word of another epoch.
#[inline(always)]
fn unpack(word: u64, epoch: u32) -> (u32, u32) {
    let high = (word >> 32) as u32;
    if high >> 2 == epoch { (high & 3, word as u32) } else { (0, 0) }
}

/// The sum (wrapping) of the tiles before `tile`, by warp 0: lane `l` reads tile `end − 1 − l`,
/// waiting until all 32 have published; the nearest with its inclusive prefix ends the search,
/// else the 32 sums are added and the window moves back.
#[inline(always)]
fn look_back(statuses: &SliceMut<u64>, tile: usize, epoch: u32) -> u32 {
    let lane = warp::lane_id() as usize;
    let mut exclusive = 0u32;
    let mut end = tile;
    loop {
        let (flag, value) = loop {
            // Before tile 0: nothing, as a prefix of 0.
            let (flag, value) = match end.checked_sub(1 + lane) {
                Some(p) => unpack(statuses.atomic(p).load(), epoch),
                None => (PREFIX, 0),
            };
            if warp::all_sync(warp::FULL_MASK, flag != 0) {
                break (flag, value);
            }
            // Back off: polling without a pause floods L2 with the waiting warps' loads.
            thread::nanosleep(SPIN_PAUSE_NS);
        };
        let prefixes = warp::ballot_sync(warp::FULL_MASK, flag == PREFIX);
        if prefixes != 0 {
            let nearest = prefixes.trailing_zeros() as usize;
            let part = if lane <= nearest { value } else { 0 };
            return exclusive.wrapping_add(warp::reduce(part, u32::wrapping_add));
        }
        exclusive = exclusive.wrapping_add(warp::reduce(value, u32::wrapping_add));
        end -= warp::WARP_SIZE as usize;
    }
}

/// `y[i] = x[0] + … + x[i]` (wrapping), in one launch.
///
/// Launch with blocks of [`BLOCK`] threads, exactly `ceil(n / TILE)` of them, and
/// [`shared_layout`]`()` bytes of dynamic shared memory; `statuses` holds one word per block,
/// `counter[0]` is 0 (it is again when the kernel ends), and `epoch` differs from every earlier
/// launch's on these `statuses` (and from 0, their initial value).
#[kernel]
pub fn inclusive_scan_u32(x: &[u32], epoch: u32, statuses: &mut [u64], counter: &mut [u32], y: &mut [u32]) {
    let threads = shared::Threads::block();
    let mut smem = shared::Allocator::new();
    let scratch = smem.scratch::<u32>(threads);
    // One slot each, so thread 0's: the tile number and the tile's exclusive prefix.
    let (mut tile_number, mut prefix) = (smem.tile::<u32>(1), smem.tile::<u32>(1));
    let t = thread::thread_idx_x();
    let tiles = thread::grid_dim_x();
    tile_number.fill(threads, |_: u32| {
        let tile = counter.atomic(0).fetch_add(1);
        if tile == tiles - 1 {
            // Every block has its tile: ready for the next launch.
            counter.atomic(0).store(0);
        }
        tile
    });
    let tile = shared::sync_threads(tile_number)[0] as usize;

    let n = x.len().min(y.len());
    let lane = warp::lane_id() as usize;
    let first = tile * TILE + warp::warp_id() as usize * WARP_ITEMS + 4 * lane;
    let vector = tile * TILE + TILE <= n
        && (x.as_ptr() as usize).is_multiple_of(16)
        && (y.as_ptr() as usize).is_multiple_of(16);
    let mut rows = [[0u32; 4]; ROWS];
    for (q, row) in rows.iter_mut().enumerate() {
        *row = load4(x, first + 128 * q, n, vector);
    }
    // Each row: the lane's 4 elements, then the lanes before it, then the rows before it.
    let mut before_row = 0u32;
    for row in &mut rows {
        for j in 1..4 {
            row[j] = row[j].wrapping_add(row[j - 1]);
        }
        let through_lane = warp::inclusive_scan(row[3], u32::wrapping_add);
        let before_lane = warp::shfl_up_sync(warp::FULL_MASK, through_lane, 1);
        let offset = before_row.wrapping_add(if lane == 0 { 0 } else { before_lane });
        for v in row.iter_mut() {
            *v = v.wrapping_add(offset);
        }
        before_row = before_row.wrapping_add(warp::shfl_sync(warp::FULL_MASK, through_lane, 31));
    }
    // The warps before this one: only each warp's last lane contributes its warp's total.
    let warp_total = if lane == 31 { before_row } else { 0 };
    let (before_warp, tile_total) = block::exclusive_scan(warp_total, u32::wrapping_add, 0, &scratch);

    if warp::warp_id() == 0 {
        if t == 0 && tile > 0 {
            statuses.atomic(tile).store(status(epoch, AGGREGATE, tile_total));
        }
        let before_tile = if tile == 0 { 0 } else { look_back(&statuses, tile, epoch) };
        prefix.fill(threads, |_: u32| {
            statuses.atomic(tile).store(status(epoch, PREFIX, before_tile.wrapping_add(tile_total)));
            before_tile
        });
    }
    let before = shared::sync_threads(prefix)[0].wrapping_add(before_warp);
    for (q, row) in rows.iter().enumerate() {
        store4(y, first + 128 * q, n, vector, row.map(|v| v.wrapping_add(before)));
    }
}

/// Elements `at..at + 4` (0 past `n`): one 16-byte load with `vector`.
#[inline(always)]
fn load4(x: Slice<u32>, at: usize, n: usize, vector: bool) -> [u32; 4] {
    if vector {
        // SAFETY: the whole tile is below `n` and 16-byte aligned (`vector`); `x` is read-only.
        unsafe { x.load_u32x4_unchecked(at) }
    } else {
        core::array::from_fn(|j| if at + j < n { x[at + j] } else { 0 })
    }
}

/// Stores elements `at..at + 4` (not past `n`): one 16-byte store with `vector`.
#[inline(always)]
fn store4(mut y: SliceMut<u32>, at: usize, n: usize, vector: bool, values: [u32; 4]) {
    if vector {
        // SAFETY: the whole tile is below `n` and 16-byte aligned (`vector`); these elements are
        // this thread's alone.
        unsafe { y.store_u32x4_unchecked(at, values) };
    } else {
        for (j, &v) in values.iter().enumerate() {
            if at + j < n {
                y[at + j] = v;
            }
        }
    }
}
