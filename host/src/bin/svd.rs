//! `svd`: rank-k image reconstruction from a thin SVD, the project's main job.
//!
//! With no arguments it factors a 512×512 Shepp–Logan phantom and reconstructs it at several ranks,
//! printing for each rank the relative Frobenius error, the Eckart–Young bound and the times
//! (GPU H2D / kernel / D2H, CPU SVD, CPU reconstruction), and writing a labelled PNG mosaic.

use anyhow::{Context, bail};
use clap::Parser;
use kernel_suite::cli::{self, DeviceArgs, Target};
use kernel_suite::image_io::{self, Scaling};
use kernel_suite::svd::{self, PhaseTimes, Variant};
use kernel_suite::svd_batch::reconstruct_batch;
use kernel_suite::{Device, plot};
use ndarray::{Array2, ArrayView2, s};
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

/// Rank-k SVD reconstruction of grayscale images on the GPU, checked against the CPU.
#[derive(Parser)]
#[command(version)]
struct Args {
    /// PNG/JPEG files or directories of them (converted to grayscale in [0, 1]). Default: a
    /// procedural Shepp–Logan phantom of --size pixels.
    inputs: Vec<PathBuf>,
    /// Ranks k to reconstruct, comma-separated; each must be ≤ min(rows, cols).
    #[arg(long, value_delimiter = ',', default_values_t = [1, 5, 10, 20, 50, 100])]
    ranks: Vec<usize>,
    /// Kernel variant.
    #[arg(long, value_enum, default_value_t = Variant::Regtiled)]
    variant: Variant,
    /// Block size (8, 16 or 32) of the naive and tiled kernels; regtiled always uses 16×16.
    #[arg(long, default_value_t = 16)]
    block: u32,
    /// Side of the default phantom image.
    #[arg(long, default_value_t = 512)]
    size: usize,
    /// Directory for the mosaics (`<image>-mosaic.png`).
    #[arg(long, default_value = "svd-out")]
    out_dir: PathBuf,
    /// Also write the full report as JSON to this file.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Batch mode: reconstruct all images (of one size) at the largest rank through the streamed
    /// pipeline with this many slots, and compare with one slot (serial). GPU only.
    #[arg(long)]
    slots: Option<usize>,
    #[command(flatten)]
    device: DeviceArgs,
}

#[derive(Serialize)]
struct RankReport {
    k: usize,
    relative_error: f64,
    eckart_young_bound: f64,
    gpu: Option<PhaseTimes>,
    cpu_reconstruction_ms: f64,
}

#[derive(Serialize)]
struct ImageReport {
    name: String,
    rows: usize,
    cols: usize,
    cpu_svd_ms: f64,
    device: String,
    variant: Variant,
    ranks: Vec<RankReport>,
    mosaic: PathBuf,
}

fn main() -> ExitCode {
    cli::run(|| {
        let args = Args::parse();
        anyhow::ensure!(!args.ranks.is_empty(), "no ranks given");
        let images = load_inputs(&args)?;
        let target = args.device.select()?;
        let device = match &target {
            Target::Kernels(d) => Some(d),
            Target::CpuReference => None,
        };
        let label = device.map_or("CPU reference".to_string(), Device::describe);
        println!("device: {label}; variant: {}", args.variant.name());
        std::fs::create_dir_all(&args.out_dir)
            .with_context(|| format!("cannot create {}", args.out_dir.display()))?;

        let mut reports = Vec::new();
        let mut batch_jobs = Vec::new();
        for (name, image) in &images {
            let report = process(&args, device, name, image.view(), &label, &mut batch_jobs)?;
            reports.push(report);
        }
        if let Some(slots) = args.slots {
            run_batch(&args, device, &batch_jobs, slots)?;
        }
        if let Some(path) = &args.json {
            std::fs::write(path, serde_json::to_string_pretty(&reports)?)
                .with_context(|| format!("cannot write {}", path.display()))?;
            println!("report: {}", path.display());
        }
        if let Some(peak) = peak_memory_mib() {
            println!("peak resident memory: {peak:.1} MiB");
        }
        args.device.finish(&target)?;
        Ok(())
    })
}

fn load_inputs(args: &Args) -> anyhow::Result<Vec<(String, Array2<f32>)>> {
    if args.inputs.is_empty() {
        anyhow::ensure!(args.size >= 1, "--size must be at least 1");
        return Ok(vec![("shepp-logan".into(), svd::shepp_logan(args.size))]);
    }
    let mut files = Vec::new();
    for input in &args.inputs {
        if input.is_dir() {
            let mut found: Vec<PathBuf> = std::fs::read_dir(input)
                .with_context(|| format!("cannot read directory {}", input.display()))?
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| {
                    p.extension()
                        .and_then(|e| e.to_str())
                        .is_some_and(|e| matches!(e.to_ascii_lowercase().as_str(), "png" | "jpg" | "jpeg"))
                })
                .collect();
            found.sort();
            if found.is_empty() {
                bail!("{}: no PNG or JPEG files in this directory", input.display());
            }
            files.extend(found);
        } else {
            files.push(input.clone());
        }
    }
    files
        .into_iter()
        .map(|path| {
            let image = image_io::load_grayscale(&path)?;
            let name = path.file_stem().map_or("image".into(), |s| s.to_string_lossy().into_owned());
            Ok((name, image))
        })
        .collect()
}

