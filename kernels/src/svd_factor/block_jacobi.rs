//! Block Jacobi for subspaces too large for one block's shared memory: blocks of rows and columns
//! paired round by round, rotations found per pair and applied across the image.

use super::eigensolver::{JacobiSpace, jacobi, jacobi_shared_bytes};
use gpu_std::math;
use gpu_std::{kernel, shared, thread};

/// The two blocks of pair `t` in round `round` of the circle method over `players` blocks
/// (block 0 fixed, the others rotating), smaller first.
#[inline(always)]
fn block_pair(t: u32, round: u32, players: u32) -> (u32, u32) {
    let player = |pos: u32| if pos == 0 { 0 } else { (pos - 1 + round) % (players - 1) + 1 };
    let (p, q) = (player(t), player(players - 1 - t));
    (p.min(q), p.max(q))
}

/// Row (or column) `i < 2·nb` of the submatrix of the block pair `(a, b)`: block `a`'s rows, then
/// block `b`'s.
#[inline(always)]
fn pair_index((a, b): (u32, u32), nb: u32, i: u32) -> usize {
    (if i < nb { a * nb + i } else { b * nb + i - nb }) as usize
}

/// Dynamic shared memory of [`block_jacobi_rotations`], bytes, for blocks of `nb` rows.
pub const fn block_jacobi_rotations_bytes(nb: u32) -> u32 {
    jacobi_shared_bytes(2 * nb)
}

/// Dynamic shared memory of [`block_jacobi_apply`], bytes, for blocks of `nb` rows: four
/// `2nb × 2nb` f64 matrices.
pub const fn block_jacobi_apply_bytes(nb: u32) -> u32 {
    4 * 8 * (2 * nb) * (2 * nb)
}

/// Block Jacobi for symmetric matrices too large for one block's shared memory, first half of a
/// round: the symmetric `n × n` matrix `x` of each image (row-major, images `n²` apart,
/// `n = 2·nb·pairs`, zero past the problem's own size) is split into `2·pairs` blocks of `nb`
/// rows; round `round` of the circle method pairs them, and block `blockIdx.x` of the launch
/// runs one sweep of [`ritz_eigen`](super::ritz::ritz_eigen)'s Jacobi on its pair's `2nb × 2nb`
/// submatrix in shared memory (the outer sweeps iterate anyway: solving each submatrix exactly
/// costs several times more), writing the accumulated rotation to `rot` (`2nb × 2nb` per pair,
/// `pairs` per image) and setting `rotated[image]` to 1 if it rotated anything. Rotations are
/// skipped below `JACOBI_NOISE` times the whole matrix's largest diagonal element, so a sweep in
/// which no pair rotates means the matrix is diagonal to that precision.
///
/// Launch: grid `(pairs, 1, images)`, a 1-D block of whole warps,
/// [`block_jacobi_rotations_bytes`]`(nb)` of dynamic shared memory.
///
/// # Safety
/// The launch gives that much shared memory (the work space is not checked on the GPU).
#[kernel]
pub unsafe fn block_jacobi_rotations(
    x: &[f64],
    n: u32,
    nb: u32,
    round: u32,
    rot: &mut [f64],
    rotated: &mut [u32],
) {
    let (t, img) = (thread::block_idx_x(), thread::block_idx_z() as usize);
    let (nu, m) = (n as usize, (2 * nb) as usize);
    let pairs = thread::grid_dim_x() as usize;
    let x = x.sub(img * nu * nu, nu * nu);
    let mut rot = rot.sub((img * pairs + t as usize) * m * m, m * m);
    let pair = block_pair(t, round, n / nb);
    // SAFETY (whole body): the kernel's contract gives the work space in shared memory (so the
    // null scratch pointer is never used); indices stay below 2nb, each element is written by one
    // thread before the barrier, and every thread calls the solver.
    unsafe {
        let space = JacobiSpace::new(core::ptr::null_mut(), m);
        let (tid, nt) = (thread::thread_idx_x() as usize, thread::block_dim_x() as usize);
        let mut i = tid;
        while i < m * m {
            let (r, c) = (i / m, i % m);
            space.set_x(r, c, x[pair_index(pair, nb, r as u32) * nu + pair_index(pair, nb, c as u32)]);
            space.set_z(r, c, if r == c { 1.0 } else { 0.0 });
            i += nt;
        }
        let mut scale = 0.0f64;
        for l in 0..nu {
            scale = scale.max(math::abs(x[l * nu + l]));
        }
        thread::sync_threads();
        let any = jacobi(space, m, scale, 1);
        let mut i = tid;
        while i < m * m {
            rot[i] = space.z(i / m, i % m);
            i += nt;
        }
        if any && tid == 0 {
            rotated[img] = 1;
        }
    }
}

