//! The accurate pass's small SVD: of the projected `Sᵀ = (Yᵀ·Bᵀ)ᵀ` (`b × b` per matrix, nearly
//! diagonal once the iteration has converged), its leading `k` triplets as the pass's last
//! products read them. On the device by one-sided Jacobi in one block per matrix where the matrix
//! and its rotations fit the block's shared memory ([`jacobi_svd`], `b ≤ 120` on an H100), else as
//! the Jordan–Wielandt eigenproblem by the Ritz solver ([`jordan_wielandt_svd`]) where every
//! `σ_k ≥ 1e-3·σ₁`, else on the host by faer ([`projected_svd_on_host`]). Each path's one wait is
//! for the values.

use super::gemm::{Gemms, operand as op};
use super::plan::{GramMethod, Plan};
use super::ritz::RitzPairs;
use crate::launch::device::{Backend, Buffer, BufferViewMut, Device};
use crate::launch::error::{Error, Result};
use faer::Mat;
use gpu_std::sim::{Dim3, LaunchConfig};
use kernels::svd_factor::{self as kf, Layout};

/// The leading `k` triplets of every matrix's projected `Sᵀ` (from the bases `y` and `bt`,
/// `r × b` row-major per matrix): by [`jacobi_svd`], [`jordan_wielandt_svd`] or
/// [`projected_svd_on_host`], the first that applies.
pub(super) fn projected_svd(
    device: &Device,
    plan: &Plan,
    gemms: &Gemms<'_>,
    (y, bt): (&Buffer<f64>, &Buffer<f64>),
    b: usize,
) -> Result<ProjectedVectors> {
    if let Some(found) = jacobi_svd(device, plan, gemms, (y, bt), b)? {
        return Ok(found);
    }
    projected_svd_past_jacobi(device, plan, gemms, (y, bt), b)
}

/// [`projected_svd`] where Jacobi did not take the batch: by [`jordan_wielandt_svd`], else
/// [`projected_svd_on_host`].
pub(super) fn projected_svd_past_jacobi(
    device: &Device,
    plan: &Plan,
    gemms: &Gemms<'_>,
    (y, bt): (&Buffer<f64>, &Buffer<f64>),
    b: usize,
) -> Result<ProjectedVectors> {
    match jordan_wielandt_svd(device, plan, gemms, (y, bt), b)? {
        Some(found) => Ok(found),
        None => projected_svd_on_host(device, plan, gemms, (y, bt), b),
    }
}

/// Threads of [`jacobi_svd`]'s blocks on a GPU: a warp per column pair of a round up to `b = 64`,
/// two pairs a warp at `b = 128`.
const JACOBI_THREADS: u32 = 1024;
/// Threads of its blocks in the simulator (a thread per GPU thread: two warps).
const JACOBI_SIMULATOR_THREADS: u32 = 64;

/// The projected SVD by one-sided Jacobi ([`kf::jacobi_svd`]) on `Sᵀ` (row-major `S` is `Sᵀ`
/// column by column, the kernel's input): every `σᵢ` to the relative accuracy of `S`'s columns and
/// the vectors orthonormal to `b·ε`, a zero row or column of `S` (a basis column left out) never
/// mixed into a vector. `None` where the matrix and its rotations do not fit one block's shared
/// memory (`2b² + b` f64: `b` past 120 with 227 KiB) or where a matrix did not converge in
/// [`kf::JACOBI_SVD_MAX_SWEEPS`] sweeps. `b` is a multiple of 8 ([`subspace_size`](super::plan::subspace_size)), so even, as
/// the circle method wants.
fn jacobi_svd(
    device: &Device,
    plan: &Plan,
    gemms: &Gemms<'_>,
    (y, bt): (&Buffer<f64>, &Buffer<f64>),
    b: usize,
) -> Result<Option<ProjectedVectors>> {
    let mut values = device.alloc_temporary::<f64>(device.queue(), plan.images * b)?;
    let Some(vectors) = queue_jacobi_svd(device, plan, gemms, (y, bt), b, values.view_mut(..)?)? else {
        return Ok(None);
    };
    Ok(jacobi_result(&device.download(&values)?, vectors, (b, plan.k)))
}

