//! What one batch of the GPU engine holds in device memory, known before the batch is taken, so
//! that the engine sizes each batch by the memory the device has free ([`room`]): a GPU is often
//! shared, with another process or a library's cache (PyTorch's) holding most of it.
//!
//! [`Footprint`] follows the buffers the engine (`gpu_engine`) and the factorisation
//! (`svd_factor`'s workspace and Ritz solvers) allocate, computed from the factorisation's
//! [`Plan`]. Where it falls short of what they take (they changed, or another process took memory
//! meanwhile), the engine's halving of a batch that runs out of memory still finishes the job;
//! `tests/svd_job.rs` checks that a batch runs within exactly its footprint.

use super::gpu_engine::quantised_on_device;
use super::images::{JobImage, JobOptions, Pixels};
use crate::families::svd::reconstruct::Variant;
use crate::families::svd_factor::{Plan, RitzMethod, overlaps_back_transform, squared_sum_blocks};
use crate::launch::device::{Backend, Device};
use crate::launch::error::Result;
use kernels::svd_factor as kf;

/// Device memory a GPU keeps free beyond the batches' buffers: the local memory the driver
/// reserves when a kernel needs more per thread than before, and the events and streams of a
/// profile. The simulator has no such costs.
pub const GPU_HEADROOM: u128 = 64 << 20;

/// The unit `cuMemAlloc` hands out a large buffer in (2 MiB pages): on a GPU every buffer is
/// counted rounded up to it.
const GPU_GRANULE: u128 = 2 << 20;

/// At least the Chebyshev filter's most steps (`svd_factor`'s `chebyshev::MAX_DEGREE`, 16): its
/// coefficients are three values per step and image.
const FILTER_STEPS: usize = 16;

/// The bytes the next batch may take on `device`: its free memory less [`GPU_HEADROOM`] on a GPU,
/// all of it in a simulator with a size; `None` where the free memory is unknown (a simulator
/// without a size), and batches are then bounded only by pixels and images.
pub fn room(device: &Device) -> Option<u128> {
    let (free, _) = device.free_memory()?;
    let headroom = if device.backend() == Backend::Gpu { GPU_HEADROOM } else { 0 };
    Some((free as u128).saturating_sub(headroom))
}

/// The device memory of a batch of the GPU engine of images shaped like one image, for any number
/// of them ([`Footprint::bytes`]).
pub struct Footprint<'a> {
    device: &'a Device,
    /// Each image's rows and columns.
    dims: (usize, usize),
    /// The largest rank: the triplets factored per image.
    k: usize,
    /// Bytes per pixel as uploaded (8-bit pixels as bytes, others as f32).
    pixel_bytes: usize,
    /// Ranks reconstructed, each with its own outputs.
    ranks: usize,
    /// Whether each rank also has its 8-bit pixels on the device.
    bytes_back: bool,
    /// The padded rank of the `wgmma` variants' temporary operands (`None` for the others).
    prepared_rank: Option<usize>,
    /// Multiprocessors, which decide the split-K GEMMs' partial sums.
    multiprocessors: u32,
    /// Every buffer counted rounded up to this (1: exact, in the simulator).
    granule: u128,
}

