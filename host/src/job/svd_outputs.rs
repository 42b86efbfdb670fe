//! What the `svd` job writes: per image, each rank's reconstruction (PNG and/or `.npy`), the
//! singular values (`.npy`) and a labelled mosaic; for the job, `report.csv`, kept by a
//! [`Journal`] of every image's [`ImageEntry`] (done or failed).

use crate::error::{Error, Result};
use crate::image_io::{self, Scaling};
use crate::svd_job::{FailedImage, ImageResult, RankResult, Reconstruction, StageTimes};
use crate::{npy, plot};
use ndarray::{Array2, s};
use rayon::prelude::*;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// Where and what to write for each finished image.
pub struct Outputs<'a> {
    /// The output folder.
    pub dir: &'a Path,
    /// `<name>-k<k>.png` per rank.
    pub png: bool,
    /// `<name>-k<k>.npy` per rank and `<name>-s.npy`.
    pub npy: bool,
    /// `<name>-mosaic.png`: the original beside every rank.
    pub mosaic: bool,
    /// The original of image `index` (for the mosaic).
    pub original: &'a (dyn Fn(usize) -> Result<Array2<f32>> + Sync),
}

impl Outputs<'_> {
    /// Writes one image's files: every rank's and the mosaic at once (one task each on the rayon
    /// pool it is called in; PNG encoding is the slow part). The job calls it on a pool of its
    /// encoders' own, never on one whose threads may block on the encoders ([`crate::svd_engine::Engine::run`]).
    pub fn write(&self, result: &ImageResult) -> Result<()> {
        let (ranks, mosaic) = rayon::join(
            || result.ranks.par_iter().try_for_each(|rank| self.write_rank(result, rank)),
            || if self.mosaic { self.write_mosaic(result) } else { Ok(()) },
        );
        ranks?;
        mosaic?;
        if self.npy {
            let s = &result.singular_values;
            npy::write(&self.dir.join(format!("{}-s.npy", result.name)), &ndarray::ArrayView1::from(s))?;
        }
        Ok(())
    }

    /// One rank's reconstruction as PNG and/or `.npy`.
    fn write_rank(&self, result: &ImageResult, rank: &RankResult) -> Result<()> {
        let name = &result.name;
        let png = self.dir.join(format!("{name}-k{}.png", rank.k));
        match &rank.reconstruction {
            Reconstruction::Float(values) => {
                if self.png {
                    image_io::save_grayscale(&png, values.view(), Scaling::Clamp)?;
                }
                if self.npy {
                    npy::write(&self.dir.join(format!("{name}-k{}.npy", rank.k)), values)?;
                }
            }
            Reconstruction::Gray8(bytes) if self.png => {
                let bytes = bytes.as_slice().expect("standard layout");
                image_io::save_gray8(&png, bytes, result.cols, result.rows)?;
            }
            _ => {}
        }
        Ok(())
    }

    /// The original beside every rank's reconstruction.
    fn write_mosaic(&self, result: &ImageResult) -> Result<()> {
        let mut tiles = vec![((self.original)(result.index)?, "original".to_string())];
        for r in &result.ranks {
            let tile = r.reconstruction.to_f32().ok_or_else(|| {
                Error::InvalidInput("a mosaic needs the reconstructions (not --no-images)".into())
            })?;
            tiles.push((tile, format!("k = {}", r.k)));
        }
        write_mosaic(&self.mosaic_path(&result.name), &tiles)
    }

    /// Where image `name`'s mosaic goes.
    pub fn mosaic_path(&self, name: &str) -> PathBuf {
        self.dir.join(format!("{name}-mosaic.png"))
    }
}

/// Tiles in a grid of up to 4 columns, each with its label above it.
pub fn write_mosaic(path: &Path, tiles: &[(Array2<f32>, String)]) -> Result<()> {
    let (h, w) = tiles[0].0.dim();
    let cols = tiles.len().min(4);
    let grid_rows = tiles.len().div_ceil(cols);
    let (gap, label_h) = (8usize, plot::LABEL_HEIGHT as usize);
    let (cell_w, cell_h) = (w + gap, h + label_h + gap);
    let (mw, mh) = (cols * cell_w + gap, grid_rows * cell_h + gap);
    let mut mosaic = Array2::<f32>::ones((mh, mw));
    let mut labels = Vec::new();
    for (i, (tile, text)) in tiles.iter().enumerate() {
        let (x0, y0) = (gap + (i % cols) * cell_w, gap + (i / cols) * cell_h);
        mosaic
            .slice_mut(s![y0 + label_h..y0 + label_h + h, x0..x0 + w])
            .assign(&tile.mapv(|v| v.clamp(0.0, 1.0)));
        labels.push((text.clone(), x0, y0));
    }
    let mut gray = image_io::to_gray8(mosaic.view(), Scaling::Clamp);
    plot::draw_labels(&mut gray, mw, mh, &labels)?;
    image_io::save_gray8(path, &gray, mw, mh)
}

/// One rank of one image, as reported.
#[derive(Debug, Clone, serde::Serialize)]
pub struct RankReport {
    /// The rank.
    pub k: usize,
    /// `‖A − A_k‖_F / ‖A‖_F` of the reconstruction.
    pub relative_error: f64,
    /// The smallest possible relative error at rank `k`.
    pub eckart_young_bound: f64,
    /// Relative difference from the f64 CPU reference (`--check`).
    pub check_error: Option<f64>,
}

