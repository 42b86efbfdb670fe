//! `--profile` numbers against independent measurements: the driver's register counts against the
//! build's `ptxas -v` report, event timings against wall-clock timings of synchronised runs, and
//! copy byte counts against what was copied. GPU only.

mod common;

use kernel_suite::KERNELS;
use kernel_suite::svd::{RankK, Variant, reconstruct};
use ndarray::Array2;
use std::time::Instant;

fn operands(m: usize, n: usize, k: usize) -> RankK {
    let mut rng = common::rng(5);
    RankK {
        u: Array2::from_shape_vec((m, k), common::random_vec(&mut rng, m * k, -1.0, 1.0)).unwrap(),
        s: common::random_vec(&mut rng, k, 0.5, 2.0),
        vt: Array2::from_shape_vec((k, n), common::random_vec(&mut rng, k * n, -1.0, 1.0)).unwrap(),
    }
}

#[test]
fn profile_matches_ptxas_and_wall_clock() {
    let Some(device) = common::gpu_or_skip("profile_matches_ptxas_and_wall_clock") else { return };
    assert!(device.enable_profiling().unwrap());
    // The naive kernel at 4096², k = 256 runs for about 2 ms on an H100: long enough for a 10% check.
    let (m, n, k) = (4096, 4096, 256);
    let op = operands(m, n, k);
    reconstruct(&device, &op, Variant::Naive, 32).unwrap();
    let runs = 5;
    let mut wall_ms = Vec::new();
    for _ in 0..runs {
        device.synchronize().unwrap();
        let start = Instant::now();
        let (_, times) = reconstruct(&device, &op, Variant::Naive, 32).unwrap();
        let total = start.elapsed().as_secs_f64() * 1e3;
        wall_ms.push((total, times.kernel_ms));
    }
    let report = device.profile_report().unwrap().expect("profiling is on");
    let (kernel_total, calls) = report.activity("svd_reconstruct_naive").expect("kernel recorded");
    assert_eq!(calls, runs as u32 + 1);
    // Event time of the kernel vs the same kernel timed by marks (independent events) …
    let marks_total: f64 = wall_ms.iter().map(|w| w.1).sum();
    let per_call = kernel_total / calls as f64;
    assert!(per_call > 1.0, "kernel too short for the check: {per_call} ms");
    assert!((per_call - marks_total / runs as f64).abs() <= 0.1 * per_call);
    // … and the whole synchronised run on the wall clock bounds it from above.
    for (wall, kernel) in &wall_ms {
        assert!(kernel <= wall, "event time {kernel} ms exceeds the wall-clock time {wall} ms");
    }
    // Copies: U, s, Vᵀ in, the result out, per call (a copy of 4 MiB or more is recorded per
    // staging chunk, so the bytes are compared, not the calls).
    let h2d = report.copied_bytes("[CUDA memcpy HtoD]").unwrap();
    let d2h = report.copied_bytes("[CUDA memcpy DtoH]").unwrap();
    let calls = calls as u64;
    assert_eq!((h2d, d2h), (calls * 4 * (m * k + k + k * n) as u64, calls * 4 * (m * n) as u64));
    // Registers: the driver's count for the loaded cubin is the one ptxas reported at build time.
    if KERNELS.cubin.is_some() && device.startup().unwrap().image == kernel_suite::device::ModuleImage::Cubin
    {
        let built = KERNELS.resources("svd_reconstruct_naive").unwrap();
        assert_eq!(report.registers("svd_reconstruct_naive"), Some(built.registers as i32));
    }
    let text = report.to_string();
    assert!(text.contains("svd_reconstruct_naive") && text.contains("theoretical occupancy"), "{text}");
}

#[test]
fn idle_time_covers_a_host_pause_and_names_what_it_followed() {
    let Some(device) = common::gpu_or_skip("idle_time_covers_a_host_pause_and_names_what_it_followed") else {
        return;
    };
    assert!(device.enable_profiling().unwrap());
    let op = operands(512, 512, 32);
    reconstruct(&device, &op, Variant::Tiled, 16).unwrap();
    // The host does nothing for the GPU for 50 ms after the first result came back.
    std::thread::sleep(std::time::Duration::from_millis(50));
    reconstruct(&device, &op, Variant::Tiled, 16).unwrap();
    let report = device.profile_report().unwrap().expect("profiling is on");
    let idle = report.idle();
    let busy: f64 = ["svd_reconstruct_tiled", "[CUDA memcpy HtoD]", "[CUDA memcpy DtoH]"]
        .iter()
        .map(|name| report.activity(name).expect("recorded").0)
        .sum();
    assert!(idle.idle_ms >= 50.0 && idle.idle_ms < idle.span_ms, "{idle:?}");
    // One stream: the span is the busy time plus the idle time.
    assert!((idle.span_ms - idle.idle_ms - busy).abs() < 0.05 * idle.span_ms, "{idle:?}, busy {busy} ms");
    let (name, _, ms) = &idle.after[0];
    assert_eq!(name, "[CUDA memcpy DtoH]", "{idle:?}");
    assert!(*ms >= 50.0, "{idle:?}");
    let total: f64 = idle.after.iter().map(|a| a.2).sum();
    assert!((total - idle.idle_ms).abs() < 1e-6, "{idle:?}");
    assert!(report.to_string().contains("GPU idle:"));
}

#[test]
fn profiling_is_off_unless_enabled() {
    let Some(device) = common::gpu_or_skip("profiling_is_off_unless_enabled") else { return };
    reconstruct(&device, &operands(64, 64, 8), Variant::Tiled, 16).unwrap();
    assert!(device.profile_report().unwrap().is_none());
}
