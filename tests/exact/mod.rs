//! Images whose singular values are known exactly, for testing an SVD (and its reference) against
//! the truth rather than against another library (`tests/svd_exact.rs`): constant blocks (repeated
//! values), scaled orthogonal matrices (all values equal), and `U·diag(s)·Vᵀ` with orthonormal
//! cosine bases and a chosen spectrum (clusters, exact zeros, geometric decay).
//!
//! Each image is built in f64 and rounded to f32; [`Exact::rounding`] is `‖A_f32 − A‖_F`, which by
//! Weyl's inequality bounds how far the f32 image's singular values can be from [`Exact::s`].

use ndarray::Array2;

/// An f32 image and the singular values of the f64 matrix it was rounded from.
pub struct Exact {
    /// What the image is, for messages.
    pub label: String,
    /// The image.
    pub image: Array2<f32>,
    /// All `min(m, n)` singular values, non-increasing, exact (of the unrounded matrix).
    pub s: Vec<f64>,
    /// `‖A_f32 − A‖_F`: every singular value of `image` is within this of `s`.
    pub rounding: f64,
}

impl Exact {
    fn new(label: String, exact: Array2<f64>, mut s: Vec<f64>) -> Exact {
        let image = exact.mapv(|v| v as f32);
        let rounding = image.iter().zip(&exact).map(|(&a, &b)| (a as f64 - b).powi(2)).sum::<f64>().sqrt();
        let r = exact.nrows().min(exact.ncols());
        s.resize(r, 0.0);
        s.sort_by(|a, b| b.total_cmp(a));
        Exact { label, image, s, rounding }
    }

    /// The Eckart–Young bound of rank `k`: `√(Σ_{i≥k} s_i²) / ‖A‖_F`, from the exact values.
    pub fn eckart_young_bound(&self, k: usize) -> f64 {
        let total: f64 = self.s.iter().map(|v| v * v).sum();
        let tail: f64 = self.s[k.min(self.s.len())..].iter().map(|v| v * v).sum();
        if total == 0.0 { 0.0 } else { (tail / total).sqrt() }
    }

    /// `‖A‖_F` from the exact values.
    pub fn frobenius_norm(&self) -> f64 {
        self.s.iter().map(|v| v * v).sum::<f64>().sqrt()
    }
}

/// Constant blocks on the diagonal: `(rows, cols, value)` each, the rest zero. Each block is
/// `value·𝟙𝟙ᵀ`, one singular value `|value|·√(rows·cols)` (of the value as f32, so exact).
pub fn constant_blocks(blocks: &[(usize, usize, f32)]) -> Exact {
    let (m, n) = blocks.iter().fold((0, 0), |(m, n), &(r, c, _)| (m + r, n + c));
    let mut a = Array2::zeros((m, n));
    let (mut i0, mut j0) = (0, 0);
    let mut s = Vec::new();
    for &(r, c, v) in blocks {
        a.slice_mut(ndarray::s![i0..i0 + r, j0..j0 + c]).fill(v as f64);
        s.push((v as f64).abs() * ((r * c) as f64).sqrt());
        (i0, j0) = (i0 + r, j0 + c);
    }
    let label = format!("{m}×{n} constant blocks {blocks:?}");
    Exact::new(label, a, s)
}

/// The Sylvester–Hadamard matrix of order `n` (a power of two): ±1 entries, `HᵀH = n·I`.
fn hadamard(n: usize) -> Array2<f64> {
    assert!(n.is_power_of_two());
    Array2::from_shape_fn((n, n), |(i, j)| if (i & j).count_ones() % 2 == 0 { 1.0 } else { -1.0 })
}

