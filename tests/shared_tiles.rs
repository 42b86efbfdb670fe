//! The safe shared-memory types of `gpu_std::shared` in the simulator: tiles filled by their
//! owners and read after the barrier, 2-D tiles and a stencil's halo window, shared counters, the
//! block collectives' scratch — and every rule the types leave to the kernel reported with kernel,
//! block, thread and line when broken: an index out of range, a block of the wrong shape, tiles
//! that do not fit, threads meeting at different barriers, and tiles that alias. Reading a tile
//! before the barrier does not compile (the `compile_fail` example in `gpu_std::shared`'s docs).

use gpu_std::shared::{self, Allocator, F32x4, Threads};
use gpu_std::{block, kernel, thread};
use kernel_suite::{Device, Dim3, LaunchConfig};

/// Reverses each block's `blockDim` elements of `x` into `y` through a 1-D tile.
#[kernel]
pub fn tile_reverse(x: &[u32], y: &mut [u32]) {
    let threads = Threads::block();
    let n = threads.count() as usize;
    let base = thread::block_idx_x() as usize * n;
    let mut tile = Allocator::new().tile::<u32>(n);
    tile.fill(threads, |i: usize| x[base + i]);
    let tile = shared::sync_threads(tile);
    let i = threads.rank() as usize;
    y[base + i] = tile[n - 1 - i];
}

/// Side of [`box_blur`]'s tile of outputs, and its threads per block in each direction.
const SIDE: u32 = 8;

/// `out[(r, c)]` = the sum of the 3 × 3 neighbourhood of `(r, c)` in the `rows × cols` image
/// `x` (0 outside), two outputs per thread (rows `2y`, `2y + 1` of the block's 16 × 8 tile of
/// outputs): a halo tile of 18 × 10, filled by an 8 × 8 block, read through each thread's window.
#[kernel]
pub fn box_blur(x: &[f32], rows: u32, cols: u32, out: &mut [f32]) {
    let threads = Threads::exactly::<SIDE, SIDE>();
    let (img, mut out) = (x.matrix(rows, cols), out.matrix(rows, cols));
    let (r0, c0) = (thread::block_idx_y() * 2 * SIDE, thread::block_idx_x() * SIDE);
    let mut tile =
        Allocator::new().tile_rows::<f32>(2 * SIDE as usize + 2, SIDE as usize + 2, SIDE as usize + 3);
    tile.fill(threads, |r: u32, c: u32| {
        let (ir, ic) = ((r0 + r).wrapping_sub(1), (c0 + c).wrapping_sub(1));
        if ir < rows && ic < cols { img[(ir, ic)] } else { 0.0 }
    });
    let tile = shared::sync_threads(tile);
    let window = tile.window(threads, 2, 1);
    for o in 0..2 {
        let mut sum = 0.0;
        for i in 0..3 {
            for j in 0..3 {
                sum += window[(o + i, j)];
            }
        }
        let (r, c) = (r0 + 2 * threads.y() + o as u32, c0 + threads.x());
        if r < rows && c < cols {
            out[(r, c)] = sum;
        }
    }
}

/// Every slot of a 1-D tile of `len` and a 2-D tile of `rows × cols`, written by its owner (the
/// race check stops a second writer), copied out by thread 0 after the barrier: extents of one to
/// four times the threads along them (the owners' loops counted) and others (`while` loops).
#[kernel]
pub fn fill_coverage(len: u32, rows: u32, cols: u32, out: &mut [u32]) {
    let threads = Threads::exactly::<8, 4>();
    let mut smem = Allocator::new();
    let mut flat = smem.tile::<u32>(len as usize);
    let mut square = smem.tile_rows::<u32>(rows as usize, cols as usize, cols as usize + 1);
    flat.fill(threads, |i: u32| 3 * i + 1);
    square.fill(threads, |r: u32, c: u32| 1000 * r + c);
    let (flat, square) = shared::sync_threads((flat, square));
    if threads.rank() == 0 {
        let (len, rows, cols) = (len as usize, rows as usize, cols as usize);
        for i in 0..len {
            out[i] = flat[i];
        }
        for r in 0..rows {
            for c in 0..cols {
                out[len + r * cols + c] = square[(r, c)];
            }
        }
    }
}

