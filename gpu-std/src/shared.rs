//! Launch-sized ("dynamic") shared memory: one region per block, sized by the launch, as safe
//! tiles for the usual patterns or as raw arrays.
//!
//! **Safe tiles** ([`Tile`], [`Tile2d`], [`Counters`], the block collectives' [`Scratch`]): each
//! thread writes only the slots it owns, the block barrier [`sync_threads`](fn@sync_threads)
//! turns a written tile into a readable one (reading before it does not compile), reads are
//! bounds-checked, and counters are updated atomically by anyone:
//!
//! ```ignore
//! let threads = shared::Threads::block();                   // thread rank t owns slots t, t + threads, …
//! let mut smem = shared::Allocator::new();
//! let mut tile = smem.tile::<f32>(n);
//! tile.fill(threads, |i: usize| x[base + i]);                // write phase: own slots only
//! let tile = shared::sync_threads(tile);                     // barrier: now a TileRead
//! y[base + i] = tile[n - 1 - i];                             // read phase: any slot, checked
//! ```
//!
//! | allocation (`smem: Allocator`) | write phase | after `sync_threads` |
//! |---|---|---|
//! | `smem.tile::<T>(len) -> Tile<T>` | `fill(threads, \|i: usize\| value)` (or `i: u32`) | `TileRead<T>`: `t[i]`, `into_matrix(rows, cols)`, `into_f32x4()` (16-byte reads) |
//! | `smem.tile_rows::<T>(rows, cols, pitch)`, `tile_columns(…) -> Tile2d<T>` | `fill(threads, \|r: usize, c: usize\| value)`, `fill_where(…, \|r, c\| Option)` | `Tile2dRead<T>`: `t[(r, c)]`, `window(threads, rows, cols)` (a stencil thread's halo window, `w[(i, j)]`), `window_f32x4(…)` (a column-major f32 tile's window four rows a read) |
//! | `smem.counters::<T>(len, threads) -> ZeroedCounters<T>` | (zeroed by their owners) | `Counters<T>`: `add`, `fetch_add`, `fetch_max` (atomic, any thread); then `TileRead<T>` |
//! | `smem.scratch::<T>(threads) -> Scratch<T>` | — | passed to `block::reduce`, `block::inclusive_scan`, `block::exclusive_scan` |
//!
//! The barrier is `shared::sync_threads<P: Phase>(tiles: P) -> P::Next`, for one of these or a
//! tuple of up to four. Ownership follows a [`Threads`]: [`Threads::block`] describes any block; [`Threads::exactly::<BX, BY>`](Threads::exactly) checks
//! a `BX × BY` block once and makes the ownership loops' steps constants. What the types prove,
//! what stays the kernel's duty (every thread at the same barrier, the same allocations in every
//! thread) and what the simulator checks (both duties, and every access of these types for races
//! between threads): see [Safe tiles in detail](#safe-tiles-in-detail) below.
//!
//! **Raw arrays** ([`DynamicShared`], from [`Allocator::array`], [`region`] or [`dynamic`]): any
//! access pattern (warp-specialised pipelines, `cp.async`, `ldmatrix`), with `unsafe` reads,
//! writes and atomics whose contract is the caller's:
//!
//! ```ignore
//! let tile = shared::dynamic::<f32>();          // the whole region as f32
//! unsafe { tile.write(i, x) };
//! sync_threads();
//! let y = unsafe { tile.read(j) };
//! ```
//!
//! Several arrays and tiles of different types go in one region through an [`Allocator`], which
//! places each at the next offset aligned for its type. The host sizes the launch with a
//! [`Layout`] built by the same steps — the allocator is a layout that hands out the arrays — so a
//! kernel module exports one `const fn` giving its layout and both sides use it:
//!
//! ```ignore
//! pub const fn shared_layout(n: usize, m: usize) -> shared::Layout {
//!     shared::Layout::new().array::<f32>(n).array::<f64>(m)
//! }
//! // in the kernel:
//! let mut smem = shared::Allocator::new();
//! let a = smem.tile::<f32>(n);
//! let b = smem.array::<f64>(m);
//! // on the host: LaunchConfig { shared_bytes: shared_layout(n, m).bytes_u32(), .. }
//! ```
//!
//! Statically sized shared arrays (CUDA's `__shared__ float a[256]`) are not available: rustc's
//! NVPTX backend places every `static` in the global address space (`#[link_section]` does not
//! choose address spaces there), and the launch-sized region is the only shared memory it exposes.
//!
//! On the GPU a raw access is a plain `ld.shared`/`st.shared` with no bounds check. In the
//! simulator every access is checked, and one out of range panics with a message naming the
//! kernel, the block and the thread.
//!
//! # Safe tiles in detail
//!
//! * **Slot ownership.** In a write phase a thread writes only the slots it owns, through
//!   [`Tile::fill`] or [`Tile2d::fill`]/[`fill_where`](Tile2d::fill_where), which call a closure
//!   for each of them: in a [`Tile`] slot `i` belongs to the thread of rank `i mod threads`, in a
//!   [`Tile2d`] element `(r, c)` to the thread at `(c mod nx, r mod ny)` of the block seen as an
//!   `nx × ny` grid ([`Threads`]). Two threads never write one slot, whatever the closure does.
//! * **Phases.** A write phase has no reads and a read phase no writes; only
//!   [`sync_threads`](fn@sync_threads) — the block barrier — turns one into the other, consuming
//!   the tiles it is given (several at once in a tuple) and returning them in their next phase:
//!   [`Tile`] ⇄ [`TileRead`], [`Tile2d`] ⇄ [`Tile2dRead`], and for counters
//!   [`ZeroedCounters`] → [`Counters`] (atomics only) → [`TileRead`]. None of them is `Copy`, so
//!   no copy of a phase outlives the barrier. Reading before the barrier does not compile:
//!
//!   ```compile_fail,E0277
//!   # use gpu_std::shared::{Allocator, Threads};
//!   # fn kernel() {
//!   let mut tile = Allocator::new().tile::<f32>(64);
//!   tile.fill(Threads::block(), |i: usize| i as f32);
//!   let x = tile[0];                                      // a Tile has no reads
//!   # }
//!   ```
//!
//!   (rustc: "`Tile<f32>` is in its write phase: call `shared::sync_threads(...)` before reading
//!   it", from [`ReadAfterSyncThreads`]),
//!
//!   while after the barrier it does:
//!
//!   ```no_run
//!   # use gpu_std::shared::{self, Allocator, Threads};
//!   # fn kernel() {
//!   let mut tile = Allocator::new().tile::<f32>(64);
//!   tile.fill(Threads::block(), |i: usize| i as f32);
//!   let tile = shared::sync_threads(tile);                // a TileRead
//!   let x = tile[0];
//!   # }
//!   ```
//! * **Bounds.** Reads are checked against the tile (the index, or row and column of a 2-D tile):
//!   a panic naming kernel, block, thread and line in the simulator, `trap` on the GPU; LLVM drops
//!   the check where the kernel's loop bounds prove it, as for [`Slice`](crate::Slice)s. The
//!   writes of `fill` need none: its loops stay inside the tile. An allocation that does not fit
//!   the launch's dynamic shared memory stops the kernel too.
//! * **Values.** Tiles hold [`Plain`] values (integers, floats, arrays of them), for which any
//!   bits are a value: a slot no thread wrote reads as whatever was there (the simulator fills
//!   shared memory with `0xff` bytes, a NaN for floats), never as undefined behaviour.
//!
//! **What stays the kernel's duty.** Two rules are about the whole block, which Rust's types cannot see; the simulator checks both.
//!
//! * **Every thread of the block reaches the same [`sync_threads`](fn@sync_threads)** (or has
//!   returned), as for any `__syncthreads()`: a barrier inside a branch that some threads skip
//!   would let one thread read while another still writes (and is undefined on the GPU). The
//!   simulator stops the launch when threads meet at different barriers, naming both lines.
//! * **Every thread allocates the same tiles in the same order from one [`Allocator`]** (block
//!   uniform sizes, no second allocator over the same memory, no raw [`region`]
//!   overlapping a tile): tiles that overlap with different owners break the ownership above.
//!
//! Beyond those, the simulator checks the result itself: it records which thread wrote, read or
//! atomically updated each byte of shared memory through these types since the last barrier, and
//! a conflicting access (a write with anything, a plain access with an atomic one) stops the
//! launch with both threads named — whatever broke the rules.
//!
//! **Cost.** On the GPU an access is the same `ld.shared`/`st.shared` as through
//! [`DynamicShared`]; `fill` is the loop a kernel would write, and where a [`Threads::exactly`]
//! block over a tile of constant size gives each thread one to four slots (of a 2-D tile: rows), a
//! loop of that constant count, which unrolls (the loads of all its slots in flight at once). What the types add is once per kernel: [`Threads::exactly`] compares the block's shape
//! with its constants (three compares and a `trap`), and each allocation compares its end with the
//! launch's shared bytes.

