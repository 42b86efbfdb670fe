//! The CPU engine of the `svd` job (`job::cpu_engine::run_cpu`) against faer and ndarray references, the
//! decoding queue, `.npy` files, and how the GPU engine's pipeline stops at an error.

mod common;

use kernel_suite::job::cpu_engine::{factor_cpu, run_cpu};
use kernel_suite::job::images::{FailedImage, ImageResult, JobImage, JobOptions, Keep, Pixels};
use kernel_suite::job::input_queue::{ImageQueue, Screen, decode_into_queue};
use kernel_suite::svd::{reconstruct_reference, relative_error, thin_svd};
use kernel_suite::{npy, svd::Variant};
use ndarray::Array2;
use rand::Rng;
use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

fn options(ranks: &[usize], check: bool) -> JobOptions {
    JobOptions {
        ranks: ranks.to_vec(),
        check,
        variant: Variant::Regtiled,
        batch_images: 256,
        keep: Keep::Float,
    }
}

fn float(index: usize, name: &str, pixels: Array2<f32>) -> JobImage {
    JobImage { index, name: name.into(), pixels: Pixels::Float(pixels) }
}

fn random(seed: u64, rows: usize, cols: usize) -> Array2<f32> {
    let mut rng = common::rng(seed);
    Array2::from_shape_fn((rows, cols), |_| rng.random_range(0.0..1.0))
}

/// A 40 × 30 image of rank exactly 3 (before f32 rounding), values in [0, 1].
fn rank_three() -> Array2<f32> {
    Array2::from_shape_fn((40, 30), |(i, j)| {
        let (x, y) = (i as f32 / 40.0, j as f32 / 30.0);
        (0.2 + 0.3 * x * y + 0.25 * (3.0 * x).sin() * (2.0 * y).cos() + 0.1 * x * x) / 1.2
    })
}

/// Runs the CPU engine on `images` and returns the results by index.
fn run(images: Vec<JobImage>, options: &JobOptions) -> Vec<ImageResult> {
    let n = images.len();
    let results = Mutex::new(Vec::new());
    let sink = |r: ImageResult| {
        results.lock().unwrap().push(r);
        Ok(())
    };
    run_cpu(&ImageQueue::from_images(images), options, &sink).unwrap();
    let mut results = results.into_inner().unwrap();
    results.sort_by_key(|r| r.index);
    assert_eq!(results.iter().map(|r| r.index).collect::<Vec<_>>(), (0..n).collect::<Vec<_>>());
    results
}

/// Checks one result against faer's thin SVD and the f64 reconstruction of `original`.
fn check_against_reference(result: &ImageResult, original: &Array2<f32>, options: &JobOptions) {
    let name = &result.name;
    assert_eq!((result.rows, result.cols), original.dim(), "{name}");
    let factors = thin_svd(original.view()).unwrap();
    let a64 = original.mapv(f64::from);
    let norm = a64.iter().map(|v| v * v).sum::<f64>().sqrt();
    assert!((result.frobenius_norm - norm).abs() <= 1e-12 * norm.max(1.0), "{name}: ‖A‖_F");
    let kmax = *options.ranks.last().unwrap();
    assert_eq!(result.singular_values.len(), kmax, "{name}");
    let sigma_1 = factors.s[0].max(1e-300);
    for (i, (&got, &want)) in result.singular_values.iter().zip(&factors.s).enumerate() {
        assert!((got - want).abs() <= 1e-10 * sigma_1.max(1.0), "{name}: σ_{i} = {got}, faer {want}");
    }
    assert!(result.singular_values.windows(2).all(|w| w[0] >= w[1]), "{name}: not non-increasing");
    assert_eq!(result.ranks.iter().map(|r| r.k).collect::<Vec<_>>(), options.ranks, "{name}");
    for rank in &result.ranks {
        let k = rank.k;
        let reference = reconstruct_reference(&factors, k).unwrap();
        let values = rank.reconstruction.float().expect("f32 values kept");
        assert_eq!(values.dim(), original.dim(), "{name} k={k}");
        // Every pixel written, and equal to the f64 reconstruction up to f32 rounding.
        let worst = values
            .iter()
            .zip(&reference)
            .map(|(&x, &y)| if x.is_finite() { (f64::from(x) - y).abs() } else { f64::INFINITY })
            .fold(0.0, f64::max);
        assert!(worst <= 1e-5, "{name} k={k}: reconstruction differs from the reference by {worst:e}");
        let want_error = relative_error(reference.mapv(|v| v as f32).view(), a64.view());
        assert!(
            (rank.relative_error - want_error).abs() <= 1e-6,
            "{name} k={k}: relative error {} vs reference {want_error}",
            rank.relative_error
        );
        let want_bound = factors.eckart_young_bound(k);
        assert!(
            (rank.eckart_young_bound - want_bound).abs() <= 1e-9,
            "{name} k={k}: E-Y bound {} vs {want_bound}",
            rank.eckart_young_bound
        );
        // Eckart–Young: the truncated SVD attains the bound (up to f32 rounding of the output).
        assert!(
            (rank.relative_error - rank.eckart_young_bound).abs() <= 1e-5,
            "{name} k={k}: error {} vs bound {}",
            rank.relative_error,
            rank.eckart_young_bound
        );
        match rank.check_error {
            Some(c) => assert!(options.check && (0.0..=1e-6).contains(&c), "{name} k={k}: check error {c}"),
            None => assert!(!options.check, "{name} k={k}: no check error"),
        }
    }
    assert!(result.times.svd_ms >= 0.0 && result.times.reconstruct_ms >= 0.0);
    assert_eq!(
        (result.times.decode_ms, result.times.h2d_ms, result.times.d2h_ms, result.times.encode_ms),
        (0.0, 0.0, 0.0, 0.0)
    );
}

#[test]
fn run_cpu_matches_faer_on_odd_shapes_and_structured_images() {
    let constant = Pixels::Gray8 { rows: 16, cols: 24, data: vec![200; 16 * 24] };
    let mut rng = common::rng(5);
    let gray: Vec<u8> = (0..33 * 17).map(|_| rng.random_range(0..=255)).collect();
    let images = vec![
        float(0, "random", random(1, 37, 53)),
        float(1, "rank3", rank_three()),
        float(2, "zero", Array2::zeros((20, 20))),
        JobImage { index: 3, name: "constant".into(), pixels: constant },
        JobImage { index: 4, name: "gray8".into(), pixels: Pixels::Gray8 { rows: 33, cols: 17, data: gray } },
        float(5, "wide", random(2, 9, 70)),
    ];
    let originals: Vec<Array2<f32>> = images.iter().map(|i| i.pixels.to_f32()).collect();
    for check in [false, true] {
        let options = options(&[1, 3, 7], check);
        let results = run(images.clone(), &options);
        for (result, original) in results.iter().zip(&originals) {
            check_against_reference(result, original, &options);
        }
        // Structure: rank 3 is exact at k = 3; the constant image is rank 1; the zero image is 0.
        assert!(results[1].ranks[1].eckart_young_bound < 1e-6 && results[1].ranks[1].relative_error < 1e-6);
        assert!(results[1].ranks[0].eckart_young_bound > 1e-3);
        let c = 200.0f32 / 255.0;
        assert!((results[3].singular_values[0] - f64::from(c) * (16.0f64 * 24.0).sqrt()).abs() < 1e-9);
        assert!(results[3].ranks[0].relative_error < 1e-6 && results[3].singular_values[1] < 1e-9);
        let zero = &results[2];
        assert!(zero.frobenius_norm == 0.0 && zero.singular_values.iter().all(|&s| s == 0.0));
        for r in &zero.ranks {
            assert_eq!((r.relative_error, r.eckart_young_bound), (0.0, 0.0));
            assert!(r.reconstruction.float().expect("f32 values kept").iter().all(|&v| v == 0.0));
        }
    }
    // Single rows and columns: only rank 1 exists.
    let thin = vec![float(0, "column", random(3, 64, 1)), float(1, "row", random(4, 1, 40))];
    let originals: Vec<Array2<f32>> = thin.iter().map(|i| i.pixels.to_f32()).collect();
    let options = options(&[1], true);
    for (result, original) in run(thin, &options).iter().zip(&originals) {
        check_against_reference(result, original, &options);
        assert!(result.ranks[0].relative_error < 1e-6, "{}: a vector is rank 1", result.name);
    }
}

