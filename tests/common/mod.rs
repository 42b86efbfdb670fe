//! Helpers shared by the integration tests.
//!
//! Every kernel test runs on each device of [`devices`]: the CPU simulator always, and the GPU when
//! one is usable. Without a GPU the test prints a visible `SKIPPED` line (straight to the terminal,
//! past the test harness's output capture) — unless `KERNEL_SUITE_REQUIRE_GPU=1` is set, as the
//! GPU bundle's runner does, in which case a missing GPU fails the test.
#![allow(dead_code)]

use kernel_suite::Device;
use rand::{Rng, SeedableRng, rngs::SmallRng};
use std::io::Write;

/// Set to `1` to make a missing GPU a test failure instead of a skip.
pub const REQUIRE_GPU_ENV: &str = "KERNEL_SUITE_REQUIRE_GPU";

/// Whether this run requires the GPU tests to run.
pub fn gpu_required() -> bool {
    std::env::var(REQUIRE_GPU_ENV).is_ok_and(|v| v == "1")
}

/// The GPU, or `None` after printing `SKIPPED <test>: <reason>` (a failure if the GPU is required).
pub fn gpu_or_skip(test: &str) -> Option<Device> {
    match Device::gpu(0, &kernel_suite::KERNELS) {
        Ok(device) => {
            device.set_poison_allocations(true);
            Some(device)
        }
        Err(e) if gpu_required() => panic!("{test}: the GPU is required ({REQUIRE_GPU_ENV}=1) but {e}"),
        Err(e) => {
            let _ = writeln!(std::io::stderr(), "SKIPPED {test} on the GPU: {e}");
            None
        }
    }
}

/// The devices a kernel test runs on: the simulator, then the GPU if there is one. Allocations are
/// poisoned on both.
pub fn devices(test: &str) -> Vec<Device> {
    let sim = Device::simulator();
    sim.set_poison_allocations(true);
    let mut all = vec![sim];
    all.extend(gpu_or_skip(test));
    all
}

/// Path of the package's binary `name`: the copy in `$KERNEL_SUITE_BIN_DIR` when the GPU bundle's
/// runner sets it, else `built` (pass `env!("CARGO_BIN_EXE_<name>")`).
pub fn bin(name: &str, built: &str) -> std::path::PathBuf {
    match std::env::var_os("KERNEL_SUITE_BIN_DIR") {
        Some(dir) => std::path::PathBuf::from(dir).join(name),
        None => built.into(),
    }
}

/// A seeded generator: every test draws fresh, reproducible inputs.
pub fn rng(seed: u64) -> SmallRng {
    SmallRng::seed_from_u64(seed)
}

/// `n` values uniform in `[lo, hi)`.
pub fn random_vec(rng: &mut SmallRng, n: usize, lo: f32, hi: f32) -> Vec<f32> {
    (0..n).map(|_| rng.random_range(lo..hi)).collect()
}
