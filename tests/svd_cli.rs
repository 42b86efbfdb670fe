//! The `svd` command: outputs per image and rank, reports, sharding, one-line errors, and images
//! that fail without stopping the job (exit status 3).

mod common;

use kernel_suite::npy;
use std::path::{Path, PathBuf};

fn run_svd(dir: &Path, args: &[&str]) -> (bool, String, String) {
    let (status, stdout, stderr) = svd_status(dir, args);
    (status == 0, stdout, stderr)
}

/// Runs `svd` in `dir`: its exit status, stdout and stderr.
fn svd_status(dir: &Path, args: &[&str]) -> (i32, String, String) {
    let out = std::process::Command::new(common::bin("svd", env!("CARGO_BIN_EXE_svd")))
        .current_dir(dir)
        .args(args)
        .output()
        .unwrap();
    let code = out.status.code().expect("an exit status, not a signal");
    (code, String::from_utf8(out.stdout).unwrap(), String::from_utf8(out.stderr).unwrap())
}

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("kernel-suite-svd-cli-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// The test folder's images: name, width, height.
const IMAGES: [(&str, usize, usize); 3] = [("a", 40, 30), ("b", 25, 50), ("c", 33, 33)];

/// `dir/images` with three 8-bit PNGs of different sizes (smooth patterns plus noise).
fn image_folder(dir: &Path) -> PathBuf {
    let folder = dir.join("images");
    gray_pngs(&folder, &IMAGES, 40);
    folder
}

/// The CSV's rows after the header, split into fields (by the `csv` crate: error messages may
/// hold commas).
fn csv_rows(path: &Path) -> Vec<Vec<String>> {
    let mut reader = csv::Reader::from_path(path).unwrap();
    assert_eq!(
        reader.headers().unwrap().iter().collect::<Vec<_>>(),
        [
            "name",
            "rows",
            "cols",
            "k",
            "relative_error",
            "eckart_young_bound",
            "sigma_1",
            "frobenius_norm",
            "check_error",
            "status",
            "error"
        ]
    );
    reader.records().map(|r| r.unwrap().iter().map(String::from).collect()).collect()
}

#[test]
fn default_phantom_reports_errors_matching_the_bound_and_writes_outputs() {
    let dir = scratch("phantom");
    let (ok, stdout, stderr) =
        run_svd(&dir, &["--size", "37", "--ranks", "7,3,7", "--device", "sim", "--json", "report.json"]);
    assert!(ok, "stdout: {stdout}\nstderr: {stderr}");
    for file in ["shepp-logan-mosaic.png", "shepp-logan-k3.png", "shepp-logan-k7.png", "report.csv"] {
        assert!(dir.join("svd-out").join(file).is_file(), "{file} missing");
    }
    assert!(
        stdout.contains("E-Y bound") && stdout.contains("mosaic: svd-out/shepp-logan-mosaic.png"),
        "{stdout}"
    );
    assert!(stdout.contains("job: 1 images (1369 pixels) in "), "{stdout}");
    assert!(stdout.contains("stages, summed over images (ms): decode "), "{stdout}");
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("report.json")).unwrap()).unwrap();
    for key in ["job_ms", "startup_ms", "wall_ms"] {
        assert!(report[key].as_f64().is_some(), "{key} missing");
    }
    for stage in ["decode_ms", "h2d_ms", "svd_ms", "reconstruct_ms", "d2h_ms", "encode_ms"] {
        assert!(report["stages"][stage].as_f64().is_some(), "stages.{stage} missing");
    }
    let image = &report["results"][0];
    assert_eq!((image["rows"].as_u64(), image["cols"].as_u64()), (Some(37), Some(37)));
    assert!(image["times"]["encode_ms"].as_f64().unwrap() > 0.0);
    let ranks = image["ranks"].as_array().unwrap();
    assert_eq!(ranks.iter().map(|r| r["k"].as_u64().unwrap()).collect::<Vec<_>>(), [3, 7]);
    for r in ranks {
        let (err, bound) = (r["relative_error"].as_f64().unwrap(), r["eckart_young_bound"].as_f64().unwrap());
        assert!(bound > 0.01 && (err - bound).abs() <= 1e-4 * bound, "k = {}: {err} vs {bound}", r["k"]);
    }
}

#[test]
fn a_folder_gives_every_png_the_csv_and_npy_files_matching_the_pngs() {
    let dir = scratch("folder");
    image_folder(&dir);
    let (ok, stdout, stderr) = run_svd(
        &dir,
        &["images", "--ranks", "5,2", "--npy", "--check", "--device", "cpu", "--out-dir", "out"],
    );
    assert!(ok, "stdout: {stdout}\nstderr: {stderr}");
    assert!(stdout.contains("job: 3 images (3539 pixels) in "), "{stdout}");
    assert!(stdout.contains("check: largest relative difference"), "{stdout}");
    let out = dir.join("out");
    for (name, w, h) in IMAGES {
        for k in [2, 5] {
            let png = image::open(out.join(format!("{name}-k{k}.png"))).unwrap().into_luma8();
            assert_eq!(png.dimensions(), (w as u32, h as u32), "{name} k={k}");
            let values = npy::read::<f32, ndarray::Ix2>(&out.join(format!("{name}-k{k}.npy"))).unwrap();
            assert_eq!(values.dim(), (h, w));
            for (&v, &p) in values.iter().zip(png.as_raw()) {
                assert!(
                    (v.clamp(0.0, 1.0) - p as f32 / 255.0).abs() <= 1.0 / 255.0,
                    "{name} k={k}: {v} vs {p}"
                );
            }
        }
        let s = npy::read::<f64, ndarray::Ix1>(&out.join(format!("{name}-s.npy"))).unwrap().to_vec();
        assert_eq!(s.len(), 5);
        assert!(s.windows(2).all(|w| w[0] >= w[1]) && s[4] > 0.0, "{name}: {s:?}");
        assert!(!out.join(format!("{name}-mosaic.png")).exists(), "a mosaic only with --mosaic");
    }
    let rows = csv_rows(&out.join("report.csv"));
    assert_eq!(rows.len(), 6);
    for (row, ((name, w, h), k)) in rows.iter().zip(IMAGES.iter().flat_map(|&i| [(i, 2), (i, 5)])) {
        assert_eq!(row[..4], [name.to_string(), h.to_string(), w.to_string(), k.to_string()]);
        let (err, bound): (f64, f64) = (row[4].parse().unwrap(), row[5].parse().unwrap());
        assert!(err > 0.0 && (err - bound).abs() <= 1e-4 * bound, "{row:?}");
        let s = npy::read::<f64, ndarray::Ix1>(&out.join(format!("{name}-s.npy"))).unwrap();
        assert_eq!(row[6].parse::<f64>().unwrap(), s[0], "sigma_1");
        let check: f64 = row[8].parse().unwrap();
        assert!((0.0..1e-6).contains(&check), "{row:?}");
    }
}

