//! The GPU SVD (`kernels::svd_factor`) against faer's thin SVD (LAPACK-style, f64): singular
//! values within 1e-5·σ₁, reconstruction errors at the Eckart–Young bound, on odd shapes and the
//! edge cases (1×1, 1×n, n×1, tall, wide, rank-deficient, zero, constant, repeated values,
//! k = min(m, n)).

mod common;

use kernel_suite::svd::thin_svd;
use kernel_suite::svd_factor::{
    self, CholeskyMethod, GramMethod, RitzMethod, Triplets, truncated_svd, truncated_svd_with,
};
use ndarray::{Array2, ArrayView2};
use rand::Rng;

fn random_image(seed: u64, m: usize, n: usize) -> Array2<f32> {
    let mut rng = common::rng(seed);
    Array2::from_shape_fn((m, n), |_| rng.random_range(0.0..1.0))
}

/// A smooth image plus noise: a decaying spectrum like a photograph's.
fn smooth_image(seed: u64, m: usize, n: usize) -> Array2<f32> {
    let mut rng = common::rng(seed);
    let (a, b, c): (f32, f32, f32) =
        (rng.random_range(1.0..4.0), rng.random_range(1.0..4.0), rng.random_range(0.0..3.0));
    Array2::from_shape_fn((m, n), |(i, j)| {
        let (y, x) = (i as f32 / m as f32, j as f32 / n as f32);
        0.5 + 0.3 * (a * x + c).sin() * (b * y).cos()
            + 0.1 * (7.0 * x * y).sin()
            + rng.random_range(-0.02..0.02)
    })
}

/// `U` (m × k), `s` (k), `Vᵀ` (k × n) with the given singular values and random orthonormal factors.
fn with_singular_values(seed: u64, m: usize, n: usize, s: &[f64]) -> Array2<f32> {
    let mut rng = common::rng(seed);
    let k = s.len();
    let orth = |rows: usize, rng: &mut rand::rngs::SmallRng| {
        let a = faer::Mat::<f64>::from_fn(rows, k, |_, _| rng.random_range(-1.0..1.0));
        a.qr().compute_thin_Q()
    };
    let (u, v) = (orth(m, &mut rng), orth(n, &mut rng));
    Array2::from_shape_fn((m, n), |(i, j)| (0..k).map(|p| u[(i, p)] * s[p] * v[(j, p)]).sum::<f64>() as f32)
}

/// Checks the triplets of `image` against faer: singular values, `‖A‖_F`, and the relative error
/// of the f32 reconstruction against the exact Eckart–Young bound.
fn check(label: &str, image: ArrayView2<f32>, t: &Triplets, k: usize) {
    let (m, n) = image.dim();
    let reference = thin_svd(image).unwrap();
    let sigma1 = reference.s[0];
    assert!(t.u.iter().chain(t.vt.iter()).all(|v| v.is_finite()), "{label}: unwritten or non-finite factors");
    assert_eq!((t.u.dim(), t.vt.dim(), t.s.len()), ((m, k), (k, n), k), "{label}: shapes");
    for (i, (&got, &want)) in t.s.iter().zip(&reference.s).enumerate() {
        assert!(
            (got - want).abs() <= 1e-5 * sigma1 + 1e-12,
            "{label}: σ{i} = {got} vs {want} (σ₁ = {sigma1})"
        );
    }
    let norm: f64 = image.iter().map(|&v| (v as f64).powi(2)).sum::<f64>().sqrt();
    assert!(
        (t.frobenius_norm - norm).abs() <= 1e-12 * norm.max(1.0),
        "{label}: ‖A‖ {} vs {norm}",
        t.frobenius_norm
    );
    let mut diff = 0.0f64;
    for i in 0..m {
        for j in 0..n {
            let rec: f64 = (0..k).map(|p| t.u[[i, p]] as f64 * t.s[p] * t.vt[[p, j]] as f64).sum();
            diff += (image[[i, j]] as f64 - rec).powi(2);
        }
    }
    let error = if norm == 0.0 { diff.sqrt() } else { diff.sqrt() / norm };
    let bound = reference.eckart_young_bound(k);
    // Where the bound is (near) zero, the f32 factors' rounding sets the floor.
    assert!(
        (error - bound).abs() <= 1e-4 * bound + 2e-6,
        "{label}: relative error {error} vs Eckart–Young bound {bound}"
    );
}

#[test]
fn triplets_match_faer_on_odd_shapes_and_edge_cases() {
    let rank3 = {
        let (a, b) = (random_image(11, 41, 3), random_image(12, 3, 29));
        a.dot(&b)
    };
    let cases: Vec<(&str, Array2<f32>, usize)> = vec![
        ("1×1", Array2::from_elem((1, 1), 0.7), 1),
        ("1×n", random_image(2, 1, 37), 1),
        ("n×1", random_image(3, 37, 1), 1),
        ("tall 53×37", smooth_image(4, 53, 37), 5),
        ("wide 29×61", smooth_image(5, 29, 61), 7),
        ("noise 33×35", random_image(6, 33, 35), 4),
        ("rank 3, k = 6", rank3, 6),
        ("zero", Array2::zeros((19, 23)), 3),
        ("constant", Array2::from_elem((23, 19), 0.4), 3),
        ("repeated σ", with_singular_values(7, 31, 27, &[3.0, 2.0, 2.0, 2.0, 1.0, 1.0, 0.5, 0.25]), 4),
        ("k = min(m, n)", random_image(8, 21, 17), 17),
    ];
    for device in common::devices("triplets_match_faer_on_odd_shapes_and_edge_cases") {
        for (label, image, k) in &cases {
            let got = truncated_svd(&device, &[image.view()], *k)
                .unwrap_or_else(|e| panic!("{label} on {}: {e}", device.describe()));
            check(&format!("{label} on {}", device.describe()), image.view(), &got[0], *k);
        }
    }
}

/// The solvers for subspaces too large for one block's shared memory — block Jacobi on the device
/// (its blocks smaller in the simulator, so several rounds run) and the host's — give the same
/// triplets, on shapes small enough for the simulator, and on batches with a batch stride.
#[test]
fn the_large_subspace_solvers_match_faer() {
    let cases: Vec<(&str, Array2<f32>, usize)> = vec![
        ("tall 47×31", smooth_image(31, 47, 31), 6),
        ("wide 23×40", random_image(32, 23, 40), 5),
        ("noise 70×64, b = 56", random_image(35, 70, 64), 28),
        ("zero", Array2::zeros((9, 12)), 2),
        ("repeated σ", with_singular_values(33, 25, 21, &[2.0, 2.0, 1.0, 0.5]), 3),
        ("k = min(m, n)", random_image(34, 13, 9), 9),
    ];
    for device in common::devices("the_large_subspace_solvers_match_faer") {
        for solver in [RitzMethod::BlockJacobi, RitzMethod::Host, RitzMethod::Tridiagonal] {
            let large = |plan: &mut svd_factor::Plan| {
                plan.ritz = solver;
                plan.cholesky = CholeskyMethod::Blocked;
            };
            for (label, image, k) in &cases {
                let label = format!("{label} ({solver:?}) on {}", device.describe());
                let got = truncated_svd_with(&device, &[image.view()], *k, large)
                    .unwrap_or_else(|e| panic!("{label}: {e}"));
                check(&label, image.view(), &got[0], *k);
            }
            let batch = [smooth_image(36, 40, 33), random_image(37, 40, 33), Array2::zeros((40, 33))];
            let views: Vec<_> = batch.iter().map(|i| i.view()).collect();
            let got = truncated_svd_with(&device, &views, 20, large).unwrap();
            for (i, (image, t)) in batch.iter().zip(&got).enumerate() {
                check(&format!("batch image {i} ({solver:?}) on {}", device.describe()), image.view(), t, 20);
            }
        }
    }
}

/// Every eigenpair of the Gram matrix at once (no iteration), by each Ritz solver that takes
/// `b = r`, gives the triplets faer gives: odd shapes, tall and wide, rank-deficient, zero and
/// repeated singular values, `k = min(m, n)`, and a batch with its strides.
#[test]
fn the_whole_gram_eigendecomposition_matches_faer() {
    let rank3 = random_image(41, 37, 3).dot(&random_image(42, 3, 30));
    let cases: Vec<(&str, Array2<f32>, usize)> = vec![
        ("tall 47×31", smooth_image(43, 47, 31), 6),
        ("wide 23×40", random_image(44, 23, 40), 5),
        ("rank 3, k = 5", rank3, 5),
        ("zero", Array2::zeros((9, 12)), 2),
        ("repeated σ", with_singular_values(45, 25, 21, &[2.0, 2.0, 1.0, 0.5]), 3),
        ("k = min(m, n)", random_image(46, 13, 9), 9),
        ("1×1", Array2::from_elem((1, 1), 0.3), 1),
    ];
    for device in common::devices("the_whole_gram_eigendecomposition_matches_faer") {
        let on = device.describe();
        for solver in [RitzMethod::Tridiagonal, RitzMethod::OneBlockJacobi, RitzMethod::Host] {
            let whole = |images: usize, (m, n): (usize, usize), k: usize| {
                let device = &device;
                move |plan: &mut svd_factor::Plan| {
                    *plan = svd_factor::Plan::with_method(
                        device,
                        (m, n),
                        images,
                        k,
                        GramMethod::WholeEigendecomposition,
                    )
                    .unwrap();
                    plan.ritz = solver;
                }
            };
            for (label, image, k) in &cases {
                let label = format!("{label} ({solver:?}) on {on}");
                let got = truncated_svd_with(&device, &[image.view()], *k, whole(1, image.dim(), *k))
                    .unwrap_or_else(|e| panic!("{label}: {e}"));
                check(&label, image.view(), &got[0], *k);
            }
            let batch = [smooth_image(47, 33, 40), random_image(48, 33, 40), Array2::zeros((33, 40))];
            let views: Vec<_> = batch.iter().map(|i| i.view()).collect();
            let got = truncated_svd_with(&device, &views, 12, whole(3, (33, 40), 12)).unwrap();
            for (i, (image, t)) in batch.iter().zip(&got).enumerate() {
                check(&format!("batch image {i} ({solver:?}) on {on}"), image.view(), t, 12);
            }
        }
    }
}

