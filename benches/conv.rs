//! 2-D convolution throughput: `cargo bench --bench conv` (needs a GPU). Times each f32 kernel on
//! 4096² and 8192² images with a normalised 13×13 mask (event-timed, median of 50 after 5 warm-up
//! launches) and reports GFLOP/s (2 flops per multiply-add, mask_rows·mask_cols per output pixel)
//! against the GPU's FP32 peak, computed from its attributes as
//! SMs × FP32 lanes per SM × 2 flops × boost clock.

use anyhow::Context;
use kernel_suite::Device;
use kernel_suite::bench::{Stats, Table};
use kernel_suite::conv::{self, Convolution, Variant};
use ndarray::Array2;

/// FP32 lanes (FMA units) per SM by compute capability: 64 on 6.0/7.x/8.0, 128 on 6.1/6.2, 8.6+,
/// 9.0 (H100) and later.
fn fp32_lanes_per_sm(major: u32, minor: u32) -> u32 {
    match (major, minor) {
        (7, _) | (8, 0) | (6, 0) => 64,
        _ => 128,
    }
}

fn main() -> std::process::ExitCode {
    kernel_suite::bench::run(measure)
}

/// The benchmark; without a GPU, or on any failure, its error as one line (`bench::run`).
fn measure() -> anyhow::Result<()> {
    let device = Device::gpu(0, &kernel_suite::KERNELS)?;
    println!("device: {}", device.describe());
    let props = device_properties()?;
    let peak_gflops = props.sms as f64
        * fp32_lanes_per_sm(props.major, props.minor) as f64
        * 2.0
        * props.clock_khz as f64
        * 1e-6;
    println!(
        "FP32 peak: {} SMs × {} lanes × 2 flops × {:.3} GHz (max clock) = {:.1} TFLOP/s",
        props.sms,
        fp32_lanes_per_sm(props.major, props.minor),
        props.clock_khz as f64 * 1e-6,
        peak_gflops * 1e-3
    );

    let mask = conv::gaussian_mask(2.0, Some(13))?.mapv(|v| v as f32);
    let (mh, mw) = mask.dim();
    let mut table =
        Table::new(&["kernel", "image", "mask", "median ms", "min ms", "max ms", "GFLOP/s", "% FP32 peak"]);
    for side in [4096usize, 8192] {
        let image = Array2::from_shape_fn((side, side), |(i, j)| ((i * 7 + j * 13) % 256) as f32 / 255.0);
        let mut conv = Convolution::upload(&device, image.view(), mask.view())?;
        for variant in Variant::ALL {
            let times =
                device.time_ms(5, 50, || conv.launch(variant)).with_context(|| format!("{variant:?}"))?;
            let s = Stats::of(&times);
            let gflops = 2.0 * (mh * mw) as f64 * (side * side) as f64 / (s.median_ms * 1e-3) * 1e-9;
            table.row(&[
                format!("{variant:?}").to_lowercase(),
                format!("{side}²"),
                format!("{mh}×{mw}"),
                format!("{:.4}", s.median_ms),
                format!("{:.4}", s.min_ms),
                format!("{:.4}", s.max_ms),
                format!("{gflops:.0}"),
                format!("{:.1}", 100.0 * gflops / peak_gflops),
            ]);
        }
        // The timed launches must also have computed the right thing.
        let result = conv.download()?;
        if side == 4096 {
            let reference = conv::convolve_reference(image.view(), mask.view())?;
            let d = conv::Deviation::of(result.view(), reference.view())?;
            anyhow::ensure!(d.relative() <= 1e-5, "the benchmarked result is wrong: {d:?}");
        }
    }
    print!("{}", table.render());
    Ok(())
}

struct Properties {
    sms: u32,
    clock_khz: u32,
    major: u32,
    minor: u32,
}

fn device_properties() -> anyhow::Result<Properties> {
    use cust::device::{Device as CudaDevice, DeviceAttribute as A};
    let d = CudaDevice::get_device(0)?;
    let get = |a| -> anyhow::Result<u32> { Ok(d.get_attribute(a)? as u32) };
    Ok(Properties {
        sms: get(A::MultiprocessorCount)?,
        clock_khz: get(A::ClockRate)?,
        major: get(A::ComputeCapabilityMajor)?,
        minor: get(A::ComputeCapabilityMinor)?,
    })
}
