//! Spiral images: the configuration ([`SpiralConfig`], saved and loaded as JSON), the safe wrapper
//! of `kernels::spiral` ([`spiral`], [`launch_spiral`]), the CPU reference in f64
//! ([`spiral_reference`]), the optional RGB [`Palette`] and PNG encoding.
//!
//! Images are 8-bit gray, row-major, `width × height` bytes: byte `row·width + col` is the pixel in
//! row `row` (from the top) and column `col`. The formula, its background value
//! ([`BACKGROUND`]) and its treatment of `r = 0` and of the wrap are documented in
//! `kernels/src/spiral.rs`.
//!
//! Tests: `tests/spiral.rs`; benchmark: `benches/spiral.rs`; command: `cargo run --release --bin spiral`.

use crate::error::{Error, Result, ensure};
use crate::{Buffer, Device, LaunchConfig};
use kernels::spiral as k;
use rand::Rng;
use rayon::prelude::*;
use serde::{Deserialize, Serialize};
use std::fmt;
use std::path::Path;
use std::str::FromStr;
use std::time::{SystemTime, UNIX_EPOCH};

pub use kernels::spiral::BACKGROUND;

/// Threads per block along x (columns) of the launch.
pub const BLOCK_X: u32 = 32;
/// Threads per block along y (rows) of the launch.
pub const BLOCK_Y: u32 = 8;
/// Largest accepted width or height, pixels.
pub const MAX_SIDE: u32 = 32768;
/// Largest accepted symmetry (sectors of at least 1°).
pub const MAX_SYMMETRY: u32 = 360;
/// Width of the images of `spiral --new` at `--scale 1`, pixels.
pub const DEFAULT_WIDTH: u32 = 3840;
/// Height of the images of `spiral --new` at `--scale 1`, pixels.
pub const DEFAULT_HEIGHT: u32 = 2160;

/// The curve multiplier `m(r)` of the spiral's twist `curve·r/max_radius·m(r)`; in JSON and on the
/// command line the numbers 0–3.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "u32", into = "u32")]
pub enum Multiplier {
    /// 0: `ln r` (0 at the centre, `r = 0`).
    Ln,
    /// 1: `sin(r/100)`.
    Sin,
    /// 2: `cos(r/100)`.
    Cos,
    /// 3: `tan(r/100)`.
    Tan,
}

impl Multiplier {
    /// The kernels' code (`kernels::spiral::MULTIPLIER_*`), equal to the JSON number.
    pub fn code(self) -> u32 {
        match self {
            Multiplier::Ln => k::MULTIPLIER_LN,
            Multiplier::Sin => k::MULTIPLIER_SIN,
            Multiplier::Cos => k::MULTIPLIER_COS,
            Multiplier::Tan => k::MULTIPLIER_TAN,
        }
    }

    /// `m(r)` in f64, as the issue writes it.
    fn eval(self, r: f64) -> f64 {
        match self {
            Multiplier::Ln if r > 0.0 => r.ln(),
            Multiplier::Ln => 0.0,
            Multiplier::Sin => (r / 100.0).sin(),
            Multiplier::Cos => (r / 100.0).cos(),
            Multiplier::Tan => (r / 100.0).tan(),
        }
    }
}

impl TryFrom<u32> for Multiplier {
    type Error = String;
    fn try_from(code: u32) -> Result<Self, String> {
        [Multiplier::Ln, Multiplier::Sin, Multiplier::Cos, Multiplier::Tan]
            .into_iter()
            .find(|m| m.code() == code)
            .ok_or_else(|| {
                format!(
                    "unknown curve multiplier {code} (expected 0 = ln r, 1 = sin(r/100), 2 = cos(r/100) \
                     or 3 = tan(r/100))"
                )
            })
    }
}

impl From<Multiplier> for u32 {
    fn from(m: Multiplier) -> u32 {
        m.code()
    }
}

impl FromStr for Multiplier {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let code =
            s.trim().parse::<u32>().map_err(|_| format!("curve multiplier `{s}` is not 0, 1, 2 or 3"))?;
        Multiplier::try_from(code)
    }
}

impl fmt::Display for Multiplier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = match self {
            Multiplier::Ln => "ln r",
            Multiplier::Sin => "sin(r/100)",
            Multiplier::Cos => "cos(r/100)",
            Multiplier::Tan => "tan(r/100)",
        };
        write!(f, "{} ({name})", self.code())
    }
}

pub use crate::Precision;

