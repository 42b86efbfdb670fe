//! Warp-level shuffles: exchanging registers between the 32 lanes of a warp without shared memory.
//!
//! In the simulator every lane of the warp must take part (the full mask, `FULL_MASK`), which is
//! also what the kernels of this suite use on the GPU.

/// Threads per warp.
pub const WARP_SIZE: u32 = 32;

/// Mask naming all 32 lanes.
pub const FULL_MASK: u32 = 0xffff_ffff;

/// This thread's lane within its warp, `0..32`.
#[inline(always)]
pub fn lane_id() -> u32 {
    crate::thread::thread_rank_in_block() % WARP_SIZE
}

/// A value that can travel through a shuffle: 32- or 64-bit (64-bit values take two shuffles).
pub trait Shuffle: Copy {
    #[doc(hidden)]
    fn to_bits(self) -> u64;
    #[doc(hidden)]
    fn from_bits(bits: u64) -> Self;
    #[doc(hidden)]
    const WIDE: bool;
}

macro_rules! shuffle_type {
    ($t:ty, $bits:ty, $wide:expr) => {
        impl Shuffle for $t {
            #[inline(always)]
            fn to_bits(self) -> u64 {
                self.to_bits() as u64
            }
            #[inline(always)]
            fn from_bits(bits: u64) -> Self {
                <$t>::from_bits(bits as $bits)
            }
            const WIDE: bool = $wide;
        }
    };
}
shuffle_type!(f32, u32, false);
shuffle_type!(f64, u64, true);

macro_rules! shuffle_int {
    ($t:ty, $wide:expr) => {
        impl Shuffle for $t {
            #[inline(always)]
            fn to_bits(self) -> u64 {
                self as u64
            }
            #[inline(always)]
            fn from_bits(bits: u64) -> Self {
                bits as $t
            }
            const WIDE: bool = $wide;
        }
    };
}
shuffle_int!(u32, false);
shuffle_int!(i32, false);
shuffle_int!(u64, true);

/// The three shuffle modes of `shfl.sync`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[doc(hidden)]
pub enum Mode {
    /// Read from lane `lane + delta` (own value if that is past the warp).
    Down,
    /// Read from lane `lane ^ mask`.
    Xor,
    /// Read from lane `src`.
    Idx,
}

#[cfg(target_arch = "nvptx64")]
#[inline(always)]
fn shfl_b32(mode: Mode, mask: u32, value: u32, lane_arg: u32) -> u32 {
    let out: u32;
    // SAFETY: register exchange within the warp; `mask` names the participating lanes.
    unsafe {
        match mode {
            Mode::Down => core::arch::asm!("shfl.sync.down.b32 {}, {}, {}, 0x1f, {};",
                out(reg32) out, in(reg32) value, in(reg32) lane_arg, in(reg32) mask),
            Mode::Xor => core::arch::asm!("shfl.sync.bfly.b32 {}, {}, {}, 0x1f, {};",
                out(reg32) out, in(reg32) value, in(reg32) lane_arg, in(reg32) mask),
            Mode::Idx => core::arch::asm!("shfl.sync.idx.b32 {}, {}, {}, 0x1f, {};",
                out(reg32) out, in(reg32) value, in(reg32) lane_arg, in(reg32) mask),
        }
    }
    out
}

#[inline(always)]
fn shuffle<T: Shuffle>(mode: Mode, mask: u32, value: T, lane_arg: u32) -> T {
    #[cfg(target_arch = "nvptx64")]
    {
        let bits = value.to_bits();
        let lo = shfl_b32(mode, mask, bits as u32, lane_arg) as u64;
        let hi = if T::WIDE { shfl_b32(mode, mask, (bits >> 32) as u32, lane_arg) as u64 } else { 0 };
        T::from_bits(lo | (hi << 32))
    }
    #[cfg(not(target_arch = "nvptx64"))]
    {
        let _ = mask;
        T::from_bits(crate::sim::shuffle(mode, value.to_bits(), lane_arg))
    }
}

/// `__shfl_down_sync`: the value of lane `lane_id() + delta`, or this lane's own value when that
/// lane is past the end of the warp. The building block of warp reductions.
#[inline(always)]
pub fn shfl_down_sync<T: Shuffle>(mask: u32, value: T, delta: u32) -> T {
    shuffle(Mode::Down, mask, value, delta)
}

/// `__shfl_xor_sync`: the value of lane `lane_id() ^ lane_mask` (butterfly exchange).
#[inline(always)]
pub fn shfl_xor_sync<T: Shuffle>(mask: u32, value: T, lane_mask: u32) -> T {
    shuffle(Mode::Xor, mask, value, lane_mask)
}

/// `__shfl_sync`: the value of lane `src_lane` (a broadcast when all lanes pass the same lane).
#[inline(always)]
pub fn shfl_sync<T: Shuffle>(mask: u32, value: T, src_lane: u32) -> T {
    shuffle(Mode::Idx, mask, value, src_lane)
}
