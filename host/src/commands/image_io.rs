//! Grayscale images as `ndarray` arrays: loading (PNG/JPEG, converted to luma in `[0, 1]`) and
//! saving as 8-bit PNG, encoded with fast settings ([`encode_png`]) and written whole or not at all
//! ([`write_atomically`]).
//!
//! Arrays are row-major `(rows, cols)` = `(height, width)`: element `[[y, x]]` is the pixel in row
//! `y` (from the top) and column `x`.

use crate::error::{Error, Result, ensure};
use image::ImageEncoder;
use image::codecs::png::{CompressionType, FilterType, PngEncoder};
use ndarray::{Array2, ArrayView2};
use rayon::prelude::*;
use std::io::{BufWriter, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

/// How values outside `[0, 1]` become bytes when saving.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scaling {
    /// Clamp to `[0, 1]`, then ×255.
    Clamp,
    /// Map the image's own `[min, max]` to `[0, 255]`.
    Rescale,
}

/// Opens and decodes a PNG/JPEG file (format guessed from its bytes); an empty image is refused.
/// Errors ([`Error::File`]) name the file.
pub fn decode(path: &Path) -> Result<image::DynamicImage> {
    let file_error = |message: String| Error::File { path: path.to_path_buf(), message };
    let image = image::ImageReader::open(path)
        .map_err(|e| file_error(e.to_string()))?
        .with_guessed_format()
        .map_err(|e| file_error(e.to_string()))?
        .decode()
        .map_err(|e| file_error(format!("not a readable PNG/JPEG image: {e}")))?;
    if image.width() == 0 || image.height() == 0 {
        return Err(file_error("the image is empty".into()));
    }
    Ok(image)
}

/// Loads an image file as grayscale in `[0, 1]`: each 8-bit luma value `v` as `v/255` in f64
/// (what SciPy gets from `np.asarray(img, float) / 255`).
pub fn load_grayscale_f64(path: &Path) -> Result<Array2<f64>> {
    let img = decode(path)?.into_luma8();
    let (w, h) = img.dimensions();
    let data = img.into_raw().into_iter().map(|v| v as f64 / 255.0).collect();
    Ok(Array2::from_shape_vec((h as usize, w as usize), data).expect("w·h pixels"))
}

/// [`load_grayscale_f64`] rounded to f32 (the same values as `v as f32 / 255.0`: `v/255` is never
/// near a tie between two f32s).
pub fn load_grayscale(path: &Path) -> Result<Array2<f32>> {
    Ok(load_grayscale_f64(path)?.mapv(|v| v as f32))
}

/// Converts to 8-bit gray with `scaling`.
pub fn to_gray8(image: ArrayView2<f32>, scaling: Scaling) -> Vec<u8> {
    let range = match scaling {
        Scaling::Clamp => (0.0, 1.0),
        Scaling::Rescale => {
            image.iter().fold((f32::INFINITY, f32::NEG_INFINITY), |(lo, hi), &v| (lo.min(v), hi.max(v)))
        }
    };
    to_gray8_in_range(image, range)
}

/// Converts to 8-bit gray mapping `[lo, hi]` to `[0, 255]` (values outside clamped; an empty range
/// maps `lo` to 0).
pub fn to_gray8_in_range(image: ArrayView2<f32>, (lo, hi): (f32, f32)) -> Vec<u8> {
    let hi = if hi > lo { hi } else { lo + 1.0 };
    image.iter().map(|&v| (((v - lo) / (hi - lo)).clamp(0.0, 1.0) * 255.0).round() as u8).collect()
}

/// Saves `image` (rows × cols) as an 8-bit grayscale PNG.
pub fn save_grayscale(path: &Path, image: ArrayView2<f32>, scaling: Scaling) -> Result<()> {
    let (h, w) = image.dim();
    save_gray8(path, &to_gray8(image, scaling), w, h)
}

/// Saves `image` as an 8-bit grayscale PNG with `[lo, hi]` mapped to `[0, 255]` (a range computed
/// elsewhere, e.g. on the device: `--scaling rescale`).
pub fn save_gray_in_range(path: &Path, image: ArrayView2<f32>, range: (f32, f32)) -> Result<()> {
    let (h, w) = image.dim();
    save_gray8(path, &to_gray8_in_range(image, range), w, h)
}

