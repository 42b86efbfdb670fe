//! Lomb-Scargle periodogram of unevenly sampled data (`scipy.signal.lombscargle`).
//!
//! For samples `(x_j, y_j)`, `j < n`, and an angular frequency `ω`, with `θ_j = ω·x_j`, the kernels
//! accumulate the sums `xc = Σ y cos θ`, `xs = Σ y sin θ`, `ss = Σ sin² θ` and `cs = Σ cos θ sin θ`,
//! take `cc = Σ cos² θ = n − ss`, and finish with `power`: the time offset `τ` of the method enters
//! only through `ωτ = ½·atan2(2cs, cc − ss)`, so no kernel divides by `ω`, and
//!
//! `P(ω) = ½[(cτ·xc + sτ·xs)² / (cτ²·cc + 2cτsτ·cs + sτ²·ss) + (cτ·xs − sτ·xc)² / (cτ²·ss − 2cτsτ·cs + sτ²·cc)]`
//!
//! with `cτ = cos ωτ`, `sτ = sin ωτ`, times a caller-given `scale` (1, or `2/Σy²` to normalise).
//! A term whose denominator is not positive (all samples at one phase modulo π, e.g. a single
//! sample) contributes 0: its numerator is then 0 as well.
//!
//! `cc` is derived from `ss` rather than summed: `ss` is the small one at low frequencies, where
//! `n − cc` would cancel; `cc` small needs every phase near π/2 modulo π.
//!
//! Variants (every one handles any `n ≥ 1` and any number of frequencies, with a grid-stride loop):
//! * **direct** ([`lombscargle`], entries `lombscargle_f32`, `lombscargle_f64`): one thread per
//!   frequency, libdevice `sincos` per sample;
//! * **fast** ([`lombscargle_fast_f32`]): the same with the hardware `sin.approx`/`cos.approx`;
//! * **recurrence** ([`lombscargle_recurrence`], entries `lombscargle_recurrence_f32`,
//!   `lombscargle_recurrence_f64`): for a uniform
//!   frequency grid `ω_k = ω_0 + k·Δω`, each thread owns [`RECURRENCE_STEPS`] consecutive
//!   frequencies. Per sample it evaluates `sin/cos(ω x_j)` directly once (the re-anchoring: the
//!   hardware approximations in f32, libdevice in f64) and advances to the next frequency by the
//!   rotation by `δ_j = Δω·x_j`, with per-sample constants staged in shared memory per tile of
//!   samples. The special-function work per sample and frequency drops from a `sincos` to three
//!   FMAs (plus the four of the sums), and the rounding error of the recurrence grows at most
//!   linearly over the [`RECURRENCE_STEPS`] − 1 steps between anchors. In f32 the hardware anchor
//!   (about `|ω x|·2^-23` absolute, the size of the f32 rounding of `ω x` itself) measured as
//!   accurate as libdevice's (max error 1.5e-5 vs 1.4e-5 on 16384 samples) and 20% faster there.
//!
//! The recurrence's rotation is a pair of shears (Minsky's circle algorithm): with `h = δ/2`,
//! `t = tan h`, the state `(c, v) = (cos φ, sin φ + t·cos φ)` advances by
//! `c ← c − sin δ·v`, `v ← v + 2t·c`, and `sin φ = v − t·c` — three FMAs, where a rotation matrix
//! takes four; both shears have determinant 1, so rounding does not make the amplitude drift. To
//! keep `|t| ≤ 1`, `δ` is first reduced by the nearest multiple `qπ` (a rotation by `π` is a sign
//! change): the recurrence runs with `δ − qπ`, and odd `q` flips the sign of every other step's
//! phasor, which only the `y`-weighted sums see (staged as `±y`).
//!
//! Shared memory (dynamic, sized by the launch): the direct kernels stage tiles of samples as
//! `(x, y)` pairs, the recurrence kernels as `(x, y, ±y, −sin δ, 2t, −t)`; the tile length is the
//! launch's shared bytes divided by the bytes per sample ([`DIRECT_SAMPLE_VALUES`] or
//! [`RECURRENCE_SAMPLE_VALUES`] values of the kernel's float type), at least 1. When all samples
//! fit in one tile, each block stages them once for all its grid-stride rounds.
//!
//! Host side: `host/src/families/lombscargle.rs` (wrapper, CPU reference); tests: `tests/lombscargle.rs`.

