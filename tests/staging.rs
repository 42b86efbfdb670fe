//! `Staging` (device.rs): copies through two reused pinned chunks, of ranges of any size and
//! offset, on every device. The sizes span several chunks and end mid-chunk, so the alternation of
//! the chunks and the last partial chunk are exercised; the buffer around the range is poisoned and
//! must stay so.

mod common;

use kernel_suite::device::STAGING_CHUNK_BYTES;

#[test]
fn staged_copies_round_trip_ranges_of_any_size() {
    for device in common::devices("staged_copies_round_trip_ranges_of_any_size") {
        let mut staging = device.staging().unwrap();
        let queue = device.queue();
        let chunk = STAGING_CHUNK_BYTES / 4;
        for (seed, len, offset) in [(1, 1usize, 0usize), (2, 1001, 7), (3, chunk, 3), (4, 2 * chunk + 777, 5)]
        {
            let mut rng = common::rng(seed);
            let data = common::random_vec(&mut rng, len, -1.0, 1.0);
            let total = offset + len + 11;
            let mut buffer = device.alloc::<f32>(total).unwrap();
            staging.upload(&device, queue, &data, &mut buffer, offset).unwrap();
            // The whole buffer back: the range holds the data, the rest is still poison (NaN).
            let mut whole = vec![0.0f32; total];
            staging.download(&device, queue, &buffer, 0, &mut whole).unwrap();
            let label = format!("len {len} at {offset} on {}", device.describe());
            assert_eq!(&whole[offset..offset + len], &data[..], "{label}");
            assert!(
                whole[..offset].iter().chain(&whole[offset + len..]).all(|v| v.is_nan()),
                "{label}: outside"
            );
            // A range that starts and ends inside chunks.
            let (from, to) = (len / 3, len - len / 4);
            let mut part = vec![0.0f32; to - from];
            staging.download(&device, queue, &buffer, offset + from, &mut part).unwrap();
            assert_eq!(&part[..], &data[from..to], "{label}: part");
        }
        // Bytes too (the svd job's pixels), and the checks of the range.
        let bytes: Vec<u8> = (0..3 * STAGING_CHUNK_BYTES / 2).map(|i| (i * 7 % 251) as u8).collect();
        let mut buffer = device.alloc::<u8>(bytes.len()).unwrap();
        staging.upload(&device, queue, &bytes, &mut buffer, 0).unwrap();
        let mut back = vec![0u8; bytes.len()];
        staging.download(&device, queue, &buffer, 0, &mut back).unwrap();
        assert!(back == bytes, "bytes on {}", device.describe());
        let err = staging.upload(&device, queue, &bytes[..10], &mut buffer, bytes.len() - 5).unwrap_err();
        assert!(err.to_string().contains("copy of 10 elements at"), "{err}");
        let err = staging.download(&device, queue, &buffer, usize::MAX, &mut back[..2]).unwrap_err();
        assert!(err.to_string().contains("copy of 2 elements at"), "{err}");
    }
}
