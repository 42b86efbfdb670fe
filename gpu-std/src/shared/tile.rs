//! The safe shared-memory types: [`Threads`], the tiles and their phases, the counters, the
//! allocation of the block collectives' scratch, and [`sync_threads`](fn@sync_threads) (documented
//! with the [`shared`](super) module).

use super::{Allocator, dynamic_bytes, region};
use crate::atomic::{Atomic, AtomicRef, Scope, Space};
use crate::thread;
use crate::warp::Shuffle;
use core::ops::Index;

/// Plain data: a `Copy` type for which every bit pattern is a value (the integers, `f32`, `f64`
/// and arrays of them), so that reading a slot no thread wrote is not undefined behaviour.
///
/// # Safety
/// Every bit pattern of `size_of::<Self>()` bytes must be a valid `Self`, with no padding.
pub unsafe trait Plain: Copy {}

macro_rules! plain {
    ($($t:ty),*) => {$(
        // SAFETY: a primitive integer or float: every bit pattern is a value.
        unsafe impl Plain for $t {}
    )*};
}
plain!(u8, u16, u32, u64, i8, i16, i32, i64, f32, f64);
// SAFETY: an array of plain values has no padding and no invalid bit patterns.
unsafe impl<T: Plain, const N: usize> Plain for [T; N] {}

/// The index type of a write phase's loops, as the closure given to [`Tile::fill`] or
/// [`Tile2d::fill`] takes it: `u32` or `usize`. On the GPU the two compile differently (32- or
/// 64-bit induction variables, and the unrolling that follows), so the kernel chooses, as it would
/// for its own loop.
pub trait TileIndex:
    Copy
    + PartialOrd
    + core::ops::Add<Output = Self>
    + core::ops::Div<Output = Self>
    + core::ops::Rem<Output = Self>
    + sealed::Index
{
}
impl TileIndex for u32 {}
impl TileIndex for usize {}

/// The most slots per thread that [`for_each_owned!`] counts (so that LLVM unrolls them); more
/// stay a `while` loop.
const MAX_ROUNDS: u32 = 4;

/// How many slots each thread owns along a dimension of `extent` slots shared by `step` threads,
/// where that is the same for every thread, up to [`MAX_ROUNDS`], and both are constants on the GPU
/// (so that the answer is one too): `extent / step` where `step` divides `extent`.
#[inline(always)]
fn counted_rounds<I: TileIndex>(extent: I, step: I) -> Option<u32> {
    let zero = I::from_u32(0);
    #[cfg(target_arch = "nvptx64")]
    let known =
        core::intrinsics::is_val_statically_known(extent) && core::intrinsics::is_val_statically_known(step);
    #[cfg(not(target_arch = "nvptx64"))]
    let known = true;
    if known && step > zero && extent % step == zero && extent / step <= I::from_u32(MAX_ROUNDS) {
        Some((extent / step).to_usize() as u32)
    } else {
        None
    }
}

/// Runs `$body` with `$i` bound to each of this thread's slots along one dimension of a tile:
/// `$start, $start + $step, …` below `$extent`, where `$start < $step` is the thread's coordinate
/// and `$step` the threads along the dimension.
///
/// Where `$extent` and `$step` are constants and `$extent` is one to [`MAX_ROUNDS`] times `$step`
/// (a block of fixed shape, [`Threads::exactly`], over a tile of a few times its size), every
/// thread has `$extent / $step` slots: the loop counts them, a constant trip count that LLVM
/// unrolls (a fill's loads all in flight before its stores, a zeroing a few stores), where
/// `while i < extent` is a loop whose trip count depends on the thread. Otherwise (launch-sized
/// blocks, tiles sized at run time, more rounds) it is that `while` loop, as a kernel would write
/// it. The simulator counts wherever the numbers allow, constants or not, so both forms run there.
/// A macro, not a function taking a closure, so that the race check's records name the kernel's
/// line (`#[track_caller]` does not reach into closures).
macro_rules! for_each_owned {
    ($i:ident in $start:expr, $extent:expr, $step:expr => $body:block) => {{
        let (start, extent, step) = ($start, $extent, $step);
        let mut next = start;
        if let Some(rounds) = counted_rounds(extent, step) {
            for _ in 0..rounds {
                // Always true (`start < step`, and `step` divides `extent`); LLVM drops it where
                // it knows `start < step` (`Threads::exactly`).
                if next < extent {
                    let $i = next;
                    $body
                }
                next = next + step;
            }
        } else {
            while next < extent {
                let $i = next;
                $body
                next = next + step;
            }
        }
    }};
}