#[test]
fn mosaics_on_request_and_no_pngs_with_no_images() {
    let dir = scratch("flags");
    image_folder(&dir);
    let (ok, stdout, stderr) = run_svd(&dir, &["images", "--ranks", "3", "--mosaic", "--device", "cpu"]);
    assert!(ok, "stdout: {stdout}\nstderr: {stderr}");
    // Each mosaic: the original and the rank-3 PNG's pixels side by side on white, 8 px apart,
    // below 24-pixel label strips with dark text in them.
    for (name, w, h) in IMAGES {
        let mosaic = image::open(dir.join(format!("svd-out/{name}-mosaic.png"))).unwrap().into_luma8();
        let rank = image::open(dir.join(format!("svd-out/{name}-k3.png"))).unwrap().into_luma8();
        let original = image::open(dir.join(format!("images/{name}.png"))).unwrap().into_luma8();
        assert_eq!(mosaic.dimensions(), (2 * (w as u32 + 8) + 8, h as u32 + 24 + 16), "{name}");
        for (x0, tile) in [(8, &original), (8 + w as u32 + 8, &rank)] {
            for (x, y, pixel) in tile.enumerate_pixels() {
                assert_eq!(
                    mosaic.get_pixel(x0 + x, 8 + 24 + y),
                    pixel,
                    "{name}: tile at {x0}, pixel ({x}, {y})"
                );
            }
            let strip = (x0..x0 + 40).flat_map(|x| (8..8 + 24).map(move |y| (x, y)));
            assert!(strip.clone().any(|(x, y)| mosaic.get_pixel(x, y)[0] < 128), "{name}: no label at {x0}");
        }
        assert_eq!(mosaic.get_pixel(0, 0)[0], 255, "{name}: white background");
    }
    let (ok, stdout, stderr) =
        run_svd(&dir, &["images", "--ranks", "3", "--no-images", "--device", "cpu", "--out-dir", "bare"]);
    assert!(ok, "stdout: {stdout}\nstderr: {stderr}");
    let mut written: Vec<_> =
        std::fs::read_dir(dir.join("bare")).unwrap().map(|e| e.unwrap().file_name()).collect();
    written.sort();
    assert_eq!(written, ["report.csv", "report.options.json"]);
}

#[test]
fn a_shard_takes_every_nth_image() {
    let dir = scratch("shard");
    image_folder(&dir);
    let (ok, stdout, stderr) =
        run_svd(&dir, &["images", "--ranks", "2", "--shard", "1/2", "--device", "cpu"]);
    assert!(ok, "stdout: {stdout}\nstderr: {stderr}");
    assert!(dir.join("svd-out/b-k2.png").is_file());
    assert!(!dir.join("svd-out/a-k2.png").exists() && !dir.join("svd-out/c-k2.png").exists());
    let rows = csv_rows(&dir.join("svd-out/report-1-of-2.csv"));
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0][..4], ["b", "50", "25", "2"]);
    let (ok, _, stderr) = run_svd(&dir, &["images", "--ranks", "2", "--shard", "0/2", "--device", "cpu"]);
    assert!(ok, "{stderr}");
    let names: Vec<String> =
        csv_rows(&dir.join("svd-out/report-0-of-2.csv")).into_iter().map(|r| r[0].clone()).collect();
    assert_eq!(names, ["a", "c"]);
}

#[test]
fn bad_input_exits_with_one_error_line() {
    let dir = scratch("bad");
    let folder = image_folder(&dir);
    std::fs::create_dir_all(dir.join("empty")).unwrap();
    std::fs::create_dir_all(dir.join("twice")).unwrap();
    std::fs::copy(folder.join("a.png"), dir.join("twice/a.png")).unwrap();
    for (args, expected) in [
        (vec!["--size", "16", "--ranks", "0"], "--ranks: rank 0 is not allowed"),
        (vec!["--size", "16", "--ranks", "17"], "shepp-logan (16×16): rank k = 17 is outside 1..=16"),
        (vec!["images", "--shard", "2/2"], "--shard \"2/2\": expected I/N with 0 ≤ I < N"),
        (vec!["images", "--shard", "x"], "--shard \"x\": expected I/N"),
        (vec!["images", "--shard", "1/0"], "--shard \"1/0\": expected I/N"),
        (vec!["images", "--gpus", "0,1"], "--gpus needs --device gpu or auto"),
        (vec!["images", "--batch-images", "0"], "--batch-images must be at least 1"),
        (vec!["missing.png"], "missing.png: no such file or directory"),
        (vec!["empty"], "empty: no PNG or JPEG files in this directory"),
        (vec!["images", "twice"], "have the same name"),
    ] {
        let args: Vec<&str> = args.into_iter().chain(["--device", "cpu"]).collect();
        let (ok, _, stderr) = run_svd(&dir, &args);
        assert!(!ok, "{args:?} succeeded");
        let lines: Vec<&str> = stderr.lines().collect();
        assert_eq!(lines.len(), 1, "{args:?}: {stderr}");
        assert!(lines[0].starts_with("error: ") && lines[0].contains(expected), "{args:?}: {stderr}");
    }
}

/// `dir/mixed`: the test folder's images, then `text.png` (not an image) and `trunc.png` (the first
/// half of a PNG's bytes), in name order.
fn mixed_folder(dir: &Path) -> PathBuf {
    let folder = image_folder(dir);
    let mixed = dir.join("mixed");
    std::fs::create_dir_all(&mixed).unwrap();
    for (name, _, _) in IMAGES {
        std::fs::copy(folder.join(format!("{name}.png")), mixed.join(format!("{name}.png"))).unwrap();
    }
    std::fs::write(mixed.join("text.png"), b"not an image at all").unwrap();
    let png = std::fs::read(folder.join("a.png")).unwrap();
    std::fs::write(mixed.join("trunc.png"), &png[..png.len() / 2]).unwrap();
    mixed
}

/// Files an image left in `out` (its reconstructions, .npy files, mosaic), sorted.
fn outputs_of(out: &Path, name: &str) -> Vec<String> {
    let mut files: Vec<String> = std::fs::read_dir(out)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|f| f.strip_prefix(name).is_some_and(|rest| rest.starts_with('-')))
        .collect();
    files.sort();
    files
}

