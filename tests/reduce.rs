//! One-pass sum and min/max on every device: odd lengths, a misaligned view (the kernels' scalar
//! path), signs, NaNs and infinities, and repeated launches (the finished-blocks counter resets).

mod common;

use kernel_suite::reduce::{Reducer, min_max, min_max_reference, sum, sum_reference};

/// Rounding bound of an f32 sum computed in any order: each of at most `log2(n) + per-thread`
/// additions per element errs by at most half an ulp of a partial sum no larger than `Σ|x|`.
fn sum_tolerance(x: &[f32]) -> f64 {
    let magnitude: f64 = x.iter().map(|&v| (v as f64).abs()).sum();
    f32::EPSILON as f64 * magnitude * ((x.len() as f64).log2() + 16.0)
}

#[test]
fn sum_matches_reference() {
    let mut rng = common::rng(41);
    for device in common::devices("sum_matches_reference") {
        for n in [1usize, 3, 4, 5, 1000, 100_003, 1 << 20] {
            let x = common::random_vec(&mut rng, n, -1.0, 3.0);
            let got = sum(&device, &x).unwrap() as f64;
            let want = sum_reference(&x);
            assert!(
                (got - want).abs() <= sum_tolerance(&x),
                "n = {n}: {got} vs {want} on {}",
                device.describe()
            );
        }
    }
}

#[test]
fn min_max_matches_reference_with_nans_and_infinities() {
    let mut rng = common::rng(42);
    for device in common::devices("min_max_matches_reference_with_nans_and_infinities") {
        for n in [1usize, 2, 7, 4097, 100_003] {
            let mut x = common::random_vec(&mut rng, n, -50.0, 50.0);
            x[n / 2] = f32::NAN;
            assert_eq!(
                min_max(&device, &x).unwrap(),
                min_max_reference(&x),
                "n = {n} on {}",
                device.describe()
            );
            x[n - 1] = f32::INFINITY;
            x[0] = -1e30;
            assert_eq!(
                min_max(&device, &x).unwrap(),
                min_max_reference(&x),
                "n = {n} on {}",
                device.describe()
            );
        }
        let nans = vec![f32::NAN; 33];
        assert_eq!(min_max(&device, &nans).unwrap(), (f32::INFINITY, f32::NEG_INFINITY));
    }
}

#[test]
fn reductions_of_views_and_repeated_launches_agree() {
    let x = common::random_vec(&mut common::rng(43), 50_001, 0.0, 1.0);
    for device in common::devices("reductions_of_views_and_repeated_launches_agree") {
        let dx = device.upload(&x).unwrap();
        let mut reducer = Reducer::new(&device).unwrap();
        let first = reducer.sum(&dx).unwrap();
        for _ in 0..3 {
            assert_eq!(reducer.sum(&dx).unwrap(), first, "a repeated sum differs on {}", device.describe());
        }
        // Starting one element in: not 16-byte aligned, the kernels read element by element.
        let view = dx.view(1..).unwrap();
        let got = reducer.sum(view).unwrap() as f64;
        let want = sum_reference(&x[1..]);
        assert!((got - want).abs() <= sum_tolerance(&x[1..]), "{got} vs {want} on {}", device.describe());
        let view = dx.view(3..40_000).unwrap();
        assert_eq!(reducer.min_max(view).unwrap(), min_max_reference(&x[3..40_000]));
        assert!(reducer.sum(dx.view(5..5).unwrap()).is_err(), "an empty view must be refused");
    }
}