/// This thread's place in the block seen as an `nx × ny` grid of threads (x fastest): the map from
/// threads to the slots they own in a tile's write phase. Either constructor gives every thread of
/// a block the same grid, so ownership never overlaps between threads.
#[derive(Clone, Copy, Debug)]
pub struct Threads {
    x: u32,
    y: u32,
    nx: u32,
    ny: u32,
}

impl Threads {
    /// The block as it is launched: `nx = blockDim.x`, `ny = blockDim.y·blockDim.z`, this thread at
    /// `(threadIdx.x, threadIdx.y + blockDim.y·threadIdx.z)`. Any block shape.
    #[inline(always)]
    pub fn block() -> Self {
        let by = thread::block_dim_y();
        Threads {
            x: thread::thread_idx_x(),
            y: thread::thread_idx_y() + by * thread::thread_idx_z(),
            nx: thread::block_dim_x(),
            ny: by * thread::block_dim_z(),
        }
    }

    /// A block of exactly `BX × BY × 1` threads, checked here (a panic in the simulator, `trap` on
    /// the GPU): the grid's size is then a constant, and the compiler knows `x() < BX` and
    /// `y() < BY`, which folds loops and bounds checks built on them.
    #[inline(always)]
    #[cfg_attr(not(target_arch = "nvptx64"), track_caller)]
    pub fn exactly<const BX: u32, const BY: u32>() -> Self {
        if thread::block_dim_x() != BX || thread::block_dim_y() != BY || thread::block_dim_z() != 1 {
            wrong_block(BX, BY);
        }
        let (x, y) = (thread::thread_idx_x(), thread::thread_idx_y());
        // SAFETY: a thread's indices are below its block's dimensions, BX × BY × 1 (checked above).
        // `threadIdx.z = 0` too, which folds ranks computed from all three (`warp::warp_id`).
        unsafe { core::hint::assert_unchecked(x < BX && y < BY && thread::thread_idx_z() == 0) };
        Threads { x, y, nx: BX, ny: BY }
    }

    /// This thread's column in the grid (`threadIdx.x`).
    #[inline(always)]
    pub fn x(self) -> u32 {
        self.x
    }

    /// This thread's row in the grid.
    #[inline(always)]
    pub fn y(self) -> u32 {
        self.y
    }

    /// This thread's rank, `y·nx + x`: [`thread_rank_in_block`](crate::thread::thread_rank_in_block).
    #[inline(always)]
    pub fn rank(self) -> u32 {
        self.y * self.nx + self.x
    }

    /// Threads in the block, `nx·ny`.
    #[inline(always)]
    pub fn count(self) -> u32 {
        self.nx * self.ny
    }
}

/// Stops the kernel: the block is not `bx × by × 1`.
#[cold]
#[cfg_attr(target_arch = "nvptx64", inline(always))]
#[cfg_attr(not(target_arch = "nvptx64"), inline(never), track_caller)]
fn wrong_block(bx: u32, by: u32) -> ! {
    #[cfg(target_arch = "nvptx64")]
    {
        let _ = (bx, by);
        // SAFETY: `trap` aborts the kernel; the host sees a launch failure.
        unsafe { core::arch::nvptx::trap() }
    }
    #[cfg(not(target_arch = "nvptx64"))]
    panic!(
        "shared::Threads::exactly::<{bx}, {by}>() in a block of {} × {} × {} threads",
        thread::block_dim_x(),
        thread::block_dim_y(),
        thread::block_dim_z()
    )
}

/// Stops the kernel: a read of a tile out of range.
#[cold]
#[cfg_attr(target_arch = "nvptx64", inline(always))]
#[cfg_attr(not(target_arch = "nvptx64"), inline(never), track_caller)]
fn out_of_range(what: &str, index: (usize, usize), extent: (usize, usize)) -> ! {
    #[cfg(target_arch = "nvptx64")]
    {
        let _ = (what, index, extent);
        // SAFETY: `trap` aborts the kernel; the host sees a launch failure.
        unsafe { core::arch::nvptx::trap() }
    }
    #[cfg(not(target_arch = "nvptx64"))]
    match what {
        "slot" => panic!("shared tile index {} out of range for a tile of {} slots", index.0, extent.0),
        _ => panic!(
            "shared tile {what} ({}, {}) out of range for a tile of {} × {}",
            index.0, index.1, extent.0, extent.1
        ),
    }
}