/// Saves row-major 8-bit gray pixels (`width × height`) as PNG (see [`encode_png`]), through
/// [`write_atomically`]: a file under `path`'s name is always a whole PNG.
pub fn save_gray8(path: &Path, pixels: &[u8], width: usize, height: usize) -> Result<()> {
    let png = encode_png(pixels, width as u32, height as u32, PixelFormat::Gray8)?;
    write_atomically(path, |file| file.write_all(&png))
        .map_err(|e| Error::File { path: path.to_path_buf(), message: format!("cannot write PNG: {e}") })
}

/// Writes a file whole or not at all: `write` fills a new file of a temporary name in `path`'s
/// folder (`.<file name>.<random>.tmp`, hidden), which is then renamed to `path` — one step on
/// the same file system, replacing any earlier file. A process killed at any moment therefore
/// leaves under `path` either the earlier file or the complete new one, never a partial file
/// that a reader (or a resumed job) would take for finished; at worst a temporary file remains.
/// The temporary file is removed if `write` or the rename fails. The new file gets the usual
/// permissions (`0o666` less the umask), as a file created in place would. Not synced to disk:
/// the guarantee is against the process stopping, not the machine losing power.
pub fn write_atomically<E: From<std::io::Error>>(
    path: &Path,
    write: impl FnOnce(&mut dyn Write) -> std::result::Result<(), E>,
) -> std::result::Result<(), E> {
    let dir = path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let name = path.file_name().map_or_else(|| "file".into(), |n| n.to_string_lossy().into_owned());
    let file = tempfile::Builder::new()
        .prefix(&format!(".{name}."))
        .suffix(".tmp")
        .permissions(std::fs::Permissions::from_mode(0o666))
        .tempfile_in(dir)?;
    let mut writer = BufWriter::new(file);
    write(&mut writer)?;
    let file = writer.into_inner().map_err(|e| e.into_error())?;
    file.persist(path).map_err(|e| e.error)?;
    Ok(())
}

/// Pixel layout of an image to encode.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PixelFormat {
    /// One byte per pixel, gray.
    Gray8,
    /// Three bytes per pixel, RGB.
    Rgb8,
}

/// Images of at least this many bytes (`width × height × bytes per pixel`: 512 Ki, a 724² gray
/// image) are encoded in row stripes in parallel ([`encode_striped`]); smaller ones on one thread,
/// where splitting would gain little (a 512² image takes about 0.3 ms) and the job already encodes
/// several of them at once.
const PARALLEL_MIN_BYTES: usize = 1 << 19;

/// Stripes per thread of the pool: more than one, so that threads that finish early (or join
/// late, busy with another image) take the stripes left.
const STRIPES_PER_THREAD: usize = 4;

/// Smallest stripe, bytes of pixels: each costs about 60 bytes of output (its block's code table
/// and the 4- or 5-byte marker that ends it), 0.5% of the 12 KB that 64 KiB of the default
/// `svd` run's mosaic compress to.
const MIN_STRIPE_BYTES: usize = 1 << 16;

/// Most bytes of compressed data in one `IDAT` chunk (the format allows 2³¹ − 1).
const IDAT_MAX: usize = 1 << 20;

/// Encodes row-major pixels as PNG with fast settings (`fdeflate`'s fastest compression, `Up`
/// filter): 9–30 ms for a 3840×2160 spiral on one thread, about 13 times faster than the `image`
/// crate's default compression, for files 2 to 4 times larger (0.7–2 MB); see
/// `docs/benchmarks/spiral.md`.
///
/// Images of 512 KiB or more (`PARALLEL_MIN_BYTES`) are compressed in row stripes on every
/// thread of the current rayon pool (the one this is called in, else the global one: nested in
/// the `svd` job's encoding pool it adds tasks to that pool, no threads), with the same
/// compression and filter (`encode_striped`): the default `svd` run's 2088 × 1096 mosaic in
/// 1.1 ms instead of 2.4 on 2 cores, its file 0.03% larger (8 stripes; 0.4% with 34 stripes on
/// 16 threads). A pool of one thread takes the one-thread path.
pub fn encode_png(pixels: &[u8], width: u32, height: u32, format: PixelFormat) -> Result<Vec<u8>> {
    let (color, channels) = match format {
        PixelFormat::Gray8 => (image::ExtendedColorType::L8, 1),
        PixelFormat::Rgb8 => (image::ExtendedColorType::Rgb8, 3),
    };
    ensure(pixels.len() == width as usize * height as usize * channels, || {
        format!("{} bytes are not a {width} × {height} image of {channels} byte(s) per pixel", pixels.len())
    })?;
    if pixels.len() >= PARALLEL_MIN_BYTES && rayon::current_num_threads() > 1 {
        return Ok(encode_striped(pixels, width, height, format));
    }
    let mut png = Vec::with_capacity(pixels.len() / 4);
    PngEncoder::new_with_quality(&mut png, CompressionType::Fast, FilterType::Up)
        .write_image(pixels, width, height, color)
        .map_err(|e| Error::InvalidInput(format!("PNG encoding failed: {e}")))?;
    Ok(png)
}

