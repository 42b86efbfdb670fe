//! One-pass inclusive scan on every device against the CPU running sum: lengths around the tile
//! size, values that wrap at 2^32, and repeated launches on one scanner (the epochs keep earlier
//! launches' tile statuses from being read).

mod common;

use kernel_suite::scan::{Scanner, inclusive_scan, inclusive_scan_reference};
use kernels::scan::TILE;
use rand::Rng;

#[test]
fn inclusive_scan_matches_the_running_sum() {
    let mut rng = common::rng(44);
    for device in common::devices("inclusive_scan_matches_the_running_sum") {
        for n in [1usize, 5, TILE - 1, TILE, TILE + 1, 3 * TILE + 7, 100_003, 1 << 20] {
            let x: Vec<u32> = (0..n).map(|_| rng.random()).collect();
            let got = inclusive_scan(&device, &x).unwrap();
            let want = inclusive_scan_reference(&x);
            if let Some(i) = (0..n).find(|&i| got[i] != want[i]) {
                panic!("n = {n}: element {i} is {} instead of {} on {}", got[i], want[i], device.describe());
            }
        }
    }
}

#[test]
fn one_scanner_serves_many_launches_and_refuses_bad_shapes() {
    let mut rng = common::rng(45);
    for device in common::devices("one_scanner_serves_many_launches_and_refuses_bad_shapes") {
        let mut scanner = Scanner::new(&device, 20 * TILE).unwrap();
        for round in 0..4 {
            let n = (round + 1) * 5 * TILE - round * 999;
            let x: Vec<u32> = (0..n).map(|_| rng.random_range(0..1000)).collect();
            let dx = device.upload(&x).unwrap();
            let mut dy = device.alloc::<u32>(n).unwrap();
            scanner.inclusive_scan(&dx, &mut dy).unwrap();
            assert_eq!(
                device.download(&dy).unwrap(),
                inclusive_scan_reference(&x),
                "round {round} on {}",
                device.describe()
            );
        }
        let dx = device.upload(&vec![1u32; 21 * TILE]).unwrap();
        let mut dy = device.alloc::<u32>(21 * TILE).unwrap();
        let err = scanner.inclusive_scan(&dx, &mut dy).unwrap_err();
        assert!(err.to_string().contains("need 21 tiles; this scanner was made for 20"), "{err}");
        let mut short = device.alloc::<u32>(10).unwrap();
        assert!(scanner.inclusive_scan(&dx, &mut short).is_err());
    }
}