#[test]
fn bad_images_are_reported_and_every_other_image_done_with_exit_status_3() {
    let dir = scratch("mixed");
    mixed_folder(&dir);
    let (status, stdout, stderr) = svd_status(
        &dir,
        &["mixed", "--ranks", "5,2", "--device", "cpu", "--out-dir", "out", "--json", "out/report.json"],
    );
    assert_eq!(status, 3, "stdout: {stdout}\nstderr: {stderr}");
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines.len(), 3, "{stderr}");
    for bad in
        ["mixed/text.png: not a readable PNG/JPEG image", "mixed/trunc.png: not a readable PNG/JPEG image"]
    {
        assert_eq!(
            lines.iter().filter(|l| l.starts_with("error: ") && l.contains(bad)).count(),
            1,
            "{stderr}"
        );
    }
    assert!(
        lines[2].starts_with("error: 2 of 5 image(s) failed; the 3 done are in out/report.csv"),
        "{stderr}"
    );
    assert!(stdout.trim_end().ends_with("summary: 3 of 5 image(s) done, 2 failed"), "{stdout}");
    let out = dir.join("out");
    for (name, w, h) in IMAGES {
        assert_eq!(outputs_of(&out, name), [format!("{name}-k2.png"), format!("{name}-k5.png")]);
        for k in [2, 5] {
            let png = image::open(out.join(format!("{name}-k{k}.png"))).unwrap();
            assert_eq!((png.width(), png.height()), (w as u32, h as u32), "{name} k={k}");
        }
    }
    assert!(outputs_of(&out, "text").is_empty() && outputs_of(&out, "trunc").is_empty());
    let rows = csv_rows(&out.join("report.csv"));
    let names: Vec<&str> = rows.iter().map(|r| r[0].as_str()).collect();
    assert_eq!(names, ["a", "a", "b", "b", "c", "c", "text", "trunc"]);
    for row in &rows[..6] {
        assert_eq!(row[9..], ["ok", ""], "{row:?}");
        assert!(row[4].parse::<f64>().unwrap() > 0.0, "{row:?}");
    }
    for row in &rows[6..] {
        assert_eq!(row[1..10], ["", "", "", "", "", "", "", "", "failed"], "{row:?}");
        assert!(row[10].contains(&format!("mixed/{}.png: not a readable PNG/JPEG image", row[0])), "{row:?}");
    }
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("report.json")).unwrap()).unwrap();
    assert_eq!((report["images"].as_u64(), report["failed"].as_u64()), (Some(3), Some(2)));
    let results = report["results"].as_array().unwrap();
    let statuses: Vec<(&str, &str)> =
        results.iter().map(|r| (r["name"].as_str().unwrap(), r["status"].as_str().unwrap())).collect();
    assert_eq!(statuses, [("a", "ok"), ("b", "ok"), ("c", "ok"), ("text", "failed"), ("trunc", "failed")]);
    assert!(results[4]["error"].as_str().unwrap().contains("trunc.png: not a readable PNG/JPEG image"));
    assert_eq!(results[0]["ranks"].as_array().unwrap().len(), 2);

    // An image too small for the ranks fails the same way; so does a lone unreadable file.
    let (status, _, stderr) =
        svd_status(&dir, &["images", "--ranks", "28", "--device", "cpu", "--out-dir", "big"]);
    assert_eq!(status, 3, "{stderr}");
    assert!(stderr.lines().next().unwrap().contains("b (50×25): rank k = 28 is outside 1..=25"), "{stderr}");
    let names: Vec<String> =
        csv_rows(&dir.join("big/report.csv")).into_iter().map(|r| r[0].clone() + &r[9]).collect();
    assert_eq!(names, ["aok", "bfailed", "cok"]);
    std::fs::write(dir.join("zero.png"), b"").unwrap();
    let (status, stdout, stderr) = svd_status(&dir, &["zero.png", "--device", "cpu", "--out-dir", "zero"]);
    assert_eq!(status, 3, "{stderr}");
    assert!(stderr.starts_with("error: zero.png: not a readable PNG/JPEG image"), "{stderr}");
    assert!(stdout.contains("summary: 0 of 1 image(s) done, 1 failed"), "{stdout}");
}

/// With --fail-fast the job stops at the first failure: the images before it are done and
/// reported, none after it is started, and the exit status is 3.
#[test]
fn fail_fast_stops_at_the_first_failure_with_a_report_of_what_completed() {
    let dir = scratch("fail-fast");
    let folder = dir.join("images");
    std::fs::create_dir_all(&folder).unwrap();
    for i in 0..10 {
        let path = folder.join(format!("img{i}.png"));
        if i == 3 {
            std::fs::write(path, b"not an image").unwrap();
        } else {
            let pixels: Vec<u8> = common::random_vec(&mut common::rng(i), 24 * 20, 0.0, 255.0)
                .into_iter()
                .map(|v| v as u8)
                .collect();
            kernel_suite::image_io::save_gray8(&path, &pixels, 24, 20).unwrap();
        }
    }
    let (status, stdout, stderr) =
        svd_status(&dir, &["images", "--ranks", "3", "--device", "cpu", "--fail-fast", "--out-dir", "out"]);
    assert_eq!(status, 3, "stdout: {stdout}\nstderr: {stderr}");
    assert!(stderr.contains("img3.png: not a readable PNG/JPEG image"), "{stderr}");
    assert!(
        stderr.contains("1 of 10 image(s) failed; stopped at the first failure (--fail-fast)"),
        "{stderr}"
    );
    let rows: Vec<(String, String)> =
        csv_rows(&dir.join("out/report.csv")).into_iter().map(|r| (r[0].clone(), r[9].clone())).collect();
    let expected: Vec<(String, String)> =
        [("img0", "ok"), ("img1", "ok"), ("img2", "ok"), ("img3", "failed")]
            .map(|(n, s)| (n.to_string(), s.to_string()))
            .into();
    assert_eq!(rows, expected);
    for i in 0..10 {
        assert_eq!(dir.join(format!("out/img{i}-k3.png")).is_file(), i < 3, "img{i}");
    }
}

