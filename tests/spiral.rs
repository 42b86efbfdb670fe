//! Spiral images on every device against the CPU reference (f64), the configuration's JSON round
//! trip, input validation and the `spiral` command.
//!
//! Images are 400×300 in the simulator (each simulated thread is an OS thread) and 3840×2160, the
//! issue's size, on the GPU.

mod common;

use kernel_suite::image_io;
use kernel_suite::spiral::{
    self, BACKGROUND, Multiplier, Palette, Precision, SpiralConfig, launch_spiral, spiral, spiral_reference,
};
use kernel_suite::{Backend, Device};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, UNIX_EPOCH};

/// Image size of the comparisons: modest in the simulator, the issue's 4K on a GPU.
fn test_size(device: &Device) -> (u32, u32) {
    match device.backend() {
        Backend::Simulator => (400, 300),
        Backend::Gpu => (3840, 2160),
    }
}

/// Fraction of equal bytes.
fn agreement(a: &[u8], b: &[u8]) -> f64 {
    assert_eq!(a.len(), b.len());
    a.iter().zip(b).filter(|(x, y)| x == y).count() as f64 / a.len() as f64
}

/// A valid configuration with every field set by hand.
fn fixed_config() -> SpiralConfig {
    SpiralConfig {
        width: 101,
        height: 67,
        center: [40.0, 30.0],
        symmetry: 4,
        curve: 25.5,
        multiplier: Multiplier::Ln,
        max_radius: 45.0,
        precision: Precision::F64,
        palette: None,
    }
}

#[test]
fn kernels_match_the_cpu_reference_for_random_configurations_and_every_multiplier() {
    for device in common::devices("kernels_match_the_cpu_reference") {
        let (width, height) = test_size(&device);
        let mut rng = common::rng(61);
        let mut configs: Vec<SpiralConfig> =
            (0..3).map(|_| SpiralConfig::random(&mut rng, width, height)).collect();
        for multiplier in [Multiplier::Ln, Multiplier::Sin, Multiplier::Cos, Multiplier::Tan] {
            let mut c = SpiralConfig::random(&mut rng, width, height);
            c.multiplier = multiplier;
            c.curve = 55.55 * if multiplier == Multiplier::Cos { -1.0 } else { 1.0 };
            configs.push(c);
        }
        for mut config in configs {
            let expected = spiral_reference(&config).unwrap();
            let background = expected.iter().filter(|&&v| v == BACKGROUND).count();
            let distinct = (0..=255u8).filter(|v| expected.contains(v)).count();
            assert!(
                background > 0 && background < expected.len() / 2,
                "{config:?}: {background} background pixels"
            );
            assert!(distinct > 200, "{config:?}: only {distinct} distinct levels");

            config.precision = Precision::F64;
            let f64_image = spiral(&device, &config).unwrap();
            config.precision = Precision::F32;
            let f32_image = spiral(&device, &config).unwrap();
            let (same64, same32) = (agreement(&f64_image, &expected), agreement(&f32_image, &expected));
            eprintln!(
                "{}: multiplier {}, symmetry {}, curve {}: f64 = reference on {:.5}%, f32 on {:.5}%",
                device.describe(),
                config.multiplier,
                config.symmetry,
                config.curve,
                100.0 * same64,
                100.0 * same32
            );
            assert!(same64 >= 0.999, "f64 kernel: {:.5}% of pixels equal for {config:?}", 100.0 * same64);
            assert!(same32 >= 0.99, "f32 kernel: {:.5}% of pixels equal for {config:?}", 100.0 * same32);
        }
    }
}

#[test]
fn every_pixel_is_written_whatever_the_buffer_held() {
    for device in common::devices("every_pixel_is_written") {
        for (width, height) in [(1, 1), (1, 45), (37, 1), (33, 9), (67, 41)] {
            for precision in [Precision::F32, Precision::F64] {
                let config = SpiralConfig {
                    width,
                    height,
                    center: [width as f64 / 2.0, height as f64 / 3.0],
                    max_radius: (width.max(height) as f64 / 2.0).max(1.0),
                    precision,
                    ..fixed_config()
                };
                // A poisoned allocation (0xff) and an upload of zeros must end up equal.
                let poisoned = spiral(&device, &config).unwrap();
                let mut zeros = device.upload(&vec![0u8; config.pixel_count()]).unwrap();
                launch_spiral(&device, &config, &mut zeros).unwrap();
                assert_eq!(device.download(&zeros).unwrap(), poisoned, "{width}×{height} {precision}");
                if precision == Precision::F64 {
                    let expected = spiral_reference(&config).unwrap();
                    assert!(agreement(&poisoned, &expected) >= 0.99, "{width}×{height}");
                }
            }
        }
    }
}

