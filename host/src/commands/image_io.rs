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

/// Encodes row-major pixels as PNG with fast settings (`fdeflate`'s fastest compression, `Up`
/// filter): 9–30 ms for a 3840×2160 spiral, about 13 times faster than the `image` crate's default
/// compression, for files 2 to 4 times larger (0.7–2 MB); see `docs/benchmarks/spiral.md`.
pub fn encode_png(pixels: &[u8], width: u32, height: u32, format: PixelFormat) -> Result<Vec<u8>> {
    let (color, channels) = match format {
        PixelFormat::Gray8 => (image::ExtendedColorType::L8, 1),
        PixelFormat::Rgb8 => (image::ExtendedColorType::Rgb8, 3),
    };
    ensure(pixels.len() == width as usize * height as usize * channels, || {
        format!("{} bytes are not a {width} × {height} image of {channels} byte(s) per pixel", pixels.len())
    })?;
    let mut png = Vec::with_capacity(pixels.len() / 4);
    PngEncoder::new_with_quality(&mut png, CompressionType::Fast, FilterType::Up)
        .write_image(pixels, width, height, color)
        .map_err(|e| Error::InvalidInput(format!("PNG encoding failed: {e}")))?;
    Ok(png)
}