/// Per block and bin `b` of `x[i] % 16`: the count (`fetch_add`, whose results number the
/// values of a bin as they arrive, in `order`), the sum (`add`) and the largest value
/// (`fetch_max`), written to `out[48·block + 16·k + b]`.
#[kernel]
pub fn counters_probe(x: &[u32], out: &mut [u32], order: &mut [u32]) {
    let threads = Threads::block();
    let i = thread::index_1d() as usize;
    let mut smem = Allocator::new();
    let zeroed = (
        smem.counters::<u32>(16, threads),
        smem.counters::<u32>(16, threads),
        smem.counters::<u32>(16, threads),
    );
    let (counts, sums, largest) = shared::sync_threads(zeroed);
    let v = x[i];
    let bin = (v % 16) as usize;
    order[i] = counts.fetch_add(bin, 1);
    sums.add(bin, v);
    largest.fetch_max(bin, v);
    let (counts, sums, largest) = shared::sync_threads((counts, sums, largest));
    let (o, t) = (48 * thread::block_idx_x() as usize, threads.rank() as usize);
    if t < 16 {
        out[o + t] = counts[t];
        out[o + 16 + t] = sums[t];
        out[o + 32 + t] = largest[t];
    }
}

/// Block reduction and scans through a safe scratch, the block of any whole number of warps.
#[kernel]
pub fn scratch_probe(x: &[u32], out: &mut [u32]) {
    let i = thread::index_1d() as usize;
    let scratch = Allocator::new().scratch::<u32>(Threads::block());
    let sum = block::reduce(x[i], |a, b| a + b, &scratch);
    let (inclusive, total) = block::inclusive_scan(x[i], |a, b| a + b, &scratch);
    let (exclusive, _) = block::exclusive_scan(x[i], |a, b| a + b, 0, &scratch);
    out[3 * i] = sum;
    out[3 * i + 1] = inclusive;
    out[3 * i + 2] = exclusive + (total != sum) as u32;
}

/// Each thread's window of a column-major 20 × 6 tile (pitch `pitch`) of `1000·r + c`, read four
/// rows at a time: a block of 4 × 2 threads, 8 rows and 1 column each, so a window of 12 × 3
/// (three groups of four rows); thread `t` writes its 36 values to `out[36·t..]`, column by
/// column.
#[kernel]
pub fn window_f32x4_probe(pitch: u32, out: &mut [f32]) {
    let threads = Threads::exactly::<4, 2>();
    let mut tile = Allocator::new().tile_columns::<f32>(20, 6, pitch as usize);
    tile.fill(threads, |r: u32, c: u32| (1000 * r + c) as f32);
    let tile = shared::sync_threads(tile);
    let window = tile.window_f32x4(threads, 8, 1);
    let t = threads.rank() as usize;
    for g in 0..3 {
        for j in 0..3 {
            let F32x4(group) = window[(g, j)];
            for (l, value) in group.into_iter().enumerate() {
                out[36 * t + 12 * j + 4 * g + l] = value;
            }
        }
    }
}

/// Reads slot `len` of a tile of `len` (thread 5 of each block only).
#[kernel]
pub fn tile_overrun(out: &mut [u32]) {
    let threads = Threads::block();
    let mut tile = Allocator::new().tile::<u32>(32);
    tile.fill(threads, |i: u32| i);
    let tile = shared::sync_threads(tile);
    let t = threads.rank() as usize;
    out[t] = tile[if t == 5 { 32 } else { t % 32 }];
}

/// A `8 × 8` tile in a block of another shape.
#[kernel]
pub fn wrong_shape(out: &mut [u32]) {
    let threads = Threads::exactly::<8, 8>();
    out[threads.rank() as usize] = 1;
}

/// Asks for more shared memory than the launch gives.
#[kernel]
pub fn too_big(out: &mut [u32]) {
    let tile = Allocator::new().tile::<u32>(65);
    out[thread::index_1d() as usize] = tile.len() as u32;
}

/// Warp 0 and warp 1 turn the tile readable at two different barriers.
#[kernel]
pub fn divergent_barrier(out: &mut [u32]) {
    let threads = Threads::block();
    let mut tile = Allocator::new().tile::<u32>(64);
    tile.fill(threads, |i: u32| i);
    let t = threads.rank() as usize;
    if t < 32 {
        out[t] = shared::sync_threads(tile)[63 - t];
    } else {
        out[t] = shared::sync_threads(tile)[63 - t] + 1;
    }
}