/// An RGB colouring of the gray levels: level 0 is the first colour, 255 the last, levels between
/// interpolate linearly between neighbouring colours. In JSON and on the command line, colours are
/// `#rrggbb` (the `#` optional); the command line separates them with commas.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "Vec<String>", into = "Vec<String>")]
pub struct Palette {
    colors: Vec<[u8; 3]>,
}

impl Palette {
    /// A palette of 2 to 256 colours.
    pub fn new(colors: Vec<[u8; 3]>) -> Result<Self> {
        ensure((2..=256).contains(&colors.len()), || {
            format!("a palette needs 2 to 256 colours, not {}", colors.len())
        })?;
        Ok(Palette { colors })
    }

    /// The colours, RGB.
    pub fn colors(&self) -> &[[u8; 3]] {
        &self.colors
    }

    /// The colour of each gray level.
    pub fn lookup_table(&self) -> [[u8; 3]; 256] {
        let segments = (self.colors.len() - 1) as f64;
        std::array::from_fn(|level| {
            let position = level as f64 / 255.0 * segments;
            let i = (position.floor() as usize).min(self.colors.len() - 2);
            let t = position - i as f64;
            let (a, b) = (self.colors[i], self.colors[i + 1]);
            std::array::from_fn(|c| (a[c] as f64 + (b[c] as f64 - a[c] as f64) * t).round() as u8)
        })
    }
}

fn parse_color(s: &str) -> Result<[u8; 3], String> {
    let hex = s.trim().trim_start_matches('#');
    let bad = || format!("colour `{s}` is not #rrggbb");
    if hex.len() != 6 || !hex.chars().all(|c| c.is_ascii_hexdigit()) {
        return Err(bad());
    }
    let byte = |i: usize| u8::from_str_radix(&hex[i..i + 2], 16).map_err(|_| bad());
    Ok([byte(0)?, byte(2)?, byte(4)?])
}

impl TryFrom<Vec<String>> for Palette {
    type Error = String;
    fn try_from(colors: Vec<String>) -> Result<Self, String> {
        let colors = colors.iter().map(|c| parse_color(c)).collect::<Result<Vec<_>, _>>()?;
        Palette::new(colors).map_err(|e| e.to_string())
    }
}

impl From<Palette> for Vec<String> {
    fn from(p: Palette) -> Vec<String> {
        p.colors.iter().map(|[r, g, b]| format!("#{r:02x}{g:02x}{b:02x}")).collect()
    }
}

impl FromStr for Palette {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Palette::try_from(s.split(',').map(str::to_string).collect::<Vec<_>>())
    }
}

/// Everything that determines a spiral image; saved next to each image as JSON, so that loading
/// it reproduces the image exactly (same device and precision).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SpiralConfig {
    /// Image width, pixels (1 to [`MAX_SIDE`]).
    pub width: u32,
    /// Image height, pixels (1 to [`MAX_SIDE`]).
    pub height: u32,
    /// Centre of the spiral `[x, y]`: column and row in pixels from the top-left pixel, fractions
    /// allowed. It may lie outside the image, by at most one image width (height), as long as the
    /// disc of `max_radius` reaches the image.
    pub center: [f64; 2],
    /// Number of repetitions of the pattern around the centre (1 to [`MAX_SYMMETRY`]).
    pub symmetry: u32,
    /// Twist of the spiral, degrees at `r = max_radius` per unit of `m(r)`; any finite value.
    pub curve: f64,
    /// The curve multiplier `m(r)`.
    pub multiplier: Multiplier,
    /// Radius of the spiral, pixels (> 0); pixels farther out are [`BACKGROUND`].
    pub max_radius: f64,
    /// Arithmetic of the kernels (f64 when absent from the JSON).
    #[serde(default)]
    pub precision: Precision,
    /// Optional colouring; without it the image is gray.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub palette: Option<Palette>,
}

impl SpiralConfig {
    /// A random configuration as `spiral --new` draws it for a `width × height` image: centre (whole
    /// pixels) in the middle third of each axis, symmetry 1–9, curve in ±62.83 with two decimals,
    /// multiplier 0 or 1, max radius 1500–2000 pixels scaled by the image's diagonal over 4K's
    /// (whole pixels, at least 1), f64, no palette.
    pub fn random(rng: &mut impl Rng, width: u32, height: u32) -> SpiralConfig {
        let mut middle_third = |n: u32| rng.random_range(n / 3..=(2 * n / 3).min(n.saturating_sub(1))) as f64;
        let center = [middle_third(width), middle_third(height)];
        let scale = (width as f64).hypot(height as f64) / (DEFAULT_WIDTH as f64).hypot(DEFAULT_HEIGHT as f64);
        SpiralConfig {
            width,
            height,
            center,
            symmetry: rng.random_range(1..=9),
            curve: rng.random_range(-6283..=6283) as f64 / 100.0,
            multiplier: if rng.random_bool(0.5) { Multiplier::Sin } else { Multiplier::Ln },
            max_radius: (rng.random_range(1500.0..=2000.0) * scale).round().max(1.0),
            precision: Precision::F64,
            palette: None,
        }
    }

