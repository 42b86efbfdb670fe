//! f32/f64 math. On the GPU these call CUDA's libdevice (`__nv_sinf`, `__nv_atan2`, …), linked in
//! by the builder, so the results have libdevice's documented accuracy (a few ulp at most). On the
//! host they call Rust's `std`, whose results can differ from libdevice's in the last bits.
//!
//! Call them as free functions, `math::sin(x)`, for `x` of type `f32` or `f64`. The hardware
//! approximations (`sin.approx`, `ex2.approx`, …) are in [`fast`], chosen explicitly: nothing in
//! this module silently trades accuracy for speed.

/// f32 or f64: the types the functions of this module take.
pub trait Float: Copy + PartialOrd + private::Sealed {
    #[doc(hidden)]
    fn sin_(self) -> Self;
    #[doc(hidden)]
    fn cos_(self) -> Self;
    #[doc(hidden)]
    fn sincos_(self) -> (Self, Self);
    #[doc(hidden)]
    fn tan_(self) -> Self;
    #[doc(hidden)]
    fn atan2_(self, x: Self) -> Self;
    #[doc(hidden)]
    fn sqrt_(self) -> Self;
    #[doc(hidden)]
    fn ln_(self) -> Self;
    #[doc(hidden)]
    fn exp_(self) -> Self;
    #[doc(hidden)]
    fn floor_(self) -> Self;
    #[doc(hidden)]
    fn abs_(self) -> Self;
    #[doc(hidden)]
    fn fma_(self, b: Self, c: Self) -> Self;
}

mod private {
    pub trait Sealed {}
    impl Sealed for f32 {}
    impl Sealed for f64 {}
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
            #[inline(always)]
            fn sin_(self) -> $t {
                unsafe { $sin(self) }
            }
            #[inline(always)]
            fn cos_(self) -> $t {
                unsafe { $cos(self) }
            }
            #[inline(always)]
            fn sincos_(self) -> ($t, $t) {
                let (mut s, mut c) = (0.0, 0.0);
                unsafe { $sincos(self, &mut s, &mut c) };
                (s, c)
            }
            #[inline(always)]
            fn tan_(self) -> $t {
                unsafe { $tan(self) }
            }
            #[inline(always)]
            fn atan2_(self, x: $t) -> $t {
                unsafe { $atan2(self, x) }
            }
            #[inline(always)]
            fn sqrt_(self) -> $t {
                unsafe { $sqrt(self) }
            }
            #[inline(always)]
            fn ln_(self) -> $t {
                unsafe { $log(self) }
            }
            #[inline(always)]
            fn exp_(self) -> $t {
                unsafe { $exp(self) }
            }
            #[inline(always)]
            fn floor_(self) -> $t {
                unsafe { $floor(self) }
            }
            #[inline(always)]
            fn abs_(self) -> $t {
                unsafe { $fabs(self) }
            }
            #[inline(always)]
            fn fma_(self, b: $t, c: $t) -> $t {
                unsafe { $fma(self, b, c) }
            }
        }

        #[cfg(not(target_arch = "nvptx64"))]
        impl Float for $t {
            fn sin_(self) -> $t {
                <$t>::sin(self)
            }
            fn cos_(self) -> $t {
                <$t>::cos(self)
            }
            fn sincos_(self) -> ($t, $t) {
                <$t>::sin_cos(self)
            }
            fn tan_(self) -> $t {
                <$t>::tan(self)
            }
            fn atan2_(self, x: $t) -> $t {
                <$t>::atan2(self, x)
            }
            fn sqrt_(self) -> $t {
                <$t>::sqrt(self)
            }
            fn ln_(self) -> $t {
                <$t>::ln(self)
            }
            fn exp_(self) -> $t {
                <$t>::exp(self)
            }
            fn floor_(self) -> $t {
                <$t>::floor(self)
            }
            fn abs_(self) -> $t {
                <$t>::abs(self)
            }
            fn fma_(self, b: $t, c: $t) -> $t {
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
    x.sin_()
}
/// Cosine of `x` (radians).
#[inline(always)]
pub fn cos<T: Float>(x: T) -> T {
    x.cos_()
}
/// `(sin x, cos x)` in one call; cheaper than two on the GPU (shared argument reduction).
#[inline(always)]
pub fn sincos<T: Float>(x: T) -> (T, T) {
    x.sincos_()
}
/// Tangent of `x` (radians).
#[inline(always)]
pub fn tan<T: Float>(x: T) -> T {
    x.tan_()
}
/// Angle of the point `(x, y)` in radians, in `[-π, π]`. Note the order: `y` first, as in C.
#[inline(always)]
pub fn atan2<T: Float>(y: T, x: T) -> T {
    y.atan2_(x)
}
/// Square root, correctly rounded (`sqrt.rn`; libdevice's plain `__nv_sqrtf` would be
/// `sqrt.approx` under the builder's default reflection settings).
#[inline(always)]
pub fn sqrt<T: Float>(x: T) -> T {
    x.sqrt_()
}
/// Natural logarithm.
#[inline(always)]
pub fn ln<T: Float>(x: T) -> T {
    x.ln_()
}
/// `e^x`.
#[inline(always)]
pub fn exp<T: Float>(x: T) -> T {
    x.exp_()
}
/// Largest integer value not greater than `x`.
#[inline(always)]
pub fn floor<T: Float>(x: T) -> T {
    x.floor_()
}
/// Absolute value.
#[inline(always)]
pub fn abs<T: Float>(x: T) -> T {
    x.abs_()
}
/// `a·b + c` with one rounding (`fma.rn`). Rust never contracts `a * b + c` into an FMA by itself,
/// so inner loops that want FMA throughput call this.
#[inline(always)]
pub fn fma<T: Float>(a: T, b: T, c: T) -> T {
    a.fma_(b, c)
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
}