/// Stops the kernel: a tile that does not fit the launch's dynamic shared memory, or a 2-D tile
/// whose pitch is shorter than its rows or columns.
#[cold]
#[cfg_attr(target_arch = "nvptx64", inline(always))]
#[cfg_attr(not(target_arch = "nvptx64"), inline(never), track_caller)]
fn bad_allocation(what: &str, a: usize, b: usize) -> ! {
    #[cfg(target_arch = "nvptx64")]
    {
        let _ = (what, a, b);
        // SAFETY: `trap` aborts the kernel; the host sees a launch failure.
        unsafe { core::arch::nvptx::trap() }
    }
    #[cfg(not(target_arch = "nvptx64"))]
    match what {
        "pitch" => panic!("a 2-D shared tile of pitch {a} for lines of {b} elements"),
        "f32x4" => panic!("a shared tile at {a:#x} read as F32x4 is not {b}-byte aligned"),
        "warps" => panic!("the block collectives' scratch needs whole warps; the block has {a} threads"),
        _ => panic!(
            "shared tiles up to byte {a} do not fit in the launch's {b} bytes of dynamic shared memory"
        ),
    }
}

/// How a thread touches shared memory through the safe shared-memory types: what the simulator's
/// race check records.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Access {
    Read,
    Write,
    Atomic,
}

/// The race check's record of an access (nothing on the GPU).
#[inline(always)]
#[cfg_attr(not(target_arch = "nvptx64"), track_caller)]
pub(crate) fn note<T>(ptr: *const T, access: Access) {
    #[cfg(not(target_arch = "nvptx64"))]
    crate::sim::shared_access(ptr as *const u8, size_of::<T>(), access);
    #[cfg(target_arch = "nvptx64")]
    let _ = (ptr, access);
}

impl Allocator {
    /// The next `len` elements of `T`, checked against the launch's dynamic shared memory.
    #[inline(always)]
    #[cfg_attr(not(target_arch = "nvptx64"), track_caller)]
    fn claim<T: Copy>(&mut self, len: usize) -> (*mut T, usize) {
        const { assert!(size_of::<T>() > 0, "shared tiles of zero-sized values") };
        let offset = self.layout.next_offset::<T>();
        let end = match len.checked_mul(size_of::<T>()).and_then(|bytes| bytes.checked_add(offset)) {
            Some(end) if end <= dynamic_bytes() => end,
            _ => bad_allocation(
                "size",
                offset.saturating_add(len.saturating_mul(size_of::<T>())),
                dynamic_bytes(),
            ),
        };
        self.layout = super::Layout { bytes: end };
        (region::<T>(offset, len).as_ptr(), offset)
    }

    /// A [`Tile`] of `len` elements, in its write phase (host layout: `.array::<T>(len)`).
    #[inline(always)]
    #[cfg_attr(not(target_arch = "nvptx64"), track_caller)]
    pub fn tile<T: Plain>(&mut self, len: usize) -> Tile<T> {
        let (ptr, offset) = self.claim(len);
        Tile { ptr, len, offset }
    }

    /// A row-major [`Tile2d`] of `rows × cols` elements whose rows lie `pitch ≥ cols` elements
    /// apart (a pitch of `cols + 1` staggers shared-memory banks), in its write phase (host
    /// layout: `.array::<T>(rows·pitch)`).
    #[inline(always)]
    #[cfg_attr(not(target_arch = "nvptx64"), track_caller)]
    pub fn tile_rows<T: Plain>(&mut self, rows: usize, cols: usize, pitch: usize) -> Tile2d<T> {
        if pitch < cols {
            bad_allocation("pitch", pitch, cols);
        }
        let (ptr, offset) = self.claim(rows.saturating_mul(pitch));
        Tile2d { ptr, rows, cols, row_step: pitch, col_step: 1, offset }
    }

    /// A column-major [`Tile2d`] of `rows × cols` elements whose columns lie `pitch ≥ rows`
    /// elements apart, in its write phase (host layout: `.array::<T>(cols·pitch)`).
    #[inline(always)]
    #[cfg_attr(not(target_arch = "nvptx64"), track_caller)]
    pub fn tile_columns<T: Plain>(&mut self, rows: usize, cols: usize, pitch: usize) -> Tile2d<T> {
        if pitch < rows {
            bad_allocation("pitch", pitch, rows);
        }
        let (ptr, offset) = self.claim(cols.saturating_mul(pitch));
        Tile2d { ptr, rows, cols, row_step: 1, col_step: pitch, offset }
    }

    /// `len` counters, zeroed here by their owners (as [`Tile::fill`]); [`Counters`] after the
    /// next [`sync_threads`](fn@sync_threads) (host layout: `.array::<T>(len)`).
    #[inline(always)]
    #[cfg_attr(not(target_arch = "nvptx64"), track_caller)]
    pub fn counters<T: Atomic + Plain>(&mut self, len: usize, threads: Threads) -> ZeroedCounters<T> {
        let mut tile = self.tile::<T>(len);
        tile.fill(threads, |_: u32| T::from_bits(0));
        ZeroedCounters { ptr: tile.ptr, len, offset: tile.offset }
    }

