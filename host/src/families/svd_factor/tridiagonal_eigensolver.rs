//! The tridiagonal Ritz solver, all on the device: Householder tridiagonalisation
//! ([`kf::tridiagonal_reduce`], one thread block per image, the packed triangle in shared memory
//! where it fits, else in global scratch; or [`kf::tridiagonal_reduce_grid`], a group of blocks per
//! image meeting at grid barriers, for one image or a few; or in two stages, [`kf::band_reduce`]
//! to a band and [`kf::band_chase`] to tridiagonal form, chosen only by tests and benchmarks until
//! it is faster), the tridiagonal eigenproblem by divide
//! and conquer in one block per image ([`kf::tridiagonal_divide_and_conquer`]), the
//! back-transformation a warp per eigenvector over the whole GPU
//! ([`kf::tridiagonal_back_transform`]) — or, for one image, `Qᵀ` formed beside the divide and
//! conquer on a second queue ([`kf::tridiagonal_form_q`]) and the eigenvectors as one GEMM — and
//! the ordered pairs ([`kf::sorted_ritz_pairs`]).

use super::gemm::{Gemms, operand};
use super::ritz::{PairOrdering, RitzPairs, RitzSolver};
use crate::launch::device::{Backend, Buffer, BufferViewMut, Device, Queue};
use crate::launch::error::{Result, ensure};
use gpu_std::sim::{Dim3, LaunchConfig};
use kernels::svd_factor::{self as kf, Layout};

/// Most threads of the one-block kernels' blocks (their launch bounds: 512 threads within 128
/// registers).
const MAX_THREADS: u32 = 512;
/// Threads of the band reduction's blocks: 8 warps within 255 registers (a warp keeps a row of
/// the trailing matrix in registers).
const BAND_REDUCE_THREADS: u32 = 256;
/// Threads per block in the simulator (a thread per GPU thread: two warps).
const SIMULATOR_THREADS: u32 = 64;
/// Rows of the matrix per block of a grid reduction, where the GPU has multiprocessors to spare:
/// a warp each in a block of 8 warps (4 and 16 rows per block measure within 2% at `b = 128 …
/// 512` on an H100: the barrier, not the rows, bounds a column).
const GRID_ROWS_PER_BLOCK: u32 = 8;
/// Rows per block of the divide and conquer by a group of blocks (its eigenvector products
/// dealt to the blocks tile by tile).
const DIVIDE_AND_CONQUER_ROWS_PER_BLOCK: u32 = 16;
/// Smallest `b` the divide and conquer runs by a group of blocks at.
const DIVIDE_AND_CONQUER_GRID_MIN_B: usize = 96;
/// Smallest `b` the grid reduction is used at: at `b = 64` one block is faster (0.48 against
/// 0.54 ms for the whole solve on an H100), from `b = 128` the grid (1.18 against 1.24 ms; 2.08
/// against 2.55 at 200, 9.2 against 23.4 at 512).
const GRID_MIN_B: usize = 96;

/// Whether [`TridiagonalEigensolver::new`] forms `Qᵀ` beside the divide and conquer for a batch
/// of `images`: for one image, where it takes the back-transformation off the critical path
/// (1 × 200: 0.958 ms against 1.035 in place, H200); a batch's in-place back-transformation keeps
/// the GPU as busy (16 × 512: 7.13 ms against 7.08 beside it, 16 × 200: 1.39 against 1.43).
pub fn overlaps_back_transform(images: usize) -> bool {
    images == 1
}

/// Largest `b` the solver takes ([`kf::TRIDIAGONAL_MAX_B`]).
pub const TRIDIAGONAL_MAX_B: usize = kf::TRIDIAGONAL_MAX_B as usize;

/// How the solver's first stage, the Householder tridiagonalisation, runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TridiagonalReduction {
    /// One block per image ([`kf::tridiagonal_reduce`]), with this launch (grid `images`).
    OneBlock(LaunchConfig),
    /// A group of blocks per image meeting at grid barriers ([`kf::tridiagonal_reduce_grid`]),
    /// with this cooperative launch (grid `(groups, images)`).
    Grid(LaunchConfig),
    /// Two stages: to a band of half-bandwidth [`kf::BAND`] by a group of blocks per image
    /// ([`kf::band_reduce`], this cooperative launch, grid `(groups, images)`), then to tridiagonal
    /// form by bulge chasing in one block per image ([`kf::band_chase`]), whose reflectors
    /// [`kf::band_back_transform`] applies before the first stage's.
    TwoStage(LaunchConfig),
}

