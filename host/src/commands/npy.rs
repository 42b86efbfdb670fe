//! NumPy `.npy` files through `ndarray-npy`: f32 and f64 arrays of any number of dimensions (the
//! commands write 2-D results and 1-D powers and singular values), with errors that name the file.
//! `numpy.load` reads what [`write()`] writes (C order, or Fortran order for a transposed view).

use crate::error::{Error, Result};
use ndarray::{Array, ArrayBase, Data, Dimension};
use ndarray_npy::{ReadableElement, WritableElement, WriteNpyExt};
use std::path::Path;

/// Writes `array` to `path`, whole or not at all ([`crate::image_io::write_atomically`]): a
/// reader never finds a truncated array under that name.
pub fn write<A, S, D>(path: &Path, array: &ArrayBase<S, D>) -> Result<()>
where
    A: WritableElement,
    S: Data<Elem = A>,
    D: Dimension,
{
    crate::image_io::write_atomically(path, |file| array.write_npy(file)).map_err(|e| file_error(path, e))
}

/// Reads the array of element type `A` and dimension `D` that `path` holds.
pub fn read<A: ReadableElement, D: Dimension>(path: &Path) -> Result<Array<A, D>> {
    ndarray_npy::read_npy(path).map_err(|e| file_error(path, e))
}

fn file_error(path: &Path, e: impl std::fmt::Display) -> Error {
    Error::File { path: path.to_path_buf(), message: e.to_string() }
}
