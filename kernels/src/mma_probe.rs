//! Probe kernels for the tests of [`gpu_std::mma`]: each runs one warp-level operation on small
//! matrices in global memory, so that the simulator and the GPU can be compared with a CPU
//! reference. Launch each with one block of one warp (32 threads) unless stated otherwise.
//!
//! Matrices are row-major: `A` is m × k, `B` is k × n (element `B[p, j]` at `b[p·n + j]`), `C` and
//! `D` are m × n. Each lane loads its fragment through the `*_coords` functions of [`gpu_std::mma`],
//! and stores its fragment of `D` the same way.

use gpu_std::mma::{self, m16n8_c_coords};
use gpu_std::slice::{Matrix, MatrixMut};
use gpu_std::{kernel, shared, thread, warp};

/// Loads this lane's four `C` elements of a 16 × 8 matrix.
#[inline(always)]
fn load_c16x8(c: Matrix<f32>, lane: u32) -> [f32; 4] {
    core::array::from_fn(|r| c[m16n8_c_coords(lane, r as u32)])
}

/// Stores this lane's four `D` elements of a 16 × 8 matrix.
#[inline(always)]
fn store_d16x8(mut d: MatrixMut<f32>, lane: u32, values: [f32; 4]) {
    for (r, value) in (0u32..).zip(values) {
        d[m16n8_c_coords(lane, r)] = value;
    }
}

/// `d = a·b + c` through [`mma::mma_tf32_m16n8k8`]: `a` 16 × 8, `b` 8 × 8, `c`, `d` 16 × 8. The
/// operands are passed as they are (no rounding to tf32).
#[kernel]
pub fn mma_tf32_probe(a: &[f32], b: &[f32], c: &[f32], d: &mut [f32]) {
    let lane = warp::lane_id();
    let (a, b) = (a.matrix(16, 8), b.matrix(8, 8));
    let af = core::array::from_fn(|r| a[mma::tf32_a_coords(lane, r as u32)]);
    let bf = core::array::from_fn(|r| b[mma::tf32_b_coords(lane, r as u32)]);
    store_d16x8(d.matrix(16, 8), lane, mma::mma_tf32_m16n8k8(af, bf, load_c16x8(c.matrix(16, 8), lane)));
}

/// Packs halves `2r` and `2r + 1` of a fragment (low half first).
#[inline(always)]
fn pack<const N: usize>(halves: [u16; N], r: usize) -> u32 {
    halves[2 * r] as u32 | (halves[2 * r + 1] as u32) << 16
}

/// The 16-bit fragments of `a` (16 × 16) and `b` (16 × 8) for the m16n8k16 operations.
#[inline(always)]
fn load_k16(a: Matrix<u16>, b: Matrix<u16>, lane: u32) -> ([u32; 4], [u32; 2]) {
    let ah: [u16; 8] = core::array::from_fn(|h| a[mma::m16n8k16_a_coords(lane, h as u32)]);
    let bh: [u16; 4] = core::array::from_fn(|h| b[mma::m16n8k16_b_coords(lane, h as u32)]);
    (core::array::from_fn(|r| pack(ah, r)), core::array::from_fn(|r| pack(bh, r)))
}

/// `d = a·b + c` through [`mma::mma_f16_m16n8k16`]: `a` 16 × 16 and `b` 16 × 8 as IEEE f16 bit
/// patterns, `c`, `d` 16 × 8 f32.
#[kernel]
pub fn mma_f16_probe(a: &[u16], b: &[u16], c: &[f32], d: &mut [f32]) {
    let lane = warp::lane_id();
    let (af, bf) = load_k16(a.matrix(16, 16), b.matrix(16, 8), lane);
    store_d16x8(d.matrix(16, 8), lane, mma::mma_f16_m16n8k16(af, bf, load_c16x8(c.matrix(16, 8), lane)));
}

/// `d = a·b + c` through [`mma::mma_bf16_m16n8k16`]: `a` 16 × 16 and `b` 16 × 8 as bfloat16 bit
/// patterns, `c`, `d` 16 × 8 f32.
#[kernel]
pub fn mma_bf16_probe(a: &[u16], b: &[u16], c: &[f32], d: &mut [f32]) {
    let lane = warp::lane_id();
    let (af, bf) = load_k16(a.matrix(16, 16), b.matrix(16, 8), lane);
    store_d16x8(d.matrix(16, 8), lane, mma::mma_bf16_m16n8k16(af, bf, load_c16x8(c.matrix(16, 8), lane)));
}

/// `d = a·b + c` through [`mma::mma_f64_m8n8k4`]: `a` 8 × 4, `b` 4 × 8, `c`, `d` 8 × 8, f64.
#[kernel]
pub fn mma_f64_probe(a: &[f64], b: &[f64], c: &[f64], d: &mut [f64]) {
    let lane = warp::lane_id();
    let (c, mut d) = (c.matrix(8, 8), d.matrix(8, 8));
    let av = a.matrix(8, 4)[mma::f64_a_coords(lane)];
    let bv = b.matrix(4, 8)[mma::f64_b_coords(lane)];
    let cv = core::array::from_fn(|r| c[mma::f64_c_coords(lane, r as u32)]);
    for (r, value) in (0u32..).zip(mma::mma_f64_m8n8k4(av, bv, cv)) {
        d[mma::f64_c_coords(lane, r)] = value;
    }
}

/// `y[i] = to_tf32(x[i])` for every `i < y.len()` (`x` at least as long) ([`mma::to_tf32`]). Any
/// 1-D launch (grid-stride loop).
#[kernel]
pub fn tf32_round_probe(x: &[f32], y: &mut [f32]) {
    let x = x.sub(0, y.len());
    let mut i = thread::index_1d() as usize;
    while i < y.len() {
        y[i] = mma::to_tf32(x[i]);
        i += thread::grid_stride_1d() as usize;
    }
}