    /// Number of pixels, `width·height`.
    pub fn pixel_count(&self) -> usize {
        self.width as usize * self.height as usize
    }

    /// Checks every field; the message names the first bad one.
    pub fn validate(&self) -> Result<()> {
        let (w, h) = (self.width, self.height);
        ensure(w > 0 && h > 0, || format!("the image is empty ({w} × {h} pixels)"))?;
        ensure(w <= MAX_SIDE && h <= MAX_SIDE, || {
            format!("{w} × {h} pixels: width and height are limited to {MAX_SIDE}")
        })?;
        ensure(self.symmetry >= 1, || "symmetry 0: it must be at least 1".into())?;
        ensure(self.symmetry <= MAX_SYMMETRY, || {
            format!("symmetry {} exceeds {MAX_SYMMETRY}", self.symmetry)
        })?;
        ensure(self.max_radius.is_finite() && self.max_radius > 0.0, || {
            format!("max radius {}: it must be a positive number of pixels", self.max_radius)
        })?;
        ensure(self.curve.is_finite(), || format!("curve {} is not a finite number", self.curve))?;
        let [cx, cy] = self.center;
        ensure(cx.is_finite() && cy.is_finite(), || format!("centre ({cx}, {cy}) is not finite"))?;
        let (wf, hf) = (w as f64, h as f64);
        ensure((-wf..=2.0 * wf).contains(&cx) && (-hf..=2.0 * hf).contains(&cy), || {
            format!(
                "centre ({cx}, {cy}) is too far outside the {w} × {h} image: x must lie in \
                 [-{w}, {}] and y in [-{h}, {}]",
                2 * w as u64,
                2 * h as u64
            )
        })?;
        let nearest = (cx - cx.clamp(0.0, wf - 1.0)).hypot(cy - cy.clamp(0.0, hf - 1.0));
        ensure(nearest <= self.max_radius, || {
            format!(
                "centre ({cx}, {cy}) is {nearest:.1} pixels from the image, beyond the max radius {}: \
                 every pixel would be background",
                self.max_radius
            )
        })
    }

    /// Pretty-printed JSON (numbers printed so that reading them back gives the same values).
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).expect("a configuration always serialises")
    }

    /// Parses and validates JSON written by [`SpiralConfig::to_json`] (or by hand).
    pub fn from_json(json: &str) -> Result<Self> {
        let config: SpiralConfig = serde_json::from_str(json)
            .map_err(|e| Error::InvalidInput(format!("not a spiral configuration: {e}")))?;
        config.validate()?;
        Ok(config)
    }

    /// Reads and validates a configuration file.
    pub fn load(path: &Path) -> Result<Self> {
        let file_error = |message: String| Error::File { path: path.to_path_buf(), message };
        let json = std::fs::read_to_string(path).map_err(|e| file_error(e.to_string()))?;
        let config: SpiralConfig = serde_json::from_str(&json)
            .map_err(|e| file_error(format!("not a spiral configuration: {e}")))?;
        config.validate().map_err(|e| match e {
            Error::InvalidInput(message) => file_error(message),
            other => other,
        })?;
        Ok(config)
    }

    /// Writes [`SpiralConfig::to_json`] to `path`.
    pub fn save(&self, path: &Path) -> Result<()> {
        std::fs::write(path, self.to_json() + "\n")
            .map_err(|e| Error::File { path: path.to_path_buf(), message: e.to_string() })
    }
}

impl fmt::Display for SpiralConfig {
    /// The parameters on one line each, as `spiral` prints them.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "size:       {} × {} pixels", self.width, self.height)?;
        writeln!(f, "center:     x = {}, y = {}", self.center[0], self.center[1])?;
        writeln!(f, "symmetry:   {}", self.symmetry)?;
        writeln!(f, "curve:      {}", self.curve)?;
        writeln!(f, "multiplier: {}", self.multiplier)?;
        writeln!(f, "max radius: {}", self.max_radius)?;
        writeln!(f, "precision:  {}", self.precision)?;
        match &self.palette {
            Some(p) => write!(f, "palette:    {}", Vec::<String>::from(p.clone()).join(",")),
            None => write!(f, "palette:    none (gray)"),
        }
    }
}