#[test]
fn a_batch_factors_each_image_independently() {
    let images = [
        smooth_image(21, 45, 39),
        random_image(22, 45, 39),
        Array2::zeros((45, 39)),
        smooth_image(23, 45, 39),
    ];
    let views: Vec<_> = images.iter().map(|i| i.view()).collect();
    for device in common::devices("a_batch_factors_each_image_independently") {
        let got = truncated_svd(&device, &views, 6).unwrap();
        for (i, (image, t)) in images.iter().zip(&got).enumerate() {
            check(&format!("batch image {i} on {}", device.describe()), image.view(), t, 6);
        }
    }
}

/// Flat spectra (white noise, with and without its mean's outlying σ₁; a spectrum of equally
/// spaced values) take Chebyshev filters between Rayleigh–Ritz steps and converge in far fewer
/// products with the Gram matrix than power steps' `ln(1/tol)/ln(λ_k/λ_{b+1})`, to the same
/// accuracy; a batch mixing them with a photo-like image and a zero image too.
#[test]
fn flat_spectra_take_chebyshev_filters() {
    let (m, n, k) = (250, 231, 20);
    let b = svd_factor::subspace_size(k, n);
    let centred = {
        let mut rng = common::rng(41);
        Array2::from_shape_fn((m, n), |_| rng.random_range(-1.0f32..1.0))
    };
    let spaced: Vec<f64> = (0..n).map(|i| 2.0 - i as f64 / n as f64).collect();
    let cases = [
        ("uniform noise", random_image(42, m, n)),
        ("centred noise", centred),
        ("equally spaced σ", with_singular_values(43, m, n, &spaced)),
    ];
    for device in common::devices("flat_spectra_take_chebyshev_filters") {
        let on = device.describe();
        let mut rayleigh_ritz_steps = Vec::new();
        for (label, image) in &cases {
            let reference = thin_svd(image.view()).unwrap();
            // Power steps alone shrink the worst leading residual by λ_k/λ_{b+1} per product.
            let rate = (reference.s[k - 1] / reference.s[b]).powi(2);
            let power_products = (1e5f64).ln() / rate.ln();
            let a = device.upload(&image.iter().map(|&v| v as f64).collect::<Vec<_>>()).unwrap();
            let plan =
                svd_factor::Plan::with_method(&device, (m, n), 1, k, GramMethod::SubspaceIteration).unwrap();
            let f = svd_factor::factor_with(&device, &a, &plan).unwrap();
            assert!(f.filter_steps > 0, "{label} on {on}: no filter ({} iterations)", f.iterations);
            assert!(
                (f.iterations as f64) < 0.6 * power_products,
                "{label} on {on}: {} products ({} in filters), power steps would take about {power_products:.0}",
                f.iterations,
                f.filter_steps
            );
            rayleigh_ritz_steps.push(f.rayleigh_ritz_steps);
            let got = truncated_svd(&device, &[image.view()], k).unwrap();
            check(&format!("{label} on {on}"), image.view(), &got[0], k);
        }
        // Uniform noise's mean (σ₁ about 14 times σ₂ here) is deflated once converged: it costs
        // no Rayleigh–Ritz step more than centred noise.
        assert!(
            rayleigh_ritz_steps[0] <= rayleigh_ritz_steps[1],
            "on {on}: Rayleigh–Ritz steps {rayleigh_ritz_steps:?} (uniform, centred noise)"
        );
        let batch = [cases[0].1.clone(), smooth_image(44, m, n), Array2::zeros((m, n)), cases[2].1.clone()];
        let views: Vec<_> = batch.iter().map(|i| i.view()).collect();
        let got = truncated_svd(&device, &views, k).unwrap();
        for (i, (image, t)) in batch.iter().zip(&got).enumerate() {
            check(&format!("mixed batch image {i} on {on}"), image.view(), t, k);
        }
    }
}

#[test]
fn bad_input_is_an_error() {
    let device = kernel_suite::Device::simulator();
    let image = random_image(31, 5, 4);
    let err = truncated_svd(&device, &[image.view()], 5).unwrap_err().to_string();
    assert!(err.contains("outside 1..=4"), "{err}");
    let mut nan = image.clone();
    nan[[2, 1]] = f32::NAN;
    let err = truncated_svd(&device, &[nan.view()], 2).unwrap_err().to_string();
    assert!(err.contains("(2, 1) is NaN"), "{err}");
    let other = random_image(32, 4, 5);
    let err = truncated_svd(&device, &[image.view(), other.view()], 2).unwrap_err().to_string();
    assert!(err.contains("the batch is 5 × 4"), "{err}");
    assert!(truncated_svd(&device, &[], 1).is_err());
    // The plan bounds the arrays the kernels index with 32 bits: a tall 100 000 × 64 matrix fits
    // (its images, not m², are the largest array), 40 000² does not.
    use kernel_suite::svd_factor::Plan;
    assert!(Plan::new(&device, (100_000, 64), 1, 10).is_ok());
    assert!(Plan::new(&device, (64, 100_000), 2, 64).is_ok());
    let err = Plan::new(&device, (40_000, 40_000), 2, 10).unwrap_err().to_string();
    assert!(err.contains("32-bit indexing"), "{err}");
}

/// The job's GPU engine on a queue of mixed shapes and pixel types: every image comes back once,
/// with singular values, errors and Eckart–Young bounds matching faer, and reconstructions equal to
/// the f64 reference within f32 rounding; with `Keep::Gray8` the bytes the device quantised equal
/// the host's quantisation of those values, and `Keep::Nothing` brings nothing back.
#[test]
fn the_gpu_engine_runs_a_job_of_mixed_images() {
    use kernel_suite::image_io::{Scaling, to_gray8};
    use kernel_suite::job::gpu_engine::run_gpu;
    use kernel_suite::job::images::{ImageResult, JobImage, JobOptions, Keep, Pixels, Reconstruction};
    use kernel_suite::job::input_queue::ImageQueue;
    use kernel_suite::svd::{Variant, reconstruct_reference};
    use std::sync::Mutex;

    let gray = |seed: u64, m: usize, n: usize| {
        let image = smooth_image(seed, m, n);
        Pixels::Gray8 {
            rows: m,
            cols: n,
            data: image.iter().map(|&v| (v.clamp(0.0, 1.0) * 255.0).round() as u8).collect(),
        }
    };
    let inputs = vec![
        gray(41, 33, 47),
        gray(42, 33, 47),
        Pixels::Float(random_image(43, 40, 21)),
        gray(44, 33, 47),
        Pixels::Float(Array2::zeros((12, 9))),
    ];
    let options = |keep| JobOptions {
        ranks: vec![2, 5, 9],
        check: false,
        variant: Variant::Regtiled,
        batch_images: 256,
        keep,
    };
    let run = |device: &kernel_suite::Device, keep: Keep| -> Vec<ImageResult> {
        let (sender, receiver) = std::sync::mpsc::channel();
        for (index, pixels) in inputs.iter().enumerate() {
            sender.send(Ok(JobImage { index, name: format!("img{index}"), pixels: pixels.clone() })).unwrap();
        }
        drop(sender);
        let queue = ImageQueue::new(receiver);
        let results: Mutex<Vec<ImageResult>> = Mutex::new(Vec::new());
        run_gpu(device, &queue, &options(keep), &|r| {
            results.lock().unwrap().push(r);
            Ok(())
        })
        .unwrap();
        let mut results = results.into_inner().unwrap();
        results.sort_by_key(|r| r.index);
        assert_eq!(
            results.iter().map(|r| r.index).collect::<Vec<_>>(),
            vec![0, 1, 2, 3, 4],
            "each image once"
        );
        results
    };
    for device in common::devices("the_gpu_engine_runs_a_job_of_mixed_images") {
        let results = run(&device, Keep::Float);
        // The PNG path: bytes quantised on the device, identical to the host's quantisation of the
        // f32 values; and nothing at all with `Keep::Nothing`, with the same errors.
        for (keep, other) in
            [(Keep::Gray8, run(&device, Keep::Gray8)), (Keep::Nothing, run(&device, Keep::Nothing))]
        {
            for (a, b) in results.iter().zip(&other) {
                for (ra, rb) in a.ranks.iter().zip(&b.ranks) {
                    assert_eq!(ra.relative_error, rb.relative_error, "{} k={} {keep:?}", a.name, ra.k);
                    match (&rb.reconstruction, keep) {
                        (Reconstruction::Gray8(bytes), Keep::Gray8) => {
                            let values = ra.reconstruction.float().unwrap();
                            let want = to_gray8(values.view(), Scaling::Clamp);
                            assert_eq!(bytes.dim(), values.dim(), "{} k={}", a.name, ra.k);
                            assert!(
                                bytes.iter().eq(want.iter()),
                                "{} k={}: device bytes differ",
                                a.name,
                                ra.k
                            );
                        }
                        (Reconstruction::Dropped, Keep::Nothing) => {}
                        (other, _) => panic!("{} k={}: {keep:?} gave {other:?}", a.name, ra.k),
                    }
                }
            }
        }
        for (result, pixels) in results.iter().zip(&inputs) {
            let label = format!("{} on {}", result.name, device.describe());
            let image = pixels.to_f32();
            let reference = thin_svd(image.view()).unwrap();
            let sigma1 = reference.s[0];
            assert_eq!((result.rows, result.cols), image.dim(), "{label}");
            assert_eq!(result.singular_values.len(), 9, "{label}");
            for (&got, &want) in result.singular_values.iter().zip(&reference.s) {
                assert!((got - want).abs() <= 1e-5 * sigma1 + 1e-12, "{label}: σ {got} vs {want}");
            }
            for rank in &result.ranks {
                let bound = reference.eckart_young_bound(rank.k);
                assert!(
                    (rank.eckart_young_bound - bound).abs() <= 1e-6 * bound + 1e-9,
                    "{label} k={}",
                    rank.k
                );
                assert!(
                    (rank.relative_error - bound).abs() <= 1e-4 * bound + 2e-6,
                    "{label} k={}: error {} vs bound {bound}",
                    rank.k,
                    rank.relative_error
                );
                let want = reconstruct_reference(&reference, rank.k).unwrap();
                let worst = rank
                    .reconstruction
                    .float()
                    .expect("f32 values kept")
                    .iter()
                    .zip(want.iter())
                    .map(|(&a, &b)| (a as f64 - b).abs())
                    .fold(0.0, f64::max);
                assert!(worst <= 1e-4 * sigma1.max(1.0), "{label} k={}: max |Δ| {worst}", rank.k);
            }
        }
    }
}

