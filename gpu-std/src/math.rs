//! f32/f64 math. On the GPU these call CUDA's libdevice (`__nv_sinf`, `__nv_atan2`, …), linked in
//! by the builder, so the results have libdevice's documented accuracy (a few ulp at most). On the
//! host they call Rust's `std`, whose results can differ from libdevice's in the last bits.
//!
//! Call them as free functions, `math::sin(x)`, for `x` of type `f32` or `f64`. The hardware
//! approximations (`sin.approx`, `ex2.approx`, …) are in [`fast`], chosen explicitly: nothing in
//! this module silently trades accuracy for speed.

use core::ops::{Add, AddAssign, Div, DivAssign, Mul, MulAssign, Neg, Sub, SubAssign};

/// f32 or f64: the types the functions of this module take, and the bound of a generic kernel
/// (`#[kernel(f32, f64)] pub fn k<F: Float>(…)`).
///
/// Beyond the arithmetic operators it gives constants and conversions (each rounds once, to
/// nearest) and the math functions as methods: `x.sqrt()` in a generic body is `math::sqrt(x)`,
/// libdevice on the GPU and `std` on the host.
pub trait Float:
    Copy
    + Default
    + PartialOrd
    + Add<Output = Self>
    + Sub<Output = Self>
    + Mul<Output = Self>
    + Div<Output = Self>
    + Neg<Output = Self>
    + AddAssign
    + SubAssign
    + MulAssign
    + DivAssign
    + private::Sealed
{
    /// 0.
    const ZERO: Self;
    /// 1.
    const ONE: Self;
    /// Bytes of one value (4 or 8).
    const BYTES: usize;
    /// `v` rounded to this type: how a generic body writes a constant (`F::from_f64(0.5)`), folded
    /// at compile time.
    fn from_f64(v: f64) -> Self;
    /// `v` converted to this type (exact for f32 and f64).
    fn from_f32(v: f32) -> Self;
    /// An integer count or index (exact below 2^24 in f32).
    fn from_u32(v: u32) -> Self;
    /// This value widened (or kept) as f64.
    fn to_f64(self) -> f64;
    /// This value rounded (or kept) as f32.
    fn to_f32(self) -> f32;
    /// This value truncated to an integer, saturating like `as u32` (NaN gives 0).
    fn to_u32(self) -> u32;
    /// This value truncated to a byte, saturating like `as u8` (NaN gives 0): one clamp and a
    /// 16-bit conversion on the GPU, cheaper than `to_u32() as u8`.
    fn to_u8(self) -> u8;
    /// Sine (radians).
    fn sin(self) -> Self;
    /// Cosine (radians).
    fn cos(self) -> Self;
    /// `(sin, cos)` in one call.
    fn sin_cos(self) -> (Self, Self);
    /// Tangent (radians).
    fn tan(self) -> Self;
    /// Angle of the point `(x, self)`: `self` is `y`, as in `f64::atan2`.
    fn atan2(self, x: Self) -> Self;
    /// Square root, correctly rounded.
    fn sqrt(self) -> Self;
    /// Natural logarithm.
    fn ln(self) -> Self;
    /// `e^self`.
    fn exp(self) -> Self;
    /// Largest integer value not greater than `self`.
    fn floor(self) -> Self;
    /// Absolute value.
    fn abs(self) -> Self;
    /// `self·b + c` with one rounding.
    fn mul_add(self, b: Self, c: Self) -> Self;
}

mod private {
    pub trait Sealed {}
    impl Sealed for f32 {}
    impl Sealed for f64 {}
}

macro_rules! float_conversions {
    ($t:ty) => {
        const ZERO: $t = 0.0;
        const ONE: $t = 1.0;
        const BYTES: usize = core::mem::size_of::<$t>();
        #[inline(always)]
        fn from_f64(v: f64) -> $t {
            v as $t
        }
        #[inline(always)]
        fn from_f32(v: f32) -> $t {
            v as $t
        }
        #[inline(always)]
        fn from_u32(v: u32) -> $t {
            v as $t
        }
        #[inline(always)]
        fn to_f64(self) -> f64 {
            self as f64
        }
        #[inline(always)]
        fn to_f32(self) -> f32 {
            self as f32
        }
        #[inline(always)]
        fn to_u32(self) -> u32 {
            self as u32
        }
        #[inline(always)]
        fn to_u8(self) -> u8 {
            self as u8
        }
    };
}