/// Householder tridiagonalisation, divide and conquer in one thread block per image, then the
/// back-transformation and the ordered pairs.
pub struct TridiagonalEigensolver {
    b: usize,
    images: usize,
    t: Buffer<f64>,
    scratch: Buffer<f64>,
    /// The eigenpairs' ordering into the Ritz pairs.
    ordering: PairOrdering,
    /// The grid barriers' counters, a `u32` per image for the reduction and one for the divide
    /// and conquer (zeroed before each solve).
    barriers: Buffer<u32>,
    reduction: TridiagonalReduction,
    /// The two-stage reduction's band, reflectors and panel work ([`kf::band_scratch`] per image).
    band_scratch: Option<Buffer<f64>>,
    /// The divide and conquer's launch.
    divide_and_conquer: LaunchConfig,
    /// Where set, the back-transformation overlaps the divide and conquer.
    overlap: Option<OverlappedBackTransform>,
}

/// The back-transformation beside the divide and conquer: `Qᵀ` of the reduction formed on a
/// queue of its own while the divide and conquer runs on the device's (both only read the
/// reflectors), then the eigenvectors `W·Qᵀ` as one GEMM. Its time leaves the solve's critical
/// path but for the GEMM.
struct OverlappedBackTransform {
    /// The queue `Qᵀ` is formed on.
    queue: Queue,
    /// `Qᵀ`, `b × b` per image (row `j` = `Q·e_j`), written on `queue`, read on the device's.
    q: Buffer<f64>,
}

impl TridiagonalEigensolver {
    /// Work space for `images` problems of `b × b`, and the reduction the GPU is best used by:
    /// from `b = 96`, a group of blocks per image where the multiprocessors give each image at
    /// least two ([`TridiagonalEigensolver::grid_reduction`]), else one block per image
    /// ([`TridiagonalEigensolver::one_block_reduction`]). One block per image in the simulator.
    pub fn new(device: &Device, b: usize, images: usize) -> Result<TridiagonalEigensolver> {
        let groups = if device.backend() == Backend::Gpu && b >= GRID_MIN_B {
            (b as u32).div_ceil(GRID_ROWS_PER_BLOCK).min(device.multiprocessors()? / images.max(1) as u32)
        } else {
            1
        };
        let reduction = if groups >= 2 {
            Self::grid_reduction(device, b, images, groups)?
        } else {
            Self::one_block_reduction(device, b, images)?
        };
        Self::with_reduction(device, b, images, reduction)
    }

    /// The one-block reduction's launch: as many threads as its registers allow (at most 512;
    /// 64 in the simulator), the packed matrix in shared memory where
    /// [`kf::tridiagonal_shared_bytes`] fits the device.
    pub fn one_block_reduction(device: &Device, b: usize, images: usize) -> Result<TridiagonalReduction> {
        let threads = if device.backend() == Backend::Gpu {
            device.max_threads_per_block(kf::TRIDIAGONAL_REDUCE.name())?.min(MAX_THREADS) / 32 * 32
        } else {
            SIMULATOR_THREADS
        };
        let shared_bytes = if kf::tridiagonal_shared_bytes(b as u32) <= device.max_shared_bytes_per_block()? {
            kf::tridiagonal_shared_bytes(b as u32)
        } else {
            kf::tridiagonal_small_bytes(b as u32)
        };
        Ok(TridiagonalReduction::OneBlock(LaunchConfig {
            grid: Dim3::x(images as u32),
            block: Dim3::x(threads),
            shared_bytes,
        }))
    }

