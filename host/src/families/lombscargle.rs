//! Lomb-Scargle periodogram (`scipy.signal.lombscargle`): safe wrapper of `kernels::lombscargle`
//! and the f64 CPU reference.
//!
//! Inputs are sample times `x`, values `y` (same length `n ≥ 1`) and angular frequencies `ω > 0`
//! (radians per unit of `x`). The output is `P(ω)` for each frequency, optionally after subtracting
//! the mean of `y` (`precenter`) and scaled by `2/Σy²` (`normalize`; `Σy²` of the `y` the
//! periodogram is computed from, i.e. after centring).
//!
//! The semantics are those of `scipy.signal.lombscargle` in SciPy 1.15 – 1.18 with its defaults
//! `floating_mean=False` and no `weights` (and `normalize` True or False; SciPy's
//! `normalize="amplitude"` is not offered). Up to SciPy 1.14, `normalize` divided by `Σy²` of
//! the `y` before centring, so with `precenter` those versions' values are smaller by
//! `Σ(y − ȳ)²/Σy²`. SciPy 1.17 deprecates `precenter` (removed in 1.19); passing `y − mean(y)`
//! is its exact substitute there, and here.
//!
//! **ω ≤ 0 is rejected** with [`Error::InvalidInput`]: the method's time offset is
//! `τ = atan2(2cs, cc − ss)/(2ω)`, undefined at ω = 0 (where every sine term vanishes and `P` is a
//! 0/0 limit), and `P(−ω) = P(ω)` adds nothing. Drop ω = 0 from the grid (with `precenter` the mean
//! it measures is 0 anyway). Non-finite samples or frequencies, mismatched or empty arrays, and
//! `normalize` with `Σy² = 0` (all `y` zero) are rejected too.
//!
//! Device code: `kernels/src/lombscargle.rs`; tests: `tests/lombscargle.rs`; benchmark:
//! `benches/lombscargle.rs`; command: `cargo run --release --bin lombscargle`.

use crate::error::{Error, Result, ensure};
use crate::profile::Work;
use crate::{Buffer, BufferView, BufferViewMut, Device, Dim3, Element, LaunchConfig, Queue};
use kernels::lombscargle::{DIRECT_SAMPLE_VALUES, RECURRENCE_SAMPLE_VALUES, RECURRENCE_STEPS};
use rand::{Rng, SeedableRng, rngs::SmallRng};
use rayon::prelude::*;

/// Which kernel computes the periodogram.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Variant {
    /// One thread per frequency, libdevice `sincos` per sample (f32 or f64).
    Precise,
    /// One thread per frequency, hardware `sin.approx`/`cos.approx` per sample (f32 only).
    Fast,
    /// Rotation recurrence over consecutive frequencies of a uniform grid (three FMAs per sample
    /// and frequency instead of a `sincos`), re-anchored by a direct `sin`/`cos` every
    /// `kernels::lombscargle::RECURRENCE_STEPS` frequencies: the hardware approximations in f32,
    /// libdevice in f64.
    Recurrence,
}

pub use crate::Precision;

impl std::fmt::Display for Variant {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Variant::Precise => "precise",
            Variant::Fast => "fast",
            Variant::Recurrence => "recurrence",
        })
    }
}

/// What to compute and how.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Options {
    /// The kernel.
    pub variant: Variant,
    /// Its precision.
    pub precision: Precision,
    /// Subtract the mean of `y` first.
    pub precenter: bool,
    /// Multiply by `2/Σy²` (of `y` after any centring: SciPy ≥ 1.15's convention).
    pub normalize: bool,
}

impl Default for Options {
    /// Precise f64, no centring, no normalisation (SciPy's defaults).
    fn default() -> Self {
        Options { variant: Variant::Precise, precision: Precision::F64, precenter: false, normalize: false }
    }
}

/// Threads per block of the default launches.
pub const BLOCK: u32 = 128;

/// Samples per shared-memory tile of the default launches (fewer when there are fewer samples).
pub const TILE: usize = 1024;

/// Largest number of samples or frequencies the kernels' `u32` indexing takes.
pub const MAX_LEN: usize = i32::MAX as usize;