macro_rules! float_impl {
    ($t:ty, $sin:ident, $cos:ident, $sincos:ident, $tan:ident, $atan2:ident, $sqrt:ident,
     $log:ident, $exp:ident, $floor:ident, $fabs:ident, $fma:ident) => {
        #[cfg(target_arch = "nvptx64")]
        unsafe extern "C" {
            fn $sin(x: $t) -> $t;
            fn $cos(x: $t) -> $t;
            fn $sincos(x: $t, s: *mut $t, c: *mut $t);
            fn $tan(x: $t) -> $t;
            fn $atan2(y: $t, x: $t) -> $t;
            fn $sqrt(x: $t) -> $t;
            fn $log(x: $t) -> $t;
            fn $exp(x: $t) -> $t;
            fn $floor(x: $t) -> $t;
            fn $fabs(x: $t) -> $t;
            fn $fma(a: $t, b: $t, c: $t) -> $t;
        }

        #[cfg(target_arch = "nvptx64")]
        // SAFETY (all): libdevice functions are pure and defined for every input.
        impl Float for $t {
            float_conversions!($t);
            #[inline(always)]
            fn sin(self) -> $t {
                unsafe { $sin(self) }
            }
            #[inline(always)]
            fn cos(self) -> $t {
                unsafe { $cos(self) }
            }
            #[inline(always)]
            fn sin_cos(self) -> ($t, $t) {
                let (mut s, mut c) = (0.0, 0.0);
                unsafe { $sincos(self, &mut s, &mut c) };
                (s, c)
            }
            #[inline(always)]
            fn tan(self) -> $t {
                unsafe { $tan(self) }
            }
            #[inline(always)]
            fn atan2(self, x: $t) -> $t {
                unsafe { $atan2(self, x) }
            }
            #[inline(always)]
            fn sqrt(self) -> $t {
                unsafe { $sqrt(self) }
            }
            #[inline(always)]
            fn ln(self) -> $t {
                unsafe { $log(self) }
            }
            #[inline(always)]
            fn exp(self) -> $t {
                unsafe { $exp(self) }
            }
            #[inline(always)]
            fn floor(self) -> $t {
                unsafe { $floor(self) }
            }
            #[inline(always)]
            fn abs(self) -> $t {
                unsafe { $fabs(self) }
            }
            #[inline(always)]
            fn mul_add(self, b: $t, c: $t) -> $t {
                unsafe { $fma(self, b, c) }
            }
        }

        #[cfg(not(target_arch = "nvptx64"))]
        impl Float for $t {
            float_conversions!($t);
            fn sin(self) -> $t {
                <$t>::sin(self)
            }
            fn cos(self) -> $t {
                <$t>::cos(self)
            }
            fn sin_cos(self) -> ($t, $t) {
                <$t>::sin_cos(self)
            }
            fn tan(self) -> $t {
                <$t>::tan(self)
            }
            fn atan2(self, x: $t) -> $t {
                <$t>::atan2(self, x)
            }
            fn sqrt(self) -> $t {
                <$t>::sqrt(self)
            }
            fn ln(self) -> $t {
                <$t>::ln(self)
            }
            fn exp(self) -> $t {
                <$t>::exp(self)
            }
            fn floor(self) -> $t {
                <$t>::floor(self)
            }
            fn abs(self) -> $t {
                <$t>::abs(self)
            }
            fn mul_add(self, b: $t, c: $t) -> $t {
                <$t>::mul_add(self, b, c)
            }
        }
    };
}

float_impl!(
    f32,
    __nv_sinf,
    __nv_cosf,
    __nv_sincosf,
    __nv_tanf,
    __nv_atan2f,
    __nv_fsqrt_rn,
    __nv_logf,
    __nv_expf,
    __nv_floorf,
    __nv_fabsf,
    __nv_fmaf
);
float_impl!(
    f64,
    __nv_sin,
    __nv_cos,
    __nv_sincos,
    __nv_tan,
    __nv_atan2,
    __nv_dsqrt_rn,
    __nv_log,
    __nv_exp,
    __nv_floor,
    __nv_fabs,
    __nv_fma
);

