//! `Staging` (device/staging.rs): copies through two reused pinned chunks, of ranges of any size and
//! offset, on every device. The sizes span several chunks and end mid-chunk, so the alternation of
//! the chunks and the last partial chunk are exercised; the buffer around the range is poisoned and
//! must stay so. And `Device::zero_on`, the memset of a view on another queue.

mod common;

use kernel_suite::device::STAGING_CHUNK_BYTES;
use rand::Rng;

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

/// `upload_parts`: parts of odd sizes (an empty one among them) that cross chunk boundaries land
/// one after the other from the offset, the buffer around them still poison; too many elements for
/// the buffer are refused. `download_parts` brings them back into arrays of the same sizes.
#[test]
fn staged_parts_land_one_after_the_other() {
    for device in common::devices("staged_parts_land_one_after_the_other") {
        let mut staging = device.staging().unwrap();
        let queue = device.queue();
        let chunk = STAGING_CHUNK_BYTES / 4;
        let mut rng = common::rng(77);
        let parts: Vec<Vec<f32>> = [chunk / 3 + 1, 0, chunk + 5, 17, 2 * chunk - 3]
            .iter()
            .map(|&len| common::random_vec(&mut rng, len, -1.0, 1.0))
            .collect();
        let joined: Vec<f32> = parts.concat();
        let offset = 9;
        let total = offset + joined.len() + 13;
        let mut buffer = device.alloc::<f32>(total).unwrap();
        let slices: Vec<&[f32]> = parts.iter().map(Vec::as_slice).collect();
        staging.upload_parts(&device, queue, &slices, &mut buffer, offset).unwrap();
        let mut whole = vec![0.0f32; total];
        staging.download(&device, queue, &buffer, 0, &mut whole).unwrap();
        let label = device.describe();
        assert!(whole[offset..offset + joined.len()] == joined[..], "{label}");
        assert!(whole[..offset].iter().chain(&whole[offset + joined.len()..]).all(|v| v.is_nan()), "{label}");
        let err = staging.upload_parts(&device, queue, &slices, &mut buffer, 23).unwrap_err();
        assert!(err.to_string().contains(&format!("copy of {} elements at", joined.len())), "{err}");
        let mut back: Vec<Vec<f32>> = parts.iter().map(|p| vec![-7.0; p.len()]).collect();
        let mut outs: Vec<&mut [f32]> = back.iter_mut().map(Vec::as_mut_slice).collect();
        staging.download_parts(&device, queue, &buffer, offset, &mut outs).unwrap();
        assert!(back == parts, "{label}: download_parts");
        let mut outs: Vec<&mut [f32]> = back.iter_mut().map(Vec::as_mut_slice).collect();
        let err = staging.download_parts(&device, queue, &buffer, 23, &mut outs).unwrap_err();
        assert!(err.to_string().contains(&format!("copy of {} elements at", joined.len())), "{err}");
    }
}

/// The device's own copies (`upload`, `download_into`): large ones go through its staging on a GPU,
/// page-locked memory is copied directly, every size round-trips exactly, and `copy_totals`
/// counts every byte once.
#[test]
fn device_copies_of_any_size_round_trip_and_are_counted() {
    for device in common::devices("device_copies_of_any_size_round_trip_and_are_counted") {
        let chunk = STAGING_CHUNK_BYTES / 8;
        let mut counted = 0u64;
        for (seed, len) in [(11, 3usize), (12, chunk - 1), (13, chunk), (14, 2 * chunk + 12345)] {
            let mut rng = common::rng(seed);
            let data: Vec<f64> = (0..len).map(|_| rng.random_range(-1e3..1e3)).collect();
            let buffer = device.upload(&data).unwrap();
            let mut back = vec![f64::NAN; len];
            device.download_into(&buffer, &mut back).unwrap();
            assert!(back == data, "len {len} on {}", device.describe());
            counted += 8 * len as u64;
            let totals = device.copy_totals();
            assert_eq!((totals.h2d_bytes, totals.d2h_bytes), (counted, counted), "len {len}");
        }
        let mut pinned = device.pinned::<f64>(chunk + 7).unwrap();
        let mut rng = common::rng(15);
        pinned.iter_mut().for_each(|v| *v = rng.random_range(-1.0..1.0));
        let expected = pinned.to_vec();
        let buffer = device.upload(&pinned).unwrap();
        pinned.iter_mut().for_each(|v| *v = f64::NAN);
        device.download_into(&buffer, &mut pinned).unwrap();
        assert!(pinned[..] == expected[..], "pinned on {}", device.describe());
        let totals = device.copy_totals();
        assert!(totals.h2d_ms > 0.0 && totals.d2h_ms > 0.0, "{totals:?}");
        // The staging is made once, at the first copy of a chunk or more, on a GPU only.
        assert_eq!(
            totals.staging_setup_ms > 0.0,
            device.backend() == kernel_suite::Backend::Gpu,
            "{totals:?}"
        );
    }
}

