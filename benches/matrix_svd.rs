//! The exact truncated SVD's device path against the `svd` job's (GPU only): `cargo bench --bench
//! matrix_svd`. Per workload, the time of the engine's factorisation ([`svd_factor::factor`]: the
//! job's stop test, f32 factors) and of the accurate one ([`svd_factor::factor_accurate`]: the
//! stricter stop test, then the pass on `A`, f64 factors), between two events on the device's queue
//! (so the host's share of the pass shows), median of 5 after a warm-up; their iterations; and their
//! largest singular value error against faer (f64) on the first matrix. For tall and square
//! matrices whose Gram matrix is at most [`svd_factor::WHOLE_GRAM_MAX_R`] wide, the accurate
//! factorisation also by the Gram method its plan did not choose (every eigenpair of `G` at once,
//! or subspace iteration), so that the plan's rule is measured on the accurate path too.
//!
//! Workloads: photo-like images (decaying spectra) and uniform noise (flat) as f64 matrices in
//! `[0, 1]`, square batches as the job runs them, and a tall 100 000 × 512 and a wide 512 × 20 000
//! matrix of noise (issue 54's PCA shapes). `MATRIX_SVD_WORKLOAD=1x100000x512x50n` runs one
//! (count × rows × cols × k, `n` for noise).

use kernel_suite::bench::{Stats, Table};
use kernel_suite::svd::cpu_svd;
use kernel_suite::svd_factor::{self, GramMethod, Plan};
use kernel_suite::{Device, workload};

fn main() -> std::process::ExitCode {
    kernel_suite::bench::run(measure)
}

/// The benchmark; without a GPU, or on any failure, its error as one line (`bench::run`).
fn measure() -> anyhow::Result<()> {
    let device = Device::gpu(0, &kernel_suite::KERNELS)?;
    println!("device: {}", device.describe());
    println!(
        "\n## The engine's factorisation and the accurate one (ms between events, median of 5 after 1 warm-up)\n"
    );
    let mut table = Table::new(&[
        "workload",
        "k",
        "factor ms (iterations)",
        "factor_accurate ms (iterations)",
        "the other Gram method: factor_accurate ms",
        "max |Δσ|/σ₁: factor",
        "factor_accurate",
        "other method",
    ]);
    // (matrices, rows, cols, k, noise instead of photo-like images)
    let workloads: &[(usize, usize, usize, usize, bool)] = &[
        (1, 2048, 2048, 50, false),
        (1, 4096, 4096, 100, false),
        (16, 1024, 1024, 50, true),
        (64, 256, 256, 50, false),
        (1, 100_000, 512, 10, true),
        (1, 100_000, 512, 50, true),
        (1, 512, 20_000, 64, true),
    ];
    let only = std::env::var("MATRIX_SVD_WORKLOAD").ok();
    for &(count, rows, cols, k, noise) in workloads.iter().filter(|(count, rows, cols, k, noise)| {
        only.as_ref()
            .is_none_or(|o| *o == format!("{count}x{rows}x{cols}x{k}{}", if *noise { "n" } else { "" }))
    }) {
        let image = if noise { workload::noise_image } else { workload::procedural_image };
        let values: Vec<f64> = (0..count)
            .flat_map(|i| image(i as u64, rows, cols).into_iter().map(|v| f64::from(v) / 255.0))
            .collect();
        let a = device.upload(&values)?;
        let reference = cpu_svd(&values[..rows * cols], (rows, cols), faer::get_global_parallelism())?.s;
        let error = |s: &[f64]| {
            s.iter().zip(&reference).map(|(a, b)| (a - b).abs()).fold(0.0, f64::max) / reference[0]
        };
        let (mut engine, mut accurate) = (Vec::new(), Vec::new());
        let (mut engine_run, mut accurate_run) = (None, None);
        for _ in 0..6 {
            let t0 = device.mark()?;
            let f = svd_factor::factor(&device, &a, (rows, cols), count, k)?;
            let t1 = device.mark()?;
            engine.push(device.elapsed_ms(&t0, &t1)?);
            engine_run = Some((f.iterations, error(&f.singular_values[0])));
            let t0 = device.mark()?;
            let f = svd_factor::factor_accurate(&device, &a, (rows, cols), count, k)?;
            let t1 = device.mark()?;
            accurate.push(device.elapsed_ms(&t0, &t1)?);
            accurate_run = Some((f.iterations, error(&f.singular_values[0])));
        }
        let ((engine_iterations, engine_error), (accurate_iterations, accurate_error)) =
            (engine_run.expect("six runs"), accurate_run.expect("six runs"));
        let (engine, accurate) = (Stats::of(&engine[1..]), Stats::of(&accurate[1..]));
        let plan = Plan::new(&device, (rows, cols), count, k)?;
        let (mut other_time, mut other_error) = ("—".to_string(), "—".to_string());
        if rows >= cols && cols <= svd_factor::WHOLE_GRAM_MAX_R {
            let method = match plan.method {
                GramMethod::SubspaceIteration => GramMethod::WholeEigendecomposition,
                GramMethod::WholeEigendecomposition => GramMethod::SubspaceIteration,
            };
            let other = Plan::with_method(&device, (rows, cols), count, k, method)?;
            let mut times = Vec::new();
            for _ in 0..6 {
                let t0 = device.mark()?;
                let f = svd_factor::factor_accurate_with(&device, &a, &other)?;
                let t1 = device.mark()?;
                times.push(device.elapsed_ms(&t0, &t1)?);
                other_error = format!("{:.1e}", error(&f.singular_values[0]));
            }
            other_time = format!("{:.2} ({method:?})", Stats::of(&times[1..]).median_ms);
        }
        table.row(&[
            format!("{count} × {rows} × {cols}{}", if noise { " noise" } else { "" }),
            k.to_string(),
            format!("{:.2} ({engine_iterations})", engine.median_ms),
            format!("{:.2} ({accurate_iterations})", accurate.median_ms),
            other_time,
            format!("{engine_error:.1e}"),
            format!("{accurate_error:.1e}"),
            other_error,
        ]);
    }
    print!("{}", table.render());
    Ok(())
}
