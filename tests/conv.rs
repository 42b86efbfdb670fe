//! 2-D convolution: every kernel on every device against the f64 CPU reference, the reference
//! against hand-computed results and the plain formula, exact delta masks, the mask's orientation,
//! bad input, the mask builders and the `conv` command.
//!
//! Simulator time: the simulator runs every case except the largest image (1023×777) with the
//! largest masks (13×13 and 31×31), which run on the GPU only (see `CASES`).

mod common;

use kernel_suite::Device;
use kernel_suite::conv::{
    self, Convolution, Deviation, Variant, convolve, convolve_f64, convolve_reference, parse_mask, validate,
};
use ndarray::{Array2, ArrayView2, array, s};
use std::path::PathBuf;
use std::process::Command;

/// Largest relative error of an f32 kernel: max |result − reference| ≤ 1e-5 · max |reference|.
const F32_TOLERANCE: f64 = 1e-5;
/// The same for the f64 kernel.
const F64_TOLERANCE: f64 = 1e-12;

fn random_array(seed: u64, rows: usize, cols: usize, lo: f32, hi: f32) -> Array2<f32> {
    let values = common::random_vec(&mut common::rng(seed), rows * cols, lo, hi);
    Array2::from_shape_vec((rows, cols), values).unwrap()
}

/// The formula, term by term with signed indices: independent of the reference's row/shift loops.
fn direct_convolution(image: ArrayView2<f32>, mask: ArrayView2<f32>) -> Array2<f64> {
    let (rows, cols) = image.dim();
    let (mh, mw) = mask.dim();
    let (dr, dc) = ((mh / 2) as i64, (mw / 2) as i64);
    Array2::from_shape_fn((rows, cols), |(i, j)| {
        let mut sum = 0.0f64;
        for k in 0..mh {
            for l in 0..mw {
                let (y, x) = (i as i64 - k as i64 + dr, j as i64 - l as i64 + dc);
                if (0..rows as i64).contains(&y) && (0..cols as i64).contains(&x) {
                    sum += mask[[k, l]] as f64 * image[[y as usize, x as usize]] as f64;
                }
            }
        }
        sum
    })
}

/// `(rows, cols, mask rows, mask cols, on the simulator too)`: the sizes × mask sizes.
const CASES: &[(usize, usize, usize, usize, bool)] = &[
    (1, 1, 1, 1, true),
    (1, 1, 3, 3, true),
    (1, 1, 13, 13, true),
    (1, 1, 31, 31, true),
    (1, 1, 3, 11, true),
    (7, 300, 1, 1, true),
    (7, 300, 3, 3, true),
    (7, 300, 13, 13, true),
    (7, 300, 31, 31, true),
    (7, 300, 3, 11, true),
    (200, 200, 1, 1, true),
    (200, 200, 3, 3, true),
    (200, 200, 13, 13, true),
    (200, 200, 31, 31, true),
    (200, 200, 3, 11, true),
    (200, 200, 11, 3, true),
    (1023, 777, 1, 1, true),
    (1023, 777, 3, 3, true),
    (1023, 777, 13, 13, false),
    (1023, 777, 31, 31, false),
    (1023, 777, 3, 11, true),
];

#[test]
fn f32_kernels_match_reference() {
    for device in common::devices("f32_kernels_match_reference") {
        let on_sim = device.backend() == kernel_suite::Backend::Simulator;
        for (seed, &(rows, cols, mh, mw, sim_too)) in CASES.iter().enumerate() {
            if on_sim && !sim_too {
                continue;
            }
            let image = random_array(seed as u64, rows, cols, 0.0, 1.0);
            let mask = random_array(100 + seed as u64, mh, mw, -1.0, 1.0);
            let reference = convolve_reference(image.view(), mask.view()).unwrap();
            for variant in Variant::ALL {
                let got = convolve(&device, image.view(), mask.view(), variant).unwrap();
                let d = Deviation::of(got.view(), reference.view()).unwrap();
                assert!(
                    d.max_abs_error <= F32_TOLERANCE * d.max_abs_reference,
                    "{variant:?}, image {rows}×{cols}, mask {mh}×{mw} on {}: {d:?}",
                    device.describe()
                );
            }
        }
    }
}