/// Two allocators over the same memory: a 1-D tile and a 2-D one whose owners differ, both written
/// in the same phase.
#[kernel]
pub fn aliased_tiles(out: &mut [u32]) {
    let threads = Threads::block();
    let mut flat = Allocator::new().tile::<u32>(64);
    let mut square = Allocator::new().tile_rows::<u32>(8, 8, 8);
    flat.fill(threads, |i: u32| i);
    square.fill(threads, |r: u32, c: u32| 100 * r + c);
    let (flat, _square) = shared::sync_threads((flat, square));
    out[threads.rank() as usize] = flat[0];
}

/// The error of a launch that must fail in the simulator: its message.
fn panic_message(launch: impl FnOnce() -> kernel_suite::Result<()>) -> String {
    launch().expect_err("the launch must fail").to_string()
}

/// The line of this file that contains `text`.
fn line_of(text: &str) -> usize {
    1 + include_str!("shared_tiles.rs").lines().position(|l| l.contains(text)).expect("the line")
}

#[test]
fn a_tile_filled_by_its_owners_is_read_after_the_barrier() {
    let device = Device::simulator();
    for block in [32u32, 96, 256] {
        let n = 3 * block as usize;
        let x: Vec<u32> = (0..n as u32).map(|i| i.wrapping_mul(2_654_435_761)).collect();
        let dx = device.upload(&x).unwrap();
        let mut dy = device.alloc::<u32>(n).unwrap();
        let cfg = LaunchConfig::for_1d(n, block)
            .with_shared_bytes(shared::Layout::new().array::<u32>(block as usize).bytes_u32());
        unsafe { device.launch(&TILE_REVERSE, cfg, (&dx, &mut dy)).unwrap() };
        let y = device.download(&dy).unwrap();
        for (b, chunk) in x.chunks(block as usize).enumerate() {
            let reversed: Vec<u32> = chunk.iter().rev().copied().collect();
            assert_eq!(&y[b * block as usize..][..chunk.len()], &reversed[..], "block {b} of {block}");
        }
    }
}

#[test]
fn every_slot_is_filled_once_by_its_owner() {
    let device = Device::simulator();
    // 32 threads, 8 × 4: the 1-D extents 32, 64, 96, 128 and the row counts 4, 8, 16 are counted
    // (one to four slots each), the others (more rounds, or not a multiple) `while` loops.
    for (len, rows, cols) in [
        (1u32, 3u32, 9u32),
        (31, 4, 8),
        (32, 8, 16),
        (64, 16, 9),
        (96, 20, 8),
        (128, 21, 1),
        (160, 1, 33),
        (161, 2, 7),
    ] {
        let n = (len + rows * cols) as usize;
        let mut out = device.alloc::<u32>(n).unwrap();
        let bytes = shared::Layout::new()
            .array::<u32>(len as usize)
            .array::<u32>((rows * (cols + 1)) as usize)
            .bytes_u32();
        let cfg = LaunchConfig { grid: Dim3::xy(1, 1), block: Dim3::xy(8, 4), shared_bytes: bytes };
        unsafe { device.launch(&FILL_COVERAGE, cfg, (len, rows, cols, &mut out)).unwrap() };
        let want: Vec<u32> = (0..len)
            .map(|i| 3 * i + 1)
            .chain((0..rows).flat_map(|r| (0..cols).map(move |c| 1000 * r + c)))
            .collect();
        assert_eq!(device.download(&out).unwrap(), want, "len {len}, rows {rows}, cols {cols}");
    }
}

#[test]
fn a_halo_tile_feeds_a_stencil() {
    let device = Device::simulator();
    let (rows, cols) = (37usize, 29usize);
    let x: Vec<f32> = (0..rows * cols).map(|i| ((i * 7919) % 101) as f32).collect();
    let dx = device.upload(&x).unwrap();
    let mut out = device.alloc::<f32>(rows * cols).unwrap();
    let tile_bytes =
        shared::Layout::new().array::<f32>((2 * SIDE as usize + 2) * (SIDE as usize + 3)).bytes_u32();
    let cfg = LaunchConfig {
        grid: Dim3::xy(cols.div_ceil(SIDE as usize) as u32, rows.div_ceil(2 * SIDE as usize) as u32),
        block: Dim3::xy(SIDE, SIDE),
        shared_bytes: tile_bytes,
    };
    unsafe { device.launch(&BOX_BLUR, cfg, (&dx, rows as u32, cols as u32, &mut out)).unwrap() };
    let got = device.download(&out).unwrap();
    for r in 0..rows {
        for c in 0..cols {
            let mut want = 0.0;
            for i in r.saturating_sub(1)..(r + 2).min(rows) {
                for j in c.saturating_sub(1)..(c + 2).min(cols) {
                    want += x[i * cols + j];
                }
            }
            assert_eq!(got[r * cols + c], want, "({r}, {c})");
        }
    }
}