/// The CPU path on a folder of hundreds of small images with PNGs written, several times and with
/// 1, 2 and 8 rayon threads, each run under a time limit: the engine's workers block on the
/// bounded channel to the encoders, so an encoder that needed their pool would hang the job
/// (as it once did, in 2 of 3 such runs on a 2-core machine).
#[test]
fn the_cpu_path_never_hangs_on_a_large_folder() {
    use wait_timeout::ChildExt;
    let dir = scratch("many");
    let folder = dir.join("many");
    std::fs::create_dir_all(&folder).unwrap();
    let (w, h, count) = (48, 40, 300);
    for i in 0..count {
        let noise = common::random_vec(&mut common::rng(1000 + i as u64), w * h, 0.0, 255.0);
        let pixels: Vec<u8> = noise.iter().map(|v| *v as u8).collect();
        kernel_suite::image_io::save_gray8(&folder.join(format!("img{i:03}.png")), &pixels, w, h).unwrap();
    }
    for threads in ["1", "2", "8"] {
        for attempt in 0..3 {
            let out = dir.join(format!("out-{threads}-{attempt}"));
            let mut child = std::process::Command::new(common::bin("svd", env!("CARGO_BIN_EXE_svd")))
                .current_dir(&dir)
                .env("RAYON_NUM_THREADS", threads)
                .args(["many", "--ranks", "5,20", "--device", "cpu", "--out-dir"])
                .arg(&out)
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .spawn()
                .unwrap();
            let limit = std::time::Duration::from_secs(120);
            let Some(status) = child.wait_timeout(limit).unwrap() else {
                let _ = child.kill();
                let _ = child.wait();
                panic!("RAYON_NUM_THREADS={threads}, run {attempt}: the job did not finish in {limit:?}");
            };
            assert!(status.success(), "RAYON_NUM_THREADS={threads}, run {attempt}: {status}");
            assert_eq!(csv_rows(&out.join("report.csv")).len(), 2 * count, "threads {threads}");
            let pngs = std::fs::read_dir(&out)
                .unwrap()
                .filter(|e| e.as_ref().unwrap().path().extension().is_some_and(|x| x == "png"));
            assert_eq!(pngs.count(), 2 * count, "threads {threads}");
        }
    }
}

/// `dir/<name>` with `count` 8-bit PNGs of `w` × `h` noise, `img000.png` on.
fn noise_folder(dir: &Path, name: &str, count: usize, (w, h): (usize, usize)) -> PathBuf {
    let folder = dir.join(name);
    std::fs::create_dir_all(&folder).unwrap();
    for i in 0..count {
        let noise = common::random_vec(&mut common::rng(5000 + i as u64), w * h, 0.0, 255.0);
        let pixels: Vec<u8> = noise.iter().map(|v| *v as u8).collect();
        kernel_suite::image_io::save_gray8(&folder.join(format!("img{i:03}.png")), &pixels, w, h).unwrap();
    }
    folder
}

/// `svd` started in `dir` with `args`, its output discarded.
fn spawn_svd(dir: &Path, args: &[&str]) -> std::process::Child {
    std::process::Command::new(common::bin("svd", env!("CARGO_BIN_EXE_svd")))
        .current_dir(dir)
        .args(args)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap()
}

/// Waits until `report` lists at least `rows` rows (polling), or panics after 60 s.
fn wait_for_rows(report: &Path, rows: usize) {
    let start = std::time::Instant::now();
    while std::fs::read_to_string(report).map_or(0, |t| t.lines().count().saturating_sub(1)) < rows {
        assert!(start.elapsed().as_secs() < 60, "{} never reached {rows} rows", report.display());
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
}

/// The files of `dir` by name (hidden temporary files apart), each with its bytes.
fn files_of(dir: &Path) -> std::collections::BTreeMap<String, Vec<u8>> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|name| !name.starts_with('.'))
        .map(|name| (name.clone(), std::fs::read(dir.join(&name)).unwrap()))
        .collect()
}

/// The hidden temporary files left in `dir`.
fn temporaries(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|f| f.starts_with('.'))
        .collect()
}

/// A job killed (SIGKILL) partway leaves only whole files under final names and a report of
/// complete images; run again with --resume it does only the rest (an image whose output was
/// deleted meanwhile included), and ends with the files and report of a run never interrupted.
/// Other options make --resume start over.
#[test]
fn a_killed_job_resumed_ends_as_an_uninterrupted_run() {
    let dir = scratch("resume");
    let count = 400;
    noise_folder(&dir, "many", count, (64, 48));
    let args = |out: &'static str| ["many", "--ranks", "3,10", "--npy", "--device", "cpu", "--out-dir", out];
    let (ok, _, stderr) = run_svd(&dir, &args("whole"));
    assert!(ok, "{stderr}");
    let whole = files_of(&dir.join("whole"));
    assert_eq!(whole.len(), 5 * count + 2);

    let killed = dir.join("killed");
    let mut child = spawn_svd(&dir, &args("killed"));
    wait_for_rows(&killed.join("report.csv"), 10);
    child.kill().unwrap();
    child.wait().unwrap();
    let rows = csv_rows(&killed.join("report.csv"));
    let listed: std::collections::BTreeSet<String> = rows.iter().map(|r| r[0].clone()).collect();
    assert!(rows.len() >= 10 && listed.len() < count, "{} rows: the job was not stopped partway", rows.len());
    assert_eq!(rows.len(), 2 * listed.len(), "each image listed once, with both ranks");
    for (name, bytes) in files_of(&killed) {
        if name.ends_with(".png") {
            let png = image::load_from_memory(&bytes).unwrap_or_else(|e| panic!("{name}: {e}"));
            assert_eq!((png.width(), png.height()), (64, 48), "{name}");
        } else if name.ends_with(".npy") {
            assert_eq!(bytes.len(), whole[&name].len(), "{name}: not whole");
        }
    }
    for name in &listed {
        for file in [format!("{name}-k3.png"), format!("{name}-k10.npy"), format!("{name}-s.npy")] {
            assert!(killed.join(&file).is_file(), "{file} of a listed image");
        }
    }
    let gone = listed.iter().next().unwrap().clone();
    std::fs::remove_file(killed.join(format!("{gone}-k10.png"))).unwrap();

    let (ok, stdout, stderr) = run_svd(&dir, &[&args("killed")[..], &["--resume"]].concat());
    assert!(ok, "{stderr}");
    let resumed = listed.len() - 1;
    assert!(
        stdout.contains(&format!("{count} image(s), {resumed} done by an earlier run (--resume)")),
        "{stdout}"
    );
    assert!(
        stdout.contains(&format!(
            "summary: {count} of {count} image(s) done ({resumed} by an earlier run), 0 failed"
        )),
        "{stdout}"
    );
    assert_eq!(
        files_of(&killed),
        whole,
        "the resumed job's files and report differ from the uninterrupted run's"
    );
    let names: Vec<String> = csv_rows(&killed.join("report.csv")).into_iter().map(|r| r[0].clone()).collect();
    let expected: Vec<String> =
        (0..count).flat_map(|i| [format!("img{i:03}"), format!("img{i:03}")]).collect();
    assert_eq!(names, expected);

    // Resumed again, nothing is left to do; with other ranks, everything is done again.
    let (ok, stdout, _) = run_svd(&dir, &[&args("killed")[..], &["--resume"]].concat());
    assert!(ok && stdout.contains(&format!("done ({count} by an earlier run), 0 failed")), "{stdout}");
    assert_eq!(files_of(&killed), whole);
    let (ok, stdout, stderr) = run_svd(
        &dir,
        &["many", "--ranks", "3", "--npy", "--device", "cpu", "--out-dir", "killed", "--resume"],
    );
    assert!(ok, "{stderr}");
    assert!(
        stderr.contains("killed/report.csv has other options")
            && stderr.contains("every image is done again"),
        "{stderr}"
    );
    assert!(stdout.contains(&format!("summary: {count} of {count} image(s) done, 0 failed")), "{stdout}");
}

