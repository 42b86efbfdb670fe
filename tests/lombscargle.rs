//! Lomb-Scargle periodogram on every device against the f64 CPU reference, with the error measure
//! of the issue, `max|P − P_ref| / max|P_ref|`: f64 ≤ 1e-10, f32 precise ≤ 1e-4, fast and
//! recurrence (f32) ≤ 1e-3. Outputs are poisoned (NaN), so an unwritten frequency fails.
//!
//! The simulator runs the benchmark signal (2^10 candidate times, ~10% kept) on 4099 frequencies;
//! the GPU on the benchmark's full 2^20 (+ 3, so the last recurrence chunk is partial).

mod common;

use kernel_suite::lombscargle::{
    Options, Plan, Precision, Variant, benchmark_signal, frequency_grid, lombscargle, lombscargle_reference,
    peak, relative_error,
};
use kernel_suite::{Backend, Device};
use rand::Rng;

/// Every variant and precision with its error bound.
const CASES: [(Variant, Precision, f64); 5] = [
    (Variant::Precise, Precision::F64, 1e-10),
    (Variant::Precise, Precision::F32, 1e-4),
    (Variant::Fast, Precision::F32, 1e-3),
    (Variant::Recurrence, Precision::F32, 1e-3),
    (Variant::Recurrence, Precision::F64, 1e-10),
];

fn options(variant: Variant, precision: Precision) -> Options {
    Options { variant, precision, ..Options::default() }
}

/// Checks `power` (from `what` on `device`) against `reference` with `bound`; prints the error.
fn check(device: &Device, what: &str, power: &[f64], reference: &[f64], bound: f64) {
    let error = relative_error(power, reference);
    eprintln!("{what} on {}: max|P − P_ref|/max|P_ref| = {error:.2e} (bound {bound:.0e})", device.backend());
    assert!(error <= bound, "{what} on {}: error {error:e} exceeds {bound:e}", device.describe());
}

#[test]
fn variants_match_reference_on_the_benchmark_signal() {
    for device in common::devices("variants_match_reference_on_the_benchmark_signal") {
        let count = if device.backend() == Backend::Gpu { (1 << 20) + 3 } else { 4099 };
        let (x, y) = benchmark_signal(1 << 10, 0.1, 7);
        let freqs = frequency_grid(0.01, 10.0, count).unwrap();
        for (precenter, normalize) in [(false, false), (true, true)] {
            let reference = lombscargle_reference(&x, &y, &freqs, precenter, normalize).unwrap();
            for (variant, precision, bound) in CASES {
                let opts = Options { precenter, normalize, ..options(variant, precision) };
                let power = lombscargle(&device, &x, &y, &freqs, &opts).unwrap();
                let what = format!("{variant} {precision} (precenter {precenter}, normalize {normalize})");
                check(&device, &what, &power, &reference, bound);
            }
        }
    }
}

/// Few blocks (several grid-stride rounds per thread), small tiles (several per thread), block
/// sizes other than the default, frequency counts that leave a partial recurrence chunk, and a
/// noisy signal with an offset.
#[test]
fn grid_stride_loops_and_sample_tiles() {
    for device in common::devices("grid_stride_loops_and_sample_tiles") {
        let mut rng = common::rng(11);
        let n = 203;
        let mut x: Vec<f64> = (0..n).map(|_| rng.random_range(0.0..50.0)).collect();
        x.sort_by(f64::total_cmp);
        let y: Vec<f64> = x
            .iter()
            .map(|t| 0.5 + (1.7 * t).sin() + 0.3 * (4.1 * t).cos() + rng.random_range(-0.5..0.5))
            .collect();
        let freqs = frequency_grid(0.05, 6.0, 1001).unwrap();
        let reference = lombscargle_reference(&x, &y, &freqs, true, false).unwrap();
        for (variant, precision, bound) in CASES {
            for (block, blocks, tile) in [(64, Some(2), 7), (96, Some(1), 64), (256, None, 1)] {
                let opts = Options { precenter: true, ..options(variant, precision) };
                let mut plan = Plan::new(&device, &x, &y, &freqs, &opts)
                    .unwrap()
                    .with_launch(block, blocks, tile)
                    .unwrap();
                plan.launch().unwrap();
                let power = plan.result().unwrap();
                let what = format!("{variant} {precision}, {blocks:?} × {block} threads, tiles of {tile}");
                check(&device, &what, &power, &reference, bound);
            }
        }
    }
}

