//! The tridiagonal Ritz solver, all on the device: Householder tridiagonalisation in one thread
//! block per image ([`kf::tridiagonal_reduce`]: the packed triangle in shared memory where it fits,
//! else in global scratch), the tridiagonal eigenproblem by divide and conquer in one block per
//! image ([`kf::tridiagonal_divide_and_conquer`]), the back-transformation a warp per eigenvector
//! over the whole GPU ([`kf::tridiagonal_back_transform`]) and the ordered pairs
//! ([`kf::sorted_ritz_pairs`]).

use super::ritz::{RitzPairs, RitzSolver};
use crate::launch::device::{Backend, Buffer, BufferViewMut, Device};
use crate::launch::error::{Result, ensure};
use gpu_std::sim::{Dim3, LaunchConfig};
use kernels::svd_factor::{self as kf, Layout};

/// Most threads of the one-block kernels' blocks (their launch bounds: 512 threads within 128
/// registers).
const MAX_THREADS: u32 = 512;
/// Threads per block in the simulator (a thread per GPU thread: two warps).
const SIMULATOR_THREADS: u32 = 64;

/// Largest `b` the solver takes ([`kf::TRIDIAGONAL_MAX_B`]).
pub const TRIDIAGONAL_MAX_B: usize = kf::TRIDIAGONAL_MAX_B as usize;

/// Householder tridiagonalisation and divide and conquer in one thread block per image, then the
/// back-transformation and the ordered pairs.
pub struct TridiagonalEigensolver {
    b: usize,
    images: usize,
    t: Buffer<f64>,
    scratch: Buffer<f64>,
    /// [`kf::sorted_ritz_pairs`]'s work space, `2b` per image.
    order: Buffer<f64>,
    /// The reduction's launch.
    config: LaunchConfig,
    /// The divide and conquer's launch.
    divide_and_conquer: LaunchConfig,
}

/// Warps per block of [`kf::tridiagonal_back_transform`] (a warp per eigenvector): two, so that
/// `b = 200` already spreads over 100 blocks.
const BACK_TRANSFORM_WARPS: u32 = 2;

impl TridiagonalEigensolver {
    /// Work space for `images` problems of `b × b`, and the launch: one block per image, as many
    /// threads as its registers allow (at most 512; 64 in the simulator), the packed matrix in
    /// shared memory where [`kf::tridiagonal_shared_bytes`] fits the device.
    pub fn new(device: &Device, b: usize, images: usize) -> Result<TridiagonalEigensolver> {
        let threads = if device.backend() == Backend::Gpu {
            device.max_threads_per_block(kf::TRIDIAGONAL_REDUCE.name())?.min(MAX_THREADS) / 32 * 32
        } else {
            SIMULATOR_THREADS
        };
        let config = LaunchConfig {
            grid: Dim3::x(images as u32),
            block: Dim3::x(threads),
            shared_bytes: Self::shared_bytes(device, b)?,
        };
        Self::with_config(device, b, images, config)
    }

    /// As [`TridiagonalEigensolver::new`] with the reduction's launch given (one block per image,
    /// a whole number of warps up to 512 threads, at least [`kf::tridiagonal_small_bytes`]`(b)` of
    /// shared memory): tests force the global-memory path with it.
    pub fn with_config(
        device: &Device,
        b: usize,
        images: usize,
        config: LaunchConfig,
    ) -> Result<TridiagonalEigensolver> {
        ensure(b <= TRIDIAGONAL_MAX_B, || {
            format!(
                "the tridiagonal eigensolver takes b ≤ {TRIDIAGONAL_MAX_B} (the sizes it is tested at); b = {b}"
            )
        })?;
        ensure(
            config.block.x.is_multiple_of(32)
                && (32..=MAX_THREADS).contains(&config.block.x)
                && config.shared_bytes >= kf::tridiagonal_small_bytes(b as u32)
                && config.grid.x as usize == images,
            || format!("tridiagonal eigensolver: launch {config:?} for {images} images of b = {b}"),
        )?;
        let threads = if device.backend() == Backend::Gpu {
            device.max_threads_per_block(kf::TRIDIAGONAL_DIVIDE_AND_CONQUER.name())?.min(MAX_THREADS) / 32
                * 32
        } else {
            SIMULATOR_THREADS
        };
        let divide_and_conquer = LaunchConfig {
            grid: Dim3::x(images as u32),
            block: Dim3::x(threads),
            shared_bytes: kf::divide_and_conquer_shared_bytes(b as u32),
        };
        Ok(TridiagonalEigensolver {
            b,
            images,
            t: device.alloc(images * b * b)?,
            scratch: device.alloc(images * kf::tridiagonal_scratch(b as u32) as usize)?,
            order: device.alloc(images * 2 * b)?,
            config,
            divide_and_conquer,
        })
    }

