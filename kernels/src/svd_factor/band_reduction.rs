//! The first stage of the two-stage tridiagonalisation (LAPACK's `sytrd_sy2sb`, MAGMA's `sy2sb`):
//! `T` to a symmetric band matrix of half-bandwidth [`BAND`] by a group of blocks per image
//! (`blockIdx.x`; grid `(groups, images)`, launched cooperatively), panel by panel.
//!
//! Panel `p` (columns `j₀ = p·BAND …`, rows `m₀ = j₀ + BAND …` below the band):
//! 1. block 0: the Householder QR `P = Q·R` of the `(b − m₀) × BAND` panel in shared memory (a
//!    reflector per column, two barriers each), `Q = I − V·T·Vᵀ` (LAPACK's `larft`), `V` and
//!    `V·T` into the band scratch, `R` and the panel's diagonal block into the band;
//! 2. every block, a warp per held row of the trailing matrix `S`: `X = S·V·T`;
//! 3. every block: `C = Tᵀ·Vᵀ·X`, `W = X − ½·V·C`, and its rows of `S ← QᵀSQ = S − V·Wᵀ − W·Vᵀ`;
//!
//! with a grid barrier after each. So the `b` dependent columns of a one-stage reduction cost a
//! block's barriers, not the grid's: the grid meets three times per `BAND` columns.
//! [`band_chase`](super::band_chase) then takes the band to tridiagonal form.
//!
//! The reflectors are left where the one-stage reduction leaves its own
//! ([`tridiagonal_scratch_parts`]: column `c` of the packed triangle, `τ[c]`): the reflector of
//! column `c` acts on rows `c + BAND …`, and rows `c + 1 … c + BAND − 1` of its column hold zeros,
//! so [`tridiagonal_back_transform`](super::tridiagonal_back_transform) applies `Q₁` unchanged.

use super::tridiagonal::{Packed, Vector, packed, tridiagonal_scratch, tridiagonal_scratch_parts};
use gpu_std::grid::GridBarrier;
use gpu_std::{kernel, math, shared, thread, warp};

/// Half-bandwidth of the band matrix between the two stages: a warp's half holds a reflector.
pub const BAND: u32 = 16;
const NB: usize = BAND as usize;
/// Row stride of the panel-wide arrays in shared memory: `BAND + 1`, so that a warp reading a
/// column (a row a lane) meets no bank conflict.
const PANEL_STRIDE: usize = NB + 1;
/// Elements per column of the band storage: the band's `BAND + 1` diagonals and the bulge's
/// `BAND − 1` below them.
pub const BAND_LD: u32 = 2 * BAND;
const LD: usize = BAND_LD as usize;
/// Most row groups of the panel QR's `(row group, column)` threads: 512 threads.
const MAX_ROW_GROUPS: usize = 32;
/// Most partial sums per entry of a `BAND × BAND` product over rows: 512 threads.
const MAX_PARTS: usize = 2;
/// f64 of the small shared arrays: the panel QR's partial dots and norms, `T`, `VᵀV`, `M`, `C`,
/// the partial sums of the products, `v₀` and `τ` per column.
const SMALL: usize = MAX_ROW_GROUPS * NB + MAX_ROW_GROUPS + 4 * NB * NB + MAX_PARTS * NB * NB + 2 * NB;

/// Sweeps' tasks of the bulge chasing at most: `⌈(b − 1)/BAND⌉` (at least one).
pub const fn band_chase_tasks(b: u32) -> u32 {
    if b <= 1 { 1 } else { (b - 1).div_ceil(BAND) }
}

/// Offsets in an image's [`band_scratch`], elements.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BandScratch {
    /// The band, column `j`'s diagonals `(j + d, j)` at `j·BAND_LD + d`, `d < BAND_LD`.
    pub band: u32,
    /// The bulge chasing's reflectors: sweep `s`, task `t` at `(s·tasks + t)·BAND`
    /// (`tasks` = [`band_chase_tasks`]), `BAND` elements, zeros past its rows.
    pub chase_v: u32,
    /// Their `τ`, at `s·tasks + t`.
    pub chase_tau: u32,
    /// The current panel's `V` (`b × BAND`, row `i` that of row `m₀ + i`).
    pub panel_v: u32,
    /// `V·T` of the current panel (`b × BAND`).
    pub vt: u32,
    /// `X = S·V·T` of the current panel (`b × BAND`).
    pub x: u32,
    /// `T` of the current panel (`BAND × BAND`, row-major).
    pub t: u32,
    /// Elements per image.
    pub len: u32,
}

