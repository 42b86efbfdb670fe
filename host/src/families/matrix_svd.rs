//! An exact truncated SVD of any real matrix, or a batch of same-shape matrices: the leading `k`
//! singular triplets in f64, with the semantics of `torch.linalg.svd(A, full_matrices=False)`
//! truncated to `k` (`U` is `m × k`, `S` non-increasing, `Vᵀ` is `k × n`). On a device (a GPU or
//! the simulator) by the GPU SVD's Gram iteration and its accurate pass
//! ([`svd_factor::factor_accurate`](crate::svd_factor::factor_accurate)); without one by faer's
//! thin SVD ([`cpu_svd`]).
//!
//! Accuracy, on the device as on the CPU: every `σᵢ` within about `1e-13·σ₁` of LAPACK's, `UᵀU`
//! and `VᵀV` the identity and `‖A·vᵢ − σᵢ·uᵢ‖ ≤ 1e-12·‖A‖` (`tests/matrix_svd.rs`). The
//! singular vectors of a repeated singular value are any orthonormal basis of its space, those of
//! a zero one (a matrix of rank below `k`) any orthonormal completion.
//!
//! Sign convention: each left vector's entry of largest magnitude (the first of equal ones) is
//! positive, its right vector signed to match (scikit-learn's `svd_flip`), so the same matrix gives
//! the same factors on every device.

use crate::families::svd::reference::cpu_svd;
use crate::families::svd_factor::{factor_accurate, finish_squared_sums, queue_squared_sums};
use crate::launch::device::{Buffer, BufferView, Device};
use crate::launch::error::{Error, Result, ensure};
use gpu_std::sim::{Dim3, LaunchConfig};
use ndarray::{Array2, ArrayView2, ArrayViewMut2, Axis};
use rand::{Rng, SeedableRng, rngs::SmallRng};

/// The leading singular triplets of one matrix, in f64.
#[derive(Debug, Clone)]
pub struct MatrixFactors {
    /// `U[:, :k]`, `m × k`, orthonormal columns.
    pub u: Array2<f64>,
    /// `σ₁ ≥ … ≥ σ_k ≥ 0`.
    pub s: Vec<f64>,
    /// `Vᵀ[:k, :]`, `k × n`, orthonormal rows.
    pub vt: Array2<f64>,
}

/// The leading `k` singular triplets of each matrix of `matrices` (f32, f64 or any type that
/// converts to f64 exactly; all of one shape `m × n`, tall, wide or square, in any memory order),
/// on `device` (a GPU or the simulator: the batch in one factorisation) or, with `None`, on the CPU
/// (faer). Errors ([`Error::InvalidInput`]) for an empty batch or matrix, mixed shapes, `k`
/// outside `1..=min(m, n)` and a value that is NaN or infinite, naming the matrix and the entry.
/// On a device the batch runs as one factorisation, so it must fit the device's free memory (the
/// matrices, their Gram matrices and a few `max(m, n) × b` work matrices, `b ≈ 2k`): a larger
/// batch is an out-of-memory error ([`Error::is_out_of_memory`]) to split (Python's `ks.svd` does).
pub fn truncated_svd<T: Copy + Into<f64>>(
    device: Option<&Device>,
    matrices: &[ArrayView2<T>],
    k: usize,
) -> Result<Vec<MatrixFactors>> {
    ensure(!matrices.is_empty(), || "no matrices to factor".into())?;
    let (m, n) = matrices[0].dim();
    check_problem((m, n), k)?;
    let mut values = Vec::with_capacity(matrices.len() * m * n);
    for (i, matrix) in matrices.iter().enumerate() {
        let (rows, cols) = matrix.dim();
        ensure((rows, cols) == (m, n), || format!("matrix {i} is {rows} × {cols}; the batch is {m} × {n}"))?;
        for ((row, col), &value) in matrix.indexed_iter() {
            let value: f64 = value.into();
            if !value.is_finite() {
                return Err(Error::InvalidInput(format!(
                    "matrix {i}: entry ({row}, {col}) is {value}: the matrix must be finite"
                )));
            }
            values.push(value);
        }
    }
    match device {
        Some(device) => {
            let a = device.upload(&values)?;
            truncated_svd_of_buffer(device, &a, (m, n), matrices.len(), k)
        }
        None => values
            .chunks(m * n)
            .enumerate()
            .map(|(i, a)| on_cpu(a, (m, n), k).and_then(|f| finished(f, i)))
            .collect(),
    }
}

/// [`truncated_svd`] of `count` row-major `m × n` f64 matrices already on `device` (`m·n` apart:
/// a buffer, or another library's array copied into one), in one factorisation; the triplets
/// downloaded. A matrix holding a NaN or infinite value (or values whose squares overflow) is an
/// error ([`Error::InvalidInput`]) naming it.
pub fn truncated_svd_of_buffer(
    device: &Device,
    a: &Buffer<f64>,
    (m, n): (usize, usize),
    count: usize,
    k: usize,
) -> Result<Vec<MatrixFactors>> {
    let f = truncated_svd_on_device(device, a, (m, n), count, k)?;
    let (u, vt) = (device.download(&f.u)?, device.download(&f.vt)?);
    Ok(f.s.into_iter().enumerate().map(|(i, s)| batch_member((&u, s, &vt), (m, n), k, i)).collect())
}

