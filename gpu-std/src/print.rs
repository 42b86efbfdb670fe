//! `printf!` and `gpu_assert!` in kernels: CUDA's device-side `printf` (the `vprintf` system call)
//! and `assert` (`__assertfail`).
//!
//! ```ignore
//! gpu_std::printf!("row %u: sum %f\n", row, sum);            // C format, as CUDA's printf
//! gpu_std::gpu_assert!(i < n, "index %u past %u", i, n);       // the message only if it fails
//! ```
//!
//! Arguments are integers (`%d %i %u %x %c`: 32-bit; `%lld %llu %llx`: `i64`, `u64`, `usize`), floats
//! (`%f %e %g`; an `f32` is passed as a double, as C does) and `bool` (as an `int`). On the GPU the
//! output is collected in a buffer that the driver prints at the next synchronisation; a failed
//! `gpu_assert!` prints `file:line: function: block: [x,y,z], thread: [x,y,z] Assertion `cond`
//! failed.` and stops the kernel, and the host's next wait fails with `CUDA_ERROR_ASSERT`
//! (`gpu_launch::Error::Kernel` names the kernel). In the simulator each call prints one line
//! prefixed with its block and thread (or adds it to [`capture_output`](crate::sim::capture_output)),
//! a format that does not fit its arguments panics, and a failed assertion panics at its line
//! with its message.

/// A value `printf!` can pass: its bits and size as `vprintf` reads them.
pub trait PrintfArg: Copy {
    #[doc(hidden)]
    fn vprintf_bits(self) -> (u64, usize);
    #[cfg(not(target_arch = "nvptx64"))]
    #[doc(hidden)]
    fn host(self) -> HostArg;
}

/// An argument of the simulator's `printf!`.
#[cfg(not(target_arch = "nvptx64"))]
#[doc(hidden)]
#[derive(Clone, Copy, Debug)]
pub enum HostArg {
    I32(i32),
    U32(u32),
    I64(i64),
    U64(u64),
    F64(f64),
}

macro_rules! printf_arg {
    ($($t:ty => $size:literal, $variant:ident as $as:ty, |$v:ident| $bits:expr;)*) => {$(
        impl PrintfArg for $t {
            #[inline(always)]
            fn vprintf_bits(self) -> (u64, usize) {
                let $v = self;
                ($bits, $size)
            }
            #[cfg(not(target_arch = "nvptx64"))]
            fn host(self) -> HostArg {
                HostArg::$variant(self as $as)
            }
        }
    )*};
}
printf_arg! {
    i8 => 4, I32 as i32, |v| v as i32 as u32 as u64;
    i16 => 4, I32 as i32, |v| v as i32 as u32 as u64;
    i32 => 4, I32 as i32, |v| v as u32 as u64;
    u8 => 4, U32 as u32, |v| v as u64;
    u16 => 4, U32 as u32, |v| v as u64;
    u32 => 4, U32 as u32, |v| v as u64;
    i64 => 8, I64 as i64, |v| v as u64;
    isize => 8, I64 as i64, |v| v as u64;
    u64 => 8, U64 as u64, |v| v;
    usize => 8, U64 as u64, |v| v as u64;
    f32 => 8, F64 as f64, |v| (v as f64).to_bits();
    f64 => 8, F64 as f64, |v| v.to_bits();
}

impl PrintfArg for bool {
    #[inline(always)]
    fn vprintf_bits(self) -> (u64, usize) {
        (self as u64, 4)
    }
    #[cfg(not(target_arch = "nvptx64"))]
    fn host(self) -> HostArg {
        HostArg::I32(self as i32)
    }
}

#[cfg(not(target_arch = "nvptx64"))]
impl sprintf::Printf for HostArg {
    fn format(&self, spec: &sprintf::ConversionSpecifier) -> sprintf::Result<String> {
        match *self {
            HostArg::I32(v) => v.format(spec),
            HostArg::U32(v) => v.format(spec),
            HostArg::I64(v) => v.format(spec),
            HostArg::U64(v) => v.format(spec),
            // sprintf 0.4.3's `%g` overflows on zero and keeps the point of `3.`: C's rules here.
            HostArg::F64(v) if is_compact(spec) && v.is_finite() => Ok(format_compact(v, spec)),
            HostArg::F64(v) => v.format(spec),
        }
    }
    fn as_int(&self) -> Option<i32> {
        match *self {
            HostArg::I32(v) => Some(v),
            HostArg::U32(v) => i32::try_from(v).ok(),
            _ => None,
        }
    }
}