/// Angular frequency `k` of the grid `min + k·(max − min)/(count − 1)`, `k < count`: `count`
/// uniformly spaced values from `min` to `max` (the last one within rounding of `max`), the form
/// the recurrence variant needs.
pub fn frequency_grid(min: f64, max: f64, count: usize) -> Result<Vec<f64>> {
    ensure(min.is_finite() && max.is_finite(), || format!("frequency range [{min}, {max}] is not finite"))?;
    ensure(min > 0.0, || format!("the lowest angular frequency must be > 0, got {min}"))?;
    ensure(max >= min, || format!("the frequency range [{min}, {max}] is empty (max < min)"))?;
    ensure(count >= 1, || "the frequency count must be at least 1".into())?;
    ensure(count <= MAX_LEN, || format!("{count} frequencies exceed the limit of {MAX_LEN}"))?;
    let step = if count > 1 { (max - min) / (count - 1) as f64 } else { 0.0 };
    Ok((0..count).map(|k| min + k as f64 * step).collect())
}

/// The benchmark signal of the issue: `candidates` times evenly spaced in `[0.01, 10π]`, each kept
/// with probability `keep` (seeded), and `y = 2·cos(x + π/2)` (angular frequency 1). Returns
/// `(x, y)`; at least one sample is kept.
pub fn benchmark_signal(candidates: usize, keep: f64, seed: u64) -> (Vec<f64>, Vec<f64>) {
    let (lo, hi) = (0.01, 10.0 * std::f64::consts::PI);
    let mut rng = SmallRng::seed_from_u64(seed);
    let step = if candidates > 1 { (hi - lo) / (candidates - 1) as f64 } else { 0.0 };
    let mut x: Vec<f64> =
        (0..candidates).map(|i| lo + i as f64 * step).filter(|_| rng.random::<f64>() < keep).collect();
    if x.is_empty() {
        x.push(lo);
    }
    let y = x.iter().map(|&t| 2.0 * (t + std::f64::consts::FRAC_PI_2).cos()).collect();
    (x, y)
}

/// The frequency of the highest finite power and that power: `(ω, P)`.
pub fn peak(freqs: &[f64], power: &[f64]) -> Option<(f64, f64)> {
    freqs
        .iter()
        .zip(power)
        .filter(|(_, p)| p.is_finite())
        .map(|(&w, &p)| (w, p))
        .max_by(|a, b| a.1.total_cmp(&b.1))
}

/// Checks the inputs (see the module documentation).
pub fn validate(x: &[f64], y: &[f64], freqs: &[f64]) -> Result<()> {
    ensure(!x.is_empty(), || "no samples: x and y are empty".into())?;
    ensure(x.len() == y.len(), || format!("x has {} samples but y has {}", x.len(), y.len()))?;
    ensure(x.len() <= MAX_LEN, || format!("{} samples exceed the limit of {MAX_LEN}", x.len()))?;
    ensure(!freqs.is_empty(), || "no frequencies".into())?;
    ensure(freqs.len() <= MAX_LEN, || format!("{} frequencies exceed the limit of {MAX_LEN}", freqs.len()))?;
    for (name, values) in [("x", x), ("y", y), ("ω", freqs)] {
        if let Some(i) = values.iter().position(|v| !v.is_finite()) {
            return Err(Error::InvalidInput(format!("{name}[{i}] = {} is not finite", values[i])));
        }
    }
    if let Some(k) = freqs.iter().position(|&w| w <= 0.0) {
        return Err(Error::InvalidInput(format!(
            "angular frequency ω[{k}] = {} is not positive: the periodogram is defined for ω > 0 \
             (τ = atan2(2cs, cc − ss)/(2ω)); remove ω ≤ 0 from the grid",
            freqs[k]
        )));
    }
    Ok(())
}

