//! `saxpy`: the template's smoke job. Computes `y ← a·x + y` for random vectors on the chosen
//! device and checks the result against the CPU reference.

use anyhow::Context;
use clap::Parser;
use kernel_suite::cli::{self, DeviceArgs, Target, Timing};
use kernel_suite::saxpy::{saxpy, saxpy_reference};
use rand::{Rng, SeedableRng, rngs::SmallRng};
use std::process::ExitCode;
use std::time::Instant;

/// y ← a·x + y on the GPU (or simulator), checked against the CPU reference.
#[derive(Parser)]
#[command(version = cli::VERSION)]
struct Args {
    /// Number of elements.
    #[arg(long, default_value_t = 1_000_003)]
    n: usize,
    /// The scalar a.
    #[arg(long, default_value_t = 2.5)]
    a: f32,
    /// Seed of the random x and y (uniform in [-1, 1)).
    #[arg(long, default_value_t = 1)]
    seed: u64,
    #[command(flatten)]
    device: DeviceArgs,
}

fn main() -> ExitCode {
    cli::run(|| {
        let timing = Timing::start();
        let args = Args::parse();
        let mut rng = SmallRng::seed_from_u64(args.seed);
        let x: Vec<f32> = (0..args.n).map(|_| rng.random_range(-1.0..1.0)).collect();
        let y: Vec<f32> = (0..args.n).map(|_| rng.random_range(-1.0..1.0)).collect();

        let mut expected = y.clone();
        let start = Instant::now();
        timing.cpu(|| saxpy_reference(args.a, &x, &mut expected)).context("CPU reference")?;
        let cpu_ms = start.elapsed().as_secs_f64() * 1e3;
        println!("saxpy: n = {}, a = {}, seed = {}", args.n, args.a, args.seed);
        println!("CPU reference: {cpu_ms:.3} ms");

        let target = args.device.select()?;
        match &target {
            Target::CpuReference => println!("ran the CPU reference only"),
            Target::Kernels(device) => {
                let mut result = y.clone();
                let start = Instant::now();
                saxpy(device, args.a, &x, &mut result).context("saxpy kernel")?;
                let ms = start.elapsed().as_secs_f64() * 1e3;
                let max_err = result.iter().zip(&expected).map(|(r, e)| (r - e).abs()).fold(0.0f32, f32::max);
                println!(
                    "{}: {ms:.3} ms including copies (first call: includes module warm-up)",
                    device.describe()
                );
                println!("max |kernel - reference| = {max_err:e}");
                anyhow::ensure!(max_err == 0.0, "the kernel's result differs from the reference");
            }
        }
        args.device.finish(&target, &timing)?;
        Ok(())
    })
}
