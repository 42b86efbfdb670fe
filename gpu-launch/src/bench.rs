//! Helpers for the benchmark programs in `benches/` (`cargo bench --bench <family>`): statistics
//! over event-timed runs, a markdown table, so every family reports the same way, and [`run`] for
//! their `main`.

use std::fmt::Write as _;
use std::process::ExitCode;

/// Runs a benchmark program's body: on error (no GPU, a failed launch) prints `error: <message>`
/// (an `anyhow` error's causes joined by `: `) on one line, without a backtrace, and exits with
/// status 1.
pub fn run<E: std::fmt::Display>(body: impl FnOnce() -> Result<(), E>) -> ExitCode {
    match body() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// Summary of repeated timings, milliseconds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Stats {
    /// Median.
    pub median_ms: f64,
    /// Fastest run.
    pub min_ms: f64,
    /// Slowest run.
    pub max_ms: f64,
    /// Number of runs.
    pub runs: usize,
}

impl Stats {
    /// Statistics of `times_ms` (at least one value).
    pub fn of(times_ms: &[f64]) -> Stats {
        assert!(!times_ms.is_empty(), "no timings");
        let mut sorted = times_ms.to_vec();
        sorted.sort_by(f64::total_cmp);
        let n = sorted.len();
        let median_ms = if n % 2 == 1 { sorted[n / 2] } else { 0.5 * (sorted[n / 2 - 1] + sorted[n / 2]) };
        Stats { median_ms, min_ms: sorted[0], max_ms: sorted[n - 1], runs: n }
    }
}

impl Stats {
    /// Wall-clock statistics of `runs` calls of `work` (end-to-end times, host included).
    pub fn wall<E>(runs: usize, mut work: impl FnMut() -> Result<(), E>) -> Result<Stats, E> {
        let mut times = Vec::with_capacity(runs);
        for _ in 0..runs {
            let start = std::time::Instant::now();
            work()?;
            times.push(start.elapsed().as_secs_f64() * 1e3);
        }
        Ok(Stats::of(&times))
    }
}

/// A markdown table built row by row.
pub struct Table {
    text: String,
}

impl Table {
    /// A table with these column headers.
    pub fn new(headers: &[&str]) -> Table {
        let mut text = format!("| {} |\n", headers.join(" | "));
        writeln!(text, "|{}", "---|".repeat(headers.len())).unwrap();
        Table { text }
    }

    /// Appends a row.
    pub fn row(&mut self, cells: &[String]) {
        writeln!(self.text, "| {} |", cells.join(" | ")).unwrap();
    }

    /// The markdown text.
    pub fn render(&self) -> &str {
        &self.text
    }
}
