//! Rank-k reconstruction from a thin SVD: `out = (U[:, :k] · diag(s[:k])) · Vᵀ[:k, :]`.
//!
//! All matrices are f32, row-major. `u` is `m × k` with leading dimension `ldu ≥ k` (element
//! `U[i, p]` at `u[i·ldu + p]`), `s` holds `k` singular values, `vt` is `k × n` (element `Vᵀ[p, j]`
//! at `vt[p·n + j]`), and `out` is `m × n`. The scaling by `s` is fused into the loads of `U`
//! (of `Vᵀ` in [`svd_reconstruct_regtiled`]).
//! Any `m`, `n`, `k` work, multiples of the tile or not. On the 2-D grid, x is the column `j` and
//! y the row `i`; z the image of a batch ([`Batch`]).
//!
//! The kernels by form: `fp32.rs` (CUDA cores: `naive`, `tiled`, `regtiled`), `mma_sync.rs` (tensor
//! cores through `mma.sync`: `tf32`, `tf32x3`) and `wgmma.rs` (Hopper's warpgroup MMA: the
//! preparation, streaming and panel kernels), each with its tile helpers; this file holds what they
//! share (the batch strides, the tensor-core tile, the tf32 split) and the 8-bit quantisation.
//!
//! Host side: `host/src/families/svd.rs`; tests: `tests/svd.rs`; benchmark: `benches/svd.rs`.

use gpu_std::slice::{Slice, SliceMut};
use gpu_std::{kernel, math, mma, thread};

/// Repeats `$body` with `$i` bound to each listed `usize` constant: loop unrolling by hand, so that
/// every index into the register arrays (accumulators, fragments) is a constant.
macro_rules! unroll {
    ($i:ident in [$($v:literal),*] $body:block) => {$({
        let $i: usize = $v;
        $body
    })*};
}

/// Strides between the images of a batch, elements: image `z = blockIdx.z` reads `u + z·u`,
/// `s + z·s`, `vt + z·vt` and writes `out + z·out`. All zero for a single image.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Batch {
    /// Between the `U` matrices.
    pub u: u32,
    /// Between the singular value vectors.
    pub s: u32,
    /// Between the `Vᵀ` matrices.
    pub vt: u32,
    /// Between the outputs.
    pub out: u32,
}

impl Batch {
    /// The operands of image `z = blockIdx.z`: its `U` (`(m − 1)·ldu + k` elements), `s` (`k`),
    /// `Vᵀ` (`k·n`) and `out` (`m·n`), as views of the batch's slices. Unchecked on the GPU, like
    /// the kernels' accesses through them; the simulator checks the views and every access.
    ///
    /// # Safety
    /// The kernel's contract: every image of the batch lies inside the slices.
    #[inline(always)]
    #[track_caller]
    #[allow(clippy::too_many_arguments)]
    unsafe fn image(
        self,
        u: Slice<f32>,
        s: Slice<f32>,
        vt: Slice<f32>,
        out: SliceMut<f32>,
        m: u32,
        n: u32,
        k: u32,
        ldu: u32,
    ) -> (Slice<f32>, Slice<f32>, Slice<f32>, SliceMut<f32>) {
        let z = thread::block_idx_z() as usize;
        let (m, n, k, ldu) = (m as usize, n as usize, k as usize, ldu as usize);
        let u_len = if m == 0 { 0 } else { (m - 1) * ldu + k };
        // SAFETY: the caller's promise.
        unsafe {
            (
                u.sub_unchecked(z * self.u as usize, u_len),
                s.sub_unchecked(z * self.s as usize, k),
                vt.sub_unchecked(z * self.vt as usize, k * n),
                out.sub_unchecked(z * self.out as usize, m * n),
            )
        }
    }
}

/// Rows (of `out`) per block of the tensor-core kernels.
pub const MMA_TILE_M: u32 = 128;
/// Columns per block of the tensor-core kernels.
pub const MMA_TILE_N: u32 = 128;
/// Step along `k` per shared-memory stage of the tensor-core kernels (four m16n8k8 steps).
pub const MMA_TILE_K: u32 = 32;

/// An f32 as the sum of two tf32 operands, `big = tf32(x)` ([`mma::round_tf32`]: to nearest,
/// ties away) and `small = x − big` (exact). `small` is passed to the tensor cores as it is: they
/// read its tf32 bits, i.e. truncate it, an error below 2⁻¹⁰·|small| ≤ 2⁻²¹·|x|. Three integer/f32
/// instructions, no conversion.
#[inline(always)]
fn split_tf32(x: f32) -> (f32, f32) {
    let big = mma::round_tf32(x);
    (big, x - big)
}

mod fp32;
mod mma_sync;
mod wgmma;

pub use fp32::*;
pub use mma_sync::*;
pub use wgmma::*;

/// `dst[i] = round(clamp(src[i], 0, 1)·255)` (halves away from zero) for every `i < dst.len()`
/// (`src` at least as long): the bytes a PNG of the reconstruction stores, identical to the host's
/// `image_io::to_gray8(…, Scaling::Clamp)`, so that only a quarter of the bytes cross PCIe when
/// the job writes PNGs. The product is rounded in f32 as on the host; the rounding is done in
/// f64, where `x + 0.5` is exact. Any 1-D launch (grid-stride loop).
#[kernel]
pub fn quantize_gray8(src: &[f32], dst: &mut [u8]) {
    let src = src.sub(0, dst.len());
    let mut i = thread::index_1d() as usize;
    while i < dst.len() {
        let v = src[i].clamp(0.0, 1.0) * 255.0;
        dst[i] = math::floor(v as f64 + 0.5) as u8;
        i += thread::grid_stride_1d() as usize;
    }
}