/// `zeroed` and `fill`: every element set, whatever the element's width and bytes (one byte
/// repeated, two, four, or an 8-byte value whose halves differ), over poisoned memory; an empty
/// buffer is no error.
#[test]
fn buffers_zeroed_and_filled() {
    for device in common::devices("buffers_zeroed_and_filled") {
        device.set_poison_allocations(true);
        let label = device.describe();
        let len = 3 * STAGING_CHUNK_BYTES / 8 + 5;
        assert!(
            device.download(&device.zeroed::<f64>(len).unwrap()).unwrap().iter().all(|&v| v == 0.0),
            "{label}"
        );
        assert!(device.download(&device.zeroed::<u8>(7).unwrap()).unwrap() == [0; 7], "{label}");
        fn check<T: kernel_suite::Element + PartialEq + std::fmt::Debug>(
            device: &kernel_suite::Device,
            len: usize,
            value: T,
        ) {
            let mut buffer = device.alloc::<T>(len).unwrap();
            device.fill(&mut buffer, value).unwrap();
            let back = device.download(&buffer).unwrap();
            assert!(back.iter().all(|v| *v == value), "{value:?} on {}: {:?}", device.describe(), &back[..4]);
        }
        check(&device, len, 0x5au8);
        check(&device, len, -2i16);
        check(&device, len, 0x0102u16);
        check(&device, len, 1.5f32);
        check(&device, len, 1.0f64);
        check(&device, len, -1i64);
        check(&device, 1001, 3u32);
        let mut empty = device.alloc::<f64>(0).unwrap();
        device.fill(&mut empty, 2.0).unwrap();
    }
}

/// `zero_on` zeroes exactly the view it is given, on a queue other than the device's own (as a
/// binding's caller stream is), in poisoned memory: elements it missed would read `0xffffffff`,
/// and the poison around the view must stay.
#[test]
fn zero_on_zeroes_a_view_on_another_queue() {
    for device in common::devices("zero_on_zeroes_a_view_on_another_queue") {
        let queue = device.new_queue().unwrap();
        let mut buffer = device.alloc::<u32>(10_001).unwrap();
        device.zero_on(&queue, buffer.view_mut(37..9_000).unwrap()).unwrap();
        device.sync_queue(&queue).unwrap();
        let got = device.download(&buffer).unwrap();
        for (i, &v) in got.iter().enumerate() {
            let want = if (37..9_000).contains(&i) { 0 } else { u32::MAX };
            assert_eq!(v, want, "element {i} on {}", device.describe());
        }
    }
}

/// Buffers from the device's memory pool (`alloc_temporary`, from one value to more than the pool
/// reserves at start and more than a staging chunk) take every kind of copy as `alloc`'s do —
/// direct, staged, device to device — and start poisoned when poisoning is on; after they are
/// dropped the pool's idle memory counts as free.
#[test]
fn pool_buffers_copy_and_poison_as_allocated_ones() {
    for device in common::devices("pool_buffers_copy_and_poison_as_allocated_ones") {
        device.set_poison_allocations(true);
        let queue = device.queue();
        let reserved = kernel_suite::device::POOL_RESERVE_BYTES / 4;
        for (seed, len) in [(5, 1usize), (6, 1001), (7, STAGING_CHUNK_BYTES / 4 + 3), (8, reserved + 5)] {
            let label = format!("{len} values on {}", device.describe());
            let data = common::random_vec(&mut common::rng(seed), len, -1.0, 1.0);
            let mut first = device.alloc_temporary::<f32>(queue, len).unwrap();
            let mut second = device.alloc_temporary::<f32>(queue, len).unwrap();
            assert!(device.download(&first).unwrap().iter().all(|v| v.is_nan()), "{label}: poisoned");
            device.upload_into(&mut first, &data).unwrap();
            device.copy_view(queue, first.view(..).unwrap(), second.view_mut(..).unwrap()).unwrap();
            assert_eq!(device.download(&second).unwrap(), data, "{label}");
        }
        device.synchronize().unwrap();
        if let Some((free, total)) = device.free_memory() {
            assert!(free <= total, "{free} of {total} bytes free");
        }
    }
}
