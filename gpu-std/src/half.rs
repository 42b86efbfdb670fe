//! Half-precision scalars: IEEE binary16 [`f16`](struct@f16) and bfloat16 [`bf16`] (the `half` crate's types,
//! which store and compare as on the GPU), with conversions that are one `cvt` instruction on the
//! GPU.
//!
//! Arithmetic goes through f32: `to_f16(from_f16(a) * from_f16(b))`. Slices of either type are
//! ordinary device slices (`&[f16]`), two bytes an element; the tensor-core MMAs in
//! [`mma`](crate::mma) take them packed in pairs.

pub use ::half::{bf16, f16};

/// The f16 nearest to `x` (ties to even; past the range: ±∞), as `cvt.rn.f16.f32`.
#[inline(always)]
pub fn to_f16(x: f32) -> f16 {
    #[cfg(target_arch = "nvptx64")]
    {
        let bits: u16;
        // SAFETY: a register conversion.
        unsafe {
            core::arch::asm!("cvt.rn.f16.f32 {}, {};", out(reg16) bits, in(reg32) x, options(pure, nomem, nostack))
        };
        f16::from_bits(bits)
    }
    #[cfg(not(target_arch = "nvptx64"))]
    f16::from_f32(x)
}

/// `h` as f32 (exact), as `cvt.f32.f16`.
#[inline(always)]
pub fn from_f16(h: f16) -> f32 {
    #[cfg(target_arch = "nvptx64")]
    {
        let x: f32;
        // SAFETY: a register conversion.
        unsafe {
            core::arch::asm!("cvt.f32.f16 {}, {};", out(reg32) x, in(reg16) h.to_bits(), options(pure, nomem, nostack))
        };
        x
    }
    #[cfg(not(target_arch = "nvptx64"))]
    h.to_f32()
}

/// The bf16 nearest to `x` (ties to even), as `cvt.rn.bf16.f32` (sm_80).
#[inline(always)]
pub fn to_bf16(x: f32) -> bf16 {
    #[cfg(target_arch = "nvptx64")]
    {
        let bits: u16;
        // SAFETY: a register conversion.
        unsafe {
            core::arch::asm!("cvt.rn.bf16.f32 {}, {};", out(reg16) bits, in(reg32) x, options(pure, nomem, nostack))
        };
        bf16::from_bits(bits)
    }
    #[cfg(not(target_arch = "nvptx64"))]
    bf16::from_f32(x)
}

/// `b` as f32 (exact: bf16 is the top half of an f32).
#[inline(always)]
pub fn from_bf16(b: bf16) -> f32 {
    f32::from_bits((b.to_bits() as u32) << 16)
}
