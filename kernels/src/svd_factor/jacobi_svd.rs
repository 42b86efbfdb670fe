//! The SVD of small matrices by one-sided Jacobi (Hestenes) in one thread block each: the accurate
//! pass's projected `Sᵀ`, which is nearly diagonal once the iteration has converged (its bases
//! hold the singular vectors to about 1e-12), so a few sweeps of plane rotations finish it.
//! One-sided Jacobi works on columns: a rotation mixes two columns by the angle that makes them
//! orthogonal, computed from their own norms and product, so a column of norm `σᵢ ≪ σ₁` keeps its
//! relative accuracy and a zero column (a basis column the pass left out) is never mixed in.

use gpu_std::math;
use gpu_std::{kernel, shared, thread, warp};

/// Most sweeps before [`jacobi_svd`] gives up and reports the matrix unconverged.
pub const JACOBI_SVD_MAX_SWEEPS: u32 = 30;

/// Dynamic shared memory of [`jacobi_svd`], bytes, for `b × b` matrices and `warps` warps: the
/// matrix and the accumulated rotations (`b²` f64 each, column-major), then `b` norms and a flag
/// per warp.
pub const fn jacobi_svd_shared_bytes(b: u32, warps: u32) -> u32 {
    (2 * b * b + b + warps) * 8
}

/// The two columns of pair `t` in round `round` of the circle method over `players` columns
/// (column 0 fixed, the others rotating; `players` even), smaller first.
#[inline(always)]
fn column_pair(t: u32, round: u32, players: u32) -> (usize, usize) {
    let player = |pos: u32| if pos == 0 { 0 } else { (pos - 1 + round) % (players - 1) + 1 };
    let (p, q) = (player(t), player(players - 1 - t));
    (p.min(q) as usize, p.max(q) as usize)
}

/// This lane's share of the squared norm of column `p` of the column-major `n × n` matrix `m`.
#[inline(always)]
fn column_squares(m: shared::DynamicShared<f64>, p: usize, n: usize, lane: usize) -> f64 {
    let mut squares = 0.0f64;
    let mut i = lane;
    while i < n {
        // SAFETY: an element of the matrix's region (the caller's contract: `m` holds `n²`).
        let x = unsafe { m.read(p * n + i) };
        squares = math::fma(x, x, squares);
        i += warp::WARP_SIZE as usize;
    }
    squares
}