/// Sine of `x` (radians).
#[inline(always)]
pub fn sin<T: Float>(x: T) -> T {
    x.sin()
}
/// Cosine of `x` (radians).
#[inline(always)]
pub fn cos<T: Float>(x: T) -> T {
    x.cos()
}
/// `(sin x, cos x)` in one call; cheaper than two on the GPU (shared argument reduction).
#[inline(always)]
pub fn sincos<T: Float>(x: T) -> (T, T) {
    x.sin_cos()
}
/// Tangent of `x` (radians).
#[inline(always)]
pub fn tan<T: Float>(x: T) -> T {
    x.tan()
}
/// Angle of the point `(x, y)` in radians, in `[-π, π]`. Note the order: `y` first, as in C.
#[inline(always)]
pub fn atan2<T: Float>(y: T, x: T) -> T {
    y.atan2(x)
}
/// Square root, correctly rounded (`sqrt.rn`; libdevice's plain `__nv_sqrtf` would be
/// `sqrt.approx` under the builder's default reflection settings).
#[inline(always)]
pub fn sqrt<T: Float>(x: T) -> T {
    x.sqrt()
}
/// Natural logarithm.
#[inline(always)]
pub fn ln<T: Float>(x: T) -> T {
    x.ln()
}
/// `e^x`.
#[inline(always)]
pub fn exp<T: Float>(x: T) -> T {
    x.exp()
}
/// Largest integer value not greater than `x`.
#[inline(always)]
pub fn floor<T: Float>(x: T) -> T {
    x.floor()
}
/// Absolute value.
#[inline(always)]
pub fn abs<T: Float>(x: T) -> T {
    x.abs()
}
/// `a·b + c` with one rounding (`fma.rn`). Rust never contracts `a * b + c` into an FMA by itself,
/// so inner loops that want FMA throughput call this.
#[inline(always)]
pub fn fma<T: Float>(a: T, b: T, c: T) -> T {
    a.mul_add(b, c)
}

/// Hardware approximations (f32 only), selected explicitly by the kernels that want them.
///
/// On the GPU each is one special-function-unit instruction with flush-to-zero. Their absolute
/// error is about 2^-20.9 for `sin`/`cos` on `[-π, π]` and grows with `|x|`; `exp2` has about
/// 2 ulp. In the simulator they fall back to the precise `std` functions.
pub mod fast {
    macro_rules! approx {
        ($(#[$doc:meta])* $name:ident, $insn:literal, $host:expr) => {
            $(#[$doc])*
            #[inline(always)]
            pub fn $name(x: f32) -> f32 {
                #[cfg(target_arch = "nvptx64")]
                {
                    let y: f32;
                    // SAFETY: a pure arithmetic instruction.
                    unsafe {
                        core::arch::asm!(concat!($insn, " {}, {};"), out(reg32) y, in(reg32) x,
                            options(pure, nomem, nostack));
                    }
                    y
                }
                #[cfg(not(target_arch = "nvptx64"))]
                {
                    let host: fn(f32) -> f32 = $host;
                    host(x)
                }
            }
        };
    }

    approx!(
        /// `sin.approx.ftz.f32`.
        sin, "sin.approx.ftz.f32", f32::sin);
    approx!(
        /// `cos.approx.ftz.f32`.
        cos, "cos.approx.ftz.f32", f32::cos);
    approx!(
        /// `ex2.approx.ftz.f32`: 2^x.
        exp2, "ex2.approx.ftz.f32", f32::exp2);
    approx!(
        /// `lg2.approx.ftz.f32`: log2 x.
        log2, "lg2.approx.ftz.f32", f32::log2);
    approx!(
        /// `rcp.approx.ftz.f32`: 1/x.
        rcp, "rcp.approx.ftz.f32", |x| 1.0 / x);
    approx!(
        /// `rsqrt.approx.ftz.f32`: 1/√x.
        rsqrt, "rsqrt.approx.ftz.f32", |x| 1.0 / x.sqrt());

    /// `rsqrt.approx.ftz.f64`: 1/√x to about 2^-22 relative (the hardware's 32-bit seed), for a
    /// Newton step or two to refine where a full-precision `1.0 / sqrt(x)` (two long dependent
    /// sequences) would sit on a critical path.
    #[inline(always)]
    pub fn rsqrt_f64(x: f64) -> f64 {
        #[cfg(target_arch = "nvptx64")]
        {
            let y: f64;
            // SAFETY: a pure arithmetic instruction.
            unsafe {
                core::arch::asm!("rsqrt.approx.ftz.f64 {}, {};", out(reg64) y, in(reg64) x,
                    options(pure, nomem, nostack));
            }
            y
        }
        #[cfg(not(target_arch = "nvptx64"))]
        {
            1.0 / x.sqrt()
        }
    }
}
