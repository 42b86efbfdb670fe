//! 16- and 8-byte global-memory accesses that stay one instruction, and a streaming store for outputs.
//!
//! A plain `*(p as *mut [f32; 4])` through an `align(16)` type does not guarantee one `st.global.v4`:
//! where LLVM merges it with a scalar fallback path (the usual "vector inside, scalars at the edge"
//! shape of an epilogue) it may emit `st.global.v2` plus single stores, and the warp then writes each
//! 32-byte sector in several pieces (seen in the tensor-core kernels' epilogue: 35% excess sectors).
//! These functions are one PTX instruction each. In the simulator they are plain accesses that
//! check the alignment.

/// Loads four f32 from `ptr` in one `ld.global.v4.f32`.
///
/// # Safety
/// `ptr` is a global address of four readable f32, aligned to 16 bytes, that no thread writes
/// during the kernel.
#[inline(always)]
pub unsafe fn load_f32x4(ptr: *const f32) -> [f32; 4] {
    #[cfg(target_arch = "nvptx64")]
    {
        let (a, b, c, d): (u32, u32, u32, u32);
        // SAFETY: guaranteed by the caller.
        unsafe {
            core::arch::asm!(
                "ld.global.v4.b32 {{{}, {}, {}, {}}}, [{}];",
                out(reg32) a, out(reg32) b, out(reg32) c, out(reg32) d, in(reg64) ptr,
                options(pure, readonly, nostack),
            );
        }
        [a, b, c, d].map(f32::from_bits)
    }
    #[cfg(not(target_arch = "nvptx64"))]
    {
        assert!(is_aligned_16(ptr), "16-byte global access at a misaligned address {ptr:p}");
        // SAFETY: guaranteed by the caller.
        unsafe { *(ptr as *const [f32; 4]) }
    }
}

/// Stores four f32 at `ptr` in one `st.global.v4.f32`.
///
/// # Safety
/// `ptr` is a global address of four writable f32, aligned to 16 bytes, that no other thread
/// accesses during the kernel.
#[inline(always)]
pub unsafe fn store_f32x4(ptr: *mut f32, value: [f32; 4]) {
    // SAFETY: forwarded from the caller.
    unsafe { store_quad::<false>(ptr, value) }
}

/// [`store_f32x4`] marked as streaming (`st.global.cs.v4.f32`), as [`store_f32x2_streaming`].
///
/// # Safety
/// As for [`store_f32x4`].
#[inline(always)]
pub unsafe fn store_f32x4_streaming(ptr: *mut f32, value: [f32; 4]) {
    // SAFETY: forwarded from the caller.
    unsafe { store_quad::<true>(ptr, value) }
}

/// Stores two f32 at `ptr` in one `st.global.v2.f32`.
///
/// # Safety
/// `ptr` is a global address of two writable f32, aligned to 8 bytes, that no other thread
/// accesses during the kernel.
#[inline(always)]
pub unsafe fn store_f32x2(ptr: *mut f32, value: [f32; 2]) {
    // SAFETY: forwarded from the caller.
    unsafe { store_pair::<false>(ptr, value) }
}

/// [`store_f32x2`] marked as streaming (`st.global.cs.v2.f32`, CUDA's `__stcs`): the line is
/// written once and is the first to leave L2, so that a kernel's output, written once and not read
/// again, does not push its reused inputs out of L2. Measured on the H100: the `tf32-wgmma`
/// reconstruction's 64 MiB output at 4096² (k = 256) took 6% less time per call, at 8192² 15%,
/// run back to back (docs/benchmarks/tensor-cores.md).
///
/// # Safety
/// As for [`store_f32x2`].
#[inline(always)]
pub unsafe fn store_f32x2_streaming(ptr: *mut f32, value: [f32; 2]) {
    // SAFETY: forwarded from the caller.
    unsafe { store_pair::<true>(ptr, value) }
}

/// Defines `$name::<STREAMING>(ptr, value)`: `$n` f32 in one `st.global.v$n.b32`, or with
/// `STREAMING` one `st.global.cs.v$n.b32`; in the simulator a plain store that checks the
/// alignment.
macro_rules! vector_store {
    ($(#[$doc:meta])* $name:ident, $n:literal, $aligned:ident, [$($x:ident)*], $operands:literal) => {
        $(#[$doc])*
        #[inline(always)]
        unsafe fn $name<const STREAMING: bool>(ptr: *mut f32, value: [f32; $n]) {
            #[cfg(target_arch = "nvptx64")]
            {
                let [$($x),*] = value.map(f32::to_bits);
                // SAFETY: guaranteed by the caller.
                unsafe {
                    if STREAMING {
                        core::arch::asm!(
                            concat!("st.global.cs.v", $n, ".b32 [{}], {{", $operands, "}};"),
                            in(reg64) ptr, $(in(reg32) $x,)*
                            options(nostack),
                        );
                    } else {
                        core::arch::asm!(
                            concat!("st.global.v", $n, ".b32 [{}], {{", $operands, "}};"),
                            in(reg64) ptr, $(in(reg32) $x,)*
                            options(nostack),
                        );
                    }
                }
            }
            #[cfg(not(target_arch = "nvptx64"))]
            {
                assert!($aligned(ptr), "{}-byte global access at a misaligned address {ptr:p}", 4 * $n);
                // SAFETY: guaranteed by the caller.
                unsafe { *(ptr as *mut [f32; $n]) = value }
            }
        }
    };
}

vector_store!(
    /// [`store_f32x2`] (`STREAMING` false) and [`store_f32x2_streaming`].
    store_pair, 2, is_aligned_8, [a b], "{}, {}"
);
vector_store!(
    /// [`store_f32x4`] (`STREAMING` false) and [`store_f32x4_streaming`].
    store_quad, 4, is_aligned_16, [a b c d], "{}, {}, {}, {}"
);

/// Whether `ptr` may be used for an 8-byte access.
#[inline(always)]
pub fn is_aligned_8<T>(ptr: *const T) -> bool {
    (ptr as usize).is_multiple_of(8)
}

/// Whether `ptr` may be used for a 16-byte access.
#[inline(always)]
pub fn is_aligned_16<T>(ptr: *const T) -> bool {
    (ptr as usize).is_multiple_of(16)
}
