//! GPU SVD benchmarks (GPU only): `cargo bench --bench svd_factor`.
//!
//! Batches of the workloads (64 × 256², 16 × 1024², 8 × 2048², one 4096²) of procedural
//! photo-like images, `k = 50` (256 for 4096²): the device time of the whole factorisation
//! ([`svd_factor::factor`]: Gram matrix, iterations, triplets) as a median of event-timed runs after
//! a warm-up, its iterations, and the largest singular value error against faer (f64) on the
//! first image.

use kernel_suite::bench::{Stats, Table};
use kernel_suite::svd::thin_svd;
use kernel_suite::svd_factor::{self, launch_f32_to_f64};
use kernel_suite::{Device, workload};

fn main() -> anyhow::Result<()> {
    let device = Device::gpu(0)?;
    println!("device: {}", device.describe());
    // `SVD_FACTOR_PROFILE=1`: one run per workload with the nvprof-style profile of every kernel.
    let profile = std::env::var("SVD_FACTOR_PROFILE").is_ok_and(|v| v == "1");
    if profile {
        device.enable_profiling()?;
    }
    println!("\n## GPU SVD of a batch (device time, median of 5 after 1 warm-up)\n");
    let mut table = Table::new(&[
        "workload",
        "k",
        "iterations (Rayleigh–Ritz)",
        "median ms",
        "min ms",
        "ms per image",
        "max |Δσ|/σ₁ (image 0)",
    ]);
    let workloads: &[(usize, usize, usize)] = if profile {
        &[(64, 256, 50), (8, 2048, 50)]
    } else {
        &[
            (1, 512, 100),
            (64, 256, 50),
            (256, 512, 20),
            (16, 1024, 50),
            (8, 2048, 50),
            (8, 2048, 256),
            (1, 4096, 100),
            (1, 4096, 256),
        ]
    };
    for &(count, size, k) in workloads {
        let images: Vec<_> = (0..count)
            .map(|i| workload::procedural_image(i as u64, size, size).mapv(|v| v as f32 / 255.0))
            .collect();
        let host: Vec<f32> = images.iter().flat_map(|i| i.iter().copied()).collect();
        let raw = device.upload(&host)?;
        let mut a = device.alloc::<f64>(host.len())?;
        // SAFETY: both buffers live until `factor` has downloaded its results.
        unsafe { launch_f32_to_f64(&device, device.queue(), raw.view(..)?, a.view_mut(..)?)? };
        let mut times = Vec::new();
        let mut last = None;
        for _ in 0..if profile { 2 } else { 6 } {
            let t0 = device.mark()?;
            let f = svd_factor::factor(&device, &a, (size, size), count, k)?;
            let t1 = device.mark()?;
            times.push(device.elapsed_ms(&t0, &t1)?);
            last = Some(f);
        }
        let f = last.expect("six runs");
        let reference = thin_svd(images[0].view())?;
        let err =
            f.singular_values[0].iter().zip(&reference.s).map(|(a, b)| (a - b).abs()).fold(0.0, f64::max)
                / reference.s[0];
        let st = Stats::of(&times[1..]);
        table.row(&[
            format!("{count} × {size}²"),
            k.to_string(),
            format!("{} ({})", f.iterations, f.rayleigh_ritz_steps),
            format!("{:.2}", st.median_ms),
            format!("{:.2}", st.min_ms),
            format!("{:.3}", st.median_ms / count as f64),
            format!("{err:.1e}"),
        ]);
    }
    print!("{}", table.render());
    if let Some(report) = device.profile_report()? {
        print!("{report}");
    }
    Ok(())
}