/// SIGINT and SIGTERM stop a job gracefully: the images under way are finished, no other is
/// started, and the command exits within 2 s with 130 or 143, its report listing exactly the
/// images whose outputs are all written (in index order), and no temporary file left.
#[test]
fn a_signal_stops_the_job_with_a_report_of_every_complete_image() {
    use wait_timeout::ChildExt;
    let dir = scratch("signal");
    let count = 400;
    noise_folder(&dir, "many", count, (64, 48));
    for (signal, status, name) in [(libc::SIGINT, 130, "SIGINT"), (libc::SIGTERM, 143, "SIGTERM")] {
        let out = dir.join(name);
        let mut child = spawn_svd(&dir, &["many", "--ranks", "3,10", "--device", "cpu", "--out-dir", name]);
        wait_for_rows(&out.join("report.csv"), 10);
        let sent = std::time::Instant::now();
        // SAFETY: kill(2) on our own child's pid.
        assert_eq!(unsafe { libc::kill(child.id() as libc::pid_t, signal) }, 0);
        let Some(exit) = child.wait_timeout(std::time::Duration::from_secs(2)).unwrap() else {
            let _ = child.kill();
            panic!("{name}: the job did not stop within 2 s");
        };
        let elapsed = sent.elapsed();
        let mut stderr = String::new();
        std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut stderr).unwrap();
        assert_eq!(exit.code(), Some(status), "{name} after {elapsed:?}: {stderr}");
        assert!(stderr.starts_with(&format!("stopped by {name}: ")), "{stderr}");
        assert!(stderr.contains("run again with --resume for the rest"), "{stderr}");
        let names: Vec<String> =
            csv_rows(&out.join("report.csv")).into_iter().map(|r| r[0].clone()).collect();
        let listed: Vec<String> = names.iter().step_by(2).cloned().collect();
        assert!(listed.len() < count, "{name}: the job had finished before the signal");
        let mut in_order = listed.clone();
        in_order.sort();
        assert_eq!(listed, in_order, "{name}: the report is in index order");
        assert_eq!(names, listed.iter().flat_map(|n| [n.clone(), n.clone()]).collect::<Vec<_>>());
        for i in 0..count {
            let image = format!("img{i:03}");
            let files = outputs_of(&out, &image);
            if listed.contains(&image) {
                assert_eq!(files, [format!("{image}-k10.png"), format!("{image}-k3.png")], "{name}");
            } else {
                assert!(files.is_empty(), "{name}: {image} has outputs {files:?} but no row");
            }
        }
        assert_eq!(temporaries(&out), Vec::<String>::new(), "{name}");
    }
}

/// The job's peak resident memory (its own `VmHWM`, printed at the end) does not grow with the
/// folder: ten times the images of 16 × 4096 pixels cost less than half of what holding the extra
/// images' pixels alone would. A peak is the largest of a fluctuating footprint, so it creeps up with
/// a longer run on many cores: six times 150 images grew it by 0–3 MiB on 2 cores and by 8.6–19.3 MiB
/// in five runs on 16 (against 47 MiB of extra pixels), 23 MiB for 2560 more images on 64. The
/// smaller folder has at least eight images per thread, so that both reach the pipeline's steady
/// state (the decoders run three images per thread ahead). A queue without bound grew by most of
/// the extra images' pixels (15 MiB for 270 more of 17 MiB).
#[test]
fn peak_memory_does_not_grow_with_the_folder() {
    let dir = scratch("memory");
    let peak = |count: usize| -> f64 {
        let folder = format!("wide{count}");
        noise_folder(&dir, &folder, count, (4096, 16));
        // Two malloc arenas: each thread that allocates would otherwise get its own, so the peak
        // grew with how many of a many-core machine's threads a folder kept busy (42 MiB for 30
        // images, 73 MiB for 300 on 16 cores), not with the folder.
        let out = std::process::Command::new(common::bin("svd", env!("CARGO_BIN_EXE_svd")))
            .current_dir(&dir)
            .env("MALLOC_ARENA_MAX", "2")
            .args([folder.as_str(), "--ranks", "2,8", "--device", "cpu", "--out-dir", &format!("out{count}")])
            .output()
            .unwrap();
        let (stdout, stderr) =
            (String::from_utf8(out.stdout).unwrap(), String::from_utf8(out.stderr).unwrap());
        assert!(out.status.success(), "{stderr}");
        assert!(stdout.contains(&format!("summary: {count} of {count} image(s) done")), "{stdout}");
        let line =
            stdout.lines().find(|l| l.starts_with("peak resident memory: ")).expect("a peak memory line");
        line.trim_start_matches("peak resident memory: ").trim_end_matches(" MiB").parse().unwrap()
    };
    // Both folders keep every thread busy; the larger is ten times the smaller.
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let count = 64.max(8 * threads);
    let (few, many) = (peak(count), peak(10 * count));
    let held = (9 * count * 4096 * 16) as f64 / f64::from(1 << 20);
    assert!(
        many - few < held / 2.0,
        "peak resident memory {many:.1} MiB for {} images, {few:.1} MiB for {count}: more than half of \
         the {held:.0} MiB the extra images' pixels take",
        10 * count
    );
}

