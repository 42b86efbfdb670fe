//! One-pass inclusive scan throughput: `cargo bench --bench scan` (needs a GPU). Kernel time (CUDA
//! events: warm-up, then median, min and max of 100 launches) and the bandwidth it moves (4 bytes
//! read and 4 written per element), then the end-to-end time of `scan::inclusive_scan` on a host
//! array (upload, kernel, download; median of 10). Peers in the same run:
//! `scripts/primitives-bench.sh`.

use kernel_suite::Device;
use kernel_suite::bench::{Stats, Table};
use kernel_suite::scan::{Scanner, inclusive_scan};
use rand::{Rng, SeedableRng, rngs::SmallRng};

fn main() -> std::process::ExitCode {
    kernel_suite::bench::run(measure)
}

/// The benchmark; without a GPU, or on any failure, its error as one line (`bench::run`).
fn measure() -> anyhow::Result<()> {
    let device = Device::gpu(0, &kernel_suite::KERNELS)?;
    println!("device: {}", device.describe());
    let mut table = Table::new(&["elements", "median ms", "min ms", "max ms", "GB/s", "end-to-end ms"]);
    let mut rng = SmallRng::seed_from_u64(3);
    for n in [1usize << 20, 1 << 24, 1 << 26] {
        let x: Vec<u32> = (0..n).map(|_| rng.random()).collect();
        let dx = device.upload(&x)?;
        let mut dy = device.alloc::<u32>(n)?;
        let mut scanner = Scanner::new(&device, n)?;
        let times = device.time_ms(10, 100, || scanner.inclusive_scan(&dx, &mut dy))?;
        let s = Stats::of(&times);
        let end_to_end = Stats::wall(10, || inclusive_scan(&device, &x).map(drop))?;
        table.row(&[
            n.to_string(),
            format!("{:.4}", s.median_ms),
            format!("{:.4}", s.min_ms),
            format!("{:.4}", s.max_ms),
            format!("{:.0}", 8.0 * n as f64 / (s.median_ms * 1e-3) / 1e9),
            format!("{:.2}", end_to_end.median_ms),
        ]);
    }
    print!("{}", table.render());
    Ok(())
}
