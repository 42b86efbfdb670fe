//! The symmetric tridiagonal eigenproblem by divide and conquer (Cuppen's method with Gu and
//! Eisenstat's eigenvectors, as LAPACK's `stedc`/`laed0`–`laed4`), by one thread block per image:
//! the second stage of the tridiagonal solver ([`tridiagonal_divide_and_conquer`], after
//! [`tridiagonal_reduce`](super::tridiagonal_reduce)).
//!
//! The matrix (scaled to a largest element of 1) is torn at every off-diagonal element:
//! `T = diag(T₁, T₂) + ρ·u·uᵀ` with `u` the unit vectors of the rows either side of the tear.
//! Leaves are single rows; level `l` merges neighbouring solved pieces of `2ˡ` rows, every merge
//! of the level at once, in six phases with a barrier after each:
//!
//! 1. `z = [last row of Q₁, ±first row of Q₂]/√2` and the two pieces' eigenvalues merged into
//!    ascending order (a thread per eigenvalue, by binary search in the other piece);
//! 2. deflation (LAPACK's `laed2`): pairs with `ρ·|zᵢ| ≤ tol` keep their eigenpair, and an
//!    eigenvalue close to the next is rotated out (a Givens rotation of the two vectors) so that
//!    it keeps its pair too; a thread per element by warp votes and counts where no rotation is
//!    due, else a thread per merge in order;
//! 3. the rotations (a warp per merge, in order) and the roots of the secular equation
//!    `1/ρ + Σ zᵢ²/(dᵢ − λ) = 0`, a warp per root: each relative to its nearer pole, so that
//!    `dᵢ − λ` is accurate for the vectors, by a two-pole rational model step (Bunch, Nielsen and
//!    Sorensen) safeguarded by bisection of the root's bracket;
//! 4. `ẑ` from the roots (Gu and Eisenstat: the `z` for which the computed roots are exact, so
//!    the vectors below are orthogonal to working precision), a warp per pole over the group,
//!    and each eigenvalue's place in the merged order;
//! 5. the secular vectors `ẑᵢ/(dᵢ − λⱼ)`, normalised, a warp each (a warp's lanes on consecutive
//!    elements of a vector, so that its reads and writes are whole lines);
//! 6. the new eigenvectors: the pieces' vectors times the secular vectors (a warp per four
//!    vectors and 32 rows), deflated ones copied, all into their places in ascending order.
//!
//! Eigenvectors are stored a vector per row (`b` f64, element `i` in column `i`), every row zero
//! outside its piece; the work alternates between two `b × b` buffers.

// Index loops with constant bounds over small arrays keep them in registers; the iterator forms
// (`iter_mut().enumerate()`, `zip`) left accumulators in local memory (ptxas: 336-byte stack).
#![allow(clippy::needless_range_loop)]

use super::tridiagonal::{TRIDIAGONAL_MAX_B, Vector, tridiagonal_scratch, tridiagonal_scratch_parts};
use gpu_std::grid::GridBarrier;
use gpu_std::{block, kernel, math, shared, thread, warp};

/// Vectors of `b` f64 of one level's work ([`Level`]).
const LEVEL_VECTORS: usize = 16;
/// Vectors of `b` f64 the solver keeps in shared memory: the level's work, `d` and `e`.
const DC_VECTORS: u32 = LEVEL_VECTORS as u32 + 2;
/// Cap on the steps for one root of the secular equation (the model step converges in a few;
/// bisection alone needs about 60).
const MAX_SECULAR_STEPS: u32 = 80;
/// Vectors per warp in the eigenvector product (phase 6) of small pieces.
const ROWS: usize = 4;
/// Widest merge whose eigenvector product runs a warp per item; wider ones run by tiles.
const WARP_MERGE: usize = 32;
/// Rows (new vectors) and columns of an output tile of the eigenvector product.
const TILE: usize = 64;
/// Depth of a staged chunk of the eigenvector product.
const TILE_K: usize = 32;
/// Stride of the staged secular vectors (padded against bank conflicts).
const TILE_K_STRIDE: usize = TILE_K + 1;
/// f64 of shared memory for the eigenvector product's staged tiles: the secular vectors
/// (`TILE × TILE_K`, padded) and the pieces' vectors (`TILE_K × TILE`).
const TILE_ELEMENTS: u32 = (TILE * TILE_K_STRIDE + TILE_K * TILE) as u32;

/// Dynamic shared memory of [`tridiagonal_divide_and_conquer`], bytes: its vectors and the
/// eigenvector product's tiles, `144·b + 33,280`.
pub const fn divide_and_conquer_shared_bytes(b: u32) -> u32 {
    8 * (DC_VECTORS * b + TILE_ELEMENTS)
}
/// Elements per step of the loops that read the secular vectors and the pieces' vectors from
/// global memory, their loads issued together.
const UNROLL: usize = 8;

/// The divide and conquer's work space: in the image's scratch `w` (`b × b`, the eigenvectors at
/// the end, a row each), `other` and `u` (`b × b` each) and the roots; in shared memory
/// [`LEVEL_VECTORS`]` · b` for its vectors.
#[derive(Clone, Copy)]
struct DcSpace {
    /// The diagonal, `b` (read only).
    d: Vector,
    /// The off-diagonal, `e[i]` coupling rows `i` and `i + 1` (read only).
    e: Vector,
    /// The eigenvalues, out (ascending); until then, a group's `ẑ` of the level.
    lam: Vector,
    /// The eigenvectors, out: vector `j` (eigenvalue `lam[j]`) in row `j`.
    w: Vector,
    /// The second eigenvector buffer.
    other: Vector,
    /// The secular vectors (`dᵢ − λⱼ`, then the normalised vectors), a row per root.
    u: Vector,
    /// [`LEVEL_VECTORS`] vectors of `b`, in shared memory.
    vectors: Vector,
    /// The roots of a level, `b`, in the scratch: where a group's blocks leave the roots they
    /// found for the others.
    roots: Vector,
    /// [`TILE_ELEMENTS`] f64 of shared memory for the eigenvector product.
    tiles: Vector,
    /// `b`.
    bu: usize,
}