mod tile;
pub use crate::block::Scratch;
pub use tile::*;
pub(crate) use tile::{Access, note};

/// A typed view of (part of) the block's dynamic shared memory. `Copy`, like a pointer.
#[derive(Clone, Copy)]
pub struct DynamicShared<T> {
    ptr: *mut T,
    len: usize,
}

/// The whole dynamic shared memory of this block, as an array of `T` (its length is the launch's
/// shared bytes divided by `size_of::<T>()`).
#[inline(always)]
pub fn dynamic<T: Copy>() -> DynamicShared<T> {
    region(0, dynamic_bytes() / core::mem::size_of::<T>())
}

/// `len` elements of `T` starting `byte_offset` bytes into the dynamic shared memory: the way to
/// place several arrays in one launch-sized region. `byte_offset` must be a multiple of
/// `align_of::<T>()`.
#[inline(always)]
pub fn region<T: Copy>(byte_offset: usize, len: usize) -> DynamicShared<T> {
    #[cfg(target_arch = "nvptx64")]
    {
        let base = core::intrinsics::gpu::gpu_launch_sized_workgroup_mem::<u128>() as *mut u8;
        // SAFETY: only address arithmetic; accesses are the caller's responsibility.
        let ptr = unsafe { base.add(byte_offset) } as *mut T;
        DynamicShared { ptr, len }
    }
    #[cfg(not(target_arch = "nvptx64"))]
    {
        let ptr = crate::sim::shared_region(
            byte_offset,
            len,
            core::mem::size_of::<T>(),
            core::mem::align_of::<T>(),
        );
        DynamicShared { ptr: ptr as *mut T, len }
    }
}

