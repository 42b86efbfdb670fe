//! The exact truncated SVD of any matrix (`matrix_svd::truncated_svd`, and the device's
//! `svd_factor::factor_accurate` under it) on matrices of known spectra `Q₁·diag(σ)·Q₂ᵀ`: every
//! `σᵢ` within 1e-12·σ₁ of the constructed one and of faer's SVD (`cpu_svd`), `UᵀU = VᵀV = I`
//! to 1e-12 and `‖A·vᵢ − σᵢ·uᵢ‖ ≤ 1e-12·‖A‖`; tall, wide, square, batched, f32 and f64, spectra
//! spanning 1 … 1e-12, repeated and zero values, exact rank below `k`; the simulator at small
//! sizes, the GPU (or `SKIPPED`) at the issue's.

mod common;

use kernel_suite::Device;
use kernel_suite::matrix_svd::{self, MatrixFactors, truncated_svd};
use kernel_suite::svd::cpu_svd;
use kernel_suite::svd_factor::{self, GramMethod, Plan, RitzMethod};
use ndarray::{Array2, ArrayView2};
use rand::Rng;

/// A matrix with the singular values `s` (then zeros): `Q₁·diag(s)·Q₂ᵀ` with seeded random
/// orthonormal `Q₁` (`m × len`) and `Q₂` (`n × len`), in f64.
fn with_spectrum(seed: u64, (m, n): (usize, usize), s: &[f64]) -> Array2<f64> {
    let mut rng = common::rng(seed);
    let mut orthonormal = |rows: usize| {
        let a = faer::Mat::<f64>::from_fn(rows, s.len(), |_, _| rng.random_range(-1.0..1.0));
        a.qr().compute_thin_Q()
    };
    let (q1, q2) = (orthonormal(m), orthonormal(n));
    let mut a = Array2::zeros((m, n));
    for p in 0..s.len() {
        for i in 0..m {
            let left = q1[(i, p)] * s[p];
            for j in 0..n {
                a[[i, j]] += left * q2[(j, p)];
            }
        }
    }
    a
}

/// `count` values from 1 down to `smallest`, geometrically.
fn geometric(count: usize, smallest: f64) -> Vec<f64> {
    (0..count).map(|i| smallest.powf(i as f64 / (count - 1) as f64)).collect()
}

/// The largest `|MᵀM − I|` entry of the columns of `q`.
fn orthonormality_error(q: ArrayView2<f64>) -> f64 {
    let gram = q.t().dot(&q);
    gram.indexed_iter().map(|((i, j), &v)| (v - if i == j { 1.0 } else { 0.0 }).abs()).fold(0.0, f64::max)
}

/// Checks `f`, the leading `k` triplets of `a`, against the exact singular values `exact` (sorted,
/// zeros past its end) and faer's SVD of `a`: the bounds of the module's doc.
fn check(label: &str, a: ArrayView2<f64>, exact: &[f64], f: &MatrixFactors, k: usize) {
    let (m, n) = a.dim();
    assert_eq!((f.u.dim(), f.s.len(), f.vt.dim()), ((m, k), k, (k, n)), "{label}: shapes");
    let values: Vec<f64> = a.iter().copied().collect();
    let lapack = cpu_svd(&values, (m, n), faer::Par::Seq).unwrap().s;
    let sigma1 = lapack[0];
    for (i, (&got, &faer)) in f.s.iter().zip(&lapack).enumerate() {
        let want = exact.get(i).copied().unwrap_or(0.0);
        assert!(
            (got - want).abs() <= 1e-12 * sigma1 && (got - faer).abs() <= 1e-12 * sigma1,
            "{label}: σ{i} = {got:e}, exactly {want:e}, faer {faer:e} (σ₁ = {sigma1})"
        );
    }
    assert!(f.s.windows(2).all(|w| w[0] >= w[1]), "{label}: σ not non-increasing: {:?}", f.s);
    let (u_error, v_error) = (orthonormality_error(f.u.view()), orthonormality_error(f.vt.t()));
    assert!(
        u_error <= 1e-12 && v_error <= 1e-12,
        "{label}: |UᵀU − I| = {u_error:e}, |VᵀV − I| = {v_error:e}"
    );
    let av = a.dot(&f.vt.t());
    for i in 0..k {
        let residual = (&av.column(i) - &(&f.u.column(i) * f.s[i])).mapv(|x| x * x).sum().sqrt();
        assert!(residual <= 1e-12 * sigma1, "{label}: ‖A·v{i} − σ{i}·u{i}‖ = {residual:e} (‖A‖ = {sigma1})");
    }
    // The sign convention: each left vector's entry of largest magnitude is positive.
    for (i, u) in f.u.columns().into_iter().enumerate() {
        let largest = u.iter().copied().fold(0.0f64, |b, x| if x.abs() > b.abs() { x } else { b });
        assert!(largest > 0.0, "{label}: u{i}'s largest entry is {largest}");
    }
}

