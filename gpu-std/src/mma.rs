//! Tensor cores and asynchronous copies: warp-level matrix multiply-accumulate (`mma.sync`), the
//! f32 → tf32 conversion and `cp.async` global → shared copies, through inline PTX. Needs sm_80.
//!
//! # Warp-level MMA
//!
//! `D = A·B + C` for one small matrix product per warp: all 32 lanes call the same function
//! together (converged, as for [`crate::warp`]), each passing its *fragment* — the few elements of
//! `A`, `B` and `C` it holds — and each receiving its fragment of `D`. Which lane holds which
//! element is fixed by the hardware (PTX ISA, "Matrix Fragments for mma.m16n8k8 / m16n8k16 /
//! m8n8k4"); the `*_coords` functions below give it, with `g = lane / 4` (the group) and
//! `t = lane % 4` (the thread in the group):
//!
//! | operation | operand | registers | element of register `r` (row, column) |
//! |---|---|---|---|
//! | [`mma_tf32_m16n8k8`] | `A` 16×8 | 4 × tf32 | `(g + 8·(r % 2), t + 4·(r / 2))` |
//! | | `B` 8×8 (k × n) | 2 × tf32 | `(t + 4·r, g)` |
//! | [`mma_f16_m16n8k16`], [`mma_bf16_m16n8k16`] | `A` 16×16 | 4 × 2 halves, element `h` = register `h/2`, low half first | `(g + 8·((h/2) % 2), 2t + h % 2 + 8·(h / 4))` |
//! | | `B` 16×8 (k × n) | 2 × 2 halves | `(2t + h % 2 + 8·(h / 2), g)` |
//! | all three | `C`, `D` 16×8 | 4 × f32 | `(g + 8·(r / 2), 2t + r % 2)` |
//! | [`mma_f64_m8n8k4`] | `A` 8×4 | 1 × f64 | `(g, t)` |
//! | | `B` 4×8 (k × n) | 1 × f64 | `(t, g)` |
//! | | `C`, `D` 8×8 | 2 × f64 | `(g, 2t + r)` |
//!
//! TF32 is f32 with a 10-bit mantissa (the low 13 bits zero): [`to_tf32`] rounds to it. The tensor
//! cores read only the tf32 bits of an f32 operand, so kernels convert first; products of tf32
//! (or f16, bf16) values are exact in f32 and are accumulated in f32.
//!
//! # Asynchronous copies
//!
//! [`cp_async_16`] (`cp.async.cg`, bypassing L1), [`cp_async_8`] and [`cp_async_4`] (`cp.async.ca`)
//! start a copy of 16, 8 or 4 bytes from global to shared memory without passing through
//! registers; `src_bytes` of them are read and the rest of the destination is zero-filled (0 reads
//! nothing: the way to pad edge tiles). Copies issued since the last [`cp_async_commit_group`] form a
//! group; [`cp_async_wait_group`]`::<N>()` waits until at most `N` groups of this thread are still in
//! flight. Another thread sees the data only after a barrier following the wait. Destinations are
//! shared-window addresses from [`shared_address`]. On sm_90, [`cp_async_bulk_store_streaming`]
//! goes the other way, from shared to global memory, many bytes at once through the copy engine.
//!
//! # Matrix loads
//!
//! [`ldmatrix_x4`] loads a warp's fragments of four 8 × 8 16-bit (or 8 × 4 32-bit) matrices from
//! shared memory in one instruction, each lane naming one row.
//!
//! # In the simulator
//!
//! Each MMA gathers the 32 lanes' fragments (all 32 lanes of the warp must be present), builds `A`
//! and `B`, and gives each lane its elements of `D`, computed from the exact products summed in f64
//! and rounded once to f32 (tf32 operands are first truncated to their tf32 bits, as the hardware
//! reads them). The hardware's order of accumulation inside one MMA is not specified, so GPU results
//! may differ from the simulator's in the last bits. An `ldmatrix` gathers the lanes' row
//! addresses and reads shared memory as the hardware does. A `cp.async` is a synchronous copy (with
//! the same zero fill), and so is a bulk copy; the waits are no-ops; shared-window addresses are
//! byte offsets into the block's dynamic shared memory, checked against its size.

#[cfg(not(target_arch = "nvptx64"))]
use crate::warp::lane_id;

/// Rounds `x` to tf32 (`cvt.rna.tf32.f32`): the nearest value with a 10-bit mantissa, ties away
/// from zero, returned as an f32 whose low 13 bits are zero. Infinities stay, NaN stays NaN, and a
/// value that rounds past `f32::MAX` becomes infinite.
#[inline(always)]
pub fn to_tf32(x: f32) -> f32 {
    #[cfg(target_arch = "nvptx64")]
    {
        let out: u32;
        // SAFETY: a register-to-register conversion.
        unsafe {
            core::arch::asm!("cvt.rna.tf32.f32 {}, {};", out(reg32) out, in(reg32) x.to_bits());
        }
        f32::from_bits(out)
    }
    #[cfg(not(target_arch = "nvptx64"))]
    {
        if x.is_nan() {
            return f32::NAN;
        }
        // Sign and magnitude: adding half of the dropped range rounds the magnitude half away.
        f32::from_bits((x.to_bits() + 0x1000) & !0x1fff)
    }
}

/// [`to_tf32`] in two integer instructions (add half of the dropped range to the bits, clear the
/// low 13): the same result for every finite or infinite `x`. ptxas emulates `cvt.rna.tf32.f32` on
/// sm_90 with a test for infinity and a predicated add, twice the instructions, which matters where a
/// kernel rounds every element it stages. A NaN whose payload lies only in the low 13 bits becomes
/// infinite.
#[inline(always)]
pub fn round_tf32(x: f32) -> f32 {
    f32::from_bits(x.to_bits().wrapping_add(0x1000) & !0x1fff)
}