#[test]
fn conversions_and_squared_sums_match_the_host_and_check_their_buffers() {
    use kernel_suite::svd_factor::{finish_squared_sums, launch_f32_to_f64, queue_squared_sums};
    for device in common::devices("conversions_and_squared_sums_match_the_host_and_check_their_buffers") {
        let (images, count) = (3usize, 4_099usize);
        let a32: Vec<f32> = random_image(21, images, count).iter().map(|v| v * 2.0 - 1.0).collect();
        let x: Vec<f32> = random_image(22, images, count).iter().copied().collect();
        let (raw, dx) = (device.upload(&a32).unwrap(), device.upload(&x).unwrap());
        let mut a = device.upload(&vec![f64::NAN; images * count]).unwrap();
        let q = device.queue();
        // SAFETY: every buffer lives until the downloads below have waited for the queue.
        let (with_x, without_x) = unsafe {
            launch_f32_to_f64(&device, q, raw.view(..).unwrap(), a.view_mut(..).unwrap()).unwrap();
            let with_x = queue_squared_sums(&device, q, &a, Some(&dx), count, images).unwrap();
            (with_x, queue_squared_sums(&device, q, &a, None, count, images).unwrap())
        };
        let widened = device.download(&a).unwrap();
        assert!(
            widened.iter().zip(&a32).all(|(&w, &v)| w == v as f64),
            "f32_to_f64 on {}",
            device.describe()
        );
        for (sums, compare) in [(with_x, true), (without_x, false)] {
            let got = finish_squared_sums(&device, &sums.0, sums.1).unwrap();
            for (img, &g) in got.iter().enumerate() {
                let range = img * count..(img + 1) * count;
                let expected: f64 = range
                    .map(|i| {
                        let d = a32[i] as f64 - if compare { x[i] as f64 } else { 0.0 };
                        d * d
                    })
                    .sum();
                assert!((g - expected).abs() <= 1e-12 * expected, "image {img}: {g} vs {expected}");
            }
        }
        let short = device.alloc::<f32>(images * count - 1).unwrap();
        // SAFETY: the launches are refused before anything is queued.
        unsafe {
            let err = queue_squared_sums(&device, q, &a, Some(&short), count, images).err().expect("short x");
            assert_eq!(
                err.to_string(),
                "invalid input: squared sums: 12296 values to compare for 3 images of 4099"
            );
            let err = launch_f32_to_f64(&device, q, short.view(..).unwrap(), a.view_mut(..).unwrap())
                .expect_err("lengths differ");
            assert_eq!(err.to_string(), "invalid input: `f32_to_f64`: 12296 values in, room for 12297 out");
        }
    }
}

/// The GPU engine's results do not depend on the order in which images arrive (decoders finish out
/// of order) nor on how many engines share the queue: batches are formed in index order, whole,
/// so every image's singular values and reconstructions are bit for bit those of one engine given
/// the images in order. In the simulator (two engines, each with its own device).
#[test]
fn results_do_not_depend_on_arrival_order_or_the_number_of_engines() {
    use kernel_suite::Device;
    use kernel_suite::job::gpu_engine::run_gpu;
    use kernel_suite::job::images::{ImageResult, JobImage, JobOptions, Keep, Pixels};
    use kernel_suite::job::input_queue::ImageQueue;
    use kernel_suite::svd::Variant;
    use std::sync::Mutex;

    // Noise (slow to converge) and smooth images (fast) alternate, so a batch's iteration count
    // depends on which images it holds.
    let images: Vec<Array2<f32>> = (0..7)
        .map(|i| if i % 2 == 0 { random_image(90 + i, 32, 28) } else { smooth_image(90 + i, 32, 28) })
        .collect();
    let options = JobOptions {
        ranks: vec![2, 5],
        check: false,
        variant: Variant::Regtiled,
        batch_images: 3,
        keep: Keep::Float,
    };
    let run = |order: &[usize], engines: usize| -> Vec<ImageResult> {
        let (sender, receiver) = std::sync::mpsc::channel();
        for &index in order {
            let pixels = Pixels::Float(images[index].clone());
            sender.send(Ok(JobImage { index, name: format!("img{index}"), pixels })).unwrap();
        }
        drop(sender);
        let queue = ImageQueue::new(receiver);
        let results: Mutex<Vec<ImageResult>> = Mutex::new(Vec::new());
        let sink = |r| {
            results.lock().unwrap().push(r);
            Ok(())
        };
        std::thread::scope(|scope| {
            for _ in 0..engines {
                scope.spawn(|| run_gpu(&Device::simulator(), &queue, &options, &sink).unwrap());
            }
        });
        let mut results = results.into_inner().unwrap();
        results.sort_by_key(|r| r.index);
        assert_eq!(
            results.iter().map(|r| r.index).collect::<Vec<_>>(),
            (0..images.len()).collect::<Vec<_>>()
        );
        results
    };
    let in_order = run(&[0, 1, 2, 3, 4, 5, 6], 1);
    for (order, engines) in [(vec![6, 2, 0, 5, 1, 4, 3], 1), (vec![3, 6, 1, 0, 5, 2, 4], 2)] {
        for (a, b) in in_order.iter().zip(run(&order, engines)) {
            assert_eq!(a.singular_values, b.singular_values, "{} ({order:?}, {engines} engines)", a.name);
            for (ra, rb) in a.ranks.iter().zip(&b.ranks) {
                let (va, vb) = (ra.reconstruction.float().unwrap(), rb.reconstruction.float().unwrap());
                assert!(va == vb, "{} k={} ({order:?}, {engines} engines)", a.name, ra.k);
            }
        }
    }
}

/// Batches whose reconstructions exceed one staging chunk come back through page-locked memory in
/// one copy per rank, for f32 and for 8-bit inputs: every image's reconstruction matches the f64
/// reference of its own pixels (so none is misplaced), and the bytes brought back for PNGs are the
/// host's quantisation of those values.
/// GPU only (the simulator takes minutes for these sizes).
#[test]
fn a_large_batch_comes_back_whole_and_in_place() {
    use kernel_suite::image_io::{Scaling, to_gray8};
    use kernel_suite::job::gpu_engine::run_gpu;
    use kernel_suite::job::images::{ImageResult, JobImage, JobOptions, Keep, Pixels, Reconstruction};
    use kernel_suite::job::input_queue::ImageQueue;
    use kernel_suite::svd::{Variant, reconstruct_reference};
    use std::sync::Mutex;

    let Some(device) = common::gpu_or_skip("a_large_batch_comes_back_whole_and_in_place") else {
        return;
    };
    // Two batches of 24 images of 512 × 400, one of f32 pixels and one of bytes: 4.9 MB of bytes
    // and 19.7 MB of f32 per batch and rank back, both past the 4 MiB staging chunk.
    let inputs: Vec<Pixels> = (0..48)
        .map(|i| {
            let image = smooth_image(60 + i, 512, 400);
            if i < 24 {
                Pixels::Float(image)
            } else {
                let data = image.iter().map(|&v| (v.clamp(0.0, 1.0) * 255.0).round() as u8).collect();
                Pixels::Gray8 { rows: 512, cols: 400, data }
            }
        })
        .collect();
    let run = |keep: Keep| -> Vec<ImageResult> {
        let (sender, receiver) = std::sync::mpsc::channel();
        for (index, pixels) in inputs.iter().enumerate() {
            let pixels = pixels.clone();
            sender.send(Ok(JobImage { index, name: format!("img{index}"), pixels })).unwrap();
        }
        drop(sender);
        let options = JobOptions {
            ranks: vec![3, 20],
            check: false,
            variant: Variant::Regtiled,
            batch_images: 256,
            keep,
        };
        let results: Mutex<Vec<ImageResult>> = Mutex::new(Vec::new());
        run_gpu(&device, &ImageQueue::new(receiver), &options, &|r| {
            results.lock().unwrap().push(r);
            Ok(())
        })
        .unwrap();
        let mut results = results.into_inner().unwrap();
        results.sort_by_key(|r| r.index);
        assert_eq!(results.len(), inputs.len());
        results
    };
    let (floats, bytes) = (run(Keep::Float), run(Keep::Gray8));
    for ((result, image), gray) in floats.iter().zip(&inputs).zip(&bytes) {
        let reference = thin_svd(image.to_f32().view()).unwrap();
        for (rank, gray_rank) in result.ranks.iter().zip(&gray.ranks) {
            let values = rank.reconstruction.float().expect("f32 values kept");
            let want = reconstruct_reference(&reference, rank.k).unwrap();
            let worst =
                values.iter().zip(want.iter()).map(|(&a, &b)| (a as f64 - b).abs()).fold(0.0, f64::max);
            assert!(worst <= 1e-4 * reference.s[0].max(1.0), "{} k={}: max |Δ| {worst}", result.name, rank.k);
            let Reconstruction::Gray8(got) = &gray_rank.reconstruction else {
                panic!("{} k={}: no bytes", result.name, rank.k);
            };
            let want = to_gray8(values.view(), Scaling::Clamp);
            let differ = got.iter().zip(want.iter()).filter(|(a, b)| a != b).count();
            assert!(differ <= want.len() / 1000, "{} k={}: {differ} bytes differ", result.name, rank.k);
        }
    }
}