/// [`jacobi_svd`]'s work queued, no wait: `S` and the kernel, which writes the values (`b` per
/// matrix) into `values` and returns the vectors `[U_s V_s]` (`2·b²` per matrix) for
/// [`jacobi_result`]; `None` where the matrix and its rotations do not fit one block.
pub(super) fn queue_jacobi_svd(
    device: &Device,
    plan: &Plan,
    gemms: &Gemms<'_>,
    (y, bt): (&Buffer<f64>, &Buffer<f64>),
    b: usize,
    mut values: BufferViewMut<'_, f64>,
) -> Result<Option<Buffer<f64>>> {
    let (images, r) = (plan.images, plan.r);
    let threads = match device.backend() {
        Backend::Gpu => JACOBI_THREADS,
        _ => JACOBI_SIMULATOR_THREADS,
    };
    let shared_bytes = kf::jacobi_svd_shared_bytes(b as u32, threads / 32);
    if !b.is_multiple_of(2) || shared_bytes > device.max_shared_bytes_per_block()? {
        return Ok(None);
    }
    let queue = device.queue();
    let mut s = device.alloc_temporary::<f64>(queue, images * b * b)?;
    let mut vectors = device.alloc_temporary::<f64>(queue, images * 2 * b * b)?;
    let square = Layout::row_major(b as u32, (b * b) as u32);
    let cfg =
        LaunchConfig { grid: Dim3 { x: 1, y: 1, z: images as u32 }, block: Dim3::x(threads), shared_bytes };
    // SAFETY: `s` and `vectors` are temporaries of the queue the product and the kernel run on
    // (`vectors` the caller's after), `values` the caller's until its download; the kernel checks
    // the slices' lengths, and the launch gives it the shared memory it needs.
    unsafe {
        queue_projected(gemms, (y, bt), (b, r), (s.view_mut(..)?, square))?;
        device.launch(
            &kf::JACOBI_SVD,
            cfg,
            (s.view(..)?, b as u32, values.view_mut(..)?, vectors.view_mut(..)?),
        )?;
    }
    Ok(Some(vectors))
}

/// The triplets of a [`queue_jacobi_svd`] from its downloaded `values` (`b` per matrix) and its
/// `vectors`, the first `k`; `None` where a matrix did not converge (its values are NaN).
pub(super) fn jacobi_result(
    values: &[f64],
    vectors: Buffer<f64>,
    (b, k): (usize, usize),
) -> Option<ProjectedVectors> {
    if !values.iter().all(|v| v.is_finite()) {
        return None;
    }
    let layout = Layout::row_major(b as u32, (2 * b * b) as u32);
    Some(ProjectedVectors {
        values: values.chunks(b).map(|v| v[..k].to_vec()).collect(),
        vectors,
        left: (0, layout),
        right: (b * b, layout),
        scale: None,
    })
}

/// The leading `k` singular triplets of every matrix's projected `Sᵀ` (`b × b`), as the last
/// products read them: the values, and `U_s` and `V_s` (`b × k` per matrix) in `vectors` at the
/// offsets and through the layouts of `left` and `right`, each column times `scale` (one value per
/// column, the same for every matrix) where there is one.
pub(super) struct ProjectedVectors {
    pub values: Vec<Vec<f64>>,
    pub vectors: Buffer<f64>,
    pub left: (usize, Layout),
    pub right: (usize, Layout),
    pub scale: Option<Buffer<f64>>,
}

/// What the last products read of a projected SVD: `vectors`, `left`, `right` and `scale` as in
/// [`ProjectedVectors`].
pub(super) type ProjectedParts<'a> =
    (&'a Buffer<f64>, (usize, Layout), (usize, Layout), Option<&'a Buffer<f64>>);

impl ProjectedVectors {
    /// Its [`ProjectedParts`].
    pub(super) fn parts(&self) -> ProjectedParts<'_> {
        (&self.vectors, self.left, self.right, self.scale.as_ref())
    }
}

/// The projected SVD on the device takes a batch whose every matrix has `σ_k ≥` this `·σ₁`
/// ([`jordan_wielandt_svd`]).
const DEVICE_PROJECTED_SVD_MIN: f64 = 1e-3;

