//! The 256-bin byte histogram on every device against exact CPU counts: odd lengths (partial last
//! words), uniform random bytes, one value everywhere (every thread contends for one counter), and
//! a procedural image's pixels.

mod common;

use kernel_suite::histogram::{histogram, histogram_of_words, histogram_reference, pack_bytes};
use kernel_suite::workload::procedural_image;
use rand::Rng;

#[test]
fn histogram_counts_every_byte_exactly() {
    let mut rng = common::rng(40);
    let mut cases: Vec<Vec<u8>> =
        [1usize, 3, 4, 5, 1023, 100_003].iter().map(|&n| (0..n).map(|_| rng.random()).collect()).collect();
    cases.push(vec![200; 70_001]);
    // An image with smooth regions and edges: long runs of one value in a warp's bytes.
    cases.push(procedural_image(7, 301, 257).into_raw_vec_and_offset().0);
    for device in common::devices("histogram_counts_every_byte_exactly") {
        for bytes in &cases {
            let got = histogram(&device, bytes).unwrap();
            assert_eq!(got, histogram_reference(bytes), "{} bytes on {}", bytes.len(), device.describe());
        }
    }
}

#[test]
fn histogram_adds_to_existing_counts_and_rejects_bad_shapes() {
    let bytes: Vec<u8> = (0..9999u32).map(|i| (i * 7 % 251) as u8).collect();
    let start: Vec<u32> = (0..256).map(|b| 1000 + b).collect();
    for device in common::devices("histogram_adds_to_existing_counts_and_rejects_bad_shapes") {
        let words = device.upload(&pack_bytes(&bytes)).unwrap();
        let mut hist = device.upload(&start).unwrap();
        histogram_of_words(&device, &words, bytes.len(), &mut hist).unwrap();
        let reference = histogram_reference(&bytes);
        let expected: Vec<u32> = (0..256).map(|b| start[b] + reference[b] as u32).collect();
        assert_eq!(device.download(&hist).unwrap(), expected, "on {}", device.describe());

        let err = histogram_of_words(&device, &words, bytes.len() + 4, &mut hist).unwrap_err();
        assert!(err.to_string().contains("do not fit in 2500 words"), "{err}");
        let mut short = device.alloc::<u32>(255).unwrap();
        let err = histogram_of_words(&device, &words, 10, &mut short).unwrap_err();
        assert!(err.to_string().contains("255 bins, not 256"), "{err}");
        assert!(histogram_of_words(&device, &words, 0, &mut hist).is_err());
    }
}