/// Element `(row, column)` of the 16 × 8 `A` held in register `r` (0..4) of `lane` for
/// [`mma_tf32_m16n8k8`].
#[inline(always)]
pub fn tf32_a_coords(lane: u32, r: u32) -> (u32, u32) {
    (lane / 4 + 8 * (r % 2), lane % 4 + 4 * (r / 2))
}

/// Element `(row, column)` of the 8 × 8 `B` (k × n) held in register `r` (0..2) of `lane` for
/// [`mma_tf32_m16n8k8`].
#[inline(always)]
pub fn tf32_b_coords(lane: u32, r: u32) -> (u32, u32) {
    (lane % 4 + 4 * r, lane / 4)
}

/// Element `(row, column)` of the 16 × 8 `C`/`D` held in register `r` (0..4) of `lane` for the
/// m16n8 operations ([`mma_tf32_m16n8k8`], [`mma_f16_m16n8k16`], [`mma_bf16_m16n8k16`]).
#[inline(always)]
pub fn m16n8_c_coords(lane: u32, r: u32) -> (u32, u32) {
    (lane / 4 + 8 * (r / 2), 2 * (lane % 4) + r % 2)
}

/// Element `(row, column)` of the 16 × 16 `A` held in half `h` (0..8) of `lane` for the m16n8k16
/// operations: register `h / 2`, the low 16 bits for even `h`.
#[inline(always)]
pub fn m16n8k16_a_coords(lane: u32, h: u32) -> (u32, u32) {
    (lane / 4 + 8 * ((h / 2) % 2), 2 * (lane % 4) + h % 2 + 8 * (h / 4))
}

/// Element `(row, column)` of the 16 × 8 `B` (k × n) held in half `h` (0..4) of `lane` for the
/// m16n8k16 operations: register `h / 2`, the low 16 bits for even `h`.
#[inline(always)]
pub fn m16n8k16_b_coords(lane: u32, h: u32) -> (u32, u32) {
    (2 * (lane % 4) + h % 2 + 8 * (h / 2), lane / 4)
}

/// Element `(row, column)` of the 8 × 4 `A` held by `lane` for [`mma_f64_m8n8k4`].
#[inline(always)]
pub fn f64_a_coords(lane: u32) -> (u32, u32) {
    (lane / 4, lane % 4)
}

/// Element `(row, column)` of the 4 × 8 `B` (k × n) held by `lane` for [`mma_f64_m8n8k4`].
#[inline(always)]
pub fn f64_b_coords(lane: u32) -> (u32, u32) {
    (lane % 4, lane / 4)
}

/// Element `(row, column)` of the 8 × 8 `C`/`D` held in register `r` (0..2) of `lane` for
/// [`mma_f64_m8n8k4`].
#[inline(always)]
pub fn f64_c_coords(lane: u32, r: u32) -> (u32, u32) {
    (lane / 4, 2 * (lane % 4) + r)
}

/// `D = A·B + C` with `A` 16 × 8 and `B` 8 × 8 in tf32, `C`, `D` in f32
/// (`mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32`). Fragments as in the module table;
/// operands should already be tf32 ([`to_tf32`]). Every lane of the warp must call it together.
#[inline(always)]
pub fn mma_tf32_m16n8k8(a: [f32; 4], b: [f32; 2], c: [f32; 4]) -> [f32; 4] {
    #[cfg(target_arch = "nvptx64")]
    {
        let d: [u32; 4];
        // SAFETY: a warp-collective register operation; the caller keeps the warp converged.
        unsafe {
            let (d0, d1, d2, d3): (u32, u32, u32, u32);
            core::arch::asm!(
                "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {{{}, {}, {}, {}}}, {{{}, {}, {}, {}}}, {{{}, {}}}, {{{}, {}, {}, {}}};",
                out(reg32) d0, out(reg32) d1, out(reg32) d2, out(reg32) d3,
                in(reg32) a[0].to_bits(), in(reg32) a[1].to_bits(), in(reg32) a[2].to_bits(), in(reg32) a[3].to_bits(),
                in(reg32) b[0].to_bits(), in(reg32) b[1].to_bits(),
                in(reg32) c[0].to_bits(), in(reg32) c[1].to_bits(), in(reg32) c[2].to_bits(), in(reg32) c[3].to_bits(),
            );
            d = [d0, d1, d2, d3];
        }
        d.map(f32::from_bits)
    }
    #[cfg(not(target_arch = "nvptx64"))]
    {
        let word = |x: f32, y: f32| x.to_bits() as u64 | (y.to_bits() as u64) << 32;
        let all = crate::sim::warp_gather([word(a[0], a[1]), word(a[2], a[3]), word(b[0], b[1])]);
        let reg = |words: &[u64; 3], r: u32| {
            let bits = (words[r as usize / 2] >> (32 * (r % 2))) as u32;
            f32::from_bits(bits & !0x1fff) as f64
        };
        let mut am = [[0.0f64; 8]; 16];
        let mut bm = [[0.0f64; 8]; 8];
        for (lane, words) in (0u32..).zip(all.iter()) {
            for r in 0..4 {
                let (i, p) = tf32_a_coords(lane, r);
                am[i as usize][p as usize] = reg(words, r);
            }
            for r in 0..2 {
                let (p, j) = tf32_b_coords(lane, r);
                bm[p as usize][j as usize] = reg(words, 4 + r);
            }
        }
        m16n8_own(&am, &bm, c)
    }
}