#[test]
fn shared_counters_take_concurrent_atomics() {
    let device = Device::simulator();
    let (blocks, block) = (3usize, 128usize);
    let x: Vec<u32> = (0..(blocks * block) as u32).map(|i| i.wrapping_mul(2_654_435_761) >> 5).collect();
    let dx = device.upload(&x).unwrap();
    let mut out = device.alloc::<u32>(48 * blocks).unwrap();
    let mut order = device.alloc::<u32>(x.len()).unwrap();
    let bytes = shared::Layout::new().array::<u32>(16).array::<u32>(16).array::<u32>(16).bytes_u32();
    let cfg = LaunchConfig::for_1d(x.len(), block as u32).with_shared_bytes(bytes);
    unsafe { device.launch(&COUNTERS_PROBE, cfg, (&dx, &mut out, &mut order)).unwrap() };
    let (out, order) = (device.download(&out).unwrap(), device.download(&order).unwrap());
    for (b, chunk) in x.chunks(block).enumerate() {
        for bin in 0..16u32 {
            let values: Vec<u32> = chunk.iter().copied().filter(|v| v % 16 == bin).collect();
            let at = |k: usize| out[48 * b + 16 * k + bin as usize];
            assert_eq!(at(0), values.len() as u32, "block {b}, bin {bin}");
            assert_eq!(at(1), values.iter().fold(0u32, |a, &v| a.wrapping_add(v)), "block {b}, bin {bin}");
            assert_eq!(at(2), values.iter().copied().max().unwrap_or(0), "block {b}, bin {bin}");
            // fetch_add gave each value of the bin a different number below the count.
            let mut numbers: Vec<u32> =
                (0..block).filter(|&i| chunk[i] % 16 == bin).map(|i| order[b * block + i]).collect();
            numbers.sort();
            assert_eq!(numbers, (0..values.len() as u32).collect::<Vec<_>>(), "block {b}, bin {bin}");
        }
    }
}

#[test]
fn block_collectives_use_a_safe_scratch() {
    let device = Device::simulator();
    for block in [32u32, 64, 160, 1024] {
        let x: Vec<u32> = (0..2 * block).map(|i| i % 13 + 1).collect();
        let dx = device.upload(&x).unwrap();
        let mut out = device.alloc::<u32>(3 * x.len()).unwrap();
        let cfg = LaunchConfig::for_1d(x.len(), block)
            .with_shared_bytes(block::scratch_layout::<u32>(block).bytes_u32());
        unsafe { device.launch(&SCRATCH_PROBE, cfg, (&dx, &mut out)).unwrap() };
        let out = device.download(&out).unwrap();
        for (b, chunk) in x.chunks(block as usize).enumerate() {
            let sum: u32 = chunk.iter().sum();
            let mut before = 0;
            for (t, &v) in chunk.iter().enumerate() {
                let i = b * block as usize + t;
                assert_eq!(out[3 * i..3 * i + 3], [sum, before + v, before], "block {block}, thread {t}");
                before += v;
            }
        }
    }
}

/// A column-major tile read four rows at a time through each thread's halo window
/// (`window_f32x4`): every value in place, and a pitch that would misalign the groups reported.
#[test]
fn a_column_tile_is_read_four_rows_at_a_time() {
    let device = Device::simulator();
    let cfg = |pitch: usize| LaunchConfig {
        grid: Dim3::x(1),
        block: Dim3::xy(4, 2),
        shared_bytes: shared::Layout::new().array::<f32>(6 * pitch).bytes_u32(),
    };
    for pitch in [20usize, 24] {
        let mut out = device.upload(&vec![f32::NAN; 8 * 36]).unwrap();
        unsafe { device.launch(&WINDOW_F32X4_PROBE, cfg(pitch), (pitch as u32, &mut out)).unwrap() };
        let got = device.download(&out).unwrap();
        for (t, window) in got.chunks(36).enumerate() {
            let (x, y) = (t % 4, t / 4);
            for j in 0..3 {
                for i in 0..12 {
                    let want = (1000 * (8 * y + i) + x + j) as f32;
                    assert_eq!(
                        window[12 * j + i],
                        want,
                        "pitch {pitch}, thread ({x}, {y}), window ({i}, {j})"
                    );
                }
            }
        }
    }
    let mut out = device.alloc::<f32>(8 * 36).unwrap();
    let message = panic_message(|| unsafe { device.launch(&WINDOW_F32X4_PROBE, cfg(22), (22u32, &mut out)) });
    let line = line_of("let window = tile.window_f32x4(threads, 8, 1);");
    assert!(message.contains(&format!("at tests/shared_tiles.rs:{line}:")), "{message}");
    assert!(message.contains("read as F32x4 is not 16-byte aligned"), "{message}");
}