/// `R⁻¹` for `W = RᵀR` by the blocked device Cholesky (several panels in the simulator, whose
/// panels are 16 rows; the plan's panels and half as many rows) on matrices whose answer is known exactly — `W` formed from an upper
/// triangular `R` with a unit diagonal and entries of 0 or ±1/256 above it (well conditioned, and
/// `RᵀR` exact in f64) — and
/// on Gram matrices of random bases against faer's Cholesky and triangular solve; a numerically
/// dependent column (a repeated one) against the one-block kernel, which floors its pivot the same
/// way. Batches of three images, sizes around the panels and the GEMM tile, `w` and `rinv`
/// poisoned first.
#[test]
fn the_blocked_and_packed_choleskys_invert_the_factor_on_any_size() {
    use kernel_suite::svd_factor::{blocked_cholesky_inverse, cholesky_panel_rows};
    use kernels::svd_factor as kf;
    // The packed kernel's launch: a block per image of 512 threads (64 in the simulator).
    let packed_config = |images: usize, b: usize, gpu: bool| kernel_suite::LaunchConfig {
        grid: kernel_suite::Dim3::x(images as u32),
        block: kernel_suite::Dim3::x(if gpu { 512 } else { 64 }),
        shared_bytes: kf::cholesky_packed_shared_bytes(b as u32),
    };
    let exact_factor = |seed: u64, b: usize| {
        let mut rng = common::rng(seed);
        faer::Mat::<f64>::from_fn(b, b, |i, j| match i.cmp(&j) {
            std::cmp::Ordering::Equal => 1.0,
            std::cmp::Ordering::Less => f64::from(rng.random_range(-1i32..=1)) / 256.0,
            std::cmp::Ordering::Greater => 0.0,
        })
    };
    let gram_of_random = |seed: u64, b: usize| {
        let mut rng = common::rng(seed);
        let x = faer::Mat::<f64>::from_fn(2 * b + 9, b, |_, _| rng.random_range(-1.0..1.0));
        x.transpose() * &x
    };
    let to_vec = |m: &faer::Mat<f64>| -> Vec<f64> {
        (0..m.nrows()).flat_map(|i| (0..m.ncols()).map(move |j| (i, j))).map(|(i, j)| m[(i, j)]).collect()
    };
    for device in common::devices("the_blocked_and_packed_choleskys_invert_the_factor_on_any_size") {
        let gpu = device.backend() == kernel_suite::Backend::Gpu;
        let sizes: &[usize] = if gpu { &[5, 64, 65, 120, 200, 239, 512, 1000] } else { &[5, 16, 37, 64, 70] };
        let nb = cholesky_panel_rows(&device);
        for &b in sizes {
            let images = 3;
            // Image 0: W = RᵀR exactly; images 1 and 2: Gram matrices of random bases.
            let r_exact = exact_factor(b as u64, b);
            let grams = [
                r_exact.transpose() * &r_exact,
                gram_of_random(b as u64 + 1, b),
                gram_of_random(b as u64 + 2, b),
            ];
            let host: Vec<f64> = grams.iter().flat_map(to_vec).collect();
            let w_copy = device.upload(&host).unwrap();
            let mut packed = device.upload(&vec![f64::NAN; images * b * b]).unwrap();
            let packed_fits =
                b as u32 <= kf::cholesky_packed_max_b(device.max_shared_bytes_per_block().unwrap());
            // SAFETY: the buffers live until the download below waits for the queue.
            if packed_fits {
                unsafe {
                    device
                        .launch(
                            &kf::CHOLESKY_INVERSE_PACKED,
                            packed_config(images, b, gpu),
                            (&w_copy, b as u32, kf::NEAR_IDENTITY, &mut packed),
                        )
                        .unwrap();
                }
            }
            // The plan's panels and half as many rows.
            let mut results = Vec::new();
            for rows in [nb, nb / 2] {
                let mut w = device.upload(&host).unwrap();
                let mut rinv = device.upload(&vec![f64::NAN; images * b * b]).unwrap();
                let mut diagonal = device.upload(&vec![f64::NAN; images * (b + 1)]).unwrap();
                // SAFETY: the buffers live until the download below waits for the queue.
                unsafe {
                    let buffers = (&mut w, &mut rinv, &mut diagonal);
                    blocked_cholesky_inverse(
                        &device,
                        device.queue(),
                        buffers,
                        (b, images, rows),
                        kf::NEAR_IDENTITY,
                    )
                    .unwrap();
                }
                results.push((
                    format!("b = {b} (panels of {rows}) on {}", device.describe()),
                    device.download(&rinv).unwrap(),
                ));
            }
            if packed_fits {
                results.push((
                    format!("b = {b} (packed) on {}", device.describe()),
                    device.download(&packed).unwrap(),
                ));
            }
            for (label, got) in &results {
                for (img, gram) in grams.iter().enumerate() {
                    let got = &got[img * b * b..(img + 1) * b * b];
                    let want = match img {
                        0 => r_exact.clone(),
                        _ => gram.llt(faer::Side::Lower).unwrap().L().transpose().to_owned(),
                    };
                    let mut want_inv = faer::Mat::<f64>::identity(b, b);
                    faer::linalg::triangular_solve::solve_upper_triangular_in_place(
                        want.as_ref(),
                        want_inv.as_mut(),
                        faer::Par::Seq,
                    );
                    let scale = want_inv.norm_max();
                    for i in 0..b {
                        for j in 0..b {
                            let (g, e) = (got[i * b + j], want_inv[(i, j)]);
                            if i > j {
                                assert_eq!(g, 0.0, "{label}, image {img}: R⁻¹({i}, {j}) below the diagonal");
                            } else {
                                assert!(
                                    (g - e).abs() <= 1e-10 * scale,
                                    "{label}, image {img}: R⁻¹({i}, {j}) = {g}, want {e}"
                                );
                            }
                        }
                    }
                }
            }
        }
        // A repeated column: its pivot is floored, as the one-block kernel floors it.
        let b = 37;
        let mut rng = common::rng(77);
        let mut x = faer::Mat::<f64>::from_fn(60, b, |_, _| rng.random_range(-1.0..1.0));
        for i in 0..60 {
            x[(i, 20)] = x[(i, 3)];
        }
        let gram = to_vec(&(x.transpose() * &x));
        let mut w = device.upload(&gram).unwrap();
        let mut rinv = device.upload(&vec![f64::NAN; b * b]).unwrap();
        let mut one_block = device.upload(&vec![f64::NAN; b * b]).unwrap();
        let mut scratch = device.alloc::<f64>(kernels::svd_factor::eigen_scratch(b as u32) as usize).unwrap();
        let w_copy = device.upload(&gram).unwrap();
        // SAFETY: as above.
        unsafe {
            let mut diagonal = device.alloc::<f64>(b + 1).unwrap();
            blocked_cholesky_inverse(
                &device,
                device.queue(),
                (&mut w, &mut rinv, &mut diagonal),
                (b, 1, cholesky_panel_rows(&device)),
                kf::NEAR_IDENTITY,
            )
            .unwrap();
            device
                .launch(
                    &kernels::svd_factor::CHOLESKY_INVERSE,
                    kernel_suite::LaunchConfig {
                        grid: kernel_suite::Dim3::x(1),
                        block: kernel_suite::Dim3::x(64),
                        shared_bytes: 8,
                    },
                    (&w_copy, b as u32, &mut scratch, &mut one_block),
                )
                .unwrap();
        }
        let mut packed = device.upload(&vec![f64::NAN; b * b]).unwrap();
        // SAFETY: as above.
        unsafe {
            device
                .launch(
                    &kf::CHOLESKY_INVERSE_PACKED,
                    packed_config(1, b, gpu),
                    (&w_copy, b as u32, kf::NEAR_IDENTITY, &mut packed),
                )
                .unwrap()
        };
        let want = device.download(&one_block).unwrap();
        let scale = want.iter().fold(0.0f64, |m, v| m.max(v.abs()));
        assert!(scale > 1e5, "the repeated column's pivot was floored: max |R⁻¹| = {scale:e}");
        for (kind, got) in
            [("blocked", device.download(&rinv).unwrap()), ("packed", device.download(&packed).unwrap())]
        {
            for (i, (g, e)) in got.iter().zip(&want).enumerate() {
                assert!(
                    (g - e).abs() <= 1e-6 * scale,
                    "repeated column ({kind}): R⁻¹[{i}] = {g}, one block {e}"
                );
            }
        }
    }
}

/// A GEMM kernel with result type `T`: its argument tuple (for the pipelined kernels the last
/// argument is the mode, `kf::pgemm_mode`; for the others, whether the product is symmetric).
type GemmKernelTo<T> = gpu_std::KernelFn<(
    gpu_std::Slice<f64>,
    kernels::svd_factor::Layout,
    gpu_std::Slice<f64>,
    kernels::svd_factor::Layout,
    gpu_std::SliceMut<T>,
    kernels::svd_factor::Layout,
    gpu_std::Slice<f64>,
    u32,
    u32,
    u32,
    u32,
    u32,
)>;

