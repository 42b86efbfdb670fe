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
            // Normalised by Σ(y − ȳ)² (SciPy ≥ 1.15): the sinusoid explains all of it.
            let expected = 1.0;
            assert!(
                (p - expected).abs() < 0.02,
                "{variant} {precision}: peak power {p}, expected ≈ {expected}"
            );
        }
    }
}

/// `scipy.signal.lombscargle(x, y, freqs, precenter, normalize)` of SciPy 1.15 – 1.18 with its
/// defaults (`weights=None`, `floating_mean=False`), written as SciPy writes it: the weighted
/// least-squares fit `y ≈ a·cos ωx + b·sin ωx` with weights 1/n, `SS = 1 − CC`, power
/// `2(a·YC + b·YS)`, then `·n/4`, or `/(2·YY)` to normalise, `YY` of the centred `y` when
/// `precenter`. An independent derivation: the kernels use the τ-shifted form.
fn scipy_lombscargle(x: &[f64], y: &[f64], freqs: &[f64], precenter: bool, normalize: bool) -> Vec<f64> {
    let n = x.len() as f64;
    let mean = if precenter { y.iter().sum::<f64>() / n } else { 0.0 };
    let y: Vec<f64> = y.iter().map(|v| v - mean).collect();
    let w = 1.0 / n;
    let yy: f64 = y.iter().map(|v| w * v * v).sum();
    freqs
        .iter()
        .map(|&omega| {
            let (mut cc, mut cs, mut yc, mut ys) = (0.0, 0.0, 0.0, 0.0);
            for (&t, &v) in x.iter().zip(&y) {
                let (c, s) = ((omega * t).cos(), (omega * t).sin());
                cc += w * c * c;
                cs += w * c * s;
                yc += w * v * c;
                ys += w * v * s;
            }
            let ss = 1.0 - cc;
            let d = cc * ss - cs * cs;
            let a = (yc * ss - ys * cs) / d;
            let b = (ys * cc - yc * cs) / d;
            let p = 2.0 * (a * yc + b * ys);
            if normalize { p / (2.0 * yy) } else { p * n / 4.0 }
        })
        .collect()
}