    /// The grid reduction's launch with `groups` blocks per image: a warp per held row up to 16
    /// (at least 2; 64 threads in the simulator), the rows in shared memory where
    /// [`kf::tridiagonal_grid_shared_bytes`] fits the device, else all the shared memory a block
    /// may have (the rows move there once their part still to reduce fits).
    pub fn grid_reduction(
        device: &Device,
        b: usize,
        images: usize,
        groups: u32,
    ) -> Result<TridiagonalReduction> {
        let rows = kf::tridiagonal_grid_rows(b as u32, groups);
        let threads = if device.backend() == Backend::Gpu {
            let most =
                device.max_threads_per_block(kf::TRIDIAGONAL_REDUCE_GRID.name())?.min(MAX_THREADS) / 32;
            32 * rows.clamp(2, 16).min(most)
        } else {
            SIMULATOR_THREADS
        };
        let in_shared = kf::tridiagonal_grid_shared_bytes(b as u32, groups);
        let shared_bytes = in_shared.min(device.max_shared_bytes_per_block()? / 8 * 8);
        Ok(TridiagonalReduction::Grid(LaunchConfig {
            grid: Dim3::xy(groups, images as u32),
            block: Dim3::x(threads),
            shared_bytes,
        }))
    }

    /// The two-stage reduction's launch with `groups` blocks per image for the band (256 threads;
    /// 64 in the simulator); `b ≤` [`kf::BAND_CHASE_MAX_B`] and its shared memory within the
    /// device's.
    pub fn two_stage_reduction(
        device: &Device,
        b: usize,
        images: usize,
        groups: u32,
    ) -> Result<TridiagonalReduction> {
        let threads = if device.backend() == Backend::Gpu {
            device.max_threads_per_block(kf::BAND_REDUCE.name())?.min(BAND_REDUCE_THREADS) / 32 * 32
        } else {
            SIMULATOR_THREADS
        };
        Ok(TridiagonalReduction::TwoStage(LaunchConfig {
            grid: Dim3::xy(groups, images as u32),
            block: Dim3::x(threads),
            shared_bytes: kf::band_reduce_shared_bytes(b as u32),
        }))
    }

    /// As [`TridiagonalEigensolver::new`] with the reduction given (whole warps up to 512 threads,
    /// at least the kernel's least shared memory, the grid of its images): tests and benchmarks
    /// choose it with this.
    pub fn with_reduction(
        device: &Device,
        b: usize,
        images: usize,
        reduction: TridiagonalReduction,
    ) -> Result<TridiagonalEigensolver> {
        ensure((1..=TRIDIAGONAL_MAX_B).contains(&b), || {
            format!(
                "the tridiagonal eigensolver takes 1 ≤ b ≤ {TRIDIAGONAL_MAX_B} (the sizes it is tested at); b = {b}"
            )
        })?;
        let valid = match reduction {
            TridiagonalReduction::OneBlock(config) => {
                config.shared_bytes >= kf::tridiagonal_small_bytes(b as u32)
                    && config.grid == Dim3::x(images as u32)
            }
            TridiagonalReduction::Grid(config) => {
                config.shared_bytes >= kf::tridiagonal_grid_small_bytes(b as u32)
                    && config.grid.y as usize == images
                    && config.grid.z == 1
            }
            TridiagonalReduction::TwoStage(config) => {
                ensure(b <= kf::BAND_CHASE_MAX_B as usize, || {
                    format!("the two-stage reduction takes b ≤ {}; b = {b}", kf::BAND_CHASE_MAX_B)
                })?;
                ensure(config.shared_bytes <= device.max_shared_bytes_per_block()?, || {
                    format!(
                        "the two-stage reduction at b = {b} needs {} bytes of shared memory per block, more than the device's {}",
                        config.shared_bytes,
                        device.max_shared_bytes_per_block().unwrap_or(0)
                    )
                })?;
                config.shared_bytes >= kf::band_reduce_shared_bytes(b as u32)
                    && config.grid.y as usize == images
                    && config.grid.z == 1
                    && (64..=BAND_REDUCE_THREADS).contains(&config.block.x)
            }
        };
        let (TridiagonalReduction::OneBlock(config)
        | TridiagonalReduction::Grid(config)
        | TridiagonalReduction::TwoStage(config)) = reduction;
        ensure(
            valid && config.block.x.is_multiple_of(32) && (32..=MAX_THREADS).contains(&config.block.x),
            || format!("tridiagonal eigensolver: reduction {reduction:?} for {images} images of b = {b}"),
        )?;
        let threads = if device.backend() == Backend::Gpu {
            device.max_threads_per_block(kf::TRIDIAGONAL_DIVIDE_AND_CONQUER.name())?.min(MAX_THREADS) / 32
                * 32
        } else {
            SIMULATOR_THREADS
        };
        let groups = if device.backend() == Backend::Gpu && b >= DIVIDE_AND_CONQUER_GRID_MIN_B {
            (b as u32)
                .div_ceil(DIVIDE_AND_CONQUER_ROWS_PER_BLOCK)
                .min(device.multiprocessors()? / images.max(1) as u32)
        } else {
            1
        }
        .max(1);
        let divide_and_conquer = LaunchConfig {
            grid: Dim3::xy(groups, images as u32),
            block: Dim3::x(threads),
            shared_bytes: kf::divide_and_conquer_shared_bytes(b as u32),
        };
        Ok(TridiagonalEigensolver {
            b,
            images,
            t: device.alloc_temporary(device.queue(), images * b * b)?,
            scratch: device
                .alloc_temporary(device.queue(), images * kf::tridiagonal_scratch(b as u32) as usize)?,
            ordering: PairOrdering::new(device, b, images)?,
            barriers: device.alloc_temporary(device.queue(), 2 * images)?,
            band_scratch: match reduction {
                TridiagonalReduction::TwoStage(_) => Some(
                    device.alloc_temporary(device.queue(), images * kf::band_scratch(b as u32) as usize)?,
                ),
                _ => None,
            },
            reduction,
            divide_and_conquer,
            overlap: None,
        })
        .and_then(|solver| solver.with_overlapped_back_transform(device, overlaps_back_transform(images)))
    }