/// Whether `spec` is `%g` or `%G`.
#[cfg(not(target_arch = "nvptx64"))]
fn is_compact(spec: &sprintf::ConversionSpecifier) -> bool {
    matches!(
        spec.conversion_type,
        sprintf::ConversionType::CompactFloatLower | sprintf::ConversionType::CompactFloatUpper
    )
}

/// `v` as C's `%g`/`%G` prints it: `P` significant digits (the precision, 6 by default), fixed
/// notation if the decimal exponent `X` (after rounding) is in `-4..P`, else scientific; trailing
/// zeros and point removed unless `#`; then sign flags and width.
#[cfg(not(target_arch = "nvptx64"))]
fn format_compact(v: f64, spec: &sprintf::ConversionSpecifier) -> String {
    let precision = match spec.precision {
        sprintf::NumericParam::Literal(p) if p >= 0 => (p as usize).max(1),
        _ => 6,
    };
    let scientific = format!("{:.*e}", precision - 1, v.abs());
    let (mantissa, exponent) = scientific.split_once('e').unwrap();
    let exponent: i32 = exponent.parse().unwrap();
    let mut body = if exponent < -4 || exponent >= precision as i32 {
        let sign = if exponent < 0 { '-' } else { '+' };
        let mut m = mantissa.to_string();
        if !spec.alt_form && m.contains('.') {
            m = m.trim_end_matches('0').trim_end_matches('.').to_string();
        }
        format!("{m}e{sign}{:02}", exponent.abs())
    } else {
        let mut f = format!("{:.*}", (precision as i32 - 1 - exponent).max(0) as usize, v.abs());
        if !spec.alt_form && f.contains('.') {
            f = f.trim_end_matches('0').trim_end_matches('.').to_string();
        }
        f
    };
    if spec.conversion_type == sprintf::ConversionType::CompactFloatUpper {
        body = body.to_uppercase();
    }
    let sign = if v.is_sign_negative() {
        "-"
    } else if spec.force_sign {
        "+"
    } else if spec.space_sign {
        " "
    } else {
        ""
    };
    let width = match spec.width {
        sprintf::NumericParam::Literal(w) if w > 0 => w as usize,
        _ => 0,
    };
    let pad = width.saturating_sub(sign.len() + body.len());
    if spec.left_adj {
        format!("{sign}{body}{}", " ".repeat(pad))
    } else if spec.zero_pad {
        format!("{sign}{}{body}", "0".repeat(pad))
    } else {
        format!("{}{sign}{body}", " ".repeat(pad))
    }
}

/// Words of the argument buffer: at most 32 arguments of 8 bytes.
const ARG_WORDS: usize = 32;

/// `printf!`'s arguments packed as `vprintf` reads them: each aligned to its size, in order.
#[doc(hidden)]
#[repr(C, align(8))]
pub struct Args {
    words: [u64; ARG_WORDS],
    bytes: usize,
}

impl Args {
    #[inline(always)]
    #[allow(clippy::new_without_default)]
    pub fn new() -> Self {
        Self { words: [0; ARG_WORDS], bytes: 0 }
    }

    #[inline(always)]
    pub fn push<T: PrintfArg>(&mut self, value: T) {
        let (bits, size) = value.vprintf_bits();
        let at = self.bytes.next_multiple_of(size);
        assert!(at + size <= ARG_WORDS * 8, "printf!: more arguments than fit in 256 bytes");
        // SAFETY: `at + size` bytes fit in `words`, checked above; `at` is a multiple of `size`.
        unsafe {
            let base = self.words.as_mut_ptr() as *mut u8;
            if size == 4 {
                (base.add(at) as *mut u32).write(bits as u32);
            } else {
                (base.add(at) as *mut u64).write(bits);
            }
        }
        self.bytes = at + size;
    }
}

/// `vprintf(format, args)`.
///
/// # Safety
/// `format` ends with a NUL byte.
#[cfg(target_arch = "nvptx64")]
#[doc(hidden)]
#[inline(always)]
pub unsafe fn vprintf(format: &str, args: &Args) {
    // SAFETY: a NUL-terminated format (the caller's promise) and its packed arguments.
    unsafe { core::arch::nvptx::vprintf(format.as_ptr(), args.words.as_ptr() as *const core::ffi::c_void) };
}

