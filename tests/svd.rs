//! SVD reconstruction kernels against the f64 CPU reference, plus the SVD identities.

mod common;

use kernel_suite::svd::{
    RankK, Variant, reconstruct, reconstruct_reference, reconstruct_reference_f32, relative_error, thin_svd,
};
use ndarray::Array2;
use rand::Rng;

fn random_operands(seed: u64, m: usize, n: usize, k: usize) -> RankK {
    let mut rng = common::rng(seed);
    RankK {
        u: Array2::from_shape_fn((m, k), |_| rng.random_range(-1.0..1.0)),
        s: (0..k).map(|_| rng.random_range(0.5..2.0)).collect(),
        vt: Array2::from_shape_fn((k, n), |_| rng.random_range(-1.0..1.0)),
    }
}

fn random_matrix(seed: u64, m: usize, n: usize) -> Array2<f32> {
    let mut rng = common::rng(seed);
    Array2::from_shape_fn((m, n), |_| rng.random_range(0.0..1.0))
}

/// (variant, block) pairs: every variant, the tiled one at each block size.
const CASES: [(Variant, u32); 5] = [
    (Variant::Naive, 16),
    (Variant::Tiled, 8),
    (Variant::Tiled, 16),
    (Variant::Tiled, 32),
    (Variant::Regtiled, 16),
];

#[test]
fn every_variant_matches_reference_on_odd_shapes() {
    for device in common::devices("every_variant_matches_reference_on_odd_shapes") {
        // 261×260, k = 20: `regtiled`'s inner blocks take 16-byte loads, the edge blocks and the
        // last, partial step along k take single floats.
        let shapes = [(1usize, 1usize, 1usize), (37, 53, 7), (1000, 3, 3), (130, 257, 19), (261, 260, 20)];
        for (seed, (m, n, k)) in shapes.into_iter().enumerate() {
            let op = random_operands(seed as u64, m, n, k);
            let want = reconstruct_reference_f32(&op);
            for (variant, block) in CASES {
                let (got, _) = reconstruct(&device, &op, variant, block).unwrap();
                assert!(got.iter().all(|v| v.is_finite()), "unwritten (poisoned) output");
                let err = relative_error(got.view(), want.view());
                assert!(
                    err <= 1e-5,
                    "{} block {block}, {m}×{n} k={k}: relative error {err:e} on {}",
                    variant.name(),
                    device.describe()
                );
            }
        }
    }
}

/// `max |got − want| / max |want|`, after checking that every element was written (the output
/// starts poisoned with NaN).
fn max_error(got: &Array2<f32>, want: &Array2<f64>) -> f64 {
    assert!(got.iter().all(|v| v.is_finite()), "unwritten (poisoned) output");
    let scale = want.iter().fold(0.0f64, |a, &w| a.max(w.abs()));
    got.iter().zip(want.iter()).fold(0.0f64, |a, (&g, &w)| a.max((g as f64 - w).abs())) / scale
}

/// Checks every element of a one-pass TF32 result against the rounding-error bound: each operand
/// rounded to tf32 (relative error ≤ 2⁻¹¹, the product ≤ 2⁻¹⁰ + 2⁻²²), the f32 scaling by `s`
/// (2⁻²⁴) and f32 accumulation (≤ (k + 2)·2⁻²³ even if the hardware truncates), all relative to
/// `Σ_p |U[i,p]·s[p]·Vᵀ[p,j]|`.
fn check_tf32_bound(got: &Array2<f32>, want: &Array2<f64>, op: &RankK, what: &str) {
    let k = op.s.len();
    let rel = 2f64.powi(-10) + 2f64.powi(-22) + 2f64.powi(-24) + (k + 2) as f64 * 2f64.powi(-23);
    for ((i, j), &g) in got.indexed_iter() {
        let magnitude: f64 =
            (0..k).map(|p| (op.u[[i, p]] as f64 * op.s[p] as f64 * op.vt[[p, j]] as f64).abs()).sum();
        let err = (g as f64 - want[[i, j]]).abs();
        assert!(err <= rel * magnitude, "{what}: ({i}, {j}) is {g}, expected {}", want[[i, j]]);
    }
}