/// The GEMM on the f64 tensor cores against the FMA GEMM and against exact answers: integer
/// operands (every product and sum exact in f64, so both kernels must give the exact integers),
/// then random ones (equal to rounding); odd sizes past one tile, transposed and strided
/// operands, a batch of two with column scales, a symmetric product, and the f32 result.
/// Cholesky QR's second pass: a Gram matrix within 1e-10 of the identity takes the first-order
/// inverse `I − U` (no factorisation), one within 1e-6 the full factorisation, in one batch; both
/// match faer's Cholesky factor's inverse to 1e-13, by every method the plan can choose.
#[test]
fn near_identity_gram_matrices_invert_to_faer_precision() {
    use kernel_suite::svd_factor::{CholeskyMethod, Plan, inverse_cholesky_factor};
    for device in common::devices("near_identity_gram_matrices_invert_to_faer_precision") {
        let gpu = device.backend() == kernel_suite::Backend::Gpu;
        let sizes: &[usize] = if gpu { &[5, 64, 200, 239, 512] } else { &[5, 37, 70] };
        for &b in sizes {
            let mut plan = Plan::new(&device, (b, b), 2, b / 2).unwrap();
            assert_eq!(plan.b, b);
            let mut rng = common::rng(b as u64);
            let grams: Vec<faer::Mat<f64>> = [1e-10, 1e-6]
                .iter()
                .map(|&size| {
                    let e = faer::Mat::<f64>::from_fn(b, b, |_, _| size * rng.random_range(-1.0..1.0));
                    faer::Mat::<f64>::from_fn(b, b, |i, j| {
                        f64::from(u8::from(i == j)) + 0.5 * (e[(i, j)] + e[(j, i)])
                    })
                })
                .collect();
            let host: Vec<f64> =
                grams.iter().flat_map(|g| (0..b * b).map(move |e| g[(e / b, e % b)])).collect();
            let methods = [CholeskyMethod::Packed, CholeskyMethod::Blocked];
            for method in methods.into_iter().filter(|&m| {
                m != CholeskyMethod::Packed
                    || b as u32
                        <= kernels::svd_factor::cholesky_packed_max_b(
                            device.max_shared_bytes_per_block().unwrap(),
                        )
            }) {
                plan.cholesky = method;
                let mut w = device.upload(&host).unwrap();
                let mut rinv = device.upload(&vec![f64::NAN; 2 * b * b]).unwrap();
                let mut scratch =
                    device.alloc::<f64>(2 * kernels::svd_factor::eigen_scratch(b as u32) as usize).unwrap();
                // SAFETY: the buffers live until the download below waits for the queue.
                unsafe {
                    inverse_cholesky_factor(&device, &plan, (&mut w, &mut rinv, &mut scratch)).unwrap()
                };
                let got = device.download(&rinv).unwrap();
                for (img, gram) in grams.iter().enumerate() {
                    let r = gram.llt(faer::Side::Lower).unwrap().L().transpose().to_owned();
                    let mut want = faer::Mat::<f64>::identity(b, b);
                    faer::linalg::triangular_solve::solve_upper_triangular_in_place(
                        r.as_ref(),
                        want.as_mut(),
                        faer::Par::Seq,
                    );
                    let got = &got[img * b * b..(img + 1) * b * b];
                    for (e, &g) in got.iter().enumerate() {
                        let (i, j) = (e / b, e % b);
                        assert!(
                            (g - want[(i, j)]).abs() <= 1e-13,
                            "b = {b}, {method:?}, image {img} on {}: R⁻¹({i}, {j}) = {g:e}, want {:e}",
                            device.describe(),
                            want[(i, j)]
                        );
                    }
                }
            }
        }
    }
}

#[test]
fn the_tensor_core_gemm_matches_the_fma_gemm_and_exact_products() {
    use kernel_suite::{Dim3, LaunchConfig};
    use kernels::svd_factor::{self as kf, Layout};
    let (m, n, k, images) = (70usize, 67usize, 53usize, 2usize);
    let config = |m: usize, n: usize| LaunchConfig {
        grid: Dim3 { x: n.div_ceil(64) as u32, y: m.div_ceil(64) as u32, z: images as u32 },
        block: Dim3::x(kf::GEMM_THREADS),
        shared_bytes: kf::GEMM_SHARED_BYTES,
    };
    for device in common::devices("the_tensor_core_gemm_matches_the_fma_gemm_and_exact_products") {
        for integers in [true, false] {
            let mut rng = common::rng(if integers { 1 } else { 2 });
            let mut draw = |len: usize| -> Vec<f64> {
                (0..len)
                    .map(|_| {
                        if integers {
                            f64::from(rng.random_range(-9i32..=9))
                        } else {
                            rng.random_range(-1.0..1.0)
                        }
                    })
                    .collect()
            };
            // A stored transposed (k × m per image), B row-major with a padded row (n + 3).
            let (a, b, scale) = (draw(images * k * m), draw(images * k * (n + 3)), draw(images * n));
            let la = Layout::row_major(m as u32, (k * m) as u32).transposed();
            let lb = Layout::row_major((n + 3) as u32, (k * (n + 3)) as u32);
            let lc = Layout::row_major(n as u32, (m * n) as u32);
            let at = |z: usize, i: usize, p: usize| a[z * k * m + p * m + i];
            let bt = |z: usize, p: usize, j: usize| b[z * k * (n + 3) + p * (n + 3) + j];
            let exact: Vec<f64> = (0..images * m * n)
                .map(|e| {
                    let (z, i, j) = (e / (m * n), e / n % m, e % n);
                    (0..k).map(|p| at(z, i, p) * bt(z, p, j)).sum::<f64>() * scale[z * n + j]
                })
                .collect();
            let (da, db, ds) =
                (device.upload(&a).unwrap(), device.upload(&b).unwrap(), device.upload(&scale).unwrap());
            let run = |kernel: &GemmKernelTo<f64>| -> Vec<f64> {
                let mut c = device.upload(&vec![f64::NAN; images * m * n]).unwrap();
                // SAFETY: the layouts lie inside the buffers; the download waits for the queue.
                unsafe {
                    device
                        .launch(
                            kernel,
                            config(m, n),
                            (
                                &da,
                                la,
                                &db,
                                lb,
                                &mut c,
                                lc,
                                Some(&ds),
                                n as u32,
                                m as u32,
                                n as u32,
                                k as u32,
                                0u32,
                            ),
                        )
                        .unwrap();
                }
                device.download(&c).unwrap()
            };
            let (mma, fma) = (run(&kf::GEMM_F64_MMA_TO_F64), run(&kf::GEMM_F64_TO_F64));
            let label = format!("integers: {integers}, on {}", device.describe());
            for (e, ((&x, &y), &want)) in mma.iter().zip(&fma).zip(&exact).enumerate() {
                let tolerance = if integers { 0.0 } else { 1e-13 };
                assert!(
                    (x - want).abs() <= tolerance && (y - want).abs() <= tolerance,
                    "{label}: C[{e}] = {x} (mma), {y} (fma), want {want}"
                );
            }
        }
        // A symmetric Gram matrix XᵀX (upper blocks computed, mirrored), and the f32 result.
        let (r, rows) = (70usize, 45usize);
        let mut rng = common::rng(3);
        let x: Vec<f64> = (0..images * rows * r).map(|_| f64::from(rng.random_range(-5i32..=5))).collect();
        let lx = Layout::row_major(r as u32, (rows * r) as u32);
        let lg = Layout::row_major(r as u32, (r * r) as u32);
        let dx = device.upload(&x).unwrap();
        let mut gram = device.upload(&vec![f64::NAN; images * r * r]).unwrap();
        let mut single = device.upload(&vec![f32::NAN; images * r * r]).unwrap();
        // SAFETY: as above.
        unsafe {
            let none: Option<&kernel_suite::Buffer<f64>> = None;
            let args = (
                &dx,
                lx.transposed(),
                &dx,
                lx,
                &mut gram,
                lg,
                none,
                0u32,
                r as u32,
                r as u32,
                rows as u32,
                1u32,
            );
            device.launch(&kf::GEMM_F64_MMA_TO_F64, config(r, r), args).unwrap();
            let args = (
                &dx,
                lx.transposed(),
                &dx,
                lx,
                &mut single,
                lg,
                none,
                0u32,
                r as u32,
                r as u32,
                rows as u32,
                0u32,
            );
            device.launch(&kf::GEMM_F64_MMA_TO_F32, config(r, r), args).unwrap();
        }
        let (gram, single) = (device.download(&gram).unwrap(), device.download(&single).unwrap());
        for e in 0..images * r * r {
            let (z, i, j) = (e / (r * r), e / r % r, e % r);
            let want: f64 =
                (0..rows).map(|p| x[z * rows * r + p * r + i] * x[z * rows * r + p * r + j]).sum();
            assert_eq!(gram[e], want, "Gram ({z}, {i}, {j}) on {}", device.describe());
            assert_eq!(single[e], want as f32, "f32 Gram ({z}, {i}, {j}) on {}", device.describe());
        }
    }
}