/// Coarse grids, so that the per-sample step `Δω·x_j` spans many multiples of π (both parities of
/// the recurrence's reduction) and also lands near π, plus negative sample times and a decreasing
/// grid.
#[test]
fn recurrence_with_large_steps() {
    for device in common::devices("recurrence_with_large_steps") {
        let mut rng = common::rng(31);
        let x: Vec<f64> = (0..97).map(|_| rng.random_range(-20.0..60.0)).collect();
        let y: Vec<f64> =
            x.iter().map(|t| (0.9 * t).cos() + 0.5 * (3.3 * t).sin() + rng.random_range(-0.2..0.2)).collect();
        let near_pi: Vec<f64> = (0..45).map(|k| 0.2 + k as f64 * (std::f64::consts::PI / 37.0)).collect();
        let grids = [frequency_grid(0.3, 20.0, 41).unwrap(), frequency_grid(0.5, 7.0, 5).unwrap(), near_pi];
        for (g, freqs) in grids.iter().enumerate() {
            let decreasing: Vec<f64> = freqs.iter().rev().copied().collect();
            for freqs in [freqs, &decreasing] {
                let reference = lombscargle_reference(&x, &y, freqs, false, false).unwrap();
                for (precision, bound) in [(Precision::F32, 1e-3), (Precision::F64, 1e-10)] {
                    let power = lombscargle(&device, &x, &y, freqs, &options(Variant::Recurrence, precision))
                        .unwrap();
                    check(&device, &format!("recurrence {precision}, grid {g}"), &power, &reference, bound);
                }
            }
        }
    }
}

/// A clean sinusoid at ω = 2.5 (with an offset removed by `precenter`): every variant puts the
/// peak within one grid step of it, and the normalised peak is close to 1.
#[test]
fn peak_at_the_true_frequency() {
    for device in common::devices("peak_at_the_true_frequency") {
        let mut rng = common::rng(23);
        let mut x: Vec<f64> = (0..300).map(|_| rng.random_range(0.0..60.0)).collect();
        x.sort_by(f64::total_cmp);
        let y: Vec<f64> = x.iter().map(|t| 3.0 * (2.5 * t + 0.3).sin() + 4.0).collect();
        let freqs = frequency_grid(0.1, 5.0, 2451).unwrap();
        let step = freqs[1] - freqs[0];
        for (variant, precision, _) in CASES {
            let opts = Options { precenter: true, normalize: true, ..options(variant, precision) };
            let power = lombscargle(&device, &x, &y, &freqs, &opts).unwrap();
            let (w, p) = peak(&freqs, &power).unwrap();
            assert!((w - 2.5).abs() <= step, "{variant} {precision}: peak at ω = {w}, expected 2.5");
            // Normalised by Σy² of the uncentred y (SciPy): 2/Σy² · n·A²/4 = A²/(2·(A²/2 + 16)).
            let expected = 9.0 / (2.0 * (4.5 + 16.0));
            assert!(
                (p - expected).abs() < 0.02,
                "{variant} {precision}: peak power {p}, expected ≈ {expected}"
            );
        }
    }
}