    /// The same solver with its back-transformation beside the divide and conquer (`overlapped`:
    /// `Qᵀ` on a second queue, then a GEMM; not after the two-stage reduction) or after it, in
    /// place: [`TridiagonalEigensolver::new`] overlaps it where [`overlaps_back_transform`] says;
    /// tests and benchmarks choose with this.
    pub fn with_overlapped_back_transform(
        mut self,
        device: &Device,
        overlapped: bool,
    ) -> Result<TridiagonalEigensolver> {
        // The two-stage reduction's chasing reflectors apply before the first stage's: in place.
        self.overlap = if overlapped && self.band_scratch.is_none() {
            Some(OverlappedBackTransform {
                queue: device.new_queue()?,
                // On the device's queue: allocated (and freed) in its order, used on the side
                // queue only between a wait for the device's queue and the device's wait for it.
                q: device.alloc_temporary(device.queue(), self.images * self.b * self.b)?,
            })
        } else {
            None
        };
        Ok(self)
    }

    /// The same solver with its divide and conquer run by `groups` blocks per image (one:
    /// a block per image; more: a cooperative launch): tests and benchmarks choose it with this.
    pub fn with_divide_and_conquer_groups(mut self, groups: u32) -> Result<TridiagonalEigensolver> {
        ensure(groups >= 1, || "the divide and conquer needs at least one block per image".to_string())?;
        self.divide_and_conquer.grid.x = groups;
        Ok(self)
    }

    /// The reduction's launch.
    pub fn reduction(&self) -> TridiagonalReduction {
        self.reduction
    }

    /// How the reduction runs, in words: its kernel and where it keeps the matrix.
    pub fn describe_reduction(&self) -> String {
        let b = self.b as u32;
        match self.reduction {
            TridiagonalReduction::OneBlock(config) => {
                let memory =
                    if config.shared_bytes >= kf::tridiagonal_shared_bytes(b) { "shared" } else { "global" };
                format!("one block per image, matrix in {memory} memory")
            }
            TridiagonalReduction::Grid(config) => {
                let memory = if config.shared_bytes >= kf::tridiagonal_grid_shared_bytes(b, config.grid.x) {
                    "shared"
                } else if config.shared_bytes > kf::tridiagonal_grid_small_bytes(b) {
                    "global, then shared"
                } else {
                    "global"
                };
                format!("{} blocks per image, rows in {memory} memory", config.grid.x)
            }
            TridiagonalReduction::TwoStage(config) => {
                format!(
                    "two stages: {} blocks per image to a band of {}, bulge chasing in one block",
                    config.grid.x,
                    kf::BAND
                )
            }
        }
    }

