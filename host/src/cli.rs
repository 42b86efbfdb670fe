//! Command-line pieces every binary shares: the device choice and the one-line error exit.

use crate::device::{Device, GpuOptions};
use crate::error::Result;
use std::process::ExitCode;

/// `--device`: where a command runs.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeviceChoice {
    /// The GPU if one is usable, else the CPU reference (says so on stderr).
    Auto,
    /// The GPU; exits with an error when there is none.
    Gpu,
    /// The kernels, run by the CPU simulator (slow; for checking kernel code without a GPU).
    Sim,
    /// The CPU reference implementation only.
    Cpu,
}

/// The `--device`/`--gpu` options, to `#[command(flatten)]` into a binary's arguments.
#[derive(clap::Args, Debug, Clone)]
pub struct DeviceArgs {
    /// Where to run: auto = GPU if present, else the CPU reference; gpu = fail without a GPU;
    /// sim = the kernels in the CPU simulator; cpu = the CPU reference.
    #[arg(long, value_enum, default_value_t = DeviceChoice::Auto)]
    pub device: DeviceChoice,
    /// Index of the GPU to use (0 = first).
    #[arg(long, default_value_t = 0)]
    pub gpu: u32,
    /// Cap on registers per thread for every kernel, applied by the driver's JIT (loads the PTX
    /// instead of the cubin), like Numba's `max_registers`.
    #[arg(long)]
    pub max_registers: Option<u32>,
    /// Load the PTX (JIT-compiled by the driver) even when the embedded cubin fits the GPU.
    #[arg(long)]
    pub ptx: bool,
    /// Print an nvprof-style profile at exit: GPU activities (kernels, copies), host-side costs,
    /// and per kernel its registers, shared memory, occupancy and achieved throughput. GPU only.
    #[arg(long)]
    pub profile: bool,
}

/// What a command runs on after [`DeviceArgs::select`].
pub enum Target {
    /// The kernels, on a GPU or in the simulator.
    Kernels(Device),
    /// The CPU reference implementation.
    CpuReference,
}

impl DeviceArgs {
    /// Opens the chosen device. With `auto`, a missing GPU or driver falls back to the CPU reference
    /// with a note on stderr; with `gpu`, it is an error.
    pub fn select(&self) -> Result<Target> {
        let target = self.open()?;
        if self.profile {
            let profiling = match &target {
                Target::Kernels(device) => device.enable_profiling()?,
                Target::CpuReference => false,
            };
            if !profiling {
                eprintln!("note: --profile needs a GPU; this run is not profiled");
            }
        }
        Ok(target)
    }

    /// Prints the profile (to stderr) when `--profile` was given and the target is a GPU.
    pub fn finish(&self, target: &Target) -> Result<()> {
        if let Target::Kernels(device) = target
            && let Some(report) = device.profile_report()?
        {
            eprint!("{report}");
        }
        Ok(())
    }

    fn gpu_options(&self) -> GpuOptions {
        GpuOptions { max_registers: self.max_registers, force_ptx: self.ptx }
    }

    fn open(&self) -> Result<Target> {
        match self.device {
            DeviceChoice::Gpu => Device::gpu_with(self.gpu, self.gpu_options()).map(Target::Kernels),
            DeviceChoice::Sim => Ok(Target::Kernels(Device::simulator())),
            DeviceChoice::Cpu => Ok(Target::CpuReference),
            DeviceChoice::Auto => match Device::gpu_with(self.gpu, self.gpu_options()) {
                Ok(device) => Ok(Target::Kernels(device)),
                Err(e) if e.is_no_gpu() => {
                    eprintln!("note: {e}; falling back to the CPU reference (--device cpu)");
                    Ok(Target::CpuReference)
                }
                Err(e) => Err(e),
            },
        }
    }
}

/// Runs a binary's body: on error prints `error: <message>` (causes joined by `: `) on one line of
/// stderr and exits with status 1.
pub fn run(body: impl FnOnce() -> anyhow::Result<()>) -> ExitCode {
    match body() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