/// Offsets in an image's band scratch ([`BandScratch`]).
pub const fn band_scratch_parts(b: u32) -> BandScratch {
    let chase_v = b * BAND_LD;
    let reflectors = b * band_chase_tasks(b);
    let chase_tau = chase_v + reflectors * BAND;
    let panel_v = chase_tau + reflectors;
    let vt = panel_v + b * BAND;
    let x = vt + b * BAND;
    let t = x + b * BAND;
    BandScratch { band: 0, chase_v, chase_tau, panel_v, vt, x, t, len: t + BAND * BAND }
}

/// f64 of an image's band scratch: the band, the bulge chasing's reflectors and the panel's work.
pub const fn band_scratch(b: u32) -> u32 {
    band_scratch_parts(b).len
}

/// Dynamic shared memory of [`band_reduce`], bytes: `V` and `W` (`b × 17` each) and the small
/// arrays; 156 KiB at `b = 512`.
pub const fn band_reduce_shared_bytes(b: u32) -> u32 {
    8 * (2 * b * PANEL_STRIDE as u32 + SMALL as u32)
}

/// A Householder reflector `H = I − τ·v·vᵀ` with `H·x = β·e₁` for `x = (α, x₁ …)`,
/// `σ² = ‖x₁…‖²`: `(β, τ, v₀)`, the other elements of `v` those of `x` (as the one-stage
/// reduction's). `τ = 0` (and `v₀ = 0`) where `x` is already reduced.
#[inline(always)]
pub(super) fn reflector(alpha: f64, sigma2: f64) -> (f64, f64, f64) {
    if sigma2 == 0.0 {
        (alpha, 0.0, 0.0)
    } else {
        let r = math::sqrt(math::fma(alpha, alpha, sigma2));
        let beta = if alpha >= 0.0 { -r } else { r };
        (beta, 1.0 / (beta * (beta - alpha)), alpha - beta)
    }
}