/// The projected SVD on the device where Jacobi did not converge, from the symmetric eigenproblem of `M = [[0, Sᵀ], [S, 0]]`
/// (`2b × 2b`, the Jordan–Wielandt matrix, by the Ritz solver the plans choose for its size): its
/// eigenvalues are `±σᵢ` and the unit eigenvector of `+σᵢ` is `[u_i; v_i]/√2`. An eigensolver's
/// rounding (`ε·‖S‖` backward) mixes a pair with the others by `ε·‖S‖` over their distance, as an
/// SVD's does, and with its mirror `−σᵢ` by `ε·‖S‖/2σᵢ`, which moves the halves' norms off `1/√2`
/// and their orthogonality by that much; so this path takes a batch only where every matrix's
/// `σ_k ≥` [`DEVICE_PROJECTED_SVD_MIN`]`·σ₁` (the halves then orthonormal to about 1e-13, and
/// `U_s`, `V_s` read as `√2` times them), and returns `None` for the host's SVD ([`projected_svd_on_host`]) otherwise. The
/// bases' left-out columns (zero rows and columns of `S`) give eigenvalues 0, which sort below
/// every pair it takes. One wait, for the eigenvalues.
fn jordan_wielandt_svd(
    device: &Device,
    plan: &Plan,
    gemms: &Gemms<'_>,
    (y, bt): (&Buffer<f64>, &Buffer<f64>),
    b: usize,
) -> Result<Option<ProjectedVectors>> {
    let (images, k, r) = (plan.images, plan.k, plan.r);
    let jordan =
        Plan::with_subspace(device, (2 * b, 2 * b), images, (k, 2 * b), GramMethod::WholeEigendecomposition)?;
    let mut solver = jordan.ritz_solver(device)?;
    let mut pairs = RitzPairs::new(device, 2 * b, images)?;
    {
        let (mut m, layout) = solver.input()?;
        device.zero_on(device.queue(), m.view_mut(..)?)?;
        // SAFETY: `y`, `bt` and the solver's input live until the download of the eigenvalues
        // below waits for the queue; the GEMMs check the spans: S into the lower left block,
        // Sᵀ (S through the transposed layout) into the upper right one.
        unsafe {
            let lower_left = m.view_mut(b * layout.row as usize..)?;
            queue_projected(gemms, (y, bt), (b, r), (lower_left, layout))?;
            let upper_right = m.view_mut(b * layout.col as usize..)?;
            queue_projected(gemms, (y, bt), (b, r), (upper_right, layout.transposed()))?;
        }
    }
    // SAFETY: `pairs` lives until the download below waits for the queue.
    unsafe { solver.solve(device, &mut pairs)? };
    let theta = device.download(&pairs.theta)?;
    let resolved = theta
        .chunks(2 * b)
        .all(|t| t[0].is_finite() && t[0] > 0.0 && t[k - 1] >= DEVICE_PROJECTED_SVD_MIN * t[0]);
    if !resolved {
        return Ok(None);
    }
    let values = theta.chunks(2 * b).map(|t| t[..k].to_vec()).collect();
    let halves = Layout::row_major((2 * b) as u32, (4 * b * b) as u32);
    Ok(Some(ProjectedVectors {
        values,
        vectors: pairs.vectors,
        left: (0, halves),
        right: (b * 2 * b, halves),
        scale: Some(device.upload(&vec![std::f64::consts::SQRT_2; k])?),
    }))
}