use gpu_std::math::{self, Float};
use gpu_std::{Slice, SliceMut, kernel, shared, thread};

/// Consecutive frequencies per thread of the recurrence kernels: one direct `sin`/`cos` (the
/// anchor) per sample every this many frequencies.
pub const RECURRENCE_STEPS: usize = 16;

/// Values per staged sample of the direct kernels: `x`, `y`.
pub const DIRECT_SAMPLE_VALUES: usize = 2;

/// Values per staged sample of the recurrence kernels: `x`, `y`, `±y`, `−sin δ`, `2·tan(δ/2)`,
/// `−tan(δ/2)` (see the module documentation).
pub const RECURRENCE_SAMPLE_VALUES: usize = 6;

/// What the Lomb-Scargle kernels need beyond [`Float`]: constants of the shear recurrence and its
/// anchor.
pub trait Real: Float {
    /// ½.
    const HALF: Self;
    /// 2.
    const TWO: Self;
    /// `1/π`.
    const FRAC_1_PI: Self;
    /// π rounded to `Self`; with [`Real::PI_LO`], `fma(−q, PI_LO, fma(−q, PI_HI, d))` is `d − qπ`
    /// to about one rounding for moderate integers `q`.
    const PI_HI: Self;
    /// The rest `π − PI_HI`.
    const PI_LO: Self;
    /// Whether the integer-valued `self` is odd.
    fn is_odd(self) -> bool;
    /// `(sin t, cos t)` evaluated directly once per sample by the recurrence kernels: the hardware
    /// approximations in f32 (as accurate there as libdevice, and faster; see the module
    /// documentation), libdevice `sincos` in f64.
    fn anchor(t: Self) -> (Self, Self);
}

macro_rules! real {
    ($t:ty, $pi_lo:expr, $anchor:expr) => {
        impl Real for $t {
            const HALF: $t = 0.5;
            const TWO: $t = 2.0;
            const FRAC_1_PI: $t = core::f64::consts::FRAC_1_PI as $t;
            const PI_HI: $t = core::f64::consts::PI as $t;
            const PI_LO: $t = $pi_lo;
            #[inline(always)]
            fn is_odd(self) -> bool {
                let half = self * 0.5;
                math::floor(half) != half
            }
            #[inline(always)]
            fn anchor(t: $t) -> ($t, $t) {
                let anchor: fn($t) -> ($t, $t) = $anchor;
                anchor(t)
            }
        }
    };
}
// π − (π as f32) = −8.742278e-8; π − (π as f64) = 1.2246467991473532e-16.
real!(f32, -8.742278e-8, |t| (math::fast::sin(t), math::fast::cos(t)));
real!(f64, 1.2246467991473532e-16, math::sincos::<f64>);

/// Repeats `$body` with `$r` bound to `0, 1, …, $n − 1` (`$n` a constant ≤ 32): a fully unrolled
/// loop, so that arrays indexed by `$r` live in registers instead of local memory.
macro_rules! unrolled {
    ($r:ident < $n:expr => $body:block) => {
        const { assert!($n <= 32, "unrolled! supports at most 32 steps") };
        unrolled!(@ $r, $n, $body; 0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15
                                   16 17 18 19 20 21 22 23 24 25 26 27 28 29 30 31)
    };
    (@ $r:ident, $n:expr, $body:block; $($i:literal)*) => {
        $( if $i < $n { let $r: usize = $i; $body } )*
    };
}

