//! The Ritz pairs as every eigensolver writes them (the one-block Jacobi of
//! [`ritz_eigen`](super::ritz::ritz_eigen), the tridiagonal solver, and [`sorted_ritz_pairs`] for
//! the block Jacobi and the host's solver): in order of decreasing value, with `σ = √θ` and `1/σ`.

use super::constants::NULL_THRESHOLD;
use super::layout::Layout;
use core::ops::Range;
use gpu_std::kernel;
use gpu_std::math;
use gpu_std::slice::SliceMut;
use gpu_std::thread;

/// A Ritz pair's `σ = √max(θ, 0)`: every Ritz solver's rule, on the device and on the host.
#[inline(always)]
pub fn sigma_of(theta: f64) -> f64 {
    math::sqrt(theta.max(0.0))
}

/// A Ritz pair's `1/σ` (`sigma` from [`sigma_of`]), or 0 where `θ` is numerically zero
/// (`≤ NULL_THRESHOLD·θ₁`, `theta_max` = `max(θ₁, 0)`): every Ritz solver's rule.
#[inline(always)]
pub fn inverse_sigma(theta: f64, sigma: f64, theta_max: f64) -> f64 {
    if theta > NULL_THRESHOLD * theta_max && sigma > 0.0 { 1.0 / sigma } else { 0.0 }
}

/// The Ritz pairs in order of decreasing value, from an eigendecomposition given as `value(i)`
/// and `vector(row, i)` (`i, row < b`): the rows `rows` of `ritz` (`b × b`, column `r` the vector
/// of `θ_r`) and, `with_values`, `theta`, `sigma = √θ` and `inv_sigma` (`1/σ`, or 0 for
/// numerically zero θ). `vals` and `perm` (`b` each) are work space. All threads of the block call
/// it.
///
/// # Safety
/// `vals`, `perm`, `theta`, `sigma` and `inv_sigma` hold at least `b` elements and `ritz` `b²`:
/// they are accessed unchecked on the GPU (the simulator checks).
#[inline(always)]
pub(super) unsafe fn write_ritz_pairs(
    (bu, rows, with_values): (usize, Range<usize>, bool),
    value: impl Fn(usize) -> f64,
    vector: impl Fn(usize, usize) -> f64,
    (mut vals, mut perm): (SliceMut<f64>, SliceMut<f64>),
    (mut theta, mut sigma, mut inv_sigma, mut ritz): (
        SliceMut<f64>,
        SliceMut<f64>,
        SliceMut<f64>,
        SliceMut<f64>,
    ),
) {
    let (tid, nt) = (thread::thread_idx_x() as usize, thread::block_dim_x() as usize);
    let count = (rows.end - rows.start) * bu;
    // Largest first: perm[rank] = index.
    let mut i = tid;
    while i < bu {
        // SAFETY: i < b, within `vals` (the contract); one thread per element.
        unsafe { vals.set_unchecked(i, value(i)) };
        i += nt;
    }
    thread::sync_threads();
    let mut i = tid;
    while i < bu {
        // SAFETY: i, j and the rank are below b, within `vals` and `perm` (the contract); `vals`
        // was written before the barrier, and the ranks are distinct: one thread per element of
        // `perm`.
        unsafe {
            let v = vals.get_unchecked(i);
            let mut rank = 0;
            for j in 0..bu {
                let w = vals.get_unchecked(j);
                if w > v || (w == v && j < i) {
                    rank += 1;
                }
            }
            perm.set_unchecked(rank, i as f64);
        }
        i += nt;
    }
    thread::sync_threads();
    let mut i = tid;
    while i < count {
        let (row, r) = (rows.start + i / bu, i % bu);
        // SAFETY: row < b (the rows lie below b) and r < b, within `ritz` and `perm` (the
        // contract); `perm`'s entries, written before the barrier, are indices below b; one thread
        // per element.
        unsafe { ritz.set_unchecked(row * bu + r, vector(row, perm.get_unchecked(r) as usize)) };
        i += nt;
    }
    if !with_values {
        return;
    }
    // SAFETY: 0 < b, within `perm`, whose entries (written before the barrier) are indices below
    // b, within `vals`.
    let theta0 = unsafe { vals.get_unchecked(perm.get_unchecked(0) as usize) }.max(0.0);
    let mut i = tid;
    while i < bu {
        // SAFETY: i < b, within `perm`, `theta`, `sigma` and `inv_sigma` (the contract), and
        // `perm`'s entries are indices below b, within `vals`; one thread per element written.
        unsafe {
            let th = vals.get_unchecked(perm.get_unchecked(i) as usize);
            theta.set_unchecked(i, th);
            let s = sigma_of(th);
            sigma.set_unchecked(i, s);
            inv_sigma.set_unchecked(i, inverse_sigma(th, s, theta0));
        }
        i += nt;
    }
}

