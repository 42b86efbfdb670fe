//! Warpgroup MMA (Hopper, sm_90a): `wgmma.mma_async` on tf32 operands read from 128-byte-swizzled
//! shared-memory tiles through descriptors (or `A` from registers), with its fences and waits.

use super::{m16n8_c_coords, tf32_a_coords};

/// `wgmma.mma_async` with `N` accumulator registers per thread, `A` and `B` from descriptors,
/// `D` accumulated where `$add` (a `u32`) is nonzero (`scale-d`), overwritten otherwise, and both
/// operands taken as they are (scales 1).
#[cfg(target_arch = "nvptx64")]
macro_rules! wgmma_asm {
    ($acc:ident, $a:expr, $b:expr, $add:expr, $shape:literal, [$first:literal $($i:literal)*]) => {
        core::arch::asm!(
            concat!(
                "{{ .reg .pred p; setp.ne.b32 p, {add}, 0; wgmma.mma_async.sync.aligned.", $shape,
                ".f32.tf32.tf32 {{{", stringify!($first), "}", $(", {", stringify!($i), "}",)*
                "}}, {a}, {b}, p, 1, 1; }}"
            ),
            inout(reg32) $acc[$first],
            $(inout(reg32) $acc[$i],)*
            a = in(reg64) $a,
            b = in(reg64) $b,
            add = in(reg32) $add,
        )
    };
}

/// `wgmma_asm!` with `A` from four registers (tf32 bits of the fragment, [`wgmma_m64_a_coords`]).
#[cfg(target_arch = "nvptx64")]
macro_rules! wgmma_rs_asm {
    ($acc:ident, $a:expr, $b:expr, $add:expr, $shape:literal, [$first:literal $($i:literal)*]) => {
        core::arch::asm!(
            concat!(
                "{{ .reg .pred p; setp.ne.b32 p, {add}, 0; wgmma.mma_async.sync.aligned.", $shape,
                ".f32.tf32.tf32 {{{", stringify!($first), "}", $(", {", stringify!($i), "}",)*
                "}}, {{{a0}, {a1}, {a2}, {a3}}}, {b}, p, 1, 1; }}"
            ),
            inout(reg32) $acc[$first],
            $(inout(reg32) $acc[$i],)*
            a0 = in(reg32) $a[0].to_bits(),
            a1 = in(reg32) $a[1].to_bits(),
            a2 = in(reg32) $a[2].to_bits(),
            a3 = in(reg32) $a[3].to_bits(),
            b = in(reg64) $b,
            add = in(reg32) $add,
        )
    };
}

/// Bytes per row of a 128-byte-swizzled operand tile (32 f32/tf32 values along `k`).
pub const WGMMA_ROW_BYTES: u32 = 128;
/// Bytes of one swizzle atom: 8 rows of [`WGMMA_ROW_BYTES`]. Tiles start on a multiple of it.
pub const WGMMA_ATOM_BYTES: u32 = 8 * WGMMA_ROW_BYTES;

/// Byte offset, in a K-major tile with 128-byte swizzle, of element `(row, kk)` (`kk`, 0..32, the
/// 4-byte element along `k`): rows of 128 bytes, and inside each group of 8 rows the 16-byte chunk
/// `kk / 4` of row `r` stored at chunk `(kk / 4) ^ (r % 8)` — the layout [`wgmma_descriptor_sw128`]
/// describes, in which the 8 rows of one chunk column lie in 8 different bank groups. The tile must
/// start on a [`WGMMA_ATOM_BYTES`] boundary (the hardware swizzles by address bits).
#[inline(always)]
pub const fn sw128_offset(row: u32, kk: u32) -> u32 {
    row * WGMMA_ROW_BYTES + (((kk / 4) ^ (row % 8)) * 16) + (kk % 4) * 4
}

