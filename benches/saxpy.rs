//! SAXPY bandwidth: `cargo bench --bench saxpy` (needs a GPU). Reports the event-timed kernel
//! time and the achieved bandwidth (12 bytes per element: read x, read y, write y).

use kernel_suite::bench::{self, Stats, Table};
use kernel_suite::{Device, LaunchConfig};
use std::process::ExitCode;

fn main() -> ExitCode {
    bench::run(measure)
}

/// Times the kernel on three sizes and prints the table.
fn measure() -> anyhow::Result<()> {
    let device = Device::gpu(0, &kernel_suite::KERNELS)?;
    println!("device: {}", device.describe());
    let mut table = Table::new(&["n", "median ms", "min ms", "max ms", "GB/s"]);
    for n in [1usize << 20, 1 << 24, 1 << 26] {
        let x: Vec<f32> = (0..n).map(|i| (i % 1000) as f32 * 1e-3).collect();
        let dx = device.upload(&x)?;
        let mut dy = device.upload(&x)?;
        let cfg = LaunchConfig::for_1d(n, kernel_suite::saxpy::BLOCK);
        let times = device.time_ms(10, 100, || unsafe {
            device.launch(&kernels::saxpy::SAXPY, cfg, (1.0001, &dx, &mut dy))
        })?;
        let s = Stats::of(&times);
        let gbs = 12.0 * n as f64 / (s.median_ms * 1e-3) / 1e9;
        table.row(&[
            n.to_string(),
            format!("{:.4}", s.median_ms),
            format!("{:.4}", s.min_ms),
            format!("{:.4}", s.max_ms),
            format!("{gbs:.0}"),
        ]);
    }
    print!("{}", table.render());
    Ok(())
}
