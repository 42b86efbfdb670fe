//! What the `svd` job writes: per image, each rank's reconstruction (PNG and/or `.npy`), the
//! singular values (`.npy`) and a labelled mosaic; for the job, `report.csv`, kept by a
//! [`Journal`] of every image's [`ImageEntry`] (done, failed, or done by an earlier run that
//! `--resume` continues: [`resumable`]).

use super::images::{FailedImage, ImageResult, JobOptions, RankResult, Reconstruction, StageTimes};
use super::lock::{into_inner, lock};
use crate::commands::image_io::{self, Scaling};
use crate::commands::{npy, plot};
use crate::launch::error::{Error, Result};
use ndarray::Array2;
use rayon::prelude::*;
use std::borrow::Cow;
use std::collections::HashMap;
use std::fs::File;
use std::io::Write;
use std::os::unix::fs::FileExt;
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
    /// encoders' own, never on one whose threads may block on the encoders ([`super::driver::Engine::run`]).
    pub fn write(&self, result: &ImageResult) -> Result<()> {
        let (ranks, mosaic) = rayon::join(
            || result.ranks.par_iter().try_for_each(|rank| self.write_rank(result, rank)),
            || if self.mosaic { self.write_mosaic(result) } else { Ok(()) },
        );
        ranks?;
        mosaic?;
        if self.npy {
            let s = &result.singular_values;
            npy::write(&self.spectrum_path(&result.name), &ndarray::ArrayView1::from(s))?;
        }
        Ok(())
    }

    /// Every file [`Outputs::write`] writes for image `name` at `ranks`: what `--resume` finds
    /// in place before it skips the image.
    pub fn files(&self, name: &str, ranks: &[usize]) -> Vec<PathBuf> {
        let mut files = Vec::new();
        for &k in ranks {
            if self.png {
                files.push(self.rank_path(name, k, "png"));
            }
            if self.npy {
                files.push(self.rank_path(name, k, "npy"));
            }
        }
        if self.npy {
            files.push(self.spectrum_path(name));
        }
        if self.mosaic {
            files.push(self.mosaic_path(name));
        }
        files
    }

    /// `<name>-k<k>.<extension>`.
    fn rank_path(&self, name: &str, k: usize, extension: &str) -> PathBuf {
        self.dir.join(format!("{name}-k{k}.{extension}"))
    }

    /// `<name>-s.npy`.
    fn spectrum_path(&self, name: &str) -> PathBuf {
        self.dir.join(format!("{name}-s.npy"))
    }

    /// One rank's reconstruction as PNG and/or `.npy`.
    fn write_rank(&self, result: &ImageResult, rank: &RankResult) -> Result<()> {
        let name = &result.name;
        let png = self.rank_path(name, rank.k, "png");
        match &rank.reconstruction {
            Reconstruction::Float(values) => {
                if self.png {
                    image_io::save_grayscale(&png, values.view(), Scaling::Clamp)?;
                }
                if self.npy {
                    npy::write(&self.rank_path(name, rank.k, "npy"), values)?;
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
        let original = image_io::to_gray8((self.original)(result.index)?.view(), Scaling::Clamp);
        let mut tiles = vec![(Cow::Owned(original), "original".to_string())];
        for r in &result.ranks {
            let tile = r.reconstruction.to_gray8().ok_or_else(|| {
                Error::InvalidInput("a mosaic needs the reconstructions (not --no-images)".into())
            })?;
            tiles.push((tile, format!("k = {}", r.k)));
        }
        write_mosaic(&self.mosaic_path(&result.name), (result.rows, result.cols), &tiles)
    }

    /// Where image `name`'s mosaic goes.
    pub fn mosaic_path(&self, name: &str) -> PathBuf {
        self.dir.join(format!("{name}-mosaic.png"))
    }
}

/// Tiles (each `rows × cols` 8-bit gray pixels, row-major) in a grid of up to 4 columns on
/// white, each with its label above it.
pub fn write_mosaic(path: &Path, (h, w): (usize, usize), tiles: &[(Cow<[u8]>, String)]) -> Result<()> {
    let cols = tiles.len().min(4);
    let grid_rows = tiles.len().div_ceil(cols);
    let (gap, label_h) = (8usize, plot::LABEL_HEIGHT as usize);
    let (cell_w, cell_h) = (w + gap, h + label_h + gap);
    let (mw, mh) = (cols * cell_w + gap, grid_rows * cell_h + gap);
    let mut mosaic = vec![255u8; mw * mh];
    let mut labels = Vec::new();
    for (i, (tile, text)) in tiles.iter().enumerate() {
        if tile.len() != h * w {
            return Err(Error::InvalidInput(format!(
                "a mosaic tile of {} pixels, not {h} × {w}",
                tile.len()
            )));
        }
        let (x0, y0) = (gap + (i % cols) * cell_w, gap + (i / cols) * cell_h);
        for (row, pixels) in tile.chunks_exact(w).enumerate() {
            let at = (y0 + label_h + row) * mw + x0;
            mosaic[at..at + w].copy_from_slice(pixels);
        }
        labels.push((text.clone(), x0, y0));
    }
    plot::draw_labels(&mut mosaic, mw, mh, &labels)?;
    image_io::save_gray8(path, &mosaic, mw, mh)
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
    /// Done by an earlier run of the job, skipped by `--resume` ([`resumable`]): its values are
    /// its rows of `report.csv`, kept as they were.
    Resumed {
        /// Position in the job.
        index: usize,
        /// File stem.
        name: String,
        /// Its rows of the earlier `report.csv`.
        #[serde(skip)]
        rows: Vec<[String; 11]>,
    },
}

impl ImageEntry {
    /// Position in the job.
    pub fn index(&self) -> usize {
        match self {
            ImageEntry::Ok(report) => report.index,
            ImageEntry::Failed { index, .. } | ImageEntry::Resumed { index, .. } => *index,
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
            ImageEntry::Resumed { rows, .. } => rows.clone(),
        }
    }
}

/// The columns of `report.csv`. `status` is `ok` (then `error` is empty) or `failed` (then only
/// `name` and `error` are filled); an image resumed from an earlier run keeps its `ok` rows.
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

/// The job's report as it goes. Created at the start with the images an earlier run did
/// ([`resumable`]), it writes `report.csv` with those and the options sidecar ([`options_path`]);
/// then each image's rows are appended, in one write, once its outputs are all in place (or once
/// it failed), so that after any stop — a kill included — the report lists exactly the images
/// whose outputs are complete, each once (a failed image is listed too, and done again by
/// `--resume`). At the end [`Journal::finish`] rewrites it in index order.
///
/// Memory: per image the journal keeps where its rows lie in the file (24 bytes), from which the
/// report is rewritten in order, and adds its values to the [`Totals`]; the images' whole
/// entries only when asked to (for `--json`, or the tables of a few images).
///
/// Indices: an image's [`super::images::JobImage::index`] is its place in this run's queue,
/// which `--resume` shortens; the journal reports its place in the whole job instead.
pub struct Journal {
    path: PathBuf,
    /// The job position of each queue index.
    positions: Vec<usize>,
    /// Keep every image's entry (and all its singular values) for [`Journal::finish`] to return.
    keep: bool,
    written: Mutex<Written>,
}

/// What a [`Journal`] has written so far.
struct Written {
    /// `report.csv`, opened for reading and appending.
    file: File,
    /// Its length.
    end: u64,
    /// Where each image's rows lie in it.
    spans: Vec<Span>,
    totals: Totals,
    /// With [`Journal::keep`].
    entries: Vec<ImageEntry>,
}

/// Where an image's rows lie in the appended `report.csv`.
struct Span {
    index: usize,
    offset: u64,
    len: usize,
}

/// The job's sums over its images, as the command prints them and the JSON report holds them.
#[derive(Debug, Clone, Default)]
pub struct Totals {
    /// Images factored and written by this run.
    pub done: usize,
    /// Images that failed.
    pub failed: usize,
    /// Images an earlier run did (`--resume`).
    pub resumed: usize,
    /// Pixels of the images done.
    pub pixels: u64,
    /// Their stage times, summed.
    pub stages: StageTimes,
    /// The largest `check_error` of any rank of any image done (`--check`).
    pub max_check_error: Option<f64>,
    /// Per rank of the job, in order: sums over the images done.
    pub ranks: Vec<RankTotals>,
}

/// One rank's sums over the images done.
#[derive(Debug, Clone, Default)]
pub struct RankTotals {
    /// The rank.
    pub k: usize,
    /// Sum of the relative errors.
    pub error_sum: f64,
    /// The largest relative error.
    pub error_max: f64,
    /// Sum of the Eckart–Young bounds.
    pub bound_sum: f64,
}

impl Totals {
    fn add(&mut self, entry: &ImageEntry) {
        match entry {
            ImageEntry::Ok(r) => {
                self.done += 1;
                self.pixels += (r.rows * r.cols) as u64;
                self.stages.add(&r.times);
                if self.ranks.is_empty() {
                    self.ranks =
                        r.ranks.iter().map(|k| RankTotals { k: k.k, ..RankTotals::default() }).collect();
                }
                for (sum, k) in self.ranks.iter_mut().zip(&r.ranks) {
                    sum.error_sum += k.relative_error;
                    sum.error_max = sum.error_max.max(k.relative_error);
                    sum.bound_sum += k.eckart_young_bound;
                }
                if let Some(worst) = r.ranks.iter().filter_map(|k| k.check_error).reduce(f64::max) {
                    self.max_check_error = Some(self.max_check_error.map_or(worst, |m| m.max(worst)));
                }
            }
            ImageEntry::Failed { .. } => self.failed += 1,
            ImageEntry::Resumed { .. } => self.resumed += 1,
        }
    }
}

impl Journal {
    /// Starts the report at `path`: `report.csv` with `earlier` (the images a resumed job skips),
    /// then `options` in its sidecar, then opens it for appending. `positions[i]` is the job
    /// position of queue index `i`; `keep` keeps every image's entry (all its singular values
    /// included) for [`Journal::finish`] to return.
    pub fn create(
        path: &Path,
        options: &serde_json::Value,
        earlier: Vec<ImageEntry>,
        positions: Vec<usize>,
        keep: bool,
    ) -> Result<Journal> {
        let file_error = |path: &Path, message: String| Error::File { path: path.to_path_buf(), message };
        let mut report = csv_bytes([CSV_HEADER.map(String::from)]);
        let mut spans = Vec::with_capacity(earlier.len());
        let mut totals = Totals::default();
        for entry in &earlier {
            let rows = csv_bytes(entry.rows());
            spans.push(Span { index: entry.index(), offset: report.len() as u64, len: rows.len() });
            report.extend(rows);
            totals.add(entry);
        }
        image_io::write_atomically(path, |file| file.write_all(&report))
            .map_err(|e| file_error(path, e.to_string()))?;
        let sidecar = options_path(path);
        let json = serde_json::to_string_pretty(options).expect("options are JSON");
        image_io::write_atomically(&sidecar, |file| file.write_all(json.as_bytes()))
            .map_err(|e| file_error(&sidecar, e.to_string()))?;
        let file = File::options()
            .read(true)
            .append(true)
            .open(path)
            .map_err(|e| file_error(path, format!("cannot append to the report: {e}")))?;
        let entries = if keep { earlier } else { Vec::new() };
        let written = Written { file, end: report.len() as u64, spans, totals, entries };
        Ok(Journal { path: path.to_path_buf(), positions, keep, written: Mutex::new(written) })
    }

    /// Records an image whose outputs are all written.
    pub fn done(&self, mut report: ImageReport) -> Result<()> {
        report.index = self.positions[report.index];
        self.record(ImageEntry::Ok(report))
    }

    /// Records an image that failed.
    pub fn failed(&self, failed: &FailedImage) -> Result<()> {
        let (index, name, error) =
            (self.positions[failed.index], failed.name.clone(), failed.error.to_string());
        self.record(ImageEntry::Failed { index, name, error })
    }

    /// Appends the entry's rows to `report.csv` in one write (a process killed meanwhile leaves
    /// them whole or absent) and adds it to the totals.
    fn record(&self, entry: ImageEntry) -> Result<()> {
        let rows = csv_bytes(entry.rows());
        let mut written = lock(&self.written);
        written.file.write_all(&rows).map_err(|e| Error::File {
            path: self.path.clone(),
            message: format!("cannot append to the report: {e}"),
        })?;
        let offset = written.end;
        written.end += rows.len() as u64;
        written.spans.push(Span { index: entry.index(), offset, len: rows.len() });
        written.totals.add(&entry);
        if self.keep {
            written.entries.push(entry);
        }
        Ok(())
    }

    /// Rewrites `report.csv` in index order (its rows read back from the file as appended),
    /// whole or not at all ([`image_io::write_atomically`]); returns the totals and, if kept,
    /// every entry in index order.
    pub fn finish(self) -> Result<(Totals, Vec<ImageEntry>)> {
        let mut written = into_inner(self.written);
        written.spans.sort_by_key(|span| span.index);
        let file = &written.file;
        image_io::write_atomically(&self.path, |out| {
            out.write_all(&csv_bytes([CSV_HEADER.map(String::from)]))?;
            let mut rows = Vec::new();
            for span in &written.spans {
                rows.resize(span.len, 0);
                file.read_exact_at(&mut rows, span.offset)?;
                out.write_all(&rows)?;
            }
            Ok(())
        })
        .map_err(|e: std::io::Error| Error::File { path: self.path.clone(), message: e.to_string() })?;
        written.entries.sort_by_key(ImageEntry::index);
        Ok((written.totals, written.entries))
    }
}

/// `rows` as CSV (the `csv` crate quotes fields that need it).
fn csv_bytes(rows: impl IntoIterator<Item = [String; 11]>) -> Vec<u8> {
    let mut csv = csv::Writer::from_writer(Vec::new());
    for row in rows {
        csv.write_record(row).expect("writing to memory");
    }
    csv.into_inner().expect("writing to memory")
}

/// The sidecar of report `path` (`report.options.json` beside `report.csv`): the options its
/// rows were computed with, which `--resume` compares with its own.
pub fn options_path(path: &Path) -> PathBuf {
    path.with_extension("options.json")
}

/// What `--resume` compares: everything that changes an image's rows or files.
pub fn job_options(options: &JobOptions, outputs: &Outputs) -> serde_json::Value {
    serde_json::json!({
        "ranks": options.ranks,
        "check": options.check,
        "variant": options.variant,
        "png": outputs.png,
        "npy": outputs.npy,
        "mosaic": outputs.mosaic,
    })
}

/// The images of this job that an earlier run of it completed, which `--resume` skips: read from
/// the earlier `report` (written as a [`Journal`] goes, so it lists only complete images) when
/// its sidecar holds the same `options` ([`job_options`]); an image counts if every rank of
/// `ranks` has an `ok` row and every file `outputs` writes for it is in place (outputs are renamed
/// into place when complete, so a file there is whole). `names` are the job's images in order:
/// an entry's index is its place there, and images no longer in the job are dropped. `Err` says
/// why nothing can be resumed (no report, other options, a report this version does not read).
pub fn resumable(
    report: &Path,
    options: &serde_json::Value,
    names: &[String],
    ranks: &[usize],
    outputs: &Outputs,
) -> std::result::Result<Vec<ImageEntry>, String> {
    let sidecar = options_path(report);
    let earlier: serde_json::Value = std::fs::read_to_string(&sidecar)
        .map_err(|e| format!("{}: {e}", sidecar.display()))
        .and_then(|text| serde_json::from_str(&text).map_err(|e| format!("{}: {e}", sidecar.display())))?;
    if earlier != *options {
        return Err(format!("{} has other options ({earlier})", report.display()));
    }
    let mut reader = csv::Reader::from_path(report).map_err(|e| format!("{}: {e}", report.display()))?;
    let header = reader.headers().map_err(|e| format!("{}: {e}", report.display()))?;
    if header.iter().ne(CSV_HEADER) {
        return Err(format!("{}: not a report of this version (other columns)", report.display()));
    }
    let mut rows: HashMap<String, Vec<[String; 11]>> = HashMap::new();
    for record in reader.records() {
        // A row that does not parse was not written whole; its image is done again.
        let Ok(record) = record else { continue };
        let Ok(row) = <[String; 11]>::try_from(record.iter().map(String::from).collect::<Vec<_>>()) else {
            continue;
        };
        rows.entry(row[0].clone()).or_default().push(row);
    }
    let complete = |name: &str, rows: &[[String; 11]]| {
        let ks: Vec<&str> = rows.iter().map(|r| r[3].as_str()).collect();
        rows.iter().all(|r| r[9] == "ok")
            && ks.len() == ranks.len()
            && ranks.iter().all(|k| ks.contains(&k.to_string().as_str()))
            && outputs.files(name, ranks).iter().all(|f| f.is_file())
    };
    Ok(names
        .iter()
        .enumerate()
        .filter_map(|(index, name)| {
            let rows = rows.remove(name)?;
            complete(name, &rows).then(|| ImageEntry::Resumed { index, name: name.clone(), rows })
        })
        .collect())
}

/// A number for the CSV: exact (shortest round trip), in exponent form when small or large.
fn number(v: f64) -> String {
    if v == 0.0 || (1e-3..1e7).contains(&v.abs()) { v.to_string() } else { format!("{v:e}") }
}