/// The SVD `M = U·Σ·Vᵀ` of each `b × b` matrix `M` (`b` even), given as its transpose: `mt` holds
/// `Mᵀ` row-major (images `b²` apart), so that row `p` of `mt` is column `p` of `M`. One-sided
/// Jacobi: sweeps of `b − 1` rounds, each pairing every column with another (the circle method),
/// a warp per pair; a pair `(p, q)` with `|m_pᵀm_q| > b·ε·‖m_p‖·‖m_q‖` (the norms measured at
/// the sweep's start and updated by its rotations, Rutishauser's) is rotated to orthogonal
/// columns, and the rotation applied to the accumulated `V` (the identity at first). Stops after
/// a sweep without a rotation. Then `σ_p = ‖m_p‖`, sorted non-increasing (equal ones in column
/// order): `values[z·b + i]` is the `i`-th, column `i` of `U` is `m_p/σ_p` (zero where `σ_p = 0`)
/// and column `i` of `V` is `v_p`, written to `vectors` row-major, `U` then `V` per image (`2b²`
/// apart, `V` at `b²`). A matrix not converged after [`JACOBI_SVD_MAX_SWEEPS`] sweeps gets NaN
/// values, for the caller to solve another way.
///
/// Launch: grid `(1, 1, images)`, a 1-D block of whole warps, [`jacobi_svd_shared_bytes`]`(b,
/// warps)` of dynamic shared memory.
///
/// # Safety
/// The launch gives that much shared memory (the work space is not checked on the GPU).
#[kernel(launch_bounds(1024, 1))]
pub unsafe fn jacobi_svd(mt: &[f64], b: u32, values: &mut [f64], vectors: &mut [f64]) {
    let z = thread::block_idx_z() as usize;
    let n = b as usize;
    let (tid, threads) = (thread::thread_idx_x() as usize, thread::block_dim_x() as usize);
    let (lane, warp_index) = (warp::lane_id() as usize, warp::warp_id() as usize);
    let warps = threads / warp::WARP_SIZE as usize;
    let m = shared::region::<f64>(0, n * n);
    let v = shared::region::<f64>(8 * n * n, n * n);
    let norms = shared::region::<f64>(16 * n * n, n);
    let rotated = shared::region::<f64>(8 * (2 * n * n + n), warps);
    let input = mt.sub(z * n * n, n * n);
    // SAFETY (every shared access below): indices below the regions' lengths in the launch's shared
    // memory (the caller's contract); within a round each column is read and written by the one
    // warp of its pair, and rounds, sweeps and the final steps are separated by barriers.
    let mut e = tid;
    while e < n * n {
        unsafe {
            m.write(e, input[e]);
            v.write(e, if e / n == e % n { 1.0 } else { 0.0 });
        }
        e += threads;
    }
    let tolerance = n as f64 * f64::EPSILON;
    let mut converged = false;
    let mut sweep = 0;
    while !converged && sweep < JACOBI_SVD_MAX_SWEEPS {
        // Each sweep starts from the columns' squared norms, measured; within it a rotation updates
        // its pair's (`‖m_p‖² − t·γ`, `‖m_q‖² + t·γ`), so that a pair takes one product, not three.
        thread::sync_threads();
        let mut p = warp_index;
        while p < n {
            let squares = warp::reduce(column_squares(m, p, n, lane), |a: f64, b: f64| a + b);
            if lane == 0 {
                unsafe { norms.write(p, squares) };
            }
            p += warps;
        }
        let mut any = 0.0f64;
        for round in 0..b - 1 {
            thread::sync_threads();
            let mut t = warp_index;
            while t < n / 2 {
                let (p, q) = column_pair(t as u32, round, b);
                // Read before the reduction's shuffles, which every lane passes before lane 0
                // writes the updated norms below.
                let (alpha, beta) = unsafe { (norms.read(p), norms.read(q)) };
                let mut gamma = 0.0f64;
                let mut i = lane;
                while i < n {
                    gamma = math::fma(unsafe { m.read(p * n + i) }, unsafe { m.read(q * n + i) }, gamma);
                    i += warp::WARP_SIZE as usize;
                }
                let gamma = warp::reduce(gamma, |a: f64, b: f64| a + b);
                // Every lane has the same values, so every lane takes the same branch and rotation.
                if math::abs(gamma) > tolerance * math::sqrt(alpha) * math::sqrt(beta) {
                    any = 1.0;
                    let zeta = (beta - alpha) / (2.0 * gamma);
                    let tangent = if math::abs(zeta) > 1e150 {
                        0.5 / zeta
                    } else {
                        let t = 1.0 / (math::abs(zeta) + math::sqrt(math::fma(zeta, zeta, 1.0)));
                        if zeta < 0.0 { -t } else { t }
                    };
                    let c = 1.0 / math::sqrt(math::fma(tangent, tangent, 1.0));
                    let s = c * tangent;
                    let mut i = lane;
                    while i < n {
                        unsafe {
                            let (x, y) = (m.read(p * n + i), m.read(q * n + i));
                            m.write(p * n + i, c * x - s * y);
                            m.write(q * n + i, s * x + c * y);
                            let (x, y) = (v.read(p * n + i), v.read(q * n + i));
                            v.write(p * n + i, c * x - s * y);
                            v.write(q * n + i, s * x + c * y);
                        }
                        i += warp::WARP_SIZE as usize;
                    }
                    if lane == 0 {
                        unsafe {
                            norms.write(p, alpha - tangent * gamma);
                            norms.write(q, beta + tangent * gamma);
                        }
                    }
                }
                t += warps;
            }
        }
        if lane == 0 {
            unsafe { rotated.write(warp_index, any) };
        }
        thread::sync_threads();
        converged = (0..warps).all(|w| unsafe { rotated.read(w) } == 0.0);
        sweep += 1;
        // Every thread has read the flags before a warp of the next sweep overwrites its own.
        thread::sync_threads();
    }

    // The norms, a warp per column.
    let mut p = warp_index;
    while p < n {
        let squares = warp::reduce(column_squares(m, p, n, lane), |a: f64, b: f64| a + b);
        if lane == 0 {
            unsafe { norms.write(p, math::sqrt(squares)) };
        }
        p += warps;
    }
    thread::sync_threads();
    // Column p goes to place `rank`: the columns of larger norm, and of equal norm the earlier ones,
    // before it.
    let mut out = vectors.sub(z * 2 * n * n, 2 * n * n);
    let mut p = tid;
    while p < n {
        let sigma = unsafe { norms.read(p) };
        let rank = (0..n)
            .filter(|&q| {
                let other = unsafe { norms.read(q) };
                other > sigma || (other == sigma && q < p)
            })
            .count();
        values[z * n + rank] = if converged { sigma } else { f64::NAN };
        let scale = if sigma > 0.0 { 1.0 / sigma } else { 0.0 };
        for i in 0..n {
            unsafe {
                out[i * n + rank] = m.read(p * n + i) * scale;
                out[n * n + i * n + rank] = v.read(p * n + i);
            }
        }
        p += threads;
    }
}
