//! Built-in profiling, in the spirit of `nvprof`'s summary: what ran on the GPU (kernels and copies,
//! timed with CUDA events), what the host paid (driver start-up, context, module load,
//! allocations), and per kernel its resources, occupancy and achieved throughput against the
//! device's peaks.
//!
//! Off by default: a [`Device`](crate::Device) records nothing until
//! [`Device::enable_profiling`](crate::Device::enable_profiling), so an unprofiled run pays no extra
//! events or synchronisation. Every binary exposes it as `--profile`.

use crate::error::{Result, cuda};
use cust::device::DeviceAttribute;
use cust::event::{Event, EventFlags};
use cust::function::{BlockSize, Function, FunctionAttribute};
use cust::stream::Stream;
use gpu_std::sim::LaunchConfig;
use std::cell::RefCell;
use std::collections::BTreeMap;
use std::fmt::{self, Write as _};

/// Useful work of one kernel launch, for throughput figures: bytes that must cross device memory
/// (each input read once, each output written once) and floating-point operations.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Work {
    /// Bytes read plus bytes written.
    pub bytes: f64,
    /// Floating-point operations (an FMA counts 2).
    pub flops: f64,
}

/// Copy direction.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Direction {
    HostToDevice,
    DeviceToHost,
}

enum Activity {
    Kernel { name: &'static str, work: Option<Work> },
    Copy { direction: Direction, bytes: u64 },
}

struct Record {
    activity: Activity,
    start: Event,
    stop: Event,
}

/// Resources and occupancy of a kernel, read from the driver at its first profiled launch.
#[derive(Debug, Clone, Copy)]
struct KernelInfo {
    cfg: LaunchConfig,
    registers: i32,
    static_shared: i32,
    local_bytes: i32,
    max_threads_per_block: i32,
    occupancy: f64,
}

/// Peak rates derived from the device's attributes.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Peaks {
    /// DRAM bandwidth, GB/s: 2 (DDR) × memory clock × bus width.
    gbs: f64,
    /// FP32 FMA throughput, GFLOP/s: SMs × 128 lanes × 2 × SM clock.
    gflops: f64,
    max_threads_per_sm: i32,
}

impl Peaks {
    pub(crate) fn of(device: &cust::device::Device) -> Result<Peaks> {
        let attr = |a| device.get_attribute(a).map_err(cuda("cuDeviceGetAttribute"));
        let mem_khz = attr(DeviceAttribute::MemoryClockRate)? as f64;
        let bus_bits = attr(DeviceAttribute::GlobalMemoryBusWidth)? as f64;
        let sm_khz = attr(DeviceAttribute::ClockRate)? as f64;
        let sms = attr(DeviceAttribute::MultiprocessorCount)? as f64;
        Ok(Peaks {
            gbs: 2.0 * mem_khz * 1e3 * bus_bits / 8.0 / 1e9,
            gflops: sms * 128.0 * 2.0 * sm_khz * 1e3 / 1e9,
            max_threads_per_sm: attr(DeviceAttribute::MaxThreadsPerMultiprocessor)?,
        })
    }
}

/// A host-side cost: what, how many times, total milliseconds.
#[derive(Debug, Clone)]
pub(crate) struct HostCost {
    pub what: String,
    pub calls: u32,
    pub ms: f64,
}

/// The recording side, owned by a profiling GPU device.
pub(crate) struct Recorder {
    records: RefCell<Vec<Record>>,
    kernels: RefCell<BTreeMap<&'static str, KernelInfo>>,
    host: RefCell<Vec<HostCost>>,
    peaks: Peaks,
}

impl Recorder {
    pub(crate) fn new(peaks: Peaks, startup: Vec<HostCost>) -> Recorder {
        Recorder {
            records: RefCell::default(),
            kernels: RefCell::default(),
            host: RefCell::new(startup),
            peaks,
        }
    }

    /// An event recorded now on `stream`, to open an activity.
    pub(crate) fn start(&self, stream: &Stream) -> Result<Event> {
        let event = Event::new(EventFlags::DEFAULT).map_err(cuda("cuEventCreate"))?;
        event.record(stream).map_err(cuda("cuEventRecord"))?;
        Ok(event)
    }

