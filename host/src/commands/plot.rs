//! Line charts written as PNG or SVG files, for the commands and benchmarks of every family.
//!
//! ```no_run
//! use kernel_suite::plot::{LineChart, Scale};
//! # fn main() -> kernel_suite::Result<()> {
//! let squares: Vec<(f64, f64)> = (1..=100).map(|i| (i as f64, (i * i) as f64)).collect();
//! LineChart::new("Squares", "n", "n²")
//!     .with_scales(Scale::Linear, Scale::Log)
//!     .with_series("n²", squares)
//!     .save(std::path::Path::new("squares.png"))?; // or .svg
//! # Ok(()) }
//! ```
//!
//! Drawing uses [`plotters`]; text uses DejaVu Sans, embedded in the binary
//! (`host/assets/fonts/`, license there), so no system fonts or fontconfig are needed. PNGs are
//! encoded with the `image` crate the suite already uses.
//!
//! A series longer than four points per pixel column is reduced before drawing to the lowest and
//! highest point of each run of consecutive points (a min/max envelope): the picture keeps every
//! peak, and an SVG of a million-point series stays small. On a logarithmic axis, points with a
//! value ≤ 0 are left out; non-finite points are always left out.

use crate::error::{Error, Result};
use plotters::coord::Shift;
use plotters::coord::ranged1d::{AsRangedCoord, ValueFormatter};
use plotters::prelude::*;
use std::ops::Range;
use std::path::Path;
use std::sync::OnceLock;

/// DejaVu Sans, registered as the `sans-serif` family on first use.
static FONT: &[u8] = include_bytes!("../../assets/fonts/DejaVuSans.ttf");

/// Series of at most this many points are drawn with a marker on each point.
const MARKED_POINTS: usize = 24;

/// Colours of successive series.
const PALETTE: [RGBColor; 10] = [
    RGBColor(31, 119, 180),
    RGBColor(214, 39, 40),
    RGBColor(44, 160, 44),
    RGBColor(255, 127, 14),
    RGBColor(148, 103, 189),
    RGBColor(23, 190, 207),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
    RGBColor(188, 189, 34),
];

/// A chart file format, from the file name's extension.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// `.png`: 8-bit RGB bitmap.
    Png,
    /// `.svg`: vector drawing.
    Svg,
}

impl Format {
    /// The format a chart saved to `path` gets (`.png` or `.svg`, any case); an error for other
    /// names, so commands can check their output name before computing anything.
    pub fn of(path: &Path) -> Result<Format> {
        match path.extension().and_then(|e| e.to_str()).map(str::to_ascii_lowercase).as_deref() {
            Some("png") => Ok(Format::Png),
            Some("svg") => Ok(Format::Svg),
            _ => Err(Error::File {
                path: path.to_path_buf(),
                message: "unknown chart format: use a .png or .svg file name".into(),
            }),
        }
    }
}

/// How an axis maps values to positions.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Scale {
    /// Evenly spaced values.
    #[default]
    Linear,
    /// Evenly spaced powers of ten (positive values only).
    Log,
}

/// One line of a chart: `(x, y)` points drawn in the given order, named in the legend unless the
/// label is empty.
#[derive(Clone, Debug, PartialEq)]
pub struct Series {
    /// Legend entry; empty for none.
    pub label: String,
    /// The points, in drawing order.
    pub points: Vec<(f64, f64)>,
}

/// A line chart: title, axis labels and scales, size in pixels, and its series.
#[derive(Clone, Debug, PartialEq)]
pub struct LineChart {
    /// Caption above the chart.
    pub title: String,
    /// Label of the horizontal axis.
    pub x_label: String,
    /// Label of the vertical axis.
    pub y_label: String,
    /// Scale of the horizontal axis.
    pub x_scale: Scale,
    /// Scale of the vertical axis.
    pub y_scale: Scale,
    /// `(width, height)` in pixels (SVG user units).
    pub size: (u32, u32),
    /// The lines.
    pub series: Vec<Series>,
}

impl LineChart {
    /// An empty 1200 × 600 chart with linear axes.
    pub fn new(title: impl Into<String>, x_label: impl Into<String>, y_label: impl Into<String>) -> Self {
        LineChart {
            title: title.into(),
            x_label: x_label.into(),
            y_label: y_label.into(),
            x_scale: Scale::Linear,
            y_scale: Scale::Linear,
            size: (1200, 600),
            series: Vec::new(),
        }
    }

    /// Adds a series.
    pub fn with_series(mut self, label: impl Into<String>, points: Vec<(f64, f64)>) -> Self {
        self.series.push(Series { label: label.into(), points });
        self
    }

    /// Sets the axis scales.
    pub fn with_scales(mut self, x: Scale, y: Scale) -> Self {
        self.x_scale = x;
        self.y_scale = y;
        self
    }

    /// Sets the size in pixels (each at least 100).
    pub fn with_size(mut self, width: u32, height: u32) -> Self {
        self.size = (width, height);
        self
    }

