//! Host↔device copy bandwidth: `cargo bench --bench copies` (needs a GPU). For each size it times,
//! with the host clock around the whole synchronous copy (host-side work included): the driver's
//! copy from and to ordinary (pageable) memory, the device's own copies (`Device::upload_into`,
//! `download_into` and `download`, staged from 4 MiB), a [`Staging`](kernel_suite::Staging) used
//! directly, and copies from and to page-locked memory, plus what page-locking that memory costs
//! once. The median of 10 runs after 2 warm-ups; GB/s are 10⁹ bytes per second.

use kernel_suite::bench::{Stats, Table};
use kernel_suite::{Device, Result};
use rayon::prelude::*;
use std::time::Instant;

fn wall_ms(warmup: usize, runs: usize, mut work: impl FnMut() -> Result<()>) -> Result<Stats> {
    for _ in 0..warmup {
        work()?;
    }
    let mut times = Vec::with_capacity(runs);
    for _ in 0..runs {
        let t = Instant::now();
        work()?;
        times.push(t.elapsed().as_secs_f64() * 1e3);
    }
    Ok(Stats::of(&times))
}

fn main() -> std::process::ExitCode {
    kernel_suite::bench::run(measure)
}

/// The benchmark; without a GPU, or on any failure, its error as one line (`bench::run`).
fn measure() -> anyhow::Result<()> {
    let device = Device::gpu(0, &kernel_suite::KERNELS)?;
    println!("device: {}", device.describe());
    let mut table = Table::new(&["MiB", "path", "H2D ms", "H2D GB/s", "D2H ms", "D2H GB/s", "set-up ms"]);
    let mut staging = device.staging()?;
    for mib in [1usize, 16, 64, 256] {
        let n = (mib << 20) / 4;
        let bytes = (n * 4) as f64;
        let gbs = |s: &Stats| bytes / (s.median_ms * 1e-3) / 1e9;
        let data: Vec<f32> = (0..n).map(|i| (i % 977) as f32).collect();
        let mut buffer = device.alloc::<f32>(n)?;
        let mut row = |path: &str, h2d: Stats, d2h: Stats, setup: String| {
            table.row(&[
                mib.to_string(),
                path.into(),
                format!("{:.3}", h2d.median_ms),
                format!("{:.1}", gbs(&h2d)),
                format!("{:.3}", d2h.median_ms),
                format!("{:.1}", gbs(&d2h)),
                setup,
            ]);
        };

        let queue = device.queue();
        // SAFETY (both): the queue is synchronised before the data is used again.
        let h2d = wall_ms(2, 10, || unsafe {
            device.upload_async(queue, &data, &mut buffer)?;
            device.sync_queue(queue)
        })?;
        let mut out = vec![0.0f32; n];
        let d2h = wall_ms(2, 10, || unsafe {
            device.download_async(queue, &buffer, &mut out)?;
            device.sync_queue(queue)
        })?;
        row("direct from/to ordinary memory (driver's own staging)", h2d, d2h, "–".into());
        let h2d = wall_ms(2, 10, || device.upload_into(&mut buffer, &data))?;
        let d2h = wall_ms(2, 10, || device.download_into(&buffer, &mut out))?;
        // A fresh vector each time, as a command that downloads once meets it (pages touched first).
        let d2h_fresh = wall_ms(2, 10, || device.download(&buffer).map(drop))?;
        row("Device::upload_into / download_into", h2d, d2h, "–".into());
        row("Device::download into a fresh Vec", h2d, d2h_fresh, "–".into());
        assert_eq!(out, data, "round trip through the device's copies");

        let h2d = wall_ms(2, 10, || {
            staging.upload(&device, queue, &data, &mut buffer, 0)?;
            device.sync_queue(queue)
        })?;
        let d2h = wall_ms(2, 10, || staging.download(&device, queue, &buffer, 0, &mut out))?;
        row("staged (2 × 4 MiB pinned)", h2d, d2h, "–".into());

        let t = Instant::now();
        let mut pinned = device.pinned::<f32>(n)?;
        let pin_ms = t.elapsed().as_secs_f64() * 1e3;
        pinned.copy_from_slice(&data);
        let h2d = wall_ms(2, 10, || device.upload_into(&mut buffer, &pinned))?;
        let d2h = wall_ms(2, 10, || device.download_into(&buffer, &mut pinned))?;
        assert_eq!(&pinned[..], &data[..], "round trip through pinned memory");
        row("pinned", h2d, d2h, format!("{pin_ms:.2} (cuMemAllocHost)"));

        // What staging costs on the host: filling pinned memory from pageable, on one core and on all.
        let one = wall_ms(2, 10, || {
            pinned.copy_from_slice(&data);
            Ok(())
        })?;
        let all = wall_ms(2, 10, || {
            pinned
                .par_chunks_mut(1 << 18)
                .zip(data.par_chunks(1 << 18))
                .for_each(|(d, s)| d.copy_from_slice(s));
            Ok(())
        })?;
        row("host memcpy into pinned: 1 core | all cores", one, all, "–".into());
        assert_eq!(out, data, "round trip through staging");
    }
    print!("{}", table.render());
    Ok(())
}
