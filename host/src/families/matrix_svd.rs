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
use crate::families::svd_factor::factor_accurate;
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
/// `u` and `vt` are temporaries of the device's queue ([`Device::alloc_temporary`]): copy them on
/// that queue, or after waiting for it.
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
/// is applied there (`kernels::matrix_svd`'s sign kernels); only a matrix whose accurate pass
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

/// The sign convention on the device ([`flip_signs`]'s) for the `count` matrices' `U` (`m × k`
/// each) and `Vᵀ` (`k × n`), in three launches per group of matrices: `sign_partials` reads `U`
/// along its rows in chunks of rows, `sign_choose` combines the chunks per column and negates
/// `Vᵀ`'s rows, `negate_columns` negates `U`'s columns. Returns per matrix and vector `‖uⱼ‖²` and
/// `‖vⱼ‖²`, interleaved (waits for the queue).
fn apply_sign_convention(
    device: &Device,
    u: &mut Buffer<f64>,
    vt: &mut Buffer<f64>,
    (m, n): (usize, usize),
    count: usize,
    k: usize,
) -> Result<Vec<f64>> {
    use kernels::matrix_svd as km;
    ensure(u.len() == count * m * k && vt.len() == count * k * n, || {
        format!("factors of {} and {} values for {count} matrices of {m} × {n} at k = {k}", u.len(), vt.len())
    })?;
    const THREADS: u32 = 256;
    /// Most matrices per launch: the grid's `z` extent.
    const MATRICES_PER_LAUNCH: usize = 65_535;
    // Chunks of at least 512 rows (64 steps of the block's 8 rows), at most 1024 chunks.
    let rows_per_chunk = m.div_ceil(1024).max(512);
    let chunks = m.div_ceil(rows_per_chunk);
    let queue = device.queue();
    let mut partials = device.alloc_temporary::<f64>(queue, 3 * count * chunks * k)?;
    let mut signs = device.alloc_temporary::<f64>(queue, count * k)?;
    let mut norms = device.alloc_temporary::<f64>(queue, 2 * count * k)?;
    for first in (0..count).step_by(MATRICES_PER_LAUNCH) {
        let end = (first + MATRICES_PER_LAUNCH).min(count);
        let matrices = (end - first) as u32;
        let (us, vs) = (first * m * k..end * m * k, first * k * n..end * k * n);
        let partial_range = 3 * first * chunks * k..3 * end * chunks * k;
        let partials_cfg = LaunchConfig {
            grid: Dim3 {
                x: k.div_ceil(km::SIGN_COLUMNS_PER_BLOCK as usize) as u32,
                y: chunks as u32,
                z: matrices,
            },
            block: Dim3::x(km::SIGN_PARTIALS_THREADS),
            shared_bytes: km::SIGN_PARTIALS_SHARED_BYTES,
        };
        let choose_cfg = LaunchConfig {
            grid: Dim3 { x: k as u32, y: 1, z: matrices },
            block: Dim3::x(THREADS),
            shared_bytes: (4 * THREADS + 1) * 8,
        };
        let negate_cfg = LaunchConfig {
            grid: Dim3 { x: (m * k).div_ceil(THREADS as usize).min(1024) as u32, y: 1, z: matrices },
            block: Dim3::x(THREADS),
            shared_bytes: 0,
        };
        // SAFETY: the kernels read and write each matrix's factors through checked slices of the
        // lengths checked above; `partials` holds three values per chunk and vector, `signs` one
        // and `norms` two per vector; all are temporaries of the queue the kernels run on, and the
        // download below waits for it.
        unsafe {
            let args = (
                u.view(us.clone())?,
                m as u32,
                k as u32,
                rows_per_chunk as u32,
                partials.view_mut(partial_range.clone())?,
            );
            device.launch(&km::SIGN_PARTIALS, partials_cfg, args)?;
            let args = (
                u.view(us.clone())?,
                vt.view_mut(vs)?,
                m as u32,
                n as u32,
                k as u32,
                chunks as u32,
                partials.view(partial_range)?,
                signs.view_mut(first * k..end * k)?,
                norms.view_mut(2 * first * k..2 * end * k)?,
            );
            device.launch(&km::SIGN_CHOOSE, choose_cfg, args)?;
            let args = (u.view_mut(us)?, m as u32, k as u32, signs.view(first * k..end * k)?);
            device.launch(&km::NEGATE_COLUMNS, negate_cfg, args)?;
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The device's sign convention is [`flip_signs`]'s where `U` spans several chunks of rows and
    /// two blocks of columns: per column, the first entry of largest magnitude (two of equal
    /// magnitude and opposite signs, in different chunks or in one) made positive, `Vᵀ`'s row
    /// negated with it, a zero column left as it is; and the squared norms.
    #[test]
    fn the_device_sign_convention_matches_the_hosts() -> Result<()> {
        let device = Device::simulator();
        device.set_poison_allocations(true);
        let (m, n, k, count) = (1500usize, 23usize, 37usize, 2usize);
        let mut rng = SmallRng::seed_from_u64(5);
        let mut factors: Vec<MatrixFactors> = (0..count)
            .map(|_| MatrixFactors {
                u: Array2::from_shape_fn((m, k), |_| rng.random_range(-1.0..1.0)),
                s: vec![1.0; k],
                vt: Array2::from_shape_fn((k, n), |_| rng.random_range(-1.0..1.0)),
            })
            .collect();
        for (z, f) in factors.iter_mut().enumerate() {
            for j in 0..k {
                // Two entries of magnitude 2: the first negative for odd j + z, rows in different
                // chunks (512 rows each) for j % 3 = 0, in one chunk otherwise.
                let first = (j * 37 + z * 11) % 400 + if j % 3 == 0 { 0 } else { 600 };
                let second = if j % 3 == 0 { first + 700 } else { first + 9 };
                let sign = if (j + z) % 2 == 1 { -1.0 } else { 1.0 };
                f.u[[first, j]] = 2.0 * sign;
                f.u[[second, j]] = -2.0 * sign;
            }
            f.u.column_mut(5).fill(0.0);
        }
        let flat = |a: &[MatrixFactors], u: bool| -> Vec<f64> {
            a.iter()
                .flat_map(|f| if u { f.u.iter() } else { f.vt.iter() }.copied().collect::<Vec<_>>())
                .collect()
        };
        let mut u = device.upload(&flat(&factors, true))?;
        let mut vt = device.upload(&flat(&factors, false))?;
        let norms = apply_sign_convention(&device, &mut u, &mut vt, (m, n), count, k)?;
        let (u, vt) = (device.download(&u)?, device.download(&vt)?);
        for (z, f) in factors.iter_mut().enumerate() {
            for j in 0..k {
                let (u_squares, v_squares) =
                    (f.u.column(j).dot(&f.u.column(j)), f.vt.row(j).dot(&f.vt.row(j)));
                assert!(
                    (norms[2 * (z * k + j)] - u_squares).abs() < 1e-12 * u_squares.max(1.0),
                    "‖u{j}‖² of {z}"
                );
                assert!((norms[2 * (z * k + j) + 1] - v_squares).abs() < 1e-12 * v_squares, "‖v{j}‖² of {z}");
            }
            flip_signs(f);
            assert_eq!(&u[z * m * k..(z + 1) * m * k], f.u.as_slice().unwrap(), "U of matrix {z}");
            assert_eq!(&vt[z * k * n..(z + 1) * k * n], f.vt.as_slice().unwrap(), "Vᵀ of matrix {z}");
        }
        Ok(())
    }
}