/// `num / den`, or 0 when `den ≤ 0` (then `num` is 0 too, up to rounding).
#[inline(always)]
fn ratio<T: Real>(num: T, den: T) -> T {
    if den > T::ZERO { num / den } else { T::ZERO }
}

/// The periodogram value from the four sums over `n` samples (see the module documentation).
#[inline(always)]
fn power<T: Real>(n: T, xc: T, xs: T, ss: T, cs: T) -> T {
    let cc = n - ss;
    let (st, ct) = math::sincos(math::atan2(cs + cs, cc - ss) * T::HALF);
    let (ct2, st2, cst2) = (ct * ct, st * st, T::TWO * ct * st);
    let num1 = ct * xc + st * xs;
    let den1 = ct2 * cc + cst2 * cs + st2 * ss;
    let num2 = ct * xs - st * xc;
    let den2 = ct2 * ss - cst2 * cs + st2 * cc;
    T::HALF * (ratio(num1 * num1, den1) + ratio(num2 * num2, den2))
}

/// The `n` samples `(x_j, y_j)` in global memory; `x` and `y` hold exactly `n` values.
#[derive(Clone, Copy)]
struct Samples<T> {
    x: Slice<T>,
    y: Slice<T>,
    n: u32,
}

impl<T: Copy> Samples<T> {
    /// The samples of `x` and `y` (`y` at least as long as `x`: checked).
    #[inline(always)]
    fn new(x: Slice<T>, y: Slice<T>) -> Self {
        Samples { x, y: y.sub(0, x.len()), n: x.len_u32() }
    }
}

/// The block's tile of samples in dynamic shared memory, `VALUES` values per sample, and whether it
/// holds all of them.
struct Tiles<T: Copy, const VALUES: usize> {
    buf: shared::DynamicShared<T>,
    /// Samples per tile: the launch's shared bytes over the bytes per sample, at least 1.
    len: u32,
    /// Whether `buf` holds every sample (one tile did), so nothing needs staging again.
    all_staged: bool,
}

impl<T: Real, const VALUES: usize> Tiles<T, VALUES> {
    #[inline(always)]
    fn new() -> Self {
        let len = (shared::dynamic_bytes() / core::mem::size_of::<T>() / VALUES).max(1);
        Tiles { buf: shared::region::<T>(0, len * VALUES), len: len as u32, all_staged: false }
    }

    /// Value `v` of staged sample `j` (within the current tile).
    #[inline(always)]
    fn get(&self, j: usize, v: usize) -> T {
        // SAFETY: `j` is below the tile's length, so the index is inside `buf`; `for_each` calls
        // `consume` between the barriers after staging and before the next tile's writes.
        unsafe { self.buf.read(VALUES * j + v) }
    }

    /// Runs `consume(len)` for each tile of `len` samples after the block staged it, `fill` laying
    /// out each sample's values from `(x_j, y_j)`. Every thread of the block must call this.
    #[inline(always)]
    fn for_each(
        &mut self,
        samples: Samples<T>,
        fill: impl Fn(T, T) -> [T; VALUES] + Copy,
        mut consume: impl FnMut(&Self, u32),
    ) {
        if self.all_staged {
            consume(self, samples.n);
            return;
        }
        let mut start = 0;
        while start < samples.n {
            let len = self.len.min(samples.n - start);
            thread::sync_threads();
            let mut i = thread::thread_idx_x();
            while i < len {
                let j = (start + i) as usize;
                // SAFETY: j < start + len ≤ n, the length of `x` and `y` (`Samples::new`). LLVM
                // cannot see it through the tile arithmetic, and a check here costs the f64 kernel
                // six registers.
                let values = unsafe { fill(samples.x.get_unchecked(j), samples.y.get_unchecked(j)) };
                unrolled!(v < VALUES => {
                    // SAFETY: `i` is below the tile's length; each thread writes its own samples
                    // between the two barriers.
                    unsafe { self.buf.write(VALUES * i as usize + v, values[v]) };
                });
                i += thread::block_dim_x();
            }
            thread::sync_threads();
            consume(self, len);
            start += len;
        }
        self.all_staged = samples.n <= self.len;
    }
}

