//! The default image of the `svd` command: the Shepp–Logan head phantom.

use ndarray::Array2;
use std::f64::consts::PI;

/// The modified Shepp–Logan head phantom (Toft's intensities), `size × size`, values in `[0, 1]`:
/// the embedded default image of `svd`.
pub fn shepp_logan(size: usize) -> Array2<f32> {
    // (intensity, semi-axis a, semi-axis b, centre x, centre y, rotation in degrees)
    const ELLIPSES: [(f64, f64, f64, f64, f64, f64); 10] = [
        (1.0, 0.69, 0.92, 0.0, 0.0, 0.0),
        (-0.8, 0.6624, 0.874, 0.0, -0.0184, 0.0),
        (-0.2, 0.11, 0.31, 0.22, 0.0, -18.0),
        (-0.2, 0.16, 0.41, -0.22, 0.0, 18.0),
        (0.1, 0.21, 0.25, 0.0, 0.35, 0.0),
        (0.1, 0.046, 0.046, 0.0, 0.1, 0.0),
        (0.1, 0.046, 0.046, 0.0, -0.1, 0.0),
        (0.1, 0.046, 0.023, -0.08, -0.605, 0.0),
        (0.1, 0.023, 0.023, 0.0, -0.606, 0.0),
        (0.1, 0.023, 0.046, 0.06, -0.605, 0.0),
    ];
    Array2::from_shape_fn((size, size), |(row, col)| {
        // Pixel centres in [-1, 1], y up.
        let x = (2.0 * col as f64 + 1.0) / size as f64 - 1.0;
        let y = 1.0 - (2.0 * row as f64 + 1.0) / size as f64;
        let value: f64 = ELLIPSES
            .iter()
            .filter(|&&(_, a, b, x0, y0, deg)| {
                let (sin, cos) = (deg * PI / 180.0).sin_cos();
                let (dx, dy) = (x - x0, y - y0);
                let (u, v) = (dx * cos + dy * sin, -dx * sin + dy * cos);
                (u / a).powi(2) + (v / b).powi(2) <= 1.0
            })
            .map(|e| e.0)
            .sum();
        value.clamp(0.0, 1.0) as f32
    })
}
