//! `spiral`: paints a spiral image on the GPU (or the simulator, or the CPU reference), saves it as
//! PNG with its configuration as JSON next to it, and prints the parameters and where the time went.
//!
//! Three ways to choose the parameters: `--new` draws them at random (`--seed` makes the draw
//! reproducible; parameter flags override single values), parameter flags alone give them all, and
//! `--config FILE.json` re-makes a saved image exactly.

use anyhow::{Context, bail};
use clap::Parser;
use kernel_suite::cli::{self, DeviceArgs, Target, Timing};
use kernel_suite::image_io;
use kernel_suite::spiral::{
    self, DEFAULT_HEIGHT, DEFAULT_WIDTH, Multiplier, Palette, Precision, SpiralConfig,
};
use rand::{SeedableRng, rngs::SmallRng};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Instant, SystemTime};

/// Paints a spiral image (8-bit gray, or RGB with --palette) and saves it as PNG, with its
/// configuration as JSON next to it.
///
/// Pixel (row i, column j): x = j − cx, y = cy − i, r = √(x² + y²); θ = 180·atan2(x, y)/π +
/// (curve·r/max_radius)·m(r) mod 360; value (θ mod w)·256/w with w = 360/symmetry, inverted when
/// sin(θ·symmetry/100) < 0.5; pixels with r > max_radius are black.
#[derive(Parser)]
#[command(version = cli::VERSION)]
struct Args {
    /// Random parameters: centre in the middle third of each axis, symmetry 1–9, curve in ±62.83
    /// (two decimals), multiplier 0 or 1, max radius 1500–2000 (at 3840×2160; scaled with the
    /// image's diagonal). Parameter flags given as well override the drawn values.
    #[arg(long, conflicts_with = "config")]
    new: bool,
    /// Seed of the --new draw (default: from the clock). The seed is printed.
    #[arg(long, requires = "new")]
    seed: Option<u64>,
    /// Re-make the image of a saved configuration (--precision and --palette may override it).
    #[arg(long, value_name = "FILE.json")]
    config: Option<PathBuf>,
    /// Image size as a multiple of 3840×2160 (2 gives 7680×4320), unless --width/--height say.
    #[arg(long, conflicts_with = "config", value_parser = clap::value_parser!(u32).range(1..=8))]
    scale: Option<u32>,
    /// Image width, pixels.
    #[arg(long, conflicts_with = "config")]
    width: Option<u32>,
    /// Image height, pixels.
    #[arg(long, conflicts_with = "config")]
    height: Option<u32>,
    /// Column of the spiral's centre, pixels (default: the middle of the image).
    #[arg(long, conflicts_with = "config", allow_negative_numbers = true)]
    center_x: Option<f64>,
    /// Row of the spiral's centre, pixels (default: the middle of the image).
    #[arg(long, conflicts_with = "config", allow_negative_numbers = true)]
    center_y: Option<f64>,
    /// Repetitions of the pattern around the centre (≥ 1).
    #[arg(long, conflicts_with = "config")]
    symmetry: Option<u32>,
    /// Twist, degrees at the max radius per unit of the multiplier.
    #[arg(long, conflicts_with = "config", allow_negative_numbers = true)]
    curve: Option<f64>,
    /// Curve multiplier m(r): 0 = ln r, 1 = sin(r/100), 2 = cos(r/100), 3 = tan(r/100).
    #[arg(long, conflicts_with = "config")]
    multiplier: Option<Multiplier>,
    /// Radius of the spiral, pixels; pixels farther out are black.
    #[arg(long, conflicts_with = "config", allow_negative_numbers = true)]
    max_radius: Option<f64>,
    /// Arithmetic of the kernels (default f64; the CPU reference is always f64).
    #[arg(long, value_enum)]
    precision: Option<Precision>,
    /// RGB colouring: comma-separated #rrggbb colours from level 0 to level 255, e.g.
    /// "#000000,#ff8000,#ffffff".
    #[arg(long)]
    palette: Option<Palette>,
    /// Output PNG (default: the UTC time, YYYY-MM-DD-HH-MM-SS.png, in the current directory). The
    /// configuration goes next to it with the extension .json.
    #[arg(long, short)]
    output: Option<PathBuf>,
    #[command(flatten)]
    device: DeviceArgs,
}

/// The configuration the arguments describe.
fn configuration(args: &Args) -> anyhow::Result<SpiralConfig> {
    let mut config = if let Some(path) = &args.config {
        SpiralConfig::load(path)?
    } else {
        let scale = args.scale.unwrap_or(1);
        let width = args.width.unwrap_or(DEFAULT_WIDTH * scale);
        let height = args.height.unwrap_or(DEFAULT_HEIGHT * scale);
        let mut config = if args.new {
            let seed = args.seed.unwrap_or_else(|| {
                SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64)
            });
            println!("seed: {seed}");
            SpiralConfig::random(&mut SmallRng::seed_from_u64(seed), width, height)
        } else {
            let missing: Vec<&str> = [
                ("--symmetry", args.symmetry.is_none()),
                ("--curve", args.curve.is_none()),
                ("--multiplier", args.multiplier.is_none()),
                ("--max-radius", args.max_radius.is_none()),
            ]
            .into_iter()
            .filter_map(|(flag, absent)| absent.then_some(flag))
            .collect();
            if !missing.is_empty() {
                bail!("give --new, --config FILE.json, or the parameters (missing: {})", missing.join(", "));
            }
            // The four required values are all given; the flags below set them.
            SpiralConfig {
                width,
                height,
                center: [(width / 2) as f64, (height / 2) as f64],
                symmetry: 1,
                curve: 0.0,
                multiplier: Multiplier::Ln,
                max_radius: 1.0,
                precision: Precision::F64,
                palette: None,
            }
        };
        config.center =
            [args.center_x.unwrap_or(config.center[0]), args.center_y.unwrap_or(config.center[1])];
        config.symmetry = args.symmetry.unwrap_or(config.symmetry);
        config.curve = args.curve.unwrap_or(config.curve);
        config.multiplier = args.multiplier.unwrap_or(config.multiplier);
        config.max_radius = args.max_radius.unwrap_or(config.max_radius);
        config
    };
    config.precision = args.precision.unwrap_or(config.precision);
    if args.palette.is_some() {
        config.palette = args.palette.clone();
    }
    config.validate()?;
    Ok(config)
}