fn process(
    args: &Args,
    device: Option<&Device>,
    name: &str,
    image: ArrayView2<f32>,
    label: &str,
    batch_jobs: &mut Vec<svd::RankK>,
) -> anyhow::Result<ImageReport> {
    let (rows, cols) = image.dim();
    let start = Instant::now();
    let factors = svd::thin_svd(image).with_context(|| name.to_string())?;
    let cpu_svd_ms = start.elapsed().as_secs_f64() * 1e3;
    for &k in &args.ranks {
        factors.check_rank(k).with_context(|| format!("{name} ({rows}×{cols})"))?;
    }
    println!("\n{name}: {rows}×{cols}, CPU thin SVD (faer) {cpu_svd_ms:.1} ms");
    println!(
        "{:>5} {:>12} {:>12} {:>9} {:>10} {:>9} {:>10} {:>9}",
        "k", "rel. error", "E-Y bound", "H2D ms", "kernel ms", "D2H ms", "GPU total", "CPU ms"
    );
    let original = image.mapv(|v| v as f64);
    let mut tiles = vec![(image.to_owned(), "original".to_string())];
    let mut ranks = Vec::new();
    for &k in &args.ranks {
        let start = Instant::now();
        let reference = svd::reconstruct_reference(&factors, k)?;
        let cpu_reconstruction_ms = start.elapsed().as_secs_f64() * 1e3;
        let (result, gpu) = match device {
            Some(d) => {
                let (r, t) = svd::reconstruct(d, &factors.rank_k(k)?, args.variant, args.block)?;
                (r, Some(t))
            }
            None => (reference.mapv(|v| v as f32), None),
        };
        let report = RankReport {
            k,
            relative_error: svd::relative_error(result.view(), original.view()),
            eckart_young_bound: factors.eckart_young_bound(k),
            gpu,
            cpu_reconstruction_ms,
        };
        let fmt = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.3}"));
        println!(
            "{:>5} {:>12.6} {:>12.6} {:>9} {:>10} {:>9} {:>10} {:>9.3}",
            k,
            report.relative_error,
            report.eckart_young_bound,
            fmt(gpu.map(|t| t.h2d_ms)),
            fmt(gpu.map(|t| t.kernel_ms)),
            fmt(gpu.map(|t| t.d2h_ms)),
            fmt(gpu.map(|t| t.total_ms())),
            cpu_reconstruction_ms
        );
        tiles.push((result, format!("k = {k}")));
        ranks.push(report);
    }
    if args.slots.is_some() {
        batch_jobs.push(factors.rank_k(*args.ranks.iter().max().unwrap())?);
    }
    let mosaic = args.out_dir.join(format!("{name}-mosaic.png"));
    write_mosaic(&mosaic, &tiles)?;
    println!("mosaic: {}", mosaic.display());
    Ok(ImageReport {
        name: name.into(),
        rows,
        cols,
        cpu_svd_ms,
        device: label.into(),
        variant: args.variant,
        ranks,
        mosaic,
    })
}

/// Tiles in a grid of up to 4 columns, each with its label above it.
fn write_mosaic(path: &Path, tiles: &[(Array2<f32>, String)]) -> anyhow::Result<()> {
    let (h, w) = tiles[0].0.dim();
    let cols = tiles.len().min(4);
    let grid_rows = tiles.len().div_ceil(cols);
    let (gap, label_h) = (8usize, plot::LABEL_HEIGHT as usize);
    let (cell_w, cell_h) = (w + gap, h + label_h + gap);
    let (mw, mh) = (cols * cell_w + gap, grid_rows * cell_h + gap);
    let mut mosaic = Array2::<f32>::ones((mh, mw));
    let mut labels = Vec::new();
    for (i, (tile, text)) in tiles.iter().enumerate() {
        let (x0, y0) = (gap + (i % cols) * cell_w, gap + (i / cols) * cell_h);
        mosaic
            .slice_mut(s![y0 + label_h..y0 + label_h + h, x0..x0 + w])
            .assign(&tile.mapv(|v| v.clamp(0.0, 1.0)));
        labels.push((text.clone(), x0, y0));
    }
    let mut gray = image_io::to_gray8(mosaic.view(), Scaling::Clamp);
    plot::draw_labels(&mut gray, mw, mh, &labels)?;
    image_io::save_gray8(path, &gray, mw, mh)?;
    Ok(())
}

fn run_batch(args: &Args, device: Option<&Device>, jobs: &[svd::RankK], slots: usize) -> anyhow::Result<()> {
    let Some(device) = device else {
        println!("\nbatch pipeline: needs a GPU (or --device sim); skipped on the CPU reference");
        return Ok(());
    };
    let (m, n) = (jobs[0].u.dim().0, jobs[0].vt.dim().1);
    let mut outputs = Vec::with_capacity(jobs.len());
    for _ in jobs {
        outputs.push(device.pinned::<f32>(m * n)?);
    }
    let serial = reconstruct_batch(device, jobs, &mut outputs, args.variant, args.block, 1)?;
    let overlapped = reconstruct_batch(device, jobs, &mut outputs, args.variant, args.block, slots)?;
    println!("\nbatch of {} images {m}×{n} at k = {}:", jobs.len(), jobs[0].s.len());
    println!("  serial (1 slot):      {:.2} ms, {:.1} GB/s over PCIe", serial.wall_ms, serial.copy_gbs());
    println!(
        "  overlapped ({} slots): {:.2} ms, {:.1} GB/s over PCIe, speed-up {:.2}×",
        overlapped.slots,
        overlapped.wall_ms,
        overlapped.copy_gbs(),
        serial.wall_ms / overlapped.wall_ms
    );
    Ok(())
}

/// Peak resident set size of this process (Linux `VmHWM`), MiB.
fn peak_memory_mib() -> Option<f64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib / 1024.0)
}
