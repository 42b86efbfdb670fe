//! Every SVD of the suite against answers known exactly (`tests/exact/mod.rs`), not against
//! another library: the CPU reference (`svd::thin_svd`, faer), the CPU engine of the `svd` job
//! (`job::cpu_engine::factor_cpu`, faer) and the device solver (`svd_factor::truncated_svd`, in the
//! simulator and on the GPU), on repeated, equal, clustered, zero and geometrically decaying
//! spectra at sizes of at least 128 (past every small-matrix path).

mod common;
mod exact;

use exact::{Exact, constant_blocks, structured_images};
use kernel_suite::job::cpu_engine::factor_cpu;
use kernel_suite::job::images::{JobImage, JobOptions, Keep, Pixels};
use kernel_suite::svd::thin_svd;
use kernel_suite::svd_factor::truncated_svd;
use ndarray::Array2;

/// Asserts that `got` (the leading singular values of `e.image`) are the exact ones within
/// `tolerance·σ₁` plus the image's f32 rounding (Weyl: no SVD of the f32 image can do better).
fn assert_values(label: &str, got: &[f64], e: &Exact, tolerance: f64) {
    let sigma1 = e.s[0];
    for (i, (&got, &want)) in got.iter().zip(&e.s).enumerate() {
        assert!(
            (got - want).abs() <= tolerance * sigma1 + e.rounding,
            "{label}: σ{i} = {got:e}, exactly {want:e} (σ₁ = {sigma1}, f32 rounding {:.1e})",
            e.rounding
        );
    }
}

/// Asserts that a rank-k relative error is the exact Eckart–Young bound (to 1e-4 of it, or the
/// f32 rounding of the reconstruction where the bound is near zero).
fn assert_at_bound(label: &str, error: f64, e: &Exact, k: usize) {
    let bound = e.eckart_young_bound(k);
    assert!(
        (error - bound).abs() <= 1e-4 * bound + 2e-6,
        "{label} k={k}: relative error {error:e}, exact Eckart–Young bound {bound:e}"
    );
}

/// `‖A − U_k·diag(s_k)·V_kᵀ‖_F / ‖A‖_F` in f64.
fn reconstruction_error(a: &Array2<f32>, u: &Array2<f32>, s: &[f64], vt: &Array2<f32>, k: usize) -> f64 {
    let (m, n) = a.dim();
    let (mut diff, mut norm) = (0.0f64, 0.0f64);
    for i in 0..m {
        for j in 0..n {
            let rec: f64 = (0..k).map(|p| u[[i, p]] as f64 * s[p] * vt[[p, j]] as f64).sum();
            let x = a[[i, j]] as f64;
            diff += (x - rec).powi(2);
            norm += x * x;
        }
    }
    if norm == 0.0 { diff.sqrt() } else { (diff / norm).sqrt() }
}

#[test]
fn the_cpu_reference_is_exact_on_structured_images() {
    for (e, ranks) in structured_images() {
        let f = thin_svd(e.image.view()).unwrap_or_else(|err| panic!("{}: {err}", e.label));
        assert_eq!(f.s.len(), e.s.len(), "{}", e.label);
        assert_values(&e.label, &f.s, &e, 1e-12);
        let (u, vt) = (f.u.mapv(|v| v as f32), f.vt.mapv(|v| v as f32));
        for k in ranks {
            assert_at_bound(
                &format!("{} (thin_svd)", e.label),
                reconstruction_error(&e.image, &u, &f.s, &vt, k),
                &e,
                k,
            );
        }
    }
}

#[test]
fn the_cpu_engine_is_exact_on_structured_images() {
    for (e, ranks) in structured_images() {
        let options = JobOptions {
            ranks: ranks.clone(),
            check: false,
            variant: kernel_suite::svd::Variant::Regtiled,
            batch_images: 1,
            keep: Keep::Nothing,
        };
        let image = JobImage { index: 0, name: e.label.clone(), pixels: Pixels::Float(e.image.clone()) };
        let result =
            factor_cpu(&image, &options, faer::Par::Seq).unwrap_or_else(|err| panic!("{}: {err}", e.label));
        assert_values(&e.label, &result.singular_values, &e, 1e-12);
        assert!((result.frobenius_norm - e.frobenius_norm()).abs() <= 1e-12 * e.s[0] + e.rounding);
        for rank in &result.ranks {
            assert_at_bound(&format!("{} (factor_cpu)", e.label), rank.relative_error, &e, rank.k);
            assert_at_bound(
                &format!("{} (factor_cpu, its bound)", e.label),
                rank.eckart_young_bound,
                &e,
                rank.k,
            );
        }
    }
}

/// The image of the issue that found faer 0.22's bug, as 8-bit pixels: four 32 × 32 blocks of
/// value 200 on the diagonal, four singular values 25.098 and no error at rank 4.
#[test]
fn the_cpu_engine_is_exact_on_four_equal_blocks_of_8_bit_pixels() {
    let e = constant_blocks(&[(32, 32, 200.0 / 255.0); 4]);
    let data: Vec<u8> = e.image.iter().map(|&v| (v * 255.0).round() as u8).collect();
    let image =
        JobImage { index: 0, name: "blocks".into(), pixels: Pixels::Gray8 { rows: 128, cols: 128, data } };
    let options = JobOptions {
        ranks: vec![1, 3, 4, 5],
        check: true,
        variant: kernel_suite::svd::Variant::Regtiled,
        batch_images: 1,
        keep: Keep::Nothing,
    };
    let result = factor_cpu(&image, &options, faer::Par::Seq).unwrap();
    assert_values("8-bit blocks", &result.singular_values, &e, 1e-12);
    let errors: Vec<f64> = result.ranks.iter().map(|r| r.relative_error).collect();
    assert!(errors[2] < 1e-7 && errors[3] < 1e-7, "rank 4 and 5 reconstruct exactly: {errors:?}");
    assert!((errors[0] - 0.75f64.sqrt()).abs() < 1e-7 && (errors[1] - 0.5).abs() < 1e-7, "{errors:?}");
}

#[test]
fn the_device_solver_is_exact_on_structured_images() {
    let cases = structured_images();
    for device in common::devices("the_device_solver_is_exact_on_structured_images") {
        for (e, ranks) in &cases {
            let k = *ranks.iter().max().unwrap();
            let label = format!("{} on {}", e.label, device.describe());
            let t =
                truncated_svd(&device, &[e.image.view()], k).unwrap_or_else(|err| panic!("{label}: {err}"));
            let t = &t[0];
            assert!(t.u.iter().chain(t.vt.iter()).all(|v| v.is_finite()), "{label}: non-finite factors");
            assert_eq!(t.s.len(), k, "{label}");
            assert_values(&label, &t.s, e, 1e-5);
            assert!(
                (t.frobenius_norm - e.frobenius_norm()).abs() <= 1e-12 * e.s[0] + e.rounding,
                "{label}: ‖A‖_F"
            );
            for &rank in ranks {
                assert_at_bound(&label, reconstruction_error(&e.image, &t.u, &t.s, &t.vt, rank), e, rank);
            }
        }
    }
}
