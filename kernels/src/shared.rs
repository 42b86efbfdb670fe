//! Launch-sized ("dynamic") shared memory: one region per block, sized by the launch.
//!
//! ```ignore
//! let tile = shared::dynamic::<f32>();          // the whole region as f32
//! unsafe { tile.write(i, x) };
//! sync_threads();
//! let y = unsafe { tile.read(j) };
//! ```
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
    pub unsafe fn write(self, i: usize, value: T) {
        #[cfg(not(target_arch = "nvptx64"))]
        self.check(i);
        // SAFETY: guaranteed by the caller.
        unsafe { self.ptr.add(i).write(value) }
    }

    /// The raw pointer, for access patterns the methods above do not cover (vector loads).
    #[inline(always)]
    pub fn as_ptr(self) -> *mut T {
        self.ptr
    }

    #[cfg(not(target_arch = "nvptx64"))]
    fn check(self, i: usize) {
        if i >= self.len {
            crate::sim::shared_out_of_range(i, self.len);
        }
    }
}