/// Copies 64 floats of `src` into shared memory with `cp.async` in three groups — floats 0..32 as
/// 16-byte copies, 32..48 as 8-byte, 48..64 as 4-byte — reading only the first `valid` floats
/// (the rest zero-filled), waits for the groups one by one, then writes the shared copy to `dst`.
/// One block of 16 threads, 256 bytes of dynamic shared memory; `src` aligned to 16 bytes.
///
/// # Safety
/// `src` holds `valid ≤ 64` floats (the copies read them unchecked) and is 16-byte aligned; the
/// launch is as stated.
#[kernel]
pub unsafe fn cp_async_probe(src: &[f32], dst: &mut [f32], valid: u32) {
    let t = thread::thread_idx_x();
    let tile = shared::region::<f32>(0, 64);
    let base = mma::shared_address(tile.as_ptr());
    let bytes = |first: u32, count: u32| valid.saturating_sub(first).min(count) * 4;
    let at = |first: u32| if bytes(first, 1) > 0 { src.as_ptr().add(first as usize) } else { src.as_ptr() };
    // Group 1: 8 × 16 bytes (threads 0..8).
    if t < 8 {
        mma::cp_async_16(base + 16 * t, at(4 * t), bytes(4 * t, 4));
    }
    mma::cp_async_commit_group();
    // Group 2: 8 × 8 bytes (threads 0..8).
    if t < 8 {
        let first = 32 + 2 * t;
        mma::cp_async_8(base + 4 * first, at(first), bytes(first, 2));
    }
    mma::cp_async_commit_group();
    // Group 3: 16 × 4 bytes.
    let first = 48 + t;
    mma::cp_async_4(base + 4 * first, at(first), bytes(first, 1));
    mma::cp_async_commit_group();
    mma::cp_async_wait_group::<2>();
    mma::cp_async_wait_group::<1>();
    mma::cp_async_wait_group::<0>();
    thread::sync_threads();
    let mut dst = dst.sub(0, 64);
    for q in 0..4 {
        let i = (q * 16 + t) as usize;
        dst[i] = tile.read(i);
    }
}

/// Dynamic shared memory of [`wgmma_tf32_probe`], bytes: the 64-row `A` tile and the 128-row `B`
/// tile in the 128-byte-swizzled layout, and one atom for alignment.
pub const WGMMA_PROBE_SHARED_BYTES: u32 = (64 + 128) * mma::WGMMA_ROW_BYTES + mma::WGMMA_ATOM_BYTES;

/// `d = a·bᵀ + c` through one warpgroup MMA: `a` 64 × 8, `b` 128 × 8 (`Bᵀ`, K-major as `wgmma`
/// reads it), `c`, `d` 64 × 128. The block stores both operands into swizzled shared tiles
/// ([`mma::sw128_offset`]), then runs [`mma::wgmma_tf32_m64n128k8`] or, with
/// `a_from_registers ≠ 0`, [`mma::wgmma_tf32_m64n128k8_rs`] with `A` loaded into registers through
/// [`mma::wgmma_m64_a_coords`]. The operands are passed as they are (the tensor cores truncate them
/// to tf32). One block of one warpgroup (128 threads), [`WGMMA_PROBE_SHARED_BYTES`] of dynamic
/// shared memory. Only in the sm_90a module.
///
/// # Safety
/// The launch is as stated (the shared tiles are written unchecked).
#[cfg(any(not(target_arch = "nvptx64"), target_feature = "sm_90a"))]
#[kernel]
pub unsafe fn wgmma_tf32_probe(a: &[f32], b: &[f32], c: &[f32], d: &mut [f32], a_from_registers: u32) {
    let (a, b) = (a.matrix(64, 8), b.matrix(128, 8));
    let (c, mut d) = (c.matrix(64, 128), d.matrix(64, 128));
    let tid = thread::thread_idx_x();
    let smem = shared::region::<f32>(0, (WGMMA_PROBE_SHARED_BYTES / 4) as usize);
    let raw = mma::shared_address(smem.as_ptr());
    let a_tile = raw + raw.wrapping_neg() % mma::WGMMA_ATOM_BYTES;
    let b_tile = a_tile + 64 * mma::WGMMA_ROW_BYTES;
    let word = |tile: u32, row: u32, kk: u32| ((tile - raw + mma::sw128_offset(row, kk)) / 4) as usize;
    let mut e = tid;
    while e < 128 * 8 {
        if e < 64 * 8 {
            smem.write(word(a_tile, e / 8, e % 8), a[(e / 8, e % 8)]);
        }
        smem.write(word(b_tile, e / 8, e % 8), b[(e / 8, e % 8)]);
        e += 128;
    }
    mma::fence_proxy_async_shared();
    thread::sync_threads();
    let mut acc: [f32; 64] = core::array::from_fn(|r| c[mma::wgmma_m64_c_coords(tid, r as u32)]);
    let a_fragment: [f32; 4] = core::array::from_fn(|r| a[mma::wgmma_m64_a_coords(tid, r as u32)]);
    let b_descriptor = mma::wgmma_descriptor_sw128(b_tile);
    mma::wgmma_fence();
    if a_from_registers != 0 {
        mma::wgmma_tf32_m64n128k8_rs(&mut acc, a_fragment, b_descriptor);
    } else {
        mma::wgmma_tf32_m64n128k8(&mut acc, mma::wgmma_descriptor_sw128(a_tile), b_descriptor);
    }
    mma::wgmma_commit_group();
    mma::wgmma_wait_group::<0>();
    for (r, value) in (0u32..).zip(acc) {
        d[mma::wgmma_m64_c_coords(tid, r)] = value;
    }
}