/// The zlib stream header: deflate, 32 KiB window, no preset dictionary, fastest level (what
/// `fdeflate` writes).
const ZLIB_HEADER: [u8; 2] = [0x78, 0x01];

/// A final, empty deflate block (fixed Huffman codes: the block header's 3 bits, then the 7-bit
/// end-of-block code, all but the first two bits zero).
const FINAL_EMPTY_BLOCK: [u8; 2] = [0x03, 0x00];

/// An empty stored block's length and its complement, after its 3-bit header (zlib's sync flush
/// marker): it ends a stripe's blocks on a byte boundary.
const EMPTY_STORED_BLOCK: [u8; 4] = [0x00, 0x00, 0xff, 0xff];

/// [`encode_png`] of a large image on the current rayon pool: one PNG whose zlib stream is the
/// concatenation of independently compressed row stripes. PNG filters work row by row (`Up`
/// needs only the row above, read from `pixels`), and `fdeflate`'s compression only codes runs
/// of zeros within its input, so stripes cost nothing in compression but each stripe's own
/// Huffman code table. Each stripe, as one task ([`compress_stripe`]), becomes non-final
/// deflate blocks that end on a byte boundary; then, in order, come the zlib header, the stripes,
/// an empty final block and the Adler-32 of the whole filtered data, combined from the stripes'
/// own ([`adler32_combine`]).
fn encode_striped(pixels: &[u8], width: u32, height: u32, format: PixelFormat) -> Vec<u8> {
    let row = pixels.len() / height as usize;
    let stripes =
        (rayon::current_num_threads() * STRIPES_PER_THREAD).min(pixels.len() / MIN_STRIPE_BYTES).max(1);
    let stripe_rows = (height as usize).div_ceil(stripes);
    let stripes: Vec<Stripe> = pixels
        .par_chunks(stripe_rows * row)
        .enumerate()
        .map(|(i, rows)| {
            let start = i * stripe_rows * row;
            compress_stripe((i > 0).then(|| &pixels[start - row..start]), rows, row)
        })
        .collect();
    let deflate_len: usize = stripes.iter().map(|s| s.deflate.len()).sum();
    let mut zlib = Vec::with_capacity(ZLIB_HEADER.len() + deflate_len + FINAL_EMPTY_BLOCK.len() + 4);
    zlib.extend_from_slice(&ZLIB_HEADER);
    let mut adler = 1; // of no data
    for stripe in &stripes {
        zlib.extend_from_slice(&stripe.deflate);
        adler = adler32_combine(adler, stripe.adler, stripe.filtered_len);
    }
    zlib.extend_from_slice(&FINAL_EMPTY_BLOCK);
    zlib.extend_from_slice(&adler.to_be_bytes());

    let color_type = match format {
        PixelFormat::Gray8 => 0,
        PixelFormat::Rgb8 => 2,
    };
    let mut header = [0u8; 13]; // bit depth 8, deflate, adaptive filtering, not interlaced
    header[..4].copy_from_slice(&width.to_be_bytes());
    header[4..8].copy_from_slice(&height.to_be_bytes());
    header[8] = 8;
    header[9] = color_type;
    let chunks = zlib.len().div_ceil(IDAT_MAX) + 2;
    let mut png = Vec::with_capacity(8 + header.len() + zlib.len() + 12 * chunks);
    png.extend_from_slice(b"\x89PNG\r\n\x1a\n");
    write_chunk(&mut png, b"IHDR", &header);
    for idat in zlib.chunks(IDAT_MAX) {
        write_chunk(&mut png, b"IDAT", idat);
    }
    write_chunk(&mut png, b"IEND", &[]);
    png
}

/// One stripe of rows, compressed ([`compress_stripe`]).
struct Stripe {
    /// Non-final deflate blocks ending on a byte boundary.
    deflate: Vec<u8>,
    /// Adler-32 of the stripe's filtered rows.
    adler: u32,
    /// Bytes of filtered rows (a filter type byte, then the row's bytes, per row).
    filtered_len: usize,
}