    /// Writes the chart to `path`: PNG for a `.png` name, SVG for `.svg`.
    pub fn save(&self, path: &Path) -> Result<()> {
        let file_error = |message: String| Error::File { path: path.to_path_buf(), message };
        let (width, height) = self.size;
        if width < 100 || height < 100 {
            return Err(Error::InvalidInput(format!(
                "chart size {width} × {height}: use at least 100 × 100"
            )));
        }
        let format = Format::of(path)?;
        register_font().map_err(file_error)?;
        match format {
            Format::Png => {
                let mut pixels = vec![0u8; width as usize * height as usize * 3];
                {
                    let root = BitMapBackend::with_buffer(&mut pixels, self.size).into_drawing_area();
                    self.draw(&root).map_err(file_error)?;
                }
                image::save_buffer_with_format(
                    path,
                    &pixels,
                    width,
                    height,
                    image::ExtendedColorType::Rgb8,
                    image::ImageFormat::Png,
                )
                .map_err(|e| file_error(e.to_string()))
            }
            Format::Svg => {
                let mut svg = String::new();
                {
                    let root = SVGBackend::with_string(&mut svg, self.size).into_drawing_area();
                    self.draw(&root).map_err(file_error)?;
                }
                std::fs::write(path, svg).map_err(|e| file_error(e.to_string()))
            }
        }
    }

    /// Draws on `root` (any plotters backend), choosing the coordinate types for the scales.
    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> std::result::Result<(), String> {
        let x = self.range(|p| p.0, self.x_scale, 0.0)?;
        let y = self.range(|p| p.1, self.y_scale, 0.05)?;
        root.fill(&WHITE).map_err(|e| e.to_string())?;
        match (self.x_scale, self.y_scale) {
            (Scale::Linear, Scale::Linear) => self.draw_in(root, x, y),
            (Scale::Linear, Scale::Log) => self.draw_in(root, x, y.log_scale()),
            (Scale::Log, Scale::Linear) => self.draw_in(root, x.log_scale(), y),
            (Scale::Log, Scale::Log) => self.draw_in(root, x.log_scale(), y.log_scale()),
        }?;
        root.present().map_err(|e| e.to_string())
    }

    fn draw_in<DB, X, Y>(&self, root: &DrawingArea<DB, Shift>, x: X, y: Y) -> std::result::Result<(), String>
    where
        DB: DrawingBackend,
        X: AsRangedCoord<Value = f64>,
        Y: AsRangedCoord<Value = f64>,
        X::CoordDescType: ValueFormatter<f64>,
        Y::CoordDescType: ValueFormatter<f64>,
    {
        let text = |e: DrawingAreaErrorKind<DB::ErrorType>| e.to_string();
        let mut chart = ChartBuilder::on(root)
            .caption(&self.title, ("sans-serif", 22))
            .margin(16)
            .x_label_area_size(48)
            .y_label_area_size(80)
            .build_cartesian_2d(x, y)
            .map_err(text)?;
        chart
            .configure_mesh()
            .x_desc(self.x_label.as_str())
            .y_desc(self.y_label.as_str())
            .label_style(("sans-serif", 14))
            .axis_desc_style(("sans-serif", 16))
            .draw()
            .map_err(text)?;
        let columns = self.size.0 as usize;
        for (i, series) in self.series.iter().enumerate() {
            let color = PALETTE[i % PALETTE.len()];
            let points = envelope(&self.drawable(&series.points), columns);
            // Short series (benchmark sizes) also get a marker per point, so a one-point series shows.
            if points.len() <= MARKED_POINTS {
                let markers = points.iter().map(|&p| Circle::new(p, 4, color.filled()));
                chart.draw_series(markers).map_err(text)?;
            }
            let drawn = chart.draw_series(LineSeries::new(points, color.stroke_width(2))).map_err(text)?;
            if !series.label.is_empty() {
                drawn
                    .label(series.label.as_str())
                    .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 24, y)], color.stroke_width(2)));
            }
        }
        if self.series.iter().any(|s| !s.label.is_empty()) {
            chart
                .configure_series_labels()
                .label_font(("sans-serif", 14))
                .background_style(WHITE.mix(0.85))
                .border_style(BLACK)
                .draw()
                .map_err(text)?;
        }
        Ok(())
    }

    /// The points an axis scale can show: finite, and positive on a log axis.
    fn drawable(&self, points: &[(f64, f64)]) -> Vec<(f64, f64)> {
        let shown = |v: f64, scale: Scale| v.is_finite() && (scale == Scale::Linear || v > 0.0);
        points.iter().copied().filter(|&(x, y)| shown(x, self.x_scale) && shown(y, self.y_scale)).collect()
    }

    /// The range of one coordinate over all drawable points, widened by `margin` of its span
    /// (linear) or by a factor (log); a single value gets a unit-wide (or ×/÷2) range.
    fn range(
        &self,
        coordinate: impl Fn(&(f64, f64)) -> f64,
        scale: Scale,
        margin: f64,
    ) -> std::result::Result<Range<f64>, String> {
        let values = self.series.iter().flat_map(|s| self.drawable(&s.points)).map(|p| coordinate(&p));
        let (lo, hi) = values.fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), v| (lo.min(v), hi.max(v)));
        if lo > hi {
            return Err("the chart has no drawable points".into());
        }
        Ok(match scale {
            Scale::Linear if lo == hi => lo - 1.0..hi + 1.0,
            Scale::Linear => lo - margin * (hi - lo)..hi + margin * (hi - lo),
            Scale::Log if lo == hi => lo / 2.0..hi * 2.0,
            Scale::Log => lo / (1.0 + margin)..hi * (1.0 + margin),
        })
    }
}

