//! One-pass sum and min/max throughput: `cargo bench --bench reduce` (needs a GPU). Kernel time
//! (CUDA events: warm-up, then median, min and max of 100 launches) and the bandwidth it reads at
//! (4 bytes per element), then the end-to-end time of `reduce::sum` on a host array (upload,
//! kernel, download; median of 10). Peers in the same run: `scripts/primitives-bench.sh`.

use kernel_suite::Device;
use kernel_suite::bench::{Stats, Table};
use kernel_suite::reduce::{Reducer, sum};
use rand::{Rng, SeedableRng, rngs::SmallRng};

fn main() -> std::process::ExitCode {
    kernel_suite::bench::run(measure)
}

/// The benchmark; without a GPU, or on any failure, its error as one line (`bench::run`).
fn measure() -> anyhow::Result<()> {
    let device = Device::gpu(0, &kernel_suite::KERNELS)?;
    println!("device: {}", device.describe());
    let mut table =
        Table::new(&["reduction", "elements", "median ms", "min ms", "max ms", "GB/s", "end-to-end ms"]);
    let mut rng = SmallRng::seed_from_u64(2);
    for n in [1usize << 20, 1 << 24, 1 << 26] {
        let x: Vec<f32> = (0..n).map(|_| rng.random_range(-1.0..1.0)).collect();
        let dx = device.upload(&x)?;
        let mut reducer = Reducer::new(&device)?;
        for which in ["sum", "min_max"] {
            let times = device.time_ms(10, 100, || match which {
                "sum" => reducer.launch_sum(&dx),
                _ => reducer.launch_min_max(&dx),
            })?;
            let s = Stats::of(&times);
            let end_to_end = if which == "sum" {
                format!("{:.2}", Stats::wall(10, || sum(&device, &x).map(drop))?.median_ms)
            } else {
                "-".to_string()
            };
            table.row(&[
                which.to_string(),
                n.to_string(),
                format!("{:.4}", s.median_ms),
                format!("{:.4}", s.min_ms),
                format!("{:.4}", s.max_ms),
                format!("{:.0}", 4.0 * n as f64 / (s.median_ms * 1e-3) / 1e9),
                end_to_end,
            ]);
        }
    }
    print!("{}", table.render());
    Ok(())
}
