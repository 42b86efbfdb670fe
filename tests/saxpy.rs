//! SAXPY on every device against the CPU reference (exact: both round `a·x + y` once).

mod common;

use kernel_suite::saxpy::{saxpy, saxpy_reference};

#[test]
fn saxpy_matches_reference_on_odd_sizes() {
    for device in common::devices("saxpy_matches_reference_on_odd_sizes") {
        for (seed, n) in [(1, 1usize), (2, 255), (3, 257), (4, 100_003)] {
            let mut rng = common::rng(seed);
            let a = common::random_vec(&mut rng, 1, -4.0, 4.0)[0];
            let x = common::random_vec(&mut rng, n, -1.0, 1.0);
            let y = common::random_vec(&mut rng, n, -1.0, 1.0);
            let mut expected = y.clone();
            saxpy_reference(a, &x, &mut expected).unwrap();
            let mut got = y.clone();
            saxpy(&device, a, &x, &mut got).unwrap();
            assert_eq!(got, expected, "n = {n} on {}", device.describe());
            assert_ne!(got, y, "saxpy left y unchanged (n = {n})");
        }
    }
}

#[test]
fn saxpy_rejects_bad_input() {
    let device = kernel_suite::Device::simulator();
    let err = saxpy(&device, 1.0, &[], &mut []).unwrap_err();
    assert_eq!(err.to_string(), "invalid input: saxpy of empty vectors");
    let err = saxpy(&device, 1.0, &[1.0, 2.0], &mut [1.0]).unwrap_err();
    assert_eq!(err.to_string(), "invalid input: x has 2 elements but y has 1");
}