/// `y` centred if asked, and the output scale: `2/Σy²` of that (centred) `y` when normalising, as
/// SciPy ≥ 1.15 does, else 1.
fn prepare_values(y: &[f64], precenter: bool, normalize: bool) -> Result<(Vec<f64>, f64)> {
    let mean = if precenter { y.iter().sum::<f64>() / y.len() as f64 } else { 0.0 };
    let y: Vec<f64> = y.iter().map(|v| v - mean).collect();
    let scale = if normalize {
        let energy: f64 = y.iter().map(|v| v * v).sum();
        ensure(energy > 0.0, || {
            if precenter {
                "cannot normalise: Σ(y − ȳ)² = 0 (y is constant)".into()
            } else {
                "cannot normalise: Σy² = 0 (y is all zeros)".into()
            }
        })?;
        2.0 / energy
    } else {
        1.0
    };
    Ok((y, scale))
}

/// The uniform grid `(ω_0, Δω)` that `freqs` follows, within a few f64 roundings of its largest
/// value; the recurrence variant's requirement.
pub fn uniform_grid(freqs: &[f64]) -> Result<(f64, f64)> {
    ensure(!freqs.is_empty(), || "no frequencies".into())?;
    let m = freqs.len();
    let start = freqs[0];
    let step = if m > 1 { (freqs[m - 1] - start) / (m - 1) as f64 } else { 0.0 };
    let largest = freqs.iter().fold(0.0f64, |a, w| a.max(w.abs()));
    let tolerance = 16.0 * f64::EPSILON * largest;
    if let Some(k) = (0..m).find(|&k| (freqs[k] - (start + k as f64 * step)).abs() > tolerance) {
        return Err(Error::InvalidInput(format!(
            "the recurrence variant needs uniformly spaced frequencies ω_k = ω_0 + k·Δω, but ω[{k}] = {} \
             is not ω_0 + {k}·Δω = {} (the precise and fast variants take any frequencies)",
            freqs[k],
            start + k as f64 * step
        )));
    }
    Ok((start, step))
}

/// CPU reference in f64, parallel over frequencies (rayon): SciPy's algorithm as written — the five
/// sums `xc, xs, cc, ss, cs`, `τ = atan2(2cs, cc − ss)/(2ω)`, then `P(ω)` with `cos ωτ`, `sin ωτ` —
/// with the kernels' convention that a term with a zero denominator contributes 0.
pub fn lombscargle_reference(
    x: &[f64],
    y: &[f64],
    freqs: &[f64],
    precenter: bool,
    normalize: bool,
) -> Result<Vec<f64>> {
    validate(x, y, freqs)?;
    let (y, scale) = prepare_values(y, precenter, normalize)?;
    let term = |num: f64, den: f64| if den > 0.0 { num * num / den } else { 0.0 };
    Ok(freqs
        .par_iter()
        .with_min_len(64)
        .map(|&w| {
            let (mut xc, mut xs, mut cc, mut ss, mut cs) = (0.0, 0.0, 0.0, 0.0, 0.0);
            for (&xj, &yj) in x.iter().zip(&y) {
                let (s, c) = (w * xj).sin_cos();
                xc += yj * c;
                xs += yj * s;
                cc += c * c;
                ss += s * s;
                cs += c * s;
            }
            let tau = (2.0 * cs).atan2(cc - ss) / (2.0 * w);
            let (st, ct) = (w * tau).sin_cos();
            let (ct2, st2, cst2) = (ct * ct, st * st, 2.0 * ct * st);
            let first = term(ct * xc + st * xs, ct2 * cc + cst2 * cs + st2 * ss);
            let second = term(ct * xs - st * xc, ct2 * ss - cst2 * cs + st2 * cc);
            scale * 0.5 * (first + second)
        })
        .collect())
}

/// The periodogram on `device` (GPU or simulator): validates, uploads, launches once, downloads.
pub fn lombscargle(
    device: &Device,
    x: &[f64],
    y: &[f64],
    freqs: &[f64],
    options: &Options,
) -> Result<Vec<f64>> {
    let mut plan = Plan::new(device, x, y, freqs, options)?;
    plan.launch()?;
    plan.result()
}

/// Device arrays of one precision.
struct Arrays<T: Element> {
    x: Buffer<T>,
    y: Buffer<T>,
    /// The frequencies (direct kernels only).
    freqs: Option<Buffer<T>>,
    power: Buffer<T>,
}

