//! The finite-pixel check every SVD of the suite makes before it factors an image: a NaN or an
//! infinity would not stop the iterations, it would fill the results with NaN.

use crate::launch::error::{Error, Result};
use ndarray::ArrayView2;

/// Checks that every pixel of `image` is finite. The error ([`Error::InvalidInput`]) names the
/// first non-finite pixel in row-major order, after the image's `name` when given:
/// `"{name}: pixel ({row}, {col}) is {value}: the image must be finite"`.
pub fn check_finite(image: ArrayView2<'_, f32>, name: Option<&str>) -> Result<()> {
    match image.indexed_iter().find(|(_, v)| !v.is_finite()) {
        None => Ok(()),
        Some(((row, col), value)) => {
            let what = format!("pixel ({row}, {col}) is {value}: the image must be finite");
            Err(Error::InvalidInput(match name {
                Some(name) => format!("{name}: {what}"),
                None => what,
            }))
        }
    }
}

/// The same check where only each image's sum of squared pixels is at hand (images already on
/// the device: the sum is finite exactly when every pixel is, f32 squares being far from f64's
/// range). The error names the first image whose sum is not finite: `"image {i} holds a
/// non-finite pixel: the images must be finite"`.
pub fn check_finite_sums(squared_sums: &[f64]) -> Result<()> {
    match squared_sums.iter().position(|s| !s.is_finite()) {
        None => Ok(()),
        Some(i) => {
            Err(Error::InvalidInput(format!("image {i} holds a non-finite pixel: the images must be finite")))
        }
    }
}