    /// The scratch of the block collectives ([`block::reduce`](crate::block::reduce) and the
    /// scans) for the block `threads` describes, which must be a whole number of warps (checked):
    /// one `T` per warp (host layout: [`block::scratch_layout`](crate::block::scratch_layout)`::<T>(threads)`).
    #[inline(always)]
    #[cfg_attr(not(target_arch = "nvptx64"), track_caller)]
    pub fn scratch<T: Shuffle>(&mut self, threads: Threads) -> crate::block::Scratch<T> {
        if !threads.count().is_multiple_of(crate::warp::WARP_SIZE) {
            bad_allocation("warps", threads.count() as usize, 0);
        }
        let len = crate::block::scratch_len(threads.count());
        crate::block::Scratch { ptr: self.claim(len).0, len }
    }
}

/// What a tile in its write phase ([`Tile`], [`Tile2d`]) lacks to be read: it is implemented for
/// nothing (and sealed), so that `tile[i]` before the barrier fails with a message that names the
/// barrier instead of rustc's "cannot index into a value":
///
/// ```compile_fail,E0277
/// # use gpu_std::shared::{Allocator, Threads};
/// # fn kernel() {
/// let mut tile = Allocator::new().tile_rows::<f32>(8, 8, 8);
/// tile.fill(Threads::block(), |r: u32, c: u32| (r + c) as f32);
/// let x = tile[(0, 0)]; // `Tile2d<f32>` is in its write phase: call `shared::sync_threads(...)` …
/// # }
/// ```
#[diagnostic::on_unimplemented(
    message = "`{Self}` is in its write phase: call `shared::sync_threads(...)` before reading it",
    label = "read before the block barrier",
    note = "`shared::sync_threads(tile)` returns the tile in its read phase (`TileRead`, `Tile2dRead`), which indexes"
)]
pub trait ReadAfterSyncThreads: sealed::Unreadable {}

impl<T: Plain> Index<usize> for Tile<T>
where
    Tile<T>: ReadAfterSyncThreads,
{
    type Output = T;

    fn index(&self, _: usize) -> &T {
        unreachable!("ReadAfterSyncThreads has no implementation")
    }
}

impl<T: Plain> Index<(usize, usize)> for Tile2d<T>
where
    Tile2d<T>: ReadAfterSyncThreads,
{
    type Output = T;

    fn index(&self, _: (usize, usize)) -> &T {
        unreachable!("ReadAfterSyncThreads has no implementation")
    }
}

/// A 1-D tile of shared memory in its write phase: slot `i` belongs to the thread of rank
/// `i mod threads` ([`Threads::rank`]). Made by [`Allocator::tile`]; [`sync_threads`](fn@sync_threads)
/// makes it a [`TileRead`].
pub struct Tile<T> {
    ptr: *mut T,
    len: usize,
    /// Byte offset in the dynamic shared memory (the alignment [`TileRead::into_f32x4`] checks).
    offset: usize,
}

impl<T: Plain> Tile<T> {
    /// Slots in the tile.
    #[inline(always)]
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the tile has no slots.
    #[inline(always)]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Writes `value(i)` into each slot `i` this thread owns — `rank, rank + threads, …` below
    /// `len` — calling `value` once per slot, in this thread only (so a slot's owner alone runs
    /// what computes it: a tile of one slot is thread 0's). `i` is a `u32` or a `usize`, as
    /// `value` takes it ([`TileIndex`]).
    #[inline(always)]
    #[cfg_attr(not(target_arch = "nvptx64"), track_caller)]
    pub fn fill<I: TileIndex>(&mut self, threads: Threads, mut value: impl FnMut(I) -> T) {
        let (len, step) = (I::from_extent(self.len), I::from_u32(threads.count()));
        for_each_owned!(i in I::from_u32(threads.rank()), len, step => {
            let v = value(i);
            // SAFETY: `i < len`, inside the tile (an extent that wrapped belongs to an empty
            // tile, whose `from_extent` is 0 or the loop never starts: `len` elements of a
            // non-zero size fit the shared memory); slot `i` is this thread's alone (rank ≡ i mod
            // threads) and nobody reads in the write phase.
            unsafe {
                let at = self.ptr.add(i.to_usize());
                note(at, Access::Write);
                at.write(v);
            }
        });
    }
}

/// A 1-D tile in its read phase: any slot, bounds-checked, by every thread (`tile[i]`).
/// [`sync_threads`](fn@sync_threads) makes it a [`Tile`] again.
pub struct TileRead<T> {
    ptr: *mut T,
    len: usize,
    /// Byte offset in the dynamic shared memory (the alignment [`TileRead::into_f32x4`] checks).
    offset: usize,
}