enum Data {
    F32(Arrays<f32>),
    F64(Arrays<f64>),
}

fn fast_is_f32_only() -> Error {
    Error::InvalidInput(
        "the fast variant is f32 only (it uses the f32 hardware sin.approx/cos.approx)".into(),
    )
}

/// A direct variant's plan without its frequency array (the plan uploads one for every direct
/// variant, so this is unreachable through [`Plan::new`]).
fn no_frequencies() -> Error {
    Error::InvalidInput("the direct kernels need the frequency array".into())
}

/// Converts to f32, refusing values beyond its range.
fn to_f32(name: &str, values: &[f64]) -> Result<Vec<f32>> {
    if let Some(i) = values.iter().position(|v| v.abs() > f32::MAX as f64) {
        return Err(Error::InvalidInput(format!("{name}[{i}] = {:e} is out of f32 range", values[i])));
    }
    Ok(values.iter().map(|&v| v as f32).collect())
}

fn upload<T: Element>(device: &Device, x: &[T], y: &[T], freqs: Option<&[T]>, m: usize) -> Result<Arrays<T>> {
    Ok(Arrays {
        x: device.upload(x)?,
        y: device.upload(y)?,
        freqs: freqs.map(|f| device.upload(f)).transpose()?,
        power: device.alloc(m)?,
    })
}

/// A periodogram ready to launch: inputs on the device, launch shape chosen. For benchmarks
/// ([`Plan::launch`] only queues the kernel) and tests (other launch shapes).
pub struct Plan<'d> {
    device: &'d Device,
    options: Options,
    n: u32,
    m: u32,
    /// `(ω_0, Δω)` for the recurrence variant.
    grid: (f64, f64),
    scale: f64,
    data: Data,
    block: u32,
    blocks: u32,
    tile: usize,
}

impl<'d> Plan<'d> {
    /// Validates and uploads; the launch shape is the default ([`BLOCK`] threads per block, enough
    /// blocks for one frequency (or recurrence chunk) per thread, [`TILE`] samples per tile).
    pub fn new(device: &'d Device, x: &[f64], y: &[f64], freqs: &[f64], options: &Options) -> Result<Self> {
        validate(x, y, freqs)?;
        let grid = match options.variant {
            Variant::Recurrence => uniform_grid(freqs)?,
            _ => (0.0, 0.0),
        };
        if options.variant == Variant::Fast && options.precision == Precision::F64 {
            return Err(fast_is_f32_only());
        }
        let (y, scale) = prepare_values(y, options.precenter, options.normalize)?;
        let direct = options.variant != Variant::Recurrence;
        let m = freqs.len();
        let data = match options.precision {
            Precision::F32 => {
                let (x, y) = (to_f32("x", x)?, to_f32("y", &y)?);
                let freqs = if direct { Some(to_f32("ω", freqs)?) } else { None };
                Data::F32(upload(device, &x, &y, freqs.as_deref(), m)?)
            }
            Precision::F64 => Data::F64(upload(device, x, &y, direct.then_some(freqs), m)?),
        };
        let mut plan = Plan {
            device,
            options: *options,
            n: x.len() as u32,
            m: m as u32,
            grid,
            scale,
            data,
            block: BLOCK,
            blocks: 0,
            tile: TILE,
        };
        plan.blocks = plan.blocks_for_one_pass(BLOCK);
        Ok(plan)
    }

    /// Blocks of `block` threads that give every frequency (or recurrence chunk) its own thread.
    fn blocks_for_one_pass(&self, block: u32) -> u32 {
        let items = match self.options.variant {
            Variant::Recurrence => self.m.div_ceil(RECURRENCE_STEPS as u32),
            _ => self.m,
        };
        items.div_ceil(block)
    }