/// The rows `[s, m)` and `[m, t)` that the merge of level `half` holding row `g` joins (`m ≥ t`:
/// the piece has no partner at this level and is carried).
#[inline(always)]
fn merge_of(g: usize, half: usize, bu: usize) -> (usize, usize, usize) {
    let s = g / (2 * half) * (2 * half);
    (s, (s + half).min(bu), (s + 2 * half).min(bu))
}

/// The threads that solve one image: its block, or the group of blocks `blockIdx.x` of
/// `gridDim.x` meeting at grid barriers, which then share the work of every phase. Its ranks are
/// read from the special registers when asked for, so that they hold no registers between uses.
#[derive(Clone, Copy)]
struct Workers {
    /// The group's barrier counter (unused for one block).
    counter: *mut u32,
}

impl Workers {
    /// The group's blocks.
    #[inline(always)]
    fn blocks(self) -> usize {
        thread::grid_dim_x() as usize
    }

    /// This block's rank in the group.
    #[inline(always)]
    fn block(self) -> usize {
        thread::block_idx_x() as usize
    }

    /// This thread's rank among the workers, and their number.
    #[inline(always)]
    fn ranks(self) -> (usize, usize) {
        let nt = thread::block_dim_x() as usize;
        (self.block() * nt + thread::thread_idx_x() as usize, self.blocks() * nt)
    }

    /// Waits for every worker; their writes before it are visible after it.
    #[inline(always)]
    fn sync(self) {
        if self.blocks() == 1 {
            thread::sync_threads();
        } else {
            // SAFETY: the counter of this image's group, zero at the launch (the kernel's
            // contract), used by every block of the group alike.
            unsafe { GridBarrier::new(self.counter, self.blocks() as u32) }.sync();
        }
    }
}

/// The vectors of one level's work: [`LEVEL_VECTORS`] of `b` from `base` (shared memory), the two
/// eigenvalue vectors trading places each level (`flip`).
#[derive(Clone, Copy)]
struct Level {
    base: *mut f64,
    bu: usize,
    flip: bool,
}

impl Level {
    /// Vector `i`.
    #[inline(always)]
    fn vector(self, i: usize) -> Vector {
        // SAFETY: `base` holds LEVEL_VECTORS·b f64 (divide_and_conquer's contract), i < LEVEL_VECTORS.
        Vector { p: unsafe { self.base.add(i * self.bu) }, len: self.bu }
    }

    /// The eigenvalues of the pieces (ascending within each).
    #[inline(always)]
    fn values(self) -> Vector {
        self.vector(self.flip as usize)
    }

    /// The eigenvalues of the merged pieces.
    #[inline(always)]
    fn merged_values(self) -> Vector {
        self.vector(1 - self.flip as usize)
    }

    /// Per merged position, in ascending order of `d`: `d`,
    #[inline(always)]
    fn sorted_d(self) -> Vector {
        self.vector(2)
    }

    /// `z`,
    #[inline(always)]
    fn sorted_z(self) -> Vector {
        self.vector(3)
    }

    /// and the vector's row.
    #[inline(always)]
    fn sorted_row(self) -> Vector {
        self.vector(4)
    }

    /// After deflation, in the merge's first `K` places: the secular equation's poles (then, from
    /// the merge's end, the deflated eigenvalues),
    #[inline(always)]
    fn pole(self) -> Vector {
        self.vector(5)
    }

    /// its weights,
    #[inline(always)]
    fn weight(self) -> Vector {
        self.vector(6)
    }

    /// and the vectors' rows (the deflated ones' too).
    #[inline(always)]
    fn row(self) -> Vector {
        self.vector(7)
    }

    /// The deflation's Givens rotations, in order from the merge's first place: rows `p`,
    #[inline(always)]
    fn rot_p(self) -> Vector {
        self.vector(8)
    }

    /// rows `n`,
    #[inline(always)]
    fn rot_n(self) -> Vector {
        self.vector(9)
    }

    /// `c`,
    #[inline(always)]
    fn rot_c(self) -> Vector {
        self.vector(10)
    }

    /// and `s`.
    #[inline(always)]
    fn rot_s(self) -> Vector {
        self.vector(11)
    }

    /// At the merge's first place `K`, at its second the number of rotations.
    #[inline(always)]
    fn counts(self) -> Vector {
        self.vector(12)
    }

    /// The roots (eigenvalues of the non-deflated part).
    #[inline(always)]
    fn roots(self) -> Vector {
        self.vector(13)
    }

    /// Gu and Eisenstat's `ẑ` (for one block; a group's is in `DcSpace::lam`).
    #[inline(always)]
    fn zhat(self) -> Vector {
        self.vector(14)
    }

    /// Each merged position's place in the merged order.
    #[inline(always)]
    fn place(self) -> Vector {
        self.vector(15)
    }
}