#[test]
fn tensor_core_variants_match_reference_on_odd_shapes() {
    // Shapes: 4-byte copies everywhere (odd ldu and n); 16-byte copies of U only; both 16-byte;
    // several k-tiles through the 3 stages (k = 77, 100); a single element; six column tiles, so
    // that on the simulator (4 SMs) each block of the panel kernel walks two of them, its pipeline
    // running across the tile boundary; eleven column tiles at k = 20, so that blocks walk 3 or 2
    // tiles of one k-tile each; 7 k-tiles per tile, more than the panel kernel's 6 stages, so
    // that its stages come round within a tile and across; and 20 tiles at k = 100 (4 k-tiles, the
    // last partial), enough per SM (4 on the simulator) for the register panel above k = 64.
    let shapes = [
        (37, 53, 13),
        (129, 67, 40),
        (70, 132, 36),
        (33, 37, 77),
        (45, 40, 100),
        (1, 1, 1),
        (50, 647, 70),
        (19, 1290, 20),
        (21, 700, 200),
        (400, 600, 100),
    ];
    for device in common::devices("tensor_core_variants_match_reference_on_odd_shapes") {
        for (seed, (m, n, k)) in shapes.into_iter().enumerate() {
            let op = random_operands(100 + seed as u64, m, n, k);
            let want = reconstruct_reference_f32(&op);
            let what = |v: Variant| format!("{}, {m}×{n} k={k} on {}", v.name(), device.describe());
            // One pass of TF32: within the rounding bound element by element, and (for k > 1, where
            // errors of random sign average) within 1e-3 of max |out|.
            for variant in [Variant::Tf32, Variant::Tf32Wgmma] {
                if !variant.available_on(&device) {
                    eprintln!("SKIPPED {}: {} has no sm_90a cubin", what(variant), device.describe());
                    continue;
                }
                let (got, _) = reconstruct(&device, &op, variant, 16).unwrap();
                let err = max_error(&got, &want);
                check_tf32_bound(&got, &want, &op, &what(variant));
                assert!(err <= 1e-3, "{}: max error {err:e} of max |out|", what(variant));
            }
            // 3xTF32: f32-level accuracy.
            for variant in [Variant::Tf32x3, Variant::Tf32x3Wgmma] {
                if !variant.available_on(&device) {
                    eprintln!("SKIPPED {}: {} has no sm_90a cubin", what(variant), device.describe());
                    continue;
                }
                let (got, _) = reconstruct(&device, &op, variant, 16).unwrap();
                let err = max_error(&got, &want);
                assert!(err <= 5e-6, "{}: max error {err:e} of max |out|", what(variant));
                eprintln!("{m}×{n} k={k}: {} max error {err:.2e} of max |out|", variant.name());
            }
        }
    }
}

#[test]
fn full_rank_reconstruction_returns_the_input() {
    let a = random_matrix(7, 45, 31);
    let factors = thin_svd(a.view()).unwrap();
    let a64 = a.mapv(|v| v as f64);
    for device in common::devices("full_rank_reconstruction_returns_the_input") {
        for (variant, block) in CASES {
            let (got, _) = reconstruct(&device, &factors.rank_k(31).unwrap(), variant, block).unwrap();
            let err = relative_error(got.view(), a64.view());
            assert!(err <= 1e-4, "{}: {err:e} on {}", variant.name(), device.describe());
        }
    }
}

#[test]
fn rank_k_error_matches_eckart_young_bound() {
    let a = random_matrix(8, 64, 48);
    let factors = thin_svd(a.view()).unwrap();
    let a64 = a.mapv(|v| v as f64);
    let k = 10;
    let bound = factors.eckart_young_bound(k);
    assert!(bound > 0.01, "a random matrix is far from rank {k}");
    let reference_err =
        relative_error(reconstruct_reference(&factors, k).unwrap().mapv(|v| v as f32).view(), a64.view());
    assert!((reference_err - bound).abs() <= 1e-4 * bound, "CPU reference {reference_err} vs bound {bound}");
    for device in common::devices("rank_k_error_matches_eckart_young_bound") {
        for (variant, block) in CASES {
            let (got, _) = reconstruct(&device, &factors.rank_k(k).unwrap(), variant, block).unwrap();
            let err = relative_error(got.view(), a64.view());
            assert!((err - bound).abs() <= 1e-4 * bound, "{}: error {err} vs bound {bound}", variant.name());
        }
    }
}

