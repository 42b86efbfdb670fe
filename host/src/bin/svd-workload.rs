//! `svd-workload`: writes the procedural benchmark images of the `svd` job (see
//! `kernel_suite::workload`), so anyone can rerun the benchmark on the same files.

use clap::Parser;
use kernel_suite::image_io::{self, Scaling};
use kernel_suite::workload::{STANDARD, write_workload};
use kernel_suite::{cli, svd};
use std::path::PathBuf;
use std::process::ExitCode;

/// Writes seeded photo-like grayscale PNGs for benchmarking `svd`.
#[derive(Parser)]
#[command(version = cli::VERSION)]
struct Args {
    /// Output directory.
    dir: PathBuf,
    /// Write the standard workloads into DIR/w256, DIR/w512, DIR/w1024, DIR/noise1024, DIR/w2048
    /// and DIR/w4096 (64 × 256², 256 × 512², 16 × 1024² photo-like and noise, 8 × 2048²,
    /// 1 × 4096²), and DIR/default/shepp-logan.png (the image `svd` runs on without inputs, for
    /// the peers) instead of one set.
    #[arg(long)]
    standard: bool,
    /// Number of images.
    #[arg(long, default_value_t = 8)]
    count: usize,
    /// Side of each (square) image, pixels.
    #[arg(long, default_value_t = 512)]
    size: usize,
    /// Seed of the first image (the others follow).
    #[arg(long, default_value_t = 0)]
    seed: u64,
}

fn main() -> ExitCode {
    cli::run(|| {
        let args = Args::parse();
        if args.standard {
            let default = args.dir.join("default");
            std::fs::create_dir_all(&default)?;
            let phantom = default.join("shepp-logan.png");
            image_io::save_grayscale(&phantom, svd::shepp_logan(512).view(), Scaling::Clamp)?;
            println!("{}: the default run's image", phantom.display());
            for w in STANDARD {
                let paths =
                    write_workload(&args.dir.join(w.name), w.count, (w.size, w.size), args.seed, w.noise)?;
                println!(
                    "{}: {} images of {}² (k = {})",
                    args.dir.join(w.name).display(),
                    paths.len(),
                    w.size,
                    w.k
                );
            }
        } else {
            let paths = write_workload(&args.dir, args.count, (args.size, args.size), args.seed, false)?;
            println!("{}: {} images of {}²", args.dir.display(), paths.len(), args.size);
        }
        Ok(())
    })
}