/// The shared-memory matrix descriptor of a `wgmma` operand (PTX ISA, "Matrix Descriptor Format"):
/// a K-major tile with 128-byte swizzle whose rows of 128 bytes ([`sw128_offset`]) start at
/// shared-window address `start` (a [`WGMMA_ATOM_BYTES`] boundary, plus `4·kk0` to start at
/// element `kk0` along `k`, as one k8 step of a 32-wide tile does). Groups of 8 rows are
/// [`WGMMA_ATOM_BYTES`] apart (the stride byte offset); the leading byte offset is unused for
/// swizzled K-major tiles.
#[inline(always)]
pub const fn wgmma_descriptor_sw128(start: u32) -> u64 {
    const STRIDE: u64 = (WGMMA_ATOM_BYTES as u64 >> 4) << 32;
    const LEADING: u64 = 1 << 16;
    const SWIZZLE_128B: u64 = 1 << 62;
    ((start as u64 & 0x3ffff) >> 4) | LEADING | STRIDE | SWIZZLE_128B
}

/// `wgmma.fence.sync.aligned`: orders this warpgroup's earlier register and shared-memory accesses
/// before the `wgmma` operations that follow. Needed before the first [`wgmma_tf32_m64n128k8`] of a
/// batch whose accumulators were touched by other instructions. A no-op in the simulator.
#[inline(always)]
pub fn wgmma_fence() {
    #[cfg(target_arch = "nvptx64")]
    // SAFETY: no operands; all threads of the warpgroup execute it.
    unsafe {
        core::arch::asm!("wgmma.fence.sync.aligned;");
    }
}

/// `wgmma.commit_group.sync.aligned`: closes the group of `wgmma` operations issued since the last
/// commit. A no-op in the simulator.
#[inline(always)]
pub fn wgmma_commit_group() {
    #[cfg(target_arch = "nvptx64")]
    // SAFETY: no operands.
    unsafe {
        core::arch::asm!("wgmma.commit_group.sync.aligned;");
    }
}

/// `wgmma.wait_group.sync.aligned N`: waits until at most `N` committed `wgmma` groups of this
/// warpgroup are pending; after `N = 0` the accumulators hold the results and the shared-memory
/// operands may be overwritten. A no-op in the simulator, whose `wgmma` is synchronous.
#[inline(always)]
pub fn wgmma_wait_group<const N: u32>() {
    #[cfg(target_arch = "nvptx64")]
    // SAFETY: no memory operands.
    unsafe {
        core::arch::asm!("wgmma.wait_group.sync.aligned {};", const N);
    }
}

/// `fence.proxy.async.shared::cta`: makes this thread's ordinary shared-memory writes visible to
/// the asynchronous proxy that `wgmma` reads its operands through. Each writing thread fences, then
/// a barrier, then the `wgmma`. A no-op in the simulator.
#[inline(always)]
pub fn fence_proxy_async_shared() {
    #[cfg(target_arch = "nvptx64")]
    // SAFETY: no operands.
    unsafe {
        core::arch::asm!("fence.proxy.async.shared::cta;");
    }
}

/// Element `(row, column)` of the 64 × 128 accumulator held in register `r` (0..64) of thread
/// `thread` (0..128) of the warpgroup for [`wgmma_tf32_m64n128k8`]: warp `thread / 32` owns rows
/// 16·warp .. +16, and each 8-column block `r / 4` repeats the m16n8 layout of [`m16n8_c_coords`].
#[inline(always)]
pub fn wgmma_m64_c_coords(thread: u32, r: u32) -> (u32, u32) {
    let (row, col) = m16n8_c_coords(thread % 32, r % 4);
    (16 * (thread / 32) + row, 8 * (r / 4) + col)
}

