//! SVD reconstruction benchmarks (GPU only): `cargo bench --bench svd`.
//!
//! 1. Kernel sweep: variant (tensor-core tf32 and tf32x3 included) × block size × input size
//!    (square, k = 256), event-timed median.
//! 2. One 4096² image end to end (H2D of U, s, Vᵀ + kernel + D2H), pageable vs pinned memory.
//! 3. Batch of 32 images of 2048², serial (one pipeline slot) vs overlapped (several queues).
//!
//! Writes `svd-sweep.csv` and the chart `svd-sweep.png`/`.svg` into `$BENCH_OUT_DIR` (default: the
//! current directory).

use kernel_suite::bench::{Stats, Table};
use kernel_suite::plot::{LineChart, Scale};
use kernel_suite::svd::{
    BatchRun, RankK, Variant, launch_reconstruct, reconstruct, reconstruct_batch, reconstruct_pinned,
};
use kernel_suite::{Device, Queue};
use ndarray::Array2;
use rand::{Rng, SeedableRng, rngs::SmallRng};
use std::fmt::Write as _;

const K: usize = 256;

fn operands(seed: u64, m: usize, n: usize, k: usize) -> RankK {
    let mut rng = SmallRng::seed_from_u64(seed);
    RankK {
        u: Array2::from_shape_fn((m, k), |_| rng.random_range(-1.0..1.0)),
        s: (0..k).map(|i| 100.0 / (1.0 + i as f32)).collect(),
        vt: Array2::from_shape_fn((k, n), |_| rng.random_range(-1.0..1.0)),
    }
}

fn main() -> std::process::ExitCode {
    kernel_suite::bench::run(measure)
}