/// Queues the projected matrix `S = Yᵀ·Bᵀ` (`b × b` per matrix, from the bases' `r × b` row-major
/// `Y` and `Bᵀ`) into `out` through its layout.
///
/// # Safety
/// The buffers must live until the queue reaches the product (as for [`Gemms::product`]).
unsafe fn queue_projected(
    gemms: &Gemms<'_>,
    (y, bt): (&Buffer<f64>, &Buffer<f64>),
    (b, r): (usize, usize),
    out: (BufferViewMut<'_, f64>, Layout),
) -> Result<()> {
    let basis_layout = Layout::row_major(b as u32, (r * b) as u32);
    let yt_bt = (op(y.view(..)?, basis_layout.transposed()), op(bt.view(..)?, basis_layout));
    // SAFETY: forwarded from the caller; the GEMM checks every span.
    unsafe { gemms.product(yt_bt, out, None, (b, b, r), false) }
}

/// The projected SVD on the host: `S = Yᵀ·Bᵀ` downloaded, and per matrix faer's SVD of `Sᵀ`
/// ([`host_svd`]).
fn projected_svd_on_host(
    device: &Device,
    plan: &Plan,
    gemms: &Gemms<'_>,
    (y, bt): (&Buffer<f64>, &Buffer<f64>),
    b: usize,
) -> Result<ProjectedVectors> {
    let (images, k, r) = (plan.images, plan.k, plan.r);
    let mut s = device.alloc::<f64>(images * b * b)?;
    let square = Layout::row_major(b as u32, (b * b) as u32);
    // SAFETY: the buffers live until the download of `s` waits for the queue.
    unsafe { queue_projected(gemms, (y, bt), (b, r), (s.view_mut(..)?, square))? };
    let small = device.download(&s)?;
    // Per matrix its first k left vectors (for X) then right vectors (for Y), b × k each.
    let mut vectors = Vec::with_capacity(2 * images * b * k);
    let mut right = Vec::with_capacity(images * b * k);
    let mut values = Vec::with_capacity(images);
    for st in small.chunks(b * b) {
        let (found, u_s, v_s) = host_svd(Mat::from_fn(b, b, |i, j| st[j * b + i]), k)?;
        values.push(found);
        vectors.extend(u_s);
        right.extend(v_s);
    }
    vectors.extend(right);
    let layout = Layout::row_major(k as u32, (b * k) as u32);
    Ok(ProjectedVectors {
        values,
        vectors: device.upload(&vectors)?,
        left: (0, layout),
        right: (images * b * k, layout),
        scale: None,
    })
}

/// The leading `k` singular triplets of the projected matrix `Sᵀ` (`b × b`): the values
/// (non-increasing, 0 past its rank) and the left and right vectors (`b × k` each, row-major), by
/// faer's SVD of `Sᵀ` without its zero rows and columns. Those belong to the columns the bases
/// left out (zero vectors), and kept in they would let faer mix a singular vector of a tiny `σᵢ`
/// with them by up to `ε·‖S‖/σᵢ` (1e-4 at `σᵢ = 1e-12·σ₁`): weight on a zero column, which
/// leaves `X·uᵢ` short of unit norm by its square.
fn host_svd(st: Mat<f64>, k: usize) -> Result<(Vec<f64>, Vec<f64>, Vec<f64>)> {
    let b = st.nrows();
    let rows: Vec<usize> = (0..b).filter(|&i| (0..b).any(|j| st[(i, j)] != 0.0)).collect();
    let cols: Vec<usize> = (0..b).filter(|&j| (0..b).any(|i| st[(i, j)] != 0.0)).collect();
    let mut values = vec![0.0; k];
    let (mut u_s, mut v_s) = (vec![0.0; b * k], vec![0.0; b * k]);
    if rows.is_empty() || cols.is_empty() {
        return Ok((values, u_s, v_s));
    }
    let kept = Mat::from_fn(rows.len(), cols.len(), |i, j| st[(rows[i], cols[j])]);
    let svd = kept
        .thin_svd()
        .map_err(|e| Error::Numerical(format!("the SVD of the {b} × {b} projected matrix failed: {e:?}")))?;
    // faer's singular values are non-negative and non-increasing.
    let found = k.min(rows.len()).min(cols.len());
    for p in 0..found {
        values[p] = svd.S().column_vector()[p];
        for (i, &row) in rows.iter().enumerate() {
            u_s[row * k + p] = svd.U()[(i, p)];
        }
        for (j, &col) in cols.iter().enumerate() {
            v_s[col * k + p] = svd.V()[(j, p)];
        }
    }
    Ok((values, u_s, v_s))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A projected SVD on the device, by `solve`: whether it took the problems, and where it did, that
    /// its values and vectors of each known `Sᵀ = G·diag(σ)·Hᵀ` (`G`, `H` Householder
    /// reflections, `b × b`; with `zero_line`, row and column 1 of every `S` zeroed after, as a
    /// basis's left-out column leaves them) are exact, read as the last products read them.
    type Solver = dyn Fn(
        &Device,
        &Plan,
        &Gemms<'_>,
        (&Buffer<f64>, &Buffer<f64>),
        usize,
    ) -> Result<Option<ProjectedVectors>>;
    fn solves_known_spectra(solve: &Solver, spectra: &[Vec<f64>], k: usize, zero_line: bool) -> Result<bool> {
        let device = Device::simulator();
        device.set_poison_allocations(true);
        let (b, images) = (spectra[0].len(), spectra.len());
        let r = b + 2;
        // A Householder reflection I − 2·h·hᵀ/hᵀh, orthogonal and symmetric.
        let reflection = |seed: usize| -> Vec<f64> {
            let h: Vec<f64> = (0..b).map(|i| ((i * 5 + seed * 3) % 7) as f64 - 2.5).collect();
            let norm: f64 = h.iter().map(|v| v * v).sum();
            (0..b * b)
                .map(|e| f64::from(u8::from(e / b == e % b)) - 2.0 * h[e / b] * h[e % b] / norm)
                .collect()
        };
        let plan = Plan::new(&device, (r, r), images, k)?;
        // Y = [I; 0] (r × b) and Bᵀ = [S; 0], so that S = Yᵀ·Bᵀ; Sᵀ = G·diag(σ)·Hᵀ.
        let (g, h) = (reflection(1), reflection(2));
        let mut y = vec![0.0; images * r * b];
        let mut bt = vec![0.0; images * r * b];
        let mut st = Vec::new();
        for (image, sigma) in spectra.iter().enumerate() {
            for i in 0..b {
                y[image * r * b + i * b + i] = 1.0;
            }
            let mut t: Vec<f64> = (0..b * b)
                .map(|e| (0..b).map(|p| g[(e / b) * b + p] * sigma[p] * h[(e % b) * b + p]).sum())
                .collect();
            if zero_line {
                for i in 0..b {
                    t[i * b + 1] = 0.0;
                    t[b + i] = 0.0;
                }
            }
            for i in 0..b {
                for j in 0..b {
                    bt[image * r * b + i * b + j] = t[j * b + i];
                }
            }
            st.push(t);
        }
        let gemms = Gemms::new(&device, images, false);
        let (y, bt) = (device.upload(&y)?, device.upload(&bt)?);
        let Some(found) = solve(&device, &plan, &gemms, (&y, &bt), b)? else {
            return Ok(false);
        };
        let vectors = device.download(&found.vectors)?;
        let scale = match &found.scale {
            Some(scale) => device.download(scale)?,
            None => vec![1.0; k],
        };
        let read = |(offset, layout): (usize, Layout), image: usize| -> Vec<f64> {
            (0..b * k)
                .map(|e| {
                    let at = offset + image * layout.batch as usize + (e / k) * layout.row as usize;
                    vectors[at + (e % k) * layout.col as usize] * scale[e % k]
                })
                .collect()
        };
        for (image, t) in st.iter().enumerate() {
            let (u_s, v_s) = (read(found.left, image), read(found.right, image));
            // The exact values: the spectrum, or with the zeroed line faer's SVD of that matrix.
            let exact = if zero_line {
                host_svd(Mat::from_fn(b, b, |i, j| t[i * b + j]), k)?.0
            } else {
                spectra[image][..k].to_vec()
            };
            for p in 0..k {
                let sigma = found.values[image][p];
                assert!((sigma - exact[p]).abs() < 1e-14, "σ {p} of {image}: {sigma}, exactly {}", exact[p]);
                if sigma == 0.0 {
                    continue;
                }
                // Sᵀ·v_p = σ_p·u_p, and unit vectors orthogonal to the others; none on a zero line.
                for i in 0..b {
                    let stv: f64 = (0..b).map(|j| t[i * b + j] * v_s[j * k + p]).sum();
                    assert!((stv - sigma * u_s[i * k + p]).abs() < 1e-14, "Sᵀv − σu of pair {p}");
                }
                if zero_line {
                    assert_eq!((u_s[k + p], v_s[k + p]), (0.0, 0.0), "pair {p} on the zero line");
                }
                for q in 0..k {
                    if found.values[image][q] == 0.0 {
                        continue;
                    }
                    let want = f64::from(u8::from(p == q));
                    let uu: f64 = (0..b).map(|i| u_s[i * k + p] * u_s[i * k + q]).sum();
                    let vv: f64 = (0..b).map(|i| v_s[i * k + p] * v_s[i * k + q]).sum();
                    assert!(
                        (uu - want).abs() < 1e-14 && (vv - want).abs() < 1e-14,
                        "pairs {p}, {q}: {uu}, {vv}"
                    );
                }
            }
        }
        Ok(true)
    }

    /// The Jordan–Wielandt eigenproblem on the device solves where `σ_k ≥ 1e-3·σ₁`
    /// ([`DEVICE_PROJECTED_SVD_MIN`]), and leaves `σ_k = 1e-4·σ₁` to the host.
    #[test]
    fn the_jordan_wielandt_svd_is_exact_where_it_is_taken() -> Result<()> {
        let spectra = [vec![3.0, 2.0, 1.5, 0.25, 0.1, 0.01, 0.0], vec![5.0, 4.0, 4.0, 0.5, 1e-3, 1e-5, 0.0]];
        assert!(solves_known_spectra(&jordan_wielandt_svd, &spectra, 4, false)?, "σ_k ≥ 1e-3·σ₁ in both");
        let low = [vec![1.0, 0.5, 0.2, 1e-4, 1e-5, 0.0, 0.0]];
        assert!(
            !solves_known_spectra(&jordan_wielandt_svd, &low, 4, false)?,
            "σ_k = 1e-4·σ₁: the host's SVD"
        );
        Ok(())
    }

    /// One-sided Jacobi on the device solves every spectrum exactly, also with `σ` down to 1e-12,
    /// a repeated value and zeros, and with a zero row and column (which no vector touches); an odd
    /// `b` it leaves to the other paths.
    #[test]
    fn the_jacobi_svd_is_exact_down_to_tiny_values() -> Result<()> {
        let spectra = [
            vec![3.0, 2.0, 1.5, 0.25, 0.1, 0.01, 1e-7, 0.0],
            vec![5.0, 4.0, 4.0, 0.5, 1e-3, 1e-9, 1e-12, 0.0],
        ];
        assert!(solves_known_spectra(&jacobi_svd, &spectra, 7, false)?, "every spectrum");
        assert!(solves_known_spectra(&jacobi_svd, &spectra, 6, true)?, "with a zero row and column");
        let odd = [vec![1.0, 0.5, 0.2, 1e-4, 1e-5, 0.0, 0.0]];
        assert!(!solves_known_spectra(&jacobi_svd, &odd, 4, false)?, "b = 7");
        Ok(())
    }

    /// The projected matrix's zero rows and columns (the bases' left-out columns) get no weight in
    /// any singular vector, also beside a singular value of 1e-12; its values are exact.
    #[test]
    fn the_projected_svd_leaves_the_left_out_columns_out() {
        let (c, s) = (0.6f64, 0.8f64);
        // Sᵀ = G·diag(1, 1e-12)·Hᵀ on rows and columns {0, 2} of 3 (G, H rotations); row and column
        // 1 zero.
        let sigma = [1.0, 1e-12];
        let (g, h) = ([[c, -s], [s, c]], [[s, c], [-c, s]]);
        let mut st = Mat::<f64>::zeros(3, 3);
        let at = [0, 2];
        for i in 0..2 {
            for j in 0..2 {
                st[(at[i], at[j])] = (0..2).map(|p| g[i][p] * sigma[p] * h[j][p]).sum();
            }
        }
        let k = 3;
        let (values, u_s, v_s) = host_svd(st, k).unwrap();
        assert!((values[0] - 1.0).abs() < 1e-15 && (values[1] - 1e-12).abs() < 1e-15, "{values:?}");
        assert_eq!(values[2], 0.0);
        for p in 0..k {
            assert_eq!((u_s[k + p], v_s[k + p]), (0.0, 0.0), "vector {p} on the left-out row or column");
        }
        // The first two vectors are unit vectors; the third (σ = 0) is zero, for the completion.
        for p in 0..2 {
            let norm = |m: &[f64]| (0..3).map(|i| m[i * k + p] * m[i * k + p]).sum::<f64>();
            assert!((norm(&u_s) - 1.0).abs() < 1e-15 && (norm(&v_s) - 1.0).abs() < 1e-15);
        }
        assert!((0..3).all(|i| u_s[i * k + 2] == 0.0 && v_s[i * k + 2] == 0.0));
    }
}