#[test]
fn run_cpu_rejects_bad_images_naming_them() {
    let mut nan = random(6, 8, 8);
    nan[[2, 3]] = f32::NAN;
    let cases = [
        (float(0, "nan-image", nan), "nan-image: pixel (2, 3) is NaN: the image must be finite"),
        (float(0, "small", random(7, 5, 4)), "small (5×4): rank k = 7 is outside 1..=4"),
        (float(0, "empty", Array2::zeros((0, 5))), "empty: cannot factor an empty 0 × 5 image"),
    ];
    for (image, expected) in cases {
        let called = Mutex::new(0);
        let sink = |_: ImageResult| {
            *called.lock().unwrap() += 1;
            Ok(())
        };
        let err =
            run_cpu(&ImageQueue::from_images(vec![image]), &options(&[1, 7], false), &sink).unwrap_err();
        assert!(err.to_string().contains(expected), "{err}");
        assert_eq!(*called.lock().unwrap(), 0);
    }
    let image = float(0, "fine", random(8, 8, 8));
    for (ranks, expected) in [
        (vec![], "no ranks"),
        (vec![0, 2], "rank k = 0 is not allowed"),
        (vec![3, 2], "ascending without repeats"),
        (vec![2, 2], "ascending without repeats"),
    ] {
        let err = factor_cpu(&image, &options(&ranks, false), faer::Par::Seq).unwrap_err();
        assert!(err.to_string().contains(expected), "{ranks:?}: {err}");
    }
}

#[test]
fn a_sink_error_stops_the_engine_and_is_returned() {
    let images: Vec<JobImage> =
        (0..20).map(|i| float(i, &format!("img{i}"), random(i as u64, 12, 10))).collect();
    let calls = Mutex::new(0);
    let sink = |_: ImageResult| {
        *calls.lock().unwrap() += 1;
        Err(kernel_suite::Error::InvalidInput("disk full".into()))
    };
    let err = run_cpu(&ImageQueue::from_images(images), &options(&[2], false), &sink).unwrap_err();
    assert_eq!(err.to_string(), "invalid input: disk full");
    // Each worker stops at its first failure.
    assert!(*calls.lock().unwrap() <= rayon::current_num_threads());
}

/// The GPU engine's pipeline (a loader, the engine and a finisher thread) in the simulator, over
/// 12 batches of 2 images: all of them handed over in order with 12 timeline rows; and stopped by
/// the first error wherever it arises mid-job (a non-finite image met by the loader in the fourth
/// batch, a sink failing at the fifth image in the finisher), which is returned within a minute
/// (no thread left waiting for another), with no image handed over after it.
#[test]
fn the_gpu_engine_stops_at_an_error_mid_job() {
    use kernel_suite::Device;
    use kernel_suite::job::gpu_engine::run_gpu;
    use std::time::Duration;

    // Runs the job on 24 images (image `nan_at` with a NaN pixel), the sink failing at call
    // `sink_fails_at`: the error or the timeline's batch sizes, and the indices handed over.
    let run = |nan_at: Option<usize>, sink_fails_at: Option<usize>| {
        let (done, outcome) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let images: Vec<JobImage> = (0..24)
                .map(|i| {
                    let mut pixels = random(i as u64, 12, 10);
                    if Some(i) == nan_at {
                        pixels[[3, 4]] = f32::NAN;
                    }
                    float(i, &format!("img{i}"), pixels)
                })
                .collect();
            let options = JobOptions { batch_images: 2, ..options(&[2, 5], false) };
            let handed = Mutex::new(Vec::new());
            let sink = |r: ImageResult| {
                let mut handed = handed.lock().unwrap();
                handed.push(r.index);
                if Some(handed.len()) == sink_fails_at {
                    return Err(kernel_suite::Error::InvalidInput("disk full".into()));
                }
                Ok(())
            };
            let result = run_gpu(&Device::simulator(), &ImageQueue::from_images(images), &options, &sink);
            let batches = result.map(|spans| spans.iter().map(|s| s.images).collect::<Vec<_>>());
            done.send((batches.map_err(|e| e.to_string()), handed.into_inner().unwrap())).unwrap();
        });
        outcome.recv_timeout(Duration::from_secs(60)).expect("the GPU engine returned within a minute")
    };

    let (batches, handed) = run(None, None);
    assert_eq!(batches.unwrap(), vec![2; 12]);
    assert_eq!(handed, (0..24).collect::<Vec<_>>());

    let (result, handed) = run(Some(7), None);
    assert_eq!(result.unwrap_err(), "invalid input: img7: pixel (3, 4) is NaN: the image must be finite");
    assert!(handed.len() <= 6 && handed.iter().copied().eq(0..handed.len()), "{handed:?}");

    let (result, handed) = run(None, Some(5));
    assert_eq!(result.unwrap_err(), "invalid input: disk full");
    assert_eq!(handed, vec![0, 1, 2, 3, 4]);
}

