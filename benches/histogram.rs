//! Byte histogram throughput: `cargo bench --bench histogram` (needs a GPU). Kernel time (CUDA
//! events: warm-up, then median, min and max of 100 launches) and the bandwidth it reads at (one
//! byte per element), then the end-to-end time of `histogram` on a host array (upload, kernel,
//! download; median of 10). Peers in the same run: `scripts/primitives-bench.sh`.

use kernel_suite::Device;
use kernel_suite::bench::{Stats, Table};
use kernel_suite::histogram::{histogram, histogram_of_words, pack_bytes};
use rand::{Rng, SeedableRng, rngs::SmallRng};

fn main() -> std::process::ExitCode {
    kernel_suite::bench::run(measure)
}

/// The benchmark; without a GPU, or on any failure, its error as one line (`bench::run`).
fn measure() -> anyhow::Result<()> {
    let device = Device::gpu(0, &kernel_suite::KERNELS)?;
    println!("device: {}", device.describe());
    let mut table = Table::new(&["elements", "median ms", "min ms", "max ms", "GB/s", "end-to-end ms"]);
    let mut rng = SmallRng::seed_from_u64(1);
    for n in [1usize << 20, 1 << 24, 1 << 26] {
        let bytes: Vec<u8> = (0..n).map(|_| rng.random()).collect();
        let words = device.upload(&pack_bytes(&bytes))?;
        let mut hist = device.upload(&[0u32; 256])?;
        let times = device.time_ms(10, 100, || histogram_of_words(&device, &words, n, &mut hist))?;
        let s = Stats::of(&times);
        let end_to_end = Stats::wall(10, || histogram(&device, &bytes).map(drop))?;
        table.row(&[
            n.to_string(),
            format!("{:.4}", s.median_ms),
            format!("{:.4}", s.min_ms),
            format!("{:.4}", s.max_ms),
            format!("{:.0}", n as f64 / (s.median_ms * 1e-3) / 1e9),
            format!("{:.2}", end_to_end.median_ms),
        ]);
    }
    print!("{}", table.render());
    Ok(())
}