#[test]
fn a_read_out_of_range_names_kernel_block_thread_and_line() {
    let device = Device::simulator();
    let mut out = device.alloc::<u32>(64).unwrap();
    let cfg = LaunchConfig::for_1d(64, 64).with_shared_bytes(32 * 4);
    let message = panic_message(|| unsafe { device.launch(&TILE_OVERRUN, cfg, (&mut out,)) });
    let line = line_of("out[t] = tile[if t == 5 { 32 } else { t % 32 }];");
    assert!(
        message.starts_with(&format!(
            "kernel `tile_overrun` panicked in block (0, 0, 0), thread (5, 0, 0) at tests/shared_tiles.rs:{line}:"
        )),
        "{message}"
    );
    assert!(message.ends_with(": shared tile index 32 out of range for a tile of 32 slots"), "{message}");
}

#[test]
fn a_block_of_the_wrong_shape_is_reported() {
    let device = Device::simulator();
    let mut out = device.alloc::<u32>(64).unwrap();
    let message =
        panic_message(|| unsafe { device.launch(&WRONG_SHAPE, LaunchConfig::for_1d(64, 64), (&mut out,)) });
    let line = line_of("let threads = Threads::exactly::<8, 8>();");
    assert!(message.contains(&format!("at tests/shared_tiles.rs:{line}:")), "{message}");
    assert!(
        message.contains(": shared::Threads::exactly::<8, 8>() in a block of 64 × 1 × 1 threads"),
        "{message}"
    );
}

#[test]
fn tiles_past_the_launch_shared_memory_are_reported() {
    let device = Device::simulator();
    let mut out = device.alloc::<u32>(32).unwrap();
    let cfg = LaunchConfig::for_1d(32, 32).with_shared_bytes(64 * 4);
    let message = panic_message(|| unsafe { device.launch(&TOO_BIG, cfg, (&mut out,)) });
    let line = line_of("let tile = Allocator::new().tile::<u32>(65);");
    assert!(message.contains(&format!("at tests/shared_tiles.rs:{line}:")), "{message}");
    assert!(
        message.contains(
            ": shared tiles up to byte 260 do not fit in the launch's 256 bytes of dynamic shared memory"
        ),
        "{message}"
    );
}

#[test]
fn threads_meeting_at_different_barriers_are_reported() {
    let device = Device::simulator();
    let mut out = device.alloc::<u32>(64).unwrap();
    let cfg = LaunchConfig::for_1d(64, 64).with_shared_bytes(64 * 4);
    let message = panic_message(|| unsafe { device.launch(&DIVERGENT_BARRIER, cfg, (&mut out,)) });
    assert!(
        message.starts_with("kernel `divergent_barrier` panicked in block (0, 0, 0), thread ("),
        "{message}"
    );
    let first = line_of("out[t] = shared::sync_threads(tile)[63 - t];");
    assert!(
        message.contains(&format!(
            "the block's threads meet at different barriers, tests/shared_tiles.rs:{first}:"
        )),
        "{message}"
    );
    assert!(message.contains(&format!("and tests/shared_tiles.rs:{}:", first + 2)), "{message}");
}

#[test]
fn aliasing_tiles_are_reported_as_a_race() {
    let device = Device::simulator();
    let mut out = device.alloc::<u32>(64).unwrap();
    let cfg = LaunchConfig::for_1d(64, 64).with_shared_bytes(64 * 4);
    let message = panic_message(|| unsafe { device.launch(&ALIASED_TILES, cfg, (&mut out,)) });
    // Thread 0 runs to the barrier first, writing both tiles; thread 8's first write conflicts.
    let line = line_of("flat.fill(threads, |i: u32| i);");
    assert!(message.starts_with("kernel `aliased_tiles` panicked in block (0, 0, 0), thread ("), "{message}");
    assert!(message.contains(&format!("at tests/shared_tiles.rs:{line}:")), "{message}");
    assert!(message.contains(": shared-memory race: this thread writes byte "), "{message}");
    assert!(message.contains("which thread ("), "{message}");
    assert!(message.contains(") wrote since the last barrier"), "{message}");
}
