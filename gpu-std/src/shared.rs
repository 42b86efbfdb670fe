//! Launch-sized ("dynamic") shared memory: one region per block, sized by the launch.
//!
//! ```ignore
//! let tile = shared::dynamic::<f32>();          // the whole region as f32
//! unsafe { tile.write(i, x) };
//! sync_threads();
//! let y = unsafe { tile.read(j) };
//! ```
//!
//! Several arrays of different types go in one region through an [`Allocator`], which places each
//! at the next offset aligned for its type. The host sizes the launch with a [`Layout`] built by
//! the same steps — the allocator is a layout that hands out the arrays — so a kernel module
//! exports one `const fn` giving its layout and both sides use it:
//!
//! ```ignore
//! pub const fn shared_layout(n: usize, m: usize) -> shared::Layout {
//!     shared::Layout::new().array::<f32>(n).array::<f64>(m)
//! }
//! // in the kernel:
//! let mut smem = shared::Allocator::new();
//! let a = smem.array::<f32>(n);
//! let b = smem.array::<f64>(m);
//! // on the host: LaunchConfig { shared_bytes: shared_layout(n, m).bytes_u32(), .. }
//! ```
//!
//! Statically sized shared arrays (CUDA's `__shared__ float a[256]`) are not available: rustc's
//! NVPTX backend places every `static` in the global address space (`#[link_section]` does not
//! choose address spaces there), and the launch-sized region is the only shared memory it exposes.
//!
//! On the GPU an access is a plain `ld.shared`/`st.shared` with no bounds check. In the simulator
//! every access is checked, and one out of range panics with a message naming the kernel, the block
//! and the thread.

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
        // SAFETY: reads a special register.
        unsafe {
            core::arch::asm!("mov.u32 {}, %dynamic_smem_size;", out(reg32) bytes);
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

/// Four f32 as one 16-byte shared-memory access.
#[derive(Clone, Copy)]
#[repr(C, align(16))]
struct F32x4([f32; 4]);

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
/// size and what the launch gave; on the GPU nothing is checked.
#[derive(Clone, Copy, Debug, Default)]
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