#[test]
fn f64_kernel_matches_reference() {
    for device in common::devices("f64_kernel_matches_reference") {
        let on_sim = device.backend() == kernel_suite::Backend::Simulator;
        for (seed, &(rows, cols, mh, mw, sim_too)) in CASES.iter().enumerate() {
            if on_sim && !sim_too {
                continue;
            }
            let image = random_array(200 + seed as u64, rows, cols, 0.0, 1.0).mapv(f64::from);
            let mask = random_array(300 + seed as u64, mh, mw, -1.0, 1.0).mapv(f64::from);
            let reference = convolve_reference(image.view(), mask.view()).unwrap();
            let got = convolve_f64(&device, image.view(), mask.view()).unwrap();
            let d = Deviation::of(got.view(), reference.view()).unwrap();
            assert!(
                d.max_abs_error <= F64_TOLERANCE * d.max_abs_reference,
                "image {rows}×{cols}, mask {mh}×{mw} on {}: {d:?}",
                device.describe()
            );
        }
    }
}

#[test]
fn reference_matches_hand_computed_results() {
    // numpy.convolve([1, 2, 3], [1, 2, 3], 'same') = [4, 10, 12].
    let got =
        convolve_reference(array![[1.0f32, 2.0, 3.0]].view(), array![[1.0f32, 2.0, 3.0]].view()).unwrap();
    assert_eq!(got, array![[4.0, 10.0, 12.0]]);
    // The same along columns.
    let got =
        convolve_reference(array![[1.0f32], [2.0], [3.0]].view(), array![[1.0f32], [2.0], [3.0]].view())
            .unwrap();
    assert_eq!(got, array![[4.0], [10.0], [12.0]]);
    // A 1 in the mask's top-left corner reads the image one row down and one column right.
    let image = array![[1.0f32, 2.0, 3.0], [4.0, 5.0, 6.0], [7.0, 8.0, 9.0]];
    let corner = array![[1.0f32, 0.0, 0.0], [0.0, 0.0, 0.0], [0.0, 0.0, 0.0]];
    let got = convolve_reference(image.view(), corner.view()).unwrap();
    assert_eq!(got, array![[5.0, 6.0, 0.0], [8.0, 9.0, 0.0], [0.0, 0.0, 0.0]]);
}

#[test]
fn reference_matches_direct_formula() {
    for (seed, (rows, cols, mh, mw)) in
        [(1, 1, 5, 3), (4, 9, 7, 7), (37, 23, 3, 11), (23, 37, 11, 3), (64, 50, 31, 1), (5, 66, 1, 31)]
            .into_iter()
            .enumerate()
    {
        let image = random_array(400 + seed as u64, rows, cols, -1.0, 1.0);
        let mask = random_array(500 + seed as u64, mh, mw, -1.0, 1.0);
        let got = convolve_reference(image.view(), mask.view()).unwrap();
        let want = direct_convolution(image.view(), mask.view());
        let d = Deviation::of(got.view(), want.view()).unwrap();
        assert!(d.max_abs_error <= 1e-12 * d.max_abs_reference, "{rows}×{cols}, mask {mh}×{mw}: {d:?}");
    }
}

/// A `mh × mw` mask of zeros with a 1 at `(k, l)`.
fn delta(mh: usize, mw: usize, k: usize, l: usize) -> Array2<f32> {
    let mut m = Array2::zeros((mh, mw));
    m[[k, l]] = 1.0;
    m
}

#[test]
fn centred_delta_mask_reproduces_the_image_exactly() {
    let image = random_array(600, 77, 301, -1.0, 1.0);
    for device in common::devices("centred_delta_mask_reproduces_the_image_exactly") {
        for (mh, mw) in [(1, 1), (3, 3), (13, 13), (31, 31), (3, 11)] {
            let mask = delta(mh, mw, mh / 2, mw / 2);
            for variant in Variant::ALL {
                let got = convolve(&device, image.view(), mask.view(), variant).unwrap();
                assert_eq!(got, image, "{variant:?}, delta {mh}×{mw} on {}", device.describe());
            }
            let got =
                convolve_f64(&device, image.mapv(f64::from).view(), mask.mapv(f64::from).view()).unwrap();
            assert_eq!(got, image.mapv(f64::from), "f64, delta {mh}×{mw} on {}", device.describe());
        }
    }
}