/// Filters `rows` (`row` bytes each; `above` is the image row before them, `None` for the first
/// row of the image, which is stored unfiltered) with `Up` and compresses them with `fdeflate`
/// into non-final blocks that end on a byte boundary, or into stored blocks where that would be
/// larger (incompressible data: `fdeflate`'s fixed codes can take up to 12 bits a byte; `png`
/// falls back the same way for a whole image).
///
/// `fdeflate` writes a zlib header, one final block, zero bits up to the next byte and the
/// Adler-32. The block is made non-final (its first bit), and an empty stored block is appended:
/// its 3-bit header takes the padding's bits if there are three, else a byte of its own, then
/// it is aligned, and its 4 length bytes end on a byte boundary. The padding is the last byte's
/// leading zero bits: `fdeflate`'s end-of-block code (fixed, as all its codes: the version is
/// pinned in `Cargo.toml`) ends with a 1 bit.
fn compress_stripe(above: Option<&[u8]>, rows: &[u8], row: usize) -> Stripe {
    const FILTER_NONE: u8 = 0;
    const FILTER_UP: u8 = 2;
    const VEC_WRITE: &str = "writing to a Vec cannot fail";
    let mut filtered = Vec::with_capacity(rows.len() + rows.len() / row);
    let mut prev = above;
    for pixels in rows.chunks_exact(row) {
        match prev {
            Some(prev) => {
                filtered.push(FILTER_UP);
                filtered.extend(pixels.iter().zip(prev).map(|(&x, &up)| x.wrapping_sub(up)));
            }
            None => {
                filtered.push(FILTER_NONE);
                filtered.extend_from_slice(pixels);
            }
        }
        prev = Some(pixels);
    }
    let mut compressor = fdeflate::Compressor::new(Vec::with_capacity(filtered.len() / 4)).expect(VEC_WRITE);
    compressor.write_data(&filtered).expect(VEC_WRITE);
    let mut deflate = compressor.finish().expect(VEC_WRITE);
    let trailer = deflate.split_off(deflate.len() - 4);
    let adler = u32::from_be_bytes(trailer.try_into().expect("4 bytes"));
    deflate.drain(..ZLIB_HEADER.len());

    let stored_len = filtered.len() + 5 * filtered.len().div_ceil(u16::MAX as usize);
    if deflate.len() + 1 + EMPTY_STORED_BLOCK.len() <= stored_len {
        deflate[0] &= !1; // BFINAL
        let padding = deflate.last().expect("a block").leading_zeros();
        debug_assert!(padding < 8, "fdeflate's end-of-block code ends with a 1 bit");
        if padding < 3 {
            deflate.push(0);
        }
        deflate.extend_from_slice(&EMPTY_STORED_BLOCK);
    } else {
        deflate.clear();
        deflate.reserve(stored_len);
        for block in filtered.chunks(u16::MAX as usize) {
            let len = block.len() as u16;
            deflate.push(0); // not final, stored; the rest of the byte is padding
            deflate.extend_from_slice(&len.to_le_bytes());
            deflate.extend_from_slice(&(!len).to_le_bytes());
            deflate.extend_from_slice(block);
        }
    }
    Stripe { deflate, adler, filtered_len: filtered.len() }
}

/// The Adler-32 of `a` followed by `b`, from theirs and `b`'s length (zlib's `adler32_combine`).
/// Adler-32 is two sums modulo 65521: `s1 = 1 + Σ bytes` and `s2 = Σ` of `s1` after each byte.
/// After `a`, `b`'s bytes add to `s1` what they add alone (`s1(b) − 1`), and each of its `n`
/// partial sums is `s1(a) − 1` larger than alone: `s2 = s2(a) + s2(b) + n·(s1(a) − 1)`.
fn adler32_combine(a: u32, b: u32, b_len: usize) -> u32 {
    const MOD: u64 = 65521;
    let n = b_len as u64 % MOD;
    let (a1, a2) = (u64::from(a & 0xffff), u64::from(a >> 16));
    let (b1, b2) = (u64::from(b & 0xffff), u64::from(b >> 16));
    let s1 = (a1 + b1 + MOD - 1) % MOD;
    let s2 = (a2 + b2 + n * a1 + MOD - n) % MOD;
    (s2 << 16 | s1) as u32
}

/// Appends a PNG chunk: length, type, data, and the CRC-32 of type and data.
fn write_chunk(png: &mut Vec<u8>, kind: &[u8; 4], data: &[u8]) {
    png.extend_from_slice(&(data.len() as u32).to_be_bytes());
    let start = png.len();
    png.extend_from_slice(kind);
    png.extend_from_slice(data);
    let crc = crc32fast::hash(&png[start..]);
    png.extend_from_slice(&crc.to_be_bytes());
}
