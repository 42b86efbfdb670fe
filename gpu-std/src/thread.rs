//! Thread, block and grid indices, the block barrier and named barriers, a timed delay, and the
//! controls of programmatic dependent launches.
//!
//! Names follow cuda_std. All indices are `u32`; `x` is the fastest-varying dimension (for an
//! image stored row-major, `x` is the column and `y` the row).

macro_rules! special_registers {
    ($($(#[$doc:meta])* $name:ident => $gpu:ident, $sim:ident . $field:ident;)*) => {$(
        $(#[$doc])*
        #[inline(always)]
        pub fn $name() -> u32 {
            #[cfg(target_arch = "nvptx64")]
            // SAFETY: reading a special register has no preconditions.
            unsafe {
                core::arch::nvptx::$gpu()
            }
            #[cfg(not(target_arch = "nvptx64"))]
            crate::sim::with_thread(|t| t.$sim.$field)
        }
    )*};
}

special_registers! {
    /// `threadIdx.x`: this thread's index within its block, x dimension.
    thread_idx_x => _thread_idx_x, thread_idx.x;
    /// `threadIdx.y`.
    thread_idx_y => _thread_idx_y, thread_idx.y;
    /// `threadIdx.z`.
    thread_idx_z => _thread_idx_z, thread_idx.z;
    /// `blockIdx.x`: this block's index within the grid, x dimension.
    block_idx_x => _block_idx_x, block_idx.x;
    /// `blockIdx.y`.
    block_idx_y => _block_idx_y, block_idx.y;
    /// `blockIdx.z`.
    block_idx_z => _block_idx_z, block_idx.z;
    /// `blockDim.x`: threads per block, x dimension.
    block_dim_x => _block_dim_x, block_dim.x;
    /// `blockDim.y`.
    block_dim_y => _block_dim_y, block_dim.y;
    /// `blockDim.z`.
    block_dim_z => _block_dim_z, block_dim.z;
    /// `gridDim.x`: blocks per grid, x dimension.
    grid_dim_x => _grid_dim_x, grid_dim.x;
    /// `gridDim.y`.
    grid_dim_y => _grid_dim_y, grid_dim.y;
    /// `gridDim.z`.
    grid_dim_z => _grid_dim_z, grid_dim.z;
}

/// Global 1-D index of this thread: `blockIdx.x * blockDim.x + threadIdx.x`.
#[inline(always)]
pub fn index_1d() -> u32 {
    block_idx_x() * block_dim_x() + thread_idx_x()
}

/// Global 2-D index of this thread as `(x, y)`: x is the column, y the row.
#[inline(always)]
pub fn index_2d() -> (u32, u32) {
    (block_idx_x() * block_dim_x() + thread_idx_x(), block_idx_y() * block_dim_y() + thread_idx_y())
}

/// Global 3-D index of this thread as `(x, y, z)`: x the column, y the row, z the slice of a
/// volume.
#[inline(always)]
pub fn index_3d() -> (u32, u32, u32) {
    (
        block_idx_x() * block_dim_x() + thread_idx_x(),
        block_idx_y() * block_dim_y() + thread_idx_y(),
        block_idx_z() * block_dim_z() + thread_idx_z(),
    )
}

/// Linear index of this block within the grid (`x + y·gx + z·gx·gy`).
#[inline(always)]
pub fn block_rank_in_grid() -> u32 {
    block_idx_x() + grid_dim_x() * (block_idx_y() + grid_dim_y() * block_idx_z())
}

/// Threads per block (`blockDim.x·blockDim.y·blockDim.z`).
#[inline(always)]
pub fn block_threads() -> u32 {
    block_dim_x() * block_dim_y() * block_dim_z()
}

/// Total number of threads in the grid along x: the step of a grid-stride loop.
#[inline(always)]
pub fn grid_stride_1d() -> u32 {
    grid_dim_x() * block_dim_x()
}

/// Linear index of this thread within its block (`x + y·bx + z·bx·by`), the order in which CUDA
/// groups threads into warps.
#[inline(always)]
pub fn thread_rank_in_block() -> u32 {
    thread_idx_x() + block_dim_x() * (thread_idx_y() + block_dim_y() * thread_idx_z())
}

/// `__syncthreads()`: waits until every thread of the block has reached this point, and makes
/// their shared- and global-memory writes visible to each other.
///
/// As on the GPU, every thread of the block that has not returned must reach the same barrier.
#[inline(always)]
#[cfg_attr(not(target_arch = "nvptx64"), track_caller)]
pub fn sync_threads() {
    #[cfg(target_arch = "nvptx64")]
    // SAFETY: a barrier has no memory-safety preconditions.
    unsafe {
        core::arch::nvptx::_syncthreads()
    }
    #[cfg(not(target_arch = "nvptx64"))]
    crate::sim::sync_threads(crate::sim::BarrierOp::Plain, false);
}

/// Named barriers: 16 per block, `id` 0 being [`sync_threads`]'s.
pub const NAMED_BARRIERS: u32 = 16;

/// `bar.sync id, threads`: waits at named barrier `id` (1..[`NAMED_BARRIERS`]) until `threads`
/// threads (a multiple of 32) have reached it, here or through [`barrier_arrive`]; memory accesses
/// made before arriving by any of them are visible to the threads that waited. With
/// [`barrier_arrive`] it lets warps of one block hand work to each other (a producer warp arrives,
/// the consumers wait) without stopping the whole block. Every lane of a warp calls it together,
/// and all parties of one round pass the same `threads`.
#[inline(always)]
#[cfg_attr(not(target_arch = "nvptx64"), track_caller)]
pub fn barrier_sync(id: u32, threads: u32) {
    named_barrier::<true>(id, threads)
}

/// `bar.arrive id, threads`: counts this thread at named barrier `id` without waiting (see
/// [`barrier_sync`]); its earlier memory accesses are visible to the threads that wait there.
#[inline(always)]
#[cfg_attr(not(target_arch = "nvptx64"), track_caller)]
pub fn barrier_arrive(id: u32, threads: u32) {
    named_barrier::<false>(id, threads)
}

/// [`barrier_sync`] (`WAIT`) or [`barrier_arrive`].
#[inline(always)]
#[cfg_attr(not(target_arch = "nvptx64"), track_caller)]
fn named_barrier<const WAIT: bool>(id: u32, threads: u32) {
    #[cfg(target_arch = "nvptx64")]
    // SAFETY: a barrier has no memory-safety preconditions.
    unsafe {
        if WAIT {
            core::arch::asm!("bar.sync {}, {};", in(reg32) id, in(reg32) threads);
        } else {
            core::arch::asm!("bar.arrive {}, {};", in(reg32) id, in(reg32) threads);
        }
    }
    #[cfg(not(target_arch = "nvptx64"))]
    crate::sim::named_barrier(id, threads, WAIT)
}

/// Busy-waits until `cycles` cycles of this SM's clock (`%clock64`) have passed since the call: a
/// deliberate delay, e.g. to start some blocks of a grid later than others so that phases that
/// compete for one resource (such as the epilogues' writes) do not line up. Returns at once in the
/// simulator, whose threads have no clock.
#[inline(always)]
pub fn spin_cycles(cycles: u64) {
    #[cfg(target_arch = "nvptx64")]
    {
        let start = clock64();
        while clock64().wrapping_sub(start) < cycles {}
    }
    #[cfg(not(target_arch = "nvptx64"))]
    let _ = cycles;
}

/// `clock64()`: this SM's cycle counter (`%clock64`), for timing the stages of a kernel from
/// inside it (differences within one block; SMs' counters are not synchronised). Always 0 in the
/// simulator, whose threads have no clock.
#[inline(always)]
pub fn clock64() -> u64 {
    #[cfg(target_arch = "nvptx64")]
    {
        let now: u64;
        // SAFETY: reading a special register has no preconditions.
        unsafe { core::arch::asm!("mov.u64 {}, %clock64;", out(reg64) now, options(nomem, nostack)) };
        now
    }
    #[cfg(not(target_arch = "nvptx64"))]
    0
}

/// `__nanosleep`: suspends this thread for about `ns` nanoseconds (up to a millisecond; the
/// hardware picks a duration in `[0, 2·ns]`), freeing its issue slots for other warps: the back-off
/// of a spin loop that polls memory another block writes. In the simulator it lets the block's other
/// threads run.
#[inline(always)]
pub fn nanosleep(ns: u32) {
    #[cfg(target_arch = "nvptx64")]
    // SAFETY: sleeping has no memory-safety preconditions.
    unsafe {
        core::arch::asm!("nanosleep.u32 {};", in(reg32) ns, options(nostack))
    };
    #[cfg(not(target_arch = "nvptx64"))]
    {
        let _ = ns;
        crate::sim::yield_now();
    }
}

/// `griddepcontrol.wait` (CUDA's `cudaGridDependencySynchronize`): in a kernel launched as a
/// programmatic dependent of the kernel before it on its queue (host: `Device::launch_dependent`),
/// waits until that kernel has finished and its memory writes are visible. Whatever a block does
/// before the call (its set-up, reading data the earlier kernel does not write) overlaps the
/// earlier kernel's last blocks, and the launch itself overlaps it too. Returns at once in a
/// kernel launched normally, in modules below sm_90 (where it compiles to nothing), and in the
/// simulator, which runs launches one after another.
#[inline(always)]
pub fn grid_dependency_synchronize() {
    #[cfg(all(target_arch = "nvptx64", target_feature = "sm_90a"))]
    // SAFETY: waiting for the prerequisite grid has no memory-safety preconditions.
    unsafe {
        core::arch::asm!("griddepcontrol.wait;", options(nostack))
    }
}

/// `griddepcontrol.launch_dependents` (CUDA's `cudaTriggerProgrammaticLaunchCompletion`): lets a
/// programmatic dependent of this kernel (see [`grid_dependency_synchronize`]) start its blocks
/// once every block of this one has called it or exited. It says nothing about this kernel's
/// writes: the dependent still waits for them in [`grid_dependency_synchronize`]. A no-op where
/// that is one.
#[inline(always)]
pub fn trigger_programmatic_launch_completion() {
    #[cfg(all(target_arch = "nvptx64", target_feature = "sm_90a"))]
    // SAFETY: signalling the dependent launch has no memory-safety preconditions.
    unsafe {
        core::arch::asm!("griddepcontrol.launch_dependents;", options(nostack))
    }
}