/// Matrix `i`'s factors from a batch's row-major `U` (`m × k` each) and `Vᵀ` (`k × n` each) values.
fn batch_member(
    (u, s, vt): (&[f64], Vec<f64>, &[f64]),
    (m, n): (usize, usize),
    k: usize,
    i: usize,
) -> MatrixFactors {
    MatrixFactors {
        u: Array2::from_shape_vec((m, k), u[i * m * k..(i + 1) * m * k].to_vec()).expect("m·k values"),
        s,
        vt: Array2::from_shape_vec((k, n), vt[i * k * n..(i + 1) * k * n].to_vec()).expect("k·n values"),
    }
}

/// The factors of a batch left on the device, finished as [`truncated_svd`]'s: for a caller whose
/// arrays live on the GPU, which copies them into its own without a round trip through the host.
pub struct DeviceFactors {
    /// `U` of every matrix, `count × m × k`, row-major.
    pub u: Buffer<f64>,
    /// Per matrix, `σ₁ ≥ … ≥ σ_k ≥ 0`.
    pub s: Vec<Vec<f64>>,
    /// `Vᵀ` of every matrix, `count × k × n`, row-major.
    pub vt: Buffer<f64>,
}

/// [`truncated_svd_of_buffer`] with the factors left on the device, of matrices in a buffer or in
/// a view of one or of another library's array (read on the device's queue). The sign convention
/// is applied there (`kernels::matrix_svd::sign_convention`); only a matrix whose accurate pass
/// left a vector zero (a singular value of zero) crosses to the host to have its vectors completed.
pub fn truncated_svd_on_device<'a>(
    device: &Device,
    a: impl Into<BufferView<'a, f64>>,
    (m, n): (usize, usize),
    count: usize,
    k: usize,
) -> Result<DeviceFactors> {
    let a = a.into();
    check_problem((m, n), k)?;
    ensure(count > 0 && a.len() == count * m * n, || {
        format!("{} values for {count} matrices of {m} × {n}", a.len())
    })?;
    // SAFETY: `a` is borrowed until the sums are downloaded, which waits for the queue.
    let (partial, blocks) = unsafe { queue_squared_sums(device, device.queue(), a, None, m * n, count)? };
    let sums = finish_squared_sums(device, &partial, blocks)?;
    if let Some(i) = sums.iter().position(|s| !s.is_finite()) {
        return Err(Error::InvalidInput(format!(
            "matrix {i} holds a NaN or infinite value (or values whose squares overflow): the matrix must be finite"
        )));
    }
    let mut f = factor_accurate(device, a, (m, n), count, k)?;
    let norms = apply_sign_convention(device, &mut f.u, &mut f.vt, (m, n), count, k)?;
    let unit = |squares: &f64| (squares.sqrt() - 1.0).abs() < 1e-6;
    let incomplete: Vec<usize> =
        (0..count).filter(|i| !norms[2 * i * k..2 * (i + 1) * k].iter().all(unit)).collect();
    if !incomplete.is_empty() {
        let (mut u, mut vt) = (device.download(&f.u)?, device.download(&f.vt)?);
        for &i in &incomplete {
            let factors = batch_member((&u, f.singular_values[i].clone(), &vt), (m, n), k, i);
            let factors = finished(factors, i)?;
            let (us, vs) = (i * m * k..(i + 1) * m * k, i * k * n..(i + 1) * k * n);
            u[us].copy_from_slice(factors.u.as_slice().expect("standard layout"));
            vt[vs].copy_from_slice(factors.vt.as_slice().expect("standard layout"));
        }
        device.upload_into(&mut f.u, &u)?;
        device.upload_into(&mut f.vt, &vt)?;
    }
    Ok(DeviceFactors { u: f.u, s: f.singular_values, vt: f.vt })
}

