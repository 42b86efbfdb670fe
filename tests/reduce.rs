//! Block sums on every device. Each block's partial is checked against the elements that block's
//! grid-stride loop covers, so a missing barrier (a wrong partial) or an unwritten partial (the
//! poison NaN) fails.

mod common;

use kernel_suite::reduce::{block_sums, sum, sum_reference};

/// Partial of block `b`: elements `i` with `(i / block) % blocks == b`, summed in f64.
fn partials_reference(x: &[f32], blocks: usize, block: usize) -> Vec<f64> {
    let mut p = vec![0.0; blocks];
    for (i, &v) in x.iter().enumerate() {
        p[(i / block) % blocks] += v as f64;
    }
    p
}

#[test]
fn block_sums_match_reference() {
    for device in common::devices("block_sums_match_reference") {
        let cases = [(1usize, 1u32, 32u32), (255, 3, 64), (257, 2, 128), (100_003, 97, 256), (5000, 2, 1024)];
        for (seed, &(n, blocks, block)) in cases.iter().enumerate() {
            let x = common::random_vec(&mut common::rng(seed as u64 + 10), n, 0.5, 1.5);
            let got = block_sums(&device, &x, blocks, block).unwrap();
            let want = partials_reference(&x, blocks as usize, block as usize);
            assert_eq!(got.len(), want.len());
            for (b, (&g, &w)) in got.iter().zip(&want).enumerate() {
                let tol = 1e-5 * w.abs().max(1.0);
                assert!(
                    (g as f64 - w).abs() <= tol,
                    "n = {n}, {blocks} × {block}: partial {b} is {g}, expected {w} on {}",
                    device.describe()
                );
            }
        }
    }
}

#[test]
fn sum_matches_reference() {
    for device in common::devices("sum_matches_reference") {
        let x = common::random_vec(&mut common::rng(99), 1_000_003, -1.0, 1.0);
        let got = sum(&device, &x).unwrap();
        let want = sum_reference(&x);
        let scale: f64 = x.iter().map(|v| v.abs() as f64).sum();
        assert!((got - want).abs() <= 1e-6 * scale, "sum {got} vs {want} on {}", device.describe());
    }
}

#[test]
fn block_sums_reject_bad_input() {
    let device = kernel_suite::Device::simulator();
    assert_eq!(
        block_sums(&device, &[], 1, 32).unwrap_err().to_string(),
        "invalid input: sum of an empty array"
    );
    assert_eq!(
        block_sums(&device, &[1.0], 1, 48).unwrap_err().to_string(),
        "invalid input: block size 48 is not a power of two in 32..=1024"
    );
}