/// Direct kernels: frequency `k` gets one thread per grid-stride round; every sample's `sincos` is
/// computed by `sincos`.
#[inline(always)]
fn direct<T: Real>(
    samples: Samples<T>,
    freqs: Slice<T>,
    scale: T,
    mut out: SliceMut<T>,
    sincos: impl Fn(T) -> (T, T),
) {
    let m = out.len_u32();
    let freqs = freqs.sub(0, out.len());
    let mut tiles = Tiles::<T, DIRECT_SAMPLE_VALUES>::new();
    let block = thread::block_dim_x();
    let tid = thread::thread_idx_x();
    // The loop bound is uniform over the block, so every thread reaches every barrier.
    let mut base = thread::block_idx_x() * block;
    while base < m {
        let k = base + tid;
        let omega = if k < m { freqs[k as usize] } else { T::ZERO };
        let (mut xc, mut xs, mut ss, mut cs) = (T::ZERO, T::ZERO, T::ZERO, T::ZERO);
        tiles.for_each(
            samples,
            |xj, yj| [xj, yj],
            |tile, len| {
                for j in 0..len as usize {
                    let (xj, yj) = (tile.get(j, 0), tile.get(j, 1));
                    let (s, c) = sincos(omega * xj);
                    xc = math::fma(yj, c, xc);
                    xs = math::fma(yj, s, xs);
                    ss = math::fma(s, s, ss);
                    cs = math::fma(c, s, cs);
                }
            },
        );
        if k < m {
            out[k as usize] = scale * power(T::from_u32(samples.n), xc, xs, ss, cs);
        }
        base += thread::grid_stride_1d();
    }
}

/// Periodogram in `F` with libdevice `sincos` (`lombscargle_f32`, `lombscargle_f64`):
/// `power[k] = scale·P(freqs[k])` for every `k < power.len()`.
///
/// `x`, `y`: the `n = x.len() ≥ 1` samples (times and values; `y` at least as long); `freqs`: at
/// least `power.len()` angular frequencies (rad per unit of `x`). Any 1-D launch; dynamic shared
/// memory ≥ one `(x, y)` pair ([`DIRECT_SAMPLE_VALUES`] values of `F`; more means fewer tiles).
#[kernel(f32, f64)]
pub fn lombscargle<F: Real>(x: &[F], y: &[F], freqs: &[F], scale: F, power: &mut [F]) {
    direct(Samples::new(x, y), freqs, scale, power, math::sincos::<F>);
}

/// [`lombscargle`] in f32 with the hardware approximations `sin.approx`/`cos.approx` per sample
/// (absolute error about 2^-21 plus about `|ω x|·2^-23` from their range reduction).
#[kernel]
pub fn lombscargle_fast_f32(x: &[f32], y: &[f32], freqs: &[f32], scale: f32, power: &mut [f32]) {
    direct(Samples::new(x, y), freqs, scale, power, |t| (math::fast::sin(t), math::fast::cos(t)));
}

/// The staged constants of sample `(x_j, y_j)` for the step `δ = domega·x_j`: `[x, y, ±y, −sin δ',
/// 2t, −t]` with `δ' = δ − qπ`, `q` the nearest integer to `δ/π`, `t = tan(δ'/2)`, and `−y` when `q`
/// is odd.
#[inline(always)]
fn shear_constants<T: Real>(domega: T, xj: T, yj: T) -> [T; RECURRENCE_SAMPLE_VALUES] {
    let delta = domega * xj;
    let q = math::floor(math::fma(delta, T::FRAC_1_PI, T::HALF));
    let reduced = math::fma(-q, T::PI_LO, math::fma(-q, T::PI_HI, delta));
    let (sh, ch) = math::sincos(reduced * T::HALF);
    let t = sh / ch;
    let alternate = if q.is_odd() { -yj } else { yj };
    [xj, yj, alternate, -(T::TWO * sh * ch), t + t, -t]
}