/// The reduction of each image's `T` to a band of half-bandwidth [`BAND`]: grid `(groups,
/// images)`, launched cooperatively, blocks of 64 to 256 threads (whole warps), dynamic shared memory [`band_reduce_shared_bytes`]`(b)`. Leaves the band in the band
/// scratch ([`band_scratch_parts`]; zeros past the band), the reflectors and `τ` in the solver's
/// scratch as the one-stage reduction does (module docs); the scratch's divide-and-conquer
/// buffers hold the matrix meanwhile.
///
/// In: `t` (`b × b` per image, row-major, symmetric; `(T + Tᵀ)/2` is used); `barriers`: a `u32`
/// per image, zero when the launch starts.
///
/// # Safety
/// A cooperative launch of that shape; `1 ≤ b` and the shared memory within the device's; each
/// image's parts lie inside the slices: `b × b` of `t`, `tridiagonal_scratch(b)` of `scratch`,
/// `band_scratch(b)` of `band_scratch`, one of `barriers`, which no other kernel uses meanwhile.
/// Unchecked on the GPU; the simulator checks every access.
#[kernel(launch_bounds(256, 1))]
pub unsafe fn band_reduce(
    t: &[f64],
    b: u32,
    scratch: &mut [f64],
    band_scratch: &mut [f64],
    barriers: &mut [u32],
) {
    let (g, img) = (thread::block_idx_x() as usize, thread::block_idx_y() as usize);
    let groups = thread::grid_dim_x() as usize;
    let (bu, bb) = (b as usize, b as usize * b as usize);
    let parts = tridiagonal_scratch_parts(b);
    let bp = band_scratch_parts(b);
    let (tid, nt) = (thread::thread_idx_x() as usize, thread::block_dim_x() as usize);
    let (lane, warp_id, warps) = (tid % 32, tid / 32, nt / 32);
    let (row_groups, rg, col) = (nt / NB, tid / NB, tid % NB);
    // SAFETY (whole body): the kernel's contract: the image's parts lie inside the slices, the
    // launch is cooperative with the shared memory of `V`, `W` and the small arrays. Between
    // barriers (the block's, or the group's for global memory) each element is written by one
    // thread and read by others only after the next barrier.
    unsafe {
        let t_in = t.sub_unchecked(img * bb, bb);
        let per_image = tridiagonal_scratch(b) as usize;
        let base = Vector::image_part(scratch, img, per_image);
        // The matrix, both triangles, row-major, in the divide and conquer's buffers.
        let a = base.sub(parts.work as usize, bb);
        let reflectors = Packed(base.sub(parts.packed as usize, packed(b) as usize));
        let tau_out = base.sub(parts.tau as usize, bu);
        let band_len = bp.len as usize;
        let mut band_scratch = band_scratch.sub_unchecked(img * band_len, band_len);
        let bs = Vector { p: band_scratch.as_mut_ptr(), len: band_len };
        let band = bs.sub(bp.band as usize, bu * LD);
        let (panel_v, vt_out, x_out) = (
            bs.sub(bp.panel_v as usize, bu * NB),
            bs.sub(bp.vt as usize, bu * NB),
            bs.sub(bp.x as usize, bu * NB),
        );
        let t_out = bs.sub(bp.t as usize, NB * NB);
        let barrier = GridBarrier::new(barriers.sub_unchecked(img, 1).as_mut_ptr(), groups as u32);

        let wide = bu * PANEL_STRIDE;
        let vs = Vector { p: shared::region::<f64>(0, wide).as_ptr(), len: wide };
        let ws = Vector { p: shared::region::<f64>(8 * wide, wide).as_ptr(), len: wide };
        let small = Vector { p: shared::region::<f64>(16 * wide, SMALL).as_ptr(), len: SMALL };
        let mut offset = 0;
        let mut take = |n: usize| {
            offset += n;
            small.sub(offset - n, n)
        };
        let (dots, norms) = (take(MAX_ROW_GROUPS * NB), take(MAX_ROW_GROUPS));
        let (t_s, y_s, m_s, c_s) = (take(NB * NB), take(NB * NB), take(NB * NB), take(NB * NB));
        let (partials, v0s, taus) = (take(MAX_PARTS * NB * NB), take(NB), take(NB));
        let at = |i: usize, c: usize| i * PANEL_STRIDE + c;
        // Σᵢ x(i, p)·y(i, q) over `rows` for every (p, q) < BAND: the partial sums by up to
        // MAX_PARTS threads per entry, then their sum into `out`. All threads call it.
        let panel_products = |x: Vector, y: Vector, rows: usize, out: Vector| {
            let parts_n = (nt / (NB * NB)).clamp(1, MAX_PARTS);
            let mut e = tid;
            while e < parts_n * NB * NB {
                let (part, pq) = (e / (NB * NB), e % (NB * NB));
                let (p, q) = (pq / NB, pq % NB);
                partials.set(e, strided_dot(|i| x.get(at(i, p)), |i| y.get(at(i, q)), part, parts_n, rows));
                e += nt;
            }
            thread::sync_threads();
            let mut e = tid;
            while e < NB * NB {
                let mut s = 0.0f64;
                for part in 0..parts_n {
                    s += partials.get(part * NB * NB + e);
                }
                out.set(e, s);
                e += nt;
            }
            thread::sync_threads();
        };

        // This block's rows of (T + Tᵀ)/2, a warp per row; block 0 clears the band and τ.
        let mut i = g + groups * warp_id;
        while i < bu {
            let mut c = lane;
            while c < bu {
                a.set(i * bu + c, 0.5 * (t_in.get_unchecked(i * bu + c) + t_in.get_unchecked(c * bu + i)));
                c += 32;
            }
            i += groups * warps;
        }
        if g == 0 {
            let mut e = tid;
            while e < bu * LD {
                band.set(e, 0.0);
                if e < bu {
                    tau_out.set(e, 0.0);
                }
                e += nt;
            }
        }
        barrier.sync();

        for j0 in (0..bu).step_by(NB) {
            let m0 = j0 + NB;
            let mp = bu.saturating_sub(m0);
            if g == 0 {
                // The diagonal block's lower triangle into the band: final since the last panel.
                let nd = NB.min(bu - j0);
                let mut e = tid;
                while e < nd * nd {
                    let (r, l) = (e / nd, e % nd);
                    if r >= l {
                        band.set((j0 + l) * LD + r - l, a.get((j0 + r) * bu + j0 + l));
                    }
                    e += nt;
                }
                if mp > 0 {
                    panel_qr(PanelQr { a, ws, dots, norms, v0s, taus, bu, j0, mp });
                    // V with its zeros and v₀ into `vs`; R into the band; the reflectors and τ
                    // where the back-transformation reads them.
                    let mut e = tid;
                    while e < mp * NB {
                        let (i, l) = (e / NB, e % NB);
                        let v = if i < l {
                            0.0
                        } else if i == l {
                            v0s.get(l)
                        } else {
                            ws.get(at(i, l))
                        };
                        vs.set(at(i, l), v);
                        if i <= l {
                            band.set((j0 + l) * LD + NB + i - l, ws.get(at(i, l)));
                        }
                        e += nt;
                    }
                    let mut l = warp_id;
                    while l < NB {
                        let c = j0 + l;
                        let mut q = c + 1 + lane;
                        while q < bu {
                            let v = if q < m0 + l {
                                0.0
                            } else if q == m0 + l {
                                v0s.get(l)
                            } else {
                                ws.get(at(q - m0, l))
                            };
                            reflectors.set(q, c, v);
                            q += 32;
                        }
                        if lane == 0 && c < bu {
                            tau_out.set(c, taus.get(l));
                        }
                        l += warps;
                    }
                    thread::sync_threads();
                    // T of Q = H₀·H₁ ⋯ = I − V·T·Vᵀ: lane a its row, from VᵀV.
                    panel_products(vs, vs, mp, y_s);
                    if tid < NB {
                        let a_row = tid;
                        for l in 0..NB {
                            let value = if l < a_row {
                                0.0
                            } else if l == a_row {
                                taus.get(l)
                            } else {
                                let mut s = 0.0f64;
                                for k in a_row..l {
                                    s = math::fma(t_s.get(a_row * NB + k), y_s.get(k * NB + l), s);
                                }
                                -taus.get(l) * s
                            };
                            t_s.set(a_row * NB + l, value);
                        }
                    }
                    thread::sync_threads();
                    // V·T and V for the other blocks, and T.
                    let mut i = rg;
                    while i < mp {
                        let mut s = 0.0f64;
                        for k in 0..NB {
                            if k <= col {
                                s = math::fma(vs.get(at(i, k)), t_s.get(k * NB + col), s);
                            }
                        }
                        vt_out.set(i * NB + col, s);
                        panel_v.set(i * NB + col, vs.get(at(i, col)));
                        i += row_groups;
                    }
                    let mut e = tid;
                    while e < NB * NB {
                        t_out.set(e, t_s.get(e));
                        e += nt;
                    }
                }
            }
            if mp == 0 {
                break;
            }
            barrier.sync();

            // Every block: X = S·(V·T) for its rows of S = A(m₀.., m₀..), a warp per row.
            copy_in_flight(mp * NB, |e| vt_out.get(e), |e, x| ws.set(at(e / NB, e % NB), x));
            thread::sync_threads();
            let mut i = g + groups * warp_id;
            while i < mp {
                let row = (m0 + i) * bu + m0;
                let mut acc = [0.0f64; NB];
                for chunk in 0..mp.div_ceil(32 * ROW_LOADS) {
                    for (u, s) in row_loads(a, row, mp, lane, chunk).iter().enumerate() {
                        let j = lane + 32 * (chunk * ROW_LOADS + u);
                        if j < mp {
                            for (c, acc) in acc.iter_mut().enumerate() {
                                *acc = math::fma(*s, ws.get(at(j, c)), *acc);
                            }
                        }
                    }
                }
                let x = reduce_scatter(acc, lane);
                if lane % 2 == 0 {
                    x_out.set(i * NB + lane / 2, x);
                }
                i += groups * warps;
            }
            barrier.sync();

            // Every block: V and X into shared memory; M = VᵀX, C = Tᵀ·M, W = X − ½·V·C; its rows
            // of S − V·Wᵀ − W·Vᵀ.
            copy_in_flight(mp * NB, |e| panel_v.get(e), |e, x| vs.set(at(e / NB, e % NB), x));
            copy_in_flight(mp * NB, |e| x_out.get(e), |e, x| ws.set(at(e / NB, e % NB), x));
            copy_in_flight(NB * NB, |e| t_out.get(e), |e, x| t_s.set(e, x));
            thread::sync_threads();
            panel_products(vs, ws, mp, m_s);
            let mut e = tid;
            while e < NB * NB {
                let (p, q) = (e / NB, e % NB);
                let mut s = 0.0f64;
                for k in 0..NB {
                    if k <= p {
                        s = math::fma(t_s.get(k * NB + p), m_s.get(k * NB + q), s);
                    }
                }
                c_s.set(e, s);
                e += nt;
            }
            thread::sync_threads();
            let mut i = rg;
            while i < mp {
                let mut s = 0.0f64;
                for k in 0..NB {
                    s = math::fma(vs.get(at(i, k)), c_s.get(k * NB + col), s);
                }
                ws.set(at(i, col), math::fma(-0.5, s, ws.get(at(i, col))));
                i += row_groups;
            }
            thread::sync_threads();
            let mut i = g + groups * warp_id;
            while i < mp {
                let row = (m0 + i) * bu + m0;
                for chunk in 0..mp.div_ceil(32 * ROW_LOADS) {
                    for (u, s) in row_loads(a, row, mp, lane, chunk).iter().enumerate() {
                        let j = lane + 32 * (chunk * ROW_LOADS + u);
                        if j < mp {
                            let mut s = *s;
                            for c in 0..NB {
                                s = math::fma(-vs.get(at(i, c)), ws.get(at(j, c)), s);
                                s = math::fma(-ws.get(at(i, c)), vs.get(at(j, c)), s);
                            }
                            a.set(row + j, s);
                        }
                    }
                }
                i += groups * warps;
            }
            barrier.sync();
        }
    }
}

