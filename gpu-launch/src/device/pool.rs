//! The device's own stream-ordered memory pool, from which [`Device::alloc_temporary`] takes
//! memory: after a first call, a factorisation's buffers cost no `cuMemAlloc` (about 36 µs each on
//! an H100) and no synchronizing `cuMemFree` (a 128 MiB buffer's at 4096² took about 0.4 ms, the
//! GPU idle meanwhile).
//!
//! A pool of its own, not the device's default one, so that its release threshold is not imposed
//! on other libraries of the process (PyTorch and CuPy can allocate from the default pool). It keeps
//! at most [`pool_keeps_bytes`] of freed memory across synchronizations (512 MiB on a large GPU),
//! so it holds back little from other processes and libraries; [`Device::free_memory`] counts that
//! memory as free, and an allocation that finds no room gives it back first.
//!
//! [`Device::alloc_temporary`]: super::Device::alloc_temporary
//! [`Device::free_memory`]: super::Device::free_memory

use crate::error::{Result, raw};
use cust::sys::{CUmemPool_attribute, CUmemoryPool};

/// Memory the pool takes in one piece when the GPU opens, bytes (a fresh pool grows piece by piece
/// otherwise, about 0.3 ms a piece): a factorisation's small buffers at `b = 512` take about 20 MiB.
pub const POOL_RESERVE_BYTES: usize = 64 << 20;

/// Most freed memory the pool keeps for later allocations, bytes.
pub const POOL_KEEPS_MAX_BYTES: u64 = 512 << 20;

/// Freed memory the pool of a GPU of `total` bytes keeps for later allocations (the driver gives
/// back the rest at the next synchronization): a 64th of the GPU, at most
/// [`POOL_KEEPS_MAX_BYTES`]. Kept, a `ks.svd` of one 4096² image reuses its 320 MiB of buffers
/// (its Gram matrix and f64 copy 128 MiB each) on the next call: 13.5 ms a call against 14.6 with
/// 64 MiB kept (H200, 2026-11-28, one call).
pub fn pool_keeps_bytes(total: usize) -> u64 {
    (total as u64 / 64).min(POOL_KEEPS_MAX_BYTES)
}

/// A memory pool of one GPU (`cuMemPoolCreate`), destroyed with it.
pub(super) struct MemoryPool {
    handle: CUmemoryPool,
}

impl MemoryPool {
    /// A pool of device memory on GPU `ordinal` of `total` bytes, keeping [`pool_keeps_bytes`].
    pub(super) fn new(ordinal: u32, total: usize) -> Result<Self> {
        // SAFETY: plain-data properties; zero is "none" for the fields not set.
        let mut props: cust::sys::CUmemPoolProps = unsafe { std::mem::zeroed() };
        props.allocType = cust::sys::CUmemAllocationType::CU_MEM_ALLOCATION_TYPE_PINNED;
        props.handleTypes = cust::sys::CUmemAllocationHandleType::CU_MEM_HANDLE_TYPE_NONE;
        props.location = cust::sys::CUmemLocation {
            type_: cust::sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE,
            id: ordinal as i32,
        };
        let mut handle: CUmemoryPool = std::ptr::null_mut();
        // SAFETY: valid properties; the handle is written by the call.
        raw("cuMemPoolCreate", unsafe { cust::sys::cuMemPoolCreate(&mut handle, &props) })?;
        let pool = MemoryPool { handle };
        let mut keep = pool_keeps_bytes(total);
        // SAFETY: a valid pool; the attribute takes a u64.
        raw("cuMemPoolSetAttribute(RELEASE_THRESHOLD)", unsafe {
            cust::sys::cuMemPoolSetAttribute(
                pool.handle,
                CUmemPool_attribute::CU_MEMPOOL_ATTR_RELEASE_THRESHOLD,
                &mut keep as *mut u64 as *mut std::ffi::c_void,
            )
        })?;
        Ok(pool)
    }

    /// Makes the pool hold [`POOL_RESERVE_BYTES`] now, in one piece, by taking and freeing them on
    /// `stream` (which waits): the pool grows by small pieces otherwise, each about 0.3 ms on an
    /// H200 (33 of them took 10.5 ms of a one-image job). Left undone where the GPU has not the
    /// memory: the pool then grows as it is used.
    pub(super) fn reserve(&self, stream: cust::sys::CUstream) {
        let mut ptr: cust::sys::CUdeviceptr = 0;
        // SAFETY: a valid pool and stream; the allocation is freed at once on the same stream.
        unsafe {
            let bytes = POOL_RESERVE_BYTES;
            if cust::sys::cuMemAllocFromPoolAsync(&mut ptr, bytes, self.handle, stream)
                == cust::sys::cudaError_enum::CUDA_SUCCESS
            {
                cust::sys::cuMemFreeAsync(ptr, stream);
                cust::sys::cuStreamSynchronize(stream);
            }
        }
    }

    /// The pool's handle, for `cuMemAllocFromPoolAsync`.
    pub(super) fn handle(&self) -> CUmemoryPool {
        self.handle
    }

    /// Memory the pool holds that no allocation uses, bytes: free for the next allocation.
    pub(super) fn idle_bytes(&self) -> usize {
        let attribute = |which| {
            let mut value = 0u64;
            // SAFETY: a valid pool; these attributes are u64.
            let result = unsafe {
                cust::sys::cuMemPoolGetAttribute(
                    self.handle,
                    which,
                    &mut value as *mut u64 as *mut std::ffi::c_void,
                )
            };
            if result == cust::sys::cudaError_enum::CUDA_SUCCESS { value } else { 0 }
        };
        let reserved = attribute(CUmemPool_attribute::CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT);
        let used = attribute(CUmemPool_attribute::CU_MEMPOOL_ATTR_USED_MEM_CURRENT);
        reserved.saturating_sub(used) as usize
    }

    /// Gives the pool's idle memory back to the GPU (after the frees queued so far have been seen
    /// to complete: the caller synchronizes first).
    pub(super) fn trim(&self) -> Result<()> {
        // SAFETY: a valid pool.
        raw("cuMemPoolTrimTo", unsafe { cust::sys::cuMemPoolTrimTo(self.handle, 0) })
    }
}

impl Drop for MemoryPool {
    fn drop(&mut self) {
        // SAFETY: the pool made in `new`, destroyed once; allocations still out are released by the
        // driver when they are freed.
        unsafe { cust::sys::cuMemPoolDestroy(self.handle) };
    }
}