/// Eigenvalues and eigenvectors of the symmetric tridiagonal `(d, e)` into `lam` (ascending) and
/// the rows of `w`. All threads of the block call it.
///
/// # Safety
/// The vectors hold `b` each, `w`, `other` and `u` `b²`, `vectors` [`LEVEL_VECTORS`]` · b`, none
/// overlapping; a barrier followed the writes of `d` and `e`; all the workers call it.
#[inline(always)]
unsafe fn divide_and_conquer(sp: DcSpace, wk: Workers) {
    let DcSpace { d, e, lam, w, other, vectors, bu, .. } = sp;
    let (tid, nt) = (thread::thread_idx_x() as usize, thread::block_dim_x() as usize);
    // SAFETY (whole body): every index below is inside its vector (rows and columns below b);
    // between barriers each element is written by one thread (or one lane of one warp) and read
    // by others only after the next barrier.
    unsafe {
        let full = vectors.sub(0, LEVEL_VECTORS * bu);
        let mut level = Level { base: full.p, bu, flip: false };
        // Every thread the same scale: the largest element.
        let mut scale = 0.0f64;
        for i in 0..bu {
            scale = scale.max(math::abs(d.get(i)));
            if i + 1 < bu {
                scale = scale.max(math::abs(e.get(i)));
            }
        }
        let scale = if scale > 0.0 { scale } else { 1.0 };
        // The leaves: one row each, torn from both neighbours.
        let (gtid, gnt) = wk.ranks();
        let mut i = gtid;
        while i < bu * bu {
            w.set(i, if i % (bu + 1) == 0 { 1.0 } else { 0.0 });
            other.set(i, 0.0);
            i += gnt;
        }
        let mut g = tid;
        while g < bu {
            let left = if g > 0 { math::abs(e.get(g - 1)) } else { 0.0 };
            let right = if g + 1 < bu { math::abs(e.get(g)) } else { 0.0 };
            level.values().set(g, (d.get(g) - left - right) / scale);
            g += nt;
        }
        wk.sync();
        let (mut src, mut dst) = (w, other);
        let mut half = 1;
        while half < bu {
            merge_level(sp, level, (src, dst), half, scale, wk);
            (src, dst) = (dst, src);
            level.flip = !level.flip;
            half *= 2;
        }
        let (gtid, gnt) = wk.ranks();
        let mut i = gtid;
        while i < bu * bu && src.p != w.p {
            w.set(i, src.get(i));
            i += gnt;
        }
        let mut g = tid;
        while g < bu && wk.block() == 0 {
            lam.set(g, level.values().get(g) * scale);
            g += nt;
        }
        wk.sync();
    }
}

/// The tridiagonal eigenproblem of each image's `(d, e)` (left in the scratch by
/// [`tridiagonal_reduce`](super::tridiagonal_reduce)) by divide and conquer: every eigenvalue
/// and eigenvector into the scratch's `values` and the rows of `W`
/// ([`tridiagonal_scratch_parts`]), ascending. Grid `(groups, images)`: one block per image
/// (`groups = 1`), or a group of blocks per image launched cooperatively, which deal out the
/// phases that write the scratch (the rotations, the roots and their secular vectors, the
/// eigenvector products tile by tile) and meet at a grid barrier after each, and run the others,
/// on the level's vectors in shared memory, each alike; blocks of `32·w` threads (`w ≤ 16`),
/// dynamic shared memory
/// [`divide_and_conquer_shared_bytes`]`(b)`.
///
/// # Safety
/// The launch gives that shared memory and a whole number of warps, at most 512 threads (its
/// launch bounds), cooperatively where `groups > 1`; `b ≤` [`TRIDIAGONAL_MAX_B`]; each image's
/// [`tridiagonal_scratch`]`(b)` lies inside `scratch`, and with `groups > 1` its `u32` in
/// `barriers`, zero when the launch starts. Unchecked on the GPU; the simulator checks every
/// access.
#[kernel(launch_bounds(512, 1))]
pub unsafe fn tridiagonal_divide_and_conquer(b: u32, scratch: &mut [f64], barriers: &mut [u32]) {
    let (img, bu) = (thread::block_idx_y() as usize, b as usize);
    let blocks = thread::grid_dim_x() as usize;
    let (tid, nt) = (thread::thread_idx_x() as usize, thread::block_dim_x() as usize);
    let parts = tridiagonal_scratch_parts(b);
    let per_image = tridiagonal_scratch(b) as usize;
    debug_assert!(bu <= TRIDIAGONAL_MAX_B as usize);
    // SAFETY (whole body): the kernel's contract: the image's scratch lies inside `scratch`, its
    // parts inside it; the launch gives the shared memory of the vectors and the tiles, and for a
    // group the barrier's counter.
    unsafe {
        let base = Vector::image_part(scratch, img, per_image);
        let len = DC_VECTORS as usize * bu;
        let vectors = Vector { p: shared::region::<f64>(0, len).as_ptr(), len };
        let tiles = Vector {
            p: shared::region::<f64>(8 * len, TILE_ELEMENTS as usize).as_ptr(),
            len: TILE_ELEMENTS as usize,
        };
        let (d, e) = (vectors.sub(LEVEL_VECTORS * bu, bu), vectors.sub((LEVEL_VECTORS + 1) * bu, bu));
        let (d_in, e_in) = (base.sub(parts.diagonal as usize, bu), base.sub(parts.off_diagonal as usize, bu));
        let mut i = tid;
        while i < bu {
            d.set(i, d_in.get(i));
            e.set(i, e_in.get(i));
            i += nt;
        }
        thread::sync_threads();
        let counter =
            if blocks > 1 { barriers.sub_unchecked(img, 1).as_mut_ptr() } else { core::ptr::null_mut() };
        let workers = Workers { counter };
        let work = base.sub(parts.work as usize, 2 * bu * bu);

        divide_and_conquer(
            DcSpace {
                d,
                e,
                lam: base.sub(parts.values as usize, bu),
                w: base.sub(parts.w as usize, bu * bu),
                other: work.sub(0, bu * bu),
                u: work.sub(bu * bu, bu * bu),
                vectors: vectors.sub(0, LEVEL_VECTORS * bu),
                roots: base.sub(parts.roots as usize, bu),
                tiles,
                bu,
            },
            workers,
        );
    }
}

