//! The batched f64 GEMMs of the iteration (`kernels::svd_factor`'s tiled kernels, on the f64
//! tensor cores on a GPU): operands read through a [`Layout`](kernels::svd_factor::Layout)
//! (transposed, strided, per image), their spans checked before a launch.

use crate::error::{Result, ensure};
use crate::profile::Work;
use crate::{BufferView, BufferViewMut, Device, Dim3, Element, LaunchConfig, Queue};
use gpu_std::{KernelFn, Slice, SliceMut};
use kernels::svd_factor::{self as kf, Layout};

/// Launch configuration of the GEMM kernels for an `m × n` result over `images`.
fn gemm_config(m: usize, n: usize, images: usize) -> LaunchConfig {
    LaunchConfig {
        grid: Dim3 {
            x: n.div_ceil(kf::GEMM_TILE as usize) as u32,
            y: m.div_ceil(kf::GEMM_TILE as usize) as u32,
            z: images as u32,
        },
        block: Dim3::x(kf::GEMM_THREADS),
        shared_bytes: kf::GEMM_SHARED_BYTES,
    }
}

/// One operand of a batched GEMM: the buffer (or part of one) and the layout it is read through.
#[derive(Clone, Copy)]
pub(super) struct Operand<'a> {
    data: BufferView<'a, f64>,
    layout: Layout,
}

/// The operand `data` read through `layout`.
pub(super) fn operand(data: BufferView<'_, f64>, layout: Layout) -> Operand<'_> {
    Operand { data, layout }
}

/// Checks that `len` elements hold `images` `rows × cols` matrices through `layout` (the span from
/// the first element to the last), which the GEMM kernels index without checks.
fn check_span(
    what: &str,
    len: usize,
    layout: Layout,
    (rows, cols): (usize, usize),
    images: usize,
) -> Result<()> {
    let span = (images - 1) * layout.batch as usize
        + (rows - 1) * layout.row as usize
        + (cols - 1) * layout.col as usize
        + 1;
    ensure(span <= len, || {
        format!(
            "GEMM {what}: {images} matrices of {rows} × {cols} span {span} elements; the buffer holds {len}"
        )
    })
}

/// `C = A·B·diag(scale)` for every image (`m × n` result, inner dimension `k`), f64 result;
/// `scale` is `n` values per image, its stride apart. Only the upper triangle of blocks is
/// computed and mirrored when `symmetric`.
///
/// # Safety
/// The buffers must live until the queue reaches the launch (as for [`Device::launch_on`]).
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn gemm(
    device: &Device,
    queue: &Queue,
    operands: (Operand, Operand),
    c: (BufferViewMut<f64>, Layout),
    scale: Option<(BufferView<f64>, u32)>,
    dims: (usize, usize, usize),
    images: usize,
    symmetric: bool,
) -> Result<()> {
    let kernel = if tensor_cores(device) { &kf::GEMM_F64_MMA_TO_F64 } else { &kf::GEMM_F64_TO_F64 };
    // SAFETY: forwarded from the caller.
    unsafe { gemm_into(device, queue, kernel, operands, c, scale, dims, images, symmetric) }
}

/// Whether the GEMMs run on the f64 tensor cores ([`kf::gemm_f64_mma_to`]): on a GPU (every
/// supported one, sm_80 and newer, has them). The simulator runs the FMA kernels, whose results
/// agree to rounding, since it simulates a warp's `mma` through a gather of all its lanes; the
/// tensor-core kernels are tested there against them on their own (`tests/svd_factor.rs`).
fn tensor_cores(device: &Device) -> bool {
    device.backend() == crate::Backend::Gpu
}

/// [`gemm`] with an f32 result.
///
/// # Safety
/// As for [`gemm`].
pub(super) unsafe fn gemm_to_f32(
    device: &Device,
    queue: &Queue,
    operands: (Operand, Operand),
    c: (BufferViewMut<f32>, Layout),
    scale: Option<(BufferView<f64>, u32)>,
    dims: (usize, usize, usize),
    images: usize,
) -> Result<()> {
    let kernel = if tensor_cores(device) { &kf::GEMM_F64_MMA_TO_F32 } else { &kf::GEMM_F64_TO_F32 };
    // SAFETY: forwarded from the caller.
    unsafe { gemm_into(device, queue, kernel, operands, c, scale, dims, images, false) }
}

/// [`gemm`] with the result type of `kernel`; every operand's layout checked against its buffer.
///
/// # Safety
/// As for [`gemm`].
#[allow(clippy::too_many_arguments)]
unsafe fn gemm_into<T: Element>(
    device: &Device,
    queue: &Queue,
    kernel: &KernelFn<GemmArgs<T>>,
    (a, b): (Operand, Operand),
    (c, c_layout): (BufferViewMut<T>, Layout),
    scale: Option<(BufferView<f64>, u32)>,
    (m, n, k): (usize, usize, usize),
    images: usize,
    symmetric: bool,
) -> Result<()> {
    check_span("A", a.data.len(), a.layout, (m, k), images)?;
    check_span("B", b.data.len(), b.layout, (k, n), images)?;
    check_span("C", c.len(), c_layout, (m, n), images)?;
    let scale_stride = match scale {
        Some((values, stride)) => {
            check_span("scale", values.len(), Layout::row_major(1, stride), (1, n), images)?;
            stride
        }
        None => 0,
    };
    let work = gemm_work(m, n, k, images, symmetric);
    let args = (
        a.data,
        a.layout,
        b.data,
        b.layout,
        c,
        c_layout,
        scale.map(|(values, _)| values),
        scale_stride,
        m as u32,
        n as u32,
        k as u32,
        symmetric as u32,
    );
    // SAFETY: forwarded from the caller; the layouts lie inside their buffers (checked above);
    // one thread block per 64 × 64 tile and image.
    unsafe { device.launch_counted(queue, kernel, gemm_config(m, n, images), args, Some(work)) }
}

/// The argument tuple of the GEMM kernels with result type `T`.
type GemmArgs<T> =
    (Slice<f64>, Layout, Slice<f64>, Layout, SliceMut<T>, Layout, Slice<f64>, u32, u32, u32, u32, u32);

fn gemm_work(m: usize, n: usize, k: usize, images: usize, symmetric: bool) -> Work {
    let half = if symmetric { 0.5 } else { 1.0 };
    Work {
        bytes: images as f64 * 8.0 * (m * k + k * n + m * n) as f64 * half,
        flops: images as f64 * 2.0 * (m * n * k) as f64 * half,
    }
}