#[test]
fn the_centre_pixel_is_defined_for_every_multiplier() {
    for device in common::devices("the_centre_pixel_is_defined") {
        for multiplier in [Multiplier::Ln, Multiplier::Sin, Multiplier::Cos, Multiplier::Tan] {
            for precision in [Precision::F32, Precision::F64] {
                let config = SpiralConfig { multiplier, precision, ..fixed_config() };
                let image = spiral(&device, &config).unwrap();
                let centre = 30 * config.width as usize + 40;
                assert_eq!(image[centre], 255, "centre pixel, multiplier {multiplier}, {precision}");
                assert_eq!(spiral_reference(&config).unwrap()[centre], 255);
            }
        }
    }
}

#[test]
fn background_is_exactly_the_pixels_beyond_the_max_radius() {
    let config = SpiralConfig { center: [10.5, 7.25], ..fixed_config() };
    let image = spiral_reference(&config).unwrap();
    for (i, &v) in image.iter().enumerate() {
        let (row, col) = (i / 101, i % 101);
        let r = (col as f64 - 10.5).hypot(row as f64 - 7.25);
        if r > 45.0 {
            assert_eq!(v, BACKGROUND, "pixel ({row}, {col}) at r = {r}");
        }
    }
    let device = Device::simulator();
    device.set_poison_allocations(true);
    let kernel = spiral(&device, &config).unwrap();
    assert!(agreement(&kernel, &image) >= 0.999);
}

#[test]
fn a_saved_configuration_reproduces_the_identical_image() {
    let dir = scratch_dir("roundtrip");
    for device in common::devices("a_saved_configuration_reproduces_the_identical_image") {
        let (width, height) = test_size(&device);
        let mut rng = common::rng(7);
        let mut config = SpiralConfig::random(&mut rng, width, height);
        // Values whose shortest decimal form needs all 17 digits.
        config.center = [width as f64 / 3.0 + 0.1 + 0.2, height as f64 / std::f64::consts::PI];
        config.curve = -std::f64::consts::E * 7.0;
        config.max_radius = width as f64 / 1.7;
        config.palette = Some("#102030,#ff8000,#fefefe".parse().unwrap());
        for precision in [Precision::F32, Precision::F64] {
            config.precision = precision;
            let path = dir.join(format!("{precision}.json"));
            config.save(&path).unwrap();
            let loaded = SpiralConfig::load(&path).unwrap();
            assert_eq!(loaded, config);
            assert_eq!(SpiralConfig::from_json(&config.to_json()).unwrap(), config);
            assert_eq!(spiral(&device, &loaded).unwrap(), spiral(&device, &config).unwrap());
        }
    }
}

#[test]
fn random_configurations_follow_the_issue() {
    let mut rng = common::rng(99);
    let mut multipliers = std::collections::BTreeSet::new();
    for _ in 0..500 {
        let c = SpiralConfig::random(&mut rng, 3840, 2160);
        c.validate().unwrap();
        let [cx, cy] = c.center;
        assert!((1280.0..=2560.0).contains(&cx) && (720.0..=1440.0).contains(&cy), "{c:?}");
        assert_eq!((cx.fract(), cy.fract()), (0.0, 0.0));
        assert!((1..=9).contains(&c.symmetry));
        assert!(c.curve.abs() <= 62.83 && (c.curve * 100.0).round() / 100.0 == c.curve, "{}", c.curve);
        assert!((1500.0..=2000.0).contains(&c.max_radius));
        multipliers.insert(c.multiplier.code());
        assert_eq!((c.precision, c.palette.as_ref()), (Precision::F64, None));
    }
    assert_eq!(multipliers.into_iter().collect::<Vec<_>>(), vec![0, 1]);
    let c = SpiralConfig::random(&mut rng, 7680, 4320);
    assert!((3000.0..=4000.0).contains(&c.max_radius));
    for (w, h) in [(1, 1), (2, 3), (5, 1)] {
        SpiralConfig::random(&mut rng, w, h).validate().unwrap();
    }
}

