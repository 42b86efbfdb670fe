//! Copies into and out of shared memory: shared-window addresses, `ldmatrix`, `cp.async` from
//! global memory (sm_80) and bulk stores to global memory through the copy engine (sm_90).

#[cfg(not(target_arch = "nvptx64"))]
use crate::warp::lane_id;

/// The shared-window address of `ptr`, a pointer into this block's dynamic shared memory (e.g.
/// from [`crate::shared::DynamicShared::as_ptr`]): what the `cp_async_*` functions take as their
/// destination. Add byte offsets to it to address other elements.
#[inline(always)]
pub fn shared_address<T>(ptr: *const T) -> u32 {
    #[cfg(target_arch = "nvptx64")]
    {
        let address: u64;
        // SAFETY: address arithmetic only.
        unsafe {
            core::arch::asm!("cvta.to.shared.u64 {}, {};", out(reg64) address, in(reg64) ptr as u64);
        }
        address as u32
    }
    #[cfg(not(target_arch = "nvptx64"))]
    crate::sim::shared_offset(ptr as *const u8)
}

/// Loads four 8 × 8 matrices of 16-bit elements from shared memory, one register of each per lane
/// (`ldmatrix.sync.aligned.m8n8.x4.shared.b16`). Lane `l` passes `row`, the shared-window address
/// ([`shared_address`]) of row `l % 8` of matrix `l / 8`, 16 bytes aligned to 16; register `q` of
/// lane `l` receives bytes `4·(l % 4)` to `4·(l % 4) + 4` of row `l / 4` of matrix `q`.
///
/// For 32-bit elements (tf32) each row is 4 elements and lane `l` receives element `(l / 4, l % 4)`
/// of each 8 × 4 matrix: the `A` fragment of [`mma_tf32_m16n8k8`](super::mma_tf32_m16n8k8) in one instruction when matrices
/// 0..4 are rows 0..8 / columns 0..4, rows 8..16 / columns 0..4, rows 0..8 / columns 4..8 and rows
/// 8..16 / columns 4..8 of `A`. Every lane of the warp must call it together.
///
/// # Safety
/// Every lane's `row` is a 16-byte-aligned shared-window address with 16 bytes inside the block's
/// dynamic shared memory, written before (and published by a barrier where other threads wrote it).
#[inline(always)]
pub unsafe fn ldmatrix_x4(row: u32) -> [u32; 4] {
    #[cfg(target_arch = "nvptx64")]
    {
        let (d0, d1, d2, d3): (u32, u32, u32, u32);
        // SAFETY: guaranteed by the caller.
        unsafe {
            core::arch::asm!(
                "ldmatrix.sync.aligned.m8n8.x4.shared.b16 {{{}, {}, {}, {}}}, [{}];",
                out(reg32) d0, out(reg32) d1, out(reg32) d2, out(reg32) d3,
                in(reg32) row,
                options(readonly, nostack),
            );
        }
        [d0, d1, d2, d3]
    }
    #[cfg(not(target_arch = "nvptx64"))]
    {
        assert!(row.is_multiple_of(16), "ldmatrix row at a misaligned shared address {row}");
        let rows = crate::sim::warp_gather([row as u64]);
        let lane = lane_id() as usize;
        core::array::from_fn(|q| {
            let at = rows[8 * q + lane / 4][0] as u32 + 4 * (lane % 4) as u32;
            // SAFETY: in the block's shared memory (checked by the simulator), aligned to 4.
            unsafe { *(crate::sim::shared_bytes_at(at, 4) as *const u32) }
        })
    }
}

/// The simulator's `cp.async`: copies `src_bytes` (at most `size`) and zero-fills the rest.
#[cfg(not(target_arch = "nvptx64"))]
unsafe fn cp_async_sim(dst: u32, src: *const u8, size: usize, src_bytes: u32) {
    let src_bytes = (src_bytes as usize).min(size);
    assert!(
        (dst as usize).is_multiple_of(size),
        "cp.async of {size} bytes to a misaligned shared address {dst}"
    );
    assert!(
        (src as usize).is_multiple_of(size),
        "cp.async of {size} bytes from a misaligned global address {src:p}"
    );
    let dst = crate::sim::shared_bytes_at(dst, size);
    // SAFETY: `dst` holds `size` bytes (checked by the simulator); `src` holds `src_bytes` bytes by
    // the caller's contract.
    unsafe {
        core::ptr::copy_nonoverlapping(src, dst, src_bytes);
        core::ptr::write_bytes(dst.add(src_bytes), 0, size - src_bytes);
    }
}

