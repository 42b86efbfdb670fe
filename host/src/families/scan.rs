//! Inclusive prefix sums of u32 arrays on the device, in one pass: safe wrapper of
//! `kernels::scan::inclusive_scan_u32` and its CPU reference.
//!
//! Device code: `kernels/src/scan.rs`; tests: `tests/scan.rs`; benchmark: `benches/scan.rs`.

use crate::error::{Result, ensure};
use crate::{Buffer, Device, Dim3, LaunchConfig};
use kernels::scan as k;

/// What the scans of one device keep between calls: the tiles' status words, the tile counter and
/// the launch number that tells this launch's statuses from earlier ones.
pub struct Scanner<'d> {
    device: &'d Device,
    statuses: Buffer<u64>,
    counter: Buffer<u32>,
    epoch: u32,
}

impl<'d> Scanner<'d> {
    /// A scanner for arrays of up to `max_len` elements.
    pub fn new(device: &'d Device, max_len: usize) -> Result<Self> {
        let tiles = max_len.div_ceil(k::TILE).max(1);
        Ok(Self {
            device,
            statuses: device.upload(&vec![0u64; tiles])?,
            counter: device.upload(&[0u32])?,
            epoch: 0,
        })
    }

    /// Queues `y[i] = x[0] + … + x[i]` (wrapping at 2^32).
    pub fn inclusive_scan(&mut self, x: &Buffer<u32>, y: &mut Buffer<u32>) -> Result<()> {
        let n = x.len();
        ensure(n > 0, || "scan of an empty array".into())?;
        ensure(y.len() == n, || format!("the output has {} elements, the input {n}", y.len()))?;
        let tiles = n.div_ceil(k::TILE);
        ensure(tiles <= self.statuses.len(), || {
            format!("{n} elements need {tiles} tiles; this scanner was made for {}", self.statuses.len())
        })?;
        ensure(tiles <= u32::MAX as usize, || format!("{n} elements: too many tiles"))?;
        // Epochs fit in 30 bits; after 2^30 launches, start again from clean statuses.
        if self.epoch == (1 << 30) - 1 {
            let zeros = vec![0u64; self.statuses.len()];
            self.device.upload_into(&mut self.statuses, &zeros)?;
            self.epoch = 0;
        }
        self.epoch += 1;
        let cfg = LaunchConfig {
            grid: Dim3::x(tiles as u32),
            block: Dim3::x(k::BLOCK),
            shared_bytes: k::shared_layout().bytes_u32(),
        };
        // SAFETY: one block of BLOCK threads per tile, the layout's shared memory, a status word per
        // tile, `counter[0]` is 0 (at allocation, and reset by every launch) and a new epoch.
        unsafe {
            self.device.launch(
                &k::INCLUSIVE_SCAN_U32,
                cfg,
                (x, self.epoch, &mut self.statuses, &mut self.counter, y),
            )
        }
    }
}

/// The inclusive prefix sums of `x` (wrapping) on `device`.
pub fn inclusive_scan(device: &Device, x: &[u32]) -> Result<Vec<u32>> {
    let dx = device.upload(x)?;
    let mut dy = device.alloc::<u32>(x.len())?;
    Scanner::new(device, x.len())?.inclusive_scan(&dx, &mut dy)?;
    device.download(&dy)
}

/// CPU reference: the running sum, wrapping at 2^32.
pub fn inclusive_scan_reference(x: &[u32]) -> Vec<u32> {
    x.iter()
        .scan(0u32, |acc, &v| {
            *acc = acc.wrapping_add(v);
            Some(*acc)
        })
        .collect()
}
