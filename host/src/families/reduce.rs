//! One-pass reductions of f32 arrays on the device — the sum, and the minimum with the maximum —
//! safe wrappers of `kernels::reduce` and their CPU references.
//!
//! Device code: `kernels/src/reduce.rs`; tests: `tests/reduce.rs`; benchmark: `benches/reduce.rs`.

use crate::device::KernelArg;
use crate::error::{Error, Result, ensure};
use crate::{Buffer, Device, LaunchConfig};
use gpu_std::Slice;
use kernels::reduce as k;

/// Blocks per multiprocessor: enough loads in flight to saturate memory.
const BLOCKS_PER_SM: u32 = 4;

/// What the reductions of one device keep between calls: the blocks' partial results, the
/// finished-blocks counter and the result, allocated once.
pub struct Reducer<'d> {
    device: &'d Device,
    max_blocks: u32,
    partials: Buffer<f32>,
    done: Buffer<u32>,
    out: Buffer<f32>,
}

impl<'d> Reducer<'d> {
    /// A reducer for `device`.
    pub fn new(device: &'d Device) -> Result<Self> {
        let max_blocks = match device.backend() {
            crate::Backend::Gpu => device.multiprocessors()? * BLOCKS_PER_SM,
            crate::Backend::Simulator => 64,
        };
        Ok(Self {
            device,
            max_blocks,
            partials: device.alloc(2 * max_blocks as usize)?,
            done: device.upload(&[0u32])?,
            out: device.alloc(2)?,
        })
    }

    /// Queues the sum of `x`, a buffer or a view of one (read it with [`Reducer::sum_result`]).
    pub fn launch_sum(&mut self, x: impl KernelArg<Slice<f32>>) -> Result<()> {
        self.launch(&k::SUM_F32, x)
    }

    /// Queues the minimum and maximum of `x`, a buffer or a view of one (read them with
    /// [`Reducer::min_max_result`]).
    pub fn launch_min_max(&mut self, x: impl KernelArg<Slice<f32>>) -> Result<()> {
        self.launch(&k::MIN_MAX_F32, x)
    }

    /// The sum the last [`Reducer::launch_sum`] computed (waits for it).
    pub fn sum_result(&self) -> Result<f32> {
        Ok(self.device.download(&self.out)?[0])
    }

    /// The `(min, max)` the last [`Reducer::launch_min_max`] computed (waits for it).
    pub fn min_max_result(&self) -> Result<(f32, f32)> {
        let out = self.device.download(&self.out)?;
        Ok((out[0], out[1]))
    }

    /// The sum of `x`, in f32, accumulated in a fixed order for a given device, length and
    /// alignment.
    pub fn sum(&mut self, x: impl KernelArg<Slice<f32>>) -> Result<f32> {
        self.launch_sum(x)?;
        self.sum_result()
    }

    /// The minimum and maximum of `x`, ignoring NaNs (`(+∞, −∞)` when all are NaN).
    pub fn min_max(&mut self, x: impl KernelArg<Slice<f32>>) -> Result<(f32, f32)> {
        self.launch_min_max(x)?;
        self.min_max_result()
    }

    fn launch(
        &mut self,
        kernel: &gpu_std::KernelFn<k::ReductionArgs>,
        x: impl KernelArg<Slice<f32>>,
    ) -> Result<()> {
        let x = x.kernel_arg().map_err(Error::InvalidInput)?;
        ensure(!x.is_empty(), || "reduction of an empty array".into())?;
        let blocks = x.len().div_ceil(4 * k::BLOCK as usize).clamp(1, self.max_blocks as usize);
        let cfg = LaunchConfig::for_grid_stride(blocks * k::BLOCK as usize, k::BLOCK, blocks as u32)
            .with_shared_bytes(k::shared_layout(k::BLOCK).bytes_u32());
        // SAFETY: whole warps, the layout's shared memory, two partials per block, and `done[0]`
        // is 0 (set at allocation, reset by every launch).
        unsafe { self.device.launch(kernel, cfg, (x, &mut self.partials, &mut self.done, &mut self.out)) }
    }
}

/// The sum of `x` on `device`.
pub fn sum(device: &Device, x: &[f32]) -> Result<f32> {
    Reducer::new(device)?.sum(&device.upload(x)?)
}

/// The minimum and maximum of `x` on `device`, ignoring NaNs.
pub fn min_max(device: &Device, x: &[f32]) -> Result<(f32, f32)> {
    Reducer::new(device)?.min_max(&device.upload(x)?)
}

/// CPU reference: the sum in f64.
pub fn sum_reference(x: &[f32]) -> f64 {
    x.iter().map(|&v| v as f64).sum()
}

/// CPU reference: the minimum and maximum, ignoring NaNs.
pub fn min_max_reference(x: &[f32]) -> (f32, f32) {
    x.iter().fold((f32::INFINITY, f32::NEG_INFINITY), |(lo, hi), &v| (lo.min(v), hi.max(v)))
}
