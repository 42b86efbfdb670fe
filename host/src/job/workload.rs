//! Procedural, photo-like grayscale images for benchmarking the `svd` job: anyone can regenerate
//! the exact workloads (`svd-workload`), and the peers (`scripts/svd_peers.py`) read the same
//! files. Seeded and deterministic.
//!
//! An image is smooth illumination plus a few dozen soft-edged ellipses at random angles and a
//! little noise, quantised to 8 bits: its singular values decay like a photograph's, neither flat
//! (noise) nor trivially low-rank.

use crate::commands::image_io;
use crate::launch::error::{Error, Result, ensure};
use ndarray::Array2;
use rand::{Rng, SeedableRng, rngs::SmallRng};
use rayon::prelude::*;
use std::path::{Path, PathBuf};

/// One benchmark workload: `count` square images of `size` pixels, reconstructed at rank `k`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Workload {
    /// Directory name under the workloads' root.
    pub name: &'static str,
    /// Number of images.
    pub count: usize,
    /// Side of each image, pixels.
    pub size: usize,
    /// Rank to reconstruct.
    pub k: usize,
    /// Uniform noise (a flat spectrum: the slowest case for subspace iteration) instead of
    /// photo-like images.
    pub noise: bool,
}

/// The workloads: 64 × 256², 16 × 1024² (photo-like and uniform noise), 8 × 2048² at
/// k = 50, 256 × 512² at k = 20, and one 4096² at k = 256 (the benchmark also runs 8 × 2048² at
/// k = 256 and 4096² at k = 100 on the same files).
pub const STANDARD: [Workload; 6] = [
    Workload { name: "w256", count: 64, size: 256, k: 50, noise: false },
    Workload { name: "w512", count: 256, size: 512, k: 20, noise: false },
    Workload { name: "w1024", count: 16, size: 1024, k: 50, noise: false },
    Workload { name: "noise1024", count: 16, size: 1024, k: 50, noise: true },
    Workload { name: "w2048", count: 8, size: 2048, k: 50, noise: false },
    Workload { name: "w4096", count: 1, size: 4096, k: 256, noise: false },
];

/// A `rows × cols` 8-bit image of independent uniform pixels, the same for the same seed.
pub fn noise_image(seed: u64, rows: usize, cols: usize) -> Array2<u8> {
    let mut rng = SmallRng::seed_from_u64(seed);
    Array2::from_shape_fn((rows, cols), |_| rng.random::<u8>())
}

/// A `rows × cols` photo-like 8-bit image (row-major), the same for the same seed.
pub fn procedural_image(seed: u64, rows: usize, cols: usize) -> Array2<u8> {
    let mut rng = SmallRng::seed_from_u64(seed);
    // Ellipses: centre (x, y), semi-axes, angle, contrast.
    let ellipses: Vec<[f32; 6]> = (0..40)
        .map(|_| {
            [
                rng.random_range(0.0..1.0),
                rng.random_range(0.0..1.0),
                rng.random_range(0.02..0.35),
                rng.random_range(0.02..0.35),
                rng.random_range(0.0..std::f32::consts::PI),
                rng.random_range(-0.25..0.25),
            ]
        })
        .collect();
    let (gx, gy) = (rng.random_range(-0.3..0.3), rng.random_range(-0.3..0.3));
    let noise_seed = rng.random::<u64>();
    let mut data = vec![0u8; rows * cols];
    data.par_chunks_mut(cols.max(1)).enumerate().for_each(|(i, row)| {
        let mut noise = SmallRng::seed_from_u64(noise_seed ^ (i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15));
        let y = (i as f32 + 0.5) / rows as f32;
        for (j, pixel) in row.iter_mut().enumerate() {
            let x = (j as f32 + 0.5) / cols as f32;
            let mut v = 0.45 + gx * (x - 0.5) + gy * (y - 0.5);
            for &[cx, cy, a, b, angle, contrast] in &ellipses {
                let (s, c) = angle.sin_cos();
                let (dx, dy) = (x - cx, y - cy);
                let (u, w) = ((dx * c + dy * s) / a, (-dx * s + dy * c) / b);
                // A soft edge: 1 inside, 0 outside, a logistic ramp between.
                let t = ((u * u + w * w - 1.0) * 12.0).clamp(-30.0, 30.0);
                v += contrast / (1.0 + t.exp());
            }
            v += noise.random_range(-0.02..0.02);
            *pixel = (v.clamp(0.0, 1.0) * 255.0).round() as u8;
        }
    });
    Array2::from_shape_vec((rows, cols), data).expect("rows·cols pixels")
}

/// Writes `count` images (`img-000.png`, …; seeds `seed`, `seed + 1`, …; [`noise_image`]s with
/// `noise`, else [`procedural_image`]s) into `dir` (created if missing) and returns their paths.
pub fn write_workload(
    dir: &Path,
    count: usize,
    (rows, cols): (usize, usize),
    seed: u64,
    noise: bool,
) -> Result<Vec<PathBuf>> {
    ensure(count > 0 && rows > 0 && cols > 0, || {
        format!("cannot generate {count} images of {rows} × {cols}")
    })?;
    std::fs::create_dir_all(dir).map_err(|e| Error::File {
        path: dir.to_path_buf(),
        message: format!("cannot create directory: {e}"),
    })?;
    (0..count)
        .into_par_iter()
        .map(|i| {
            let path = dir.join(format!("img-{i:03}.png"));
            let make = if noise { noise_image } else { procedural_image };
            let image = make(seed + i as u64, rows, cols);
            image_io::save_gray8(&path, image.as_slice().expect("standard layout"), cols, rows)?;
            Ok(path)
        })
        .collect()
}