#[test]
fn bad_configurations_are_clear_errors() {
    let cases: Vec<(SpiralConfig, &str)> = vec![
        (SpiralConfig { symmetry: 0, ..fixed_config() }, "symmetry 0: it must be at least 1"),
        (SpiralConfig { symmetry: 361, ..fixed_config() }, "symmetry 361 exceeds 360"),
        (SpiralConfig { max_radius: 0.0, ..fixed_config() }, "max radius 0: it must be a positive number"),
        (SpiralConfig { max_radius: -3.0, ..fixed_config() }, "max radius -3: it must be a positive number"),
        (SpiralConfig { max_radius: f64::NAN, ..fixed_config() }, "max radius NaN"),
        (SpiralConfig { width: 0, ..fixed_config() }, "the image is empty (0 × 67 pixels)"),
        (SpiralConfig { height: 0, ..fixed_config() }, "the image is empty (101 × 0 pixels)"),
        (SpiralConfig { width: 40000, ..fixed_config() }, "limited to 32768"),
        (SpiralConfig { curve: f64::INFINITY, ..fixed_config() }, "curve inf is not a finite number"),
        (SpiralConfig { center: [f64::NAN, 3.0], ..fixed_config() }, "centre (NaN, 3) is not finite"),
        (SpiralConfig { center: [1e9, 30.0], ..fixed_config() }, "is too far outside the 101 × 67 image"),
        (SpiralConfig { center: [-101.5, 30.0], ..fixed_config() }, "is too far outside"),
        (
            SpiralConfig { center: [200.0, 30.0], max_radius: 50.0, ..fixed_config() },
            "beyond the max radius 50",
        ),
    ];
    let device = Device::simulator();
    for (config, message) in cases {
        for result in
            [config.validate(), spiral_reference(&config).map(drop), spiral(&device, &config).map(drop)]
        {
            let text = result.unwrap_err().to_string();
            assert!(
                text.starts_with("invalid input: ") && text.contains(message),
                "{text:?} lacks {message:?}"
            );
        }
    }
    // The edge of what is accepted: one image width outside, the disc just reaching the image.
    SpiralConfig { center: [-101.0, 30.0], max_radius: 101.0, ..fixed_config() }.validate().unwrap();
    // A buffer of the wrong size.
    let mut small = device.alloc::<u8>(10).unwrap();
    let err = launch_spiral(&device, &fixed_config(), &mut small).unwrap_err().to_string();
    assert_eq!(err, "invalid input: an image buffer of 10 bytes for 101 × 67 pixels");
}

