//! The exact truncated SVD of a matrix from Rust: `kernel_suite::matrix_svd::truncated_svd` on an
//! `ndarray` matrix, on the GPU, in the simulator or on the CPU (`--device`).
//!
//! ```sh
//! scripts/cargo run --release --example truncated_svd -- --rows 2000 --cols 300 -k 20
//! scripts/cargo run --release --example truncated_svd -- --device sim --rows 300 --cols 40 -k 10
//! ```
//!
//! It builds a seeded matrix with singular values from 1 down to 1e-12 (`U₀·diag(σ)·V₀ᵀ`, random
//! orthonormal `U₀`, `V₀`), factors it and prints the leading singular values, their largest error
//! against the constructed ones (relative to `σ₁`) and the time the call took.

use clap::Parser;
use kernel_suite::cli::{DeviceArgs, Target};
use kernel_suite::matrix_svd::truncated_svd;
use ndarray::Array2;
use rand::{Rng, SeedableRng, rngs::SmallRng};
use std::time::Instant;

/// An exact truncated SVD of a seeded matrix of known spectrum.
#[derive(Parser)]
struct Args {
    #[command(flatten)]
    device: DeviceArgs,
    /// Rows of the matrix.
    #[arg(long, default_value_t = 2000)]
    rows: usize,
    /// Columns of the matrix.
    #[arg(long, default_value_t = 300)]
    cols: usize,
    /// Singular triplets to compute.
    #[arg(short, default_value_t = 20)]
    k: usize,
}

/// A `rows × cols` matrix with singular values `s` and random orthonormal singular vectors.
fn with_spectrum((rows, cols): (usize, usize), s: &[f64]) -> Array2<f64> {
    let mut rng = SmallRng::seed_from_u64(54);
    let mut orthonormal = |n: usize| {
        let a = faer::Mat::<f64>::from_fn(n, s.len(), |_, _| rng.random_range(-1.0..1.0));
        let q = a.qr().compute_thin_Q();
        Array2::from_shape_fn((n, s.len()), |(i, j)| q[(i, j)])
    };
    let (u, v) = (orthonormal(rows), orthonormal(cols));
    (&u * &ndarray::Array1::from(s.to_vec())).dot(&v.t())
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let r = args.rows.min(args.cols);
    let s: Vec<f64> = (0..r).map(|i| 1e-12f64.powf(i as f64 / (r.max(2) - 1) as f64)).collect();
    let a = with_spectrum((args.rows, args.cols), &s);
    let target = args.device.select()?;
    let device = match &target {
        Target::Kernels(device) => Some(device),
        Target::CpuReference => None,
    };
    let start = Instant::now();
    let factors = truncated_svd(device, &[a.view()], args.k)?.remove(0);
    let elapsed = start.elapsed();
    let error = factors.s.iter().zip(&s).map(|(got, want)| (got - want).abs()).fold(0.0, f64::max);
    let on = device.map_or("the CPU".to_string(), |d| d.describe());
    println!(
        "{} × {} matrix, k = {} on {on}: {:.1} ms",
        args.rows,
        args.cols,
        args.k,
        elapsed.as_secs_f64() * 1e3
    );
    println!(
        "σ = {:.3e} … {:.3e}; max |Δσ|/σ₁ against the constructed spectrum: {error:.1e}",
        factors.s[0],
        factors.s[args.k - 1]
    );
    println!("U: {:?}, Vᵀ: {:?}", factors.u.dim(), factors.vt.dim());
    Ok(())
}