fn scratch(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("kernel-suite-svd-job-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
fn decode_into_queue_keeps_8_bit_images_as_bytes_and_names_bad_files() {
    let dir = scratch("decode");
    let mut rng = common::rng(9);
    let gray: Vec<u8> = (0..7 * 5).map(|_| rng.random_range(0..=255)).collect();
    kernel_suite::image_io::save_gray8(&dir.join("gray.png"), &gray, 7, 5).unwrap();
    let deep: Vec<u16> = (0..6 * 4).map(|_| rng.random_range(0..=u16::MAX)).collect();
    image::ImageBuffer::<image::Luma<u16>, _>::from_raw(6, 4, deep.clone())
        .unwrap()
        .save(dir.join("deep.png"))
        .unwrap();
    let rgb: Vec<u8> = (0..3 * 2 * 3).map(|_| rng.random_range(0..=255)).collect();
    image::RgbImage::from_raw(3, 2, rgb).unwrap().save(dir.join("rgb.png")).unwrap();
    std::fs::write(dir.join("bad.png"), b"not an image").unwrap();
    let names = ["gray", "deep", "rgb", "bad", "missing"];
    let paths: Vec<_> = names.iter().map(|n| dir.join(format!("{n}.png"))).collect();
    let queue = decode_into_queue(paths).unwrap();
    let mut seen = vec![false; names.len()];
    let mut errors = Vec::new();
    while let Some(item) = queue.next() {
        match item {
            Ok(image) => {
                seen[image.index] = true;
                assert_eq!(image.name, names[image.index]);
                assert!(queue.take_decode_ms(image.index) > 0.0, "{}: no decode time", image.name);
                match (image.name.as_str(), &image.pixels) {
                    ("gray", Pixels::Gray8 { rows: 5, cols: 7, data }) => assert_eq!(data, &gray),
                    ("rgb", Pixels::Gray8 { rows: 2, cols: 3, .. }) => {}
                    ("deep", Pixels::Float(a)) => {
                        assert_eq!(a.dim(), (4, 6));
                        for (&got, &want) in a.iter().zip(&deep) {
                            assert!((got - f32::from(want) / 65535.0).abs() < 1e-6);
                        }
                    }
                    (name, pixels) => panic!("{name}: unexpected {:?}", pixels.dim()),
                }
            }
            Err(e) => errors.push(e.to_string()),
        }
    }
    assert_eq!(seen, [true, true, true, false, false]);
    errors.sort();
    assert_eq!(errors.len(), 2, "{errors:?}");
    assert!(errors[0].contains("bad.png: not a readable PNG/JPEG image"), "{errors:?}");
    assert!(errors[1].contains("missing.png: "), "{errors:?}");
}

/// The files `numpy.load` reads: checked byte by byte against the format (magic, version, a header
/// dict naming `<f4` and the shape, the data at a multiple of 64 bytes, little-endian values in C
/// order), then read back, transposed views and 1-D arrays included.
#[test]
fn npy_files_follow_the_format_and_round_trip() {
    let dir = scratch("npy");
    let a = random(10, 13, 7);
    let path = dir.join("a.npy");
    npy::write(&path, &a).unwrap();
    let bytes = std::fs::read(&path).unwrap();
    assert_eq!(&bytes[..8], b"\x93NUMPY\x01\x00");
    let header_len = u16::from_le_bytes([bytes[8], bytes[9]]) as usize;
    let header = std::str::from_utf8(&bytes[10..10 + header_len]).unwrap();
    assert!(header.contains("'descr': '<f4'") && header.contains("'fortran_order': False"), "{header}");
    assert!(header.contains("'shape': (13, 7)") && header.ends_with('\n'), "{header}");
    assert_eq!((10 + header_len) % 64, 0, "data alignment");
    let data: Vec<f32> =
        bytes[10 + header_len..].chunks(4).map(|b| f32::from_le_bytes(b.try_into().unwrap())).collect();
    assert_eq!(data, a.iter().copied().collect::<Vec<_>>());
    assert_eq!(npy::read::<f32, ndarray::Ix2>(&path).unwrap(), a);
    npy::write(&path, &a.t()).unwrap();
    assert_eq!(npy::read::<f32, ndarray::Ix2>(&path).unwrap(), a.t());
    let s = ndarray::arr1(&[3.5f64, 1.25, 1e-300, 0.0]);
    let path = dir.join("s.npy");
    npy::write(&path, &s).unwrap();
    assert_eq!(npy::read::<f64, ndarray::Ix1>(&path).unwrap(), s);
    assert!(npy::read::<f64, ndarray::Ix2>(&path).unwrap_err().to_string().contains("s.npy"));
    assert!(npy::read::<f32, ndarray::Ix1>(&path).unwrap_err().to_string().contains("s.npy: "));
}

/// The queue hands images out in index order whatever order they arrive in, forms each batch from
/// consecutive images, leaves the first refused image at the front, and passes a decode error on.
#[test]
fn the_queue_yields_images_in_index_order_and_batches_whole() {
    let in_order =
        ImageQueue::from_images((0..3).rev().map(|i| float(i, "x", random(i as u64, 2, 2))).collect());
    assert_eq!((0..3).map(|_| in_order.next().unwrap().unwrap().index).collect::<Vec<_>>(), vec![0, 1, 2]);
    assert!(in_order.next().is_none());
    let (sender, receiver) = std::sync::mpsc::channel();
    for index in [3usize, 0, 4, 1, 2, 6, 5] {
        sender.send(Ok(float(index, &format!("img{index}"), random(index as u64, 4, 3)))).unwrap();
    }
    let error = kernel_suite::Error::InvalidInput("bad.png: not an image".into());
    sender.send(Err(FailedImage { index: 7, name: "bad".into(), error })).unwrap();
    drop(sender);
    let queue = ImageQueue::new(receiver);
    let indices = |batch: Vec<JobImage>| batch.iter().map(|i| i.index).collect::<Vec<_>>();
    // Batches of at most three, and image 4 refused so that it starts the next one.
    let joins = |image: &JobImage, batch: &[JobImage]| batch.len() < 3 && image.index != 4;
    assert_eq!(indices(queue.next_batch(joins).unwrap().unwrap()), vec![0, 1, 2]);
    assert_eq!(indices(queue.next_batch(joins).unwrap().unwrap()), vec![3]);
    // Images 4, 5 and 6, then the failed image 7: unscreened, its error ends the batch that
    // reached it (the job stops on it).
    let error = queue.next_batch(joins).unwrap().unwrap_err();
    assert!(error.to_string().contains("bad.png"), "{error}");
    assert!(queue.next_batch(joins).is_none() && queue.next().is_none());
}

/// A batch lent by the queue and given back comes out again first, whole and in order; an engine
/// that finds the queue empty waits while a batch is lent (it may come back) and takes what is
/// given back, and the queue ends once no batch is lent.
#[test]
fn a_lent_batch_given_back_goes_to_the_next_engine() {
    let queue = ImageQueue::from_images((0..5).map(|i| float(i, "x", random(i as u64, 2, 2))).collect());
    let indices = |batch: &[JobImage]| batch.iter().map(|i| i.index).collect::<Vec<_>>();
    let pairs = |_: &JobImage, batch: &[JobImage]| batch.len() < 2;
    let (first, lease) = queue.lend_batch(pairs).unwrap().unwrap();
    assert_eq!(indices(&first), [0, 1]);
    let (second, done) = queue.lend_batch(pairs).unwrap().unwrap();
    assert_eq!(indices(&second), [2, 3]);
    lease.give_back(first);
    let (again, lease) = queue.lend_batch(pairs).unwrap().unwrap();
    assert_eq!(indices(&again), [0, 1]);
    drop(done);
    let (last, last_lease) = queue.lend_batch(pairs).unwrap().unwrap();
    assert_eq!(indices(&last), [4]);
    drop(last_lease);
    // The queue is empty with `lease` out: another engine waits for it, and takes it back.
    std::thread::scope(|scope| {
        let waiting = scope.spawn(|| queue.lend_batch(pairs).map(|b| indices(&b.unwrap().0)));
        std::thread::sleep(std::time::Duration::from_millis(100));
        assert!(!waiting.is_finished(), "an engine stopped while a batch was lent");
        lease.give_back(again);
        assert_eq!(waiting.join().unwrap(), Some(vec![0, 1]));
    });
    assert!(queue.lend_batch(pairs).is_none(), "nothing lent, nothing left");
}

/// Images given back while the producers still run come out again before the images not yet
/// handed out, and the queue then goes on from where it was (it does not wait again for an image
/// another engine holds).
#[test]
fn images_given_back_while_decoding_goes_on_come_first() {
    let (sender, receiver) = std::sync::mpsc::channel();
    // Image 6 too: a batch looks one image past its last.
    for index in 0..7 {
        sender.send(Ok(float(index, "x", random(index as u64, 2, 2)))).unwrap();
    }
    let queue = Arc::new(ImageQueue::new(receiver));
    let (done, taken) = std::sync::mpsc::channel();
    let engine = Arc::clone(&queue);
    std::thread::spawn(move || {
        let pairs = |_: &JobImage, batch: &[JobImage]| batch.len() < 2;
        let indices = |batch: &[JobImage]| batch.iter().map(|i| i.index).collect::<Vec<_>>();
        let (first, lease) = engine.lend_batch(pairs).unwrap().unwrap();
        let (second, _held) = engine.lend_batch(pairs).unwrap().unwrap();
        lease.give_back(first);
        let (again, _) = engine.lend_batch(pairs).unwrap().unwrap();
        let (third, _) = engine.lend_batch(pairs).unwrap().unwrap();
        done.send([indices(&second), indices(&again), indices(&third)]).unwrap();
    });
    let seen =
        taken.recv_timeout(std::time::Duration::from_secs(10)).expect("the queue handed the batches out");
    assert_eq!(seen, [vec![2, 3], vec![0, 1], vec![4, 5]]);
    drop(sender);
}

/// A queue of images 0..10 where 2 and 6 failed to decode and 4 is too small for rank 3, screened
/// with `fail_fast`; also returns the stop flag and the names of the failures reported.
fn screened_queue(fail_fast: bool) -> (ImageQueue, Arc<AtomicBool>, Arc<Mutex<Vec<String>>>) {
    let (sender, receiver) = std::sync::mpsc::channel();
    for index in [1usize, 0, 2, 3, 5, 4, 6, 7, 8, 9] {
        let name = format!("img{index}");
        let item = match index {
            2 | 6 => {
                let error = kernel_suite::Error::InvalidInput(format!("{name}.png: not an image"));
                Err(FailedImage { index, name, error })
            }
            4 => Ok(float(index, &name, random(4, 2, 8))),
            _ => Ok(float(index, &name, random(index as u64, 4, 3))),
        };
        sender.send(item).unwrap();
    }
    drop(sender);
    let stop = Arc::new(AtomicBool::new(false));
    let failures = Arc::new(Mutex::new(Vec::new()));
    let reported = Arc::clone(&failures);
    let screen = Screen {
        max_rank: 3,
        fail_fast,
        stop: Arc::clone(&stop),
        failed: Box::new(move |failed: FailedImage| {
            reported.lock().unwrap().push(format!("{} {}: {}", failed.index, failed.name, failed.error));
            Ok(())
        }),
        noted: Box::new(|note| panic!("no engine runs: {note}")),
    };
    (ImageQueue::new(receiver).screened(screen), stop, failures)
}

/// A screened queue reports each failed image once, in index order, and hands the engines only the
/// others: failures drop out of a batch without ending it. With `fail_fast` it hands out nothing
/// after the first failure, and a stop ends it at once.
#[test]
fn a_screened_queue_reports_failures_and_skips_them() {
    let indices = |batch: Vec<JobImage>| batch.iter().map(|i| i.index).collect::<Vec<_>>();
    let (queue, _, failures) = screened_queue(false);
    let joins = |_: &JobImage, batch: &[JobImage]| batch.len() < 3;
    assert_eq!(indices(queue.next_batch(joins).unwrap().unwrap()), [0, 1, 3]);
    // The batch looked one image past its last, and that one (4) failed too.
    assert_eq!(failures.lock().unwrap().len(), 2);
    assert_eq!(indices(queue.next_batch(joins).unwrap().unwrap()), [5, 7, 8]);
    assert_eq!(queue.next().unwrap().unwrap().index, 9);
    assert!(queue.next().is_none());
    assert_eq!(
        *failures.lock().unwrap(),
        [
            "2 img2: invalid input: img2.png: not an image",
            "4 img4: invalid input: img4 (2×8): rank k = 3 is outside 1..=2 (min(rows, cols) of the image)",
            "6 img6: invalid input: img6.png: not an image",
        ]
    );

    let (queue, _, failures) = screened_queue(true);
    assert_eq!(indices(queue.next_batch(joins).unwrap().unwrap()), [0, 1]);
    assert!(queue.next_batch(joins).is_none() && queue.next().is_none());
    assert_eq!(failures.lock().unwrap().len(), 1);

    let (queue, stop, failures) = screened_queue(false);
    assert_eq!(queue.next().unwrap().unwrap().index, 0);
    stop.store(true, Ordering::SeqCst);
    assert!(queue.next_batch(joins).is_none() && queue.next().is_none());
    assert!(failures.lock().unwrap().is_empty());
}

/// The CPU engine on a screened queue computes exactly the images the screen lets through, and a
/// failure the screen cannot record stops it with that error.
#[test]
fn run_cpu_on_a_screened_queue_computes_the_good_images() {
    let (queue, _, failures) = screened_queue(false);
    let done = Mutex::new(Vec::new());
    let sink = |r: ImageResult| {
        done.lock().unwrap().push(r.index);
        Ok(())
    };
    run_cpu(&queue, &options(&[1, 3], false), &sink).unwrap();
    let mut done = done.into_inner().unwrap();
    done.sort_unstable();
    assert_eq!(done, [0, 1, 3, 5, 7, 8, 9]);
    assert_eq!(failures.lock().unwrap().len(), 3);

    let (sender, receiver) = std::sync::mpsc::channel();
    let error = kernel_suite::Error::InvalidInput("a.png: not an image".into());
    sender.send(Err(FailedImage { index: 0, name: "a".into(), error })).unwrap();
    sender.send(Ok(float(1, "b", random(1, 4, 4)))).unwrap();
    drop(sender);
    let screen = Screen {
        max_rank: 1,
        fail_fast: false,
        stop: Arc::new(AtomicBool::new(false)),
        failed: Box::new(|_| Err(kernel_suite::Error::InvalidInput("report.csv: disk full".into()))),
        noted: Box::new(|note| panic!("the CPU engine notes nothing: {note}")),
    };
    let sink = |_: ImageResult| -> kernel_suite::Result<()> { panic!("no image after the failure") };
    let err = run_cpu(&ImageQueue::new(receiver).screened(screen), &options(&[1], false), &sink).unwrap_err();
    assert_eq!(err.to_string(), "invalid input: report.csv: disk full");
}

/// Exactly rank-deficient images, whose singular values are known: faer returns those of the null
/// space as tiny values that may be negative or out of order, which the CPU path must put in
/// canonical form rather than refuse (a 200 × 150 rank-1 pattern was refused once).
#[test]
fn run_cpu_accepts_exactly_low_rank_images() {
    // Rank 1 as a PNG stores it: (i % 16)·(j % 16) / 255, each value rounded to f32 (a relative
    // 6e-8), so σ₁ = ‖a‖·‖b‖/255 with a_i = i % 16, b_j = j % 16 up to that rounding.
    let (rows, cols) = (200, 150);
    let rank_one: Vec<u8> = (0..rows * cols).map(|p| ((p / cols % 16) * (p % cols % 16)) as u8).collect();
    let norm = |n: usize| (0..n).map(|i| ((i % 16) * (i % 16)) as f64).sum::<f64>().sqrt();
    let sigma_rank_one = norm(rows) * norm(cols) / 255.0;
    // The same pattern / 256: exact in f32, so exactly rank 1.
    let exact_one = Array2::from_shape_fn((rows, cols), |(i, j)| ((i % 16) * (j % 16)) as f32 / 256.0);
    // Rank 4: four constant blocks on the diagonal (rows 50p.., columns 30p..), values 60(p + 1)
    // (one f32 value per block, so exactly rank 4): σ_p = value·√(50·30).
    let (brows, bcols) = (200, 120);
    let blocks: Vec<u8> = (0..brows * bcols)
        .map(|p| {
            let (i, j) = (p / bcols, p % bcols);
            if i / 50 == j / 30 { (60 * (i / 50 + 1)) as u8 } else { 0 }
        })
        .collect();
    let sigma_blocks: Vec<f64> =
        (1..=4).rev().map(|p| f64::from((60 * p) as f32 / 255.0) * 1500f64.sqrt()).collect();
    let images = vec![
        JobImage { index: 0, name: "rank1".into(), pixels: Pixels::Gray8 { rows, cols, data: rank_one } },
        JobImage {
            index: 1,
            name: "blocks".into(),
            pixels: Pixels::Gray8 { rows: brows, cols: bcols, data: blocks },
        },
        float(2, "zero", Array2::zeros((31, 17))),
        float(3, "rank1-exact", exact_one),
    ];
    let options = options(&[1, 4, 9], true);
    let results = run(images, &options);
    // Exact spectra, and how close each must be (relative to σ₁).
    let spectra = [
        (vec![sigma_rank_one], 2e-7),
        (sigma_blocks, 1e-12),
        (vec![], 0.0),
        (vec![norm(rows) * norm(cols) / 256.0], 1e-12),
    ];
    for (result, (exact, tolerance)) in results.iter().zip(&spectra) {
        let name = &result.name;
        let s = &result.singular_values;
        assert!(s.iter().all(|&v| v >= 0.0) && s.windows(2).all(|w| w[0] >= w[1]), "{name}: {s:?}");
        let scale = exact.first().copied().unwrap_or(1.0);
        for (i, &sigma) in s.iter().enumerate() {
            let want = exact.get(i).copied().unwrap_or(0.0);
            assert!((sigma - want).abs() <= tolerance * scale, "{name}: σ_{i} = {sigma:e}, exactly {want:e}");
        }
        for rank in &result.ranks {
            let exact_from = rank.k >= exact.len();
            assert!(rank.eckart_young_bound >= 0.0 && (!exact_from || rank.eckart_young_bound < 1e-6));
            assert!(
                !exact_from || rank.relative_error < 1e-6,
                "{name} k={}: {}",
                rank.k,
                rank.relative_error
            );
            assert!(rank.check_error.unwrap() <= 1e-6, "{name} k={}", rank.k);
        }
    }
    // The rank-1 image at k = 1 is reproduced to f32 rounding, pixel for pixel.
    let k1 = results[0].ranks[0].reconstruction.float().unwrap();
    let worst = (0..rows * cols)
        .map(|p| {
            (f64::from(k1[[p / cols, p % cols]]) - ((p / cols % 16) * (p % cols % 16)) as f64 / 255.0).abs()
        })
        .fold(0.0, f64::max);
    assert!(worst < 1e-6, "rank1 k=1 differs from the image by {worst:e}");
    // The same factors through the library's thin SVD (the reference of the other tests).
    let factors = thin_svd(results[0].ranks[0].reconstruction.float().unwrap().view()).unwrap();
    assert!((factors.s[0] - sigma_rank_one).abs() <= 1e-6 * sigma_rank_one);
    assert!(factors.s.iter().all(|&v| v >= 0.0) && factors.s.windows(2).all(|w| w[0] >= w[1]));
    let back = reconstruct_reference(&factors, 150).unwrap();
    let worst = back.iter().zip(k1.iter()).map(|(&x, &y)| (x - f64::from(y)).abs()).fold(0.0, f64::max);
    assert!(worst < 1e-12, "thin_svd's factors do not reproduce the image: {worst:e}");
}

/// The canonical form on spectra as faer may return them: signs and order fixed with the
/// triplets' sources, energy lost or a non-finite value refused.
#[test]
fn canonical_spectrum_sorts_and_negates_without_changing_the_decomposition() {
    use kernel_suite::svd::{CanonicalSpectrum, TripletSource};
    let raw = [3.0, -2e-17, 2.0, 1e-18, -1.0];
    let spectrum = CanonicalSpectrum::of(&raw, 14.0).unwrap();
    assert_eq!(spectrum.values(), vec![3.0, 2.0, 1.0, 2e-17, 1e-18]);
    let sources: Vec<(usize, f64)> = spectrum.source.iter().map(|t| (t.index, t.sign)).collect();
    assert_eq!(sources, [(0, 1.0), (2, 1.0), (4, -1.0), (1, -1.0), (3, 1.0)]);
    assert!(!spectrum.is_identity());
    let sorted = CanonicalSpectrum::of(&[2.0, 1.0, 0.0], 5.0).unwrap();
    assert!(sorted.is_identity() && sorted.source[2] == TripletSource { index: 2, sign: 1.0 });
    let lost = CanonicalSpectrum::of(&[25.1, 1e-307, 0.0, 0.0], 4.0 * 25.1 * 25.1).unwrap_err();
    assert!(lost.to_string().contains("lost part of the spectrum"), "{lost}");
    let nan = CanonicalSpectrum::of(&[1.0, f64::NAN], 1.0).unwrap_err();
    assert!(nan.to_string().contains("NaN"), "{nan}");
}

/// A file is written whole or not at all: a writer that fails halfway leaves the earlier file and
/// no temporary file, a finished one replaces it with the usual permissions, and a destination
/// that cannot be replaced (a folder) is an error naming it, again with nothing left behind.
#[test]
fn files_are_written_whole_or_not_at_all() {
    use kernel_suite::image_io::{save_gray8, write_atomically};
    use std::os::unix::fs::PermissionsExt;
    let dir = scratch("atomic");
    let listing = || {
        let mut names: Vec<String> =
            std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
        names.sort();
        names
    };
    let path = dir.join("a.bin");
    std::fs::write(&path, b"old").unwrap();
    let plain = std::fs::metadata(&path).unwrap().permissions().mode();
    let err = write_atomically(&path, |file| {
        file.write_all(&[7; 100_000])?;
        Err(std::io::Error::other("disk full"))
    })
    .unwrap_err();
    assert_eq!(err.to_string(), "disk full");
    assert_eq!(std::fs::read(&path).unwrap(), b"old");
    assert_eq!(listing(), ["a.bin"]);
    write_atomically(&path, |file| file.write_all(b"new")).unwrap();
    assert_eq!(std::fs::read(&path).unwrap(), b"new");
    assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode(), plain);
    assert_eq!(listing(), ["a.bin"]);
    std::fs::create_dir(dir.join("b.png")).unwrap();
    let err = save_gray8(&dir.join("b.png"), &[0, 255], 2, 1).unwrap_err().to_string();
    assert!(err.contains("b.png") && err.contains("cannot write PNG"), "{err}");
    assert_eq!(listing(), ["a.bin", "b.png"]);
}

/// The journal appends each image's rows as it is recorded (before any `finish`), and `--resume`
/// trusts exactly the images of such a report that are complete: every rank `ok` and every
/// output in place, with the same options. A failed image, one whose file is missing, and a row
/// cut short are done again; an image's index is its place in the job as now listed.
#[test]
fn resume_keeps_only_complete_images_of_the_same_options() {
    use kernel_suite::job::outputs::{ImageEntry, ImageReport, Journal, Outputs, job_options, resumable};
    let dir = scratch("resumable");
    let original = |_: usize| -> kernel_suite::Result<Array2<f32>> { unreachable!("no mosaic") };
    let outputs = Outputs { dir: &dir, png: true, npy: false, mosaic: false, original: &original };
    let job = JobOptions { keep: Keep::Nothing, ..options(&[2, 5], false) };
    let fingerprint = job_options(&job, &outputs);
    let report = dir.join("report.csv");
    let journal = Journal::create(&report, &fingerprint, Vec::new(), (0..4).collect(), false).unwrap();
    for (index, name) in [(0, "a"), (2, "c"), (3, "d")] {
        let result =
            factor_cpu(&float(index, name, random(index as u64, 9, 7)), &job, faer::Par::Seq).unwrap();
        journal.done(ImageReport::from(result)).unwrap();
    }
    let error = kernel_suite::Error::InvalidInput("b.png: not an image".into());
    journal.failed(&FailedImage { index: 1, name: "b".into(), error }).unwrap();
    let text = std::fs::read_to_string(&report).unwrap();
    assert_eq!(text.lines().count(), 1 + 2 + 1 + 2 + 2, "{text}");
    assert!(text.contains("\nb,,,,,,,,,failed,invalid input: b.png: not an image\n"), "{text}");
    for file in ["a-k2.png", "a-k5.png", "c-k2.png", "d-k2.png", "d-k5.png", "b-k2.png", "b-k5.png"] {
        std::fs::write(dir.join(file), b"whole").unwrap();
    }
    // An image whose rows were being appended when the process died.
    std::fs::OpenOptions::new()
        .append(true)
        .open(&report)
        .unwrap()
        .write_all(b"e,9,7,2,0.5,0.5,1.0,2")
        .unwrap();
    for file in ["e-k2.png", "e-k5.png"] {
        std::fs::write(dir.join(file), b"whole").unwrap();
    }
    let names: Vec<String> = ["new", "d", "c", "b", "a", "e"].map(String::from).into();
    let entries = resumable(&report, &fingerprint, &names, &job.ranks, &outputs).unwrap();
    let kept: Vec<(usize, String)> = entries
        .iter()
        .map(|e| match e {
            ImageEntry::Resumed { index, name, rows } => {
                assert_eq!(rows.len(), 2, "{name}");
                (*index, name.clone())
            }
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(kept, [(1, "d".to_string()), (4, "a".to_string())]);
    let other = job_options(&JobOptions { check: true, ..job.clone() }, &outputs);
    let why = resumable(&report, &other, &names, &job.ranks, &outputs).unwrap_err();
    assert!(why.contains("report.csv has other options"), "{why}");
}

/// The decoders run a bounded way ahead of the queue — three images per decoding thread — even
/// while the image the queue waits for is slow to decode: the images after it are not all
/// decoded into memory meanwhile (they were, once, for a folder with one large image first).
#[test]
fn decoders_stay_a_bounded_way_ahead_of_the_queue() {
    let dir = scratch("window");
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let count = 50 * threads;
    let mut rng = common::rng(11);
    let mut paths = Vec::new();
    for i in 0..count {
        let side = if i == 0 { 2500 } else { 8 };
        let pixels: Vec<u8> = (0..side * side).map(|_| rng.random_range(0..=255)).collect();
        let path = dir.join(format!("img{i:04}.png"));
        kernel_suite::image_io::save_gray8(&path, &pixels, side, side).unwrap();
        paths.push(path);
    }
    let queue = decode_into_queue(paths).unwrap();
    assert_eq!(queue.next().unwrap().unwrap().pixels.dim(), (2500, 2500));
    let decoded = (1..count).filter(|&i| queue.take_decode_ms(i) > 0.0).count();
    assert!(
        decoded <= 3 * threads,
        "{decoded} of {count} images decoded ahead with {threads} decoding threads"
    );
    let rest: Vec<usize> = std::iter::from_fn(|| queue.next()).map(|image| image.unwrap().index).collect();
    assert_eq!(rest, (1..count).collect::<Vec<_>>());
}

/// What [`run_gpu_on`] saw: the batches' sizes, each image's result by index, the notes and the
/// failures (`index name: error`) the queue was told of.
struct GpuRunSeen {
    batches: Vec<usize>,
    results: Vec<ImageResult>,
    notes: Vec<String>,
    failures: Vec<String>,
}

/// Runs the GPU engine on `device` over `images` from a screened queue (as the command runs it),
/// doing with an image too large for the device what `too_large` says.
fn run_gpu_on(
    device: &kernel_suite::Device,
    images: Vec<JobImage>,
    options: &JobOptions,
    too_large: kernel_suite::job::gpu_engine::TooLarge,
) -> GpuRunSeen {
    use kernel_suite::job::gpu_engine::{Faults, run_gpu_staged};
    let (notes, failures) = (Arc::new(Mutex::new(Vec::new())), Arc::new(Mutex::new(Vec::new())));
    let (noted, failed) = (Arc::clone(&notes), Arc::clone(&failures));
    let screen = Screen {
        max_rank: *options.ranks.last().unwrap(),
        fail_fast: false,
        stop: Arc::new(AtomicBool::new(false)),
        failed: Box::new(move |f: FailedImage| {
            failed.lock().unwrap().push(format!("{} {}: {}", f.index, f.name, f.error));
            Ok(())
        }),
        noted: Box::new(move |note| noted.lock().unwrap().push(note.to_string())),
    };
    let queue = ImageQueue::from_images(images).screened(screen);
    let results = Mutex::new(Vec::new());
    let sink = |r: ImageResult| {
        results.lock().unwrap().push(r);
        Ok(())
    };
    let spans = run_gpu_staged(
        device,
        &mut device.staging().unwrap(),
        &queue,
        (options, Faults::alone(too_large)),
        &sink,
    )
    .unwrap();
    drop(queue);
    let mut results = results.into_inner().unwrap();
    results.sort_by_key(|r| r.index);
    let take = |list: Arc<Mutex<Vec<String>>>| Arc::into_inner(list).unwrap().into_inner().unwrap();
    GpuRunSeen {
        batches: spans.iter().map(|s| s.images).collect(),
        results,
        notes: take(notes),
        failures: take(failures),
    }
}

/// `got` is `want` computed in other batches: the same singular values and reconstructions, up
/// to the iteration's tolerance (an image's last bits depend on its batch).
fn assert_same_results(got: &[ImageResult], want: &[ImageResult]) {
    assert_eq!(
        got.iter().map(|r| r.index).collect::<Vec<_>>(),
        want.iter().map(|r| r.index).collect::<Vec<_>>()
    );
    for (g, w) in got.iter().zip(want) {
        assert_eq!((g.rows, g.cols), (w.rows, w.cols), "{}", g.name);
        for (a, b) in g.singular_values.iter().zip(&w.singular_values) {
            assert!((a - b).abs() <= 1e-9 * w.singular_values[0], "{}: σ {a} vs {b}", g.name);
        }
        for (a, b) in g.ranks.iter().zip(&w.ranks) {
            let (a, b) = (a.reconstruction.float().unwrap(), b.reconstruction.float().unwrap());
            let worst = a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0.0f32, f32::max);
            assert!(worst <= 1e-5, "{}: reconstructions differ by {worst}", g.name);
        }
    }
}

/// Sizes as the errors and notes print them: KiB below one MiB, rounded up.
fn kib(bytes: u128) -> String {
    assert!(bytes < 1 << 20, "the test's sizes are KiB");
    format!("{} KiB", bytes.div_ceil(1024))
}

/// Eight 24 × 20 images, and the options of the memory tests.
fn memory_job() -> (Vec<JobImage>, JobOptions) {
    let images = (0..8).map(|i| float(i, &format!("img{i}"), random(100 + i as u64, 24, 20))).collect();
    (images, options(&[2, 5], false))
}

/// The GPU engine sizes each batch by the device's free memory: in a simulator whose memory
/// holds a batch of two of the eight images ([`Footprint::bytes`]), it runs four batches of two,
/// never running out, with the results of one batch of eight in unlimited memory, and gives every
/// byte back. A batch runs within exactly its footprint (the footprint is not short), and the
/// footprint is close to what a batch takes: one image does not fit in 95% of its own (measured:
/// the footprint is 0.0–1% above the peak, for one to three images of 24 × 20 to 200 × 160).
#[test]
fn the_gpu_engine_sizes_batches_by_the_free_memory() {
    use kernel_suite::Device;
    use kernel_suite::job::footprint::Footprint;
    use kernel_suite::job::gpu_engine::TooLarge;
    let (images, options) = memory_job();
    let unlimited = run_gpu_on(&Device::simulator(), images.clone(), &options, TooLarge::Fail);
    assert_eq!(unlimited.batches, [8]);

    let sim = Device::simulator();
    let footprint = Footprint::of(&sim, &images[0], &options).unwrap();
    let bytes = |images| footprint.bytes(images).unwrap();
    let two = bytes(2);
    assert!(bytes(1) < two && two < bytes(3), "{} {two} {}", bytes(1), bytes(3));
    assert_eq!((footprint.images_within(two, 256), footprint.images_within(two - 1, 256)), (2, 1));
    let device = Device::simulator_with_memory(two as usize, true);
    let limited = run_gpu_on(&device, images.clone(), &options, TooLarge::Fail);
    assert_eq!(limited.batches, [2, 2, 2, 2]);
    assert!(
        limited.notes.is_empty() && limited.failures.is_empty(),
        "{:?} {:?}",
        limited.notes,
        limited.failures
    );
    assert_same_results(&limited.results, &unlimited.results);
    assert_eq!(device.free_memory(), Some((two as usize, two as usize)));

    let short = (bytes(1) * 95 / 100) as usize;
    let seen = run_gpu_on(
        &Device::simulator_with_memory(short, true),
        images[..1].to_vec(),
        &options,
        TooLarge::Fail,
    );
    assert!(seen.results.is_empty() && seen.failures.len() == 1, "{:?}", seen.failures);
}

/// Where the device does not say what is free, the batches are sized by running out: the batch of
/// eight that does not fit is freed and run as two of four, each of those as two of two, every
/// step told in a note with what it needs; every image is done once, as in unlimited memory.
#[test]
fn a_batch_that_runs_out_of_memory_is_halved_until_it_fits() {
    use kernel_suite::Device;
    use kernel_suite::job::footprint::Footprint;
    use kernel_suite::job::gpu_engine::TooLarge;
    let (images, options) = memory_job();
    let unlimited = run_gpu_on(&Device::simulator(), images.clone(), &options, TooLarge::Fail);
    let sim = Device::simulator();
    let footprint = Footprint::of(&sim, &images[0], &options).unwrap();
    let bytes = |images| footprint.bytes(images).unwrap();
    let device = Device::simulator_with_memory(bytes(2) as usize, false);
    let seen = run_gpu_on(&device, images, &options, TooLarge::Fail);
    assert_eq!(seen.batches, [2, 2, 2, 2]);
    assert!(seen.failures.is_empty(), "{:?}", seen.failures);
    assert_same_results(&seen.results, &unlimited.results);
    let note = |images: usize, most: usize| {
        format!(
            "a batch of {images} images of 24×20 needs about {} of GPU memory, the free memory unknown; it runs \
             as batches of {half} and {half}, and later batches take at most {most} (--batch-images {most} \
             starts there)",
            kib(bytes(images)),
            half = images / 2,
        )
    };
    assert_eq!(seen.notes, [note(8, 4), note(4, 2), note(4, 2)]);
}

/// An image that does not fit in the free memory even alone is reported failed, once, with the
/// memory it needs and what is free, and nothing of it reaches the sink; the images of another
/// shape that fit are done. With `TooLarge::Cpu` (`--device auto`) the CPU factors it instead,
/// with a note, as the CPU engine would.
#[test]
fn an_image_too_large_for_the_free_memory_fails_or_goes_to_the_cpu() {
    use kernel_suite::Device;
    use kernel_suite::job::cpu_engine::factor_cpu;
    use kernel_suite::job::footprint::Footprint;
    use kernel_suite::job::gpu_engine::TooLarge;
    let options = options(&[2, 5], false);
    let small = |i: usize| float(i, &format!("small{i}"), random(200 + i as u64, 12, 10));
    let images = vec![small(0), float(1, "large", random(201, 24, 20)), small(2)];
    let sim = Device::simulator();
    let large = Footprint::of(&sim, &images[1], &options).unwrap().bytes(1).unwrap();
    let fits = Footprint::of(&sim, &images[0], &options).unwrap().bytes(1).unwrap();
    let budget = (large * 2 / 3) as usize;
    assert!(fits < budget as u128, "a small image fits");

    let device = Device::simulator_with_memory(budget, true);
    let seen = run_gpu_on(&device, images.clone(), &options, TooLarge::Fail);
    assert_eq!(seen.results.iter().map(|r| r.index).collect::<Vec<_>>(), [0, 2]);
    assert_eq!(
        seen.failures,
        [format!(
            "1 large: large (24×20) needs about {} of GPU memory, {} free of {}; free memory on this GPU, or run \
             the image on another (--gpu N) or on the CPU (--device cpu; --device auto falls back to the CPU by \
             itself)",
            kib(large),
            kib(budget as u128),
            kib(budget as u128)
        )]
    );
    assert!(seen.notes.is_empty(), "{:?}", seen.notes);
    assert_eq!(device.free_memory(), Some((budget, budget)));

    let seen = run_gpu_on(&device, images.clone(), &options, TooLarge::Cpu);
    assert_eq!(seen.results.iter().map(|r| r.index).collect::<Vec<_>>(), [0, 1, 2]);
    assert!(seen.failures.is_empty(), "{:?}", seen.failures);
    assert_eq!(
        seen.notes,
        [format!(
            "large (24×20) needs about {} of GPU memory, {} free of {}; factored on the CPU instead (--device auto)",
            kib(large),
            kib(budget as u128),
            kib(budget as u128)
        )]
    );
    let cpu = factor_cpu(&images[1], &options, faer::Par::Seq).unwrap();
    assert_same_results(&seen.results[1..2], &[cpu]);
}

/// On a GPU whose memory the test fills, as another process would: with 1100 and 900 MiB left,
/// `svd` on 16 images of 1024² at rank 50 finishes every image `ok`; with less left than one
/// 2048² image needs, the engine reports the image failed with what it needs and what is free (or
/// with `TooLarge::Cpu` factors it on the CPU, with a note); with 200 MiB left, `svd` cannot
/// start: one `error:` line, exit status 1, no file written. `SKIPPED` without a GPU.
#[test]
fn the_job_fits_a_gpu_whose_memory_is_mostly_taken() {
    use kernel_suite::job::footprint::Footprint;
    use kernel_suite::job::gpu_engine::TooLarge;
    const TEST: &str = "the_job_fits_a_gpu_whose_memory_is_mostly_taken";
    let Some(device) = common::gpu_or_skip(TEST) else { return };
    device.set_poison_allocations(false);
    const MIB: usize = 1 << 20;
    // All but `left` bytes of the GPU's memory, held until dropped.
    let fill = |left: usize| {
        let (free, _) = device.free_memory().expect("a GPU says what is free");
        device.alloc::<u8>(free.saturating_sub(left)).unwrap()
    };
    let dir = scratch("gpu-memory");
    let images = dir.join("images");
    std::fs::create_dir_all(&images).unwrap();
    for i in 0..16 {
        let pixels = kernel_suite::workload::procedural_image(i, 1024, 1024);
        kernel_suite::image_io::save_gray8(
            &images.join(format!("img{i:02}.png")),
            pixels.as_slice().unwrap(),
            1024,
            1024,
        )
        .unwrap();
    }
    let svd = |out: &str| {
        let args = ["images", "--ranks", "50", "--device", "gpu", "--out-dir", out, "--profile"];
        let out = std::process::Command::new(common::bin("svd", env!("CARGO_BIN_EXE_svd")))
            .current_dir(&dir)
            .args(args)
            .output()
            .unwrap();
        (
            out.status.code().unwrap(),
            String::from_utf8(out.stdout).unwrap(),
            String::from_utf8(out.stderr).unwrap(),
        )
    };
    for left in [1100, 900] {
        let hog = fill(left * MIB);
        let out = format!("left-{left}");
        let (code, stdout, stderr) = svd(&out);
        drop(hog);
        assert_eq!(code, 0, "{left} MiB left\nstdout: {stdout}\nstderr: {stderr}");
        let report = std::fs::read_to_string(dir.join(&out).join("report.csv")).unwrap();
        assert_eq!(report.lines().filter(|l| l.contains(",ok,")).count(), 16, "{report}");
        eprintln!(
            "{left} MiB left: {}",
            stderr.lines().filter(|l| l.contains("timeline")).collect::<Vec<_>>().join("; ")
        );
    }

    let options = options(&[50], false);
    let large = float(0, "large", random(7, 2048, 2048));
    let needs = Footprint::of(&device, &large, &options).unwrap().bytes(1).unwrap();
    // Half the footprint free: the engine still tries an image alone (its footprint may
    // overstate it), and the try runs out of memory.
    let left = needs as usize / 2;
    let hog = fill(left);
    let failed = run_gpu_on(&device, vec![large.clone()], &options, TooLarge::Fail);
    assert!(failed.results.is_empty(), "{:?}", failed.notes);
    assert_eq!(failed.failures.len(), 1);
    // `0 large: large (2048×2048) needs about N MiB of GPU memory, F MiB free of T MiB; …`: N at
    // least the footprint, F at most what was left.
    let failure = &failed.failures[0];
    let number = |after: &str| -> usize {
        let rest = &failure[failure.find(after).unwrap_or_else(|| panic!("{failure}")) + after.len()..];
        rest.split(' ').next().unwrap().parse().unwrap_or_else(|_| panic!("{failure}"))
    };
    assert!(
        failure.starts_with("0 large: large (2048×2048) needs about ") && failure.contains("(--gpu N)"),
        "{failure}"
    );
    assert!(
        number("needs about ") as u128 >= needs.div_ceil(MIB as u128),
        "{failure}: footprint {needs} bytes"
    );
    assert!(number("GPU memory, ") <= left.div_ceil(MIB), "{failure}: {left} bytes left");
    let on_cpu = run_gpu_on(&device, vec![large], &options, TooLarge::Cpu);
    drop(hog);
    assert_eq!(on_cpu.results.len(), 1);
    assert!(
        on_cpu.notes.len() == 1 && on_cpu.notes[0].ends_with("factored on the CPU instead (--device auto)"),
        "{:?}",
        on_cpu.notes
    );

    let hog = fill(200 * MIB);
    let (code, stdout, stderr) = svd("starved");
    drop(hog);
    assert_eq!(code, 1, "stdout: {stdout}\nstderr: {stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.starts_with("error: GPU 0 has too little free memory to start (")
            && stderr.contains("(--gpu N)"),
        "{stderr}"
    );
    assert_eq!(std::fs::read_dir(dir.join("starved")).map_or(0, |files| files.count()), 0);
}

/// With 600 MiB of the GPU's memory left free (the test holds the rest, as another process
/// would), `svd` on one 1024² image at rank 50 starts and finishes it `ok`: the context's stack
/// limit is cut to the kernels' largest stack frame before the module loads. Its `--profile` says
/// what the start-up took (printed here for the record). `SKIPPED` without a GPU.
#[test]
fn one_1024_image_starts_and_finishes_with_600_mib_free() {
    use kernel_suite::device::{ModuleImage, stack_bytes_needed};
    const TEST: &str = "one_1024_image_starts_and_finishes_with_600_mib_free";
    let Some(device) = common::gpu_or_skip(TEST) else { return };
    device.set_poison_allocations(false);
    const MIB: usize = 1 << 20;
    let dir = scratch("gpu-600");
    let images = dir.join("images");
    std::fs::create_dir_all(&images).unwrap();
    let pixels = kernel_suite::workload::procedural_image(3, 1024, 1024);
    kernel_suite::image_io::save_gray8(&images.join("img.png"), pixels.as_slice().unwrap(), 1024, 1024)
        .unwrap();
    let (free, _) = device.free_memory().expect("a GPU says what is free");
    let hog = device.alloc::<u8>(free.saturating_sub(600 * MIB)).unwrap();
    let left = device.free_memory().unwrap().0;
    let args = ["images", "--ranks", "50", "--device", "gpu", "--out-dir", "out", "--profile"];
    let out = std::process::Command::new(common::bin("svd", env!("CARGO_BIN_EXE_svd")))
        .current_dir(&dir)
        .args(args)
        .output()
        .unwrap();
    drop(hog);
    let (stdout, stderr) = (String::from_utf8(out.stdout).unwrap(), String::from_utf8(out.stderr).unwrap());
    assert_eq!(out.status.code(), Some(0), "{} MiB left\nstdout: {stdout}\nstderr: {stderr}", left / MIB);
    assert!(stdout.contains("summary: 1 of 1 image(s) done, 0 failed"), "{stdout}");
    let report = std::fs::read_to_string(dir.join("out/report.csv")).unwrap();
    assert_eq!(report.lines().filter(|l| l.contains(",ok,")).count(), 1, "{report}");
    let line = stderr
        .lines()
        .find(|l| l.starts_with("GPU memory at start-up: "))
        .unwrap_or_else(|| panic!("no start-up memory in the profile:\n{stderr}"));
    eprintln!("{TEST}: {} MiB left; {line}", left / MIB);
    if let Some(stack) = stack_bytes_needed(&kernel_suite::KERNELS, ModuleImage::Cubin)
        && device.describe().contains("embedded cubin")
    {
        assert!(line.contains(&format!(" → {stack} B per thread: ")), "{line}: the kernels need {stack} B");
    }
}