/// One level of merges: the pieces of `half` rows in `src` (eigenvalues in `level.values()`) into
/// the merged pieces in `dst` (eigenvalues in `level.merged_values()`). All threads call it.
///
/// # Safety
/// As for [`divide_and_conquer`].
#[inline(always)]
unsafe fn merge_level(
    sp: DcSpace,
    level: Level,
    (src, dst): (Vector, Vector),
    half: usize,
    scale: f64,
    wk: Workers,
) {
    let DcSpace { e, u, bu, .. } = sp;
    // Phases 1, 2 and 4 (shared memory only) run in every block alike; the group deals out
    // those that write the scratch (3, 5 and 6) by these ranks.
    let (tid, nt) = (thread::thread_idx_x() as usize, thread::block_dim_x() as usize);
    let (gtid, gnt) = wk.ranks();
    let (lane, gwarp, gwarps) = (tid % 32, gtid / 32, gnt / 32);
    let merges = bu.div_ceil(2 * half);
    // The tear's ρ (of the normalised z) and the sign of the coupling.
    let tear = #[inline(always)]
    |m: usize| {
        // SAFETY: m − 1 < b − 1.
        let beta = unsafe { e.get(m - 1) } / scale;
        (2.0 * math::abs(beta), if beta < 0.0 { -1.0 } else { 1.0 })
    };
    // SAFETY (whole body): as for `divide_and_conquer`.
    unsafe {
        // 1. z and the merged order of d.
        let mut g = tid;
        while g < bu {
            let (s, m, t) = merge_of(g, half, bu);
            if m < t {
                let (_, sign) = tear(m);
                let value = level.values().get(g);
                let (z, rank) = if g < m {
                    (src.get(g * bu + m - 1), g - s + count_below(level.values(), (m, t), value, false))
                } else {
                    (sign * src.get(g * bu + m), g - m + count_below(level.values(), (s, m), value, true))
                };
                level.sorted_d().set(s + rank, value);
                level.sorted_z().set(s + rank, z * core::f64::consts::FRAC_1_SQRT_2);
                level.sorted_row().set(s + rank, g as f64);
            }
            g += nt;
        }
        thread::sync_threads();
        // 2. Deflation: a thread per element where no rotation is due, else a thread per merge.
        deflate_without_rotations(level, e, half, bu, scale);
        let (mut q, mut rotating) = (tid, false);
        while q < merges {
            let (s, m, t) = merge_of(q * 2 * half, half, bu);
            if m < t && level.counts().get(s + 1) != 0.0 {
                deflate(level, (s, t), tear(m).0);
                rotating |= level.counts().get(s + 1) > 0.0;
            }
            q += nt;
        }
        // The rotations below overwrite vectors that phase 1 of a group's other blocks may still
        // read: where there are any (every block finds the same), the whole group waits first.
        if block::sync_threads_or(rotating) {
            wk.sync();
        }
        // 3. The rotations, a warp per merge, and the roots, a warp each.
        let mut q = gwarp;
        while q < merges {
            let (s, m, t) = merge_of(q * 2 * half, half, bu);
            for r in 0..if m < t { level.counts().get(s + 1) as usize } else { 0 } {
                let (p, n) = (level.rot_p().get(s + r) as usize, level.rot_n().get(s + r) as usize);
                let (c, sn) = (level.rot_c().get(s + r), level.rot_s().get(s + r));
                let mut col = s + lane;
                while col < t {
                    let (x, y) = (src.get(p * bu + col), src.get(n * bu + col));
                    src.set(p * bu + col, math::fma(c, x, sn * y));
                    src.set(n * bu + col, math::fma(c, y, -sn * x));
                    col += 32;
                }
            }
            q += gwarps;
        }
        // The roots, a warp each (its lanes share the sums over the poles and write the row of
        // `u` together), into shared memory for one block, else into the scratch for every block.
        let grouped = wk.blocks() > 1;
        let roots = if grouped { sp.roots } else { level.roots() };
        let mut g = gwarp;
        while g < bu {
            let (s, m, t) = merge_of(g, half, bu);
            let k = if m < t { level.counts().get(s) as usize } else { 0 };
            if g - s < k {
                let (poles, weights) = (level.pole().sub(s, k), level.weight().sub(s, k));
                let (origin, tau) = secular_root(poles, weights, tear(m).0, g - s);
                let at = poles.get(origin);
                if lane == 0 {
                    roots.set(g, at + tau);
                }
                let mut i = lane;
                while i < k {
                    u.set(g * bu + s + i, (poles.get(i) - at) - tau);
                    i += 32;
                }
            }
            g += gwarps;
        }
        wk.sync();
        if grouped {
            let mut g = tid;
            while g < bu {
                level.roots().set(g, roots.get(g));
                g += nt;
            }
            thread::sync_threads();
        }
        // 4. ẑ, a warp per pole dealt over the group (its lanes share the product over the
        //    roots), into the (not yet written) eigenvalues' place in the scratch for a group,
        //    else shared memory:
        //    ẑᵢ² = −(dᵢ − λᵢ)·Πⱼ≠ᵢ (dᵢ − λⱼ)/(dᵢ − dⱼ), with `u(j, i) = dᵢ − λⱼ`.
        let zhat = if grouped { sp.lam } else { level.zhat() };
        zhat_by_warps(level, u, zhat, half, bu, (gwarp, gwarps));
        //    Every eigenvalue's place in the merged order, in every block alike.
        let mut g = tid;
        while g < bu {
            let (s, m, t) = merge_of(g, half, bu);
            if m >= t {
                level.place().set(g, g as f64);
                level.merged_values().set(g, level.values().get(g));
            } else {
                let k = level.counts().get(s) as usize;
                let value_of = #[inline(always)]
                |h: usize| if h - s < k { level.roots().get(h) } else { level.pole().get(h) };
                let value = value_of(g);
                let mut rank = 0;
                for h in s..t {
                    let other = value_of(h);
                    if other < value || (other == value && h < g) {
                        rank += 1;
                    }
                }
                level.place().set(g, (s + rank) as f64);
                level.merged_values().set(s + rank, value);
            }
            g += nt;
        }
        // ẑ in every block, and every block's reads of `u` above before any block overwrites its
        // rows below.
        wk.sync();
        // 5. The secular vectors, normalised, a warp each.
        let mut g = gwarp;
        while g < bu {
            let (s, m, t) = merge_of(g, half, bu);
            let k = if m < t { level.counts().get(s) as usize } else { 0 };
            if g - s < k {
                let row = u.sub(g * bu + s, k);
                let mut ss = 0.0f64;
                let mut i = lane;
                while i < k {
                    let x = zhat.get(s + i) / row.get(i);
                    row.set(i, x);
                    ss = math::fma(x, x, ss);
                    i += 32;
                }
                let inv = 1.0 / math::sqrt(warp::reduce(ss, |a, b| a + b));
                let mut i = lane;
                while i < k {
                    row.set(i, row.get(i) * inv);
                    i += 32;
                }
            }
            g += gwarps;
        }
        wk.sync();
        // 6. The new eigenvectors into their places: for pieces of up to 16 rows a warp per
        //    `rows` positions and 32 columns; above, the deflated vectors copied a warp each and
        //    the products by tiles of the whole block.
        if 2 * half <= WARP_MERGE {
            let rows = ROWS.min(2 * half);
            let chunks = (2 * half).div_ceil(32);
            let mut item = gwarp;
            while item < bu.div_ceil(rows) * chunks {
                let g0 = item / chunks * rows;
                let (s, m, t) = merge_of(g0, half, bu);
                let col = s + item % chunks * 32 + lane;
                if col < t {
                    new_vectors(level, (src, dst), u, (s, m, t), (g0, rows), col, bu);
                }
                item += gwarps;
            }
        } else {
            let mut g = gwarp;
            while g < bu {
                let (s, m, t) = merge_of(g, half, bu);
                let k = if m < t { level.counts().get(s) as usize } else { 0 };
                if g - s >= k {
                    let (from, to) = if m < t {
                        (level.row().get(g) as usize, level.place().get(g) as usize)
                    } else {
                        (g, g)
                    };
                    let mut col = s + lane;
                    while col < t {
                        dst.set(to * bu + col, src.get(from * bu + col));
                        col += 32;
                    }
                }
                g += gwarps;
            }
            // The tiles dealt to the blocks in turn.
            let mut tile = 0;
            for q in 0..merges {
                let (s, m, t) = merge_of(q * 2 * half, half, bu);
                let k = if m < t { level.counts().get(s) as usize } else { 0 };
                for r0 in (0..k).step_by(TILE) {
                    for c0 in (s..t).step_by(TILE) {
                        if tile % wk.blocks() == wk.block() {
                            product_tile(level, (src, dst), u, sp.tiles, (s, t, k), (r0, c0), bu);
                        }
                        tile += 1;
                    }
                }
            }
        }
        wk.sync();
    }
}