/// The sign convention on the device ([`flip_signs`]'s, by `sign_convention`) for the `count`
/// matrices' `U` (`m × k` each) and `Vᵀ` (`k × n`); returns per matrix and vector `‖uⱼ‖²` and
/// `‖vⱼ‖²`, interleaved (waits for the queue).
fn apply_sign_convention(
    device: &Device,
    u: &mut Buffer<f64>,
    vt: &mut Buffer<f64>,
    (m, n): (usize, usize),
    count: usize,
    k: usize,
) -> Result<Vec<f64>> {
    ensure(u.len() == count * m * k && vt.len() == count * k * n, || {
        format!("factors of {} and {} values for {count} matrices of {m} × {n} at k = {k}", u.len(), vt.len())
    })?;
    const THREADS: u32 = 256;
    /// Most matrices per launch: the grid's `z` extent.
    const MATRICES_PER_LAUNCH: usize = 65_535;
    let mut norms = device.alloc_temporary::<f64>(device.queue(), 2 * count * k)?;
    for first in (0..count).step_by(MATRICES_PER_LAUNCH) {
        let end = (first + MATRICES_PER_LAUNCH).min(count);
        let cfg = LaunchConfig {
            grid: Dim3 { x: k as u32, y: 1, z: (end - first) as u32 },
            block: Dim3::x(THREADS),
            shared_bytes: (4 * THREADS + 1) * 8,
        };
        let args = (
            u.view_mut(first * m * k..end * m * k)?,
            vt.view_mut(first * k * n..end * k * n)?,
            m as u32,
            n as u32,
            k as u32,
            norms.view_mut(2 * first * k..2 * end * k)?,
        );
        // SAFETY: the kernel reads and writes each matrix's factors through checked slices of the
        // lengths checked above, and `norms` holds two values per vector; the download below
        // waits for the queue.
        unsafe { device.launch(&kernels::matrix_svd::SIGN_CONVENTION, cfg, args)? };
    }
    device.download(&norms)
}

/// Checks that a matrix of `m × n` has `k` triplets: `m, n > 0` and `1 ≤ k ≤ min(m, n)`.
fn check_problem((m, n): (usize, usize), k: usize) -> Result<()> {
    ensure(m > 0 && n > 0, || format!("cannot factor an empty {m} × {n} matrix"))?;
    ensure(k >= 1 && k <= m.min(n), || {
        format!("k = {k} is outside 1..={} (min(rows, cols) of a {m} × {n} matrix)", m.min(n))
    })
}

/// The factors of matrix `i` of a batch with the vectors of zero singular values completed to an
/// orthonormal set (seeded by `i`) and the sign convention applied.
fn finished(mut f: MatrixFactors, i: usize) -> Result<MatrixFactors> {
    complete_columns(f.u.view_mut(), 2 * i as u64)?;
    complete_columns(f.vt.view_mut().reversed_axes(), 2 * i as u64 + 1)?;
    flip_signs(&mut f);
    Ok(f)
}

/// One row-major `m × n` matrix by faer's thin SVD, truncated to `k`.
fn on_cpu(a: &[f64], (m, n): (usize, usize), k: usize) -> Result<MatrixFactors> {
    let svd = cpu_svd(a, (m, n), faer::get_global_parallelism())?;
    Ok(MatrixFactors {
        u: Array2::from_shape_fn((m, k), |(i, p)| svd.u[(i, p)]),
        s: svd.s[..k].to_vec(),
        vt: Array2::from_shape_fn((k, n), |(p, j)| svd.v[(j, p)]),
    })
}

/// Replaces the columns of `q` that are not of unit norm (the vectors of zero singular values that
/// the device's pass leaves zero) by an orthonormal completion of the others: seeded random
/// vectors, orthogonalised twice against every unit column.
fn complete_columns(mut q: ArrayViewMut2<f64>, seed: u64) -> Result<()> {
    let (rows, cols) = q.dim();
    let unit = |q: &ArrayViewMut2<f64>, j: usize| (q.column(j).dot(&q.column(j)).sqrt() - 1.0).abs() < 1e-6;
    let mut good: Vec<usize> = (0..cols).filter(|&j| unit(&q, j)).collect();
    if good.len() == cols {
        return Ok(());
    }
    let mut rng = SmallRng::seed_from_u64(seed);
    for j in 0..cols {
        if good.contains(&j) {
            continue;
        }
        let completed = (0..8).find_map(|_| {
            let mut x = ndarray::Array1::from_shape_fn(rows, |_| rng.random_range(-1.0f64..1.0));
            let start = x.dot(&x).sqrt();
            for _ in 0..2 {
                for &g in &good {
                    let along = q.column(g).dot(&x);
                    x.scaled_add(-along, &q.column(g));
                }
            }
            let left = x.dot(&x).sqrt();
            (left > 1e-3 * start).then(|| x / left)
        });
        let x = completed.ok_or_else(|| {
            Error::Numerical(format!("no unit vector orthogonal to {} of {rows} dimensions", good.len()))
        })?;
        q.column_mut(j).assign(&x);
        good.push(j);
    }
    Ok(())
}

/// The sign convention: each left vector's entry of largest magnitude positive, the right vector
/// negated with it.
fn flip_signs(f: &mut MatrixFactors) {
    for (mut u, mut v) in f.u.axis_iter_mut(Axis(1)).zip(f.vt.axis_iter_mut(Axis(0))) {
        let largest = u.iter().copied().fold(0.0f64, |best, x| if x.abs() > best.abs() { x } else { best });
        if largest < 0.0 {
            u.mapv_inplace(|x| -x);
            v.mapv_inplace(|x| -x);
        }
    }
}
