//! Matrix transpose on the device: safe wrapper of `kernels::transpose::transpose_f32` and its CPU
//! reference.
//!
//! Device code: `kernels/src/transpose.rs`; tests: `tests/transpose.rs`; benchmark:
//! `benches/transpose.rs`.

use crate::error::{Result, ensure};
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
        shared_bytes: k::shared_layout().bytes_u32(),
    };
    // SAFETY: the grid covers the matrix in tiles of TILE × TILE with TILE × ROWS threads, and the
    // shapes match the buffers (checked above).
    unsafe { device.launch(&k::TRANSPOSE_F32, cfg, (input, rows as u32, cols as u32, output)) }
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
