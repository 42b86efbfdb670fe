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

#[test]
fn saxpy_runs_on_buffer_views() {
    for device in common::devices("saxpy_runs_on_buffer_views") {
        let mut rng = common::rng(5);
        let (n, len, x_at, y_at) = (1_001usize, 613usize, 37usize, 301usize);
        let x = common::random_vec(&mut rng, n, -1.0, 1.0);
        let y = common::random_vec(&mut rng, n, -1.0, 1.0);
        let (dx, mut dy) = (device.upload(&x).unwrap(), device.upload(&y).unwrap());
        let cfg = kernel_suite::LaunchConfig::for_1d(len, 128);
        let args = (-1.5f32, dx.view(x_at..x_at + len).unwrap(), dy.view_mut(y_at..y_at + len).unwrap());
        // SAFETY: one thread per element of the views, which the kernel checks against y's length.
        unsafe { device.launch(&kernels::saxpy::SAXPY, cfg, args).unwrap() };
        let got = device.download(&dy).unwrap();
        for (i, (&g, &before)) in got.iter().zip(&y).enumerate() {
            let expected = if (y_at..y_at + len).contains(&i) {
                (-1.5f32).mul_add(x[i - y_at + x_at], before)
            } else {
                before
            };
            assert_eq!(g, expected, "element {i} on {}", device.describe());
        }
    }
}

#[test]
fn buffer_views_outside_their_buffer_are_errors() {
    let device = kernel_suite::Device::simulator();
    let mut buffer = device.alloc::<f32>(10).unwrap();
    let err = buffer.view(4..11).err().expect("past the end");
    assert_eq!(err.to_string(), "invalid input: a view of elements 4..11 of a buffer of 10 elements");
    let (start, end) = (7, 3);
    let err = buffer.view_mut(start..end).err().expect("reversed");
    assert_eq!(err.to_string(), "invalid input: a view of elements 7..3 of a buffer of 10 elements");
    let view = buffer.view(2..=9).unwrap();
    assert_eq!(view.len(), 8);
    assert_eq!(view.view(8..).unwrap().len(), 0);
    assert!(view.view(..9).is_err());
}
