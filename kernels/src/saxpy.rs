//! SAXPY, `y ← a·x + y`: the template's "hello world" kernel.
//!
//! Host side: `host/src/saxpy.rs` (safe wrapper and CPU reference); tests: `tests/saxpy.rs`.

use crate::{kernel, math, thread};

/// One thread per element: `y[i] = a·x[i] + y[i]` for `i < n`, with a single rounding (FMA).
///
/// `x` and `y` point to `n` f32 values in global memory. Launch with at least `n` threads in a 1-D
/// grid; threads past `n` do nothing.
#[kernel]
pub unsafe fn saxpy(a: f32, x: *const f32, y: *mut f32, n: u32) {
    let i = thread::index_1d();
    if i < n {
        let i = i as usize;
        *y.add(i) = math::fma(a, *x.add(i), *y.add(i));
    }
}