/// The devices of the exactness tests, with `None` (faer) first.
fn devices(test: &str) -> Vec<Option<Device>> {
    std::iter::once(None).chain(common::devices(test).into_iter().map(Some)).collect()
}

fn describe(device: &Option<Device>) -> String {
    device.as_ref().map_or("the CPU".into(), |d| d.describe())
}

#[test]
fn known_spectra_are_exact_to_1e_12_on_every_device() {
    let spanning = geometric(40, 1e-12);
    let mut repeated_and_zero = vec![3.0, 2.0, 2.0, 2.0, 1.0, 1.0, 0.5];
    repeated_and_zero.extend([1e-3, 1e-3, 1e-6]);
    // (label, shape, singular values, ranks k)
    type Case = (&'static str, (usize, usize), Vec<f64>, Vec<usize>);
    let cases: Vec<Case> = vec![
        ("tall 300×40, σ 1 … 1e-12", (300, 40), spanning.clone(), vec![10, 40]),
        ("wide 40×300, σ 1 … 1e-12", (40, 300), spanning.clone(), vec![7, 33]),
        ("square 57×57, rank 10 < k, repeated σ", (57, 57), repeated_and_zero.clone(), vec![4, 16]),
        ("tall 211×45, rank 20 of σ 1 … 1e-12 < k", (211, 45), geometric(20, 1e-12), vec![24]),
        ("1×1", (1, 1), vec![0.75], vec![1]),
        ("n×1", (37, 1), vec![2.5], vec![1]),
        ("1×n", (1, 41), vec![0.5], vec![1]),
    ];
    for device in devices("known_spectra_are_exact_to_1e_12_on_every_device") {
        for (seed, (label, dims, s, ranks)) in cases.iter().enumerate() {
            let a = with_spectrum(seed as u64, *dims, s);
            for &k in ranks {
                let label = format!("{label}, k = {k} on {}", describe(&device));
                let f =
                    truncated_svd(device.as_ref(), &[a.view()], k).unwrap_or_else(|e| panic!("{label}: {e}"));
                check(&label, a.view(), s, &f[0], k);
            }
        }
    }
}

/// The CPU path on a tall and a wide matrix of 20 000 rows (columns) whose σ span 1 … 1e-12:
/// faer's QR step, which its SVD takes first for such shapes, would lose every value below about
/// `16·rows·ε·σ₁` (7e-11 here); `cpu_svd` bidiagonalises the whole matrix instead.
#[test]
fn the_cpu_path_keeps_the_small_values_of_a_tall_or_wide_matrix() {
    let s = geometric(40, 1e-12);
    let tall = with_spectrum(21, (20_000, 40), &s);
    for (label, a) in [("tall 20000×40", tall.view()), ("wide 40×20000", tall.t())] {
        let f = truncated_svd(None, &[a], 40).unwrap_or_else(|e| panic!("{label}: {e}"));
        check(&format!("{label} on the CPU"), a, &s, &f[0], 40);
    }
}

#[test]
fn a_batch_factors_each_matrix_and_f32_input_is_exact_for_its_f64_values() {
    let batch: Vec<Array2<f64>> = (0..3)
        .map(|i| {
            with_spectrum(100 + i, (61, 37), &geometric(30 + 3 * i as usize, 10f64.powi(-3 - 4 * i as i32)))
        })
        .collect();
    let in_f32: Vec<Array2<f32>> = batch.iter().map(|a| a.mapv(|v| v as f32)).collect();
    for device in devices("a_batch_factors_each_matrix_and_f32_input_is_exact_for_its_f64_values") {
        let on = describe(&device);
        let views: Vec<_> = batch.iter().map(|a| a.view()).collect();
        let got = truncated_svd(device.as_ref(), &views, 9).unwrap_or_else(|e| panic!("batch on {on}: {e}"));
        for (i, (a, f)) in batch.iter().zip(&got).enumerate() {
            let s = geometric(30 + 3 * i, 10f64.powi(-3 - 4 * i as i32));
            check(&format!("batch matrix {i} on {on}"), a.view(), &s, f, 9);
        }
        let views: Vec<_> = in_f32.iter().map(|a| a.view()).collect();
        let got =
            truncated_svd(device.as_ref(), &views, 9).unwrap_or_else(|e| panic!("f32 batch on {on}: {e}"));
        for (i, (a, f)) in in_f32.iter().zip(&got).enumerate() {
            let a = a.mapv(f64::from);
            let values: Vec<f64> = a.iter().copied().collect();
            let exact = cpu_svd(&values, a.dim(), faer::Par::Seq).unwrap().s;
            check(&format!("f32 batch matrix {i} on {on}"), a.view(), &exact, f, 9);
        }
    }
}

/// The zero matrix: `σ = 0` and orthonormal vectors (a completion) on every device.
#[test]
fn the_zero_matrix_gives_zero_values_and_orthonormal_vectors() {
    for device in devices("the_zero_matrix_gives_zero_values_and_orthonormal_vectors") {
        let a = Array2::<f64>::zeros((23, 17));
        let label = format!("zero 23×17 on {}", describe(&device));
        let f = truncated_svd(device.as_ref(), &[a.view()], 5).unwrap_or_else(|e| panic!("{label}: {e}"));
        check(&label, a.view(), &[], &f[0], 5);
    }
}

/// The same matrix gives the same factors on every device (the sign convention), where the
/// singular values are well separated: each vector within 1e-9 of faer's.
#[test]
fn the_vectors_agree_across_devices() {
    let s = [4.0, 2.0, 1.0, 0.5, 0.25, 0.125];
    let a = with_spectrum(7, (83, 29), &s);
    let reference = truncated_svd::<f64>(None, &[a.view()], 6).unwrap().remove(0);
    for device in common::devices("the_vectors_agree_across_devices") {
        let f = truncated_svd(Some(&device), &[a.view()], 6).unwrap().remove(0);
        let u_diff = (&f.u - &reference.u).mapv(f64::abs).fold(0.0, |a: f64, &b| a.max(b));
        let v_diff = (&f.vt - &reference.vt).mapv(f64::abs).fold(0.0, |a: f64, &b| a.max(b));
        assert!(
            u_diff <= 1e-9 && v_diff <= 1e-9,
            "on {}: |ΔU| = {u_diff:e}, |ΔVᵀ| = {v_diff:e}",
            device.describe()
        );
    }
}

/// Spectra where the subspace, not the Gram matrix's rounding, limits the vectors: a slowly
/// decaying one (`σᵢ = 1/i`, a data matrix's) and uniform noise (flat): the iteration's stricter
/// stop test gives residuals at 1e-12·‖A‖ there too (with the `svd` job's, 3e-6 and 1e-7 on
/// matrices like these in the simulator).
#[test]
fn slowly_decaying_and_flat_spectra_are_exact() {
    let harmonic: Vec<f64> = (1..=96).map(|i| 1.0 / i as f64).collect();
    let decaying = with_spectrum(41, (300, 96), &harmonic);
    let mut rng = common::rng(42);
    let noise = Array2::from_shape_fn((90, 200), |_| rng.random_range(-1.0..1.0));
    let noise_values: Vec<f64> = noise.iter().copied().collect();
    let noise_spectrum = cpu_svd(&noise_values, (90, 200), faer::Par::Seq).unwrap().s;
    for device in common::devices("slowly_decaying_and_flat_spectra_are_exact") {
        let on = device.describe();
        for (label, a, s, k) in
            [("σᵢ = 1/i, 300×96", &decaying, &harmonic, 10), ("noise 90×200", &noise, &noise_spectrum, 12)]
        {
            let label = format!("{label}, k = {k} on {on}");
            let f = truncated_svd(Some(&device), &[a.view()], k).unwrap_or_else(|e| panic!("{label}: {e}"));
            check(&label, a.view(), s, &f[0], k);
        }
    }
}

/// A batch of more than 16 matrices with a small subspace takes the one-block Jacobi Ritz solver
/// (checked): noise, exact to 1e-12 too.
#[test]
fn a_large_batch_on_the_one_block_solver_is_exact() {
    let (dims, count, k) = ((70, 40), 20, 6);
    let batch: Vec<Array2<f64>> = (0..count as u64)
        .map(|i| {
            let mut rng = common::rng(300 + i);
            Array2::from_shape_fn(dims, |_| rng.random_range(-1.0..1.0))
        })
        .collect();
    let views: Vec<_> = batch.iter().map(|a| a.view()).collect();
    for device in common::devices("a_large_batch_on_the_one_block_solver_is_exact") {
        let on = device.describe();
        assert_eq!(Plan::new(&device, dims, count, k).unwrap().ritz, RitzMethod::OneBlockJacobi, "on {on}");
        let got = truncated_svd(Some(&device), &views, k).unwrap_or_else(|e| panic!("on {on}: {e}"));
        for (i, (a, f)) in batch.iter().zip(&got).enumerate() {
            let values: Vec<f64> = a.iter().copied().collect();
            let exact = cpu_svd(&values, dims, faer::Par::Seq).unwrap().s;
            check(&format!("noise {i} of {count} on {on}"), a.view(), &exact, f, k);
        }
    }
}

/// Both ways to the Gram matrix's eigenpairs, forced, end in the same exact pass; the wide matrix
/// read as it is (`factor_accurate_with`), as where its transpose does not fit the device. After
/// the whole eigendecomposition the pass starts from only 8–15 columns past `k`: also on a slowly
/// decaying spectrum (`σᵢ = 1/i`, where the columns past them matter most) and on one whose
/// cluster of nearly equal values (1e-9 apart) holds `k` and the pass's last column.
#[test]
fn the_accurate_pass_is_exact_after_either_gram_method() {
    let harmonic: Vec<f64> = (1..=120).map(|i| 1.0 / i as f64).collect();
    let clustered: Vec<f64> = (0..80)
        .map(|i| if (20..40).contains(&i) { 0.04 * (1.0 - 1e-9 * i as f64) } else { 1.0 / (i + 1) as f64 })
        .collect();
    let cases = [
        ((250, 48), geometric(48, 1e-12), 12),
        ((48, 199), geometric(48, 1e-12), 20),
        ((400, 120), harmonic, 44),
        ((90, 300), clustered, 26),
    ];
    for device in common::devices("the_accurate_pass_is_exact_after_either_gram_method") {
        for (dims, s, k) in &cases {
            let (dims, k) = (*dims, *k);
            let a = with_spectrum(31, dims, s);
            let values: Vec<f64> = a.iter().copied().collect();
            let buffer = device.upload(&values).unwrap();
            for method in [GramMethod::SubspaceIteration, GramMethod::WholeEigendecomposition] {
                let label = format!("{dims:?}, k = {k}, {method:?} on {}", device.describe());
                let plan = Plan::with_method(&device, dims, 1, k, method).unwrap();
                let f = svd_factor::factor_accurate_with(&device, &buffer, &plan)
                    .unwrap_or_else(|e| panic!("{label}: {e}"));
                let factors = MatrixFactors {
                    u: Array2::from_shape_vec((dims.0, k), device.download(&f.u).unwrap()).unwrap(),
                    s: f.singular_values[0].clone(),
                    vt: Array2::from_shape_vec((k, dims.1), device.download(&f.vt).unwrap()).unwrap(),
                };
                let mut flipped = factors.clone();
                for (mut u, mut v) in flipped.u.columns_mut().into_iter().zip(flipped.vt.rows_mut()) {
                    let largest =
                        u.iter().copied().fold(0.0f64, |b, x| if x.abs() > b.abs() { x } else { b });
                    if largest < 0.0 {
                        u.mapv_inplace(|x| -x);
                        v.mapv_inplace(|x| -x);
                    }
                }
                check(&label, a.view(), s, &flipped, k);
            }
        }
    }
}

/// What the pass is for: the Gram iteration alone ([`svd_factor::factor`]) limits a small `σᵢ` to
/// about `ε·σ₁²/σᵢ`; the pass brings every `σᵢ` to within 1e-12·σ₁. Prints both errors.
#[test]
fn the_accurate_pass_is_what_makes_small_singular_values_exact() {
    let s = geometric(40, 1e-12);
    let a = with_spectrum(3, (300, 40), &s);
    let values: Vec<f64> = a.iter().copied().collect();
    for device in common::devices("the_accurate_pass_is_what_makes_small_singular_values_exact") {
        let buffer = device.upload(&values).unwrap();
        let max_error = |got: &[f64]| got.iter().zip(&s).map(|(g, w)| (g - w).abs()).fold(0.0, f64::max);
        let gram = svd_factor::factor(&device, &buffer, (300, 40), 1, 40).unwrap();
        let exact = svd_factor::factor_accurate(&device, &buffer, (300, 40), 1, 40).unwrap();
        let (gram_error, exact_error) =
            (max_error(&gram.singular_values[0]), max_error(&exact.singular_values[0]));
        println!(
            "300×40, σ 1 … 1e-12, k = 40 on {}: max |Δσ|/σ₁ {gram_error:.1e} (Gram iteration) → {exact_error:.1e} (accurate pass)",
            device.describe()
        );
        assert!(exact_error <= 1e-12, "accurate pass: {exact_error:e}");
        assert!(gram_error > 1e-10, "the Gram iteration alone: {gram_error:e}, not at its limit ε·σ₁²/σᵢ");
    }
}

#[test]
fn bad_input_is_an_error_on_every_device() {
    let a = with_spectrum(5, (12, 9), &[1.0, 0.5]);
    let mut nan = a.clone();
    nan[[3, 4]] = f64::NAN;
    let mut inf = a.clone();
    inf[[0, 8]] = f64::NEG_INFINITY;
    let other = Array2::<f64>::zeros((9, 12));
    let empty = Array2::<f64>::zeros((0, 5));
    for device in devices("bad_input_is_an_error_on_every_device") {
        let on = describe(&device);
        let d = device.as_ref();
        let cases: Vec<(&str, Vec<ArrayView2<f64>>, usize, &str)> = vec![
            ("k = 0", vec![a.view()], 0, "k = 0 is outside 1..=9"),
            ("k > min(m, n)", vec![a.view()], 10, "k = 10 is outside 1..=9"),
            ("NaN", vec![a.view(), nan.view()], 2, "matrix 1: entry (3, 4) is NaN"),
            ("Inf", vec![inf.view()], 2, "matrix 0: entry (0, 8) is -inf"),
            ("mixed shapes", vec![a.view(), other.view()], 2, "matrix 1 is 9 × 12; the batch is 12 × 9"),
            ("empty matrix", vec![empty.view()], 1, "cannot factor an empty 0 × 5 matrix"),
            ("no matrices", vec![], 1, "no matrices to factor"),
        ];
        for (label, matrices, k, message) in cases {
            match truncated_svd(d, &matrices, k) {
                Err(kernel_suite::Error::InvalidInput(e)) => {
                    assert!(e.contains(message), "{label} on {on}: {e:?} does not say {message:?}")
                }
                other => panic!("{label} on {on}: {:?}", other.map(|f| f.len())),
            }
        }
    }
}

/// The issue's sizes on the GPU (`SKIPPED` without one): a tall 100 000 × 64 matrix and a wide
/// 64 × 20 000 one with σ spanning 1 … 1e-12, and a batch of 64 × 1024 × 256 at k = 16.
#[test]
fn known_spectra_are_exact_at_the_issues_sizes_on_the_gpu() {
    let Some(device) = common::gpu_or_skip("known_spectra_are_exact_at_the_issues_sizes_on_the_gpu") else {
        return;
    };
    let s = geometric(64, 1e-12);
    for (dims, k) in [((100_000, 64), 10), ((100_000, 64), 64), ((64, 20_000), 16)] {
        let a = with_spectrum(11, dims, &s);
        let label = format!("{dims:?}, k = {k} on {}", device.describe());
        let f = truncated_svd(Some(&device), &[a.view()], k).unwrap_or_else(|e| panic!("{label}: {e}"));
        check(&label, a.view(), &s, &f[0], k);
    }
    let batch: Vec<Array2<f64>> =
        (0..64).map(|i| with_spectrum(200 + i, (1024, 256), &geometric(256, 1e-8))).collect();
    let views: Vec<_> = batch.iter().map(|a| a.view()).collect();
    let got = truncated_svd(Some(&device), &views, 16).unwrap();
    for (i, (a, f)) in batch.iter().zip(&got).enumerate().step_by(9) {
        check(&format!("batch matrix {i} of 64 × 1024 × 256"), a.view(), &geometric(256, 1e-8), f, 16);
    }
}

/// Matrices already on the device: a batch with a NaN in its second matrix is an error naming it
/// (the device's own check, not the host's), and a finite batch is factored as from the host.
#[test]
fn a_device_buffer_is_checked_and_factored() {
    let s = geometric(12, 1e-9);
    let a = with_spectrum(9, (33, 21), &s);
    for device in common::devices("a_device_buffer_is_checked_and_factored") {
        let on = device.describe();
        let values: Vec<f64> = a.iter().chain(a.iter()).copied().collect();
        let buffer = device.upload(&values).unwrap();
        let got = matrix_svd::truncated_svd_of_buffer(&device, &buffer, (33, 21), 2, 6)
            .unwrap_or_else(|e| panic!("on {on}: {e}"));
        for (i, f) in got.iter().enumerate() {
            check(&format!("buffer matrix {i} on {on}"), a.view(), &s, f, 6);
        }
        // A NaN, an infinity and a value whose square overflows, in the tall matrices and read
        // as wide ones (factored as their transposes).
        for (bad, what) in [(f64::NAN, "a NaN"), (f64::NEG_INFINITY, "-inf"), (1e200, "1e200")] {
            let mut values = values.clone();
            values[33 * 21 + 40] = bad;
            let buffer = device.upload(&values).unwrap();
            for dims in [(33, 21), (21, 33)] {
                match matrix_svd::truncated_svd_of_buffer(&device, &buffer, dims, 2, 6) {
                    Err(kernel_suite::Error::InvalidInput(e)) => {
                        assert!(e.contains("matrix 1 holds a NaN or infinite value"), "{what} on {on}: {e}")
                    }
                    other => panic!("{what} in {dims:?} on {on}: {:?}", other.map(|f| f.len())),
                }
            }
        }
    }
}