/// Recurrence kernels: chunk `i` (a thread per grid-stride round) owns frequencies
/// `i·STEPS .. i·STEPS + STEPS` of the grid `ω_k = omega0 + k·domega`, `k < out.len()`;
/// [`Real::anchor`] evaluates `(sin, cos)` directly once per sample.
#[inline(always)]
fn recurrence<T: Real, const STEPS: usize>(
    samples: Samples<T>,
    (omega0, domega): (T, T),
    scale: T,
    mut out: SliceMut<T>,
) {
    let m = out.len_u32();
    let mut tiles = Tiles::<T, RECURRENCE_SAMPLE_VALUES>::new();
    let block = thread::block_dim_x();
    let tid = thread::thread_idx_x();
    let chunks = m.div_ceil(STEPS as u32);
    let mut base = thread::block_idx_x() * block;
    while base < chunks {
        let first = (base + tid) * STEPS as u32;
        // ω of the chunk's first frequency, rounded once.
        let omega = math::fma(T::from_u32(first), domega, omega0);
        let mut xc = [T::ZERO; STEPS];
        let mut xs = [T::ZERO; STEPS];
        let mut ss = [T::ZERO; STEPS];
        let mut cs = [T::ZERO; STEPS];
        let fill = |xj, yj| shear_constants(domega, xj, yj);
        tiles.for_each(samples, fill, |tile, len| {
            for j in 0..len as usize {
                let (xj, yj, y_alternate) = (tile.get(j, 0), tile.get(j, 1), tile.get(j, 2));
                let (minus_sin, two_t, minus_t) = (tile.get(j, 3), tile.get(j, 4), tile.get(j, 5));
                let (mut s, mut c) = T::anchor(omega * xj);
                let mut v = math::fma(-minus_t, c, s);
                unrolled!(r < STEPS => {
                    if r > 0 {
                        c = math::fma(minus_sin, v, c);
                        v = math::fma(two_t, c, v);
                        s = math::fma(minus_t, c, v);
                    }
                    let weight = if r.is_multiple_of(2) { yj } else { y_alternate };
                    xc[r] = math::fma(weight, c, xc[r]);
                    xs[r] = math::fma(weight, s, xs[r]);
                    ss[r] = math::fma(s, s, ss[r]);
                    cs[r] = math::fma(c, s, cs[r]);
                });
            }
        });
        let count = T::from_u32(samples.n);
        unrolled!(r < STEPS => {
            let k = first + r as u32;
            if k < m {
                out[k as usize] = scale * power(count, xc[r], xs[r], ss[r], cs[r]);
            }
        });
        base += thread::grid_stride_1d();
    }
}

/// Periodogram in `F` on the uniform grid `ω_k = omega0 + k·domega`, `k < power.len()`, by the
/// shear recurrence over [`RECURRENCE_STEPS`] frequencies per thread, anchored by [`Real::anchor`]
/// (`lombscargle_recurrence_f32`: hardware `sin.approx`/`cos.approx`; `lombscargle_recurrence_f64`:
/// libdevice `sincos`): `power[k] = scale·P(ω_k)`. Samples as for [`lombscargle`].
///
/// Any 1-D launch (threads beyond `⌈m / RECURRENCE_STEPS⌉` idle); dynamic shared memory ≥ one
/// staged sample ([`RECURRENCE_SAMPLE_VALUES`] values of `F`).
#[kernel(f32, f64)]
pub fn lombscargle_recurrence<F: Real>(x: &[F], y: &[F], omega0: F, domega: F, scale: F, power: &mut [F]) {
    recurrence::<F, RECURRENCE_STEPS>(Samples::new(x, y), (omega0, domega), scale, power);
}
