//! Built-in profiling, in the spirit of `nvprof`'s summary: what ran on the GPU (kernels and copies,
//! timed with CUDA events), what the host paid (driver start-up, context, module load,
//! allocations), and per kernel its resources, occupancy and achieved throughput against the
//! device's peaks.
//!
//! Off by default: a [`Device`](crate::Device) records nothing until
//! [`Device::enable_profiling`](crate::Device::enable_profiling), so an unprofiled run pays no extra
//! events or synchronisation. The kernel suite's binaries expose it as `--profile`.

use crate::device::StartupMemory;
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
    memory: StartupMemory,
}

impl Recorder {
    pub(crate) fn new(peaks: Peaks, startup: Vec<HostCost>, memory: StartupMemory) -> Recorder {
        Recorder {
            records: RefCell::default(),
            kernels: RefCell::default(),
            host: RefCell::new(startup),
            peaks,
            memory,
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
        let records = self.records.borrow();
        // Each activity's interval from the first one's start, ms, for the idle time.
        let mut intervals = Vec::with_capacity(records.len());
        for r in records.iter() {
            r.stop.synchronize().map_err(cuda("cuEventSynchronize"))?;
            let ms = r.stop.elapsed_time_f32(&r.start).map_err(cuda("cuEventElapsedTime"))? as f64;
            let from =
                r.start.elapsed_time_f32(&records[0].start).map_err(cuda("cuEventElapsedTime"))? as f64;
            let (key, bytes, work) = match &r.activity {
                Activity::Kernel { name, work } => (name.to_string(), 0, *work),
                Activity::Copy { direction: Direction::HostToDevice, bytes } => {
                    ("[CUDA memcpy HtoD]".into(), *bytes, None)
                }
                Activity::Copy { direction: Direction::DeviceToHost, bytes } => {
                    ("[CUDA memcpy DtoH]".into(), *bytes, None)
                }
            };
            let row = rows.entry(key.clone()).or_insert(Row { min_ms: f64::INFINITY, ..Row::default() });
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
            intervals.push((from, from + ms, key));
        }
        Ok(Report {
            device: device_name.into(),
            idle: Idle::of(intervals),
            rows: rows.into_iter().collect(),
            kernels: self.kernels.borrow().iter().map(|(k, v)| (k.to_string(), *v)).collect(),
            host: self.host.borrow().clone(),
            peaks: self.peaks,
            memory: self.memory,
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

/// When the GPU had nothing recorded to do, between the first recorded activity's start and the
/// last one's end: what a timeline shows as gaps, summed by the activity each gap followed (the
/// host's turn after it: a wait, an allocation, preparing the next launch).
#[derive(Debug, Clone, Default)]
pub struct Idle {
    /// From the first activity's start to the last one's end, ms.
    pub span_ms: f64,
    /// The part of the span with no activity running, ms.
    pub idle_ms: f64,
    /// Per activity that a gap followed: its name, the number of gaps and their total ms, largest
    /// total first.
    pub after: Vec<(String, u32, f64)>,
}

impl Idle {
    /// From `(start ms, end ms, name)` per activity (any order, overlapping on several streams).
    fn of(mut intervals: Vec<(f64, f64, String)>) -> Idle {
        intervals.sort_by(|a, b| a.0.total_cmp(&b.0));
        let mut after: BTreeMap<String, (u32, f64)> = BTreeMap::new();
        let (mut idle_ms, mut busy_until, mut last) = (0.0, f64::NEG_INFINITY, None::<&String>);
        for (start, end, name) in &intervals {
            if let Some(previous) = last.filter(|_| *start > busy_until) {
                let gap = after.entry(previous.clone()).or_default();
                gap.0 += 1;
                gap.1 += start - busy_until;
                idle_ms += start - busy_until;
            }
            if *end > busy_until {
                busy_until = *end;
                last = Some(name);
            }
        }
        let first = intervals.first().map_or(0.0, |i| i.0);
        let mut after: Vec<_> = after.into_iter().map(|(name, (n, ms))| (name, n, ms)).collect();
        after.sort_by(|a, b| b.2.total_cmp(&a.2));
        Idle { span_ms: (busy_until - first).max(0.0), idle_ms, after }
    }
}

/// A profile summary; `Display` prints it in nvprof's layout.
pub struct Report {
    device: String,
    idle: Idle,
    rows: Vec<(String, Row)>,
    kernels: Vec<(String, KernelInfo)>,
    host: Vec<HostCost>,
    peaks: Peaks,
    memory: StartupMemory,
}

impl Report {
    /// What opening the GPU took of its memory.
    pub fn startup_memory(&self) -> &StartupMemory {
        &self.memory
    }

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

    /// When the GPU had nothing recorded to do between the first activity and the last.
    pub fn idle(&self) -> &Idle {
        &self.idle
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
        let idle = &self.idle;
        if idle.span_ms > 0.0 {
            writeln!(
                f,
                "GPU idle: {:.3} ms of the {:.3} ms from the first activity to the last ({:.1}%); after:",
                idle.idle_ms,
                idle.span_ms,
                100.0 * idle.idle_ms / idle.span_ms
            )?;
            for (name, gaps, ms) in idle.after.iter().take(6) {
                writeln!(f, "  {ms:>10.3} ms  {gaps:>6} gap(s)  {name}")?;
            }
        }
        writeln!(f, "Host-side costs:")?;
        for c in &self.host {
            writeln!(f, "  {:>10.3} ms  {:>4} call(s)  {}", c.ms, c.calls, c.what)?;
        }
        writeln!(f, "GPU memory at start-up: {}", self.memory)?;
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

#[cfg(test)]
mod tests {
    use super::Idle;

    #[test]
    fn idle_time_is_the_span_less_the_union_of_activities() {
        let at = |start: f64, end: f64, name: &str| (start, end, name.to_string());
        // `b` overlaps `a` (two streams) and ends last, so the first gap (3 → 5) follows `b`; the
        // second (6 → 6.5) follows `c`; `d` inside `a` adds nothing.
        let idle = Idle::of(vec![
            at(5.0, 6.0, "c"),
            at(0.0, 2.0, "a"),
            at(6.5, 7.0, "a"),
            at(1.0, 3.0, "b"),
            at(0.5, 1.0, "d"),
        ]);
        assert_eq!((idle.span_ms, idle.idle_ms), (7.0, 2.5));
        assert_eq!(idle.after, vec![("b".to_string(), 1, 2.0), ("c".to_string(), 1, 0.5)]);
        let none = Idle::of(Vec::new());
        assert_eq!((none.span_ms, none.idle_ms, none.after.len()), (0.0, 0.0, 0));
    }
}
