//! The one-pass device work around the iteration: the per-image sums of squares (norms and
//! reconstruction errors) and the conversions of the images to f64.

use crate::launch::device::{Buffer, BufferView, BufferViewMut, Device, Element, Queue};
use crate::launch::error::{Result, ensure};
use crate::launch::profile::Work;
use gpu_std::sim::{Dim3, LaunchConfig};
use gpu_std::{KernelFn, Slice, SliceMut};
use kernels::svd_factor as kf;

/// Blocks (and partial sums) per image of [`queue_squared_sums`] over `count` values: a block per
/// 4096 values, at most 512, so one large image still spreads over the GPU (at most 64 took
/// 0.39 ms for one 4096² image, each thread's chain of loads a thousand long).
pub fn squared_sum_blocks(count: usize) -> usize {
    count.div_ceil(4096).clamp(1, 512)
}

/// Sums of squares per image (`Σ (a − x)²`, or `Σ a²` without `x`) over the `count` elements of
/// each of `images` images (`count` apart) of `a` (a buffer, or a view of one or of another
/// library's array), queued on `queue`: returns the partial-sum buffer (`images × blocks`) to add
/// up on the host.
///
/// # Safety
/// `a` and `x` must live until the queue reaches the launch (as for [`Device::launch_on`]).
pub unsafe fn queue_squared_sums<'a>(
    device: &Device,
    queue: &Queue,
    a: impl Into<BufferView<'a, f64>>,
    x: Option<&Buffer<f32>>,
    count: usize,
    images: usize,
) -> Result<(Buffer<f64>, usize)> {
    let a = a.into();
    let len = images * count;
    ensure(count > 0 && images > 0, || format!("squared sums over {images} images of {count} values"))?;
    ensure(a.len() >= len, || format!("squared sums: {} values for {images} images of {count}", a.len()))?;
    if let Some(x) = x {
        ensure(x.len() >= len, || {
            format!("squared sums: {} values to compare for {images} images of {count}", x.len())
        })?;
    }
    const THREADS: u32 = 256;
    let blocks = squared_sum_blocks(count);
    let mut partial = device.alloc_temporary::<f64>(queue, images * blocks)?;
    let cfg = LaunchConfig {
        grid: Dim3 { x: blocks as u32, y: 1, z: images as u32 },
        block: Dim3::x(THREADS),
        shared_bytes: THREADS * 8,
    };
    let args = (a, count as u32, x, count as u32, count as u32, &mut partial);
    let work = Work { bytes: (len * 12) as f64, flops: (len * 3) as f64 };
    // SAFETY: forwarded from the caller; the kernel reads each image's `count` values through
    // checked slices; `partial` holds a value per block and image.
    unsafe { device.launch_counted(queue, &kf::SQUARED_DIFFERENCE_SUMS, cfg, args, Some(work))? };
    Ok((partial, blocks))
}

/// Adds up the partial sums of [`queue_squared_sums`] per image (waits for the queue).
pub fn finish_squared_sums(device: &Device, partial: &Buffer<f64>, blocks: usize) -> Result<Vec<f64>> {
    let values = device.download(partial)?;
    Ok(values.chunks(blocks).map(|c| c.iter().sum()).collect())
}

/// Widens the f32 values of `src` to f64 in `dst` (of the same length) on `queue`: images of a
/// buffer, or of another library's array ([`BufferView::from_raw_parts`]).
///
/// # Safety
/// Both views' memory must live until the queue reaches the launch (as for [`Device::launch_on`]).
pub unsafe fn launch_f32_to_f64(
    device: &Device,
    queue: &Queue,
    src: BufferView<'_, f32>,
    dst: BufferViewMut<'_, f64>,
) -> Result<()> {
    // SAFETY: forwarded from the caller.
    unsafe { launch_conversion(device, queue, &kf::F32_TO_F64, src, dst) }
}

/// Converts the 8-bit pixels of `src` to f64 in `[0, 1]` in `dst` (of the same length) on `queue`.
///
/// # Safety
/// As for [`launch_f32_to_f64`].
pub unsafe fn launch_gray8_to_f64(
    device: &Device,
    queue: &Queue,
    src: &Buffer<u8>,
    dst: &mut Buffer<f64>,
) -> Result<()> {
    // SAFETY: forwarded from the caller.
    unsafe { launch_conversion(device, queue, &kf::GRAY8_TO_F64, src.view(..)?, dst.view_mut(..)?) }
}

/// One element-wise conversion kernel over two buffers of the same length, grid-stride.
///
/// # Safety
/// As for [`launch_f32_to_f64`].
unsafe fn launch_conversion<S: Element>(
    device: &Device,
    queue: &Queue,
    kernel: &KernelFn<(Slice<S>, SliceMut<f64>)>,
    src: BufferView<'_, S>,
    dst: BufferViewMut<'_, f64>,
) -> Result<()> {
    ensure(src.len() == dst.len(), || {
        format!("`{}`: {} values in, room for {} out", kernel.name(), src.len(), dst.len())
    })?;
    let cfg = LaunchConfig::for_grid_stride(src.len(), 256, 4096);
    // SAFETY: forwarded from the caller; the kernel indexes both slices below their length.
    unsafe { device.launch_on(queue, kernel, cfg, (src, dst)) }
}