#[test]
fn mask_orientation_is_convolution_not_correlation() {
    let image = random_array(700, 45, 70, -1.0, 1.0);
    let (rows, cols) = image.dim();
    // A 1 at mask (0, 0) of a 3×5 mask: out[i, j] = image[i + 1, j + 2] (zero past the edge);
    // a correlation would give image[i − 1, j − 2].
    let shift = delta(3, 5, 0, 0);
    let shifted = Array2::from_shape_fn((rows, cols), |(i, j)| {
        if i + 1 < rows && j + 2 < cols { image[[i + 1, j + 2]] } else { 0.0 }
    });
    // An asymmetric mask and its flip give different results, each matching its own reference.
    let mask = random_array(701, 5, 7, 0.0, 1.0);
    let flipped = mask.slice(s![..;-1, ..;-1]).to_owned();
    let reference = convolve_reference(image.view(), mask.view()).unwrap();
    let flipped_reference = convolve_reference(image.view(), flipped.view()).unwrap();
    let apart = Deviation::of(reference.view(), flipped_reference.view()).unwrap();
    assert!(apart.relative() > 0.01, "the flipped mask gives (almost) the same result: {apart:?}");

    for device in common::devices("mask_orientation_is_convolution_not_correlation") {
        for variant in Variant::ALL {
            let what = format!("{variant:?} on {}", device.describe());
            assert_eq!(convolve(&device, image.view(), shift.view(), variant).unwrap(), shifted, "{what}");
            let got = convolve(&device, image.view(), mask.view(), variant).unwrap();
            let d = Deviation::of(got.view(), reference.view()).unwrap();
            assert!(d.relative() <= F32_TOLERANCE, "{what}: {d:?}");
            let d = Deviation::of(got.view(), flipped_reference.view()).unwrap();
            assert!(d.relative() > 100.0 * F32_TOLERANCE, "{what}: matches the flipped mask: {d:?}");
        }
    }
}

#[test]
fn any_memory_layout_is_accepted() {
    let device = Device::simulator();
    device.set_poison_allocations(true);
    let base = random_array(800, 40, 60, 0.0, 1.0);
    let image = base.t(); // column-major view, 60 × 40
    let mask_base = random_array(801, 7, 5, -1.0, 1.0);
    let mask = mask_base.slice(s![.., ..;-1]); // negative stride
    let reference = direct_convolution(image, mask);
    for variant in Variant::ALL {
        let got = convolve(&device, image, mask, variant).unwrap();
        let d = Deviation::of(got.view(), reference.view()).unwrap();
        assert!(d.relative() <= F32_TOLERANCE, "{variant:?}: {d:?}");
    }
    let got = convolve_reference(image, mask).unwrap();
    assert!(Deviation::of(got.view(), reference.view()).unwrap().relative() <= 1e-12);
}

#[test]
fn timed_launches_agree_with_the_reference() {
    for device in common::devices("timed_launches_agree_with_the_reference") {
        let image = random_array(900, 129, 65, 0.0, 1.0);
        let mask = conv::gaussian_mask(1.5, None).unwrap().mapv(|v| v as f32);
        let mut c = Convolution::upload(&device, image.view(), mask.view()).unwrap();
        assert_eq!((c.dim(), c.mask_dim()), ((129, 65), (11, 11)));
        let reference = convolve_reference(image.view(), mask.view()).unwrap();
        for variant in [Variant::Tiled, Variant::Naive, Variant::Tiled] {
            c.launch(variant).unwrap();
            let d = Deviation::of(c.download().unwrap().view(), reference.view()).unwrap();
            assert!(d.relative() <= F32_TOLERANCE, "{variant:?} on {}: {d:?}", device.describe());
        }
    }
}