/// This lane's four elements of `A·B + C` for an m16n8 product, summed in f64, rounded once.
#[cfg(not(target_arch = "nvptx64"))]
fn m16n8_own<const K: usize>(a: &[[f64; K]; 16], b: &[[f64; 8]; K], c: [f32; 4]) -> [f32; 4] {
    let lane = lane_id();
    core::array::from_fn(|r| {
        let (i, j) = m16n8_c_coords(lane, r as u32);
        let sum: f64 = (0..K).map(|p| a[i as usize][p] * b[p][j as usize]).sum();
        (sum + c[r] as f64) as f32
    })
}

/// Half `h` (0 low, 1 high) of a register of two packed 16-bit values.
#[cfg(not(target_arch = "nvptx64"))]
fn half(word: u32, h: u32) -> u16 {
    (word >> (16 * h)) as u16
}

/// IEEE binary16 to f64 (exact).
#[cfg(not(target_arch = "nvptx64"))]
fn f16_to_f64(bits: u16) -> f64 {
    let sign = if bits & 0x8000 != 0 { -1.0 } else { 1.0 };
    let exp = ((bits >> 10) & 0x1f) as i32;
    let man = (bits & 0x3ff) as f64;
    sign * match exp {
        0 => man * 2f64.powi(-24),
        31 if man == 0.0 => f64::INFINITY,
        31 => f64::NAN,
        _ => (1024.0 + man) * 2f64.powi(exp - 25),
    }
}

/// bfloat16 to f64 (exact): the high half of an f32.
#[cfg(not(target_arch = "nvptx64"))]
fn bf16_to_f64(bits: u16) -> f64 {
    f32::from_bits((bits as u32) << 16) as f64
}

/// The m16n8k16 product of the gathered 16-bit fragments, decoded by `decode`.
#[cfg(not(target_arch = "nvptx64"))]
fn mma_m16n8k16_sim(a: [u32; 4], b: [u32; 2], c: [f32; 4], decode: fn(u16) -> f64) -> [f32; 4] {
    let word = |x: u32, y: u32| x as u64 | (y as u64) << 32;
    let all = crate::sim::warp_gather([word(a[0], a[1]), word(a[2], a[3]), word(b[0], b[1])]);
    let mut am = [[0.0f64; 16]; 16];
    let mut bm = [[0.0f64; 8]; 16];
    for (lane, words) in (0u32..).zip(all.iter()) {
        let reg = |r: u32| (words[r as usize / 2] >> (32 * (r % 2))) as u32;
        for h in 0..8 {
            let (i, p) = m16n8k16_a_coords(lane, h);
            am[i as usize][p as usize] = decode(half(reg(h / 2), h % 2));
        }
        for h in 0..4 {
            let (p, j) = m16n8k16_b_coords(lane, h);
            bm[p as usize][j as usize] = decode(half(reg(4 + h / 2), h % 2));
        }
    }
    m16n8_own(&am, &bm, c)
}