/// The pipelined tensor-core GEMM (128 × 64 tiles, `cp.async` stages, m16n8k4) against exact
/// products and the FMA GEMM: integer operands (exact) and random ones (to rounding), odd sizes
/// past one tile and past one stage, a batch of two with batch strides, each operand read along
/// its rows and along its columns, column scales, f32 results, a transposed result, symmetric
/// products (exactly symmetric), and split-K (partial parts summed by the second kernel), into
/// poisoned outputs.
#[test]
fn the_pipelined_tensor_core_gemm_matches_exact_products() {
    use kernel_suite::{Dim3, LaunchConfig};
    use kernels::svd_factor::{self as kf, Layout};
    let images = 2usize;
    // Both tile widths: (wide, f64 kernel, f32 kernel).
    let variants: [(bool, &GemmKernelTo<f64>, &GemmKernelTo<f32>); 2] = [
        (false, &kf::GEMM_F64_PIPELINED_TO_F64, &kf::GEMM_F64_PIPELINED_TO_F32),
        (true, &kf::GEMM_F64_PIPELINED_WIDE_TO_F64, &kf::GEMM_F64_PIPELINED_WIDE_TO_F32),
    ];
    let config = |wide: bool, m: usize, n: usize, parts: usize| {
        let (bn, threads, shared_bytes) = if wide {
            (kf::PGEMM_WIDE_TILE_N, kf::PGEMM_WIDE_THREADS, kf::PGEMM_WIDE_SHARED_BYTES)
        } else {
            (kf::PGEMM_TILE_N, kf::PGEMM_THREADS, kf::PGEMM_SHARED_BYTES)
        };
        LaunchConfig {
            grid: Dim3 {
                x: n.div_ceil(bn as usize) as u32,
                y: m.div_ceil(kf::PGEMM_TILE_M as usize) as u32,
                z: (images * parts) as u32,
            },
            block: Dim3::x(threads),
            shared_bytes,
        }
    };
    let sum_config = |m: usize, n: usize| LaunchConfig {
        grid: Dim3 { x: kf::split_sum_blocks(m as u32, n as u32), y: 1, z: images as u32 },
        block: Dim3::x(kf::SPLIT_SUM_THREADS),
        shared_bytes: kf::SPLIT_SUM_SHARED_BYTES,
    };
    for device in common::devices("the_pipelined_tensor_core_gemm_matches_exact_products") {
        for &(wide, kernel, kernel32) in &variants {
            let on = format!("{} (wide tiles: {wide})", device.describe());
            // (m, n, k, A stored transposed, B stored transposed, C stored transposed, splits)
            let cases: &[(usize, usize, usize, bool, bool, bool, usize)] = &[
                (150, 70, 37, true, false, false, 1),
                (131, 67, 53, false, true, true, 1),
                (70, 130, 45, false, false, false, 3),
                (20, 9, 100, true, true, false, 4),
                // More parts than the sum's warps take four at a time.
                (33, 40, 1300, false, true, false, 41),
            ];
            for &(m, n, k, a_t, b_t, c_t, splits) in cases {
                for integers in [true, false] {
                    let mut rng = common::rng(if integers { 11 } else { 12 });
                    let mut draw = |len: usize| -> Vec<f64> {
                        (0..len)
                            .map(|_| {
                                if integers {
                                    f64::from(rng.random_range(-9i32..=9))
                                } else {
                                    rng.random_range(-1.0..1.0)
                                }
                            })
                            .collect()
                    };
                    // Padded leading dimensions (+3, +1) and images one element further apart.
                    let (a_ld, a_rows) = if a_t { (m + 3, k) } else { (k + 3, m) };
                    let (b_ld, b_rows) = if b_t { (k + 1, n) } else { (n + 1, k) };
                    let (a_batch, b_batch) = (a_rows * a_ld + 1, b_rows * b_ld + 1);
                    let (a, b, scale) = (draw(images * a_batch), draw(images * b_batch), draw(images * n));
                    let flip = |l: Layout, t: bool| if t { l.transposed() } else { l };
                    let la = flip(Layout::row_major(a_ld as u32, a_batch as u32), a_t);
                    let lb = flip(Layout::row_major(b_ld as u32, b_batch as u32), b_t);
                    let lc = if c_t {
                        Layout::row_major(m as u32, (m * n) as u32).transposed()
                    } else {
                        Layout::row_major(n as u32, (m * n) as u32)
                    };
                    let at = |z: usize, i: usize, p: usize| {
                        a[z * a_batch + if a_t { p * a_ld + i } else { i * a_ld + p }]
                    };
                    let bt = |z: usize, p: usize, j: usize| {
                        b[z * b_batch + if b_t { j * b_ld + p } else { p * b_ld + j }]
                    };
                    let c_at =
                        |z: usize, i: usize, j: usize| z * m * n + if c_t { j * m + i } else { i * n + j };
                    let (da, db, ds) = (
                        device.upload(&a).unwrap(),
                        device.upload(&b).unwrap(),
                        device.upload(&scale).unwrap(),
                    );
                    let mut c = device.alloc::<f64>(images * m * n).unwrap();
                    let mut c32 = device.alloc::<f32>(images * m * n).unwrap();
                    let mut fma = device.alloc::<f64>(images * m * n).unwrap();
                    let mut partial = device.alloc::<f64>(images * splits * m * n).unwrap();
                    let lp = Layout::row_major(n as u32, (m * n) as u32);
                    // SAFETY: the layouts lie inside the buffers; the downloads wait for the queue.
                    unsafe {
                        let args = (&da, la, &db, lb, &mut fma, lc, Some(&ds), n as u32);
                        let args = (
                            args.0, args.1, args.2, args.3, args.4, args.5, args.6, args.7, m as u32,
                            n as u32, k as u32, 0u32,
                        );
                        let fma_config = LaunchConfig {
                            grid: Dim3 {
                                x: n.div_ceil(64) as u32,
                                y: m.div_ceil(64) as u32,
                                z: images as u32,
                            },
                            block: Dim3::x(kf::GEMM_THREADS),
                            shared_bytes: kf::GEMM_SHARED_BYTES,
                        };
                        device.launch(&kf::GEMM_F64_TO_F64, fma_config, args).unwrap();
                        if splits == 1 {
                            let args = (
                                &da,
                                la,
                                &db,
                                lb,
                                &mut c,
                                lc,
                                Some(&ds),
                                n as u32,
                                m as u32,
                                n as u32,
                                k as u32,
                                kf::pgemm_mode(false, 1),
                            );
                            device.launch(kernel, config(wide, m, n, 1), args).unwrap();
                            let args = (
                                &da,
                                la,
                                &db,
                                lb,
                                &mut c32,
                                lc,
                                Some(&ds),
                                n as u32,
                                m as u32,
                                n as u32,
                                k as u32,
                                kf::pgemm_mode(false, 1),
                            );
                            device.launch(kernel32, config(wide, m, n, 1), args).unwrap();
                        } else {
                            let none: Option<&kernel_suite::Buffer<f64>> = None;
                            let args = (
                                &da,
                                la,
                                &db,
                                lb,
                                &mut partial,
                                lp,
                                none,
                                0u32,
                                m as u32,
                                n as u32,
                                k as u32,
                                kf::pgemm_mode(false, splits as u32),
                            );
                            device.launch(kernel, config(wide, m, n, splits), args).unwrap();
                            let args = (
                                &partial,
                                splits as u32,
                                &mut c,
                                lc,
                                Some(&ds),
                                n as u32,
                                m as u32,
                                n as u32,
                                0u32,
                            );
                            device.launch(&kf::GEMM_F64_SPLIT_SUM_TO_F64, sum_config(m, n), args).unwrap();
                            let args = (
                                &partial,
                                splits as u32,
                                &mut c32,
                                lc,
                                Some(&ds),
                                n as u32,
                                m as u32,
                                n as u32,
                                0u32,
                            );
                            device.launch(&kf::GEMM_F64_SPLIT_SUM_TO_F32, sum_config(m, n), args).unwrap();
                        }
                    }
                    let (c, c32, fma) = (
                        device.download(&c).unwrap(),
                        device.download(&c32).unwrap(),
                        device.download(&fma).unwrap(),
                    );
                    let label = format!(
                        "{m} × {n} × {k}, A/B/C transposed {a_t}/{b_t}/{c_t}, {splits} parts, integers: {integers}, on {on}"
                    );
                    for z in 0..images {
                        for i in 0..m {
                            for j in 0..n {
                                let want =
                                    (0..k).map(|p| at(z, i, p) * bt(z, p, j)).sum::<f64>() * scale[z * n + j];
                                let e = c_at(z, i, j);
                                let tolerance = if integers { 0.0 } else { 1e-13 };
                                assert!(
                                    (c[e] - want).abs() <= tolerance && (fma[e] - want).abs() <= tolerance,
                                    "{label}: C({z}, {i}, {j}) = {} (pipelined), {} (fma), want {want}",
                                    c[e],
                                    fma[e]
                                );
                                assert_eq!(c32[e], c[e] as f32, "{label}: f32 C({z}, {i}, {j})");
                            }
                        }
                    }
                }
            }
            // Symmetric Gram matrices XᵀX (X `rows × r`, both operands views of one buffer): upper
            // blocks computed, mirrored, exactly symmetric; whole and split in 3 and 2.
            for (r, rows, splits) in [(150usize, 45usize, 1usize), (70, 100, 3), (150, 60, 2)] {
                let mut rng = common::rng(13);
                let x: Vec<f64> =
                    (0..images * rows * r).map(|_| f64::from(rng.random_range(-5i32..=5))).collect();
                let lx = Layout::row_major(r as u32, (rows * r) as u32);
                let lg = Layout::row_major(r as u32, (r * r) as u32);
                let dx = device.upload(&x).unwrap();
                let mut gram = device.alloc::<f64>(images * r * r).unwrap();
                let mut single = device.alloc::<f32>(images * r * r).unwrap();
                let mut partial = device.alloc::<f64>(images * splits * r * r).unwrap();
                let none: Option<&kernel_suite::Buffer<f64>> = None;
                let (r32, rows32) = (r as u32, rows as u32);
                // SAFETY: as above.
                unsafe {
                    if splits == 1 {
                        let args = (
                            &dx,
                            lx.transposed(),
                            &dx,
                            lx,
                            &mut gram,
                            lg,
                            none,
                            0u32,
                            r32,
                            r32,
                            rows32,
                            kf::pgemm_mode(true, 1),
                        );
                        device.launch(kernel, config(wide, r, r, 1), args).unwrap();
                        let args = (
                            &dx,
                            lx.transposed(),
                            &dx,
                            lx,
                            &mut single,
                            lg,
                            none,
                            0u32,
                            r32,
                            r32,
                            rows32,
                            kf::pgemm_mode(true, 1),
                        );
                        device.launch(kernel32, config(wide, r, r, 1), args).unwrap();
                    } else {
                        let args = (
                            &dx,
                            lx.transposed(),
                            &dx,
                            lx,
                            &mut partial,
                            lg,
                            none,
                            0u32,
                            r32,
                            r32,
                            rows32,
                            kf::pgemm_mode(true, splits as u32),
                        );
                        device.launch(kernel, config(wide, r, r, splits), args).unwrap();
                        let args = (&partial, splits as u32, &mut gram, lg, none, 0u32, r32, r32, 1u32);
                        device.launch(&kf::GEMM_F64_SPLIT_SUM_TO_F64, sum_config(r, r), args).unwrap();
                        let args = (&partial, splits as u32, &mut single, lg, none, 0u32, r32, r32, 1u32);
                        device.launch(&kf::GEMM_F64_SPLIT_SUM_TO_F32, sum_config(r, r), args).unwrap();
                    }
                }
                let (gram, single) = (device.download(&gram).unwrap(), device.download(&single).unwrap());
                for e in 0..images * r * r {
                    let (z, i, j) = (e / (r * r), e / r % r, e % r);
                    let want: f64 =
                        (0..rows).map(|p| x[z * rows * r + p * r + i] * x[z * rows * r + p * r + j]).sum();
                    assert_eq!(gram[e], want, "Gram ({z}, {i}, {j}), {splits} parts, on {on}");
                    assert_eq!(single[e], want as f32, "f32 Gram ({z}, {i}, {j}), {splits} parts, on {on}");
                }
            }
        }
    }
}