/// Block 0's panel QR: its arrays and where the panel lies.
#[derive(Clone, Copy)]
struct PanelQr {
    a: Vector,
    ws: Vector,
    dots: Vector,
    norms: Vector,
    v0s: Vector,
    taus: Vector,
    bu: usize,
    j0: usize,
    mp: usize,
}

/// The Householder QR of the panel `A(m₀.., j₀..j₀ + BAND)` into `ws` (`mp × BAND`, stride 17):
/// `R` on and above the diagonal, each reflector's `v` below it (its first element in `v0s`, its
/// `τ` in `taus`; `τ = 0` past `mp` columns). The threads are `(row group, column)` pairs; two
/// barriers per column. All threads of the block call it.
///
/// # Safety
/// As for [`band_reduce`]; `mp ≥ 1`.
#[inline(always)]
unsafe fn panel_qr(q: PanelQr) {
    let PanelQr { a, ws, dots, norms, v0s, taus, bu, j0, mp } = q;
    let m0 = j0 + NB;
    let (tid, nt) = (thread::thread_idx_x() as usize, thread::block_dim_x() as usize);
    let (row_groups, rg, col) = (nt / NB, tid / NB, tid % NB);
    let at = |i: usize, c: usize| i * PANEL_STRIDE + c;
    // SAFETY: as for the kernel's body.
    unsafe {
        copy_in_flight(
            mp * NB,
            |e| a.get((m0 + e / NB) * bu + j0 + e % NB),
            |e, x| ws.set(at(e / NB, e % NB), x),
        );
        if tid < NB {
            v0s.set(tid, 0.0);
            taus.set(tid, 0.0);
        }
        thread::sync_threads();
        if col == 0 {
            let mut s = 0.0f64;
            let mut i = 1 + rg;
            while i < mp {
                let x = ws.get(at(i, 0));
                s = math::fma(x, x, s);
                i += row_groups;
            }
            norms.set(rg, s);
        }
        thread::sync_threads();
        for l in 0..NB.min(mp) {
            // Every thread: the reflector of column l from the partial norms, the same bits in each.
            let sigma2 = strided_dot(|r| norms.get(r), |_| 1.0, 0, 1, row_groups);
            let (beta, tau, v0) = reflector(ws.get(at(l, l)), sigma2);
            let v = |i: usize| if i == l { v0 } else { ws.get(at(i, l)) };
            if col > l {
                dots.set(rg * NB + col, strided_dot(v, |i| ws.get(at(i, col)), l + rg, row_groups, mp));
            }
            thread::sync_threads();
            if col > l {
                let f = tau * strided_dot(|r| dots.get(r * NB + col), |_| 1.0, 0, 1, row_groups);
                let mut s = 0.0f64;
                let mut i = l + rg;
                while i < mp {
                    let x = math::fma(-f, v(i), ws.get(at(i, col)));
                    ws.set(at(i, col), x);
                    if i > l + 1 {
                        s = math::fma(x, x, s);
                    }
                    i += row_groups;
                }
                if col == l + 1 {
                    norms.set(rg, s);
                }
            } else if col == l && rg == 0 {
                ws.set(at(l, l), beta);
                v0s.set(l, v0);
                taus.set(l, tau);
            }
            thread::sync_threads();
        }
    }
}