    pub(crate) fn kernel(
        &self,
        stream: &Stream,
        start: Event,
        function: &Function,
        name: &'static str,
        cfg: LaunchConfig,
        work: Option<Work>,
    ) -> Result<()> {
        let stop = self.start(stream)?;
        self.records.borrow_mut().push(Record { activity: Activity::Kernel { name, work }, start, stop });
        if self.kernels.borrow().contains_key(name) {
            return Ok(());
        }
        let attr = |a| function.get_attribute(a).map_err(cuda("cuFuncGetAttribute"));
        let threads = cfg.block.volume() as i32;
        let blocks = function
            .max_active_blocks_per_multiprocessor(
                BlockSize::xyz(cfg.block.x, cfg.block.y, cfg.block.z),
                cfg.shared_bytes as usize,
            )
            .map_err(cuda("cuOccupancyMaxActiveBlocksPerMultiprocessor"))?;
        let info = KernelInfo {
            cfg,
            registers: attr(FunctionAttribute::NumRegisters)?,
            static_shared: attr(FunctionAttribute::SharedMemorySizeBytes)?,
            local_bytes: attr(FunctionAttribute::LocalSizeBytes)?,
            max_threads_per_block: attr(FunctionAttribute::MaxThreadsPerBlock)?,
            occupancy: (blocks as i32 * threads) as f64 / self.peaks.max_threads_per_sm as f64,
        };
        self.kernels.borrow_mut().insert(name, info);
        Ok(())
    }

    pub(crate) fn copy(&self, stream: &Stream, start: Event, direction: Direction, bytes: u64) -> Result<()> {
        let stop = self.start(stream)?;
        self.records.borrow_mut().push(Record { activity: Activity::Copy { direction, bytes }, start, stop });
        Ok(())
    }

    pub(crate) fn host_cost(&self, what: &str, ms: f64) {
        let mut host = self.host.borrow_mut();
        match host.iter_mut().find(|c| c.what == what) {
            Some(c) => {
                c.calls += 1;
                c.ms += ms;
            }
            None => host.push(HostCost { what: what.into(), calls: 1, ms }),
        }
    }

    /// Waits for every recorded activity and summarises them.
    pub(crate) fn report(&self, device_name: &str) -> Result<Report> {
        let mut rows: BTreeMap<String, Row> = BTreeMap::new();
        for r in self.records.borrow().iter() {
            r.stop.synchronize().map_err(cuda("cuEventSynchronize"))?;
            let ms = r.stop.elapsed_time_f32(&r.start).map_err(cuda("cuEventElapsedTime"))? as f64;
            let (key, bytes, work) = match &r.activity {
                Activity::Kernel { name, work } => (name.to_string(), 0, *work),
                Activity::Copy { direction: Direction::HostToDevice, bytes } => {
                    ("[CUDA memcpy HtoD]".into(), *bytes, None)
                }
                Activity::Copy { direction: Direction::DeviceToHost, bytes } => {
                    ("[CUDA memcpy DtoH]".into(), *bytes, None)
                }
            };
            let row = rows.entry(key).or_insert(Row { min_ms: f64::INFINITY, ..Row::default() });
            row.calls += 1;
            row.total_ms += ms;
            row.min_ms = row.min_ms.min(ms);
            row.max_ms = row.max_ms.max(ms);
            row.bytes += bytes;
            if let Some(w) = work {
                row.work_bytes += w.bytes;
                row.work_flops += w.flops;
                row.work_ms += ms;
            }
        }
        Ok(Report {
            device: device_name.into(),
            rows: rows.into_iter().collect(),
            kernels: self.kernels.borrow().iter().map(|(k, v)| (k.to_string(), *v)).collect(),
            host: self.host.borrow().clone(),
            peaks: self.peaks,
        })
    }
}

#[derive(Debug, Clone, Default)]
struct Row {
    calls: u32,
    total_ms: f64,
    min_ms: f64,
    max_ms: f64,
    bytes: u64,
    work_bytes: f64,
    work_flops: f64,
    work_ms: f64,
}

/// A profile summary; `Display` prints it in nvprof's layout.
pub struct Report {
    device: String,
    rows: Vec<(String, Row)>,
    kernels: Vec<(String, KernelInfo)>,
    host: Vec<HostCost>,
    peaks: Peaks,
}