/// Block Jacobi, second half of a round: applies the rotations of [`block_jacobi_rotations`]
/// (`rot`, same `n`, `nb` and `round`) to `src`, writing `dst` (both `n × n` per image, row-major,
/// images `n²` apart). With `two_sided ≠ 0` it computes `dst = JᵀsrcJ` (the matrix being
/// diagonalised), else `dst = src·J` (the accumulated eigenvectors). Block `(q, p)` writes the
/// `2nb × 2nb` tile of pair `q`'s columns and, two-sided, pair `p`'s rows (one-sided: rows
/// `p·2nb …`): `rot_pᵀ·src[rows, cols]·rot_q`.
///
/// Launch: grid `(pairs, pairs, images)`, any 1-D block, [`block_jacobi_apply_bytes`]`(nb)` of
/// dynamic shared memory.
#[kernel]
pub fn block_jacobi_apply(
    src: &[f64],
    n: u32,
    nb: u32,
    round: u32,
    rot: &[f64],
    two_sided: u32,
    dst: &mut [f64],
) {
    let (q, p, img) = (thread::block_idx_x(), thread::block_idx_y(), thread::block_idx_z() as usize);
    let (nu, m) = (n as usize, (2 * nb) as usize);
    let (pairs, players) = (thread::grid_dim_x() as usize, n / nb);
    let src = src.sub(img * nu * nu, nu * nu);
    let mut dst = dst.sub(img * nu * nu, nu * nu);
    let rot_of = |pair: u32| rot.sub((img * pairs + pair as usize) * m * m, m * m);
    let (rot_q, rot_p) = (rot_of(q), rot_of(p));
    let cols = block_pair(q, round, players);
    let row = |i: usize| {
        if two_sided != 0 {
            pair_index(block_pair(p, round, players), nb, i as u32)
        } else {
            p as usize * m + i
        }
    };
    let mut smem = shared::Allocator::new();
    let (sub, right, left, tmp) = (
        smem.array::<f64>(m * m),
        smem.array::<f64>(m * m),
        smem.array::<f64>(m * m),
        smem.array::<f64>(m * m),
    );
    let (tid, nt) = (thread::thread_idx_x() as usize, thread::block_dim_x() as usize);
    // SAFETY (every shared access below): indices below m², the arrays' length; each element is
    // written by one thread before a barrier and read only after it.
    let mut i = tid;
    while i < m * m {
        let (r, c) = (i / m, i % m);
        unsafe {
            sub.write(i, src[row(r) * nu + pair_index(cols, nb, c as u32)]);
            right.write(i, rot_q[i]);
            left.write(i, if two_sided != 0 { rot_p[i] } else { 0.0 });
        }
        i += nt;
    }
    thread::sync_threads();
    // tmp = sub·rot_q.
    let mut i = tid;
    while i < m * m {
        let (r, c) = (i / m, i % m);
        let mut acc = 0.0f64;
        for l in 0..m {
            acc = unsafe { math::fma(sub.read(r * m + l), right.read(l * m + c), acc) };
        }
        unsafe { tmp.write(i, acc) };
        i += nt;
    }
    thread::sync_threads();
    // dst = rot_pᵀ·tmp (two-sided) or tmp.
    let mut i = tid;
    while i < m * m {
        let (r, c) = (i / m, i % m);
        let value = if two_sided != 0 {
            let mut acc = 0.0f64;
            for l in 0..m {
                acc = unsafe { math::fma(left.read(l * m + r), tmp.read(l * m + c), acc) };
            }
            acc
        } else {
            unsafe { tmp.read(i) }
        };
        dst[row(r) * nu + pair_index(cols, nb, c as u32)] = value;
        i += nt;
    }
}

/// `x = I` for each image's `n × n` matrix (row-major, images `n²` apart). Grid `(x, 1, images)`,
/// any 1-D block (grid-stride).
#[kernel]
pub fn set_identity(x: &mut [f64], n: u32) {
    let nu = n as usize;
    let mut x = x.sub(thread::block_idx_z() as usize * nu * nu, nu * nu);
    let mut i = thread::index_1d() as usize;
    while i < nu * nu {
        x[i] = if i / nu == i % nu { 1.0 } else { 0.0 };
        i += thread::grid_stride_1d() as usize;
    }
}