impl<T: Plain> TileRead<T> {
    /// Slots in the tile.
    #[inline(always)]
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the tile has no slots.
    #[inline(always)]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The tile read as a row-major `rows × cols` matrix (checks `rows·cols ≤ len` once): reads
    /// by `(row, col)`, whose checks the kernel's loop bounds can prove.
    #[inline(always)]
    #[cfg_attr(not(target_arch = "nvptx64"), track_caller)]
    pub fn into_matrix(self, rows: usize, cols: usize) -> Tile2dRead<T> {
        if rows.checked_mul(cols).is_none_or(|n| n > self.len) {
            out_of_range("shape", (rows, cols), (self.len, 1));
        }
        Tile2dRead { ptr: self.ptr, rows, cols, row_step: cols, col_step: 1, offset: self.offset }
    }
}

impl<T: Plain> Index<usize> for TileRead<T> {
    type Output = T;

    #[inline(always)]
    #[cfg_attr(not(target_arch = "nvptx64"), track_caller)]
    fn index(&self, i: usize) -> &T {
        if i >= self.len {
            out_of_range("slot", (i, 0), (self.len, 0));
        }
        // SAFETY: `i < len`, inside the tile; nobody writes it in the read phase.
        unsafe {
            let at = self.ptr.add(i);
            note(at, Access::Read);
            &*at
        }
    }
}

/// A 2-D tile of shared memory (`rows × cols`, row- or column-major with a pitch) in its write
/// phase: element `(r, c)` belongs to the thread at `(c mod nx, r mod ny)` of the [`Threads`]
/// grid. Made by [`Allocator::tile_rows`] or [`Allocator::tile_columns`];
/// [`sync_threads`](fn@sync_threads) makes it a [`Tile2dRead`].
pub struct Tile2d<T> {
    ptr: *mut T,
    rows: usize,
    cols: usize,
    row_step: usize,
    col_step: usize,
    /// Byte offset in the dynamic shared memory (the alignment [`Tile2dRead::window_f32x4`] checks).
    offset: usize,
}

impl<T: Plain> Tile2d<T> {
    /// Rows of the tile.
    #[inline(always)]
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Columns of the tile.
    #[inline(always)]
    pub fn cols(&self) -> usize {
        self.cols
    }

    /// Writes `value(r, c)` into each element this thread owns: rows `y, y + ny, …` and in each
    /// columns `x, x + nx, …` of the tile, row by row; `value` runs once per element, in this
    /// thread only. `r` and `c` are `u32` or `usize`, as `value` takes them ([`TileIndex`]).
    #[inline(always)]
    #[cfg_attr(not(target_arch = "nvptx64"), track_caller)]
    pub fn fill<I: TileIndex>(&mut self, threads: Threads, mut value: impl FnMut(I, I) -> T) {
        self.fill_where(threads, |r, c| Some(value(r, c)));
    }

    /// As [`fill`](Self::fill), writing only the elements for which `value` gives `Some` (a tile
    /// at the edge of an image); the others keep what they held.
    #[inline(always)]
    #[cfg_attr(not(target_arch = "nvptx64"), track_caller)]
    pub fn fill_where<I: TileIndex>(&mut self, threads: Threads, mut value: impl FnMut(I, I) -> Option<T>) {
        let (rows, cols) = (I::from_extent(self.rows), I::from_extent(self.cols));
        let (nx, ny) = (I::from_u32(threads.nx), I::from_u32(threads.ny));
        for_each_owned!(r in I::from_u32(threads.y), rows, ny => {
            let mut c = I::from_u32(threads.x);
            while c < cols {
                if let Some(v) = value(r, c) {
                    // SAFETY: `r < rows` and `c < cols`, inside the tile (its pitch covers the
                    // lines: checked when it was made; the extents fit a u32 whenever the tile has
                    // elements, and the steps cannot wrap one: shared memory is at most 227 KiB,
                    // so extents stay below 2^18); element `(r, c)` is this thread's alone (`r ≡ y mod ny`,
                    // `c ≡ x mod nx`) and nobody reads in the write phase.
                    unsafe {
                        let at = self.ptr.add(r.to_usize() * self.row_step + c.to_usize() * self.col_step);
                        note(at, Access::Write);
                        at.write(v);
                    }
                }
                c = c + nx;
            }
        });
    }
}

/// A 2-D tile in its read phase: any element, bounds-checked, by every thread
/// (`tile[(row, col)]`). [`sync_threads`](fn@sync_threads) makes it a [`Tile2d`] again.
pub struct Tile2dRead<T> {
    ptr: *mut T,
    rows: usize,
    cols: usize,
    row_step: usize,
    col_step: usize,
    /// Byte offset in the dynamic shared memory (the alignment [`Tile2dRead::window_f32x4`] checks).
    offset: usize,
}

