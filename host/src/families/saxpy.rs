//! SAXPY (`y ← a·x + y`): safe wrapper of `kernels::saxpy` and its CPU reference.
//!
//! Device code: `kernels/src/saxpy.rs`; tests: `tests/saxpy.rs`; benchmark: `benches/saxpy.rs`.

use crate::error::{Result, ensure};
use crate::profile::Work;
use crate::{Device, LaunchConfig};

/// Threads per block of the launch; any multiple of 32 works.
pub const BLOCK: u32 = 256;

fn check(x: &[f32], y: &[f32]) -> Result<()> {
    ensure(!x.is_empty(), || "saxpy of empty vectors".into())?;
    ensure(x.len() == y.len(), || format!("x has {} elements but y has {}", x.len(), y.len()))
}

/// `y ← a·x + y` on `device`.
pub fn saxpy(device: &Device, a: f32, x: &[f32], y: &mut [f32]) -> Result<()> {
    check(x, y)?;
    let n = x.len();
    let dx = device.upload(x)?;
    let mut dy = device.upload(y)?;
    let work = Work { bytes: 12.0 * n as f64, flops: 2.0 * n as f64 };
    // SAFETY: one thread per element, each writing its own `y[i]`; the slices carry their lengths.
    unsafe {
        device.launch_counted(
            device.queue(),
            &kernels::saxpy::SAXPY,
            LaunchConfig::for_1d(n, BLOCK),
            (a, &dx, &mut dy),
            Some(work),
        )?;
    }
    device.download_into(&dy, y)
}

/// CPU reference: `a·x + y` computed in f64 and rounded once to f32, the same single rounding as
/// the kernel's FMA, so the two agree exactly.
pub fn saxpy_reference(a: f32, x: &[f32], y: &mut [f32]) -> Result<()> {
    check(x, y)?;
    for (yi, &xi) in y.iter_mut().zip(x) {
        *yi = (a as f64 * xi as f64 + *yi as f64) as f32;
    }
    Ok(())
}