    /// Another launch shape: `block` threads per block (a multiple of 32, ≤ 1024), `blocks` blocks
    /// (`None`: one frequency or chunk per thread; fewer make the kernel's grid-stride loop take
    /// several rounds), `tile` samples per shared-memory tile (≥ 1).
    pub fn with_launch(mut self, block: u32, blocks: Option<u32>, tile: usize) -> Result<Self> {
        ensure(block.is_multiple_of(32) && (32..=1024).contains(&block), || {
            format!("block of {block} threads: use a multiple of 32 up to 1024")
        })?;
        ensure(blocks != Some(0), || "zero blocks".into())?;
        ensure((1..=1 << 16).contains(&tile), || format!("tile of {tile} samples: use 1 to 65536"))?;
        self.block = block;
        self.blocks = blocks.unwrap_or_else(|| self.blocks_for_one_pass(block));
        self.tile = tile;
        Ok(self)
    }

    /// The PTX entry this plan launches.
    pub fn kernel_name(&self) -> &'static str {
        use kernels::lombscargle as k;
        match (self.options.variant, &self.data) {
            (Variant::Precise, Data::F32(_)) => k::LOMBSCARGLE_F32.name(),
            (Variant::Precise, Data::F64(_)) => k::LOMBSCARGLE_F64.name(),
            (Variant::Fast, _) => k::LOMBSCARGLE_FAST_F32.name(),
            (Variant::Recurrence, Data::F32(_)) => k::LOMBSCARGLE_RECURRENCE_F32.name(),
            (Variant::Recurrence, Data::F64(_)) => k::LOMBSCARGLE_RECURRENCE_F64.name(),
        }
    }

    /// The launch configuration: grid, block, and the shared bytes of one tile.
    pub fn config(&self) -> LaunchConfig {
        let value_bytes = if matches!(self.data, Data::F32(_)) { 4 } else { 8 };
        launch_config(self.options.variant, value_bytes, self.n, self.block, self.blocks, self.tile)
    }

    /// Queues the kernel (on a GPU it runs asynchronously; [`Plan::result`] waits).
    pub fn launch(&mut self) -> Result<()> {
        use kernels::lombscargle as k;
        let (n, m, cfg) = (self.n, self.m, self.config());
        let (omega0, domega) = self.grid;
        let variant = self.options.variant;
        let scale = self.scale;
        let device = self.device;
        let queue = device.queue();
        // Per sample and frequency: five FMAs into the sums (xc, xs, cc, ss, cs); the sin/cos are
        // not counted. Bytes: the samples and frequencies read once, the powers written once.
        let bytes_per_value = if matches!(self.data, Data::F32(_)) { 4.0 } else { 8.0 };
        let work = Some(Work {
            bytes: bytes_per_value * (2.0 * n as f64 + 2.0 * m as f64),
            flops: 10.0 * n as f64 * m as f64,
        });
        // SAFETY: any 1-D launch with at least one staged sample of shared memory (`config`); the
        // slices carry the counts (`n` samples, `m` frequencies and powers).
        unsafe {
            match &mut self.data {
                Data::F32(a) => {
                    let s = scale as f32;
                    match (variant, &a.freqs) {
                        (Variant::Precise, Some(f)) => device.launch_counted(
                            queue,
                            &k::LOMBSCARGLE_F32,
                            cfg,
                            (&a.x, &a.y, f, s, &mut a.power),
                            work,
                        ),
                        (Variant::Fast, Some(f)) => device.launch_counted(
                            queue,
                            &k::LOMBSCARGLE_FAST_F32,
                            cfg,
                            (&a.x, &a.y, f, s, &mut a.power),
                            work,
                        ),
                        (Variant::Recurrence, _) => device.launch_counted(
                            queue,
                            &k::LOMBSCARGLE_RECURRENCE_F32,
                            cfg,
                            (&a.x, &a.y, omega0 as f32, domega as f32, s, &mut a.power),
                            work,
                        ),
                        (_, None) => Err(no_frequencies()),
                    }
                }
                Data::F64(a) => match (variant, &a.freqs) {
                    (Variant::Precise, Some(f)) => device.launch_counted(
                        queue,
                        &k::LOMBSCARGLE_F64,
                        cfg,
                        (&a.x, &a.y, f, scale, &mut a.power),
                        work,
                    ),
                    (Variant::Fast, _) => Err(fast_is_f32_only()),
                    (Variant::Recurrence, _) => device.launch_counted(
                        queue,
                        &k::LOMBSCARGLE_RECURRENCE_F64,
                        cfg,
                        (&a.x, &a.y, omega0, domega, scale, &mut a.power),
                        work,
                    ),
                    (Variant::Precise, None) => Err(no_frequencies()),
                },
            }
        }
    }

    /// Waits for the launched kernel and returns `P(ω_k)` for every frequency, as f64.
    pub fn result(&self) -> Result<Vec<f64>> {
        Ok(match &self.data {
            Data::F32(a) => self.device.download(&a.power)?.into_iter().map(f64::from).collect(),
            Data::F64(a) => self.device.download(&a.power)?,
        })
    }
}