#[test]
fn bad_input_is_rejected() {
    let device = kernel_suite::Device::simulator();
    let factors = thin_svd(random_matrix(9, 6, 4).view()).unwrap();
    assert_eq!(
        factors.rank_k(0).unwrap_err().to_string(),
        "invalid input: rank k = 0 is outside 1..=4 (min(rows, cols) of the image)"
    );
    assert!(factors.rank_k(5).is_err());
    let mut nan = random_matrix(10, 5, 5);
    nan[[2, 3]] = f32::NAN;
    assert_eq!(
        thin_svd(nan.view()).unwrap_err().to_string(),
        "invalid input: pixel (2, 3) is NaN: the image must be finite"
    );
    assert!(thin_svd(Array2::<f32>::zeros((0, 3)).view()).is_err());
    let op = random_operands(11, 8, 8, 2);
    assert_eq!(
        reconstruct(&device, &op, Variant::Tiled, 12).unwrap_err().to_string(),
        "invalid input: block size 12 is not 8, 16 or 32"
    );
    let mismatched = RankK { s: vec![1.0; 3], ..op };
    assert!(reconstruct(&device, &mismatched, Variant::Naive, 16).is_err());
}

/// The benchmark point, 4096² with k = 256, on the GPU only (the simulator would take
/// hours): the error bounds the odd shapes above check must hold at full size too, where each output
/// sums 256 products.
#[test]
fn tensor_core_variants_are_accurate_at_benchmark_size() {
    let Some(device) = common::gpu_or_skip("tensor_core_variants_are_accurate_at_benchmark_size") else {
        return;
    };
    let (m, n, k) = (4096, 4096, 256);
    let op = random_operands(7, m, n, k);
    let want = reconstruct_reference_f32(&op);
    let variants = [
        (Variant::Regtiled, 5e-6),
        (Variant::Tf32, 1e-3),
        (Variant::Tf32Wgmma, 1e-3),
        (Variant::Tf32x3, 5e-6),
        (Variant::Tf32x3Wgmma, 5e-6),
    ];
    for (variant, bound) in variants {
        if !variant.available_on(&device) {
            eprintln!(
                "SKIPPED {} at {m}×{n} k={k}: {} has no sm_90a cubin",
                variant.name(),
                device.describe()
            );
            continue;
        }
        let (got, _) = reconstruct(&device, &op, variant, 16).unwrap();
        let err = max_error(&got, &want);
        eprintln!("{m}×{n} k={k}: {} max error {err:.2e} of max |out|", variant.name());
        assert!(err <= bound, "{} at {m}×{n} k={k}: max error {err:e} > {bound:e}", variant.name());
    }
    // At k = 100 a GPU's 4096² has enough tiles per SM for tf32-wgmma's register panel above
    // k = 64 (4 k-tiles, the last partial).
    let k = 100;
    let op = random_operands(8, m, n, k);
    let want = reconstruct_reference_f32(&op);
    if Variant::Tf32Wgmma.available_on(&device) {
        let (got, _) = reconstruct(&device, &op, Variant::Tf32Wgmma, 16).unwrap();
        let err = max_error(&got, &want);
        eprintln!("{m}×{n} k={k}: tf32-wgmma max error {err:.2e} of max |out|");
        assert!(err <= 1e-3, "tf32-wgmma at {m}×{n} k={k}: max error {err:e}");
    }
}

