//! Spiral images: one 8-bit gray pixel per thread.
//!
//! For the pixel in row `i` and column `j` of an image centred (in pixel units, fractions allowed)
//! on column `cx` and row `cy`:
//!
//! * `x = j − cx`, `y = cy − i` (y points up; +0, not −0, on the centre's row), `r = √(x² + y²)`;
//! * pixels with `r > max_radius` are [`BACKGROUND`];
//! * `θ = (180/π)·atan2(x, y) + curl·r·m(r)` in degrees (0 is up, clockwise positive), with
//!   `curl = curve / max_radius` and the curve multiplier `m`: [`MULTIPLIER_LN`] `ln r` (0 at
//!   `r = 0`, where the term's limit `r·ln r → 0` is 0), [`MULTIPLIER_SIN`] `sin(r/100)`,
//!   [`MULTIPLIER_COS`] `cos(r/100)`, [`MULTIPLIER_TAN`] `tan(r/100)`;
//! * with `w = 360/symmetry`, the level is `⌊(θ mod w)·256/w⌋`, computed as
//!   `⌊θ·256/w⌋ mod 256` (equal in exact arithmetic), which is an integer in `0..=255` whatever the
//!   rounding: the value 256 cannot occur at the wrap of `θ mod w`;
//! * the level is inverted (`255 − level`) when `sin((θ mod 360)·symmetry/100) < 0.5`.
//!
//! Every `mod` is the floored one (`a − m·⌊a/m⌋`, in `[0, m)` for negative `a` too), and the
//! divisions by the constants 100, 360 and 256 are multiplications by their reciprocals. The
//! inversion test is done without a sine: `sin φ < 1/2` exactly when `φ mod 2π` lies outside
//! `[π/6, 5π/6]` (the CPU reference computes the sine; the two can differ only at the flip). The centre
//! pixel (`r = 0`, present when the centre has integer coordinates) gets `θ = 0`, so value 255.
//!
//! Host side: `host/src/families/spiral.rs` (safe wrapper, configuration, CPU reference in f64); tests:
//! `tests/spiral.rs`; command: `cargo run --release --bin spiral`.

use core::f64::consts::{PI, TAU};
use gpu_std::math::{self, Float};
use gpu_std::{kernel, thread};

/// Value of the pixels farther than `max_radius` from the centre (black).
pub const BACKGROUND: u8 = 0;
/// Curve multiplier `m(r) = ln r`.
pub const MULTIPLIER_LN: u32 = 0;
/// Curve multiplier `m(r) = sin(r/100)`.
pub const MULTIPLIER_SIN: u32 = 1;
/// Curve multiplier `m(r) = cos(r/100)`.
pub const MULTIPLIER_COS: u32 = 2;
/// Curve multiplier `m(r) = tan(r/100)`; the kernels also use it for any multiplier above 3.
pub const MULTIPLIER_TAN: u32 = 3;

/// The gray value of the pixel in column `col`, row `row`; see the module documentation.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn level<T: Float>(
    col: u32,
    row: u32,
    center_x: T,
    center_y: T,
    max_radius: T,
    curl: T,
    multiplier: u32,
    symmetry: u32,
) -> u8 {
    let x = T::from_u32(col) - center_x;
    let y = center_y - T::from_u32(row);
    let r = math::sqrt(x * x + y * y);
    if r > max_radius {
        return BACKGROUND;
    }
    let zero = T::from_f64(0.0);
    let radius_term = r * T::from_f64(0.01);
    let m = match multiplier {
        MULTIPLIER_LN => {
            if r > zero {
                math::ln(r)
            } else {
                zero
            }
        }
        MULTIPLIER_SIN => math::sin(radius_term),
        MULTIPLIER_COS => math::cos(radius_term),
        _ => math::tan(radius_term),
    };
    let theta = math::atan2(x, y) * T::from_f64(180.0 / PI) + curl * r * m;
    let turn = theta - T::from_f64(360.0) * math::floor(theta * T::from_f64(1.0 / 360.0));
    let symmetry = T::from_u32(symmetry);
    let steps = math::floor(theta * (symmetry * T::from_f64(256.0 / 360.0)));
    let mut value = steps - T::from_f64(256.0) * math::floor(steps * T::from_f64(1.0 / 256.0));
    // sin(φ) < 1/2 exactly when φ mod 2π lies outside [π/6, 5π/6]: a range test instead of a sine.
    let phase = turn * (symmetry * T::from_f64(0.01));
    let phase = phase - T::from_f64(TAU) * math::floor(phase * T::from_f64(1.0 / TAU));
    if !(phase >= T::from_f64(PI / 6.0) && phase <= T::from_f64(5.0 * PI / 6.0)) {
        value = T::from_f64(255.0) - value;
    }
    // An integer in 0..=255 (a saturating cast: NaN would give 0).
    value.to_u8()
}

/// One thread per pixel, computed in `F` (`spiral_f32`, `spiral_f64`): writes
/// `image[row·width + col]` (row-major, 8-bit gray) for every pixel of the `width × height` image.
///
/// `center_x` (column) and `center_y` (row) are in pixels; `curl = curve / max_radius`;
/// `multiplier` is one of the `MULTIPLIER_*` codes; `symmetry ≥ 1`; `image` holds at least
/// `width·height` bytes. Launch a 2-D grid (x = column) covering the image; threads outside it do
/// nothing.
///
/// # Safety
/// `image` holds at least `width·height` bytes: the store is unchecked on the GPU (a check costs
/// 6% of this ~100-instruction-per-pixel kernel; the simulator keeps it).
#[kernel(f32, f64)]
pub unsafe fn spiral<F: Float>(
    image: &mut [u8],
    width: u32,
    height: u32,
    center_x: F,
    center_y: F,
    max_radius: F,
    curl: F,
    multiplier: u32,
    symmetry: u32,
) {
    // Checked once here; the guard below proves the per-pixel check.
    let (col, row) = thread::index_2d();
    if col < width && row < height {
        let v = level(col, row, center_x, center_y, max_radius, curl, multiplier, symmetry);
        // SAFETY: row < height and col < width, and `image` holds width·height bytes (the
        // caller's contract; `launch_spiral` checks it). Unchecked because the 7 instructions of a
        // check, even one per launch through a matrix view, cost 6% on the H100
        // (docs/benchmarks/kernel-forms.md).
        unsafe { image.set_unchecked(row as usize * width as usize + col as usize, v) };
    }
}