fn invalid(image: ArrayView2<f32>, mask: ArrayView2<f32>) -> String {
    let message = validate(image, mask).unwrap_err().to_string();
    let device = Device::simulator();
    for variant in Variant::ALL {
        assert_eq!(convolve(&device, image, mask, variant).unwrap_err().to_string(), message);
    }
    let f64_result = convolve_f64(&device, image.mapv(f64::from).view(), mask.mapv(f64::from).view());
    assert_eq!(f64_result.unwrap_err().to_string(), message);
    assert_eq!(convolve_reference(image, mask).unwrap_err().to_string(), message);
    message
}

#[test]
fn bad_input_is_rejected_with_a_clear_error() {
    let image = random_array(1000, 20, 30, 0.0, 1.0);
    let mask = random_array(1001, 3, 3, 0.0, 1.0);
    let image = image.view();
    let e = |m: &Array2<f32>| invalid(image, m.view());
    assert_eq!(
        e(&Array2::zeros((2, 3))),
        "invalid input: the mask is 2 × 3: both sides must be odd (the centre is the origin)"
    );
    assert_eq!(
        e(&Array2::zeros((3, 4))),
        "invalid input: the mask is 3 × 4: both sides must be odd (the centre is the origin)"
    );
    assert_eq!(e(&Array2::zeros((0, 3))), "invalid input: the mask is empty (0 × 3)");
    assert_eq!(e(&Array2::zeros((33, 1))), "invalid input: the mask is 33 × 1: sides are limited to 31");
    let mut nan_mask = mask.clone();
    nan_mask[[1, 2]] = f32::NAN;
    assert_eq!(e(&nan_mask), "invalid input: the mask holds a non-finite value (NaN) at row 1, column 2");
    let mut inf_mask = mask.clone();
    inf_mask[[2, 0]] = f32::NEG_INFINITY;
    assert_eq!(e(&inf_mask), "invalid input: the mask holds a non-finite value (-inf) at row 2, column 0");

    let mut nan_image = image.to_owned();
    nan_image[[19, 7]] = f32::NAN;
    assert_eq!(
        invalid(nan_image.view(), mask.view()),
        "invalid input: the image holds a non-finite value (NaN) at row 19, column 7"
    );
    assert_eq!(
        invalid(Array2::zeros((0, 5)).view(), mask.view()),
        "invalid input: the image is empty (0 × 5)"
    );
}

#[test]
fn mask_builders() {
    let g = conv::gaussian_mask(2.0, None).unwrap();
    assert_eq!(g.dim(), (13, 13));
    assert!((g.sum() - 1.0).abs() < 1e-12);
    assert_eq!(g, g.slice(s![..;-1, ..]).to_owned(), "gaussian not symmetric");
    assert_eq!(g, g.t().to_owned(), "gaussian not symmetric");
    assert!(g[[6, 6]] > g[[6, 7]] && g[[6, 7]] > g[[6, 8]] && g[[0, 0]] > 0.0);
    assert_eq!(conv::gaussian_mask(0.5, Some(31)).unwrap().dim(), (31, 31));
    assert_eq!(
        conv::gaussian_mask(6.0, None).unwrap_err().to_string(),
        "invalid input: mask size 37 must be odd and at most 31"
    );
    assert_eq!(
        conv::gaussian_mask(0.0, None).unwrap_err().to_string(),
        "invalid input: sigma must be positive, not 0"
    );

    let b = conv::box_mask(5).unwrap();
    assert_eq!(b.dim(), (5, 5));
    assert!(b.iter().all(|&v| v == 1.0 / 25.0));
    assert_eq!(
        conv::box_mask(4).unwrap_err().to_string(),
        "invalid input: mask size 4 must be odd and at most 31"
    );

    assert_eq!(conv::sharpen_mask().sum(), 1.0);

    let r = conv::random_mask(7, 3).unwrap();
    assert_eq!(r, conv::random_mask(7, 3).unwrap());
    assert_ne!(r, conv::random_mask(7, 4).unwrap());
    assert!((r.sum() - 1.0).abs() < 1e-12 && r.iter().all(|&v| v >= 0.0));
}

