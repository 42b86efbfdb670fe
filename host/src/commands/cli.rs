//! Command-line pieces every binary shares: the device choice, the version, the one-line summary of
//! where the time went, and the one-line error exit.

use crate::device::{Device, GpuOptions};
use crate::error::Result;
use std::cell::Cell;
use std::fmt::Write as _;
use std::process::ExitCode;
use std::time::Instant;

/// What `--version` prints after the command's name: the crate version and the kernels' targets
/// (the PTX any newer GPU JIT-compiles, and the cubin loaded without JIT on a matching GPU).
pub const VERSION: &str = concat!(env!("CARGO_PKG_VERSION"), " (kernels: ", env!("KERNEL_TARGETS"), ")");

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
    /// with a note on stderr; with `gpu`, it is an error. A GPU records its kernels' times (two CUDA
    /// events per launch, a few microseconds) for [`DeviceArgs::finish`]'s summary.
    pub fn select(&self) -> Result<Target> {
        self.select_recording(true)
    }

    /// [`DeviceArgs::select`] for jobs of many launches that time themselves: kernels are recorded
    /// only with `--profile`.
    pub fn select_for_job(&self) -> Result<Target> {
        self.select_recording(self.profile)
    }

    fn select_recording(&self, record: bool) -> Result<Target> {
        let target = self.open()?;
        let recording = match &target {
            Target::Kernels(device) if record => device.enable_profiling()?,
            _ => false,
        };
        if self.profile && !recording {
            eprintln!("note: --profile needs a GPU; this run is not profiled");
        }
        Ok(target)
    }

    /// Prints the profile (to stderr) when `--profile` was given and the target is a GPU.
    pub fn print_profile(&self, target: &Target) -> Result<()> {
        self.report(target).map(drop)
    }

    /// [`DeviceArgs::print_profile`], then the one-line summary of where the command's time went
    /// (see [`Timing`]).
    pub fn finish(&self, target: &Target, timing: &Timing) -> Result<()> {
        let kernels_ms = self.report(target)?.map(|r| r.kernel_totals().0);
        println!("{}", timing.summary(target, kernels_ms));
        Ok(())
    }

    /// The recorded profile (one pass over the recorded events), printed with `--profile`.
    fn report(&self, target: &Target) -> Result<Option<crate::profile::Report>> {
        let report = match target {
            Target::Kernels(device) => device.profile_report()?,
            Target::CpuReference => None,
        };
        if self.profile
            && let Some(report) = &report
        {
            eprint!("{report}");
        }
        Ok(report)
    }

    fn gpu_options(&self) -> GpuOptions {
        GpuOptions { max_registers: self.max_registers, force_ptx: self.ptx, measure_context: self.profile }
    }

    fn open(&self) -> Result<Target> {
        match self.device {
            DeviceChoice::Gpu => {
                Device::gpu_with(self.gpu, &crate::KERNELS, self.gpu_options()).map(Target::Kernels)
            }
            DeviceChoice::Sim => Ok(Target::Kernels(Device::simulator())),
            DeviceChoice::Cpu => Ok(Target::CpuReference),
            DeviceChoice::Auto => match Device::gpu_with(self.gpu, &crate::KERNELS, self.gpu_options()) {
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

/// Where a command's wall time goes, for the one line every command prints at the end:
/// start-up (driver, context, module), I/O (reading inputs, making test inputs, writing outputs),
/// copies (host wall time of the copies between host and device, staging included), kernels (their
/// GPU time from CUDA events), the CPU reference when that is what ran, and the rest of the host's
/// work. Start it first thing in `main`; wrap I/O in [`Timing::io`] and CPU computation in
/// [`Timing::cpu`].
pub struct Timing {
    start: Instant,
    io_ms: Cell<f64>,
    cpu_ms: Cell<f64>,
}

impl Timing {
    /// Starts the clock.
    pub fn start() -> Timing {
        Timing { start: Instant::now(), io_ms: Cell::new(0.0), cpu_ms: Cell::new(0.0) }
    }

    /// Runs `work` (file or image I/O, or making an input), counting its time as I/O.
    pub fn io<T>(&self, work: impl FnOnce() -> T) -> T {
        let t = Instant::now();
        let out = work();
        self.io_ms.set(self.io_ms.get() + t.elapsed().as_secs_f64() * 1e3);
        out
    }

    /// Runs `work` (the CPU reference), counting its time as CPU computation.
    pub fn cpu<T>(&self, work: impl FnOnce() -> T) -> T {
        let t = Instant::now();
        let out = work();
        self.cpu_ms.set(self.cpu_ms.get() + t.elapsed().as_secs_f64() * 1e3);
        out
    }

    /// Milliseconds since [`Timing::start`].
    pub fn elapsed_ms(&self) -> f64 {
        self.start.elapsed().as_secs_f64() * 1e3
    }

    /// The summary line: `time: T ms end to end = start-up … + I/O … + copies … + kernels … +
    /// other host …`; `kernels_ms` is the GPU's kernel time when the target is a GPU.
    pub fn summary(&self, target: &Target, kernels_ms: Option<f64>) -> String {
        let total = self.elapsed_ms();
        let mut parts: Vec<(f64, String)> = Vec::new();
        if let Target::Kernels(device) = target
            && let Some(s) = device.startup()
        {
            let ms = s.init_ms + s.context_ms + s.module_load_ms;
            parts.push((
                ms,
                format!(
                    "start-up {ms:.1} (driver {:.1}, context {:.1}, module {:.1})",
                    s.init_ms, s.context_ms, s.module_load_ms
                ),
            ));
        }
        parts.push((self.io_ms.get(), format!("I/O {:.1}", self.io_ms.get())));
        if let Target::Kernels(device) = target {
            let c = device.copy_totals();
            let mut detail = String::new();
            for (what, ms, bytes) in [("H2D", c.h2d_ms, c.h2d_bytes), ("D2H", c.d2h_ms, c.d2h_bytes)] {
                if bytes > 0 {
                    let sep = if detail.is_empty() { "" } else { "; " };
                    let rate = bytes as f64 / (ms.max(1e-6) * 1e-3) / 1e9;
                    let _ = write!(detail, "{sep}{what} {} in {ms:.2} ms, {rate:.1} GB/s", size(bytes));
                }
            }
            if c.staging_setup_ms > 0.0 {
                let _ = write!(detail, "; pinned staging set-up {:.1} ms", c.staging_setup_ms);
            }
            let detail = if detail.is_empty() { String::new() } else { format!(" ({detail})") };
            parts.push((c.total_ms(), format!("copies {:.1}{detail}", c.total_ms())));
            match kernels_ms {
                Some(ms) => parts.push((ms, format!("kernels {ms:.3}"))),
                None => parts.push((0.0, "kernels in the simulator (in other host)".into())),
            }
        }
        if self.cpu_ms.get() > 0.0 {
            parts.push((self.cpu_ms.get(), format!("CPU reference {:.1}", self.cpu_ms.get())));
        }
        let other = total - parts.iter().map(|(ms, _)| ms).sum::<f64>();
        let mut line = format!("time: {total:.1} ms end to end = ");
        for (_, text) in &parts {
            line += text;
            line += " + ";
        }
        let _ = write!(line, "other host {:.1}", other.max(0.0));
        line
    }
}

/// `bytes` as KiB, MiB or GiB.
fn size(bytes: u64) -> String {
    let b = bytes as f64;
    if b >= 1073741824.0 {
        format!("{:.2} GiB", b / 1073741824.0)
    } else if b >= 1048576.0 {
        format!("{:.1} MiB", b / 1048576.0)
    } else {
        format!("{:.1} KiB", b / 1024.0)
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