/// Loads in flight per thread of [`copy_in_flight`].
const LOADS_IN_FLIGHT: usize = 8;
/// Elements of a row of the trailing matrix a lane loads at once, before using them.
const ROW_LOADS: usize = 1;

/// `dst(e, src(e))` for `e < n`, dealt over the block's threads, each issuing
/// [`LOADS_IN_FLIGHT`] loads before their stores: with one load at a time, each waited for, the
/// copies from global memory took most of a phase.
#[inline(always)]
pub(super) fn copy_in_flight(n: usize, src: impl Fn(usize) -> f64, dst: impl Fn(usize, f64)) {
    let (tid, nt) = (thread::thread_idx_x() as usize, thread::block_dim_x() as usize);
    let mut e0 = tid;
    while e0 < n {
        let mut loaded = [0.0f64; LOADS_IN_FLIGHT];
        for (u, x) in loaded.iter_mut().enumerate() {
            if e0 + u * nt < n {
                *x = src(e0 + u * nt);
            }
        }
        for (u, x) in loaded.iter().enumerate() {
            if e0 + u * nt < n {
                dst(e0 + u * nt, *x);
            }
        }
        e0 += LOADS_IN_FLIGHT * nt;
    }
}

/// A lane's elements `lane + 32·(ROW_LOADS·chunk + u) < len` of the row at `start` of `a`, the
/// loads in flight together (zeros past `len`).
///
/// # Safety
/// `start + len` within `a`.
#[inline(always)]
unsafe fn row_loads(a: Vector, start: usize, len: usize, lane: usize, chunk: usize) -> [f64; ROW_LOADS] {
    let mut row = [0.0f64; ROW_LOADS];
    for (u, x) in row.iter_mut().enumerate() {
        let j = lane + 32 * (chunk * ROW_LOADS + u);
        if j < len {
            // SAFETY: inside the row (the caller's contract).
            *x = unsafe { a.get(start + j) };
        }
    }
    row
}