/// Bytes of dynamic shared memory given to this launch (`%dynamic_smem_size`).
#[inline(always)]
pub fn dynamic_bytes() -> usize {
    #[cfg(target_arch = "nvptx64")]
    {
        let bytes: u32;
        // SAFETY: reads a special register, constant for the launch: `pure`, so that LLVM reads it
        // once for all the tiles' checks and drops the reads of paths that only trap.
        unsafe {
            core::arch::asm!(
                "mov.u32 {}, %dynamic_smem_size;",
                out(reg32) bytes,
                options(pure, nomem, nostack, preserves_flags)
            );
        }
        bytes as usize
    }
    #[cfg(not(target_arch = "nvptx64"))]
    crate::sim::with_thread(|t| t.shared_bytes)
}

impl<T: Copy> DynamicShared<T> {
    /// Number of `T` elements in this view.
    #[inline(always)]
    pub fn len(self) -> usize {
        self.len
    }

    /// Whether the view has no elements.
    #[inline(always)]
    pub fn is_empty(self) -> bool {
        self.len == 0
    }

    /// Reads element `i`.
    ///
    /// # Safety
    /// `i < len()`, and no other thread writes element `i` between the barriers around this read.
    #[inline(always)]
    #[cfg_attr(not(target_arch = "nvptx64"), track_caller)]
    pub unsafe fn read(self, i: usize) -> T {
        #[cfg(not(target_arch = "nvptx64"))]
        self.check(i);
        // SAFETY: guaranteed by the caller.
        unsafe { self.ptr.add(i).read() }
    }