/// The PNG and JSON paths: `--output` and its `.json` sibling, or `<timestamp>[-N].png/json`.
fn output_paths(output: Option<&Path>, stem: &str) -> anyhow::Result<(PathBuf, PathBuf)> {
    if let Some(png) = output {
        let json = png.with_extension("json");
        if json == png {
            bail!("{}: the output image cannot have the extension .json", png.display());
        }
        return Ok((png.to_path_buf(), json));
    }
    let free = |name: String| {
        let png = PathBuf::from(format!("{name}.png"));
        let json = png.with_extension("json");
        (!png.exists() && !json.exists()).then_some((png, json))
    };
    Ok((1..).find_map(|n| free(if n == 1 { stem.to_string() } else { format!("{stem}-{n}") })).unwrap())
}

/// Named phases and their wall-clock milliseconds, printed as a table.
struct Timings(Vec<(String, f64)>);

impl Timings {
    fn add(&mut self, phase: impl Into<String>, ms: f64) {
        self.0.push((phase.into(), ms));
    }

    /// Runs `f` and records its wall time under `phase`.
    fn time<R>(&mut self, phase: &str, f: impl FnOnce() -> R) -> R {
        let start = Instant::now();
        let result = f();
        self.add(phase, start.elapsed().as_secs_f64() * 1e3);
        result
    }
}

fn main() -> ExitCode {
    let timing = Timing::start();
    cli::run(|| {
        let args = Args::parse();
        let config = configuration(&args)?;
        let stem = spiral::timestamp(SystemTime::now());
        let (png_path, json_path) = output_paths(args.output.as_deref(), &stem)?;
        println!("Image Configuration: {stem}");
        println!("{config}");

        let mut timings = Timings(Vec::new());
        let start = Instant::now();
        let target = args.device.select()?;
        let open_ms = start.elapsed().as_secs_f64() * 1e3;
        match &target {
            Target::Kernels(device) if let Some(s) = device.startup() => {
                timings.add("CUDA driver init (cuInit)", s.init_ms);
                timings.add("context creation", s.context_ms);
                timings.add("module load", s.module_load_ms);
                timings.add("device queries + stream", open_ms - s.init_ms - s.context_ms - s.module_load_ms);
            }
            _ => timings.add("device selection", open_ms),
        }
        let mut config = config;
        let gray = match &target {
            Target::Kernels(device) => {
                println!("device: {}", device.describe());
                let mut image =
                    timings.time("device allocation", || device.alloc::<u8>(config.pixel_count()))?;
                let start = Instant::now();
                let before = device.mark()?;
                spiral::launch_spiral(device, &config, &mut image).context("spiral kernel")?;
                let after = device.mark()?;
                device.synchronize().context("spiral kernel")?;
                let kernel_ms = device.elapsed_ms(&before, &after)?;
                timings.add(
                    format!("kernel ({kernel_ms:.3} ms on the device)"),
                    start.elapsed().as_secs_f64() * 1e3,
                );
                timings.time("device-to-host copy", || device.download(&image))?
            }
            Target::CpuReference => {
                if config.precision == Precision::F32 {
                    eprintln!("note: the CPU reference computes in f64; the saved configuration says f64");
                    config.precision = Precision::F64;
                }
                println!("device: CPU reference (f64, {} threads)", rayon::current_num_threads());
                timings.time("CPU reference", || timing.cpu(|| spiral::spiral_reference(&config)))?
            }
        };
        let (pixels, format) = match &config.palette {
            Some(palette) => {
                (timings.time("palette", || spiral::colorize(&gray, palette)), image_io::PixelFormat::Rgb8)
            }
            None => (gray, image_io::PixelFormat::Gray8),
        };
        let png = timings.time("PNG encode", || {
            timing.io(|| image_io::encode_png(&pixels, config.width, config.height, format))
        })?;
        timings.time("file write (PNG + JSON)", || {
            timing.io(|| -> anyhow::Result<()> {
                std::fs::write(&png_path, &png)
                    .with_context(|| format!("cannot write {}", png_path.display()))?;
                config.save(&json_path)?;
                Ok(())
            })
        })?;
        println!("image:         {} ({} bytes)", png_path.display(), png.len());
        println!("configuration: {}", json_path.display());
        println!("time (ms, wall clock):");
        for (phase, ms) in &timings.0 {
            println!("  {phase:<44} {ms:>9.3}");
        }
        println!("  {:<44} {:>9.3}", "total since the program started", timing.elapsed_ms());
        args.device.finish(&target, &timing)?;
        Ok(())
    })
}