impl Report {
    /// Total milliseconds and number of calls recorded under `name` (a kernel, or
    /// `[CUDA memcpy HtoD]` / `[CUDA memcpy DtoH]`).
    pub fn activity(&self, name: &str) -> Option<(f64, u32)> {
        self.rows.iter().find(|(n, _)| n == name).map(|(_, r)| (r.total_ms, r.calls))
    }

    /// Bytes recorded under a copy row (`[CUDA memcpy HtoD]` / `[CUDA memcpy DtoH]`).
    pub fn copied_bytes(&self, name: &str) -> Option<u64> {
        self.rows.iter().find(|(n, _)| n == name).map(|(_, r)| r.bytes)
    }

    /// GPU milliseconds of every kernel recorded (CUDA events), and the number of launches.
    pub fn kernel_totals(&self) -> (f64, u32) {
        self.rows
            .iter()
            .filter(|(name, _)| self.kernels.iter().any(|(k, _)| k == name))
            .fold((0.0, 0), |(ms, calls), (_, r)| (ms + r.total_ms, calls + r.calls))
    }

    /// Registers per thread the driver reports for a profiled kernel.
    pub fn registers(&self, kernel: &str) -> Option<i32> {
        self.kernels.iter().find(|(n, _)| n == kernel).map(|(_, k)| k.registers)
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let gpu_total: f64 = self.rows.iter().map(|(_, r)| r.total_ms).sum();
        writeln!(f, "==profile== {}", self.device)?;
        writeln!(f, "GPU activities (CUDA events):")?;
        writeln!(
            f,
            "  {:>6}  {:>10}  {:>6}  {:>10}  {:>10}  {:>10}  name",
            "time%", "total ms", "calls", "avg ms", "min ms", "max ms"
        )?;
        let mut rows: Vec<_> = self.rows.iter().collect();
        rows.sort_by(|a, b| b.1.total_ms.total_cmp(&a.1.total_ms));
        for (name, r) in rows {
            let mut line = String::new();
            write!(
                line,
                "  {:>5.1}%  {:>10.4}  {:>6}  {:>10.4}  {:>10.4}  {:>10.4}  {name}",
                100.0 * r.total_ms / gpu_total.max(f64::MIN_POSITIVE),
                r.total_ms,
                r.calls,
                r.total_ms / r.calls as f64,
                r.min_ms,
                r.max_ms
            )?;
            if r.bytes > 0 {
                write!(
                    line,
                    "  {:.2} MiB, {:.1} GB/s",
                    r.bytes as f64 / 1048576.0,
                    r.bytes as f64 / (r.total_ms * 1e-3) / 1e9
                )?;
            }
            writeln!(f, "{line}")?;
        }
        writeln!(f, "Host-side costs:")?;
        for c in &self.host {
            writeln!(f, "  {:>10.3} ms  {:>4} call(s)  {}", c.ms, c.calls, c.what)?;
        }
        writeln!(
            f,
            "Kernels (device peaks from its attributes: {:.0} GB/s DRAM, {:.1} TFLOP/s FP32):",
            self.peaks.gbs,
            self.peaks.gflops / 1e3
        )?;
        for (name, k) in &self.kernels {
            writeln!(
                f,
                "  {name}: grid {} block {}, {} registers, {} B static + {} B dynamic shared, {} B local (spills), \
                 max {} threads/block, theoretical occupancy {:.0}%",
                k.cfg.grid,
                k.cfg.block,
                k.registers,
                k.static_shared,
                k.cfg.shared_bytes,
                k.local_bytes,
                k.max_threads_per_block,
                100.0 * k.occupancy
            )?;
            if let Some((_, r)) = self.rows.iter().find(|(n, _)| n == name).filter(|(_, r)| r.work_ms > 0.0) {
                let gbs = r.work_bytes / (r.work_ms * 1e-3) / 1e9;
                let gflops = r.work_flops / (r.work_ms * 1e-3) / 1e9;
                writeln!(
                    f,
                    "      achieved {gbs:.0} GB/s ({:.1}% of peak), {gflops:.0} GFLOP/s ({:.1}% of FP32 peak)",
                    100.0 * gbs / self.peaks.gbs,
                    100.0 * gflops / self.peaks.gflops
                )?;
            }
        }
        Ok(())
    }
}
