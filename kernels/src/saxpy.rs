//! SAXPY, `y ← a·x + y`: the template's "hello world" kernel.
//!
//! Host side: `host/src/families/saxpy.rs` (safe wrapper and CPU reference); tests: `tests/saxpy.rs`.

use gpu_std::{kernel, math, thread};

/// One thread per element: `y[i] = a·x[i] + y[i]` for `i < y.len()`, with a single rounding (FMA).
///
/// `x` and `y` are f32 slices of equal length in global memory (a shorter `x` stops the kernel).
/// Launch with at least `y.len()` threads in a 1-D grid; threads past the end do nothing.
#[kernel]
pub fn saxpy(a: f32, x: &[f32], y: &mut [f32]) {
    let i = thread::index_1d() as usize;
    if i < y.len() {
        y[i] = math::fma(a, x[i], y[i]);
    }
}