#[cfg(target_arch = "nvptx64")]
unsafe extern "C" {
    /// CUDA's device-side assert: prints the failure with block and thread and stops the kernel.
    fn __assertfail(message: *const u8, file: *const u8, line: u32, function: *const u8, char_size: usize);
}

/// Reports a failed `gpu_assert!` through `__assertfail`, then stops the kernel.
///
/// # Safety
/// Every string ends with a NUL byte.
#[cfg(target_arch = "nvptx64")]
#[doc(hidden)]
#[inline(always)]
pub unsafe fn assert_fail(condition: &str, file: &str, line: u32, function: &str) -> ! {
    // SAFETY: NUL-terminated strings (the caller's promise); `trap` aborts the kernel.
    unsafe {
        __assertfail(condition.as_ptr(), file.as_ptr(), line, function.as_ptr(), 1);
        core::arch::nvptx::trap()
    }
}

/// The simulator's `printf!`: formats like C's printf and prints one line for this thread.
#[cfg(not(target_arch = "nvptx64"))]
#[doc(hidden)]
#[track_caller]
pub fn print_host(format: &str, args: &[HostArg]) {
    crate::sim::print(&format_host(format, args));
}

/// `format` with `args`, as C's printf; panics (at the kernel's line) when they do not fit.
#[cfg(not(target_arch = "nvptx64"))]
#[doc(hidden)]
#[track_caller]
pub fn format_host(format: &str, args: &[HostArg]) -> String {
    let refs: Vec<&dyn sprintf::Printf> = args.iter().map(|a| a as &dyn sprintf::Printf).collect();
    match sprintf::vsprintf(format, &refs) {
        Ok(text) => text,
        Err(e) => {
            panic!("printf format {format:?} does not fit its {} argument(s) {args:?}: {e}", args.len())
        }
    }
}

/// Prints `format` with its arguments from a kernel, as CUDA's `printf`: a C format string literal
/// and up to 32 [`PrintfArg`]s. See [`print`](crate::print).
#[macro_export]
macro_rules! printf {
    ($format:expr $(, $arg:expr)* $(,)?) => {{
        #[cfg(target_arch = "nvptx64")]
        {
            let mut args = $crate::print::Args::new();
            $( args.push($arg); )*
            // SAFETY: a NUL-terminated format and its arguments packed as vprintf reads them.
            unsafe { $crate::print::vprintf(concat!($format, "\0"), &args) };
        }
        #[cfg(not(target_arch = "nvptx64"))]
        $crate::print::print_host($format, &[$( $crate::print::PrintfArg::host($arg) ),*]);
    }};
}

/// Checks `condition` in a kernel, as CUDA's `assert`, with an optional printf-style message: on
/// failure the message is printed with the block and thread, and the kernel stops. See
/// [`print`](crate::print).
#[macro_export]
macro_rules! gpu_assert {
    ($condition:expr $(,)?) => {
        $crate::gpu_assert!($condition, "")
    };
    ($condition:expr, $format:expr $(, $arg:expr)* $(,)?) => {{
        if !$condition {
            #[cfg(target_arch = "nvptx64")]
            {
                if !$format.is_empty() {
                    $crate::printf!(
                        concat!("block (%u, %u, %u), thread (%u, %u, %u): ", $format, "\n"),
                        $crate::thread::block_idx_x(), $crate::thread::block_idx_y(), $crate::thread::block_idx_z(),
                        $crate::thread::thread_idx_x(), $crate::thread::thread_idx_y(), $crate::thread::thread_idx_z()
                        $(, $arg)*
                    );
                }
                // SAFETY: NUL-terminated strings.
                unsafe {
                    $crate::print::assert_fail(
                        concat!(stringify!($condition), "\0"),
                        concat!(file!(), "\0"),
                        line!(),
                        concat!(module_path!(), "\0"),
                    )
                }
            }
            #[cfg(not(target_arch = "nvptx64"))]
            {
                let message = $crate::print::format_host($format, &[$( $crate::print::PrintfArg::host($arg) ),*]);
                if message.is_empty() {
                    panic!("assertion `{}` failed", stringify!($condition));
                } else {
                    panic!("assertion `{}` failed: {}", stringify!($condition), message);
                }
            }
        }
    }};
}
