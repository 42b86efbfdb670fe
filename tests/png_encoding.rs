//! PNG encoding ([`image_io::encode_png`]): every image decodes to its exact pixels, on the
//! one-thread path (small images, pools of one thread) and the parallel one (row stripes on the
//! current rayon pool), with valid chunk CRCs and zlib Adler-32; files striped are about as large
//! as on one thread.

use kernel_suite::image_io::{self, PixelFormat, Scaling};
use kernel_suite::job::outputs;
use kernel_suite::svd;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use std::borrow::Cow;

/// Bytes per pixel of `format`.
fn channels(format: PixelFormat) -> usize {
    match format {
        PixelFormat::Gray8 => 1,
        PixelFormat::Rgb8 => 3,
    }
}

/// Uniformly random bytes: incompressible, so the encoder stores them.
fn random(width: usize, height: usize, format: PixelFormat, seed: u64) -> Vec<u8> {
    let mut rng = SmallRng::seed_from_u64(seed);
    (0..width * height * channels(format)).map(|_| rng.random()).collect()
}

/// Flat areas, gradients, a disc and noisy bands: long zero runs after the `Up` filter, small
/// differences, sharp edges and some noise.
fn structured(width: usize, height: usize, format: PixelFormat, seed: u64) -> Vec<u8> {
    let mut rng = SmallRng::seed_from_u64(seed);
    let c = channels(format);
    let mut pixels = Vec::with_capacity(width * height * c);
    for y in 0..height {
        for x in 0..width {
            for channel in 0..c {
                let (dx, dy) = (x as f64 - width as f64 / 2.0, y as f64 - height as f64 / 3.0);
                let value = if dx * dx + dy * dy < (width.min(height) as f64 / 4.0).powi(2) {
                    200 - channel as u8 * 40
                } else if y % 97 < 10 {
                    rng.random_range(100..140)
                } else if x < width / 3 {
                    255
                } else {
                    ((x * 7 + y * 3 + channel * 50) / 5 % 256) as u8
                };
                pixels.push(value);
            }
        }
    }
    pixels
}

/// A labelled mosaic of seven 512² phantoms, as the default `svd` run writes (2088 × 1096), read
/// back.
fn mosaic() -> (Vec<u8>, usize, usize) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("mosaic.png");
    let tile = image_io::to_gray8(svd::shepp_logan(512).view(), Scaling::Clamp);
    let tiles: Vec<_> = (0..7).map(|k| (Cow::Borrowed(tile.as_slice()), format!("k = {k}"))).collect();
    outputs::write_mosaic(&path, (512, 512), &tiles).unwrap();
    let image = image::open(&path).unwrap().into_luma8();
    let (width, height) = image.dimensions();
    (image.into_raw(), width as usize, height as usize)
}

/// The concatenated `IDAT` data of `png`, after checking its signature, chunk order and every
/// chunk's CRC.
fn zlib_stream(png: &[u8]) -> Vec<u8> {
    assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");
    let (mut at, mut kinds, mut zlib) = (8, Vec::new(), Vec::new());
    while at < png.len() {
        let len = u32::from_be_bytes(png[at..at + 4].try_into().unwrap()) as usize;
        let (kind, data) = (&png[at + 4..at + 8], &png[at + 8..at + 8 + len]);
        let crc = u32::from_be_bytes(png[at + 8 + len..at + 12 + len].try_into().unwrap());
        assert_eq!(crc, crc32fast::hash(&png[at + 4..at + 8 + len]), "CRC of a {kind:?} chunk");
        if kind == b"IDAT" {
            zlib.extend_from_slice(data);
        }
        kinds.push(kind.to_vec());
        at += 12 + len;
    }
    assert_eq!(at, png.len());
    assert_eq!(kinds.first().map(Vec::as_slice), Some(&b"IHDR"[..]));
    assert_eq!(kinds.last().map(Vec::as_slice), Some(&b"IEND"[..]));
    zlib
}

/// Encodes on the current pool and checks the file: it decodes (`image`) to exactly `pixels`,
/// and its zlib stream inflates (`fdeflate`, which checks the Adler-32) to one filter byte and
/// the row's bytes per row. Returns the file's size.
fn round_trip(pixels: &[u8], width: usize, height: usize, format: PixelFormat) -> usize {
    let png = image_io::encode_png(pixels, width as u32, height as u32, format).unwrap();
    let what = format!("{width} × {height} {format:?} on {} thread(s)", rayon::current_num_threads());
    let filtered =
        fdeflate::decompress_to_vec(&zlib_stream(&png)).unwrap_or_else(|e| panic!("{what}: {e:?}"));
    assert_eq!(filtered.len(), height * (1 + width * channels(format)), "{what}");
    let decoded = image::load_from_memory_with_format(&png, image::ImageFormat::Png).unwrap();
    assert_eq!((decoded.width() as usize, decoded.height() as usize), (width, height), "{what}");
    let decoded = match format {
        PixelFormat::Gray8 => decoded.into_luma8().into_raw(),
        PixelFormat::Rgb8 => decoded.into_rgb8().into_raw(),
    };
    assert!(decoded == pixels, "{what}: the pixels differ");
    png.len()
}

/// Odd sizes below and above the parallel threshold, gray and RGB, random and structured, each on
/// pools of 1, 2, 5 and 16 threads (1 to 64 stripes); the striped files at most 3% (and 4 KiB)
/// larger than one thread's, random ones hardly larger than their filtered rows.
#[test]
fn decodes_to_the_same_pixels() {
    let mut images = vec![];
    for (width, height) in [(1, 1), (3, 7), (640, 480), (1531, 1297), (2500, 1700)] {
        for format in [PixelFormat::Gray8, PixelFormat::Rgb8] {
            let seed = (width * height) as u64;
            images.push((random(width, height, format, seed), width, height, format, true));
            images.push((structured(width, height, format, seed), width, height, format, false));
        }
    }
    let (pixels, width, height) = mosaic();
    images.push((pixels, width, height, PixelFormat::Gray8, false));

    for (pixels, width, height, format, random) in &images {
        let mut sizes = vec![];
        for threads in [1, 2, 5, 16] {
            let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().unwrap();
            sizes.push(pool.install(|| round_trip(pixels, *width, *height, *format)));
        }
        let what = format!("{width} × {height} {format:?}: {sizes:?} bytes");
        for &size in &sizes[1..] {
            assert!(size <= sizes[0] + sizes[0] / 33 + 4096, "{what}");
        }
        if *random {
            // Stored, not expanded by fdeflate's codes.
            let filtered = height * (1 + width * channels(*format));
            assert!(sizes.iter().all(|&size| size <= filtered + filtered / 1000 + 1024), "{what}");
        }
    }
}

/// Many large images encoded at once from within a pool of 2 threads (as the `svd` job's
/// encoders do): the stripes join the same pool, and every encoding finishes.
#[test]
fn nested_in_a_busy_pool() {
    use rayon::prelude::*;
    let pool = rayon::ThreadPoolBuilder::new().num_threads(2).build().unwrap();
    let sizes: Vec<usize> = pool.install(|| {
        (0..8u64)
            .into_par_iter()
            .map(|seed| {
                round_trip(&structured(1200, 900, PixelFormat::Gray8, seed), 1200, 900, PixelFormat::Gray8)
            })
            .collect()
    });
    assert_eq!(sizes.len(), 8);
}