/// `D = A·B + D` for one warpgroup (4 warps, 128 threads, all calling together): `A` is 64 × 8,
/// `B` is 8 × 128 (k × n), both tf32 read from shared memory through their descriptors
/// ([`wgmma_descriptor_sw128`]; `B` stored as 128 rows of `n`, K-major, i.e. `Bᵀ` row-major),
/// `D` 64 × 128 f32 with each thread holding 64 values ([`wgmma_m64_c_coords`]). Asynchronous
/// (`wgmma.mma_async.sync.aligned.m64n128k8.f32.tf32.tf32`): issue it after [`wgmma_fence`], close
/// the batch with [`wgmma_commit_group`] and read `acc` or overwrite the operands only after
/// [`wgmma_wait_group`]. Needs sm_90a (H100/H200). The tensor cores read the tf32 bits of each
/// operand (truncation): kernels round first ([`round_tf32`](super::round_tf32)).
///
/// In the simulator each thread computes its own 64 elements at the call (exact products of the
/// truncated operands summed in f64, added to `acc` and rounded once), reading shared memory through
/// the descriptors as the hardware does, swizzle included.
///
/// # Safety
/// Both descriptors describe tiles inside the block's dynamic shared memory, written and published
/// (each writer's [`fence_proxy_async_shared`], then a barrier) before the call, and not written
/// again before the wait.
#[inline(always)]
pub unsafe fn wgmma_tf32_m64n128k8(acc: &mut [f32; 64], a: u64, b: u64) {
    // SAFETY: forwarded from the caller.
    unsafe { wgmma_tf32_m64n128k8_into(acc, a, b, true) }
}

/// [`wgmma_tf32_m64n128k8`] that accumulates only where `add` (`D = A·B + D`), and otherwise
/// overwrites the accumulators (`D = A·B`, the instruction's `scale-d` false): the first MMA of an
/// output tile, so that a kernel which computes several tiles never writes the accumulators with
/// ordinary instructions while MMAs are in flight (ptxas would wait for them there).
///
/// # Safety
/// As for [`wgmma_tf32_m64n128k8`].
#[inline(always)]
pub unsafe fn wgmma_tf32_m64n128k8_into(acc: &mut [f32; 64], a: u64, b: u64, add: bool) {
    #[cfg(target_arch = "nvptx64")]
    // SAFETY: guaranteed by the caller.
    unsafe {
        wgmma_asm!(acc, a, b, add as u32, "m64n128k8", [
            0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 22 23 24 25 26 27 28 29 30 31
            32 33 34 35 36 37 38 39 40 41 42 43 44 45 46 47 48 49 50 51 52 53 54 55 56 57 58 59 60 61 62 63
        ]);
    }
    #[cfg(not(target_arch = "nvptx64"))]
    {
        let thread = crate::thread::thread_idx_x() % 128;
        for (r, d) in (0u32..).zip(acc.iter_mut()) {
            let (i, j) = wgmma_m64_c_coords(thread, r);
            let sum: f64 = (0..8).map(|p| sw128_read_tf32(a, i, p) * sw128_read_tf32(b, j, p)).sum();
            *d = if add { (sum + *d as f64) as f32 } else { sum as f32 };
        }
    }
}

/// Element `(row, column)` of the 64 × 8 `A` held in register `r` (0..4) of thread `thread`
/// (0..128) of the warpgroup for [`wgmma_tf32_m64n128k8_rs`]: warp `thread / 32` holds rows
/// 16·warp .. +16 in the layout of [`tf32_a_coords`] (the rows of its own accumulators).
#[inline(always)]
pub fn wgmma_m64_a_coords(thread: u32, r: u32) -> (u32, u32) {
    let (row, col) = tf32_a_coords(thread % 32, r);
    (16 * (thread / 32) + row, col)
}

/// [`wgmma_tf32_m64n128k8`] with `A` from registers: each thread passes its four elements of the
/// 64 × 8 `A` ([`wgmma_m64_a_coords`]), `B` still comes through its descriptor
/// (`wgmma.mma_async.sync.aligned.m64n128k8.f32.tf32.tf32 d, {a0..a3}, b-desc`). Saves the
/// shared-memory reads of `A` when the kernel computes `A` in registers anyway (a 3xTF32 split).
/// Issue it after a [`wgmma_fence`] that follows the last write of `a` (the instruction reads its
/// registers asynchronously) and, as for the other form, read `acc` only after
/// [`wgmma_wait_group`]. In the simulator the warp's lanes exchange their fragments.
///
/// # Safety
/// As for [`wgmma_tf32_m64n128k8`], for `b`.
#[inline(always)]
pub unsafe fn wgmma_tf32_m64n128k8_rs(acc: &mut [f32; 64], a: [f32; 4], b: u64) {
    // SAFETY: forwarded from the caller.
    unsafe { wgmma_tf32_m64n128k8_rs_into(acc, a, b, true) }
}