/// An output that cannot be written stops the job with one line naming it (exit status 1); the
/// report lists only images whose outputs are all written. Here the file's place is taken by a
/// folder, which no rename replaces (a read-only folder would not stop a root user).
#[test]
fn an_output_that_cannot_be_written_stops_the_job_with_one_line() {
    let dir = scratch("unwritable");
    image_folder(&dir);
    std::fs::create_dir_all(dir.join("out/c-k2.png")).unwrap();
    let (status, _, stderr) =
        svd_status(&dir, &["images", "--ranks", "2", "--device", "cpu", "--out-dir", "out"]);
    assert_eq!(status, 1, "{stderr}");
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines.len(), 1, "{stderr}");
    assert!(lines[0].starts_with("error: out/c-k2.png: cannot write PNG: "), "{stderr}");
    for row in csv_rows(&dir.join("out/report.csv")) {
        assert!(row[0] != "c" && dir.join(format!("out/{}-k2.png", row[0])).is_file(), "{row:?}");
    }
    assert_eq!(temporaries(&dir.join("out")), Vec::<String>::new());
}

/// `report.csv`'s rows by image and rank.
fn report_rows(path: &Path) -> std::collections::BTreeMap<(String, String), Vec<String>> {
    csv_rows(path).into_iter().map(|row| ((row[0].clone(), row[3].clone()), row)).collect()
}

/// On several GPUs the job gives one GPU's results, every image once, and every GPU works even on
/// a folder of fewer batches than GPUs. Batched alike (`--batch-images 4`), the reports and PNGs
/// are identical; spread over the GPUs (a batch iterates until its slowest image converges), the
/// errors and singular values agree to 1e-9. Needs two GPUs: with fewer, a SKIPPED line.
#[test]
fn several_gpus_give_one_gpus_results() {
    use std::io::Write as _;
    let test = "several_gpus_give_one_gpus_results";
    // Straight to stderr, past the test harness's capture, like common::gpu_or_skip's.
    let count = match kernel_suite::device::gpu_count() {
        Ok(count) if count >= 2 => count,
        Ok(count) => return drop(writeln!(std::io::stderr(), "SKIPPED {test}: {count} GPU, two needed")),
        Err(e) if !common::gpu_required() => return drop(writeln!(std::io::stderr(), "SKIPPED {test}: {e}")),
        Err(e) => panic!("{test}: the GPU is required: {e}"),
    };
    let dir = scratch("gpus");
    noise_folder(&dir, "noise", 21, (37, 29));
    image_folder(&dir);
    // `svd` on one GPU (`--gpu 0`) or all, into `out`: its stderr (`--profile`: the timelines).
    let job = |gpus: &[&str], extra: &[&str], out: &str| -> String {
        let mut args =
            vec!["noise", "images", "--ranks", "3,10", "--device", "gpu", "--profile", "--out-dir", out];
        args.extend(gpus.iter().chain(extra));
        let (ok, stdout, stderr) = run_svd(&dir, &args);
        assert!(ok, "{stderr}");
        assert!(stdout.contains("summary: 24 of 24 image(s) done, 0 failed"), "{stdout}");
        stderr
    };
    let (one_gpu, all_gpus) = (["--gpu", "0"], ["--gpus", "all"]);
    assert!(job(&one_gpu, &[], "one").contains("GPU 0 timeline: "));
    let spread = job(&all_gpus, &[], "all");
    for gpu in 0..count {
        let line = spread
            .lines()
            .find(|l| l.starts_with(&format!("GPU {gpu} timeline: ")))
            .unwrap_or_else(|| panic!("no timeline of GPU {gpu}:\n{spread}"));
        assert!(!line.contains(": 0 batch(es)"), "GPU {gpu} got no batch:\n{spread}");
    }
    let one = report_rows(&dir.join("one/report.csv"));
    let all = report_rows(&dir.join("all/report.csv"));
    assert_eq!(one.len(), 48, "24 images × 2 ranks");
    assert_eq!(one.keys().collect::<Vec<_>>(), all.keys().collect::<Vec<_>>(), "every image and rank once");
    let close = |a: &str, b: &str| {
        let (a, b): (f64, f64) = (a.parse().unwrap(), b.parse().unwrap());
        (a - b).abs() <= 1e-9 * a.abs().max(b.abs()).max(1e-300)
    };
    for (key, row) in &one {
        // relative_error, eckart_young_bound, sigma_1, frobenius_norm
        assert!((4..8).all(|c| close(&row[c], &all[key][c])), "{key:?}: {row:?} against {:?}", all[key]);
    }
    job(&one_gpu, &["--batch-images", "4"], "one4");
    job(&all_gpus, &["--batch-images", "4"], "all4");
    assert_eq!(report_rows(&dir.join("one4/report.csv")), report_rows(&dir.join("all4/report.csv")));
    let pngs = |out: &str| {
        let mut files = files_of(&dir.join(out));
        files.retain(|name, _| name.ends_with(".png"));
        files
    };
    let one4 = pngs("one4");
    assert_eq!(one4.len(), 48);
    assert!(one4 == pngs("all4"), "the PNGs of one GPU and all differ");
}

/// `folder/<name>.png` for each `(name, width, height)`: 8-bit PNGs of noise over a smooth
/// pattern, image `i`'s noise seeded with `seed + i`.
fn gray_pngs(folder: &Path, images: &[(&str, usize, usize)], seed: u64) {
    std::fs::create_dir_all(folder).unwrap();
    for (i, &(name, w, h)) in images.iter().enumerate() {
        let noise = common::random_vec(&mut common::rng(seed + i as u64), w * h, 0.0, 0.2);
        let pixels: Vec<u8> = (0..w * h)
            .map(|p| {
                let (x, y) = ((p % w) as f32 / w as f32, (p / w) as f32 / h as f32);
                let v = 0.4 + 0.3 * (6.0 * x).sin() * (4.0 * y).cos() + noise[p];
                (v.clamp(0.0, 1.0) * 255.0).round() as u8
            })
            .collect();
        kernel_suite::image_io::save_gray8(&folder.join(format!("{name}.png")), &pixels, w, h).unwrap();
    }
}

/// Device bytes of a batch of `images` 8-bit images of `rows × cols` for `svd --ranks 2,5 --npy`
/// in the simulator.
fn footprint_2_5_npy(rows: usize, cols: usize, images: usize) -> u128 {
    use kernel_suite::job::footprint::Footprint;
    use kernel_suite::job::gpu_engine::BATCH_IMAGES;
    use kernel_suite::job::images::{JobImage, JobOptions, Keep, Pixels};
    let image = JobImage {
        index: 0,
        name: "x".into(),
        pixels: Pixels::Gray8 { rows, cols, data: vec![0; rows * cols] },
    };
    let options = JobOptions {
        ranks: vec![2, 5],
        check: false,
        variant: kernel_suite::svd::Variant::Regtiled,
        batch_images: BATCH_IMAGES,
        keep: Keep::Float,
    };
    let sim = kernel_suite::Device::simulator();
    Footprint::of(&sim, &image, &options).unwrap().bytes(images).unwrap()
}

