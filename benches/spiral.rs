//! Spiral images: `cargo bench --bench spiral` (needs a GPU).
//!
//! 1. The phases of one whole run as the `spiral` command does it, measured first thing in the
//!    process: driver init, context creation, module load, allocation, kernel, device-to-host copy,
//!    PNG encode, file write.
//! 2. Kernel time, f32 and f64, at 3840×2160 and 7680×4320 for each curve multiplier: median of
//!    event-timed launches, each queued behind an untimed one so that the host's launch latency is
//!    not counted.
//! 3. PNG encoding settings at 3840×2160, and the CPU reference for comparison.

use anyhow::Context;
use image::ImageEncoder;
use image::codecs::png::{CompressionType, FilterType, PngEncoder};
use kernel_suite::Device;
use kernel_suite::bench::{Stats, Table};
use kernel_suite::image_io;
use kernel_suite::spiral::{self, Multiplier, Precision, SpiralConfig};
use std::time::Instant;

/// The benchmark's image at `scale` × 3840×2160 (the same picture at every scale).
fn config(scale: u32, multiplier: Multiplier, precision: Precision) -> SpiralConfig {
    let s = scale as f64;
    SpiralConfig {
        width: 3840 * scale,
        height: 2160 * scale,
        center: [1700.0 * s, 1000.0 * s],
        symmetry: 5,
        curve: 37.5,
        multiplier,
        max_radius: 1800.0 * s,
        precision,
        palette: None,
    }
}

fn ms_since(start: Instant) -> f64 {
    start.elapsed().as_secs_f64() * 1e3
}

fn main() -> std::process::ExitCode {
    kernel_suite::bench::run(measure)
}

/// The benchmark; without a GPU, or on any failure, its error as one line (`bench::run`).
fn measure() -> anyhow::Result<()> {
    // 1. A whole run, cold.
    let mut phases = Table::new(&["phase (3840×2160, f32, gray)", "ms"]);
    let mut row = |phase: &str, ms: f64| phases.row(&[phase.to_string(), format!("{ms:.3}")]);
    let start = Instant::now();
    let device = Device::gpu(0, &kernel_suite::KERNELS).context("no usable GPU")?;
    let open_ms = ms_since(start);
    let s = device.startup().expect("a GPU device");
    row("CUDA driver init (cuInit)", s.init_ms);
    row("context creation (primary context)", s.context_ms);
    row("module load", s.module_load_ms);
    row("device queries + stream", open_ms - s.init_ms - s.context_ms - s.module_load_ms);
    let cold = config(1, Multiplier::Ln, Precision::F32);
    let start = Instant::now();
    let mut image = device.alloc::<u8>(cold.pixel_count())?;
    row("device allocation", ms_since(start));
    let start = Instant::now();
    let before = device.mark()?;
    spiral::launch_spiral(&device, &cold, &mut image)?;
    let after = device.mark()?;
    device.synchronize()?;
    let first_kernel_event_ms = device.elapsed_ms(&before, &after)?;
    row(&format!("first kernel, wall (events: {first_kernel_event_ms:.3})"), ms_since(start));
    let start = Instant::now();
    let gray = device.download(&image)?;
    row("device-to-host copy (pageable)", ms_since(start));
    let start = Instant::now();
    let png = image_io::encode_png(&gray, cold.width, cold.height, image_io::PixelFormat::Gray8)?;
    row(&format!("PNG encode ({} bytes)", png.len()), ms_since(start));
    let dir = std::env::temp_dir();
    let (png_path, json_path) = (dir.join("spiral-bench.png"), dir.join("spiral-bench.json"));
    let start = Instant::now();
    std::fs::write(&png_path, &png)?;
    cold.save(&json_path)?;
    row("file write (PNG + JSON)", ms_since(start));
    std::fs::remove_file(&png_path)?;
    std::fs::remove_file(&json_path)?;
    println!("device: {}", device.describe());
    println!("\n{}", phases.render());

    // 2. Kernel times.
    let mut kernels =
        Table::new(&["image", "precision", "multiplier", "median ms", "min ms", "max ms", "Gpixel/s"]);
    for scale in [1, 2] {
        for precision in [Precision::F32, Precision::F64] {
            for multiplier in [Multiplier::Ln, Multiplier::Sin, Multiplier::Cos, Multiplier::Tan] {
                let c = config(scale, multiplier, precision);
                let mut image = device.alloc::<u8>(c.pixel_count())?;
                let s =
                    Stats::of(&device.time_ms(10, 200, || spiral::launch_spiral(&device, &c, &mut image))?);
                kernels.row(&[
                    format!("{}×{}", c.width, c.height),
                    precision.to_string(),
                    multiplier.to_string(),
                    format!("{:.4}", s.median_ms),
                    format!("{:.4}", s.min_ms),
                    format!("{:.4}", s.max_ms),
                    format!("{:.0}", c.pixel_count() as f64 / (s.median_ms * 1e-3) / 1e9),
                ]);
            }
        }
    }
    println!("{}", kernels.render());

    // 3. PNG settings and the CPU reference, 3840×2160 gray.
    let mut encodings = Table::new(&["PNG setting", "median ms (5 runs)", "bytes"]);
    let settings = [
        ("Fast + Up (the `spiral` command)", CompressionType::Fast, FilterType::Up),
        ("Fast + Sub", CompressionType::Fast, FilterType::Sub),
        ("Fast + Adaptive", CompressionType::Fast, FilterType::Adaptive),
        ("zlib level 1 + Up", CompressionType::Level(1), FilterType::Up),
        ("Default + Adaptive (image's default)", CompressionType::Default, FilterType::Adaptive),
    ];
    for (name, compression, filter) in settings {
        let mut bytes = 0;
        let times: Vec<f64> = (0..5)
            .map(|_| {
                let start = Instant::now();
                let mut png = Vec::new();
                PngEncoder::new_with_quality(&mut png, compression, filter)
                    .write_image(&gray, cold.width, cold.height, image::ExtendedColorType::L8)
                    .expect("PNG encoding");
                bytes = png.len();
                ms_since(start)
            })
            .collect();
        encodings.row(&[name.to_string(), format!("{:.1}", Stats::of(&times).median_ms), bytes.to_string()]);
    }
    println!("{}", encodings.render());
    let reference = config(1, Multiplier::Ln, Precision::F64);
    let times: Vec<f64> = (0..3)
        .map(|_| {
            let start = Instant::now();
            spiral::spiral_reference(&reference).expect("valid configuration");
            ms_since(start)
        })
        .collect();
    println!(
        "CPU reference (f64, {} threads), 3840×2160: median {:.1} ms of 3 runs",
        rayon::current_num_threads(),
        Stats::of(&times).median_ms
    );
    Ok(())
}