macro_rules! cp_async {
    ($(#[$doc:meta])* $name:ident, $size:literal, $ptx:literal) => {
        $(#[$doc])*
        ///
        /// # Safety
        /// `dst` is a shared-window address ([`shared_address`]) with the copy's size in bytes
        /// inside the block's dynamic shared memory, and `src` a global address, both aligned to
        /// the copy's size; the first `src_bytes` bytes at `src` must be readable (none
        /// when `src_bytes` is 0). Nothing may read the destination before a
        /// [`cp_async_wait_group`] that covers the copy.
        #[inline(always)]
        pub unsafe fn $name<T>(dst: u32, src: *const T, src_bytes: u32) {
            #[cfg(target_arch = "nvptx64")]
            // SAFETY: guaranteed by the caller.
            unsafe {
                core::arch::asm!($ptx, in(reg32) dst, in(reg64) src, in(reg32) src_bytes);
            }
            #[cfg(not(target_arch = "nvptx64"))]
            // SAFETY: guaranteed by the caller.
            unsafe {
                cp_async_sim(dst, src as *const u8, $size, src_bytes)
            }
        }
    };
}

cp_async!(
    /// Starts a 16-byte copy from global to shared memory, caching in L2 only
    /// (`cp.async.cg.shared.global [dst], [src], 16, src_bytes`): `src_bytes` (0..=16) bytes are
    /// read, the rest of the 16 zero-filled.
    cp_async_16,
    16,
    "cp.async.cg.shared.global [{}], [{}], 16, {};"
);

cp_async!(
    /// Starts an 8-byte copy from global to shared memory (`cp.async.ca.shared.global [dst], [src],
    /// 8, src_bytes`): `src_bytes` (0..=8) bytes are read, the rest zero-filled.
    cp_async_8,
    8,
    "cp.async.ca.shared.global [{}], [{}], 8, {};"
);

cp_async!(
    /// Starts a 4-byte copy from global to shared memory (`cp.async.ca.shared.global [dst], [src],
    /// 4, src_bytes`): `src_bytes` (0 or 4) bytes are read, the rest zero-filled.
    cp_async_4,
    4,
    "cp.async.ca.shared.global [{}], [{}], 4, {};"
);

/// Closes the group of this thread's `cp.async` copies issued since the previous commit
/// (`cp.async.commit_group`); an empty group is allowed.
#[inline(always)]
pub fn cp_async_commit_group() {
    #[cfg(target_arch = "nvptx64")]
    // SAFETY: no operands.
    unsafe {
        core::arch::asm!("cp.async.commit_group;");
    }
}

/// Waits until at most `N` of this thread's committed `cp.async` groups are still in flight
/// (`cp.async.wait_group N`); `N = 0` waits for all. Follow it with a barrier before other threads
/// read the data. A no-op in the simulator, whose copies are synchronous.
#[inline(always)]
pub fn cp_async_wait_group<const N: u32>() {
    #[cfg(target_arch = "nvptx64")]
    // SAFETY: no memory operands.
    unsafe {
        core::arch::asm!("cp.async.wait_group {};", const N);
    }
}

/// Starts a bulk copy of `bytes` from shared to global memory, done by the SM's copy engine (TMA)
/// while the thread goes on (`cp.async.bulk.global.shared::cta.bulk_group [dst], [src], bytes`),
/// marked evict-first in L2 (`.L2::cache_hint` with a `createpolicy` evict-first policy): for
/// output written once. Copies issued since the last [`cp_async_bulk_commit_group`] form one bulk
/// group of this thread; [`cp_async_bulk_wait_group_read`] says when their source may be
/// overwritten. Needs sm_90. In the simulator a synchronous copy.
///
/// # Safety
/// `src` is a shared-window address ([`shared_address`]) of `bytes` inside the block's dynamic
/// shared memory and `dst` a global address of `bytes` writable bytes, both 16-byte aligned, and
/// `bytes` a multiple of 16. The shared-memory writes of the source must be made visible to the
/// copy engine first ([`fence_proxy_async_shared`](super::fence_proxy_async_shared) by each writer, then a barrier), and nothing
/// may write the source before the wait.
#[inline(always)]
pub unsafe fn cp_async_bulk_store_streaming<T>(dst: *mut T, src: u32, bytes: u32) {
    #[cfg(target_arch = "nvptx64")]
    // SAFETY: guaranteed by the caller.
    unsafe {
        core::arch::asm!(
            "{{ .reg .b64 policy; createpolicy.fractional.L2::evict_first.b64 policy, 1.0; \
             cp.async.bulk.global.shared::cta.bulk_group.L2::cache_hint [{}], [{}], {}, policy; }}",
            in(reg64) dst,
            in(reg32) src,
            in(reg32) bytes,
        );
    }
    #[cfg(not(target_arch = "nvptx64"))]
    {
        let (at, dst) = (src as usize, dst as *mut u8);
        assert!(
            at.is_multiple_of(16) && (dst as usize).is_multiple_of(16) && bytes.is_multiple_of(16),
            "bulk copy of {bytes} bytes from shared address {at} to {dst:p}: both addresses and the \
             size must be multiples of 16"
        );
        let from = crate::sim::shared_bytes_at(src, bytes as usize);
        // SAFETY: `from` holds `bytes` (checked by the simulator), `dst` by the caller's contract.
        unsafe { core::ptr::copy_nonoverlapping(from, dst, bytes as usize) };
    }
}

/// Closes this thread's group of bulk copies issued since the previous commit
/// (`cp.async.bulk.commit_group`).
#[inline(always)]
pub fn cp_async_bulk_commit_group() {
    #[cfg(target_arch = "nvptx64")]
    // SAFETY: no operands.
    unsafe {
        core::arch::asm!("cp.async.bulk.commit_group;");
    }
}

/// Waits until at most `N` of this thread's bulk groups are still reading their shared-memory
/// sources (`cp.async.bulk.wait_group.read N`): after it (and a barrier, for other threads) the
/// sources may be overwritten. A block must wait for its copies' reads before it exits. A no-op in
/// the simulator.
#[inline(always)]
pub fn cp_async_bulk_wait_group_read<const N: u32>() {
    #[cfg(target_arch = "nvptx64")]
    // SAFETY: no memory operands.
    unsafe {
        core::arch::asm!("cp.async.bulk.wait_group.read {};", const N);
    }
}