    /// How the divide and conquer and the back-transformation run, in words.
    pub fn describe_divide_and_conquer(&self) -> String {
        let blocks = match self.divide_and_conquer.grid.x {
            1 => "one block per image".to_string(),
            groups => format!("{groups} blocks per image"),
        };
        let back = if self.overlap.is_some() { "Qᵀ beside it, then a GEMM" } else { "then in place" };
        format!("{blocks}; back-transformation: {back}")
    }
}

impl RitzSolver for TridiagonalEigensolver {
    fn input(&mut self) -> Result<(BufferViewMut<'_, f64>, Layout)> {
        let b = self.b as u32;
        Ok((self.t.view_mut(..)?, Layout::row_major(b, b * b)))
    }

    unsafe fn solve(&mut self, device: &Device, pairs: &mut RitzPairs) -> Result<()> {
        let (b, images) = (self.b as u32, self.images as u32);
        device.fill(&mut self.barriers, 0)?;
        match self.reduction {
            // SAFETY: `t` and `scratch` are the solver's, sized for the batch (`b × b` and
            // `tridiagonal_scratch(b)` per image); the launch was checked in `with_reduction`
            // (whole warps, at most 512 threads, the vectors' shared memory, a block per image).
            TridiagonalReduction::OneBlock(config) => unsafe {
                device.launch(&kf::TRIDIAGONAL_REDUCE, config, (&self.t, b, &mut self.scratch))?
            },
            // SAFETY: as above; a cooperative launch of a group per image (`with_reduction`),
            // the barriers' counters zeroed on the same queue just before.
            TridiagonalReduction::Grid(config) => unsafe {
                device.launch_cooperative(
                    &kf::TRIDIAGONAL_REDUCE_GRID,
                    config,
                    (&self.t, b, &mut self.scratch, &mut self.barriers),
                )?
            },
            TridiagonalReduction::TwoStage(config) => {
                let band = self.band_scratch.as_mut().expect("the two-stage reduction's band scratch");
                // SAFETY: as above, `band` sized `band_scratch(b)` per image (`with_reduction`),
                // `b ≤ BAND_CHASE_MAX_B` and the band's shared memory checked there.
                unsafe {
                    device.launch_cooperative(
                        &kf::BAND_REDUCE,
                        config,
                        (&self.t, b, &mut self.scratch, &mut *band, &mut self.barriers),
                    )?
                };
                let shared_bytes = kf::band_chase_shared_bytes(b);
                let chase = LaunchConfig {
                    grid: Dim3::x(images),
                    block: Dim3::x(32 * kf::band_chase_warps(b)),
                    shared_bytes: if shared_bytes <= device.max_shared_bytes_per_block()? {
                        shared_bytes
                    } else {
                        0
                    },
                };
                // SAFETY: the band reduction ran on both scratches (queued before); a block per
                // image of the warps the schedule needs, the band in shared memory where it fits.
                unsafe { device.launch(&kf::BAND_CHASE, chase, (b, &mut self.scratch, &mut *band))? };
            }
        }
        // The back-transformation's launch: in place after the divide and conquer, or forming
        // `Qᵀ` beside it on the side queue once the reduction is done.
        let back = LaunchConfig {
            grid: Dim3 { x: b.div_ceil(kf::back_transform_vectors(b)), y: images, z: 1 },
            block: Dim3::x(32 * kf::BACK_TRANSFORM_WARPS),
            shared_bytes: kf::back_transform_shared_bytes(b),
        };
        let formed = match &mut self.overlap {
            Some(overlap) => {
                device.queue_wait(&overlap.queue, device.mark()?)?;
                // SAFETY: the reduction ran on the scratch (the side queue waits for it); the
                // kernel reads only its reflectors and τ, which the divide and conquer (on the
                // device's queue meanwhile) does not write; `q` holds `b × b` per image, and the
                // device's queue waits for this launch before anything reads or writes `q`.
                unsafe {
                    device.launch_on(
                        &overlap.queue,
                        &kf::TRIDIAGONAL_FORM_Q,
                        back,
                        (b, &self.scratch, &mut overlap.q),
                    )?
                };
                Some(device.mark_on(&overlap.queue)?)
            }
            None => None,
        };
        let config = self.divide_and_conquer;
        let counters = self.barriers.view_mut(self.images..)?;
        if config.grid.x > 1 {
            // SAFETY: the reduction ran on the scratch (queued before); a cooperative launch of a
            // group per image, whole warps up to 512 threads, the kernel's shared memory, the
            // counters zeroed before the reduction on the same queue.
            unsafe {
                device.launch_cooperative(
                    &kf::TRIDIAGONAL_DIVIDE_AND_CONQUER,
                    config,
                    (b, &mut self.scratch, counters),
                )?
            };
        } else {
            // SAFETY: as above, a block per image (no counter is read).
            unsafe {
                device.launch(
                    &kf::TRIDIAGONAL_DIVIDE_AND_CONQUER,
                    config,
                    (b, &mut self.scratch, counters),
                )?
            };
        }
        if let Some(band) = &self.band_scratch {
            let back = LaunchConfig {
                grid: Dim3::xy(b.div_ceil(kf::BAND_BACK_TRANSFORM_VECTORS), images),
                block: Dim3::x(32 * kf::BAND_BACK_TRANSFORM_VECTORS),
                shared_bytes: kf::band_back_transform_shared_bytes(b),
            };
            // SAFETY: the bulge chasing and the divide and conquer ran on the scratches (queued
            // before); every eigenvector of every image, the kernel's block and shared memory.
            unsafe { device.launch(&kf::BAND_BACK_TRANSFORM, back, (b, &mut self.scratch, band))? };
        }
        let parts = kf::tridiagonal_scratch_parts(b);
        let per_image = kf::tridiagonal_scratch(b);
        // Where the eigenvectors end, a row each: `W` in place, or `W·Qᵀ` in the divide and
        // conquer's (now free) work space.
        let rows_at = match formed.zip(self.overlap.as_ref()) {
            Some((formed, overlap)) => {
                device.queue_wait(device.queue(), formed)?;
                let (bu, n) = (self.b, self.images);
                let scratch = self.scratch.view_mut(..)?;
                // SAFETY: the GEMM reads `W` (`b × b` from `parts.w` of each image) through
                // this view and writes only `b × b` from `parts.work`, which it does not read.
                let w = unsafe { scratch.aliased_view() };
                let gemms = Gemms::new(device, n, device.backend() == Backend::Gpu);
                let tridiagonal_vectors =
                    operand(w.view(parts.w as usize..)?, Layout::row_major(b, per_image));
                let q = operand(overlap.q.view(..)?, Layout::row_major(b, b * b));
                // SAFETY: the divide and conquer (queued before) left `W`, `Qᵀ` is formed (the
                // queue waits for it); the result, `b × b` per image at `parts.work` of each
                // image's scratch, overlaps neither; all live until the queue has run it.
                unsafe {
                    gemms.product(
                        (tridiagonal_vectors, q),
                        (scratch.into_view_mut(parts.work as usize..)?, Layout::row_major(b, per_image)),
                        None,
                        (bu, bu, bu),
                        false,
                    )?
                };
                parts.work
            }
            None => {
                // SAFETY: the reduction and the divide and conquer ran on the scratch (queued
                // before); every eigenvector of every image in the grid, the kernel's block and
                // shared memory.
                unsafe { device.launch(&kf::TRIDIAGONAL_BACK_TRANSFORM, back, (b, &mut self.scratch))? };
                parts.w
            }
        };
        let values =
            (self.scratch.view(parts.values as usize..)?, Layout { row: 0, col: 1, batch: per_image });
        let vectors = (self.scratch.view(rows_at as usize..)?, Layout::row_major(b, per_image).transposed());
        // SAFETY: per image, the eigenvalues (`b` from `parts.values`) and the eigenvectors (rows
        // of `W`, `b × b` from `parts.w`: vector `j` is row `j`, hence the transposed layout) lie
        // inside the image's scratch; the pairs' buffers (sized from the same plan) live as the
        // caller promises.
        unsafe { self.ordering.write(device, values, vectors, pairs) }
    }
}