#[test]
fn bad_json_is_a_clear_error() {
    let good = fixed_config().to_json();
    let cases = [
        (good.replace("\"multiplier\": 0", "\"multiplier\": 7"), "unknown curve multiplier 7"),
        (good.replace("\"symmetry\": 4", "\"symmetry\": 0"), "symmetry 0: it must be at least 1"),
        (good.replace("\"max_radius\": 45.0", "\"max_radius\": -1.0"), "max radius -1"),
        (good.replace("\"width\": 101", "\"width\": 0"), "the image is empty"),
        (good.replace("\"symmetry\": 4", "\"symmetry\": 4, \"symetry\": 4"), "unknown field `symetry`"),
        (good.replace("\"precision\": \"f64\"", "\"precision\": \"f16\""), "unknown variant `f16`"),
        (good.replace("\"curve\": 25.5,", ""), "missing field `curve`"),
        (good.replacen('{', r##"{"palette": ["#12345", "#000000"],"##, 1), "colour `#12345` is not #rrggbb"),
        (good[..good.len() / 2].to_string(), "not a spiral configuration: EOF"),
        ("{\"width\": \"wide\"}".to_string(), "invalid type: string \"wide\""),
    ];
    for (json, message) in cases {
        let text = SpiralConfig::from_json(&json).unwrap_err().to_string();
        assert!(text.starts_with("invalid input: ") && text.contains(message), "{text:?} lacks {message:?}");
    }
    let dir = scratch_dir("bad-json");
    let path = dir.join("broken.json");
    std::fs::write(&path, "{ not json").unwrap();
    let text = SpiralConfig::load(&path).unwrap_err().to_string();
    assert!(text.starts_with(&format!("{}: not a spiral configuration", path.display())), "{text}");
    let missing = dir.join("missing.json");
    let text = SpiralConfig::load(&missing).unwrap_err().to_string();
    assert!(text.starts_with(&missing.display().to_string()), "{text}");
}

#[test]
fn palettes_interpolate_between_their_colours() {
    let palette: Palette = "#000000,#ff8000, #FFFFFF".parse().unwrap();
    assert_eq!(palette.colors(), [[0, 0, 0], [255, 128, 0], [255, 255, 255]]);
    let table = palette.lookup_table();
    assert_eq!((table[0], table[255]), ([0, 0, 0], [255, 255, 255]));
    assert_eq!(table[64], [128, 64, 0]); // 64/255 of the way: about half of the first segment
    assert_eq!(spiral::colorize(&[0, 255, 64], &palette), [0, 0, 0, 255, 255, 255, 128, 64, 0]);
    for (text, message) in [("#000000", "2 to 256 colours, not 1"), ("#00000g,#ffffff", "colour `#00000g`")] {
        let err = text.parse::<Palette>().unwrap_err();
        assert!(err.contains(message), "{err}");
    }
    let json = serde_json::to_string(&palette).unwrap();
    assert_eq!(json, r##"["#000000","#ff8000","#ffffff"]"##);
}

#[test]
fn png_encoding_round_trips() {
    let config = fixed_config();
    let gray = spiral_reference(&config).unwrap();
    let png = image_io::encode_png(&gray, config.width, config.height, image_io::PixelFormat::Gray8).unwrap();
    let decoded = image::load_from_memory(&png).unwrap().into_luma8();
    assert_eq!((decoded.width(), decoded.height()), (101, 67));
    assert_eq!(decoded.into_raw(), gray);
    let err = image_io::encode_png(&gray, 100, 67, image_io::PixelFormat::Rgb8).unwrap_err().to_string();
    assert_eq!(err, "invalid input: 6767 bytes are not a 100 × 67 image of 3 byte(s) per pixel");
}

#[test]
fn timestamps_are_utc_names() {
    let at = |secs| spiral::timestamp(UNIX_EPOCH + Duration::from_secs(secs));
    assert_eq!(at(1_614_340_865), "2021-02-26-12-01-05");
    assert_eq!(at(951_868_799), "2000-02-29-23-59-59");
    assert_eq!(at(0), "1970-01-01-00-00-00");
}

/// A fresh directory under the target directory for one test's files.
fn scratch_dir(test: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("spiral-{test}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// The `spiral` command (the GPU bundle's runner points KERNEL_SUITE_BIN_DIR at its copy).
fn spiral_command(dir: &Path) -> Command {
    let mut command = Command::new(common::bin("spiral", env!("CARGO_BIN_EXE_spiral")));
    command.current_dir(dir);
    command
}

#[test]
fn the_command_saves_an_image_whose_configuration_remakes_it() {
    let dir = scratch_dir("command");
    let args = ["--width", "160", "--height", "90", "--center-x", "-20.5", "--symmetry", "3"];
    let more =
        ["--curve", "-12.25", "--multiplier", "2", "--max-radius", "150", "--device", "cpu", "-o", "a.png"];
    let out = spiral_command(&dir).args(args).args(more).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "stdout: {stdout}\nstderr: {}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("Image Configuration: ") && stdout.contains("curve:      -12.25"), "{stdout}");
    assert!(stdout.contains("PNG encode") && stdout.contains("total since the program started"), "{stdout}");
    let config = SpiralConfig::load(&dir.join("a.json")).unwrap();
    assert_eq!(
        (config.width, config.height, config.center, config.multiplier),
        (160, 90, [-20.5, 45.0], Multiplier::Cos)
    );
    let png = image::open(dir.join("a.png")).unwrap().into_luma8().into_raw();
    assert_eq!(png, spiral_reference(&config).unwrap());

    let out =
        spiral_command(&dir).args(["--config", "a.json", "--device", "cpu", "-o", "b.png"]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(std::fs::read(dir.join("b.png")).unwrap(), std::fs::read(dir.join("a.png")).unwrap());
    assert_eq!(std::fs::read(dir.join("b.json")).unwrap(), std::fs::read(dir.join("a.json")).unwrap());

    // --new with a seed is reproducible; without --output the files are named by the time.
    let new = ["--new", "--seed", "5", "--width", "120", "--height", "80", "--palette", "#000000,#00ff00"];
    for _ in 0..2 {
        let out = spiral_command(&dir).args(new).args(["--device", "cpu"]).output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    }
    let mut jsons: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            p.extension().is_some_and(|e| e == "json") && !p.ends_with("a.json") && !p.ends_with("b.json")
        })
        .collect();
    jsons.sort();
    assert_eq!(jsons.len(), 2, "{jsons:?}");
    for json in &jsons {
        // YYYY-MM-DD-HH-MM-SS, with -2 appended when the first name was taken.
        let name = json.file_stem().unwrap().to_str().unwrap();
        let stamp: Vec<&str> = name.split('-').collect();
        let widths: Vec<usize> = stamp.iter().map(|part| part.len()).collect();
        assert!(widths.starts_with(&[4, 2, 2, 2, 2, 2]) && widths.len() <= 7, "{name}");
        assert!(stamp.iter().all(|part| part.chars().all(|c| c.is_ascii_digit())), "{name}");
    }
    let (first, second) = (SpiralConfig::load(&jsons[0]).unwrap(), SpiralConfig::load(&jsons[1]).unwrap());
    assert_eq!(first, second);
    assert!(first.palette.is_some());
    let rgb = image::open(jsons[0].with_extension("png")).unwrap();
    assert_eq!(rgb.color(), image::ColorType::Rgb8);
}

#[test]
fn the_command_rejects_bad_input_with_one_line() {
    let dir = scratch_dir("command-errors");
    std::fs::write(dir.join("bad.json"), "[1, 2").unwrap();
    let flags = ["--width", "64", "--curve", "3", "--device", "cpu"];
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (vec!["--symmetry", "0", "--multiplier", "0", "--max-radius", "20"], "symmetry 0"),
        (vec!["--symmetry", "2", "--multiplier", "0", "--max-radius", "-20"], "max radius -20"),
        (vec!["--symmetry", "2", "--multiplier", "0", "--max-radius", "0"], "max radius 0"),
        (vec!["--symmetry", "2", "--multiplier", "7", "--max-radius", "20"], "unknown curve multiplier 7"),
        (
            vec!["--symmetry", "2", "--multiplier", "1", "--max-radius", "20", "--height", "0"],
            "the image is empty",
        ),
        (
            vec!["--symmetry", "2", "--multiplier", "1", "--max-radius", "20", "--center-x", "5000"],
            "too far outside",
        ),
        (vec!["--symmetry", "2", "--multiplier", "1"], "missing: --max-radius"),
        (vec!["--config", "bad.json"], "bad.json: not a spiral configuration"),
        (vec!["--config", "absent.json"], "absent.json"),
    ];
    for (args, message) in cases {
        let mut command = spiral_command(&dir);
        if args[0] == "--config" {
            command.args(&args).args(["--device", "cpu"]);
        } else {
            command.args(flags).args(&args);
        }
        let out = command.output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?} succeeded");
        // Our own errors take one line; clap's argument errors add a hint to --help.
        assert!(stderr.starts_with("error: "), "{args:?}: {stderr}");
        assert!(stderr.lines().count() == 1 || stderr.contains("--help"), "{args:?}: {stderr}");
        assert!(stderr.contains(message), "{args:?}: {stderr:?} lacks {message:?}");
    }
    let written: Vec<_> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(written, ["bad.json"], "a failed run left files behind");
}