/// Symmetric `b × b` matrices whose eigenvalues are known exactly: `Q·diag(λ)·Qᵀ` with `Q` a
/// seeded random orthogonal matrix, for spectra with repeated and zero eigenvalues, with a tight
/// cluster and decay, and a spread one; the zero matrix; and the tridiagonal `(−1, 2, −1)`, whose
/// `λₖ = 2 − 2·cos(kπ/(b + 1))` and whose halves are alike, so that the divide and conquer's
/// merges of equal pieces meet equal eigenvalues and rotate them out. Row-major, with their `λ`
/// sorted decreasingly.
fn known_spectra(seed: u64, b: usize) -> Vec<(Vec<f64>, Vec<f64>)> {
    let mut rng = common::rng(seed);
    let repeated: Vec<f64> = (0..b)
        .map(|i| {
            if i < 3 {
                4.0
            } else if i < b / 2 {
                1.0
            } else {
                0.0
            }
        })
        .collect();
    let clustered: Vec<f64> =
        (0..b).map(|i| if i < 4 { 1.0 + 1e-10 * i as f64 } else { 0.9 * 0.93f64.powi(i as i32) }).collect();
    let spread: Vec<f64> = (0..b).map(|_| rng.random_range(-1.0..3.0)).collect();
    let mut all = Vec::new();
    for mut lambda in [repeated, clustered, spread] {
        let q = faer::Mat::<f64>::from_fn(b, b, |_, _| rng.random_range(-1.0..1.0)).qr().compute_Q();
        let t =
            &q * faer::Mat::<f64>::from_fn(b, b, |i, j| if i == j { lambda[i] } else { 0.0 }) * q.transpose();
        let matrix = (0..b * b).map(|e| 0.5 * (t[(e / b, e % b)] + t[(e % b, e / b)])).collect();
        lambda.sort_by(|x, y| y.total_cmp(x));
        all.push((matrix, lambda));
    }
    all.push((vec![0.0; b * b], vec![0.0; b]));
    let second_difference = (0..b * b)
        .map(|e| match (e / b).abs_diff(e % b) {
            0 => 2.0,
            1 => -1.0,
            _ => 0.0,
        })
        .collect();
    let mut lambda: Vec<f64> =
        (1..=b).map(|k| 2.0 - 2.0 * (k as f64 * std::f64::consts::PI / (b + 1) as f64).cos()).collect();
    lambda.sort_by(|x, y| y.total_cmp(x));
    all.push((second_difference, lambda));
    all
}

/// Checks Ritz pairs as the eigensolvers write them (`theta`, `sigma`, `inv_sigma`, and `ritz`
/// with column `r` the vector of `θ_r`, `b` and `b × b` per matrix) against the exact spectra:
/// every θ within `1e-11·‖T‖` of its λ, every vector's residual `‖T·z − θ·z‖` within
/// `1e-11·‖T‖`, `ZᵀZ = I` to `1e-11`, `σ = √θ⁺` and `1/σ` zero for numerically zero θ.
fn check_ritz_pairs(label: &str, problems: &[(Vec<f64>, Vec<f64>)], b: usize, got: [&[f64]; 4]) {
    let [theta, sigma, inv_sigma, ritz] = got;
    for (p, (t, lambda)) in problems.iter().enumerate() {
        let label = format!("{label}, matrix {p}");
        let (th, z) = (&theta[p * b..(p + 1) * b], &ritz[p * b * b..(p + 1) * b * b]);
        let norm = lambda.iter().fold(0.0f64, |m, l| m.max(l.abs()));
        let tol = 1e-11 * norm.max(1e-300);
        for i in 0..b {
            assert!((th[i] - lambda[i]).abs() <= tol, "{label}: θ{i} = {} vs λ = {}", th[i], lambda[i]);
            let s = sigma[p * b + i];
            assert!(
                (s - th[i].max(0.0).sqrt()).abs() <= 1e-14 * s.max(1.0),
                "{label}: σ{i} = {s}, θ = {}",
                th[i]
            );
            let inv = inv_sigma[p * b + i];
            let zero = th[i] <= kernels::svd_factor::NULL_THRESHOLD * th[0].max(0.0);
            assert!(
                if zero { inv == 0.0 } else { (inv * s - 1.0).abs() <= 1e-14 },
                "{label}: 1/σ{i} = {inv}, σ = {s}"
            );
        }
        let t = faer::Mat::<f64>::from_fn(b, b, |i, j| t[i * b + j]);
        let z = faer::Mat::<f64>::from_fn(b, b, |i, j| z[i * b + j]);
        let tz = &t * &z;
        let gram = z.transpose() * &z;
        for i in 0..b {
            let residual = (0..b).map(|row| (tz[(row, i)] - th[i] * z[(row, i)]).abs()).fold(0.0, f64::max);
            assert!(residual <= tol, "{label}: ‖T·z − θ·z‖ of pair {i} = {residual:e} (‖T‖ = {norm})");
            for j in 0..=i {
                let want = if i == j { 1.0 } else { 0.0 };
                assert!((gram[(i, j)] - want).abs() <= 1e-11, "{label}: z{i}·z{j} = {}", gram[(i, j)]);
            }
        }
    }
}