/// The launch of `variant` over `n` samples: `blocks` blocks of `block` threads, shared memory for a
/// tile of `tile` samples (fewer when there are fewer samples) of `value_bytes`-byte values.
fn launch_config(
    variant: Variant,
    value_bytes: usize,
    n: u32,
    block: u32,
    blocks: u32,
    tile: usize,
) -> LaunchConfig {
    let values = match variant {
        Variant::Recurrence => RECURRENCE_SAMPLE_VALUES,
        _ => DIRECT_SAMPLE_VALUES,
    };
    let tile = tile.min(n as usize);
    LaunchConfig {
        grid: Dim3::x(blocks),
        block: Dim3::x(block),
        shared_bytes: (tile * values * value_bytes) as u32,
    }
}

/// Queues the precise f64 kernel on `queue` over views: `x` and `y` of `n` samples, `freqs` and
/// `power` of `m` values; `scale` multiplies every power (`2/Σy²` to normalise, else 1). The
/// lengths are checked; the values are not read on the host (a non-finite one gives NaN powers,
/// as SciPy's would). What a binding runs on another library's arrays.
pub fn launch_precise_f64_on(
    device: &Device,
    queue: &Queue,
    x: BufferView<'_, f64>,
    y: BufferView<'_, f64>,
    freqs: BufferView<'_, f64>,
    scale: f64,
    power: BufferViewMut<'_, f64>,
) -> Result<()> {
    let (n, m) = (x.len(), freqs.len());
    ensure(n > 0, || "no samples: x and y are empty".into())?;
    ensure(y.len() == n, || format!("x has {n} samples but y has {}", y.len()))?;
    ensure(n <= MAX_LEN, || format!("{n} samples exceed the limit of {MAX_LEN}"))?;
    ensure(m > 0, || "no frequencies".into())?;
    ensure(m <= MAX_LEN, || format!("{m} frequencies exceed the limit of {MAX_LEN}"))?;
    ensure(power.len() == m, || format!("{m} frequencies but room for {} powers", power.len()))?;
    let cfg = launch_config(Variant::Precise, 8, n as u32, BLOCK, (m as u32).div_ceil(BLOCK), TILE);
    let work =
        Some(Work { bytes: 8.0 * (2.0 * n as f64 + 2.0 * m as f64), flops: 10.0 * n as f64 * m as f64 });
    // SAFETY: a 1-D launch with at least one staged sample of shared memory; the views carry the
    // counts (`n` samples, `m` frequencies and powers).
    unsafe {
        device.launch_counted(
            queue,
            &kernels::lombscargle::LOMBSCARGLE_F64,
            cfg,
            (x, y, freqs, scale, power),
            work,
        )
    }
}

/// `max|P − P_ref| / max|P_ref|`: the error measure of the tests and the benchmark (NaN in `power`
/// gives NaN).
pub fn relative_error(power: &[f64], reference: &[f64]) -> f64 {
    let scale = reference.iter().fold(0.0f64, |a, p| a.max(p.abs()));
    let worst = power
        .iter()
        .zip(reference)
        .map(|(p, r)| (p - r).abs())
        .fold(0.0f64, |a, e| if e.is_nan() || a.is_nan() { f64::NAN } else { a.max(e) });
    if power.len() != reference.len() { f64::NAN } else { worst / scale }
}
