//! Transpose throughput: `cargo bench --bench transpose` (needs a GPU). Kernel time (CUDA events:
//! warm-up, then median, min and max of 100 launches) and the bandwidth it moves (4 bytes read and 4
//! written per element), then the end-to-end time of `transpose` on a host matrix (upload, kernel,
//! download; median of 10). Peers in the same run: `scripts/primitives-bench.sh`.

use kernel_suite::Device;
use kernel_suite::bench::{Stats, Table};
use kernel_suite::transpose::{transpose, transpose_buffer};
use ndarray::Array2;

fn main() -> std::process::ExitCode {
    kernel_suite::bench::run(measure)
}

/// The benchmark; without a GPU, or on any failure, its error as one line (`bench::run`).
fn measure() -> anyhow::Result<()> {
    let device = Device::gpu(0, &kernel_suite::KERNELS)?;
    println!("device: {}", device.describe());
    let mut table = Table::new(&["matrix", "median ms", "min ms", "max ms", "GB/s", "end-to-end ms"]);
    for side in [1024usize, 4096, 8192] {
        let a = Array2::from_shape_fn((side, side), |(r, c)| (r * 7 + c) as f32);
        let input = device.upload(a.as_slice().expect("standard layout"))?;
        let mut output = device.alloc::<f32>(side * side)?;
        let times = device.time_ms(10, 100, || transpose_buffer(&device, &input, side, side, &mut output))?;
        let s = Stats::of(&times);
        let end_to_end = Stats::wall(10, || transpose(&device, a.view()).map(drop))?;
        table.row(&[
            format!("{side}²"),
            format!("{:.4}", s.median_ms),
            format!("{:.4}", s.min_ms),
            format!("{:.4}", s.max_ms),
            format!("{:.0}", 8.0 * (side * side) as f64 / (s.median_ms * 1e-3) / 1e9),
            format!("{:.2}", end_to_end.median_ms),
        ]);
    }
    print!("{}", table.render());
    Ok(())
}
