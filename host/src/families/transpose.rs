//! Matrix transpose on the device: safe wrappers of `kernels::transpose::transpose` (f32 for one
//! matrix, f64 for a batch) and its CPU reference.
//!
//! Device code: `kernels/src/transpose.rs`; tests: `tests/transpose.rs`; benchmark:
//! `benches/transpose.rs`.

use crate::error::{Result, ensure};
use crate::launch::device::{BufferView, BufferViewMut, Queue};
use crate::{Buffer, Device, Dim3, LaunchConfig};
use kernels::transpose as k;
use ndarray::{Array2, ArrayView2};

/// Queues `output = inputᵀ` for a `rows × cols` row-major `input` (`output` is `cols × rows`).
pub fn transpose_buffer(
    device: &Device,
    input: &Buffer<f32>,
    rows: usize,
    cols: usize,
    output: &mut Buffer<f32>,
) -> Result<()> {
    ensure(rows > 0 && cols > 0, || format!("a {rows} × {cols} matrix is empty"))?;
    let len = rows.checked_mul(cols).filter(|&n| n <= u32::MAX as usize);
    ensure(len == Some(input.len()) && input.len() == output.len(), || {
        format!(
            "a {rows} × {cols} matrix does not fit buffers of {} and {} elements",
            input.len(),
            output.len()
        )
    })?;
    let grid = Dim3::xy(cols.div_ceil(k::TILE as usize) as u32, rows.div_ceil(k::TILE as usize) as u32);
    let cfg = LaunchConfig {
        grid,
        block: Dim3::xy(k::TILE, k::ROWS),
        shared_bytes: k::shared_layout::<f32>().bytes_u32(),
    };
    // SAFETY: the grid covers the matrix in tiles of TILE × TILE with TILE × ROWS threads, and the
    // shapes match the buffers (checked above).
    unsafe { device.launch(&k::TRANSPOSE_F32, cfg, (input, rows as u32, cols as u32, output)) }
}

/// Most matrices of one launch of [`transpose_batch_f64`] (the grid's `z` limit).
const MAX_GRID_Z: usize = 65_535;

/// Queues on `queue`, for each of the `matrices` row-major `rows × cols` f64 matrices of `input`
/// (`rows·cols` apart), its `cols × rows` transpose into `output` (as far apart): the exact SVD
/// makes a wide matrix tall with it, so that its Gram matrix is the GEMMs' fast form.
///
/// # Safety
/// `input` and `output` must live until the queue reaches the launches (as for
/// [`Device::launch_on`]).
pub unsafe fn transpose_batch_f64(
    device: &Device,
    queue: &Queue,
    input: BufferView<'_, f64>,
    (rows, cols): (usize, usize),
    matrices: usize,
    mut output: BufferViewMut<'_, f64>,
) -> Result<()> {
    let len = rows * cols;
    ensure(rows > 0 && cols > 0 && matrices > 0, || {
        format!("{matrices} matrices of {rows} × {cols} are empty")
    })?;
    ensure(len <= u32::MAX as usize && rows.div_ceil(k::TILE as usize) <= MAX_GRID_Z, || {
        format!("a {rows} × {cols} matrix is too large to transpose in one launch")
    })?;
    ensure(input.len() == matrices * len && output.len() == input.len(), || {
        format!(
            "{matrices} matrices of {rows} × {cols} do not fit buffers of {} and {} elements",
            input.len(),
            output.len()
        )
    })?;
    for first in (0..matrices).step_by(MAX_GRID_Z) {
        let count = (matrices - first).min(MAX_GRID_Z);
        let config = LaunchConfig {
            grid: Dim3 {
                x: cols.div_ceil(k::TILE as usize) as u32,
                y: rows.div_ceil(k::TILE as usize) as u32,
                z: count as u32,
            },
            block: Dim3::xy(k::TILE, k::ROWS),
            shared_bytes: k::shared_layout::<f64>().bytes_u32(),
        };
        let span = first * len..(first + count) * len;
        let args = (input.view(span.clone())?, rows as u32, cols as u32, output.view_mut(span)?);
        // SAFETY: the grid covers each matrix in tiles of TILE × TILE with TILE × ROWS threads, a
        // matrix per z, inside the views (checked above); the caller keeps them alive.
        unsafe { device.launch_on(queue, &k::TRANSPOSE_F64, config, args)? };
    }
    Ok(())
}

/// `matrix` transposed on `device`.
pub fn transpose(device: &Device, matrix: ArrayView2<f32>) -> Result<Array2<f32>> {
    let (rows, cols) = matrix.dim();
    let input = device.upload(matrix.as_standard_layout().as_slice().expect("standard layout"))?;
    let mut output = device.alloc::<f32>(rows * cols)?;
    transpose_buffer(device, &input, rows, cols, &mut output)?;
    Ok(Array2::from_shape_vec((cols, rows), device.download(&output)?).expect("cols·rows values"))
}

/// CPU reference: element `(c, r)` is `matrix[(r, c)]`, copied one by one.
pub fn transpose_reference(matrix: ArrayView2<f32>) -> Array2<f32> {
    let (rows, cols) = matrix.dim();
    Array2::from_shape_fn((cols, rows), |(c, r)| matrix[[r, c]])
}