/// One image, as reported: everything of its [`ImageResult`] but the reconstructions.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ImageReport {
    /// Position in the job.
    pub index: usize,
    /// File stem (or `shepp-logan`).
    pub name: String,
    /// Rows.
    pub rows: usize,
    /// Columns.
    pub cols: usize,
    /// `‖A‖_F`.
    pub frobenius_norm: f64,
    /// The leading singular values, non-increasing.
    pub singular_values: Vec<f64>,
    /// Per rank.
    pub ranks: Vec<RankReport>,
    /// Per stage.
    pub times: StageTimes,
}

impl From<ImageResult> for ImageReport {
    fn from(result: ImageResult) -> Self {
        ImageReport {
            index: result.index,
            name: result.name,
            rows: result.rows,
            cols: result.cols,
            frobenius_norm: result.frobenius_norm,
            singular_values: result.singular_values,
            ranks: result
                .ranks
                .into_iter()
                .map(|r| RankReport {
                    k: r.k,
                    relative_error: r.relative_error,
                    eckart_young_bound: r.eckart_young_bound,
                    check_error: r.check_error,
                })
                .collect(),
            times: result.times,
        }
    }
}

/// One image of the job, as reported: done, or failed and why.
#[derive(Debug, Clone, serde::Serialize)]
#[serde(tag = "status", rename_all = "lowercase")]
pub enum ImageEntry {
    /// Factored, and every output written.
    Ok(ImageReport),
    /// Not factored ([`FailedImage`]); nothing written for it.
    Failed {
        /// Position in the job.
        index: usize,
        /// File stem.
        name: String,
        /// Why, naming the file or the image.
        error: String,
    },
}

impl ImageEntry {
    /// Position in the job.
    pub fn index(&self) -> usize {
        match self {
            ImageEntry::Ok(report) => report.index,
            ImageEntry::Failed { index, .. } => *index,
        }
    }

    /// Its rows of `report.csv` ([`CSV_HEADER`]): one per rank when done, one with the error when
    /// failed.
    fn rows(&self) -> Vec<[String; 11]> {
        match self {
            ImageEntry::Ok(r) => {
                let sigma_1 = number(r.singular_values.first().copied().unwrap_or(0.0));
                let row = |k: &RankReport| {
                    [
                        r.name.clone(),
                        r.rows.to_string(),
                        r.cols.to_string(),
                        k.k.to_string(),
                        number(k.relative_error),
                        number(k.eckart_young_bound),
                        sigma_1.clone(),
                        number(r.frobenius_norm),
                        k.check_error.map_or(String::new(), number),
                        "ok".into(),
                        String::new(),
                    ]
                };
                r.ranks.iter().map(row).collect()
            }
            ImageEntry::Failed { name, error, .. } => {
                let mut row: [String; 11] = Default::default();
                row[0].clone_from(name);
                row[9] = "failed".into();
                row[10].clone_from(error);
                vec![row]
            }
        }
    }
}

/// The columns of `report.csv`. `status` is `ok` (then `error` is empty) or `failed` (then only
/// `name` and `error` are filled).
pub const CSV_HEADER: [&str; 11] = [
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
    "error",
];

/// The job's report as it goes: every image's [`ImageEntry`] as it comes (from encoder and
/// engine threads), and at the end `report.csv` in index order.
pub struct Journal {
    path: PathBuf,
    entries: Mutex<Vec<ImageEntry>>,
}

impl Journal {
    /// A journal whose report goes to `path`.
    pub fn new(path: &Path) -> Journal {
        Journal { path: path.to_path_buf(), entries: Mutex::new(Vec::new()) }
    }

    /// Where the report goes.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Records an image whose outputs are all written.
    pub fn done(&self, report: ImageReport) -> Result<()> {
        self.record(ImageEntry::Ok(report))
    }

    /// Records an image that failed.
    pub fn failed(&self, failed: &FailedImage) -> Result<()> {
        let (index, name, error) = (failed.index, failed.name.clone(), failed.error.to_string());
        self.record(ImageEntry::Failed { index, name, error })
    }

    fn record(&self, entry: ImageEntry) -> Result<()> {
        self.entries.lock().expect("no panics while holding the lock").push(entry);
        Ok(())
    }

    /// Writes `report.csv` in index order, whole or not at all ([`image_io::write_atomically`]),
    /// and returns the entries in that order.
    pub fn finish(self) -> Result<Vec<ImageEntry>> {
        let mut entries = self.entries.into_inner().expect("no panics while holding the lock");
        entries.sort_by_key(ImageEntry::index);
        image_io::write_atomically(&self.path, |file| {
            let mut csv = csv::Writer::from_writer(file);
            csv.write_record(CSV_HEADER)?;
            for row in entries.iter().flat_map(ImageEntry::rows) {
                csv.write_record(row)?;
            }
            csv.flush()?;
            Ok(())
        })
        .map_err(|e: csv::Error| Error::File { path: self.path.clone(), message: e.to_string() })?;
        Ok(entries)
    }
}

/// A number for the CSV: exact (shortest round trip), in exponent form when small or large.
fn number(v: f64) -> String {
    if v == 0.0 || (1e-3..1e7).contains(&v.abs()) { v.to_string() } else { format!("{v:e}") }
}