    /// Dynamic shared memory of the launch: the packed matrix and the vectors where they fit,
    /// else the vectors only.
    pub fn shared_bytes(device: &Device, b: usize) -> Result<u32> {
        Ok(if Self::fits_shared_memory(device, b)? {
            kf::tridiagonal_shared_bytes(b as u32)
        } else {
            kf::tridiagonal_small_bytes(b as u32)
        })
    }

    /// Whether a `b × b` matrix fits in one block's shared memory on `device` (`b ≤ 234` on an
    /// H100, and in the simulator, which reports the H100's 227 KiB), where the reduction runs
    /// fastest.
    pub fn fits_shared_memory(device: &Device, b: usize) -> Result<bool> {
        Ok(kf::tridiagonal_shared_bytes(b as u32) <= device.max_shared_bytes_per_block()?)
    }

    /// Whether the matrix lies in shared memory in this solver's launches.
    pub fn in_shared_memory(&self) -> bool {
        self.config.shared_bytes >= kf::tridiagonal_shared_bytes(self.b as u32)
    }

    /// The reduction's launch.
    pub fn config(&self) -> LaunchConfig {
        self.config
    }
}

impl RitzSolver for TridiagonalEigensolver {
    fn input(&mut self) -> Result<(BufferViewMut<'_, f64>, Layout)> {
        let b = self.b as u32;
        Ok((self.t.view_mut(..)?, Layout::row_major(b, b * b)))
    }

    unsafe fn solve(&mut self, device: &Device, pairs: &mut RitzPairs) -> Result<()> {
        let (b, images) = (self.b as u32, self.images as u32);
        // SAFETY: `t` and `scratch` are the solver's, sized for the batch (`b × b` and
        // `tridiagonal_scratch(b)` per image); the launch was checked in `with_config` (whole
        // warps, at most 512 threads, the vectors' shared memory, a block per image).
        unsafe { device.launch(&kf::TRIDIAGONAL_REDUCE, self.config, (&self.t, b, &mut self.scratch))? };
        // SAFETY: the reduction ran on the scratch (queued before); a block per image, whole
        // warps up to 512 threads, the kernel's shared memory (`new`).
        unsafe {
            device.launch(
                &kf::TRIDIAGONAL_DIVIDE_AND_CONQUER,
                self.divide_and_conquer,
                (b, &mut self.scratch),
            )?
        };
        let back = LaunchConfig {
            grid: Dim3 { x: b.div_ceil(BACK_TRANSFORM_WARPS), y: images, z: 1 },
            block: Dim3::x(32 * BACK_TRANSFORM_WARPS),
            shared_bytes: 0,
        };
        // SAFETY: the reduction and the divide and conquer ran on the scratch (queued before); a warp per eigenvector
        // of every image.
        unsafe { device.launch(&kf::TRIDIAGONAL_BACK_TRANSFORM, back, (b, &mut self.scratch))? };
        let parts = kf::tridiagonal_scratch_parts(b);
        let per_image = kf::tridiagonal_scratch(b);
        let order = LaunchConfig { grid: Dim3::x(images), block: Dim3::x(256), shared_bytes: 0 };
        let RitzPairs { theta, sigma, inv_sigma, vectors } = pairs;
        // SAFETY: per image, the eigenvalues (`b` from `parts.values`) and the eigenvectors (rows
        // of `W`, `b × b` from `parts.w`: vector `j` is row `j`, hence the transposed layout) lie
        // inside the image's scratch; `order` holds `2b` per image; the pairs' buffers (sized from
        // the same plan) live as the caller promises.
        unsafe {
            device.launch(
                &kf::SORTED_RITZ_PAIRS,
                order,
                (
                    self.scratch.view(parts.values as usize..)?,
                    Layout { row: 0, col: 1, batch: per_image },
                    self.scratch.view(parts.w as usize..)?,
                    Layout::row_major(b, per_image).transposed(),
                    b,
                    &mut self.order,
                    theta,
                    sigma,
                    inv_sigma,
                    vectors,
                ),
            )
        }
    }
}