macro_rules! mma_m16n8k16 {
    ($(#[$doc:meta])* $name:ident, $ptx:literal, $decode:ident) => {
        $(#[$doc])*
        #[inline(always)]
        pub fn $name(a: [u32; 4], b: [u32; 2], c: [f32; 4]) -> [f32; 4] {
            #[cfg(target_arch = "nvptx64")]
            {
                let d: [u32; 4];
                // SAFETY: a warp-collective register operation; the caller keeps the warp
                // converged.
                unsafe {
                    let (d0, d1, d2, d3): (u32, u32, u32, u32);
                    core::arch::asm!(
                        $ptx,
                        out(reg32) d0, out(reg32) d1, out(reg32) d2, out(reg32) d3,
                        in(reg32) a[0], in(reg32) a[1], in(reg32) a[2], in(reg32) a[3],
                        in(reg32) b[0], in(reg32) b[1],
                        in(reg32) c[0].to_bits(), in(reg32) c[1].to_bits(),
                        in(reg32) c[2].to_bits(), in(reg32) c[3].to_bits(),
                    );
                    d = [d0, d1, d2, d3];
                }
                d.map(f32::from_bits)
            }
            #[cfg(not(target_arch = "nvptx64"))]
            {
                mma_m16n8k16_sim(a, b, c, $decode)
            }
        }
    };
}

mma_m16n8k16!(
    /// `D = A·B + C` with `A` 16 × 16 and `B` 16 × 8 in IEEE f16 (two per register, low half
    /// first), `C`, `D` in f32 (`mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32`). Fragments as
    /// in the module table. Every lane of the warp must call it together.
    mma_f16_m16n8k16,
    "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {{{}, {}, {}, {}}}, {{{}, {}, {}, {}}}, {{{}, {}}}, {{{}, {}, {}, {}}};",
    f16_to_f64
);

mma_m16n8k16!(
    /// `D = A·B + C` with `A` 16 × 16 and `B` 16 × 8 in bfloat16 (two per register, low half
    /// first), `C`, `D` in f32 (`mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32`). Fragments
    /// as in the module table. Every lane of the warp must call it together.
    mma_bf16_m16n8k16,
    "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {{{}, {}, {}, {}}}, {{{}, {}, {}, {}}}, {{{}, {}}}, {{{}, {}, {}, {}}};",
    bf16_to_f64
);

/// `D = A·B + C` in f64 with `A` 8 × 4, `B` 4 × 8, `C`, `D` 8 × 8
/// (`mma.sync.aligned.m8n8k4.row.col.f64.f64.f64.f64`). Fragments as in the module table. Every
/// lane of the warp must call it together. The simulator accumulates `C` and the four products
/// with fused multiply-adds in order of `k`.
#[inline(always)]
pub fn mma_f64_m8n8k4(a: f64, b: f64, c: [f64; 2]) -> [f64; 2] {
    #[cfg(target_arch = "nvptx64")]
    {
        let (d0, d1): (u64, u64);
        // SAFETY: a warp-collective register operation; the caller keeps the warp converged.
        unsafe {
            core::arch::asm!(
                "mma.sync.aligned.m8n8k4.row.col.f64.f64.f64.f64 {{{}, {}}}, {{{}}}, {{{}}}, {{{}, {}}};",
                out(reg64) d0, out(reg64) d1,
                in(reg64) a.to_bits(), in(reg64) b.to_bits(),
                in(reg64) c[0].to_bits(), in(reg64) c[1].to_bits(),
            );
        }
        [f64::from_bits(d0), f64::from_bits(d1)]
    }
    #[cfg(not(target_arch = "nvptx64"))]
    {
        let all = crate::sim::warp_gather([a.to_bits(), b.to_bits()]);
        let mut am = [[0.0f64; 4]; 8];
        let mut bm = [[0.0f64; 8]; 4];
        for (lane, words) in (0u32..).zip(all.iter()) {
            let (i, p) = f64_a_coords(lane);
            am[i as usize][p as usize] = f64::from_bits(words[0]);
            let (p, j) = f64_b_coords(lane);
            bm[p as usize][j as usize] = f64::from_bits(words[1]);
        }
        let lane = lane_id();
        core::array::from_fn(|r| {
            let (i, j) = f64_c_coords(lane, r as u32);
            (0..4).fold(c[r], |acc, p| am[i as usize][p].mul_add(bm[p][j as usize], acc))
        })
    }
}

/// The shared-window address of `ptr`, a pointer into this block's dynamic shared memory (e.g.
/// from [`crate::shared::DynamicShared::as_ptr`]): what the `cp_async_*` functions take as their
/// destination. Add byte offsets to it to address other elements.
#[inline(always)]
pub fn shared_address<T>(ptr: *const T) -> u32 {
    #[cfg(target_arch = "nvptx64")]
    {
        let address: u64;
        // SAFETY: address arithmetic only.
        unsafe {
            core::arch::asm!("cvta.to.shared.u64 {}, {};", out(reg64) address, in(reg64) ptr as u64);
        }
        address as u32
    }
    #[cfg(not(target_arch = "nvptx64"))]
    crate::sim::shared_offset(ptr as *const u8)
}

/// Loads four 8 × 8 matrices of 16-bit elements from shared memory, one register of each per lane
/// (`ldmatrix.sync.aligned.m8n8.x4.shared.b16`). Lane `l` passes `row`, the shared-window address
/// ([`shared_address`]) of row `l % 8` of matrix `l / 8`, 16 bytes aligned to 16; register `q` of
/// lane `l` receives bytes `4·(l % 4)` to `4·(l % 4) + 4` of row `l / 4` of matrix `q`.
///
/// For 32-bit elements (tf32) each row is 4 elements and lane `l` receives element `(l / 4, l % 4)`
/// of each 8 × 4 matrix: the `A` fragment of [`mma_tf32_m16n8k8`] in one instruction when matrices
/// 0..4 are rows 0..8 / columns 0..4, rows 8..16 / columns 0..4, rows 0..8 / columns 4..8 and rows
/// 8..16 / columns 4..8 of `A`. Every lane of the warp must call it together.
///
/// # Safety
/// Every lane's `row` is a 16-byte-aligned shared-window address with 16 bytes inside the block's
/// dynamic shared memory, written before (and published by a barrier where other threads wrote it).
#[inline(always)]
pub unsafe fn ldmatrix_x4(row: u32) -> [u32; 4] {
    #[cfg(target_arch = "nvptx64")]
    {
        let (d0, d1, d2, d3): (u32, u32, u32, u32);
        // SAFETY: guaranteed by the caller.
        unsafe {
            core::arch::asm!(
                "ldmatrix.sync.aligned.m8n8.x4.shared.b16 {{{}, {}, {}, {}}}, [{}];",
                out(reg32) d0, out(reg32) d1, out(reg32) d2, out(reg32) d3,
                in(reg32) row,
                options(readonly, nostack),
            );
        }
        [d0, d1, d2, d3]
    }
    #[cfg(not(target_arch = "nvptx64"))]
    {
        assert!(row.is_multiple_of(16), "ldmatrix row at a misaligned shared address {row}");
        let rows = crate::sim::warp_gather([row as u64]);
        let lane = lane_id() as usize;
        core::array::from_fn(|q| {
            let at = rows[8 * q + lane / 4][0] as u32 + 4 * (lane % 4) as u32;
            // SAFETY: in the block's shared memory (checked by the simulator), aligned to 4.
            unsafe { *(crate::sim::shared_bytes_at(at, 4) as *const u32) }
        })
    }
}

/// The simulator's `cp.async`: copies `src_bytes` (at most `size`) and zero-fills the rest.
#[cfg(not(target_arch = "nvptx64"))]
unsafe fn cp_async_sim(dst: u32, src: *const u8, size: usize, src_bytes: u32) {
    let src_bytes = (src_bytes as usize).min(size);
    assert!(
        (dst as usize).is_multiple_of(size),
        "cp.async of {size} bytes to a misaligned shared address {dst}"
    );
    assert!(
        (src as usize).is_multiple_of(size),
        "cp.async of {size} bytes from a misaligned global address {src:p}"
    );
    let dst = crate::sim::shared_bytes_at(dst, size);
    // SAFETY: `dst` holds `size` bytes (checked by the simulator); `src` holds `src_bytes` bytes by
    // the caller's contract.
    unsafe {
        core::ptr::copy_nonoverlapping(src, dst, src_bytes);
        core::ptr::write_bytes(dst.add(src_bytes), 0, size - src_bytes);
    }
}

macro_rules! cp_async {
    ($(#[$doc:meta])* $name:ident, $size:literal, $ptx:literal) => {
        $(#[$doc])*
        ///
        /// # Safety
        /// `dst` is a shared-window address ([`shared_address`]) with the copy's size in bytes
        /// inside the block's dynamic shared memory, and `src` a global address, both aligned to
        /// the copy's size; the first `src_bytes` bytes at `src` must be readable (none
        /// when `src_bytes` is 0). Nothing may read the destination before a
        /// [`cp_async_wait_group`] that covers the copy.
        #[inline(always)]
        pub unsafe fn $name<T>(dst: u32, src: *const T, src_bytes: u32) {
            #[cfg(target_arch = "nvptx64")]
            // SAFETY: guaranteed by the caller.
            unsafe {
                core::arch::asm!($ptx, in(reg32) dst, in(reg64) src, in(reg32) src_bytes);
            }
            #[cfg(not(target_arch = "nvptx64"))]
            // SAFETY: guaranteed by the caller.
            unsafe {
                cp_async_sim(dst, src as *const u8, $size, src_bytes)
            }
        }
    };
}

cp_async!(
    /// Starts a 16-byte copy from global to shared memory, caching in L2 only
    /// (`cp.async.cg.shared.global [dst], [src], 16, src_bytes`): `src_bytes` (0..=16) bytes are
    /// read, the rest of the 16 zero-filled.
    cp_async_16,
    16,
    "cp.async.cg.shared.global [{}], [{}], 16, {};"
);

cp_async!(
    /// Starts an 8-byte copy from global to shared memory (`cp.async.ca.shared.global [dst], [src],
    /// 8, src_bytes`): `src_bytes` (0..=8) bytes are read, the rest zero-filled.
    cp_async_8,
    8,
    "cp.async.ca.shared.global [{}], [{}], 8, {};"
);

cp_async!(
    /// Starts a 4-byte copy from global to shared memory (`cp.async.ca.shared.global [dst], [src],
    /// 4, src_bytes`): `src_bytes` (0 or 4) bytes are read, the rest zero-filled.
    cp_async_4,
    4,
    "cp.async.ca.shared.global [{}], [{}], 4, {};"
);

/// Closes the group of this thread's `cp.async` copies issued since the previous commit
/// (`cp.async.commit_group`); an empty group is allowed.
#[inline(always)]
pub fn cp_async_commit_group() {
    #[cfg(target_arch = "nvptx64")]
    // SAFETY: no operands.
    unsafe {
        core::arch::asm!("cp.async.commit_group;");
    }
}

/// Waits until at most `N` of this thread's committed `cp.async` groups are still in flight
/// (`cp.async.wait_group N`); `N = 0` waits for all. Follow it with a barrier before other threads
/// read the data. A no-op in the simulator, whose copies are synchronous.
#[inline(always)]
pub fn cp_async_wait_group<const N: u32>() {
    #[cfg(target_arch = "nvptx64")]
    // SAFETY: no memory operands.
    unsafe {
        core::arch::asm!("cp.async.wait_group {};", const N);
    }
}

/// Starts a bulk copy of `bytes` from shared to global memory, done by the SM's copy engine (TMA)
/// while the thread goes on (`cp.async.bulk.global.shared::cta.bulk_group [dst], [src], bytes`),
/// marked evict-first in L2 (`.L2::cache_hint` with a `createpolicy` evict-first policy): for
/// output written once. Copies issued since the last [`cp_async_bulk_commit_group`] form one bulk
/// group of this thread; [`cp_async_bulk_wait_group_read`] says when their source may be
/// overwritten. Needs sm_90. In the simulator a synchronous copy.
///
/// # Safety
/// `src` is a shared-window address ([`shared_address`]) of `bytes` inside the block's dynamic
/// shared memory and `dst` a global address of `bytes` writable bytes, both 16-byte aligned, and
/// `bytes` a multiple of 16. The shared-memory writes of the source must be made visible to the
/// copy engine first ([`fence_proxy_async_shared`] by each writer, then a barrier), and nothing
/// may write the source before the wait.
#[inline(always)]
pub unsafe fn cp_async_bulk_store_streaming<T>(dst: *mut T, src: u32, bytes: u32) {
    #[cfg(target_arch = "nvptx64")]
    // SAFETY: guaranteed by the caller.
    unsafe {
        core::arch::asm!(
            "{{ .reg .b64 policy; createpolicy.fractional.L2::evict_first.b64 policy, 1.0; \
             cp.async.bulk.global.shared::cta.bulk_group.L2::cache_hint [{}], [{}], {}, policy; }}",
            in(reg64) dst,
            in(reg32) src,
            in(reg32) bytes,
        );
    }
    #[cfg(not(target_arch = "nvptx64"))]
    {
        let (at, dst) = (src as usize, dst as *mut u8);
        assert!(
            at.is_multiple_of(16) && (dst as usize).is_multiple_of(16) && bytes.is_multiple_of(16),
            "bulk copy of {bytes} bytes from shared address {at} to {dst:p}: both addresses and the \
             size must be multiples of 16"
        );
        let from = crate::sim::shared_bytes_at(src, bytes as usize);
        // SAFETY: `from` holds `bytes` (checked by the simulator), `dst` by the caller's contract.
        unsafe { core::ptr::copy_nonoverlapping(from, dst, bytes as usize) };
    }
}

/// Closes this thread's group of bulk copies issued since the previous commit
/// (`cp.async.bulk.commit_group`).
#[inline(always)]
pub fn cp_async_bulk_commit_group() {
    #[cfg(target_arch = "nvptx64")]
    // SAFETY: no operands.
    unsafe {
        core::arch::asm!("cp.async.bulk.commit_group;");
    }
}

/// Waits until at most `N` of this thread's bulk groups are still reading their shared-memory
/// sources (`cp.async.bulk.wait_group.read N`): after it (and a barrier, for other threads) the
/// sources may be overwritten. A block must wait for its copies' reads before it exits. A no-op in
/// the simulator.
#[inline(always)]
pub fn cp_async_bulk_wait_group_read<const N: u32>() {
    #[cfg(target_arch = "nvptx64")]
    // SAFETY: no memory operands.
    unsafe {
        core::arch::asm!("cp.async.bulk.wait_group.read {};", const N);
    }
}

// ---------------------------------------------------------------------------------------------
// Warpgroup MMA (Hopper, sm_90a)
// ---------------------------------------------------------------------------------------------

/// `wgmma.mma_async` with `N` accumulator registers per thread, `A` and `B` from descriptors,
/// `D` accumulated where `$add` (a `u32`) is nonzero (`scale-d`), overwritten otherwise, and both
/// operands taken as they are (scales 1).
#[cfg(target_arch = "nvptx64")]
macro_rules! wgmma_asm {
    ($acc:ident, $a:expr, $b:expr, $add:expr, $shape:literal, [$first:literal $($i:literal)*]) => {
        core::arch::asm!(
            concat!(
                "{{ .reg .pred p; setp.ne.b32 p, {add}, 0; wgmma.mma_async.sync.aligned.", $shape,
                ".f32.tf32.tf32 {{{", stringify!($first), "}", $(", {", stringify!($i), "}",)*
                "}}, {a}, {b}, p, 1, 1; }}"
            ),
            inout(reg32) $acc[$first],
            $(inout(reg32) $acc[$i],)*
            a = in(reg64) $a,
            b = in(reg64) $b,
            add = in(reg32) $add,
        )
    };
}
#[cfg(target_arch = "nvptx64")]
use wgmma_asm;

/// [`wgmma_asm`] with `A` from four registers (tf32 bits of the fragment, [`wgmma_m64_a_coords`]).
#[cfg(target_arch = "nvptx64")]
macro_rules! wgmma_rs_asm {
    ($acc:ident, $a:expr, $b:expr, $add:expr, $shape:literal, [$first:literal $($i:literal)*]) => {
        core::arch::asm!(
            concat!(
                "{{ .reg .pred p; setp.ne.b32 p, {add}, 0; wgmma.mma_async.sync.aligned.", $shape,
                ".f32.tf32.tf32 {{{", stringify!($first), "}", $(", {", stringify!($i), "}",)*
                "}}, {{{a0}, {a1}, {a2}, {a3}}}, {b}, p, 1, 1; }}"
            ),
            inout(reg32) $acc[$first],
            $(inout(reg32) $acc[$i],)*
            a0 = in(reg32) $a[0].to_bits(),
            a1 = in(reg32) $a[1].to_bits(),
            a2 = in(reg32) $a[2].to_bits(),
            a3 = in(reg32) $a[3].to_bits(),
            b = in(reg64) $b,
            add = in(reg32) $add,
        )
    };
}

/// Bytes per row of a 128-byte-swizzled operand tile (32 f32/tf32 values along `k`).
pub const WGMMA_ROW_BYTES: u32 = 128;
/// Bytes of one swizzle atom: 8 rows of [`WGMMA_ROW_BYTES`]. Tiles start on a multiple of it.
pub const WGMMA_ATOM_BYTES: u32 = 8 * WGMMA_ROW_BYTES;

/// Byte offset, in a K-major tile with 128-byte swizzle, of element `(row, kk)` (`kk`, 0..32, the
/// 4-byte element along `k`): rows of 128 bytes, and inside each group of 8 rows the 16-byte chunk
/// `kk / 4` of row `r` stored at chunk `(kk / 4) ^ (r % 8)` — the layout [`wgmma_descriptor_sw128`]
/// describes, in which the 8 rows of one chunk column lie in 8 different bank groups. The tile must
/// start on a [`WGMMA_ATOM_BYTES`] boundary (the hardware swizzles by address bits).
#[inline(always)]
pub const fn sw128_offset(row: u32, kk: u32) -> u32 {
    row * WGMMA_ROW_BYTES + (((kk / 4) ^ (row % 8)) * 16) + (kk % 4) * 4
}

/// The shared-memory matrix descriptor of a `wgmma` operand (PTX ISA, "Matrix Descriptor Format"):
/// a K-major tile with 128-byte swizzle whose rows of 128 bytes ([`sw128_offset`]) start at
/// shared-window address `start` (a [`WGMMA_ATOM_BYTES`] boundary, plus `4·kk0` to start at
/// element `kk0` along `k`, as one k8 step of a 32-wide tile does). Groups of 8 rows are
/// [`WGMMA_ATOM_BYTES`] apart (the stride byte offset); the leading byte offset is unused for
/// swizzled K-major tiles.
#[inline(always)]
pub const fn wgmma_descriptor_sw128(start: u32) -> u64 {
    const STRIDE: u64 = (WGMMA_ATOM_BYTES as u64 >> 4) << 32;
    const LEADING: u64 = 1 << 16;
    const SWIZZLE_128B: u64 = 1 << 62;
    ((start as u64 & 0x3ffff) >> 4) | LEADING | STRIDE | SWIZZLE_128B
}

/// `wgmma.fence.sync.aligned`: orders this warpgroup's earlier register and shared-memory accesses
/// before the `wgmma` operations that follow. Needed before the first [`wgmma_tf32_m64n128k8`] of a
/// batch whose accumulators were touched by other instructions. A no-op in the simulator.
#[inline(always)]
pub fn wgmma_fence() {
    #[cfg(target_arch = "nvptx64")]
    // SAFETY: no operands; all threads of the warpgroup execute it.
    unsafe {
        core::arch::asm!("wgmma.fence.sync.aligned;");
    }
}

/// `wgmma.commit_group.sync.aligned`: closes the group of `wgmma` operations issued since the last
/// commit. A no-op in the simulator.
#[inline(always)]
pub fn wgmma_commit_group() {
    #[cfg(target_arch = "nvptx64")]
    // SAFETY: no operands.
    unsafe {
        core::arch::asm!("wgmma.commit_group.sync.aligned;");
    }
}

/// `wgmma.wait_group.sync.aligned N`: waits until at most `N` committed `wgmma` groups of this
/// warpgroup are pending; after `N = 0` the accumulators hold the results and the shared-memory
/// operands may be overwritten. A no-op in the simulator, whose `wgmma` is synchronous.
#[inline(always)]
pub fn wgmma_wait_group<const N: u32>() {
    #[cfg(target_arch = "nvptx64")]
    // SAFETY: no memory operands.
    unsafe {
        core::arch::asm!("wgmma.wait_group.sync.aligned {};", const N);
    }
}

/// `fence.proxy.async.shared::cta`: makes this thread's ordinary shared-memory writes visible to
/// the asynchronous proxy that `wgmma` reads its operands through. Each writing thread fences, then
/// a barrier, then the `wgmma`. A no-op in the simulator.
#[inline(always)]
pub fn fence_proxy_async_shared() {
    #[cfg(target_arch = "nvptx64")]
    // SAFETY: no operands.
    unsafe {
        core::arch::asm!("fence.proxy.async.shared::cta;");
    }
}

/// Element `(row, column)` of the 64 × 128 accumulator held in register `r` (0..64) of thread
/// `thread` (0..128) of the warpgroup for [`wgmma_tf32_m64n128k8`]: warp `thread / 32` owns rows
/// 16·warp .. +16, and each 8-column block `r / 4` repeats the m16n8 layout of [`m16n8_c_coords`].
#[inline(always)]
pub fn wgmma_m64_c_coords(thread: u32, r: u32) -> (u32, u32) {
    let (row, col) = m16n8_c_coords(thread % 32, r % 4);
    (16 * (thread / 32) + row, 8 * (r / 4) + col)
}

/// `D = A·B + D` for one warpgroup (4 warps, 128 threads, all calling together): `A` is 64 × 8,
/// `B` is 8 × 128 (k × n), both tf32 read from shared memory through their descriptors
/// ([`wgmma_descriptor_sw128`]; `B` stored as 128 rows of `n`, K-major, i.e. `Bᵀ` row-major),
/// `D` 64 × 128 f32 with each thread holding 64 values ([`wgmma_m64_c_coords`]). Asynchronous
/// (`wgmma.mma_async.sync.aligned.m64n128k8.f32.tf32.tf32`): issue it after [`wgmma_fence`], close
/// the batch with [`wgmma_commit_group`] and read `acc` or overwrite the operands only after
/// [`wgmma_wait_group`]. Needs sm_90a (H100/H200). The tensor cores read the tf32 bits of each
/// operand (truncation): kernels round first ([`round_tf32`]).
///
/// In the simulator each thread computes its own 64 elements at the call (exact products of the
/// truncated operands summed in f64, added to `acc` and rounded once), reading shared memory through
/// the descriptors as the hardware does, swizzle included.
///
/// # Safety
/// Both descriptors describe tiles inside the block's dynamic shared memory, written and published
/// (each writer's [`fence_proxy_async_shared`], then a barrier) before the call, and not written
/// again before the wait.
#[inline(always)]
pub unsafe fn wgmma_tf32_m64n128k8(acc: &mut [f32; 64], a: u64, b: u64) {
    // SAFETY: forwarded from the caller.
    unsafe { wgmma_tf32_m64n128k8_into(acc, a, b, true) }
}

/// [`wgmma_tf32_m64n128k8`] that accumulates only where `add` (`D = A·B + D`), and otherwise
/// overwrites the accumulators (`D = A·B`, the instruction's `scale-d` false): the first MMA of an
/// output tile, so that a kernel which computes several tiles never writes the accumulators with
/// ordinary instructions while MMAs are in flight (ptxas would wait for them there).
///
/// # Safety
/// As for [`wgmma_tf32_m64n128k8`].
#[inline(always)]
pub unsafe fn wgmma_tf32_m64n128k8_into(acc: &mut [f32; 64], a: u64, b: u64, add: bool) {
    #[cfg(target_arch = "nvptx64")]
    // SAFETY: guaranteed by the caller.
    unsafe {
        wgmma_asm!(acc, a, b, add as u32, "m64n128k8", [
            0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 22 23 24 25 26 27 28 29 30 31
            32 33 34 35 36 37 38 39 40 41 42 43 44 45 46 47 48 49 50 51 52 53 54 55 56 57 58 59 60 61 62 63
        ]);
    }
    #[cfg(not(target_arch = "nvptx64"))]
    {
        let thread = crate::thread::thread_idx_x() % 128;
        for (r, d) in (0u32..).zip(acc.iter_mut()) {
            let (i, j) = wgmma_m64_c_coords(thread, r);
            let sum: f64 = (0..8).map(|p| sw128_read_tf32(a, i, p) * sw128_read_tf32(b, j, p)).sum();
            *d = if add { (sum + *d as f64) as f32 } else { sum as f32 };
        }
    }
}

/// Element `(row, column)` of the 64 × 8 `A` held in register `r` (0..4) of thread `thread`
/// (0..128) of the warpgroup for [`wgmma_tf32_m64n128k8_rs`]: warp `thread / 32` holds rows
/// 16·warp .. +16 in the layout of [`tf32_a_coords`] (the rows of its own accumulators).
#[inline(always)]
pub fn wgmma_m64_a_coords(thread: u32, r: u32) -> (u32, u32) {
    let (row, col) = tf32_a_coords(thread % 32, r);
    (16 * (thread / 32) + row, col)
}

/// [`wgmma_tf32_m64n128k8`] with `A` from registers: each thread passes its four elements of the
/// 64 × 8 `A` ([`wgmma_m64_a_coords`]), `B` still comes through its descriptor
/// (`wgmma.mma_async.sync.aligned.m64n128k8.f32.tf32.tf32 d, {a0..a3}, b-desc`). Saves the
/// shared-memory reads of `A` when the kernel computes `A` in registers anyway (a 3xTF32 split).
/// Issue it after a [`wgmma_fence`] that follows the last write of `a` (the instruction reads its
/// registers asynchronously) and, as for the other form, read `acc` only after
/// [`wgmma_wait_group`]. In the simulator the warp's lanes exchange their fragments.
///
/// # Safety
/// As for [`wgmma_tf32_m64n128k8`], for `b`.
#[inline(always)]
pub unsafe fn wgmma_tf32_m64n128k8_rs(acc: &mut [f32; 64], a: [f32; 4], b: u64) {
    // SAFETY: forwarded from the caller.
    unsafe { wgmma_tf32_m64n128k8_rs_into(acc, a, b, true) }
}

/// [`wgmma_tf32_m64n128k8_rs`] that accumulates only where `add`, and otherwise overwrites the
/// accumulators, as [`wgmma_tf32_m64n128k8_into`] does: `A` held in registers for a whole panel.
///
/// # Safety
/// As for [`wgmma_tf32_m64n128k8`], for `b`.
#[inline(always)]
pub unsafe fn wgmma_tf32_m64n128k8_rs_into(acc: &mut [f32; 64], a: [f32; 4], b: u64, add: bool) {
    #[cfg(target_arch = "nvptx64")]
    // SAFETY: guaranteed by the caller.
    unsafe {
        wgmma_rs_asm!(acc, a, b, add as u32, "m64n128k8", [
            0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 22 23 24 25 26 27 28 29 30 31
            32 33 34 35 36 37 38 39 40 41 42 43 44 45 46 47 48 49 50 51 52 53 54 55 56 57 58 59 60 61 62 63
        ]);
    }
    #[cfg(not(target_arch = "nvptx64"))]
    {
        let thread = crate::thread::thread_idx_x() % 128;
        let word = |x: f32, y: f32| x.to_bits() as u64 | (y.to_bits() as u64) << 32;
        let all = crate::sim::warp_gather([word(a[0], a[1]), word(a[2], a[3])]);
        // This warp's 16 rows of A (the only rows its accumulators need), truncated to tf32.
        let mut am = [[0.0f64; 8]; 16];
        for (lane, words) in (0u32..).zip(all.iter()) {
            for r in 0..4 {
                let (i, p) = wgmma_m64_a_coords(lane, r);
                let bits = (words[r as usize / 2] >> (32 * (r % 2))) as u32;
                am[i as usize][p as usize] = f32::from_bits(bits & !0x1fff) as f64;
            }
        }
        for (r, d) in (0u32..).zip(acc.iter_mut()) {
            let (i, j) = wgmma_m64_c_coords(thread, r);
            let row = &am[(i % 16) as usize];
            let sum: f64 = (0..8).map(|p| row[p as usize] * sw128_read_tf32(b, j, p)).sum();
            *d = if add { (sum + *d as f64) as f32 } else { sum as f32 };
        }
    }
}

/// The simulator's read of element `(row, kk)` of a K-major, 128-byte-swizzled tile through its
/// descriptor, truncated to tf32 as the tensor cores read it.
#[cfg(not(target_arch = "nvptx64"))]
fn sw128_read_tf32(descriptor: u64, row: u32, kk: u32) -> f64 {
    let start = ((descriptor & 0x3fff) << 4) as u32;
    let stride = (((descriptor >> 32) & 0x3fff) << 4) as u32;
    assert_eq!(descriptor >> 62, 1, "the simulator's wgmma supports 128-byte swizzle only");
    assert_eq!(stride, WGMMA_ATOM_BYTES, "stride byte offset of a 128-byte-swizzled tile");
    assert!(
        (start >> 7) & 7 == 0,
        "wgmma tile at shared address {start} does not start on a {WGMMA_ATOM_BYTES}-byte boundary"
    );
    let address = start + (row / 8) * stride + (row % 8) * WGMMA_ROW_BYTES + 4 * kk;
    let swizzled = address ^ (((address >> 7) & 7) << 4);
    // SAFETY: in the block's shared memory (checked by the simulator), aligned to 4.
    let bits = unsafe { *(crate::sim::shared_bytes_at(swizzled, 4) as *const u32) };
    f32::from_bits(bits & !0x1fff) as f64
}
