//! `svd-workload`: writes the procedural benchmark images of the `svd` job (see
//! `kernel_suite::workload`), so anyone can rerun the benchmark on the same files.

use clap::Parser;
use kernel_suite::cli;
use kernel_suite::workload::{STANDARD, write_workload};
use std::path::PathBuf;
use std::process::ExitCode;

/// Writes seeded photo-like grayscale PNGs for benchmarking `svd`.
#[derive(Parser)]
#[command(version = cli::VERSION)]
struct Args {
    /// Output directory.
    dir: PathBuf,
    /// Write the standard workloads into DIR/w256, DIR/w1024, DIR/w2048 and DIR/w4096
    /// (64 × 256², 16 × 1024², 8 × 2048², 1 × 4096²) instead of one set.
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
            for w in STANDARD {
                let paths = write_workload(&args.dir.join(w.name), w.count, w.size, w.size, args.seed)?;
                println!(
                    "{}: {} images of {}² (k = {})",
                    args.dir.join(w.name).display(),
                    paths.len(),
                    w.size,
                    w.k
                );
            }
        } else {
            let paths = write_workload(&args.dir, args.count, args.size, args.size, args.seed)?;
            println!("{}: {} images of {}²", args.dir.display(), paths.len(), args.size);
        }
        Ok(())
    })
}