/// Queues the kernel of `config.precision` writing the `config` image into `image`
/// (`config.pixel_count()` bytes, row-major). On a GPU it returns before the kernel has run.
pub fn launch_spiral(device: &Device, config: &SpiralConfig, image: &mut Buffer<u8>) -> Result<()> {
    config.validate()?;
    ensure(image.len() == config.pixel_count(), || {
        format!("an image buffer of {} bytes for {} × {} pixels", image.len(), config.width, config.height)
    })?;
    let (w, h) = (config.width, config.height);
    let launch = LaunchConfig::for_2d(w as usize, h as usize, BLOCK_X, BLOCK_Y);
    let [cx, cy] = config.center;
    let curl = config.curve / config.max_radius;
    let (multiplier, symmetry) = (config.multiplier.code(), config.symmetry);
    // SAFETY: the grid covers width × height and `image` holds that many bytes (checked above).
    unsafe {
        match config.precision {
            Precision::F32 => device.launch(
                &k::SPIRAL_F32,
                launch,
                (
                    image,
                    w,
                    h,
                    cx as f32,
                    cy as f32,
                    config.max_radius as f32,
                    curl as f32,
                    multiplier,
                    symmetry,
                ),
            ),
            Precision::F64 => device.launch(
                &k::SPIRAL_F64,
                launch,
                (image, w, h, cx, cy, config.max_radius, curl, multiplier, symmetry),
            ),
        }
    }
}

/// The gray image of `config` computed on `device` (row-major, `width × height` bytes).
pub fn spiral(device: &Device, config: &SpiralConfig) -> Result<Vec<u8>> {
    config.validate()?;
    let mut image = device.alloc::<u8>(config.pixel_count())?;
    launch_spiral(device, config, &mut image)?;
    device.download(&image)
}

/// CPU reference: the issue's formula, literally, in f64 (whatever `config.precision` says), one
/// row per rayon task: `θ = 180·atan2(x, y)/π + (curve·r/max_radius)·m(r)`, `t = θ mod 360`,
/// `v = min(⌊(t mod w)·256/w⌋, 255)` with `w = 360/symmetry` (the 255 clamp for the rounding at the
/// wrap), inverted when `sin(t·symmetry/100) < 0.5`.
pub fn spiral_reference(config: &SpiralConfig) -> Result<Vec<u8>> {
    config.validate()?;
    let width = config.width as usize;
    let [cx, cy] = config.center;
    let symmetry = config.symmetry as f64;
    let sector = 360.0 / symmetry;
    let pixel = |row: usize, col: usize| -> u8 {
        let x = col as f64 - cx;
        // `cy − i` rather than `−(i − cy)`: the same number, but +0 on the centre's row, where
        // −0 would turn atan2(0, y) at the centre into 180°.
        let y = cy - row as f64;
        let r = (x * x + y * y).sqrt();
        if r > config.max_radius {
            return BACKGROUND;
        }
        let twist = config.curve * r / config.max_radius * config.multiplier.eval(r);
        let theta = (180.0 * x.atan2(y) / std::f64::consts::PI + twist).rem_euclid(360.0);
        let value = ((theta.rem_euclid(sector) * 256.0 / sector).floor()).min(255.0) as u8;
        if (theta * symmetry / 100.0).sin() < 0.5 { 255 - value } else { value }
    };
    let mut image = vec![0u8; config.pixel_count()];
    image.par_chunks_mut(width).enumerate().for_each(|(row, line)| {
        for (col, out) in line.iter_mut().enumerate() {
            *out = pixel(row, col);
        }
    });
    Ok(image)
}

/// The RGB image (3 bytes per pixel, row-major) of the gray image `gray` coloured by `palette`.
pub fn colorize(gray: &[u8], palette: &Palette) -> Vec<u8> {
    let table = palette.lookup_table();
    let mut rgb = vec![0u8; gray.len() * 3];
    rgb.par_chunks_mut(3 * 4096).zip(gray.par_chunks(4096)).for_each(|(out, levels)| {
        for (px, &level) in out.chunks_exact_mut(3).zip(levels) {
            px.copy_from_slice(&table[level as usize]);
        }
    });
    rgb
}

/// `time` in UTC as `YYYY-MM-DD-HH-MM-SS`, the default name of `spiral`'s files.
pub fn timestamp(time: SystemTime) -> String {
    let secs = time.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let (days, rest) = (secs / 86_400, secs % 86_400);
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02}-{:02}-{:02}-{:02}", rest / 3600, rest % 3600 / 60, rest % 60)
}
