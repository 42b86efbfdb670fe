//! Sum of an f32 array: safe wrapper of `kernels::reduce::block_sum` and its CPU reference.
//!
//! Device code: `kernels/src/reduce.rs`; tests: `tests/reduce.rs`.

use crate::error::{Result, ensure};
use crate::{Device, LaunchConfig};

/// Per-block partial sums of `x` from `blocks` blocks of `block` threads (`block` a power of two in
/// 32..=1024). Their total is the sum of `x`.
pub fn block_sums(device: &Device, x: &[f32], blocks: u32, block: u32) -> Result<Vec<f32>> {
    ensure(!x.is_empty(), || "sum of an empty array".into())?;
    ensure(block.is_power_of_two() && (32..=1024).contains(&block), || {
        format!("block size {block} is not a power of two in 32..=1024")
    })?;
    ensure(blocks > 0, || "zero blocks".into())?;
    let dx = device.upload(x)?;
    let mut partial = device.alloc::<f32>(blocks as usize)?;
    let shared_bytes = kernels::reduce::block_sum_shared(block).bytes_u32();
    let cfg = LaunchConfig { grid: crate::Dim3::x(blocks), block: crate::Dim3::x(block), shared_bytes };
    // SAFETY: a power-of-two block of 32..=1024 threads (checked above) and one partial per block.
    unsafe { device.launch(&kernels::reduce::BLOCK_SUM, cfg, (&dx, &mut partial))? };
    device.download(&partial)
}

/// Sum of `x` on `device`: the kernel's partial sums added in f64.
pub fn sum(device: &Device, x: &[f32]) -> Result<f64> {
    let blocks = x.len().div_ceil(256 * 8).clamp(1, 1024) as u32;
    Ok(block_sums(device, x, blocks, 256)?.iter().map(|&p| p as f64).sum())
}

/// CPU reference: the sum in f64.
pub fn sum_reference(x: &[f32]) -> f64 {
    x.iter().map(|&v| v as f64).sum()
}