impl<T: Plain> Tile2dRead<T> {
    /// Rows of the tile.
    #[inline(always)]
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Columns of the tile.
    #[inline(always)]
    pub fn cols(&self) -> usize {
        self.cols
    }
}

impl<T: Plain> Index<(usize, usize)> for Tile2dRead<T> {
    type Output = T;

    #[inline(always)]
    #[cfg_attr(not(target_arch = "nvptx64"), track_caller)]
    fn index(&self, (r, c): (usize, usize)) -> &T {
        if r >= self.rows || c >= self.cols {
            out_of_range("element", (r, c), (self.rows, self.cols));
        }
        // SAFETY: inside the tile; nobody writes it in the read phase.
        unsafe {
            let at = self.ptr.add(r * self.row_step + c * self.col_step);
            note(at, Access::Read);
            &*at
        }
    }
}

/// What one thread of a stencil reads of a [`Tile2dRead`]: its own outputs' part of the tile and
/// the halo beyond it ([`Tile2dRead::window`]), `window[(i, j)]` bounds-checked against the
/// window.
pub struct Window<'a, T> {
    ptr: *const T,
    rows: usize,
    cols: usize,
    row_step: usize,
    col_step: usize,
    _tile: core::marker::PhantomData<&'a Tile2dRead<T>>,
}

impl<T: Plain> Tile2dRead<T> {
    /// The halo window of this thread in a stencil whose threads each compute `rows_per_thread ×
    /// cols_per_thread` outputs: the tile holds the block's `ny·rows_per_thread ×
    /// nx·cols_per_thread` outputs' inputs plus a halo of `hr = rows − ny·rows_per_thread` rows and
    /// `hc = cols − nx·cols_per_thread` columns (checked once here), and the thread at `(x, y)`
    /// reads the `rows_per_thread + hr × cols_per_thread + hc` elements from
    /// `(y·rows_per_thread, x·cols_per_thread)`. The window's bounds are what a stencil's loops
    /// run to (the mask's size), so they prove its reads' checks.
    #[inline(always)]
    #[cfg_attr(not(target_arch = "nvptx64"), track_caller)]
    pub fn window(&self, threads: Threads, rows_per_thread: usize, cols_per_thread: usize) -> Window<'_, T> {
        let (x, y, nx, ny) =
            (threads.x as usize, threads.y as usize, threads.nx as usize, threads.ny as usize);
        let halo = |extent: usize, n: usize, per: usize| {
            n.checked_mul(per).and_then(|core| extent.checked_sub(core))
        };
        let (Some(hr), Some(hc)) =
            (halo(self.rows, ny, rows_per_thread), halo(self.cols, nx, cols_per_thread))
        else {
            out_of_range(
                "window of a block of",
                (ny * rows_per_thread, nx * cols_per_thread),
                (self.rows, self.cols),
            )
        };
        // SAFETY: the window's first element, `(y·rows_per_thread, x·cols_per_thread)`, and its
        // last, `((y + 1)·rows_per_thread + hr − 1, …)` with `y < ny`, are inside the tile.
        let ptr = unsafe {
            self.ptr.add(y * rows_per_thread * self.row_step + x * cols_per_thread * self.col_step)
        };
        Window {
            ptr,
            rows: rows_per_thread + hr,
            cols: cols_per_thread + hc,
            row_step: self.row_step,
            col_step: self.col_step,
            _tile: core::marker::PhantomData,
        }
    }
}

impl<T: Plain> Index<(usize, usize)> for Window<'_, T> {
    type Output = T;

    #[inline(always)]
    #[cfg_attr(not(target_arch = "nvptx64"), track_caller)]
    fn index(&self, (i, j): (usize, usize)) -> &T {
        if i >= self.rows || j >= self.cols {
            out_of_range("window element", (i, j), (self.rows, self.cols));
        }
        // SAFETY: inside the window, which is inside the tile; nobody writes it in the read phase.
        unsafe {
            let at = self.ptr.add(i * self.row_step + j * self.col_step);
            note(at, Access::Read);
            &*at
        }
    }
}

/// Four f32 that travel as one 16-byte shared-memory access (`ld.shared.v4.f32`): a tile of f32
/// read four at a time ([`TileRead::into_f32x4`]).
#[derive(Clone, Copy, Debug, PartialEq)]
#[repr(C, align(16))]
pub struct F32x4(pub [f32; 4]);

// SAFETY: four f32, no padding (16 bytes, aligned to 16).
unsafe impl Plain for F32x4 {}