/// The benchmark; without a GPU, or on any failure, its error as one line (`bench::run`).
fn measure() -> anyhow::Result<()> {
    let device = Device::gpu(0, &kernel_suite::KERNELS)?;
    println!("device: {}", device.describe());
    let out_dir = std::env::var("BENCH_OUT_DIR").unwrap_or_else(|_| ".".into());

    println!("\n## Kernel sweep (k = {K}, median of 20 after 3 warm-up runs)\n");
    let mut table = Table::new(&["size", "variant", "block", "median ms", "min ms", "TFLOP/s"]);
    let mut csv = String::from("size,variant,block,median_ms,tflops\n");
    let mut series: Vec<(String, Vec<(f64, f64)>)> = Vec::new();
    for size in [512usize, 1024, 2048, 4096, 8192] {
        let op = operands(size as u64, size, size, K);
        let du = device.upload(op.u.as_slice().unwrap())?;
        let ds = device.upload(&op.s)?;
        let dvt = device.upload(op.vt.as_slice().unwrap())?;
        let mut dout = device.alloc::<f32>(size * size)?;
        let flops = 2.0 * (size * size * K) as f64;
        for variant in Variant::ALL {
            if !variant.available_on(&device) {
                println!("SKIPPED {} at {size}²: needs the sm_90a cubin (H100, H200)", variant.name());
                continue;
            }
            let blocks: &[u32] = if variant.fixed_block() { &[16] } else { &[8, 16, 32] };
            for &block in blocks {
                let q: &Queue = device.queue();
                let times = device.time_ms(3, 20, || unsafe {
                    launch_reconstruct(
                        &device,
                        q,
                        variant,
                        block,
                        (&du, &ds, &dvt, &mut dout),
                        (size, size, K),
                    )
                })?;
                let st = Stats::of(&times);
                let tflops = flops / (st.median_ms * 1e-3) / 1e12;
                table.row(&[
                    format!("{size}²"),
                    variant.name().into(),
                    variant.block_label(block),
                    format!("{:.4}", st.median_ms),
                    format!("{:.4}", st.min_ms),
                    format!("{tflops:.2}"),
                ]);
                writeln!(csv, "{size},{},{block},{:.6},{tflops:.4}", variant.name(), st.median_ms)?;
                let label = format!("{} {}", variant.name(), variant.block_label(block));
                match series.iter_mut().find(|(l, _)| *l == label) {
                    Some((_, points)) => points.push((size as f64, tflops)),
                    None => series.push((label, vec![(size as f64, tflops)])),
                }
            }
        }
    }
    print!("{}", table.render());
    std::fs::write(format!("{out_dir}/svd-sweep.csv"), csv)?;
    let chart = series.into_iter().fold(
        LineChart::new(format!("SVD reconstruction, k = {K}"), "matrix side (square)", "TFLOP/s")
            .with_scales(Scale::Log, Scale::Linear),
        |chart, (label, points)| chart.with_series(label, points),
    );
    for ext in ["png", "svg"] {
        chart.save(std::path::Path::new(&format!("{out_dir}/svd-sweep.{ext}")))?;
    }

    println!("\n## One 4096² image end to end, k = {K}, regtiled (median of 5 after 1 warm-up)\n");
    let (m, n) = (4096, 4096);
    let op = operands(1, m, n, K);
    let mut table = Table::new(&["host memory", "H2D ms", "kernel ms", "D2H ms", "total ms"]);
    let mut pageable = Vec::new();
    for _ in 0..6 {
        pageable.push(reconstruct(&device, &op, Variant::Regtiled, 16)?.1);
    }
    let (mut u, mut s, mut vt) = (device.pinned(m * K)?, device.pinned(K)?, device.pinned(K * n)?);
    u.copy_from_slice(op.u.as_slice().unwrap());
    s.copy_from_slice(&op.s);
    vt.copy_from_slice(op.vt.as_slice().unwrap());
    let mut out = device.pinned(m * n)?;
    let mut pinned = Vec::new();
    for _ in 0..6 {
        pinned.push(reconstruct_pinned(&device, (&u, &s, &vt), &mut out, (m, n, K), Variant::Regtiled, 16)?);
    }
    for (label, runs) in [("pageable", &pageable[1..]), ("pinned", &pinned[1..])] {
        let med = |f: fn(&kernel_suite::svd::PhaseTimes) -> f64| {
            Stats::of(&runs.iter().map(f).collect::<Vec<_>>()).median_ms
        };
        table.row(&[
            label.into(),
            format!("{:.3}", med(|t| t.h2d_ms)),
            format!("{:.3}", med(|t| t.kernel_ms)),
            format!("{:.3}", med(|t| t.d2h_ms)),
            format!("{:.3}", med(|t| t.total_ms())),
        ]);
    }
    print!("{}", table.render());

    println!("\n## Batch: 32 images of 2048², k = {K}, regtiled (best of 3 runs each)\n");
    let jobs: Vec<RankK> = (0..32).map(|i| operands(100 + i, 2048, 2048, K)).collect();
    let mut outputs = Vec::with_capacity(jobs.len());
    for _ in 0..jobs.len() {
        outputs.push(device.pinned::<f32>(2048 * 2048)?);
    }
    let mut table =
        Table::new(&["pipeline slots", "wall ms", "speed-up vs serial", "PCIe GB/s (both directions)"]);
    let mut serial_ms = 0.0;
    for slots in [1usize, 2, 4, 8] {
        let mut best = None;
        for _ in 0..3 {
            let run = reconstruct_batch(&device, &jobs, &mut outputs, Variant::Regtiled, 16, slots)?;
            if best.as_ref().is_none_or(|b: &BatchRun| run.wall_ms < b.wall_ms) {
                best = Some(run);
            }
        }
        let run = best.unwrap();
        if slots == 1 {
            serial_ms = run.wall_ms;
        }
        table.row(&[
            if slots == 1 { "1 (serial)".into() } else { slots.to_string() },
            format!("{:.2}", run.wall_ms),
            format!("{:.2}×", serial_ms / run.wall_ms),
            format!("{:.1}", run.copy_gbs()),
        ]);
    }
    print!("{}", table.render());

    // The stages of the serial pipeline, per image, to explain the speed-up (docs/benchmarks/svd.md).
    let (m, n) = (2048, 2048);
    let mut staging = (device.pinned::<f32>(m * K)?, device.pinned::<f32>(K)?, device.pinned::<f32>(K * n)?);
    let start = std::time::Instant::now();
    for job in &jobs {
        staging.0.copy_from_slice(job.u.as_slice().unwrap());
        staging.1.copy_from_slice(&job.s);
        staging.2.copy_from_slice(job.vt.as_slice().unwrap());
    }
    let fill_ms = start.elapsed().as_secs_f64() * 1e3 / jobs.len() as f64;
    let mut phases = Vec::new();
    for _ in 0..6 {
        phases.push(reconstruct_pinned(
            &device,
            (&staging.0, &staging.1, &staging.2),
            &mut outputs[0],
            (m, n, K),
            Variant::Regtiled,
            16,
        )?);
    }
    let med = |f: fn(&kernel_suite::svd::PhaseTimes) -> f64| {
        Stats::of(&phases[1..].iter().map(f).collect::<Vec<_>>()).median_ms
    };
    println!(
        "\nper-image stages (2048², k = {K}): host fill of pinned staging {fill_ms:.3} ms, H2D {:.3} ms, kernel {:.3} ms, D2H {:.3} ms",
        med(|t| t.h2d_ms),
        med(|t| t.kernel_ms),
        med(|t| t.d2h_ms)
    );
    Ok(())
}