/// The device eigensolvers of the Ritz problem against exact spectra (repeated, zero, clustered
/// and spread eigenvalues, and the zero matrix): the one-block Jacobi (`ritz_eigen`, in shared
/// memory) up to the largest `b` that fits, and block Jacobi at `b = 120, 200, 512, 1000` on a
/// GPU; smaller sizes, several rounds of blocks, in the simulator. Four matrices per launch, so
/// the batch's strides are used.
#[test]
fn the_ritz_eigensolvers_find_exact_spectra() {
    use kernel_suite::svd_factor::{BlockJacobi, RitzPairs, RitzSolver};
    use kernel_suite::{Dim3, LaunchConfig};
    use kernels::svd_factor as kf;
    for device in common::devices("the_ritz_eigensolvers_find_exact_spectra") {
        let gpu = device.backend() == kernel_suite::Backend::Gpu;
        let fits =
            |b: usize| kf::jacobi_shared_bytes(b as u32) <= device.max_shared_bytes_per_block().unwrap();
        let largest_one_block = (1..=1024).take_while(|&b| fits(b)).last().unwrap();
        let one_block: Vec<usize> = if gpu { vec![5, 64, largest_one_block] } else { vec![5, 24, 37] };
        let blocked: &[usize] = if gpu { &[120, 200, 512, 1000] } else { &[20, 37, 70] };
        let poisoned = |len: usize| device.upload(&vec![f64::NAN; len]).unwrap();
        for (b, is_blocked) in one_block.iter().map(|&b| (b, false)).chain(blocked.iter().map(|&b| (b, true)))
        {
            let problems = known_spectra(b as u64, b);
            let images = problems.len();
            let mut pairs = RitzPairs {
                theta: poisoned(images * b),
                sigma: poisoned(images * b),
                inv_sigma: poisoned(images * b),
                vectors: poisoned(images * b * b),
            };
            let solver = if is_blocked {
                let mut solver = BlockJacobi::new(&device, b, images).unwrap();
                let n = solver.n;
                let mut padded = vec![0.0; images * n * n];
                for (p, (t, _)) in problems.iter().enumerate() {
                    for row in 0..b {
                        padded[p * n * n + row * n..][..b].copy_from_slice(&t[row * b..][..b]);
                    }
                }
                device.upload_into(solver.matrix(), &padded).unwrap();
                // SAFETY: `pairs` lives until the downloads below wait for the queue.
                unsafe { solver.solve(&device, &mut pairs).unwrap() };
                format!("block Jacobi, b = {b} (n = {n}, {} sweeps)", solver.sweeps())
            } else {
                let t: Vec<f64> = problems.iter().flat_map(|(t, _)| t.iter().copied()).collect();
                let t = device.upload(&t).unwrap();
                let mut scratch = device.alloc::<f64>(images * kf::eigen_scratch(b as u32) as usize).unwrap();
                let threads = if gpu {
                    device.max_threads_per_block(kf::RITZ_EIGEN.name()).unwrap() / 32 * 32
                } else {
                    64
                };
                let config = LaunchConfig {
                    grid: Dim3::x(images as u32),
                    block: Dim3::x(threads),
                    shared_bytes: kf::jacobi_shared_bytes(b as u32),
                };
                // SAFETY: every image's `b × b` problem, scratch and results lie inside the
                // buffers, which live until the downloads below wait for the queue.
                unsafe {
                    device
                        .launch(
                            &kf::RITZ_EIGEN,
                            config,
                            (
                                &t,
                                b as u32,
                                &mut scratch,
                                &mut pairs.theta,
                                &mut pairs.sigma,
                                &mut pairs.inv_sigma,
                                &mut pairs.vectors,
                            ),
                        )
                        .unwrap();
                }
                format!("one-block Jacobi, b = {b}")
            };
            let label = format!("{solver} on {}", device.describe());
            let got = [&pairs.theta, &pairs.sigma, &pairs.inv_sigma, &pairs.vectors]
                .map(|buffer| device.download(buffer).unwrap());
            check_ritz_pairs(&label, &problems, b, [&got[0], &got[1], &got[2], &got[3]]);
        }
        // The tridiagonal solver through its `RitzSolver` interface, each reduction: one block per
        // image with the packed matrix in shared memory where it fits (b ≤ 234 on an H100), else,
        // and where the launch gives only the vectors' shared memory, in global memory; a group of
        // blocks per image (`Some(groups)`), the rows in shared or in global memory; two stages,
        // the band by a group of blocks per image.
        #[derive(Clone, Copy)]
        enum Reduction {
            OneBlock { shared: bool },
            Grid { groups: u32, shared: bool },
            // The rows in global memory until a quarter of them fits the shared memory given.
            GridSwitch { groups: u32 },
            TwoStage { groups: u32 },
        }
        let tridiagonal: Vec<(usize, Reduction)> = if gpu {
            let one_block =
                [5, 64, 128, 200, 232, 320, 512].map(|b| (b, Reduction::OneBlock { shared: true }));
            let grid = [5, 64, 128, 200, 320, 512].map(|b| (b, Reduction::Grid { groups: 16, shared: true }));
            one_block
                .into_iter()
                .chain(grid)
                .chain([
                    (64, Reduction::OneBlock { shared: false }),
                    (200, Reduction::OneBlock { shared: false }),
                    (200, Reduction::Grid { groups: 3, shared: false }),
                    // 26 blocks for each of the five matrices: a cooperative launch within the
                    // 132 multiprocessors of an H100.
                    (512, Reduction::Grid { groups: 26, shared: true }),
                    (1024, Reduction::Grid { groups: 26, shared: true }),
                ])
                .chain([5, 17, 64, 128, 200, 320, 512].map(|b| (b, Reduction::TwoStage { groups: 16 })))
                .chain([
                    (200, Reduction::GridSwitch { groups: 16 }),
                    (512, Reduction::GridSwitch { groups: 8 }),
                ])
                .chain([(200, Reduction::TwoStage { groups: 3 }), (512, Reduction::TwoStage { groups: 26 })])
                .collect()
        } else {
            let one_block = [5, 24, 37, 70, 1, 2].map(|b| (b, Reduction::OneBlock { shared: true }));
            one_block
                .into_iter()
                .chain([
                    (120, Reduction::OneBlock { shared: false }),
                    (1, Reduction::Grid { groups: 2, shared: true }),
                    (2, Reduction::Grid { groups: 2, shared: true }),
                    (5, Reduction::Grid { groups: 3, shared: true }),
                    (37, Reduction::Grid { groups: 4, shared: true }),
                    (37, Reduction::Grid { groups: 3, shared: false }),
                ])
                .chain([1, 2, 5, 16, 17, 33, 37, 70].map(|b| (b, Reduction::TwoStage { groups: 3 })))
                .chain(
                    [(1, 2), (5, 3), (37, 3), (70, 4)]
                        .map(|(b, groups)| (b, Reduction::GridSwitch { groups })),
                )
                .chain([(50, Reduction::TwoStage { groups: 1 })])
                .collect()
        };
        use kernel_suite::svd_factor::{
            HostEigensolver, TRIDIAGONAL_MAX_B, TridiagonalEigensolver, TridiagonalReduction,
        };
        let refused =
            TridiagonalEigensolver::new(&device, TRIDIAGONAL_MAX_B + 1, 1).err().map(|e| e.to_string());
        assert!(
            refused.as_deref().is_some_and(|e| e.contains(&format!("b ≤ {TRIDIAGONAL_MAX_B}"))),
            "a b past the tridiagonal solver's range must be refused: {refused:?}"
        );
        let empty = TridiagonalEigensolver::new(&device, 0, 1).err().map(|e| e.to_string());
        assert!(empty.as_deref().is_some_and(|e| e.contains("1 ≤ b")), "b = 0 must be refused: {empty:?}");
        // The host's solver (faer, its pairs ordered on the device) on the same spectra, at the
        // tridiagonal solver's sizes: `None` for it.
        let mut host_sizes: Vec<usize> = tridiagonal.iter().map(|&(b, _)| b).collect();
        host_sizes.sort_unstable();
        host_sizes.dedup();
        let host_cases: Vec<(usize, Option<Reduction>)> = host_sizes.into_iter().map(|b| (b, None)).collect();
        let cases = tridiagonal.iter().map(|&(b, reduction)| (b, Some(reduction))).chain(host_cases);
        for (b, reduction) in cases {
            let problems = known_spectra(b as u64, b);
            let images = problems.len();
            // A cooperative launch's blocks all resident at once: on a GPU, at most its
            // multiprocessors.
            let reduction = reduction.map(|reduction| match reduction {
                Reduction::Grid { groups, shared } if gpu => Reduction::Grid {
                    groups: groups.min(device.multiprocessors().unwrap() / images as u32),
                    shared,
                },
                Reduction::GridSwitch { groups } if gpu => Reduction::GridSwitch {
                    groups: groups.min(device.multiprocessors().unwrap() / images as u32),
                },
                Reduction::TwoStage { groups } if gpu => Reduction::TwoStage {
                    groups: groups.min(device.multiprocessors().unwrap() / images as u32),
                },
                other => other,
            });
            let mut pairs = RitzPairs {
                theta: poisoned(images * b),
                sigma: poisoned(images * b),
                inv_sigma: poisoned(images * b),
                vectors: poisoned(images * b * b),
            };
            let (mut solver, label): (Box<dyn RitzSolver>, String) = match reduction {
                Some(reduction) => {
                    let launch = match reduction {
                        Reduction::OneBlock { shared } => {
                            let mut launch =
                                TridiagonalEigensolver::one_block_reduction(&device, b, images).unwrap();
                            if let (TridiagonalReduction::OneBlock(config), false) = (&mut launch, shared) {
                                config.shared_bytes = kf::tridiagonal_small_bytes(b as u32);
                            }
                            launch
                        }
                        Reduction::Grid { groups, shared } => {
                            let mut launch =
                                TridiagonalEigensolver::grid_reduction(&device, b, images, groups).unwrap();
                            if let (TridiagonalReduction::Grid(config), false) = (&mut launch, shared) {
                                config.shared_bytes = kf::tridiagonal_grid_small_bytes(b as u32);
                            }
                            launch
                        }
                        Reduction::GridSwitch { groups } => {
                            let mut launch =
                                TridiagonalEigensolver::grid_reduction(&device, b, images, groups).unwrap();
                            if let TridiagonalReduction::Grid(config) = &mut launch {
                                let rows = (b * b).div_ceil(4 * groups as usize) as u32;
                                config.shared_bytes = kf::tridiagonal_grid_small_bytes(b as u32) + 8 * rows;
                            }
                            launch
                        }
                        Reduction::TwoStage { groups } => {
                            TridiagonalEigensolver::two_stage_reduction(&device, b, images, groups).unwrap()
                        }
                    };
                    // The divide and conquer by as many blocks per image as the grid reduction, else
                    // by one.
                    let dc_groups = match reduction {
                        Reduction::OneBlock { .. } => 1,
                        Reduction::Grid { groups, .. }
                        | Reduction::GridSwitch { groups }
                        | Reduction::TwoStage { groups } => groups,
                    };
                    // The back-transformation beside the divide and conquer (`Qᵀ` on a second
                    // queue, then a GEMM) after the grid reductions, in place after the others.
                    let overlapped =
                        matches!(reduction, Reduction::Grid { .. } | Reduction::GridSwitch { .. });
                    let solver = TridiagonalEigensolver::with_reduction(&device, b, images, launch)
                        .and_then(|solver| solver.with_divide_and_conquer_groups(dc_groups))
                        .and_then(|solver| solver.with_overlapped_back_transform(&device, overlapped))
                        .unwrap();
                    let label = format!(
                        "tridiagonal, b = {b}, reduction: {}, divide and conquer: {}",
                        solver.describe_reduction(),
                        solver.describe_divide_and_conquer()
                    );
                    (Box::new(solver), label)
                }
                None => {
                    (Box::new(HostEigensolver::new(&device, b, images).unwrap()), format!("host, b = {b}"))
                }
            };
            let label = format!("{label}, on {}", device.describe());
            let t: Vec<f64> = problems.iter().flat_map(|(t, _)| t.iter().copied()).collect();
            let t = device.upload(&t).unwrap();
            let (input, layout) = solver.input().unwrap();
            assert_eq!(layout, kf::Layout::row_major(b as u32, (b * b) as u32));
            device.copy_view(device.queue(), t.view(..).unwrap(), input).unwrap();
            // SAFETY: `pairs` lives until the downloads below wait for the queue.
            unsafe { solver.solve(&device, &mut pairs).unwrap() };
            let got = [&pairs.theta, &pairs.sigma, &pairs.inv_sigma, &pairs.vectors]
                .map(|buffer| device.download(buffer).unwrap());
            check_residuals_and_orthogonality(&label, &problems, b, &got[0], &got[3], 1e-12);
            check_ritz_pairs(&label, &problems, b, [&got[0], &got[1], &got[2], &got[3]]);
        }
    }
}

/// `‖T·z − θ·z‖_∞ ≤ tol·‖T‖` for every pair and `|ZᵀZ − I| ≤ tol` elementwise (the bar
/// for the tridiagonal solver, tighter than [`check_ritz_pairs`]'s), with the worst of each printed.
fn check_residuals_and_orthogonality(
    label: &str,
    problems: &[(Vec<f64>, Vec<f64>)],
    b: usize,
    theta: &[f64],
    ritz: &[f64],
    tol: f64,
) {
    for (p, (t, lambda)) in problems.iter().enumerate() {
        let norm = lambda.iter().fold(0.0f64, |m, l| m.max(l.abs()));
        let t = faer::Mat::<f64>::from_fn(b, b, |i, j| t[i * b + j]);
        let z = faer::Mat::<f64>::from_fn(b, b, |i, j| ritz[p * b * b + i * b + j]);
        let th = &theta[p * b..(p + 1) * b];
        let tz = &t * &z;
        let gram = z.transpose() * &z;
        let mut residual = 0.0f64;
        let mut orthogonality = 0.0f64;
        for i in 0..b {
            for row in 0..b {
                residual = residual.max((tz[(row, i)] - th[i] * z[(row, i)]).abs());
            }
            for j in 0..b {
                orthogonality = orthogonality.max((gram[(i, j)] - if i == j { 1.0 } else { 0.0 }).abs());
            }
        }
        println!(
            "{label}, matrix {p}: max residual {:.1e}·‖T‖, max |ZᵀZ − I| {orthogonality:.1e}",
            residual / norm.max(1e-300)
        );
        assert!(residual <= tol * norm, "{label}, matrix {p}: max ‖T·z − θ·z‖ = {residual:e} (‖T‖ = {norm})");
        assert!(orthogonality <= tol, "{label}, matrix {p}: max |ZᵀZ − I| = {orthogonality:e}");
    }
}
