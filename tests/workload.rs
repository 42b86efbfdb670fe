//! The procedural benchmark images: deterministic, photo-like spectra, written PNGs read back.

use kernel_suite::svd::thin_svd;
use kernel_suite::workload::{noise_image, procedural_image, write_workload};

#[test]
fn images_are_deterministic_and_span_the_range() {
    let a = procedural_image(7, 37, 53);
    assert_eq!(a.dim(), (37, 53));
    assert_eq!(a, procedural_image(7, 37, 53), "same seed, same pixels");
    assert_ne!(a, procedural_image(8, 37, 53), "another seed, another image");
    let (lo, hi) = a.iter().fold((255u8, 0u8), |(lo, hi), &v| (lo.min(v), hi.max(v)));
    assert!(hi - lo >= 100, "values span {lo}..={hi}");
}

#[test]
fn noise_is_deterministic_and_flat() {
    let a = noise_image(5, 128, 128);
    assert_eq!(a, noise_image(5, 128, 128), "same seed, same pixels");
    let f = thin_svd(a.mapv(|v| v as f32 / 255.0).view()).unwrap();
    // Uniform noise: one large singular value (the mean), then a flat bulk.
    assert!(f.s[2] / f.s[60] < 3.0, "σ₃/σ₆₁ = {}: not flat", f.s[2] / f.s[60]);
}

#[test]
fn the_spectrum_decays_like_a_photographs() {
    let image = procedural_image(3, 128, 128).mapv(|v| v as f32 / 255.0);
    let f = thin_svd(image.view()).unwrap();
    let rank10 = f.eckart_young_bound(10);
    assert!((0.01..0.3).contains(&rank10), "rank-10 relative error {rank10}");
    assert!(f.s[10] / f.s[0] < 0.2, "σ₁₁/σ₁ = {}: too flat", f.s[10] / f.s[0]);
    assert!(f.s[60] / f.s[0] > 1e-4, "σ₆₁/σ₁ = {}: too low-rank", f.s[60] / f.s[0]);
}

#[test]
fn written_pngs_decode_to_the_same_pixels() {
    let dir = std::env::temp_dir().join(format!("kernel-suite-workload-{}", std::process::id()));
    for noise in [false, true] {
        let paths = write_workload(&dir, 3, (21, 34), 100, noise).unwrap();
        assert_eq!(paths.len(), 3);
        for (i, path) in paths.iter().enumerate() {
            let back = kernel_suite::image_io::load_grayscale(path).unwrap();
            let make = if noise { noise_image } else { procedural_image };
            let want = make(100 + i as u64, 21, 34);
            assert!(
                back.iter().zip(want.iter()).all(|(&b, &w)| (b * 255.0).round() as u8 == w),
                "{}",
                path.display()
            );
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
    assert!(write_workload(&dir, 0, (4, 4), 0, false).is_err());
}