/// Rows of the eigenvectors each block of [`sorted_ritz_pairs`] orders: the blocks of an image
/// each rank the values themselves and move their rows, so one image's `b²` moves spread over
/// `b / SORTED_PAIRS_ROWS` blocks (one block took 0.29 ms at `b = 512`, its loads one after the
/// other).
pub const SORTED_PAIRS_ROWS: u32 = 16;

/// Blocks per image of [`sorted_ritz_pairs`] (its `gridDim.y`).
pub fn sorted_pairs_blocks(b: u32) -> u32 {
    b.div_ceil(SORTED_PAIRS_ROWS)
}

/// Work space of [`sorted_ritz_pairs`] per image, values: `2b` per block.
pub fn sorted_pairs_scratch(b: u32) -> u32 {
    sorted_pairs_blocks(b) * 2 * b
}

/// `write_ritz_pairs` as a kernel, per image `blockIdx.x` and rows `blockIdx.y` (any 1-D block,
/// [`sorted_pairs_blocks`] in y): the pairs of the leading `b` eigenvalues, value `i` element
/// `(i, i)` of `values` through `value_layout` (the diagonal of a diagonalised matrix, or a vector
/// with a row stride of 0), and their eigenvectors, vector `i` column `i` of `vectors` through
/// `vector_layout`. `scratch` holds [`sorted_pairs_scratch`] per image. The last step of the block
/// Jacobi, tridiagonal and host solvers (the host's uploads faer's unsorted pairs): one ordering
/// for every solver.
///
/// # Safety
/// Each image's `b` values and `b × b` vectors lie inside `values` and `vectors` through their
/// layouts; read unchecked on the GPU (the simulator checks).
#[kernel]
pub unsafe fn sorted_ritz_pairs(
    values: &[f64],
    value_layout: Layout,
    vectors: &[f64],
    vector_layout: Layout,
    b: u32,
    scratch: &mut [f64],
    theta: &mut [f64],
    sigma: &mut [f64],
    inv_sigma: &mut [f64],
    ritz: &mut [f64],
) {
    let (img, part) = (thread::block_idx_x() as usize, thread::block_idx_y() as usize);
    let bu = b as usize;
    let rows = part * SORTED_PAIRS_ROWS as usize..bu.min((part + 1) * SORTED_PAIRS_ROWS as usize);
    let scratch = scratch.sub((img * thread::grid_dim_y() as usize + part) * 2 * bu, 2 * bu);
    let (value_base, vector_base) = (img * value_layout.batch as usize, img * vector_layout.batch as usize);
    // SAFETY: the kernel's contract: the layouts keep every image's values and vectors inside.
    let value = |i: usize| unsafe { values.get_unchecked(value_base + value_layout.at(i as u32, i as u32)) };
    let vector = |row: usize, col: usize| unsafe {
        vectors.get_unchecked(vector_base + vector_layout.at(row as u32, col as u32))
    };
    // SAFETY: each image's outputs and each block's scratch are taken by checked `sub`; the rows
    // lie below b; `write_ritz_pairs` indexes below b and b² within them.
    unsafe {
        write_ritz_pairs(
            (bu, rows, part == 0),
            value,
            vector,
            (scratch.sub(0, bu), scratch.sub(bu, bu)),
            (
                theta.sub(img * bu, bu),
                sigma.sub(img * bu, bu),
                inv_sigma.sub(img * bu, bu),
                ritz.sub(img * bu * bu, bu * bu),
            ),
        )
    };
}