/// Runs `svd` in `dir` with the simulator's memory set to `memory` bytes (unlimited for `None`):
/// its exit status, stdout and stderr.
fn svd_with_memory(dir: &Path, memory: Option<u128>, args: &[&str]) -> (i32, String, String) {
    let bytes = memory.map(|bytes| bytes.to_string());
    let env: Vec<(&str, &str)> = bytes.iter().map(|b| ("KERNEL_SUITE_SIM_MEMORY", b.as_str())).collect();
    svd_with_env(dir, &env, args)
}

/// With device memory for two of its eight images (`KERNEL_SUITE_SIM_MEMORY`, the simulator's
/// stand-in for a GPU other processes fill), the job runs four batches of two and finishes every
/// image `ok`, with the `.npy` results of one batch of eight in unlimited memory.
#[test]
fn the_job_fits_its_batches_to_the_free_memory() {
    let dir = scratch("memory-fit");
    let names: Vec<String> = (0..8).map(|i| format!("img{i}")).collect();
    let images: Vec<(&str, usize, usize)> = names.iter().map(|n| (n.as_str(), 20, 24)).collect();
    gray_pngs(&dir.join("images"), &images, 300);
    let args = |out| ["images", "--ranks", "2,5", "--npy", "--device", "sim", "--profile", "--out-dir", out];
    let (code, stdout, stderr) = svd_with_memory(&dir, None, &args("full"));
    assert_eq!(code, 0, "stdout: {stdout}\nstderr: {stderr}");
    assert!(stderr.contains("1 batch(es), 8 image(s)"), "{stderr}");
    let two = footprint_2_5_npy(24, 20, 2);
    let (code, stdout, stderr) = svd_with_memory(&dir, Some(two), &args("fit"));
    assert_eq!(code, 0, "stdout: {stdout}\nstderr: {stderr}");
    assert!(stderr.contains("4 batch(es), 8 image(s)"), "{stderr}");
    let notes: Vec<&str> = stderr.lines().filter(|l| l.starts_with("note: ")).collect();
    assert_eq!(
        notes,
        ["note: --profile needs a GPU; this run is not profiled"],
        "no batch ran out of memory"
    );
    let rows = csv_rows(&dir.join("fit/report.csv"));
    assert_eq!(rows.len(), 16);
    assert!(rows.iter().all(|r| r[9] == "ok"), "{rows:?}");
    for name in &names {
        for k in [2, 5] {
            let file = format!("{name}-k{k}.npy");
            let read = |out: &str| npy::read::<f32, ndarray::Ix2>(&dir.join(out).join(&file)).unwrap();
            let (full, fit) = (read("full"), read("fit"));
            let worst = full.iter().zip(&fit).map(|(a, b)| (a - b).abs()).fold(0.0f32, f32::max);
            assert!(full.dim() == (24, 20) && fit.dim() == (24, 20) && worst <= 1e-5, "{file}: {worst}");
        }
    }
}

