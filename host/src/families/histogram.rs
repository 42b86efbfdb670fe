//! 256-bin histogram of bytes (an 8-bit image's pixel values): safe wrapper of
//! `kernels::histogram::histogram_u8` and its CPU reference.
//!
//! Device code: `kernels/src/histogram.rs`; tests: `tests/histogram.rs`; benchmark:
//! `benches/histogram.rs`.

use crate::error::{Result, ensure};
use crate::{Buffer, Device, LaunchConfig};
use kernels::histogram as k;

/// Threads per block: the kernel's own (it is written for exactly that block).
pub const BLOCK: u32 = k::BLOCK;

/// Blocks per multiprocessor: enough loads in flight to saturate memory.
const BLOCKS_PER_SM: u32 = 4;

/// Bytes packed four to a u32 word, little-endian, the last word padded with zeros: the layout
/// [`histogram_of_words`] reads.
pub fn pack_bytes(bytes: &[u8]) -> Vec<u32> {
    let chunks = bytes.chunks_exact(4);
    let tail = chunks.remainder();
    let mut words: Vec<u32> = chunks.map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect();
    if !tail.is_empty() {
        words.push(tail.iter().rev().fold(0, |w, &b| w << 8 | b as u32));
    }
    words
}

/// Adds the histogram of the first `n` bytes of `words` (packed by [`pack_bytes`]) to `hist`
/// (256 counters), on the device's queue.
pub fn histogram_of_words(
    device: &Device,
    words: &Buffer<u32>,
    n: usize,
    hist: &mut Buffer<u32>,
) -> Result<()> {
    ensure(n > 0, || "histogram of no bytes".into())?;
    ensure(n.div_ceil(4) <= words.len(), || format!("{n} bytes do not fit in {} words", words.len()))?;
    ensure(n <= u32::MAX as usize, || format!("{n} bytes: at most {} per histogram", u32::MAX))?;
    ensure(hist.len() == k::BINS as usize, || {
        format!("the histogram has {} bins, not {}", hist.len(), k::BINS)
    })?;
    let blocks =
        (n / 4).div_ceil(BLOCK as usize).clamp(1, (device.multiprocessors()? * BLOCKS_PER_SM) as usize);
    let cfg = LaunchConfig::for_grid_stride(blocks * BLOCK as usize, BLOCK, blocks as u32)
        .with_shared_bytes(k::shared_layout().bytes_u32());
    // SAFETY: whole warps, the layout's shared memory, `n` bytes inside `words`, 256 bins (checked
    // above).
    unsafe { device.launch(&k::HISTOGRAM_U8, cfg, (words, n as u32, hist)) }
}

/// The 256-bin histogram of `bytes` on `device`.
pub fn histogram(device: &Device, bytes: &[u8]) -> Result<[u64; 256]> {
    let words = device.upload(&pack_bytes(bytes))?;
    let mut hist = device.upload(&[0u32; 256])?;
    histogram_of_words(device, &words, bytes.len(), &mut hist)?;
    let counts = device.download(&hist)?;
    Ok(std::array::from_fn(|b| counts[b] as u64))
}

/// CPU reference: the counts of each byte value.
pub fn histogram_reference(bytes: &[u8]) -> [u64; 256] {
    let mut hist = [0u64; 256];
    for &b in bytes {
        hist[b as usize] += 1;
    }
    hist
}