/// `scale·H[:, ..cols]` for the `rows × rows` Hadamard matrix `H` (`rows` a power of two), transposed
/// when `wide`: orthogonal columns of norm `scale·√rows`, so every singular value equals that.
pub fn scaled_orthogonal(rows: usize, cols: usize, scale: f32, wide: bool) -> Exact {
    let h = hadamard(rows).slice(ndarray::s![.., ..cols]).mapv(|v| v * scale as f64);
    let a = if wide { h.t().to_owned() } else { h };
    let s = vec![(scale as f64).abs() * (rows as f64).sqrt(); cols];
    Exact::new(format!("{}×{} scaled Hadamard columns", a.nrows(), a.ncols()), a, s)
}

/// `count` columns of the orthonormal DCT-II basis of size `n`: column `p` has frequency
/// `p·stride mod n` (`stride` coprime to `n`, so the frequencies differ and the singular vectors are
/// not in frequency order).
fn cosine_basis(n: usize, count: usize, stride: usize) -> Array2<f64> {
    Array2::from_shape_fn((n, count), |(i, p)| {
        let f = (p * stride) % n;
        let norm = if f == 0 { (1.0 / n as f64).sqrt() } else { (2.0 / n as f64).sqrt() };
        norm * (std::f64::consts::PI * (i as f64 + 0.5) * f as f64 / n as f64).cos()
    })
}

/// `U·diag(s)·Vᵀ` (`m × n`) with orthonormal cosine bases `U`, `V` and the given singular values
/// (at most `min(m, n)` of them, any order; the rest are zero).
pub fn chosen_spectrum(label: &str, m: usize, n: usize, s: &[f64]) -> Exact {
    let k = s.len();
    assert!(k <= m.min(n));
    let stride = |n: usize| (2..).find(|d| gcd(*d, n) == 1).expect("n + 1 is coprime to n");
    let (u, v) = (cosine_basis(m, k, stride(m)), cosine_basis(n, k, stride(n)));
    let us = Array2::from_shape_fn((m, k), |(i, p)| u[[i, p]] * s[p]);
    let a = us.dot(&v.t());
    Exact::new(format!("{m}×{n} {label}"), a, s.to_vec())
}

fn gcd(a: usize, b: usize) -> usize {
    if b == 0 { a } else { gcd(b, a % b) }
}

/// The structured images of the exact-answer tests, all at least 128 on their shorter side (past
/// every small-matrix path of the solvers), each with the ranks to check.
pub fn structured_images() -> Vec<(Exact, Vec<usize>)> {
    let clustered: Vec<f64> = [40.0, 40.0, 40.0, 20.0, 20.0 * (1.0 + 1e-9), 10.0]
        .into_iter()
        .chain((0..30).map(|i| 5.0 * 0.7f64.powi(i)))
        .collect();
    let geometric: Vec<f64> = (0..140).map(|i| 0.9f64.powi(i)).collect();
    vec![
        // The image of the issue: four equal values 25.098 (200/255 · 32).
        (constant_blocks(&[(32, 32, 200.0 / 255.0); 4]), vec![1, 4, 5, 128]),
        // Equal values from blocks of different shapes (32·32 = 16·64 = 64·16), and one zero block.
        (
            constant_blocks(&[(32, 32, 0.5), (16, 64, 0.5), (64, 16, 0.5), (24, 40, 0.0), (20, 8, 0.9)]),
            vec![1, 3, 4, 10],
        ),
        (scaled_orthogonal(256, 200, 0.25, false), vec![1, 7, 200]),
        (scaled_orthogonal(128, 128, 1.0 / 16.0, true), vec![3, 128]),
        (
            chosen_spectrum("clusters, then geometric decay, then zeros", 150, 131, &clustered),
            vec![2, 3, 5, 6, 20, 40],
        ),
        (chosen_spectrum("geometric decay, wide", 140, 190, &geometric), vec![1, 10, 60, 140]),
        (
            chosen_spectrum("rank 10", 160, 144, &[9.0, 8.0, 7.0, 6.0, 5.0, 4.0, 3.0, 2.0, 1.0, 0.5]),
            vec![10, 11, 30],
        ),
    ]
}