#[test]
fn batch_pipeline_matches_reference_in_order() {
    use kernel_suite::svd::reconstruct_batch;
    let jobs: Vec<RankK> = (0..5).map(|i| random_operands(20 + i, 37, 53, 7)).collect();
    for device in common::devices("batch_pipeline_matches_reference_in_order") {
        // The wgmma variants take temporaries on each slot's queue; one TF32 pass is ~1e-4 accurate.
        for (variant, tolerance) in
            [(Variant::Regtiled, 1e-5), (Variant::Tf32Wgmma, 1e-3), (Variant::Tf32x3Wgmma, 1e-5)]
        {
            if !variant.available_on(&device) {
                eprintln!("SKIPPED batch of {} on {}: no sm_90a cubin", variant.name(), device.describe());
                continue;
            }
            for slots in [1, 3] {
                let mut outputs: Vec<_> =
                    (0..jobs.len()).map(|_| device.pinned::<f32>(37 * 53).unwrap()).collect();
                for o in &mut outputs {
                    o.fill(f32::NAN);
                }
                let run = reconstruct_batch(&device, &jobs, &mut outputs, variant, 16, slots).unwrap();
                assert_eq!((run.images, run.slots), (5, slots));
                for (i, (got, job)) in outputs.iter().zip(&jobs).enumerate() {
                    let got = Array2::from_shape_vec((37, 53), got.to_vec()).unwrap();
                    let err = relative_error(got.view(), reconstruct_reference_f32(job).view());
                    let what =
                        format!("{} image {i}, {slots} slots on {}", variant.name(), device.describe());
                    assert!(err <= tolerance, "{what}: {err:e}");
                }
            }
        }
    }
    let device = kernel_suite::Device::simulator();
    let mixed = vec![random_operands(1, 8, 8, 2), random_operands(2, 9, 8, 2)];
    let mut outputs = vec![device.pinned::<f32>(64).unwrap(), device.pinned::<f32>(72).unwrap()];
    assert_eq!(
        reconstruct_batch(&device, &mixed, &mut outputs, Variant::Naive, 16, 2).unwrap_err().to_string(),
        "invalid input: batch image 1 is 9×8 with k = 2; the batch is 8×8 with k = 2"
    );
}

/// One launch for several images (`gridDim.z`), `U` with a leading dimension above `k` (as the job
/// passes its factors): every variant, each image against its own reference. `U`'s columns past
/// `k`, `s` past `k` and `Vᵀ`'s rows past `k` are NaN, so reading any of them shows; k = 75 takes
/// `tf32-wgmma`'s shared-memory panel kernel, 150 rows two of its panels.
#[test]
fn one_launch_reconstructs_a_batch_of_images() {
    use kernel_suite::svd::{BatchShape, launch_reconstruct_batch};
    for (images, m, n, k, ldu) in [(3usize, 37usize, 45usize, 11usize, 14usize), (2, 150, 45, 75, 84)] {
        let jobs: Vec<RankK> = (0..images).map(|i| random_operands(40 + i as u64, m, n, ldu)).collect();
        let (mut u, mut s, mut vt): (Vec<f32>, Vec<f32>, Vec<f32>) = (
            jobs.iter().flat_map(|j| j.u.iter().copied()).collect(),
            jobs.iter().flat_map(|j| j.s.iter().copied()).collect(),
            jobs.iter().flat_map(|j| j.vt.iter().copied()).collect(),
        );
        u.iter_mut().enumerate().filter(|(e, _)| e % ldu >= k).for_each(|(_, x)| *x = f32::NAN);
        s.iter_mut().enumerate().filter(|(e, _)| e % ldu >= k).for_each(|(_, x)| *x = f32::NAN);
        vt.iter_mut().enumerate().filter(|(e, _)| e / n % ldu >= k).for_each(|(_, x)| *x = f32::NAN);
        let strides = kernels::svd::Batch {
            u: (m * ldu) as u32,
            s: ldu as u32,
            vt: (ldu * n) as u32,
            out: (m * n) as u32,
        };
        for device in common::devices("one_launch_reconstructs_a_batch_of_images") {
            let (du, ds, dvt) =
                (device.upload(&u).unwrap(), device.upload(&s).unwrap(), device.upload(&vt).unwrap());
            for variant in Variant::ALL {
                if !variant.available_on(&device) {
                    eprintln!(
                        "SKIPPED batch launch of {} on {}: no sm_90a cubin",
                        variant.name(),
                        device.describe()
                    );
                    continue;
                }
                // Poisoned: every element must be written.
                let mut out = device.upload(&vec![f32::NAN; images * m * n]).unwrap();
                let shape = BatchShape { images, ldu, strides };
                let bufs = (&du, &ds, &dvt, &mut out);
                // SAFETY: the download below waits for the queue before the buffers are dropped.
                unsafe {
                    launch_reconstruct_batch(&device, device.queue(), variant, 16, bufs, (m, n, k), shape)
                }
                .unwrap();
                let got = device.download(&out).unwrap();
                for (z, job) in jobs.iter().enumerate() {
                    let first_k = RankK {
                        u: job.u.slice(ndarray::s![.., ..k]).to_owned(),
                        s: job.s[..k].to_vec(),
                        vt: job.vt.slice(ndarray::s![..k, ..]).to_owned(),
                    };
                    let want = reconstruct_reference_f32(&first_k);
                    let got =
                        Array2::from_shape_vec((m, n), got[z * m * n..(z + 1) * m * n].to_vec()).unwrap();
                    let err = max_error(&got, &want);
                    let tolerance =
                        if matches!(variant, Variant::Tf32 | Variant::Tf32Wgmma) { 1e-3 } else { 1e-5 };
                    assert!(
                        err <= tolerance,
                        "{} image {z} of {m} × {n}, k = {k} on {}: max error {err:e}",
                        variant.name(),
                        device.describe()
                    );
                }
            }
        }
    }
}