#[test]
fn mask_text_is_parsed_or_rejected() {
    let m = parse_mask("# a comment\n1 2 3\n\n4, 5,6\n 7\t8 9 \n").unwrap();
    assert_eq!(m, array![[1.0, 2.0, 3.0], [4.0, 5.0, 6.0], [7.0, 8.0, 9.0]]);
    assert_eq!(
        parse_mask("1 2\n3 x\n").unwrap_err().to_string(),
        "invalid input: line 2: `x` is not a number"
    );
    assert_eq!(
        parse_mask("1 2 3\n4 5\n").unwrap_err().to_string(),
        "invalid input: line 2: 2 numbers, but the first mask row has 3"
    );
    assert_eq!(
        parse_mask("# nothing\n\n").unwrap_err().to_string(),
        "invalid input: the mask file holds no numbers"
    );
    // NaN parses; `validate` rejects it when the mask is used.
    assert!(parse_mask("nan").unwrap()[[0, 0]].is_nan());
    let missing = conv::load_mask(std::path::Path::new("/nonexistent/mask.txt")).unwrap_err().to_string();
    assert!(missing.starts_with("/nonexistent/mask.txt: cannot read the mask: "), "{missing}");
}

// ---- the `conv` command ----

fn conv_exe() -> PathBuf {
    common::bin("conv", env!("CARGO_BIN_EXE_conv"))
}

fn run_conv(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(conv_exe()).args(args).output().unwrap();
    (out.status.success(), String::from_utf8(out.stdout).unwrap(), String::from_utf8(out.stderr).unwrap())
}

fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("kernel-suite-conv-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
fn command_convolves_the_test_pattern_and_checks() {
    let dir = temp_dir("pattern");
    let png = dir.join("out.png");
    for device in ["sim", "cpu"] {
        let (ok, stdout, stderr) = run_conv(&[
            "--device",
            device,
            "--width",
            "70",
            "--height",
            "45",
            "--check",
            "--output",
            png.to_str().unwrap(),
        ]);
        assert!(ok, "--device {device}: {stdout}{stderr}");
        assert!(stdout.contains("image 70×45 (test pattern), mask 13×13"), "{stdout}");
        let summary = stdout.lines().last().unwrap();
        assert!(summary.starts_with("time: ") && summary.contains(" I/O "), "{stdout}");
        if device == "sim" {
            assert!(
                stdout.contains("H2D ") && stdout.contains(" kernel ") && stdout.contains("D2H "),
                "{stdout}"
            );
            assert!(stdout.contains("max |result − reference| = "), "{stdout}");
        }
        let written = image::open(&png).unwrap();
        assert_eq!((written.width(), written.height()), (70, 45));
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A user's image and mask file through every variant and precision: the PNG, and the `.npy`
/// read back (dtype as computed, every value) against the f64 reference of the same input read in
/// f64 (pixels `v/255`, the mask's decimals): `--precision f64` is f64 from the file on.
#[test]
fn command_convolves_a_user_image_with_a_mask_file() {
    let dir = temp_dir("user");
    let input = dir.join("in.png");
    let pixels: Vec<u8> = (0..33 * 21).map(|i| (i * 37 % 256) as u8).collect();
    image::save_buffer(&input, &pixels, 33, 21, image::ExtendedColorType::L8).unwrap();
    let mask_file = dir.join("mask.txt");
    std::fs::write(
        &mask_file,
        "# edge, in decimals that f32 cannot hold\n-0.1 -0.1 -0.1\n-0.1 0.8 -0.1\n-0.1 -0.1 -0.1\n",
    )
    .unwrap();
    let reference = convolve_reference(
        kernel_suite::image_io::load_grayscale_f64(&input).unwrap().view(),
        conv::load_mask(&mask_file).unwrap().view(),
    )
    .unwrap();
    let output = dir.join("out.png");
    let npy_path = dir.join("out.npy");
    for (variant, precision) in [("tiled", "f32"), ("naive", "f32"), ("naive", "f64")] {
        let _ = std::fs::remove_file(&npy_path);
        let (ok, stdout, stderr) = run_conv(&[
            "--device",
            "sim",
            "--input",
            input.to_str().unwrap(),
            "--mask-file",
            mask_file.to_str().unwrap(),
            "--variant",
            variant,
            "--precision",
            precision,
            "--scaling",
            "rescale",
            "--check",
            "--output",
            output.to_str().unwrap(),
            "--npy",
            npy_path.to_str().unwrap(),
        ]);
        let label = format!("{variant} {precision}");
        assert!(ok, "{label}: {stdout}{stderr}");
        assert!(stdout.contains("image 33×21") && stdout.contains("mask 3×3"), "{stdout}");
        assert!(stdout.contains("time: ") && stdout.contains(" ms end to end = "), "{stdout}");
        let written = image::open(&output).unwrap().into_luma8();
        assert_eq!(written.dimensions(), (33, 21));
        // Rescaling maps the result's minimum to 0 and its maximum to 255.
        assert_eq!(written.iter().min(), Some(&0));
        assert_eq!(written.iter().max(), Some(&255));
        let values = if precision == "f32" {
            assert!(
                kernel_suite::npy::read::<f64, ndarray::Ix2>(&npy_path).is_err(),
                "{label}: float32 expected"
            );
            let values = kernel_suite::npy::read::<f32, ndarray::Ix2>(&npy_path).unwrap();
            // The range the device reduced gives the pixels the host's own range gives.
            let host =
                kernel_suite::image_io::to_gray8(values.view(), kernel_suite::image_io::Scaling::Rescale);
            assert_eq!(written.as_raw(), &host, "{label}: rescaled pixels");
            values.mapv(f64::from)
        } else {
            kernel_suite::npy::read::<f64, ndarray::Ix2>(&npy_path).unwrap()
        };
        assert_eq!(values.dim(), (21, 33), "{label}: rows × columns");
        let d = Deviation::of(values.view(), reference.view()).unwrap();
        let bound = if precision == "f32" { F32_TOLERANCE } else { F64_TOLERANCE };
        assert!(d.relative() <= bound, "{label}: .npy differs from the reference by {}", d.relative());
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn command_fails_with_one_line_on_bad_input() {
    let dir = temp_dir("bad");
    let not_an_image = dir.join("not-an-image.png");
    std::fs::write(&not_an_image, "hello").unwrap();
    let even_mask = dir.join("even.txt");
    std::fs::write(&even_mask, "1 1\n1 1\n").unwrap();
    let nan_mask = dir.join("nan.txt");
    std::fs::write(&nan_mask, "0 0 0\n0 nan 0\n0 0 0\n").unwrap();
    let cases: &[(&[&str], &str)] = &[
        (&["--input", "/nonexistent/image.png"], "error: /nonexistent/image.png: "),
        (&["--input", not_an_image.to_str().unwrap()], "not a readable PNG/JPEG image"),
        (&["--mask-file", "/nonexistent/mask.txt"], "error: /nonexistent/mask.txt: cannot read the mask: "),
        (&["--mask-file", even_mask.to_str().unwrap()], "both sides must be odd"),
        (
            &["--mask-file", nan_mask.to_str().unwrap()],
            "the mask holds a non-finite value (NaN) at row 1, column 1",
        ),
        (&["--mask", "box", "--size", "4"], "mask size 4 must be odd and at most 31"),
        (&["--sigma", "6"], "mask size 37 must be odd and at most 31"),
        (&["--width", "0"], "the test pattern needs --width and --height > 0"),
        (&["--variant", "tiled", "--precision", "f64"], "the tiled kernel is f32 only"),
        (&["--npy", "/nonexistent/dir/out.npy"], "error: /nonexistent/dir/out.npy: "),
    ];
    for (args, expected) in cases {
        let mut all = vec!["--device", "sim"];
        if !args.contains(&"--width") {
            all.extend(["--width", "20", "--height", "10"]);
        }
        all.extend_from_slice(args);
        let (ok, stdout, stderr) = run_conv(&all);
        assert!(!ok, "{args:?} succeeded: {stdout}");
        assert_eq!(stderr.lines().count(), 1, "{args:?}: {stderr}");
        assert!(stderr.starts_with("error: ") && stderr.contains(expected), "{args:?}: {stderr}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}