/// Every variant against SciPy ≥ 1.15's formula (above) on an irregular noisy series with an
/// offset, for each `precenter` × `normalize`: with both, the normalisation uses the centred `y`
/// (SciPy ≤ 1.14 used the `y` given, a difference of Σ(y − ȳ)²/Σy², here about 25%).
#[test]
fn matches_current_scipy_semantics() {
    for device in common::devices("matches_current_scipy_semantics") {
        let mut rng = common::rng(41);
        let mut x: Vec<f64> = (0..613).map(|_| rng.random_range(0.0..80.0)).collect();
        x.sort_by(f64::total_cmp);
        let y: Vec<f64> =
            x.iter().map(|t| 1.3 * (1.7 * t + 0.4).cos() + 0.6 + rng.random_range(-1.2..1.2)).collect();
        let freqs = frequency_grid(0.05, 4.0, 1501).unwrap();
        for (precenter, normalize) in [(false, false), (true, false), (false, true), (true, true)] {
            let scipy = scipy_lombscargle(&x, &y, &freqs, precenter, normalize);
            let reference = lombscargle_reference(&x, &y, &freqs, precenter, normalize).unwrap();
            let what =
                format!("CPU reference (precenter {precenter}, normalize {normalize}) vs SciPy's formula");
            check(&device, &what, &reference, &scipy, 1e-11);
            for (variant, precision, bound) in CASES {
                let opts = Options { precenter, normalize, ..options(variant, precision) };
                let power = lombscargle(&device, &x, &y, &freqs, &opts).unwrap();
                let what =
                    format!("{variant} {precision} (precenter {precenter}, normalize {normalize}) vs SciPy");
                check(&device, &what, &power, &scipy, bound);
            }
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
    let centred = Options { precenter: true, ..normalize };
    assert_eq!(
        error(&[1.0, 2.0, 3.0], &[2.5, 2.5, 2.5], &freqs, &centred),
        "invalid input: cannot normalise: Σ(y − ȳ)² = 0 (y is constant)"
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

// ---- the `lombscargle` command ----

fn run_lombscargle(args: &[&str]) -> (bool, String, String) {
    let exe = common::bin("lombscargle", env!("CARGO_BIN_EXE_lombscargle"));
    let out = std::process::Command::new(exe).args(args).output().unwrap();
    (out.status.success(), String::from_utf8(out.stdout).unwrap(), String::from_utf8(out.stderr).unwrap())
}

/// A user's `t,y` CSV with `--precenter --normalize --check --npy`: the `.npy` read back (float64,
/// or float32 for an f32 kernel) equals SciPy ≥ 1.15's formula, the CSV holds the same values, and
/// the run ends with its time summary. Bad input ends with one `error:` line.
#[test]
fn command_writes_csv_and_npy_with_current_scipy_semantics() {
    let dir = std::env::temp_dir().join(format!("kernel-suite-lombscargle-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut rng = common::rng(59);
    let mut x: Vec<f64> = (0..211).map(|_| rng.random_range(0.0..40.0)).collect();
    x.sort_by(f64::total_cmp);
    let y: Vec<f64> = x.iter().map(|t| 0.8 * (2.2 * t).sin() + 1.5 + rng.random_range(-0.5..0.5)).collect();
    let input = dir.join("series.csv");
    let rows: String = x.iter().zip(&y).map(|(t, v)| format!("{t:?},{v:?}\n")).collect();
    std::fs::write(&input, format!("t,y\n{rows}")).unwrap();
    let (csv, npy_path, plot) = (dir.join("p.csv"), dir.join("p.npy"), dir.join("p.svg"));
    let freqs = frequency_grid(0.1, 4.0, 777).unwrap();
    let scipy = scipy_lombscargle(&x, &y, &freqs, true, true);
    for (precision, bound) in [("f64", 1e-10), ("f32", 1e-4)] {
        let (ok, stdout, stderr) = run_lombscargle(&[
            "--device",
            "sim",
            "-i",
            input.to_str().unwrap(),
            "--fmin",
            "0.1",
            "--fmax",
            "4",
            "--count",
            "777",
            "--precenter",
            "--normalize",
            "--check",
            "--precision",
            precision,
            "-o",
            csv.to_str().unwrap(),
            "--plot",
            plot.to_str().unwrap(),
            "--npy",
            npy_path.to_str().unwrap(),
        ]);
        assert!(ok, "{precision}: {stdout}{stderr}");
        assert!(stdout.lines().last().unwrap().starts_with("time: "), "{stdout}");
        let power: Vec<f64> = if precision == "f32" {
            let values = kernel_suite::npy::read::<f32, ndarray::Ix1>(&npy_path).unwrap();
            assert_eq!(values.len(), 777);
            values.into_iter().map(f64::from).collect()
        } else {
            let values = kernel_suite::npy::read::<f64, ndarray::Ix1>(&npy_path).unwrap();
            assert_eq!(values.len(), 777);
            values.to_vec()
        };
        let error = relative_error(&power, &scipy);
        assert!(error <= bound, "{precision}: .npy vs SciPy's formula {error:e}");
        let from_csv: Vec<f64> = std::fs::read_to_string(&csv)
            .unwrap()
            .lines()
            .skip(1)
            .map(|line| line.split(',').nth(1).unwrap().parse().unwrap())
            .collect();
        assert_eq!(from_csv.len(), 777);
        assert!(relative_error(&from_csv, &power) <= 1e-7, "{precision}: the CSV and the .npy disagree");
    }
    let bad = dir.join("bad.csv");
    std::fs::write(&bad, "t, y\n# a comment\n1, 2\n\n3, x\n").unwrap();
    let bad_error = format!("error: {}: line 5: expected `t,y`, got `3,x`", bad.display());
    for (args, expected) in [
        (vec!["-i", bad.to_str().unwrap()], bad_error.as_str()),
        (vec!["-i", "/nonexistent/series.csv"], "error: /nonexistent/series.csv: "),
        (vec!["--npy", "/nonexistent/dir/p.npy", "--count", "10"], "error: /nonexistent/dir/p.npy: "),
        (vec!["--fmin", "0", "--count", "10"], "error: invalid input: "),
    ] {
        let mut all = vec!["--device", "sim", "-o", csv.to_str().unwrap(), "--plot", plot.to_str().unwrap()];
        all.extend(args.iter().copied());
        let (ok, stdout, stderr) = run_lombscargle(&all);
        assert!(!ok, "{args:?} succeeded: {stdout}");
        assert_eq!(stderr.lines().count(), 1, "{args:?}: {stderr}");
        assert!(stderr.starts_with(expected), "{args:?}: {stderr}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}