/// An image that does not fit in the device's memory even alone fails as a bad image does: one
/// `error:` line naming the memory it needs and what is free, its row `failed` with that text, no
/// file of it under a final name, the other images done, exit status 3; `--resume` with the
/// memory to spare then does only that image.
#[test]
fn an_image_too_large_for_the_memory_fails_with_status_3_and_resume_finishes_it() {
    let dir = scratch("memory-too-large");
    gray_pngs(&dir.join("images"), &[("a", 10, 12), ("b", 20, 24), ("c", 10, 12)], 300);
    let (small, large) = (footprint_2_5_npy(12, 10, 1), footprint_2_5_npy(24, 20, 1));
    let budget = large * 2 / 3;
    assert!(small < budget);
    let args = ["images", "--ranks", "2,5", "--npy", "--device", "sim", "--out-dir", "out"];
    let (code, stdout, stderr) = svd_with_memory(&dir, Some(budget), &args);
    assert_eq!(code, 3, "stdout: {stdout}\nstderr: {stderr}");
    let kib = |bytes: u128| format!("{} KiB", bytes.div_ceil(1024));
    let error = format!(
        "b (24×20) needs about {} of GPU memory, {} free of {}; free memory on this GPU, or run the image on \
         another (--gpu N) or on the CPU (--device cpu; --device auto falls back to the CPU by itself)",
        kib(large),
        kib(budget),
        kib(budget)
    );
    let errors: Vec<&str> = stderr.lines().filter(|l| l.starts_with("error: ")).collect();
    assert_eq!(
        errors,
        [
            format!("error: {error}").as_str(),
            "error: 1 of 3 image(s) failed; the 2 done are in out/report.csv"
        ]
    );
    let rows = csv_rows(&dir.join("out/report.csv"));
    let status: Vec<(&str, &str)> = rows.iter().map(|r| (r[0].as_str(), r[9].as_str())).collect();
    assert_eq!(status, [("a", "ok"), ("a", "ok"), ("b", "failed"), ("c", "ok"), ("c", "ok")]);
    assert_eq!(rows[2][10], error);
    let mut written: Vec<String> = std::fs::read_dir(dir.join("out"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    written.sort();
    assert_eq!(
        written,
        [
            "a-k2.npy",
            "a-k2.png",
            "a-k5.npy",
            "a-k5.png",
            "a-s.npy",
            "c-k2.npy",
            "c-k2.png",
            "c-k5.npy",
            "c-k5.png",
            "c-s.npy",
            "report.csv",
            "report.options.json"
        ]
    );

    let resume: Vec<&str> = args.iter().copied().chain(["--resume"]).collect();
    let (code, stdout, stderr) = svd_with_memory(&dir, Some(large), &resume);
    assert_eq!(code, 0, "stdout: {stdout}\nstderr: {stderr}");
    assert!(
        stdout.contains("2 done by an earlier run (--resume)") && stdout.contains("job: 1 images"),
        "{stdout}"
    );
    let rows = csv_rows(&dir.join("out/report.csv"));
    assert_eq!(rows.len(), 6);
    assert!(rows.iter().all(|r| r[9] == "ok"), "{rows:?}");
    for file in ["b-k2.npy", "b-k5.png", "b-s.npy"] {
        assert!(dir.join("out").join(file).is_file(), "{file}");
    }
}

/// On several devices (two simulated ones, `--device sim --gpus 0,1`), a device that fails during
/// the job (`KERNEL_SUITE_FAIL_GPU=1:1`: device 1 at its first batch) gives its batch back and
/// the other does it: every image `ok` once in the report, with the results of an undisturbed run
/// batched alike, a note and an `error:` line naming the GPU, exit status 4. Alone, a device that
/// fails ends the job with one `error:` line and exit status 1.
#[test]
fn a_gpu_that_fails_hands_its_batch_to_the_others_and_the_exit_status_says_so() {
    let dir = scratch("gpu-fails");
    a_failing_gpu_hands_its_batch_over(&dir, "sim");
    let args = ["images", "--ranks", "2,5", "--device", "sim", "--out-dir", "alone"];
    let (code, stdout, stderr) = svd_with_env(&dir, &[("KERNEL_SUITE_FAIL_GPU", "0:1")], &args);
    assert_eq!(code, 1, "stdout: {stdout}\nstderr: {stderr}");
    let errors: Vec<&str> = stderr.lines().filter(|l| l.starts_with("error: ")).collect();
    assert_eq!(errors, [format!("error: {INJECTED}")], "{stderr}");
    let (code, _, stderr) = svd_with_env(&dir, &[("KERNEL_SUITE_FAIL_GPU", "1")], &args);
    assert_eq!(code, 1, "{stderr}");
    assert!(stderr.contains("KERNEL_SUITE_FAIL_GPU=\"1\": expected GPU:BATCH, e.g. 1:2"), "{stderr}");
}

/// [`a_gpu_that_fails_hands_its_batch_to_the_others_and_the_exit_status_says_so`] on two GPUs:
/// GPU 1 fails at its first batch, GPU 0 does every image. Needs two GPUs: with fewer, a SKIPPED
/// line.
#[test]
fn a_gpu_that_fails_hands_its_batch_to_the_other_gpu() {
    use std::io::Write as _;
    let test = "a_gpu_that_fails_hands_its_batch_to_the_other_gpu";
    match kernel_suite::device::gpu_count() {
        Ok(count) if count >= 2 => {}
        Ok(count) => return drop(writeln!(std::io::stderr(), "SKIPPED {test}: {count} GPU, two needed")),
        Err(e) if !common::gpu_required() => return drop(writeln!(std::io::stderr(), "SKIPPED {test}: {e}")),
        Err(e) => panic!("{test}: the GPU is required: {e}"),
    }
    a_failing_gpu_hands_its_batch_over(&scratch("gpu-fails-gpu"), "gpu");
}

/// The failure `KERNEL_SUITE_FAIL_GPU` injects, as reported.
const INJECTED: &str =
    "a kernel launch (injected by KERNEL_SUITE_FAIL_GPU) failed: CUDA error 719 (CUDA_ERROR_LAUNCH_FAILED)";

/// Sixteen images in batches of two on devices 0 and 1 of `device` (`sim` or `gpu`), device 1
/// failing at its first batch: exit status 4, every image `ok` once with the results of device 0
/// alone, one note and one `error:` line naming GPU 1, and device 0's timeline of every batch.
fn a_failing_gpu_hands_its_batch_over(dir: &Path, device: &str) {
    let names: Vec<String> = (0..16).map(|i| format!("img{i:02}")).collect();
    let images: Vec<(&str, usize, usize)> = names.iter().map(|n| (n.as_str(), 20, 24)).collect();
    gray_pngs(&dir.join("images"), &images, 500);
    let args = |out: &'static str, gpus: &'static str| {
        let common = ["images", "--ranks", "2,5", "--batch-images", "2", "--profile", "--device", device];
        let mut args: Vec<&str> = common.into_iter().chain(["--out-dir", out]).collect();
        args.extend(if gpus.is_empty() { ["--gpu", "0"] } else { ["--gpus", gpus] });
        args
    };
    let (code, stdout, stderr) = svd_with_env(dir, &[], &args("calm", ""));
    assert_eq!(code, 0, "stdout: {stdout}\nstderr: {stderr}");
    let (code, stdout, stderr) =
        svd_with_env(dir, &[("KERNEL_SUITE_FAIL_GPU", "1:1")], &args("failed", "0,1"));
    assert_eq!(code, 4, "stdout: {stdout}\nstderr: {stderr}");
    assert!(stdout.contains("summary: 16 of 16 image(s) done, 0 failed"), "{stdout}");
    let notes: Vec<&str> = stderr.lines().filter(|l| l.starts_with("note: GPU")).collect();
    assert_eq!(
        notes,
        [format!(
            "note: GPU 1 failed ({INJECTED}); its unfinished images went back to the queue, and the other GPUs \
             do them"
        )]
    );
    let errors: Vec<&str> = stderr.lines().filter(|l| l.starts_with("error: ")).collect();
    assert_eq!(
        errors,
        [format!("error: GPU 1 failed during the job ({INJECTED}); the other GPUs did its images")]
    );
    assert!(stderr.contains("GPU 0 timeline: 8 batch(es), 16 image(s)"), "{stderr}");
    assert!(!stderr.contains("GPU 1 timeline"), "{stderr}");
    let rows = csv_rows(&dir.join("failed/report.csv"));
    let keys: Vec<(&str, &str)> = rows.iter().map(|r| (r[0].as_str(), r[3].as_str())).collect();
    let expected: Vec<(&str, &str)> =
        names.iter().flat_map(|n| [(n.as_str(), "2"), (n.as_str(), "5")]).collect();
    assert_eq!(keys, expected, "every image and rank once, in order");
    assert!(rows.iter().all(|r| r[9] == "ok"), "{rows:?}");
    assert_eq!(report_rows(&dir.join("failed/report.csv")), report_rows(&dir.join("calm/report.csv")));
}

/// Runs `svd` in `dir` with `env` set: its exit status, stdout and stderr.
fn svd_with_env(dir: &Path, env: &[(&str, &str)], args: &[&str]) -> (i32, String, String) {
    let mut command = std::process::Command::new(common::bin("svd", env!("CARGO_BIN_EXE_svd")));
    command.current_dir(dir).args(args).envs(env.iter().copied());
    let out = command.output().unwrap();
    let code = out.status.code().expect("an exit status, not a signal");
    (code, String::from_utf8(out.stdout).unwrap(), String::from_utf8(out.stderr).unwrap())
}
