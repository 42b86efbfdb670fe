//! Warp-level MMA (`mma.sync`, sm_80): the tf32 conversion, which lane holds which element of each
//! operand, and the tf32, f16, bf16 and f64 products. The fragment table is in [`super`].

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

/// Element `(row, column)` of the 16 × 4 `A` held in register `r` (0..2) of `lane` for
/// [`mma_f64_m16n8k4`]: `(g + 8·r, t)`.
#[inline(always)]
pub fn f64_m16n8k4_a_coords(lane: u32, r: u32) -> (u32, u32) {
    (lane / 4 + 8 * r, lane % 4)
}

/// Element `(row, column)` of the 16 × 8 `A` held in register `r` (0..4) of `lane` for
/// [`mma_f64_m16n8k8`]: `(g + 8·(r % 2), t + 4·(r / 2))`, as for tf32.
#[inline(always)]
pub fn f64_m16n8k8_a_coords(lane: u32, r: u32) -> (u32, u32) {
    tf32_a_coords(lane, r)
}

/// Element `(row, column)` of the 8 × 8 `B` (k × n) held in register `r` (0..2) of `lane` for
/// [`mma_f64_m16n8k8`]: `(t + 4·r, g)`, as for tf32. (The 4 × 8 `B` of [`mma_f64_m16n8k4`] is that
/// of [`mma_f64_m8n8k4`], [`f64_b_coords`].)
#[inline(always)]
pub fn f64_m16n8k8_b_coords(lane: u32, r: u32) -> (u32, u32) {
    tf32_b_coords(lane, r)
}

/// `D = A·B + C` in f64 with `A` 16 × 4, `B` 4 × 8, `C`, `D` 16 × 8
/// (`mma.sync.aligned.m16n8k4.row.col.f64.f64.f64.f64`, sm_90): `A` element `(g + 8·r, t)` in
/// `a[r]` ([`f64_m16n8k4_a_coords`]), `B` element `(t, g)` ([`f64_b_coords`]), `C`/`D` element
/// [`m16n8_c_coords`]`(lane, r)` in register `r`. Every lane of the warp must call it together.
/// The simulator accumulates `C` and the products with fused multiply-adds in order of `k`.
#[inline(always)]
pub fn mma_f64_m16n8k4(a: [f64; 2], b: f64, c: [f64; 4]) -> [f64; 4] {
    #[cfg(target_arch = "nvptx64")]
    {
        let (d0, d1, d2, d3): (u64, u64, u64, u64);
        // SAFETY: a warp-collective register operation; the caller keeps the warp converged.
        unsafe {
            core::arch::asm!(
                "mma.sync.aligned.m16n8k4.row.col.f64.f64.f64.f64 {{{}, {}, {}, {}}}, {{{}, {}}}, {{{}}}, {{{}, {}, {}, {}}};",
                out(reg64) d0, out(reg64) d1, out(reg64) d2, out(reg64) d3,
                in(reg64) a[0].to_bits(), in(reg64) a[1].to_bits(), in(reg64) b.to_bits(),
                in(reg64) c[0].to_bits(), in(reg64) c[1].to_bits(),
                in(reg64) c[2].to_bits(), in(reg64) c[3].to_bits(),
            );
        }
        [f64::from_bits(d0), f64::from_bits(d1), f64::from_bits(d2), f64::from_bits(d3)]
    }
    #[cfg(not(target_arch = "nvptx64"))]
    {
        let all = crate::sim::warp_gather([a[0].to_bits(), a[1].to_bits(), b.to_bits()]);
        let mut am = [[0.0f64; 4]; 16];
        let mut bm = [[0.0f64; 8]; 4];
        for (lane, words) in (0u32..).zip(all.iter()) {
            for r in 0..2 {
                let (i, p) = f64_m16n8k4_a_coords(lane, r);
                am[i as usize][p as usize] = f64::from_bits(words[r as usize]);
            }
            let (p, j) = f64_b_coords(lane);
            bm[p as usize][j as usize] = f64::from_bits(words[2]);
        }
        m16n8_f64_own(&am, &bm, c)
    }
}

/// `D = A·B + C` in f64 with `A` 16 × 8, `B` 8 × 8, `C`, `D` 16 × 8
/// (`mma.sync.aligned.m16n8k8.row.col.f64.f64.f64.f64`, sm_90): fragments
/// [`f64_m16n8k8_a_coords`], [`f64_m16n8k8_b_coords`], [`m16n8_c_coords`]. Every lane of the warp
/// must call it together. The simulator accumulates with fused multiply-adds in order of `k`.
#[inline(always)]
pub fn mma_f64_m16n8k8(a: [f64; 4], b: [f64; 2], c: [f64; 4]) -> [f64; 4] {
    #[cfg(target_arch = "nvptx64")]
    {
        let (d0, d1, d2, d3): (u64, u64, u64, u64);
        // SAFETY: a warp-collective register operation; the caller keeps the warp converged.
        unsafe {
            core::arch::asm!(
                "mma.sync.aligned.m16n8k8.row.col.f64.f64.f64.f64 {{{}, {}, {}, {}}}, {{{}, {}, {}, {}}}, {{{}, {}}}, {{{}, {}, {}, {}}};",
                out(reg64) d0, out(reg64) d1, out(reg64) d2, out(reg64) d3,
                in(reg64) a[0].to_bits(), in(reg64) a[1].to_bits(),
                in(reg64) a[2].to_bits(), in(reg64) a[3].to_bits(),
                in(reg64) b[0].to_bits(), in(reg64) b[1].to_bits(),
                in(reg64) c[0].to_bits(), in(reg64) c[1].to_bits(),
                in(reg64) c[2].to_bits(), in(reg64) c[3].to_bits(),
            );
        }
        [f64::from_bits(d0), f64::from_bits(d1), f64::from_bits(d2), f64::from_bits(d3)]
    }
    #[cfg(not(target_arch = "nvptx64"))]
    {
        // Two gathers: a lane's six words are more than one gather carries.
        let all_a = crate::sim::warp_gather(a.map(f64::to_bits));
        let all_b = crate::sim::warp_gather(b.map(f64::to_bits));
        let mut am = [[0.0f64; 8]; 16];
        let mut bm = [[0.0f64; 8]; 8];
        for (lane, (words_a, words_b)) in (0u32..).zip(all_a.iter().zip(all_b.iter())) {
            for r in 0..4 {
                let (i, p) = f64_m16n8k8_a_coords(lane, r);
                am[i as usize][p as usize] = f64::from_bits(words_a[r as usize]);
            }
            for r in 0..2 {
                let (p, j) = f64_m16n8k8_b_coords(lane, r);
                bm[p as usize][j as usize] = f64::from_bits(words_b[r as usize]);
            }
        }
        m16n8_f64_own(&am, &bm, c)
    }
}

/// This lane's four elements of `A·B + C` for an f64 m16n8 product: `C` plus the products by
/// fused multiply-adds in order of `k`.
#[cfg(not(target_arch = "nvptx64"))]
fn m16n8_f64_own<const K: usize>(a: &[[f64; K]; 16], b: &[[f64; 8]; K], c: [f64; 4]) -> [f64; 4] {
    let lane = lane_id();
    core::array::from_fn(|r| {
        let (i, j) = m16n8_c_coords(lane, r as u32);
        (0..K).fold(c[r], |acc, p| a[i as usize][p].mul_add(b[p][j as usize], acc))
    })
}