impl<'a> Footprint<'a> {
    /// The footprint of batches of images of `image`'s shape and pixel type on `device`, for
    /// `options`.
    pub fn of(device: &'a Device, image: &JobImage, options: &JobOptions) -> Result<Footprint<'a>> {
        let kmax = *options.ranks.last().expect("ranks checked non-empty");
        let wgmma = matches!(options.variant, Variant::Tf32Wgmma | Variant::Tf32x3Wgmma);
        Ok(Footprint {
            device,
            dims: image.pixels.dim(),
            k: kmax,
            pixel_bytes: match image.pixels {
                Pixels::Gray8 { .. } => 1,
                Pixels::Float(_) => 4,
            },
            ranks: options.ranks.len(),
            bytes_back: quantised_on_device(options),
            prepared_rank: wgmma.then(|| kernels::svd::prepared_row(kmax as u32) as usize),
            multiprocessors: device.multiprocessors()?,
            granule: if device.backend() == Backend::Gpu { GPU_GRANULE } else { 1 },
        })
    }

    /// The most device memory a batch of `images` takes at once, bytes: the images in f64 for the
    /// whole batch, and the largest of the upload (the pixels as they came), the factorisation
    /// (its workspace, the split-K GEMMs' partial sums and the factors as they are extracted) and
    /// the reconstruction (the factors and every rank's outputs and error sums, with the `wgmma`
    /// variants' temporary operands). The factorisation's plan for that many images decides its
    /// buffers (an error where it refuses the batch).
    pub fn bytes(&self, images: usize) -> Result<u128> {
        let plan = Plan::new(self.device, self.dims, images, self.k)?;
        let ((m, n), r, b, k) = (plan.dims, plan.r, plan.b, plan.k);
        let mn = m * n;
        let buffer = |len: usize, size: usize| (len as u128 * size as u128).next_multiple_of(self.granule);
        let f64s = |len: usize| buffer(len, 8);
        let f32s = |len: usize| buffer(len, 4);
        let images_f64 = f64s(images * mn);
        let upload = buffer(images * mn, self.pixel_bytes);
        let deflated = kf::DEFLATED_PAIRS;
        let workspace = f64s(images * r * r)
            + 2 * f64s(images * r * 2 * b)
            + 2 * f64s(images * b * b)
            + self.ritz_solver(&plan, images)
            + f64s(FILTER_STEPS * images * 3)
            + f64s(images * r * deflated)
            + f64s(images * deflated)
            + f64s(images * deflated * b)
            + f64s(images * squared_sum_blocks(mn))
            + f64s(images * kf::eigen_scratch(b as u32) as usize)
            + 3 * f64s(images * b)
            + f64s(images * b * b)
            + f64s(images * 2 * b)
            + f64s(images * b)
            + f64s(images * 3 * b)
            + buffer(images, 4)
            + self.split_parts(&plan, images);
        let factors = f32s(images * m * k) + f32s(images * k * n) + f32s(images * k);
        let factorisation = workspace + f64s(images * r * k) + factors;
        let per_rank = f32s(images * mn)
            + if self.bytes_back { buffer(images * mn, 1) } else { 0 }
            + f64s(images * squared_sum_blocks(mn));
        let temporaries = self.prepared_rank.map_or(0, |kp| f32s(images * m * kp) + f32s(images * n * kp));
        let reconstruction = factors + self.ranks as u128 * per_rank + temporaries;
        Ok(images_f64 + upload.max(factorisation).max(reconstruction))
    }

    /// The most images, up to `most`, whose batch takes at most `room` bytes (0 where not even one
    /// image's does; a batch the plan refuses does not fit), found in a few plans: the bytes grow
    /// with the images.
    pub fn images_within(&self, room: u128, most: usize) -> usize {
        let (mut fits, mut too_many) = (0, most + 1);
        while fits + 1 < too_many {
            let images = (fits + too_many) / 2;
            if self.bytes(images).is_ok_and(|bytes| bytes <= room) {
                fits = images;
            } else {
                too_many = images;
            }
        }
        fits
    }

    /// The Ritz solver's buffers of `plan` for `images` (`svd_factor`'s solvers).
    fn ritz_solver(&self, plan: &Plan, images: usize) -> u128 {
        let b = plan.b;
        let buffer = |len: usize, size: usize| (len as u128 * size as u128).next_multiple_of(self.granule);
        let f64s = |len: usize| buffer(len, 8);
        let ordering = f64s(images * kf::sorted_pairs_scratch(b as u32) as usize);
        match plan.ritz {
            RitzMethod::OneBlockJacobi => {
                f64s(images * b * b) + f64s(images * kf::eigen_scratch(b as u32) as usize)
            }
            RitzMethod::Host => f64s(images * b * b) + f64s(images * b) + ordering,
            RitzMethod::Tridiagonal => {
                // Beside the divide and conquer: `Qᵀ`, and the partial sums of the GEMM `W·Qᵀ`
                // where it splits (its own buffer, beside the factorisation's).
                let beside = if overlaps_back_transform(images) {
                    let split = plan.tensor_cores.then(|| self.split_len((b, b, b, false), images)).flatten();
                    f64s(images * b * b) + split.map_or(0, f64s)
                } else {
                    0
                };
                f64s(images * b * b)
                    + f64s(images * kf::tridiagonal_scratch(b as u32) as usize)
                    + ordering
                    + buffer(2 * images, 4)
                    + beside
            }
            RitzMethod::BlockJacobi => {
                let rows = plan.block_jacobi_rows;
                let padded = b.next_multiple_of(2 * rows);
                4 * f64s(images * padded * padded)
                    + f64s(images * padded * 2 * rows)
                    + buffer(images, 4)
                    + ordering
            }
        }
    }

    /// The split-K GEMMs' partial sums, on the tensor cores: one buffer per product shape that
    /// splits (`svd_factor`'s GEMMs keep the smaller ones they replaced until the factorisation
    /// ends), counting every product as if on the pipelined kernels, which alone split.
    fn split_parts(&self, plan: &Plan, images: usize) -> u128 {
        if !plan.tensor_cores {
            return 0;
        }
        let ((m, n), r, b, k) = (plan.dims, plan.r, plan.b, plan.k);
        let m_eff = m.max(n);
        // Every product of the factorisation: (rows, columns, inner, symmetric).
        let products = [
            (r, r, m_eff, true),
            (b, b, r, true),
            (r, b, b, false),
            (r, b, r, false),
            (r, k, b, false),
            (m_eff, k, r, false),
        ];
        let mut lens: Vec<usize> =
            products.iter().filter_map(|&product| self.split_len(product, images)).collect();
        lens.sort_unstable();
        lens.dedup();
        lens.into_iter().map(|len| (len as u128 * 8).next_multiple_of(self.granule)).sum()
    }

    /// The f64 partial sums of one `(rows, columns, inner, symmetric)` product over `images` on
    /// the pipelined kernels, where it splits along its inner dimension.
    fn split_len(
        &self,
        (rows, cols, inner, symmetric): (usize, usize, usize, bool),
        images: usize,
    ) -> Option<usize> {
        let (rows32, cols32) = (rows as u32, cols as u32);
        let tile = if kf::pgemm_wide(rows32, cols32) { kf::PGEMM_WIDE_TILE_N } else { kf::PGEMM_TILE_N };
        let splits = kf::pgemm_splits(
            rows32,
            cols32,
            inner as u32,
            images as u32,
            symmetric,
            self.multiprocessors,
            tile,
        );
        (splits > 1).then(|| splits as usize * images * rows * cols)
    }
}