impl TileRead<f32> {
    /// The tile read four f32 at a time: slot `i` of the result is slots `4i..4i + 4` (a last
    /// partial group is left out). The tile must start 16-byte aligned (checked once here): the
    /// first allocation of a kernel does, and so does one after arrays whose bytes are a multiple
    /// of 16.
    #[inline(always)]
    #[cfg_attr(not(target_arch = "nvptx64"), track_caller)]
    pub fn into_f32x4(self) -> TileRead<F32x4> {
        // On the GPU the region starts 16-byte aligned (`.align 16`), so the tile's offset in it
        // decides: a constant where the kernel's allocations are, and the check folds away (LLVM
        // cannot see through the region's address). The simulator checks the address.
        #[cfg(target_arch = "nvptx64")]
        let at = self.offset;
        #[cfg(not(target_arch = "nvptx64"))]
        let at = self.ptr as usize;
        if !at.is_multiple_of(16) {
            bad_allocation("f32x4", self.ptr as usize, 16);
        }
        TileRead { ptr: self.ptr as *mut F32x4, len: self.len / 4, offset: self.offset }
    }
}

impl Tile2dRead<f32> {
    /// As [`window`](Self::window), for a column-major tile read four rows at a time: element
    /// `(g, j)` of the result is rows `4g..4g + 4` of column `j` of the window, one 16-byte load
    /// (`ld.shared.v4.f32`); a last partial group of rows is left out. Checked once here: the tile is
    /// column-major (`tile_columns`) with a pitch that is a multiple of 4 and starts 16-byte aligned,
    /// and `rows_per_thread` is a multiple of 4, so that every group is aligned.
    #[inline(always)]
    #[cfg_attr(not(target_arch = "nvptx64"), track_caller)]
    pub fn window_f32x4(
        &self,
        threads: Threads,
        rows_per_thread: usize,
        cols_per_thread: usize,
    ) -> Window<'_, F32x4> {
        // As in `TileRead::into_f32x4`: on the GPU the region starts 16-byte aligned, so the
        // offset decides (and folds where the allocations are known); the simulator checks the
        // address.
        #[cfg(target_arch = "nvptx64")]
        let at = self.offset;
        #[cfg(not(target_arch = "nvptx64"))]
        let at = self.ptr as usize;
        if self.row_step != 1
            || !self.col_step.is_multiple_of(4)
            || !rows_per_thread.is_multiple_of(4)
            || !at.is_multiple_of(16)
        {
            bad_allocation("f32x4", self.ptr as usize, 16);
        }
        let w = self.window(threads, rows_per_thread, cols_per_thread);
        Window {
            ptr: w.ptr as *const F32x4,
            rows: w.rows / 4,
            cols: w.cols,
            row_step: 1,
            col_step: w.col_step / 4,
            _tile: core::marker::PhantomData,
        }
    }
}

/// Counters in shared memory zeroed by their owners ([`Allocator::counters`]); after
/// [`sync_threads`](fn@sync_threads), [`Counters`].
pub struct ZeroedCounters<T> {
    ptr: *mut T,
    len: usize,
    /// Byte offset in the dynamic shared memory (the alignment [`TileRead::into_f32x4`] checks).
    offset: usize,
}

/// Shared counters in their atomic phase: every thread may update any counter, only atomically
/// (`red.shared`/`atom.shared`, relaxed at block scope), so concurrent updates are safe.
/// [`sync_threads`](fn@sync_threads) makes them a [`TileRead`] of the totals.
pub struct Counters<T> {
    ptr: *mut T,
    len: usize,
    /// Byte offset in the dynamic shared memory (the alignment [`TileRead::into_f32x4`] checks).
    offset: usize,
}

impl<T: Atomic> Counters<T> {
    /// Number of counters.
    #[inline(always)]
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether there are no counters.
    #[inline(always)]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Counter `i`, bounds-checked.
    #[inline(always)]
    #[cfg_attr(not(target_arch = "nvptx64"), track_caller)]
    fn at(&self, i: usize) -> AtomicRef<T> {
        if i >= self.len {
            out_of_range("slot", (i, 0), (self.len, 0));
        }
        // SAFETY: `i < len`, inside the counters.
        let at = unsafe { self.ptr.add(i) };
        note(at, Access::Atomic);
        AtomicRef::new(at, Space::Shared, Scope::Block)
    }

    /// Adds `v` to counter `i` (`red.shared.add`: nothing to wait for).
    #[inline(always)]
    #[cfg_attr(not(target_arch = "nvptx64"), track_caller)]
    pub fn add(&self, i: usize, v: T) {
        self.at(i).add(v)
    }