/// Very few samples: any n works, and f64 still matches the reference.
#[test]
fn few_samples() {
    for device in common::devices("few_samples") {
        let freqs = frequency_grid(0.3, 4.0, 37).unwrap();
        for n in [1usize, 2, 3, 5] {
            let x: Vec<f64> = (0..n).map(|i| 0.7 + 1.9 * i as f64 + 0.37 * (i * i) as f64).collect();
            let y: Vec<f64> = (0..n).map(|i| 1.0 - 0.6 * i as f64).collect();
            let reference = lombscargle_reference(&x, &y, &freqs, false, false).unwrap();
            for (variant, precision, bound) in CASES {
                let power = lombscargle(&device, &x, &y, &freqs, &options(variant, precision)).unwrap();
                assert!(
                    power.iter().all(|p| p.is_finite() && *p >= -1e-6),
                    "{variant} {precision}, n = {n}: {power:?}"
                );
                // One sample: each term is a 0/0 limit at every ω; only finiteness is defined.
                if n > 1 && precision == Precision::F64 {
                    check(&device, &format!("{variant} {precision}, n = {n}"), &power, &reference, bound);
                }
            }
        }
    }
}

#[test]
fn bad_input_is_rejected() {
    let device = Device::simulator();
    let freqs = [0.5, 1.0, 1.5];
    let precise = Options::default();
    let error = |x: &[f64], y: &[f64], f: &[f64], o: &Options| {
        let kernel = lombscargle(&device, x, y, f, o).unwrap_err().to_string();
        if o.variant == Variant::Precise {
            let cpu = lombscargle_reference(x, y, f, o.precenter, o.normalize).unwrap_err().to_string();
            assert_eq!(kernel, cpu, "the wrapper and the reference disagree");
        }
        kernel
    };
    assert_eq!(error(&[], &[], &freqs, &precise), "invalid input: no samples: x and y are empty");
    assert_eq!(error(&[1.0, 2.0], &[1.0], &freqs, &precise), "invalid input: x has 2 samples but y has 1");
    assert_eq!(
        error(&[1.0, 2.0], &[1.0, f64::NAN], &freqs, &precise),
        "invalid input: y[1] = NaN is not finite"
    );
    assert_eq!(
        error(&[f64::INFINITY, 2.0], &[1.0, 2.0], &freqs, &precise),
        "invalid input: x[0] = inf is not finite"
    );
    assert_eq!(error(&[1.0], &[1.0], &[], &precise), "invalid input: no frequencies");
    assert_eq!(
        error(&[1.0], &[1.0], &[1.0, f64::NEG_INFINITY], &precise),
        "invalid input: ω[1] = -inf is not finite"
    );
    for bad in [0.0, -2.0] {
        let message = error(&[1.0, 2.0], &[1.0, 2.0], &[1.0, bad], &precise);
        assert!(
            message.starts_with(&format!("invalid input: angular frequency ω[1] = {bad} is not positive")),
            "{message}"
        );
    }
    let normalize = Options { normalize: true, ..precise };
    assert_eq!(
        error(&[1.0, 2.0], &[0.0, 0.0], &freqs, &normalize),
        "invalid input: cannot normalise: Σy² = 0 (y is all zeros)"
    );
    assert_eq!(
        error(&[1.0, 2.0], &[1.0, 2.0], &freqs, &options(Variant::Fast, Precision::F64)),
        "invalid input: the fast variant is f32 only (it uses the f32 hardware sin.approx/cos.approx)"
    );
    let message =
        error(&[1.0, 2.0], &[1.0, 2.0], &[0.5, 1.0, 2.0], &options(Variant::Recurrence, Precision::F32));
    assert!(message.contains("the recurrence variant needs uniformly spaced frequencies"), "{message}");
    // Valid for the f64 reference, not for an f32 kernel.
    let f32_precise = options(Variant::Precise, Precision::F32);
    assert_eq!(
        lombscargle(&device, &[1e300, 2.0], &[1.0, 2.0], &freqs, &f32_precise).unwrap_err().to_string(),
        "invalid input: x[0] = 1e300 is out of f32 range"
    );
    assert!(frequency_grid(0.0, 1.0, 10).is_err());
    assert!(frequency_grid(2.0, 1.0, 10).is_err());
    assert!(frequency_grid(1.0, 2.0, 0).is_err());
    let plan = Plan::new(&device, &[1.0], &[1.0], &freqs, &precise).unwrap();
    assert!(plan.with_launch(48, None, 16).is_err());
}