/// The batched launcher checks that its buffers hold every image before anything runs: the kernels
/// do not check their accesses on the GPU.
#[test]
fn batch_launch_rejects_buffers_shorter_than_the_batch() {
    use kernel_suite::svd::{BatchShape, launch_reconstruct_batch};
    let (images, m, n, k) = (2usize, 5usize, 7usize, 3usize);
    let device = kernel_suite::Device::simulator();
    let strides =
        kernels::svd::Batch { u: (m * k) as u32, s: k as u32, vt: (k * n) as u32, out: (m * n) as u32 };
    let shape = BatchShape { images, ldu: k, strides };
    let full = |len: usize| device.upload(&vec![0.5f32; len]).unwrap();
    let (u, s, vt) = (full(images * m * k), full(images * k), full(images * k * n));
    let short_vt = full(images * k * n - 1);
    let mut out = full(images * m * n);
    for variant in [Variant::Naive, Variant::Tiled, Variant::Regtiled, Variant::Tf32, Variant::Tf32x3] {
        // SAFETY: nothing is launched (the check fails first); nothing is queued that outlives it.
        let err = unsafe {
            launch_reconstruct_batch(
                &device,
                device.queue(),
                variant,
                16,
                (&u, &s, &short_vt, &mut out),
                (m, n, k),
                shape,
            )
        }
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            "invalid input: Vᵀ buffer holds 41 elements, the reconstruction of 2 images of 5 × 7 at k = 3 reads 42",
            "{}",
            variant.name()
        );
    }
    let mut short_out = full(images * m * n - 1);
    // SAFETY: as above.
    let err = unsafe {
        launch_reconstruct_batch(
            &device,
            device.queue(),
            Variant::Naive,
            16,
            (&u, &s, &vt, &mut short_out),
            (m, n, k),
            shape,
        )
    }
    .unwrap_err();
    assert!(err.to_string().contains("the output buffer holds 69 elements"), "{err}");
}

#[test]
fn panel_order_permutes_each_group_of_16_onto_the_register_fragments() {
    // The panel kernel's `A` fragments of k8 steps 2q and 2q + 1 are the elements 16q + 4t ..
    // 16q + 4t + 4 of a row (one 16-byte load per thread t of a quad), in the order of the
    // fragment's columns t, t + 4 of step 2q, then of step 2q + 1; `b` must put element p of `k`
    // at the column where `A` holds it.
    use gpu_std::mma;
    use kernels::svd::panel_position;
    for p in 0..272u32 {
        let at = panel_position(p);
        assert_eq!(at / 16, p / 16, "element {p} left its group of 16 (to {at})");
        let (t, h, e) = (p % 16 / 4, p % 4 / 2, p % 2);
        let (row, column) = mma::tf32_a_coords(t, 2 * e);
        assert_eq!(row, 0);
        assert_eq!(at % 16, 8 * h + column, "element {p}");
    }
    let mut seen = [false; 16];
    (0..16).for_each(|p| seen[panel_position(p) as usize] = true);
    assert!(seen.iter().all(|&s| s), "not a permutation of 0..16: {seen:?}");
}