/// `Σ x(i)·y(i)` over `i = start, start + stride, … < end`, four sums in flight (the loads of
/// four terms issued together).
#[inline(always)]
fn strided_dot(
    x: impl Fn(usize) -> f64,
    y: impl Fn(usize) -> f64,
    start: usize,
    stride: usize,
    end: usize,
) -> f64 {
    let mut sums = [0.0f64; 4];
    let mut i = start;
    while i + 3 * stride < end {
        for (u, sum) in sums.iter_mut().enumerate() {
            *sum = math::fma(x(i + u * stride), y(i + u * stride), *sum);
        }
        i += 4 * stride;
    }
    while i < end {
        sums[0] = math::fma(x(i), y(i), sums[0]);
        i += stride;
    }
    (sums[0] + sums[1]) + (sums[2] + sums[3])
}

/// The sums over the warp's lanes of 16 values per lane, lanes `2c` and `2c + 1` receiving the
/// sum of the `c`-th values: 16 shuffles in place of 16 reductions of 5.
#[inline(always)]
fn reduce_scatter(mut acc: [f64; NB], lane: usize) -> f64 {
    halve::<8>(&mut acc, lane);
    halve::<4>(&mut acc, lane);
    halve::<2>(&mut acc, lane);
    halve::<1>(&mut acc, lane);
    acc[0] + warp::shfl_xor_sync(warp::FULL_MASK, acc[0], 1)
}

/// One step of [`reduce_scatter`]: the lanes whose bit `2·HALF` is set keep the upper `HALF`
/// values (the partner's added), the others the lower ones (constant indices: registers).
#[inline(always)]
fn halve<const HALF: usize>(acc: &mut [f64; NB], lane: usize) {
    let upper = lane & (2 * HALF) != 0;
    for k in 0..HALF {
        let (keep, send) = if upper { (acc[k + HALF], acc[k]) } else { (acc[k], acc[k + HALF]) };
        acc[k] = keep + warp::shfl_xor_sync(warp::FULL_MASK, send, 2 * HALF as u32);
    }
}