/// At most about `2·columns` points: for more than `4·columns`, each run of consecutive points is
/// replaced by its lowest and highest point (in their original order).
fn envelope(points: &[(f64, f64)], columns: usize) -> Vec<(f64, f64)> {
    if points.len() <= 4 * columns.max(1) {
        return points.to_vec();
    }
    let run = points.len().div_ceil(columns);
    let mut kept = Vec::with_capacity(2 * columns + 2);
    for chunk in points.chunks(run) {
        let by_y = |a: &&(f64, f64), b: &&(f64, f64)| a.1.total_cmp(&b.1);
        let low = chunk.iter().enumerate().min_by(|a, b| by_y(&a.1, &b.1)).map(|(i, _)| i).unwrap_or(0);
        let high = chunk.iter().enumerate().max_by(|a, b| by_y(&a.1, &b.1)).map(|(i, _)| i).unwrap_or(0);
        kept.push(chunk[low.min(high)]);
        if low != high {
            kept.push(chunk[low.max(high)]);
        }
    }
    kept
}

/// Pixel height reserved above an image for a label drawn by [`draw_labels`].
pub const LABEL_HEIGHT: u32 = 24;

/// Draws each `(text, x, y)` in black, 16 px sans-serif, with its top-left corner at `(x, y)`, onto
/// `gray`: row-major 8-bit grayscale pixels, `width × height`. Used to caption image mosaics. Only
/// each label's strip (the [`LABEL_HEIGHT`] rows from `y`, from `x` as wide as the text can be) is
/// drawn on, through a small colour copy, so the cost is the labels', not the image's.
pub fn draw_labels(
    gray: &mut [u8],
    width: usize,
    height: usize,
    labels: &[(String, usize, usize)],
) -> Result<()> {
    if gray.len() != width * height {
        return Err(Error::InvalidInput(format!("{} pixels for a {width} × {height} image", gray.len())));
    }
    register_font().map_err(Error::InvalidInput)?;
    let style = ("sans-serif", 16).into_font().color(&BLACK);
    for (text, x, y) in labels {
        let (x, y) = (*x, *y);
        if x >= width || y >= height {
            return Err(Error::InvalidInput(format!("label {text:?} at ({x}, {y}) is outside the image")));
        }
        // No glyph of a 16 px font is wider than the strip's height: the strip ends past the text.
        let strip_w = (text.chars().count() * LABEL_HEIGHT as usize).min(width - x);
        let strip_h = (LABEL_HEIGHT as usize).min(height - y);
        let rows = || (y..y + strip_h).map(|row| row * width + x..row * width + x + strip_w);
        let mut rgb: Vec<u8> = rows().flat_map(|span| gray[span].iter().flat_map(|&v| [v, v, v])).collect();
        {
            let root =
                BitMapBackend::with_buffer(&mut rgb, (strip_w as u32, strip_h as u32)).into_drawing_area();
            root.draw_text(text, &style, (0, 3)).map_err(|e| Error::InvalidInput(e.to_string()))?;
            root.present().map_err(|e| Error::InvalidInput(e.to_string()))?;
        }
        for (span, colour) in rows().zip(rgb.chunks_exact(3 * strip_w)) {
            for (g, px) in gray[span].iter_mut().zip(colour.chunks_exact(3)) {
                *g = px[0];
            }
        }
    }
    Ok(())
}

/// Registers the embedded DejaVu Sans as `sans-serif` (once per process).
fn register_font() -> std::result::Result<(), String> {
    static REGISTERED: OnceLock<bool> = OnceLock::new();
    let ok = *REGISTERED
        .get_or_init(|| plotters::style::register_font("sans-serif", FontStyle::Normal, FONT).is_ok());
    if ok { Ok(()) } else { Err("the embedded DejaVu Sans font could not be loaded".into()) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn envelope_keeps_extremes_and_order() {
        let points: Vec<(f64, f64)> =
            (0..1000).map(|i| (i as f64, if i == 637 { 9.0 } else { (i % 7) as f64 })).collect();
        let kept = envelope(&points, 10);
        assert!(kept.len() <= 22, "{} points kept", kept.len());
        assert!(kept.contains(&(637.0, 9.0)), "the peak was dropped");
        assert!(kept.windows(2).all(|w| w[0].0 < w[1].0), "order changed");
        assert_eq!(envelope(&points[..30], 10), points[..30].to_vec());
    }
}