/// Phase 4's `ẑ` of every pole of the level's merges, a warp per pole (`gwarp` of `gwarps`, dealt
/// over a group), into `zhat`: `ẑᵢ² = −(dᵢ − λᵢ)·Πⱼ≠ᵢ (dᵢ − λⱼ)/(dᵢ − dⱼ)` from
/// `u(j, i) = dᵢ − λⱼ`, the lanes sharing the product, with the sign of the pole's weight.
///
/// # Safety
/// As for [`divide_and_conquer`]; phases 1–3 of the level ran, and a barrier followed them.
#[inline(always)]
unsafe fn zhat_by_warps(
    level: Level,
    u: Vector,
    zhat: Vector,
    half: usize,
    bu: usize,
    (gwarp, gwarps): (usize, usize),
) {
    let lane = thread::thread_idx_x() as usize % 32;
    // SAFETY (whole body): every index is below b (poles) or b² (u); each ẑ is written by one lane.
    unsafe {
        let mut g = gwarp;
        while g < bu {
            let (s, m, t) = merge_of(g, half, bu);
            let k = if m < t { level.counts().get(s) as usize } else { 0 };
            let i = g - s;
            if i < k {
                let (di, poles) = (level.pole().get(g), level.pole().sub(s, k));
                let mut prod = if lane == 0 { u.get(g * bu + g) } else { 1.0 };
                let mut j = lane;
                while j < k {
                    if j != i {
                        prod *= u.get((s + j) * bu + g) / (di - poles.get(j));
                    }
                    j += 32;
                }
                let prod = warp::reduce(prod, |x, y| x * y);
                if lane == 0 {
                    let magnitude = math::sqrt((-prod).max(0.0));
                    zhat.set(g, if level.weight().get(g) < 0.0 { -magnitude } else { magnitude });
                }
            }
            g += gwarps;
        }
    }
}