    /// Writes element `i`.
    ///
    /// # Safety
    /// `i < len()`, and no other thread reads or writes element `i` between the barriers around
    /// this write.
    #[inline(always)]
    #[cfg_attr(not(target_arch = "nvptx64"), track_caller)]
    pub unsafe fn write(self, i: usize, value: T) {
        #[cfg(not(target_arch = "nvptx64"))]
        self.check(i);
        // SAFETY: guaranteed by the caller.
        unsafe { self.ptr.add(i).write(value) }
    }

    /// Element `i` for atomic operations (`atom.shared`/`red.shared`, relaxed at block scope; see
    /// [`atomic`](crate::atomic)). Checked against the length in the simulator only, as the other
    /// accesses are.
    ///
    /// # Safety
    /// `i < len()`.
    #[inline(always)]
    #[cfg_attr(not(target_arch = "nvptx64"), track_caller)]
    pub unsafe fn atomic(self, i: usize) -> crate::atomic::AtomicRef<T>
    where
        T: crate::atomic::Atomic,
    {
        #[cfg(not(target_arch = "nvptx64"))]
        self.check(i);
        // SAFETY: in bounds, guaranteed by the caller.
        let ptr = unsafe { self.ptr.add(i) };
        crate::atomic::AtomicRef::new(ptr, crate::atomic::Space::Shared, crate::atomic::Scope::Block)
    }

    /// The raw pointer, for access patterns the methods above do not cover (vector loads).
    #[inline(always)]
    pub fn as_ptr(self) -> *mut T {
        self.ptr
    }

    #[cfg(not(target_arch = "nvptx64"))]
    #[track_caller]
    fn check(self, i: usize) {
        if i >= self.len {
            crate::sim::shared_out_of_range(i, self.len);
        }
    }
}

/// Two f32 as one 8-byte shared-memory access.
#[derive(Clone, Copy)]
#[repr(C, align(8))]
struct F32x2([f32; 2]);

impl DynamicShared<f32> {
    /// Elements `i..i + 4` in one 16-byte load (`ld.shared.v4`).
    ///
    /// # Safety
    /// As for [`read`](Self::read), for all four; element `i` is 16-byte aligned (the simulator
    /// checks both).
    #[inline(always)]
    #[cfg_attr(not(target_arch = "nvptx64"), track_caller)]
    pub unsafe fn read_f32x4(self, i: usize) -> [f32; 4] {
        #[cfg(not(target_arch = "nvptx64"))]
        self.check_f32x4(i);
        // SAFETY: guaranteed by the caller.
        unsafe { (self.ptr.add(i) as *const F32x4).read().0 }
    }

    /// Writes elements `i..i + 4` in one 16-byte store (`st.shared.v4`).
    ///
    /// # Safety
    /// As for [`write`](Self::write), for all four; element `i` is 16-byte aligned (the simulator
    /// checks both).
    #[inline(always)]
    #[cfg_attr(not(target_arch = "nvptx64"), track_caller)]
    pub unsafe fn write_f32x4(self, i: usize, value: [f32; 4]) {
        #[cfg(not(target_arch = "nvptx64"))]
        self.check_f32x4(i);
        // SAFETY: guaranteed by the caller.
        unsafe { (self.ptr.add(i) as *mut F32x4).write(F32x4(value)) }
    }