    /// Adds `v` to counter `i`; the previous value (`atom.shared.add`).
    #[inline(always)]
    #[cfg_attr(not(target_arch = "nvptx64"), track_caller)]
    pub fn fetch_add(&self, i: usize, v: T) -> T {
        self.at(i).fetch_add(v)
    }

    /// Raises counter `i` to `v` if larger; the previous value.
    #[inline(always)]
    #[cfg_attr(not(target_arch = "nvptx64"), track_caller)]
    pub fn fetch_max(&self, i: usize, v: T) -> T {
        self.at(i).fetch_max(v)
    }
}

mod sealed {
    /// Keeps [`ReadAfterSyncThreads`](super::ReadAfterSyncThreads) unimplementable outside this
    /// crate (which implements it for nothing).
    pub trait Unreadable {}

    /// The conversions of a [`TileIndex`](super::TileIndex).
    pub trait Index {
        /// From a thread coordinate or step.
        fn from_u32(i: u32) -> Self;
        /// From a tile's extent, which fits a `u32` whenever the tile has elements (its bytes fit
        /// the launch's shared memory): an extent of an empty tile may wrap, harmlessly.
        fn from_extent(n: usize) -> Self;
        /// As an offset.
        fn to_usize(self) -> usize;
    }
    impl Index for u32 {
        #[inline(always)]
        fn from_u32(i: u32) -> Self {
            i
        }
        #[inline(always)]
        fn from_extent(n: usize) -> Self {
            n as u32
        }
        #[inline(always)]
        fn to_usize(self) -> usize {
            self as usize
        }
    }
    impl Index for usize {
        #[inline(always)]
        fn from_u32(i: u32) -> Self {
            i as usize
        }
        #[inline(always)]
        fn from_extent(n: usize) -> Self {
            n
        }
        #[inline(always)]
        fn to_usize(self) -> usize {
            self
        }
    }

    /// How a value crosses the block barrier: its next phase. In a module no one outside can
    /// name, so that only [`sync_threads`](super::sync_threads) calls `advance`.
    pub trait Advance {
        /// The phase after the barrier.
        type Next;
        /// `self` in that phase.
        fn advance(self) -> Self::Next;
    }
}
use sealed::Advance;

/// What [`sync_threads`](fn@sync_threads) takes: a shared-memory phase ([`Tile`], [`TileRead`],
/// [`Tile2d`], [`Tile2dRead`], [`ZeroedCounters`], [`Counters`]) or a tuple of up to four.
pub trait Phase: Advance {}
impl<P: Advance> Phase for P {}

macro_rules! advance {
    ($($from:ident => $to:ident { $($field:ident),* };)*) => {$(
        impl<T> Advance for $from<T> {
            type Next = $to<T>;
            #[inline(always)]
            fn advance(self) -> $to<T> {
                $to { $($field: self.$field),* }
            }
        }
    )*};
}
advance! {
    Tile => TileRead { ptr, len, offset };
    TileRead => Tile { ptr, len, offset };
    Tile2d => Tile2dRead { ptr, rows, cols, row_step, col_step, offset };
    Tile2dRead => Tile2d { ptr, rows, cols, row_step, col_step, offset };
    ZeroedCounters => Counters { ptr, len, offset };
    Counters => TileRead { ptr, len, offset };
}

macro_rules! advance_tuple {
    ($($p:ident),*) => {
        impl<$($p: Advance),*> Advance for ($($p,)*) {
            type Next = ($($p::Next,)*);
            #[inline(always)]
            #[allow(non_snake_case)]
            fn advance(self) -> Self::Next {
                let ($($p,)*) = self;
                ($($p.advance(),)*)
            }
        }
    };
}
advance_tuple!(A);
advance_tuple!(A, B);
advance_tuple!(A, B, C);
advance_tuple!(A, B, C, D);

/// The block barrier (`__syncthreads()`, as [`thread::sync_threads`](crate::thread::sync_threads))
/// that moves `tiles` — one phase or a tuple — to their next phase: written tiles become readable,
/// read ones writable again, zeroed counters atomic, counters readable totals.
///
/// ```ignore
/// let (mask, tile) = shared::sync_threads((mask, tile));   // one barrier for both
/// ```
///
/// Every thread of the block must reach this same call (or have returned): see the module
/// documentation; the simulator stops a launch whose threads meet at different barriers.
#[inline(always)]
#[cfg_attr(not(target_arch = "nvptx64"), track_caller)]
pub fn sync_threads<P: Phase>(tiles: P) -> P::Next {
    #[cfg(target_arch = "nvptx64")]
    thread::sync_threads();
    #[cfg(not(target_arch = "nvptx64"))]
    crate::sim::tile_barrier();
    tiles.advance()
}