/// Elements of the ascending `values[s..t)` below `value` (or, `or_equal`, not above it).
///
/// # Safety
/// `values` holds at least `t`.
#[inline(always)]
unsafe fn count_below(values: Vector, (s, t): (usize, usize), value: f64, or_equal: bool) -> usize {
    let (mut lo, mut hi) = (s, t);
    while lo < hi {
        let mid = (lo + hi) / 2;
        // SAFETY: mid < t.
        let x = unsafe { values.get(mid) };
        if x < value || (or_equal && x == value) {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    lo - s
}

/// LAPACK's `laed2` deflation of every merge of the level at once, a thread per element, on the
/// premise that no merge needs a rotation (eigenvalues close together are rare): each element's
/// tolerance test and the counts of kept and set-aside elements before it (by warp ballots and
/// per-warp counts) give its place, as [`deflate`] would give it. A merge where some element
/// would rotate gets `counts()[s + 1] ≠ 0` instead, for [`deflate`] to redo it. The level's
/// `roots`, `zhat` and `place` vectors, unused until phase 3, hold the maxima of `|z|` per merge
/// (or per warp of a wide merge), and each warp's kept elements and last kept element. All
/// threads of the block call it; a barrier follows. Not inlined: inlined, it raised the kernel's
/// spills (ptxas: 364 bytes of stores against 232).
///
/// # Safety
/// As for [`divide_and_conquer`] (`e` the off-diagonal); phase 1 of the level ran, and a barrier
/// followed it.
#[inline(never)]
unsafe fn deflate_without_rotations(level: Level, e: Vector, half: usize, bu: usize, scale: f64) {
    let tid = thread::thread_idx_x() as usize;
    let lane = tid % 32;
    let (d, z) = (level.sorted_d(), level.sorted_z());
    let (zmax_of, warp_kept, warp_last) = (level.roots(), level.zhat(), level.place());
    // A merge narrower than a warp: its `seg` lanes from a multiple of `seg`.
    let seg = (2 * half).min(32);
    let seg_lanes = if seg == 32 { u32::MAX } else { ((1u32 << seg) - 1) << (lane / seg * seg) };
    let below = (1u32 << lane) - 1;
    // SAFETY (whole body): every index is below b (elements) or b / seg rounded up; between
    // barriers each element is written by one thread.
    unsafe {
        // |z|'s maximum over each merge's lanes (by a warp of a wide merge).
        for_each_element(bu, |j| {
            let (s, m, t) = merge_of(j.min(bu - 1), half, bu);
            let mut zmax = if j < bu && m < t { math::abs(z.get(j)) } else { 0.0 };
            let mut step = 1;
            while step < seg {
                zmax = zmax.max(warp::shfl_xor_sync(u32::MAX, zmax, step as u32));
                step *= 2;
            }
            if j < bu && j % seg == 0 {
                zmax_of.set(j / seg, zmax);
            }
            if j < bu && j == s && m < t {
                level.counts().set(s + 1, 0.0);
            }
        });
        thread::sync_threads();
        // Each element's test: whether it keeps a pole, and the merge's tolerance.
        let tested = #[inline(always)]
        |j: usize| -> (bool, f64, (usize, usize, usize)) {
            let (s, m, t) = merge_of(j.min(bu - 1), half, bu);
            if j >= bu || m >= t {
                return (false, 0.0, (s, m, t));
            }
            let mut zmax = 0.0f64;
            for i in s / seg..(t - 1) / seg + 1 {
                zmax = zmax.max(zmax_of.get(i));
            }
            let tol = 8.0 * f64::EPSILON * math::abs(d.get(s)).max(math::abs(d.get(t - 1))).max(zmax);
            let rho = 2.0 * math::abs(e.get(m - 1)) / scale;
            (rho * math::abs(z.get(j)) > tol, tol, (s, m, t))
        };
        // The kept elements of each warp (of a wide merge).
        for_each_element(bu, |j| {
            let kept = warp::ballot_sync(u32::MAX, tested(j).0);
            if lane == 0 && j < bu {
                warp_kept.set(j / 32, kept.count_ones() as f64);
                let last = if kept == 0 { -1.0 } else { (j + 31 - kept.leading_zeros() as usize) as f64 };
                warp_last.set(j / 32, last);
            }
        });
        thread::sync_threads();
        // Places: the kept elements from `s` in order, the set-aside ones from `t − 1` down.
        for_each_element(bu, |j| {
            let (keep, tol, (s, m, t)) = tested(j);
            let kept = warp::ballot_sync(u32::MAX, keep) & seg_lanes;
            if j >= bu || m >= t {
                return;
            }
            let mut before = (kept & below).count_ones() as usize;
            for w in s / 32..j / 32 {
                before += warp_kept.get(w) as usize;
            }
            let to = if keep { s + before } else { t - 1 - (j - s - before) };
            level.pole().set(to, d.get(j));
            level.row().set(to, level.sorted_row().get(j));
            if keep {
                level.weight().set(to, z.get(j));
                // The kept element before it, in its warp or the merge's warps before.
                let mut p = -1.0f64;
                if kept & below != 0 {
                    p = (j - lane + 31 - (kept & below).leading_zeros() as usize) as f64;
                } else {
                    let mut w = j / 32;
                    while w > s / 32 && p < 0.0 {
                        w -= 1;
                        p = warp_last.get(w);
                    }
                }
                if p >= 0.0 {
                    let (zp, zj) = (z.get(p as usize), z.get(j));
                    let r = math::sqrt(math::fma(zp, zp, zj * zj));
                    if math::abs((d.get(j) - d.get(p as usize)) * (zj / r) * (-zp / r)) <= tol {
                        level.counts().set(s + 1, 1.0);
                    }
                }
            }
            if j == t - 1 {
                level.counts().set(s, (before + keep as usize) as f64);
            }
        });
        thread::sync_threads();
    }
}

/// Runs `body(j)` for every element `j` of the block's share, a warp's worth at a time: every lane
/// of a warp takes every step (for the warp votes), those past `b` with `j ≥ b`.
#[inline(always)]
fn for_each_element(bu: usize, mut body: impl FnMut(usize)) {
    let (tid, nt) = (thread::thread_idx_x() as usize, thread::block_dim_x() as usize);
    let mut j = tid;
    while j - tid % 32 < bu {
        body(j);
        j += nt;
    }
}

/// LAPACK's `laed2` deflation of the merge `[s, t)` from the sorted `d`, `z` (unit norm) and rows:
/// the non-deflated poles, weights and rows into `level.pole()`, `weight`, `row` from `s` (`K` of
/// them), the deflated eigenvalues and rows from `t − 1` down, the Givens rotations into
/// `level.rot_*`, `K` and their number into `level.counts()` at `s` and `s + 1`. One thread.
///
/// # Safety
/// `t − s ≥ 2`; the level's vectors hold at least `t`.
#[inline(always)]
unsafe fn deflate(level: Level, (s, t): (usize, usize), rho: f64) {
    let (d, z, rows) = (level.sorted_d(), level.sorted_z(), level.sorted_row());
    let (pole, weight, row) = (level.pole(), level.weight(), level.row());
    // SAFETY: every index is in [s, t) (the contract).
    unsafe {
        let (mut dmax, mut zmax) = (0.0f64, 0.0f64);
        for j in s..t {
            dmax = dmax.max(math::abs(d.get(j)));
            zmax = zmax.max(math::abs(z.get(j)));
        }
        let tol = 8.0 * f64::EPSILON * dmax.max(zmax);
        let (mut k, mut deflated, mut rotations) = (0, 0, 0);
        let mut keep = #[inline(always)]
        |j: usize| {
            pole.set(s + k, d.get(j));
            weight.set(s + k, z.get(j));
            row.set(s + k, rows.get(j));
            k += 1;
        };
        let mut set_aside = #[inline(always)]
        |j: usize| {
            deflated += 1;
            pole.set(t - deflated, d.get(j));
            row.set(t - deflated, rows.get(j));
        };
        if rho * zmax > tol {
            let mut candidate: Option<usize> = None;
            for j in s..t {
                if rho * math::abs(z.get(j)) <= tol {
                    set_aside(j);
                    continue;
                }
                let Some(p) = candidate else {
                    candidate = Some(j);
                    continue;
                };
                // Rotate p's weight into j's where their eigenvalues are close.
                let (zp, zj) = (z.get(p), z.get(j));
                let r = math::sqrt(math::fma(zp, zp, zj * zj));
                let (c, sn) = (zj / r, -zp / r);
                let (dp, dj) = (d.get(p), d.get(j));
                if math::abs((dj - dp) * c * sn) <= tol {
                    z.set(j, r);
                    z.set(p, 0.0);
                    level.rot_p().set(s + rotations, rows.get(p));
                    level.rot_n().set(s + rotations, rows.get(j));
                    level.rot_c().set(s + rotations, c);
                    level.rot_s().set(s + rotations, sn);
                    rotations += 1;
                    d.set(p, dp * c * c + dj * sn * sn);
                    d.set(j, dp * sn * sn + dj * c * c);
                    set_aside(p);
                } else {
                    keep(p);
                }
                candidate = Some(j);
            }
            if let Some(p) = candidate {
                keep(p);
            }
        } else {
            for j in s..t {
                set_aside(j);
            }
        }
        level.counts().set(s, k as f64);
        level.counts().set(s + 1, rotations as f64);
    }
}

/// One tile of the merge `[s, t)`'s eigenvector product: the new vectors `r0 .. r0 + TILE` (of
/// `K`) over columns `c0 .. c0 + TILE` (below `t`), each the secular vector times the pieces'
/// vectors, into its place. The secular vectors and the pieces' vectors are staged in shared
/// memory by chunks of `TILE_K`; each thread accumulates 2 × 4 outputs (rows `ty`, `ty + ny`,
/// columns `tx + 16c`), in `TILE / 2ny` passes where the block has fewer than 512 threads. All
/// threads of the block call it.
///
/// # Safety
/// As for [`divide_and_conquer`]; phases 1–5 of the level ran, and a barrier followed them.
#[inline(always)]
unsafe fn product_tile(
    level: Level,
    (src, dst): (Vector, Vector),
    u: Vector,
    tiles: Vector,
    (s, t, k): (usize, usize, usize),
    (r0, c0): (usize, usize),
    bu: usize,
) {
    let (tid, nt) = (thread::thread_idx_x() as usize, thread::block_dim_x() as usize);
    let (tx, ty, ny) = (tid % 16, tid / 16, nt / 16);
    let rows_of = level.row();
    // SAFETY: every index is below its vector's length: rows below K ≤ b, columns below t ≤ b,
    // the tiles' elements below TILE_ELEMENTS; every thread runs every barrier.
    unsafe {
        let (staged_u, staged_x) =
            (tiles.sub(0, TILE * TILE_K_STRIDE), tiles.sub(TILE * TILE_K_STRIDE, TILE_K * TILE));
        for pass in 0..TILE.div_ceil(2 * ny) {
            // Outputs (rows ty, ty + ny) × (columns tx + 16c): acc[4r + c]. Index loops with
            // constant bounds throughout, so that the arrays stay in registers.
            let mut acc = [0.0f64; 8];
            let mut k0 = 0;
            while k0 < k {
                // Stage the chunk: UNROLL/2 loads of each tile per thread issued together.
                let mut e = tid;
                while e < TILE * TILE_K {
                    let mut loaded = [0.0f64; UNROLL];
                    for j in 0..UNROLL / 2 {
                        let ej = e + j * nt;
                        if ej < TILE * TILE_K {
                            let (row, kk) = (ej / TILE_K, ej % TILE_K);
                            if r0 + row < k && k0 + kk < k {
                                loaded[2 * j] = u.get((s + r0 + row) * bu + s + k0 + kk);
                            }
                            let (kk, col) = (ej / TILE, ej % TILE);
                            if k0 + kk < k && c0 + col < t {
                                loaded[2 * j + 1] =
                                    src.get(rows_of.get(s + k0 + kk) as usize * bu + c0 + col);
                            }
                        }
                    }
                    for j in 0..UNROLL / 2 {
                        let ej = e + j * nt;
                        if ej < TILE * TILE_K {
                            staged_u.set(ej / TILE_K * TILE_K_STRIDE + ej % TILE_K, loaded[2 * j]);
                            staged_x.set(ej, loaded[2 * j + 1]);
                        }
                    }
                    e += UNROLL / 2 * nt;
                }
                thread::sync_threads();
                let base = pass * 2 * ny + ty;
                if base < TILE {
                    for kk in 0..TILE_K {
                        let a0 = staged_u.get(base * TILE_K_STRIDE + kk);
                        let a1 = if base + ny < TILE {
                            staged_u.get((base + ny) * TILE_K_STRIDE + kk)
                        } else {
                            0.0
                        };
                        for c in 0..4 {
                            let x = staged_x.get(kk * TILE + tx + 16 * c);
                            acc[c] = math::fma(a0, x, acc[c]);
                            acc[4 + c] = math::fma(a1, x, acc[4 + c]);
                        }
                    }
                }
                thread::sync_threads();
                k0 += TILE_K;
            }
            for r in 0..2 {
                let row = r0 + pass * 2 * ny + ty + r * ny;
                if pass * 2 * ny + ty + r * ny < TILE && row < k {
                    let place = level.place().get(s + row) as usize;
                    for c in 0..4 {
                        let col = c0 + tx + 16 * c;
                        if col < t {
                            dst.set(place * bu + col, acc[4 * r + c]);
                        }
                    }
                }
            }
        }
    }
}

/// Root `j` (ascending) of `1/ρ + Σ zᵢ²/(dᵢ − λ) = 0` for poles `d` (ascending, distinct) and
/// weights `z` (none zero), as `(o, τ)` with `λ = d[o] + τ`: `o` the nearer pole, so that every
/// `dᵢ − λ = (dᵢ − d[o]) − τ` is accurate. One warp: each lane sums every 32nd pole and the sums
/// meet by [`warp::reduce`], which gives every lane the same bits, so that the lanes take the
/// same steps and return the same root.
///
/// # Safety
/// `d` and `z` hold `k ≥ 1` values, `j < k`, `ρ > 0`; all 32 lanes of the warp call it alike.
#[inline(always)]
unsafe fn secular_root(d: Vector, z: Vector, rho: f64, j: usize) -> (usize, f64) {
    let k = d.len;
    let inv_rho = 1.0 / rho;
    let lane = thread::thread_idx_x() as usize % 32;
    let sum = #[inline(always)]
    |x: f64| warp::reduce(x, |a, b| a + b);
    // SAFETY: every index is below k (the contract).
    unsafe {
        if k == 1 {
            let z0 = z.get(0);
            return (0, rho * z0 * z0);
        }
        let dj = d.get(j);
        let (origin, mut lo, mut hi) = if j + 1 < k {
            // The root's half of (d_j, d_j+1), from the function's sign at the middle.
            let mid = 0.5 * (d.get(j + 1) - dj);
            let mut f = 0.0f64;
            let mut i = lane;
            while i < k {
                let zi = z.get(i);
                f += zi * zi / ((d.get(i) - dj) - mid);
                i += 32;
            }
            if inv_rho + sum(f) >= 0.0 { (j, 0.0, mid) } else { (j + 1, -mid, 0.0) }
        } else {
            let mut zz = 0.0f64;
            let mut i = lane;
            while i < k {
                zz = math::fma(z.get(i), z.get(i), zz);
                i += 32;
            }
            (j, 0.0, rho * sum(zz))
        };
        let at = d.get(origin);
        let mut tau = 0.5 * (lo + hi);
        for _ in 0..MAX_SECULAR_STEPS {
            // f and its parts from the poles left (ψ) and right (φ) of the root.
            let (mut psi, mut dpsi, mut phi, mut dphi) = (0.0f64, 0.0f64, 0.0f64, 0.0f64);
            let mut i = lane;
            while i < k {
                let zi = z.get(i);
                let q = zi / ((d.get(i) - at) - tau);
                if i <= j {
                    psi = math::fma(zi, q, psi);
                    dpsi = math::fma(q, q, dpsi);
                } else {
                    phi = math::fma(zi, q, phi);
                    dphi = math::fma(q, q, dphi);
                }
                i += 32;
            }
            let (psi, dpsi, phi, dphi) = (sum(psi), sum(dpsi), sum(phi), sum(dphi));
            let f = inv_rho + psi + phi;
            let bound = f64::EPSILON * (8.0 * (phi - psi) + inv_rho + math::abs(tau) * (dpsi + dphi));
            if math::abs(f) <= bound {
                break;
            }
            if f < 0.0 {
                lo = tau;
            } else {
                hi = tau;
            }
            // The step to the root of the model c + s₁/(d_j − λ) + s₂/(d_j+1 − λ).
            let left = (dj - at) - tau;
            let mut eta = if j + 1 < k {
                let right = (d.get(j + 1) - at) - tau;
                let c = f - left * dpsi - right * dphi;
                let a = (left + right) * f - left * right * (dpsi + dphi);
                let b = left * right * f;
                let root = math::sqrt(math::abs(a * a - 4.0 * b * c));
                if c == 0.0 {
                    b / a
                } else if a <= 0.0 {
                    (a - root) / (2.0 * c)
                } else {
                    2.0 * b / (a + root)
                }
            } else {
                let c = f - left * dpsi;
                if c > 0.0 { left + left * left * dpsi / c } else { -f / dpsi }
            };
            if f * eta >= 0.0 {
                eta = -f / (dpsi + dphi);
            }
            let mut next = tau + eta;
            if !(next > lo && next < hi) {
                next = 0.5 * (lo + hi);
            }
            if next == tau {
                break;
            }
            tau = next;
        }
        (origin, tau)
    }
}

/// Column `col` of the new eigenvectors at merged positions `g0 .. g0 + rows` of the merge
/// `[s, t)` (carried: `m ≥ t`): the secular vectors times the pieces' vectors for the first `K`
/// positions, the deflated vectors copied, each into its place. One lane.
///
/// # Safety
/// As for [`divide_and_conquer`]; phases 1–5 of the level ran, and a barrier followed them.
#[inline(always)]
unsafe fn new_vectors(
    level: Level,
    (src, dst): (Vector, Vector),
    u: Vector,
    (s, m, t): (usize, usize, usize),
    (g0, rows): (usize, usize),
    col: usize,
    bu: usize,
) {
    // SAFETY: every index is below b (rows), b² (the buffers) — the contract.
    unsafe {
        if m >= t {
            for g in g0..(g0 + rows).min(t) {
                dst.set(g * bu + col, src.get(g * bu + col));
            }
            return;
        }
        let k = level.counts().get(s) as usize;
        let mut acc = [0.0f64; ROWS];
        let live = (g0 + rows).min(s + k).saturating_sub(g0);
        if live > 0 {
            // UNROLL pieces' elements per step, their loads issued together.
            let (rows_of, mut i) = (level.row(), 0);
            while i < k {
                let n = UNROLL.min(k - i);
                // Index loops with constant bounds, so that the arrays stay in registers.
                let mut x = [0.0f64; UNROLL];
                for q in 0..UNROLL {
                    if q < n {
                        x[q] = src.get(rows_of.get(s + i + q) as usize * bu + col);
                    }
                }
                for r in 0..ROWS {
                    if r < live {
                        let secular = u.sub((g0 + r) * bu + s + i, n);
                        for q in 0..UNROLL {
                            if q < n {
                                acc[r] = math::fma(secular.get(q), x[q], acc[r]);
                            }
                        }
                    }
                }
                i += n;
            }
        }
        for r in 0..ROWS {
            let g = g0 + r;
            if g < (g0 + rows).min(t) {
                let place = level.place().get(g) as usize;
                let value = if r < live { acc[r] } else { src.get(level.row().get(g) as usize * bu + col) };
                dst.set(place * bu + col, value);
            }
        }
    }
}