    /// Writes elements `i..i + 2` in one 8-byte store (`st.shared.v2`).
    ///
    /// # Safety
    /// As for [`write`](Self::write), for both; element `i` is 8-byte aligned (the simulator checks
    /// both).
    #[inline(always)]
    #[cfg_attr(not(target_arch = "nvptx64"), track_caller)]
    pub unsafe fn write_f32x2(self, i: usize, value: [f32; 2]) {
        #[cfg(not(target_arch = "nvptx64"))]
        {
            self.check(i + 1);
            let at = self.ptr.wrapping_add(i) as usize;
            assert!(at.is_multiple_of(8), "8-byte shared-memory access at a misaligned address {at:#x}");
        }
        // SAFETY: guaranteed by the caller.
        unsafe { (self.ptr.add(i) as *mut F32x2).write(F32x2(value)) }
    }

    #[cfg(not(target_arch = "nvptx64"))]
    #[track_caller]
    fn check_f32x4(self, i: usize) {
        self.check(i + 3);
        let at = self.ptr.wrapping_add(i) as usize;
        assert!(at.is_multiple_of(16), "16-byte shared-memory access at a misaligned address {at:#x}");
    }
}

/// The byte layout of arrays placed one after another in dynamic shared memory, each at the first
/// offset aligned for its element type. A `const fn` value, so that a kernel module can give the
/// host the size of what its kernel allocates with an [`Allocator`] (the same steps).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    bytes: usize,
}

impl Layout {
    /// No arrays: 0 bytes.
    pub const fn new() -> Self {
        Layout { bytes: 0 }
    }

    /// The byte offset at which the next array of `T` goes: the end so far rounded up to
    /// `align_of::<T>()`.
    pub const fn next_offset<T>(self) -> usize {
        self.bytes.next_multiple_of(core::mem::align_of::<T>())
    }

    /// This layout followed by an array of `len` elements of `T`.
    pub const fn array<T>(self, len: usize) -> Self {
        Layout { bytes: self.next_offset::<T>() + len * core::mem::size_of::<T>() }
    }

    /// Bytes of dynamic shared memory the arrays need (the end of the last one).
    pub const fn bytes(self) -> usize {
        self.bytes
    }

    /// [`Layout::bytes`] as the `u32` a launch configuration takes.
    pub const fn bytes_u32(self) -> u32 {
        assert!(self.bytes <= u32::MAX as usize, "shared layout larger than 4 GiB");
        self.bytes as u32
    }
}

impl Default for Layout {
    fn default() -> Self {
        Self::new()
    }
}

/// Hands out consecutive typed arrays of the block's dynamic shared memory, following a
/// [`Layout`]. Every thread of a block makes the same calls in the same order, so they all get the
/// same arrays. In the simulator an array past the launch's shared bytes panics with the offset,
/// size and what the launch gave; on the GPU nothing is checked for raw arrays, and the safe
/// tiles' allocations are checked against the launch's shared bytes. Not `Copy`: a copy would
/// hand out the same memory twice.
#[derive(Debug, Default)]
pub struct Allocator {
    layout: Layout,
}

impl Allocator {
    /// An allocator at the start of the dynamic shared memory.
    #[inline(always)]
    pub const fn new() -> Self {
        Allocator { layout: Layout::new() }
    }

    /// The next `len` elements of `T`, aligned for `T`.
    #[inline(always)]
    pub fn array<T: Copy>(&mut self, len: usize) -> DynamicShared<T> {
        let offset = self.layout.next_offset::<T>();
        self.layout = self.layout.array::<T>(len);
        region(offset, len)
    }

    /// What has been handed out so far: the layout the host must size the launch for.
    #[inline(always)]
    pub const fn layout(&self) -> Layout {
        self.layout
    }
}