/// [`wgmma_tf32_m64n128k8_rs`] that accumulates only where `add`, and otherwise overwrites the
/// accumulators, as [`wgmma_tf32_m64n128k8_into`] does: `A` held in registers for a whole panel.
///
/// # Safety
/// As for [`wgmma_tf32_m64n128k8`], for `b`.
#[inline(always)]
pub unsafe fn wgmma_tf32_m64n128k8_rs_into(acc: &mut [f32; 64], a: [f32; 4], b: u64, add: bool) {
    #[cfg(target_arch = "nvptx64")]
    // SAFETY: guaranteed by the caller.
    unsafe {
        wgmma_rs_asm!(acc, a, b, add as u32, "m64n128k8", [
            0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 22 23 24 25 26 27 28 29 30 31
            32 33 34 35 36 37 38 39 40 41 42 43 44 45 46 47 48 49 50 51 52 53 54 55 56 57 58 59 60 61 62 63
        ]);
    }
    #[cfg(not(target_arch = "nvptx64"))]
    {
        let thread = crate::thread::thread_idx_x() % 128;
        let word = |x: f32, y: f32| x.to_bits() as u64 | (y.to_bits() as u64) << 32;
        let all = crate::sim::warp_gather([word(a[0], a[1]), word(a[2], a[3])]);
        // This warp's 16 rows of A (the only rows its accumulators need), truncated to tf32.
        let mut am = [[0.0f64; 8]; 16];
        for (lane, words) in (0u32..).zip(all.iter()) {
            for r in 0..4 {
                let (i, p) = wgmma_m64_a_coords(lane, r);
                let bits = (words[r as usize / 2] >> (32 * (r % 2))) as u32;
                am[i as usize][p as usize] = f32::from_bits(bits & !0x1fff) as f64;
            }
        }
        for (r, d) in (0u32..).zip(acc.iter_mut()) {
            let (i, j) = wgmma_m64_c_coords(thread, r);
            let row = &am[(i % 16) as usize];
            let sum: f64 = (0..8).map(|p| row[p as usize] * sw128_read_tf32(b, j, p)).sum();
            *d = if add { (sum + *d as f64) as f32 } else { sum as f32 };
        }
    }
}

/// The simulator's read of element `(row, kk)` of a K-major, 128-byte-swizzled tile through its
/// descriptor, truncated to tf32 as the tensor cores read it.
#[cfg(not(target_arch = "nvptx64"))]
fn sw128_read_tf32(descriptor: u64, row: u32, kk: u32) -> f64 {
    let start = ((descriptor & 0x3fff) << 4) as u32;
    let stride = (((descriptor >> 32) & 0x3fff) << 4) as u32;
    assert_eq!(descriptor >> 62, 1, "the simulator's wgmma supports 128-byte swizzle only");
    assert_eq!(stride, WGMMA_ATOM_BYTES, "stride byte offset of a 128-byte-swizzled tile");
    assert!(
        (start >> 7) & 7 == 0,
        "wgmma tile at shared address {start} does not start on a {WGMMA_ATOM_BYTES}-byte boundary"
    );
    let address = start + (row / 8) * stride + (row % 8) * WGMMA_ROW_BYTES + 4 * kk;
    let swizzled = address ^ (((address >> 7) & 7) << 4);
    // SAFETY: in the block's shared memory (checked by the simulator), aligned to 4.
    let bits = unsafe { *(crate::sim::shared_bytes_at(swizzled, 4) as *const u32) };
    f32::from_bits(bits & !0x1fff) as f64
}
